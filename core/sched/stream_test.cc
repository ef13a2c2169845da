#include "core/sched/stream.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/base/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

using ::testing::HasSubstr;

absl::Duration Soon() { return absl::Seconds(30); }

Stream::Options Named(const char* name, int priority = 0) {
  Stream::Options o;
  o.name = name;
  o.priority = priority;
  return o;
}

// Items run in enqueue order, one at a time, on the stream's thread or on
// a thread that waits for the stream while none runs an item; without a
// waiter, the stream's thread runs them all.
TEST(StreamTest, RunsInEnqueueOrderOneAtATime) {
  Stream s(Named("order"));
  std::vector<int> ran;  // written by one runner at a time, read after Synchronize
  std::atomic<int> running{0}, overlap{0};
  for (int i = 0; i < 100; ++i) {
    s.Enqueue("item", [&, i] {
      if (running.fetch_add(1) != 0) ++overlap;
      ran.push_back(i);
      running.fetch_sub(1);
      return absl::OkStatus();
    });
  }
  ASSERT_TRUE(s.Synchronize(Soon()).ok());
  ASSERT_EQ(ran.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ran[i], i);
  EXPECT_EQ(overlap.load(), 0);
  EXPECT_TRUE(s.Idle());

  // Nobody waits: the stream's own thread runs them.
  absl::Notification done;
  std::thread::id where;
  s.Enqueue("background", [&] {
    where = std::this_thread::get_id();
    done.Notify();
    return absl::OkStatus();
  });
  done.WaitForNotification();
  EXPECT_NE(where, std::this_thread::get_id());
  ASSERT_TRUE(s.Synchronize(Soon()).ok());
}

// Options::nice lowers the priority of the stream's own thread alone.
TEST(StreamTest, NiceAppliesToTheStreamsThread) {
  const int mine = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  for (int nice : {0, 10}) {
    Stream::Options o = Named("nice");
    o.nice = nice;
    Stream s(std::move(o));
    absl::Notification done;
    int seen = -100;
    s.Enqueue("read", [&] {
      seen = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
      done.Notify();
      return absl::OkStatus();
    });
    done.WaitForNotification();  // on the stream's thread: nobody waits in Synchronize
    EXPECT_EQ(seen, nice == 0 ? mine : nice);
    ASSERT_TRUE(s.Synchronize(Soon()).ok());
  }
  EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid))), mine);
}

TEST(StreamTest, EnqueueReturnsAtOnce) {
  Stream s(Named("async"));
  absl::Notification go;
  std::atomic<bool> ran{false};
  s.Enqueue("blocked", [&] {
    go.WaitForNotification();
    ran = true;
    return absl::OkStatus();
  });
  // The item waits for `go`, which only this thread gives: Enqueue returned.
  EXPECT_FALSE(s.Idle());
  EXPECT_FALSE(ran);
  go.Notify();
  ASSERT_TRUE(s.Synchronize(Soon()).ok());
  EXPECT_TRUE(ran);
  EXPECT_TRUE(s.Idle());
}

TEST(StreamTest, AFailureSticksUntilSynchronizeReturnsIt) {
  Stream s(Named("grads"));
  int ran = 0;
  s.Enqueue("allreduce #0", [&] {
    ++ran;
    return absl::OkStatus();
  });
  s.Enqueue("allreduce #1", [&] {
    ++ran;
    return PeerFailure("rank 3 is gone");
  });
  s.Enqueue("allreduce #2", [&] {
    ++ran;
    return absl::OkStatus();
  });
  int skipped = 0;
  s.Enqueue(
      "host callback",
      [&] {
        ++ran;
        return absl::OkStatus();
      },
      [&] { ++skipped; });
  absl::Status st = s.Synchronize(Soon());
  EXPECT_EQ(CodeOf(st), ErrorCode::kPeerFailure);
  EXPECT_EQ(st.message(), "stream 'grads', allreduce #1: rank 3 is gone");
  EXPECT_EQ(ran, 2);  // nothing after the failure ran
  EXPECT_EQ(skipped, 1);  // and what asked to hear of it did
  // Returned once, then cleared: later work runs again.
  s.Enqueue("allreduce #3", [&] {
    ++ran;
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.Synchronize(Soon()).ok());
  EXPECT_EQ(ran, 3);
  EXPECT_TRUE(s.Synchronize(Soon()).ok());
}

TEST(StreamTest, OnlyTheFirstFailureIsReturned) {
  Stream s(Named("two"));
  s.Enqueue("a", [] { return Timeout("first"); });
  s.Enqueue("b", [] { return Aborted("second"); });
  absl::Status st = s.Synchronize(Soon());
  EXPECT_EQ(CodeOf(st), ErrorCode::kTimeout);
  EXPECT_THAT(std::string(st.message()), HasSubstr("first"));
  EXPECT_TRUE(s.Synchronize(Soon()).ok());
}

TEST(StreamTest, EventOrdersWorkAcrossStreams) {
  Stream producer(Named("producer"));
  Stream consumer(Named("consumer"));
  absl::Notification go;
  std::atomic<bool> produced{false};
  bool saw_produced = false;
  producer.Enqueue("produce", [&] {
    go.WaitForNotification();
    produced = true;
    return absl::OkStatus();
  });
  Event e;
  e.Record(producer);
  consumer.WaitEvent(e);
  consumer.Enqueue("consume", [&] {
    saw_produced = produced;
    return absl::OkStatus();
  });
  EXPECT_FALSE(e.Query());
  EXPECT_FALSE(consumer.Idle());
  go.Notify();
  ASSERT_TRUE(consumer.Synchronize(Soon()).ok());
  EXPECT_TRUE(saw_produced);
  EXPECT_TRUE(e.Query());
  EXPECT_TRUE(e.Synchronize(Soon()).ok());
  ASSERT_TRUE(producer.Synchronize(Soon()).ok());
}

TEST(StreamTest, EventMarksRunAfterAFailure) {
  Stream s(Named("failed"));
  s.Enqueue("bad", [] { return Aborted("aborted"); });
  Event e;
  e.Record(s);
  Stream other(Named("other"));
  other.WaitEvent(e);
  // The mark is reached although the stream failed: waiters do not hang.
  // Synchronize on the event says the work before it failed, and leaves
  // the failure to the stream; a stream waiting for the mark goes on.
  absl::Status at_mark = e.Synchronize(Soon());
  EXPECT_EQ(CodeOf(at_mark), ErrorCode::kAborted);
  EXPECT_THAT(at_mark.message(), HasSubstr("work before the mark failed"));
  EXPECT_THAT(at_mark.message(), HasSubstr("'failed', bad"));
  EXPECT_TRUE(e.Query());
  EXPECT_TRUE(other.Synchronize(Soon()).ok());
  EXPECT_EQ(CodeOf(s.Synchronize(Soon())), ErrorCode::kAborted);
  // Cleared on the stream: a new mark after it is reached without a failure.
  e.Record(s);
  EXPECT_TRUE(e.Synchronize(Soon()).ok());
}

TEST(StreamTest, OnlyMarksBetween) {
  Stream s(Named("marks"));
  absl::Notification started, go;
  s.Enqueue("blocker", [&] {  // 1
    started.Notify();
    go.WaitForNotification();
    return absl::OkStatus();
  });
  started.WaitForNotification();
  auto nothing = [] { return absl::OkStatus(); };
  s.Enqueue("a", nothing);  // 2
  Event e;
  e.Record(s);              // 3
  e.Record(s);              // 4
  s.Enqueue("b", nothing);  // 5
  s.WaitEvent(e);           // 6
  s.Enqueue("c", nothing);  // 7
  EXPECT_TRUE(s.OnlyMarksBetween(2, 5));
  EXPECT_TRUE(s.OnlyMarksBetween(2, 3));
  EXPECT_FALSE(s.OnlyMarksBetween(5, 7));  // a wait is no mark
  EXPECT_FALSE(s.OnlyMarksBetween(1, 5));  // "a" is no mark
  EXPECT_FALSE(s.OnlyMarksBetween(0, 2));  // 1 has started
  EXPECT_FALSE(s.OnlyMarksBetween(5, 9));  // 8 is not queued
  go.Notify();
  EXPECT_TRUE(s.Synchronize(Soon()).ok());
}

TEST(StreamTest, EnqueueReturnsEachItemsPlace) {
  Stream s(Named("places"));
  EXPECT_EQ(s.Enqueue("a", [] { return absl::OkStatus(); }), 1u);
  Event e;
  e.Record(s);  // a mark takes a place too
  EXPECT_EQ(s.Enqueue("b", [] { return absl::OkStatus(); }), 3u);
  EXPECT_TRUE(s.Synchronize(Soon()).ok());
}

TEST(StreamTest, AnEventNeverRecordedIsReached) {
  Stream s(Named("free"));
  Event e;
  EXPECT_TRUE(e.Query());
  EXPECT_TRUE(e.Synchronize(Soon()).ok());
  s.WaitEvent(e);
  EXPECT_TRUE(s.Idle());  // nothing was queued
  EXPECT_TRUE(s.Synchronize(Soon()).ok());
}

TEST(StreamTest, RecordingAgainMovesTheMark) {
  Stream a(Named("a"));
  Stream b(Named("b"));
  Event e;
  e.Record(a);
  ASSERT_TRUE(e.Synchronize(Soon()).ok());
  absl::Notification go;
  b.Enqueue("blocked", [&] {
    go.WaitForNotification();
    return absl::OkStatus();
  });
  e.Record(b);
  EXPECT_FALSE(e.Query());
  go.Notify();
  EXPECT_TRUE(e.Synchronize(Soon()).ok());
  EXPECT_TRUE(e.Query());
}

TEST(StreamTest, WaitsEndByTheirDeadlinesAndSayWhatIsPending) {
  Stream::Options o = Named("slow", 3);
  Stream slow(o);
  absl::Notification started, go;
  slow.Enqueue("allreduce #7 (256 MiB)", [&] {
    started.Notify();
    go.WaitForNotification();
    return absl::OkStatus();
  });
  slow.Enqueue("allreduce #8", [] { return absl::OkStatus(); });
  Event e;
  e.Record(slow);
  // Running on the stream's thread (a waiter that came first would run it
  // itself, and wait in it).
  started.WaitForNotification();

  absl::Status st = slow.Synchronize(absl::Milliseconds(20));
  EXPECT_EQ(CodeOf(st), ErrorCode::kTimeout);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("stream synchronize timed out (nothing finished for 0.02 s): stream 'slow' "
                        "(priority 3): running "
                        "allreduce #7 (256 MiB) for "));
  EXPECT_THAT(std::string(st.message()), HasSubstr(", 2 more queued"));

  st = e.Synchronize(absl::Milliseconds(20));
  EXPECT_EQ(CodeOf(st), ErrorCode::kTimeout);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("event synchronize timed out waiting for an event (mark 1); its latest "
                        "mark is on stream 'slow' (priority 3): running allreduce #7"));

  // A stream waiting on the event gives up after its own timeout, and its
  // later work counts as failed.
  Stream::Options wo = Named("waiter");
  wo.timeout = absl::Milliseconds(20);
  Stream waiter(wo);
  bool ran = false;
  waiter.WaitEvent(e);
  waiter.Enqueue("after", [&] {
    ran = true;
    return absl::OkStatus();
  });
  st = waiter.Synchronize(Soon());
  EXPECT_EQ(CodeOf(st), ErrorCode::kTimeout);
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("stream 'waiter', wait for an event's mark 1: stream 'waiter' timed out "
                        "waiting for an event (mark 1)"));
  EXPECT_FALSE(ran);

  go.Notify();  // the work goes on after the timeouts
  EXPECT_TRUE(slow.Synchronize(Soon()).ok());
  EXPECT_TRUE(e.Query());
}

TEST(StreamTest, ALongQueueThatKeepsFinishingIsWaitedOut) {
  // 30 items of 10 ms: three times the stall, but never 200 ms without one
  // finishing.
  Stream s(Named("long"));
  for (int i = 0; i < 30; ++i) {
    s.Enqueue("item", [] {
      absl::SleepFor(absl::Milliseconds(10));
      return absl::OkStatus();
    });
  }
  Event e;
  e.Record(s);
  EXPECT_TRUE(e.Synchronize(absl::Milliseconds(200)).ok());
  for (int i = 0; i < 30; ++i) {
    s.Enqueue("item", [] {
      absl::SleepFor(absl::Milliseconds(10));
      return absl::OkStatus();
    });
  }
  EXPECT_TRUE(s.Synchronize(absl::Milliseconds(200)).ok());
}

TEST(StreamTest, DestroyingRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    Stream s(Named("drain"));
    for (int i = 0; i < 10; ++i) {
      s.Enqueue("item", [&] {
        ++ran;
        return absl::OkStatus();
      });
    }
  }
  EXPECT_EQ(ran, 10);
}

TEST(StreamTest, EnqueueFromManyThreads) {
  Stream s(Named("shared"));
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) {
        s.Enqueue("item", [&] {
          ++ran;
          return absl::OkStatus();
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(s.Synchronize(Soon()).ok());
  EXPECT_EQ(ran, 1000);
}

}  // namespace
}  // namespace hcomm
