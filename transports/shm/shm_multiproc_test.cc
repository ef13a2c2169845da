// Multi-process tests of the shared-memory transport: 4 and 8 ranks
// all-to-all (8 ranks on this machine's 2 cores must not burn whole
// scheduler ticks), and failures: a SIGKILLed peer, CloseWrite,
// ShutdownAll, FailPeer, and wakeups of a poller asleep in the kernel.
#include <stdlib.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "gtest/gtest.h"
#include "transports/shm/shm_test_util.h"
#include "transports/shm/shm_transport.h"

namespace hcomm {
namespace {

using shm_test::Group;
using shm_test::Leftovers;
using shm_test::Link;
using shm_test::MakeMeta;
using shm_test::NowNs;
using shm_test::PollUntil;
using shm_test::TestSink;
using shm_test::Tracker;
using shm_test::UniqueKey;

constexpr size_t kMiB = 1024 * 1024;

struct Payload {
  std::unique_ptr<char[]> bytes;
  size_t len = 0;
};

Payload MakePayload(int src, uint32_t stream, uint64_t seq, size_t len) {
  Payload p;
  p.len = len;
  p.bytes.reset(new char[len > 0 ? len : 1]);
  shm_test::Fill(p.bytes.get(), len, shm_test::SeedOf(src, stream, seq));
  return p;
}

void SetCmaEnv(bool cma) {
  setenv("HCOMM_SHM_CMA", cma ? "1" : "0", 1);
}

class ShmPathTest : public ::testing::TestWithParam<bool> {
 protected:
  bool cma() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Paths, ShmPathTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "Cma" : "RingCopy");
                         });

// ---------------------------------------------------------------------------
// Scale

TEST_P(ShmPathTest, FourRanksAllToAllEverySize) {
  const std::string key = UniqueKey("four");
  const bool cma = this->cma();
  constexpr int kN = 4;
  Group g(kN, [&](int rank, Link& link) {
    SetCmaEnv(cma);
    TestSink sink(kN);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, kN, key, &sink, link, &t)) return rc;
    link.Barrier();
    const std::vector<size_t> sizes = {0,        1,       40, 4096, 64 * 1024 - 1, 64 * 1024 + 1,
                                       kMiB + 3, 8 * kMiB};
    Tracker tr;
    std::vector<Payload> keep;
    int64_t per_peer = 0;
    for (int rep = 0; rep < 2; ++rep) {
      for (size_t len : sizes) {
        for (int p = 0; p < kN; ++p) {
          if (p == rank) continue;
          SHM_CHECK(t->UsesCma(p) == cma);
          keep.push_back(MakePayload(rank, p, per_peer, len));
          t->Send(p, MakeMeta(rank, p, per_peer, len), keep.back().bytes.get(), len, tr.Callback());
        }
        ++per_peer;
      }
    }
    const int64_t sent = per_peer * (kN - 1);
    SHM_CHECK(PollUntil(t.get(), [&] { return tr.done() == sent && sink.total_frames() == sent; }));
    SHM_CHECK(tr.ok() == sent);
    for (int p = 0; p < kN; ++p) {
      if (p != rank) SHM_CHECK(sink.frames_on(p, rank) == per_peer);
    }
    SHM_CHECK(sink.errors().empty());
    link.Barrier();
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>(kN, 0));
  EXPECT_TRUE(Leftovers(key).empty());
}

// 8 ranks on 2 cores: every rank streams 2000 small frames to every other.
TEST(ShmScaleTest, EightRanksStreamSmallFramesAllToAll) {
  const std::string key = UniqueKey("eight");
  constexpr int kN = 8;
  constexpr int kFrames = 2000;
  Group g(kN, [&](int rank, Link& link) {
    TestSink sink(kN);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, kN, key, &sink, link, &t)) return rc;
    link.Barrier();
    const int64_t start = NowNs();
    Tracker tr;
    std::vector<Payload> keep;
    keep.reserve(kFrames * (kN - 1));
    for (int i = 0; i < kFrames; ++i) {
      for (int p = 0; p < kN; ++p) {
        if (p == rank) continue;
        size_t len = 8 + (i * 13 + p) % 200;
        keep.push_back(MakePayload(rank, 0, i, len));
        t->Send(p, MakeMeta(rank, 0, i, len), keep.back().bytes.get(), len, tr.Callback());
      }
      if (i % 16 == 0) t->Poll(absl::ZeroDuration());
    }
    const int64_t n = int64_t{kFrames} * (kN - 1);
    SHM_CHECK(PollUntil(
        t.get(), [&] { return tr.done() == n && sink.total_frames() == n; }, absl::Seconds(20)));
    const double secs = (NowNs() - start) / 1e9;
    fprintf(stderr, "[rank %d] %lld frames out and in: %.3f s\n", rank, static_cast<long long>(n),
            secs);
    SHM_CHECK(secs < 10);
    SHM_CHECK(tr.ok() == n);
    SHM_CHECK(sink.errors().empty());
    link.Barrier();
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>(kN, 0));
  EXPECT_TRUE(Leftovers(key).empty());
}

// 8 ranks on 2 cores in lock step: each round, every rank sends one small
// frame to every other and waits for the round's frames from all of them.
// Every round needs all 8 processes to run, so the wait policy decides the
// time: spinning without yielding costs whole 4 ms ticks per round.
TEST(ShmScaleTest, EightRanksLockstepRounds) {
  const std::string key = UniqueKey("lockstep");
  constexpr int kN = 8;
  constexpr int kRounds = 2000;  // 14000 frames out and in per rank
  Group g(kN, [&](int rank, Link& link) {
    TestSink sink(kN);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, kN, key, &sink, link, &t)) return rc;
    link.Barrier();
    const int64_t start = NowNs();
    Tracker tr;
    std::vector<Payload> keep;
    for (int r = 0; r < kRounds; ++r) {
      for (int p = 0; p < kN; ++p) {
        if (p == rank) continue;
        keep.push_back(MakePayload(rank, 0, r, 64));
        t->Send(p, MakeMeta(rank, 0, r, 64), keep.back().bytes.get(), 64, tr.Callback());
      }
      const int64_t want = int64_t{r + 1} * (kN - 1);
      SHM_CHECK(PollUntil(
          t.get(), [&] { return sink.total_frames() >= want; }, absl::Seconds(20),
          absl::Milliseconds(20)));
    }
    const double secs = (NowNs() - start) / 1e9;
    fprintf(stderr, "[rank %d] %d lock-step rounds: %.3f s (%.0f us/round)\n", rank, kRounds, secs,
            secs * 1e6 / kRounds);
    SHM_CHECK(secs < 10);
    SHM_CHECK(PollUntil(t.get(), [&] { return tr.done() == int64_t{kRounds} * (kN - 1); }));
    SHM_CHECK(sink.errors().empty());
    link.Barrier();
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>(kN, 0));
  EXPECT_TRUE(Leftovers(key).empty());
}

// A poller asleep on the futex is woken by each frame: no lost wakeups
// (each would cost a whole 50 ms sleep slice).
TEST(ShmWaitTest, SleepingPollerIsWokenByEachFrame) {
  const std::string key = UniqueKey("wake");
  constexpr int kTrips = 200;
  Group g(2, [&](int rank, Link& link) {
    TestSink sink(2);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
    link.Barrier();
    const int peer = 1 - rank;
    int slow = 0;
    int64_t worst = 0;
    const int64_t start = NowNs();
    char msg[8] = {};
    for (int i = 0; i < kTrips; ++i) {
      if (rank == 1) {
        SHM_CHECK(PollUntil(
            t.get(), [&] { return sink.frames_from(0) > i; }, absl::Seconds(10), absl::Seconds(1)));
        // Compute a while before answering, so that rank 0 goes to sleep.
        const int64_t until = NowNs() + 300'000;
        while (NowNs() < until) {
        }
      }
      shm_test::Fill(msg, sizeof msg, shm_test::SeedOf(rank, 0, i));
      t->Send(peer, MakeMeta(rank, 0, i, sizeof msg), msg, sizeof msg, nullptr);
      if (rank == 0) {
        const int64_t t0 = NowNs();
        SHM_CHECK(PollUntil(
            t.get(), [&] { return sink.frames_from(1) > i; }, absl::Seconds(10), absl::Seconds(1)));
        const int64_t rt = NowNs() - t0;
        worst = std::max(worst, rt);
        if (rt > 30'000'000) ++slow;
      }
    }
    if (rank == 0) {
      const double secs = (NowNs() - start) / 1e9;
      fprintf(stderr, "%d round trips with a sleeping waiter: %.3f s, worst %.1f ms, %d > 30 ms\n",
              kTrips, secs, worst / 1e6, slow);
      SHM_CHECK(slow <= kTrips / 20);
      SHM_CHECK(secs < 5);
    }
    SHM_CHECK(sink.errors().empty());
    link.Barrier();
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

// A sink that answers every frame from inside OnPayload (as the core
// answers a request-to-send), i.e. Send while the transport holds the
// ring's receive lock: frames of every size echo back intact and in order.
class EchoSink : public FrameSink {
 public:
  explicit EchoSink(int self) : self_(self), inner_(2) {}
  void set_transport(Transport* t) { t_ = t; }
  void* OnFrame(int peer, const FrameMeta& meta, uint64_t len) override {
    return inner_.OnFrame(peer, meta, len);
  }
  void OnPayload(int peer, const FrameMeta& meta, uint64_t len) override {
    inner_.OnPayload(peer, meta, len);
    const shm_test::TestMeta m = shm_test::ReadMeta(meta);
    keep_.push_back(MakePayload(self_, 0, m.seq, len));
    t_->Send(peer, MakeMeta(self_, 0, m.seq, len), keep_.back().bytes.get(), len,
             tracker_.Callback());
  }
  void OnConnectionLost(int peer, const absl::Status& s) override {
    inner_.OnConnectionLost(peer, s);
  }
  const TestSink& inner() const { return inner_; }
  const Tracker& tracker() const { return tracker_; }

 private:
  const int self_;
  TestSink inner_;
  Transport* t_ = nullptr;
  std::deque<Payload> keep_;  // only touched under the ring's receive lock
  Tracker tracker_;
};

TEST_P(ShmPathTest, SinkMaySendFromItsCallbacks) {
  const std::string key = UniqueKey("echo");
  const bool cma = this->cma();
  Group g(2, [&](int rank, Link& link) {
    SetCmaEnv(cma);
    constexpr int kFrames = 300;
    if (rank == 0) {
      TestSink sink(2);
      std::unique_ptr<ShmTransport> t;
      if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
      Tracker tr;
      std::vector<Payload> keep;
      for (int i = 0; i < kFrames; ++i) {
        size_t len = i % 30 == 3 ? kMiB + 3 : (i % 10 == 1 ? 100 * 1024 : (i * 97) % 5000);
        keep.push_back(MakePayload(0, 0, i, len));
        t->Send(1, MakeMeta(0, 0, i, len), keep.back().bytes.get(), len, tr.Callback());
      }
      SHM_CHECK(PollUntil(t.get(),
                          [&] { return tr.done() == kFrames && sink.frames_from(1) == kFrames; }));
      SHM_CHECK(tr.ok() == kFrames);
      SHM_CHECK(sink.errors().empty());
    } else {
      EchoSink sink(1);
      std::unique_ptr<ShmTransport> t;
      if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
      sink.set_transport(t.get());
      SHM_CHECK(PollUntil(t.get(), [&] {
        return sink.inner().frames_from(0) == kFrames && sink.tracker().done() == kFrames;
      }));
      SHM_CHECK(sink.tracker().ok() == kFrames);
      SHM_CHECK(sink.inner().errors().empty());
    }
    link.Barrier();
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

// ---------------------------------------------------------------------------
// Failures

// Rank 1 is SIGKILLed while rank 0 has frames queued (and one in flight)
// towards it. Rank 0 delivers what rank 1 had fully written, then reports
// the loss within 2 s and fails its queued frames; rank 2 is unaffected.
TEST_P(ShmPathTest, KilledPeerIsNoticedAndQueuedSendsFail) {
  const std::string key = UniqueKey("kill");
  const bool cma = this->cma();
  constexpr int kN = 3;
  constexpr int kFromVictim = 5;
  Group g(kN, [&](int rank, Link& link) {
    SetCmaEnv(cma);
    TestSink sink(kN);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, kN, key, &sink, link, &t)) return rc;
    std::vector<Payload> keep;
    if (rank == 1) {
      const size_t sizes[kFromVictim] = {10, 4096, 60000, 0, 123};
      for (int i = 0; i < kFromVictim; ++i) {
        keep.push_back(MakePayload(1, 0, i, sizes[i]));
        t->Send(0, MakeMeta(1, 0, i, sizes[i]), keep.back().bytes.get(), sizes[i], nullptr);
      }
      keep.push_back(MakePayload(1, 0, 0, 77));
      t->Send(2, MakeMeta(1, 0, 0, 77), keep.back().bytes.get(), 77, nullptr);
      link.Tell("ready");
      for (;;) pause();  // never polls again; the parent kills us
    }
    if (rank == 0) {
      Tracker tr;
      Payload big = MakePayload(0, 0, 0, 2 * kMiB);
      t->Send(1, MakeMeta(0, 0, 0, big.len), big.bytes.get(), big.len, tr.Callback());
      uint64_t seq = 1;
      while (t->PendingSends() < 10) {
        keep.push_back(MakePayload(0, 0, seq, 4000));
        t->Send(1, MakeMeta(0, 0, seq, 4000), keep.back().bytes.get(), 4000, tr.Callback());
        ++seq;
      }
      link.Tell("ready");
      // Keep polling (and sleeping in Poll) while the parent kills rank 1.
      SHM_CHECK(PollUntil(
          t.get(), [&] { return sink.lost(1); }, absl::Seconds(10)));
      int64_t killed_at = 0;
      SHM_CHECK(absl::SimpleAtoi(link.Hear(), &killed_at));
      const double secs = (sink.lost_at_ns(1) - killed_at) / 1e9;
      fprintf(stderr, "[rank 0] rank 1's death noticed after %.3f s: %s\n", secs,
              sink.lost_status(1).ToString().c_str());
      SHM_CHECK(secs < 2);
      SHM_CHECK(CodeOf(sink.lost_status(1)) == ErrorCode::kPeerFailure);
      SHM_CHECK(absl::StrContains(sink.lost_status(1).message(), "rank 1 (pid"));
      SHM_CHECK(absl::StrContains(sink.lost_status(1).message(), "died"));
      SHM_CHECK(sink.frames_before_loss(1) == kFromVictim);
      SHM_CHECK(tr.done() == static_cast<int64_t>(seq));
      SHM_CHECK(tr.failed() >= 9);
      SHM_CHECK(CodeOf(tr.first_failure()) == ErrorCode::kPeerFailure);
      SHM_CHECK(t->PendingSends() == 0);
      Tracker after;
      t->Send(1, MakeMeta(0, 0, seq, 0), nullptr, 0, after.Callback());
      SHM_CHECK(after.failed() == 1);
      // Rank 2 still works.
      keep.push_back(MakePayload(0, 0, 0, 5000));
      t->Send(2, MakeMeta(0, 0, 0, 5000), keep.back().bytes.get(), 5000, nullptr);
      SHM_CHECK(PollUntil(t.get(), [&] { return sink.frames_from(2) == 1; }));
    }
    if (rank == 2) {
      keep.push_back(MakePayload(2, 0, 0, 300));
      t->Send(0, MakeMeta(2, 0, 0, 300), keep.back().bytes.get(), 300, nullptr);
      SHM_CHECK(PollUntil(t.get(), [&] {
        return sink.frames_from(0) == 1 && sink.frames_from(1) == 1 && sink.lost(1);
      }));
      SHM_CHECK(!sink.lost(0));
    }
    SHM_CHECK(sink.errors().empty());
    link.Barrier();
    return 0;
  });
  ASSERT_TRUE(g.ServeAllGather({0, 1, 2}));  // addresses
  ASSERT_TRUE(g.ServeAllGather({0, 1, 2}));  // attached
  ASSERT_EQ(g.Hear(0), "ready");
  ASSERT_EQ(g.Hear(1), "ready");
  const int64_t killed_at = NowNs();
  g.Kill(1);
  EXPECT_EQ(g.Wait(1), 128 + SIGKILL);
  g.Tell(0, absl::StrCat(killed_at));
  std::vector<int> codes = g.Run();
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[2], 0);
  EXPECT_TRUE(Leftovers(key).empty()) << "a SIGKILL after FinishSetup leaves nothing";
}

// CloseWrite with frames still queued: they all arrive, then the close.
TEST(ShmFailureTest, CloseWriteDeliversEverythingThenCloses) {
  const std::string key = UniqueKey("close");
  Group g(2, [&](int rank, Link& link) {
    TestSink sink(2);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
    constexpr int kFrames = 300;
    if (rank == 0) {
      Tracker tr;
      std::vector<Payload> keep;
      for (int i = 0; i < kFrames; ++i) {
        size_t len = i % 50 == 7 ? 200 * 1024 : (i % 50 == 8 ? 2 * kMiB : 1000 + i);
        keep.push_back(MakePayload(0, 0, i, len));
        t->Send(1, MakeMeta(0, 0, i, len), keep.back().bytes.get(), len, tr.Callback());
      }
      SHM_CHECK(t->PendingSends() > 0);
      t->CloseWrite(1);
      link.Barrier();  // rank 1 starts reading
      SHM_CHECK(PollUntil(t.get(), [&] { return tr.done() == kFrames && sink.lost(1); }));
      SHM_CHECK(tr.ok() == kFrames);
      SHM_CHECK(CodeOf(sink.lost_status(1)) == ErrorCode::kPeerFailure);
    } else {
      link.Barrier();
      SHM_CHECK(PollUntil(t.get(), [&] { return sink.lost(0); }));
      SHM_CHECK(sink.frames_before_loss(0) == kFrames);
      SHM_CHECK(CodeOf(sink.lost_status(0)) == ErrorCode::kPeerFailure);
      SHM_CHECK(sink.lost_status(0).message() == "rank 0 closed its connection");
      Tracker tr;
      t->Send(0, MakeMeta(1, 0, 0, 0), nullptr, 0, tr.Callback());
      SHM_CHECK(tr.failed() == 1);
    }
    SHM_CHECK(sink.errors().empty());
    link.Barrier();
    SHM_CHECK(sink.lost_reports(1 - rank) == 1);
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

// ShutdownAll: the peer, asleep in Poll, notices at once; our own pending
// frames fail from our next Poll, and the loss is reported there.
TEST_P(ShmPathTest, ShutdownAllIsNoticedPromptly) {
  const std::string key = UniqueKey("shutdown");
  const bool cma = this->cma();
  Group g(2, [&](int rank, Link& link) {
    SetCmaEnv(cma);
    TestSink sink(2);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
    int64_t shut_at = 0;
    if (rank == 0) {
      Tracker tr;
      Payload big = MakePayload(0, 0, 0, 4 * kMiB);
      t->Send(1, MakeMeta(0, 0, 0, big.len), big.bytes.get(), big.len, tr.Callback());
      std::vector<Payload> keep;
      uint64_t seq = 1;
      while (t->PendingSends() < 5) {
        keep.push_back(MakePayload(0, 0, seq, 8000));
        t->Send(1, MakeMeta(0, 0, seq, 8000), keep.back().bytes.get(), 8000, tr.Callback());
        ++seq;
      }
      link.Barrier();  // rank 1 starts reading, then sleeps in Poll
      shut_at = NowNs();
      t->ShutdownAll();
      Tracker after;
      t->Send(1, MakeMeta(0, 0, seq, 0), nullptr, 0, after.Callback());
      SHM_CHECK(after.failed() == 1);
      t->Poll(absl::ZeroDuration());
      SHM_CHECK(sink.lost(1));
      SHM_CHECK(CodeOf(sink.lost_status(1)) == ErrorCode::kPeerFailure);
      SHM_CHECK(tr.done() == static_cast<int64_t>(seq));
      SHM_CHECK(tr.failed() >= 1);
      SHM_CHECK(t->PendingSends() == 0);
      memset(big.bytes.get(), 0xAB, big.len);  // no peer reads it any more
    } else {
      link.Barrier();
      SHM_CHECK(PollUntil(
          t.get(), [&] { return sink.lost(0); }, absl::Seconds(10), absl::Seconds(1)));
      SHM_CHECK(absl::StrContains(sink.lost_status(0).message(), "rank 0"));
    }
    std::vector<std::string> when = link.AllGather(absl::StrCat(shut_at));
    if (rank == 1) {
      int64_t t_shut = 0;
      SHM_CHECK(absl::SimpleAtoi(when[0], &t_shut));
      const double secs = (sink.lost_at_ns(0) - t_shut) / 1e9;
      fprintf(stderr, "[rank 1] ShutdownAll noticed after %.4f s: %s\n", secs,
              sink.lost_status(0).ToString().c_str());
      SHM_CHECK(secs < 0.5);
    }
    SHM_CHECK(sink.errors().empty());
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

// FailPeer reports at once with the caller's status; the peer sees the
// connection end.
TEST(ShmFailureTest, FailPeerReportsAtOnceAndPeerNotices) {
  const std::string key = UniqueKey("failpeer");
  Group g(2, [&](int rank, Link& link) {
    TestSink sink(2);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
    if (rank == 0) {
      Tracker tr;
      std::vector<Payload> keep;
      uint64_t seq = 0;
      while (t->PendingSends() < 3) {
        keep.push_back(MakePayload(0, 0, seq, 60000));
        t->Send(1, MakeMeta(0, 0, seq, 60000), keep.back().bytes.get(), 60000, tr.Callback());
        ++seq;
      }
      link.Barrier();
      t->FailPeer(1, PeerFailure("test: rank 1 misbehaved"));
      SHM_CHECK(sink.lost(1));
      SHM_CHECK(sink.lost_status(1).message() == "test: rank 1 misbehaved");
      SHM_CHECK(tr.done() == static_cast<int64_t>(seq));
      SHM_CHECK(tr.first_failure().message() == "test: rank 1 misbehaved");
      t->FailPeer(1, PeerFailure("again"));
      t->Poll(absl::Milliseconds(1));
      SHM_CHECK(sink.lost_reports(1) == 1);
    } else {
      link.Barrier();
      SHM_CHECK(PollUntil(
          t.get(), [&] { return sink.lost(0); }, absl::Seconds(5)));
      SHM_CHECK(sink.lost_status(0).message() == "rank 0 closed its connection");
    }
    SHM_CHECK(sink.errors().empty());
    link.Barrier();
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

// A rank that exits without FinishSetup (e.g. setup failed elsewhere)
// still removes its segment; one killed before FinishSetup cannot, and its
// name is then refused by Create until removed.
TEST(ShmHygieneTest, DestroyBeforeFinishSetupRemovesSegment) {
  const std::string key = UniqueKey("early");
  Group g(2, [&](int rank, Link& link) {
    TestSink sink(2);
    auto t = ShmTransport::Create(rank, 2, {1 - rank}, key, &sink);
    SHM_CHECK_OK(t.status());
    link.AllGather((*t)->Address());
    return 0;  // destroyed without Connect or FinishSetup
  });
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

}  // namespace
}  // namespace hcomm
