#include "core/base/priority.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "core/base/clock.h"

namespace hcomm {
namespace {

TEST(PriorityTest, ALowerPriorityStepsAsideWhileAHigherOneRuns) {
  EXPECT_EQ(priority_internal::highest.load(), INT_MIN);
  absl::Notification urgent_started, urgent_done;
  std::atomic<bool> urgent_running{false};
  std::thread urgent([&] {
    PriorityScope scope(10);
    urgent_running = true;
    urgent_started.Notify();
    absl::SleepFor(absl::Milliseconds(3));
    urgent_running = false;
  });
  urgent_started.WaitForNotification();
  {
    PriorityScope bulk(0);
    const MonoTime t0 = MonoNow();
    YieldToHigherPriority();  // returns once the urgent one is done, or after kMostYield
    const bool still_urgent = urgent_running.load();
    const absl::Duration took = MonoNow() - t0;
    // On a loaded machine (a sanitizer build beside other tests) the urgent
    // thread may oversleep its 3 ms past kMostYield: then the step aside
    // must have lasted the whole kMostYield, never returned early.
    if (still_urgent) EXPECT_GE(took, kMostYield);
    EXPECT_LT(took, kMostYield + absl::Seconds(1));
  }
  urgent.join();
  EXPECT_EQ(priority_internal::highest.load(), INT_MIN);
}

TEST(PriorityTest, TheSameOrAHigherPriorityGoesOn) {
  PriorityScope high(7);
  PriorityScope same(7);  // nested: the thread's priority is still 7
  const MonoTime t0 = MonoNow();
  YieldToHigherPriority();
  EXPECT_LT(MonoNow() - t0, absl::Milliseconds(1));
  EXPECT_EQ(priority_internal::CurrentPriority(), 7);
}

// A step aside is bounded: a higher priority that stays active (waiting for
// a peer, say) slows the lower one down, never stops it.
TEST(PriorityTest, AStepAsideIsBounded) {
  absl::Notification started, stop;
  std::thread urgent([&] {
    PriorityScope scope(3);
    started.Notify();
    stop.WaitForNotification();
  });
  started.WaitForNotification();
  const MonoTime t0 = MonoNow();
  YieldToHigherPriority();  // outside any scope: priority 0
  const absl::Duration took = MonoNow() - t0;
  EXPECT_GE(took, kMostYield - absl::Milliseconds(1));
  EXPECT_LT(took, kMostYield + absl::Milliseconds(100));
  stop.Notify();
  urgent.join();
}

}  // namespace
}  // namespace hcomm
