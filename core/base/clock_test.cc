#include "core/base/clock.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

TEST(MonoTimeTest, HasTheArithmeticOfAPointInTime) {
  const MonoTime a = MonoNow();
  const MonoTime b = a + absl::Milliseconds(1500);
  EXPECT_EQ(b - a, absl::Milliseconds(1500));
  EXPECT_EQ(b - absl::Milliseconds(1500), a);
  EXPECT_LT(a, b);
  EXPECT_LE(a, a);
  EXPECT_GT(b, a);
  EXPECT_EQ(std::min(a, b), a);
  MonoTime c = a;
  c += absl::Seconds(1);
  EXPECT_EQ(c - a, absl::Seconds(1));
}

TEST(MonoTimeTest, InfinitePointsStayInfinite) {
  const MonoTime never = MonoTime::InfiniteFuture();
  EXPECT_EQ(never + absl::Hours(1), never);
  EXPECT_EQ(never - MonoNow(), absl::InfiniteDuration());
  EXPECT_LT(MonoTime::InfinitePast(), MonoNow());
  EXPECT_LT(MonoNow(), never);
  EXPECT_EQ(MonoNow() + absl::InfiniteDuration(), never);
}

TEST(MonoTimeTest, NowFollowsTheMonotonicClockNotTheWallClock) {
  // The origin is the host's boot: MonoNow is nowhere near the Unix epoch
  // reading of the wall clock, and it never goes back.
  const absl::Duration wall = absl::Now() - absl::UnixEpoch();
  const MonoTime first = MonoNow();
  EXPECT_LT(first.SinceOrigin(), wall - absl::Hours(24 * 365));
  MonoTime last = first;
  for (int i = 0; i < 10000; ++i) {
    const MonoTime now = MonoNow();
    ASSERT_GE(now, last);
    last = now;
  }
}

TEST(CondVarTest, AWaitWithADeadlineEndsAtTheDeadline) {
  absl::Mutex mu;
  CondVar cv;
  absl::MutexLock l(&mu);
  const MonoTime start = MonoNow();
  const MonoTime deadline = start + absl::Milliseconds(50);
  while (!cv.WaitUntil(&mu, deadline)) {
  }
  EXPECT_GE(MonoNow(), deadline);
  EXPECT_LT(MonoNow() - start, absl::Seconds(5));
  EXPECT_TRUE(cv.WaitUntil(&mu, MonoNow() - absl::Seconds(1)));  // passed: returns at once
  EXPECT_TRUE(cv.WaitFor(&mu, absl::ZeroDuration()));
}

TEST(CondVarTest, ASignalWakesAWaiterLongBeforeItsDeadline) {
  absl::Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread signaller([&] {
    absl::SleepFor(absl::Milliseconds(20));
    absl::MutexLock l(&mu);
    ready = true;
    cv.Signal();
  });
  const MonoTime start = MonoNow();
  {
    absl::MutexLock l(&mu);
    while (!ready) ASSERT_FALSE(cv.WaitUntil(&mu, start + absl::Seconds(30)));
  }
  EXPECT_LT(MonoNow() - start, absl::Seconds(10));
  signaller.join();
}

TEST(CondVarTest, SignalAllWakesEveryWaiter) {
  absl::Mutex mu;
  CondVar cv;
  bool go = false;
  int waiting = 0;
  std::atomic<int> woke{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.emplace_back([&] {
      absl::MutexLock l(&mu);
      ++waiting;
      while (!go) cv.Wait(&mu);
      woke.fetch_add(1);
    });
  }
  for (;;) {
    absl::MutexLock l(&mu);
    if (waiting == 4) break;
    mu.Unlock();
    absl::SleepFor(absl::Milliseconds(1));
    mu.Lock();
  }
  {
    absl::MutexLock l(&mu);
    go = true;
  }
  cv.SignalAll();  // without the mutex, as absl::CondVar allows
  for (auto& t : waiters) t.join();
  EXPECT_EQ(woke.load(), 4);
}

// A ping-pong of many turns between two threads, each turn a signal: a lost
// wake-up would leave both waiting until the deadline, which fails.
TEST(CondVarTest, NoWakeUpIsLostOverManyTurns) {
  absl::Mutex mu;
  CondVar cv;
  int turn = 0;
  constexpr int kTurns = 20000;
  auto play = [&](int me) {
    const MonoTime deadline = MonoNow() + absl::Seconds(60);
    absl::MutexLock l(&mu);
    while (turn < kTurns) {
      if (turn % 2 == me) {
        ++turn;
        cv.Signal();
      } else {
        ASSERT_FALSE(cv.WaitUntil(&mu, deadline)) << "stuck at turn " << turn;
      }
    }
  };
  std::thread other(play, 1);
  play(0);
  other.join();
  EXPECT_EQ(turn, kTurns);
}

TEST(FutexTest, AWaitOnAChangedWordReturnsAtOnce) {
  std::atomic<uint32_t> word{1};
  const MonoTime start = MonoNow();
  FutexWaitUntil(&word, 0, start + absl::Seconds(30), /*shared=*/false);
  EXPECT_LT(MonoNow() - start, absl::Seconds(5));
  FutexWaitUntil(&word, 1, start + absl::Milliseconds(20), /*shared=*/true);
  EXPECT_GE(MonoNow(), start + absl::Milliseconds(20));
}

}  // namespace
}  // namespace hcomm
