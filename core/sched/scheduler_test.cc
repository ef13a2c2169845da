#include "core/sched/scheduler.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/base/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Ids(const TaskGraph& g, const std::vector<int>& order) {
  std::vector<std::string> out;
  for (int t : order) out.push_back(g.task(t).id);
  return out;
}

// The seed's three tasks: gradient sync first, the update after it, the
// logging after both, whatever order they were registered in.
TEST(SchedulerTest, DefaultOrderIsPriorityThenRegistrationWithinDependencies) {
  TaskGraph g;
  ASSERT_TRUE(g.Add("logging", 1, {"gradient_sync", "param_update"}).ok());
  ASSERT_TRUE(g.Add("param_update", 5, {"gradient_sync"}).ok());
  ASSERT_TRUE(g.Add("gradient_sync", 10, {}).ok());
  ASSERT_TRUE(g.Add("metrics", 1, {}).ok());
  ASSERT_TRUE(g.Add("prefetch", 7, {}).ok());
  absl::StatusOr<std::vector<int>> order = g.Order(DefaultPolicy);
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_THAT(Ids(g, *order),
              ElementsAre("gradient_sync", "prefetch", "param_update", "logging", "metrics"));
  EXPECT_THAT(g.Priorities(), ElementsAre(10, 7, 5, 1));
}

TEST(SchedulerTest, ACustomPolicyPicksAmongTheReady) {
  TaskGraph g;
  ASSERT_TRUE(g.Add("a", 1, {}).ok());
  ASSERT_TRUE(g.Add("b", 9, {}).ok());
  ASSERT_TRUE(g.Add("c", 5, {"a"}).ok());
  std::vector<size_t> sizes;
  auto lowest_first = [&](absl::Span<const ReadyTask> ready) -> absl::StatusOr<int> {
    sizes.push_back(ready.size());
    int best = 0;
    for (int i = 1; i < static_cast<int>(ready.size()); ++i) {
      if (ready[i].priority < ready[best].priority) best = i;
    }
    return best;
  };
  absl::StatusOr<std::vector<int>> order = g.Order(lowest_first);
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_THAT(Ids(g, *order), ElementsAre("a", "c", "b"));
  EXPECT_THAT(sizes, ElementsAre(2, 2, 1));
  // A pick out of range, or the policy's own error, ends Order.
  auto out_of_range = [](absl::Span<const ReadyTask> ready) -> absl::StatusOr<int> {
    return static_cast<int>(ready.size());
  };
  EXPECT_THAT(g.Order(out_of_range).status().message(), HasSubstr("picked 2 of 2 ready tasks"));
  auto failing = [](absl::Span<const ReadyTask>) -> absl::StatusOr<int> {
    return Internal("policy raised ValueError");
  };
  absl::Status s = g.Order(failing).status();
  EXPECT_EQ(CodeOf(s), ErrorCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("the scheduler's policy: policy raised ValueError"));
}

TEST(SchedulerTest, DuplicatesUnknownDependenciesAndCyclesAreNamed) {
  TaskGraph g;
  ASSERT_TRUE(g.Add("a", 1, {}).ok());
  absl::Status dup = g.Add("a", 2, {});
  EXPECT_EQ(CodeOf(dup), ErrorCode::kInvalidArgument);
  EXPECT_THAT(dup.message(), HasSubstr("task 'a' is registered twice"));
  EXPECT_EQ(CodeOf(g.Add("", 2, {})), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(g.Add("b", 1, {"a", "ghost"}).ok());
  absl::Status unknown = g.Order(DefaultPolicy).status();
  EXPECT_EQ(CodeOf(unknown), ErrorCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("task 'b' depends on 'ghost', which is not a registered task"));

  TaskGraph cyc;
  ASSERT_TRUE(cyc.Add("free", 3, {}).ok());
  ASSERT_TRUE(cyc.Add("x", 1, {"z"}).ok());
  ASSERT_TRUE(cyc.Add("y", 1, {"x", "free"}).ok());
  ASSERT_TRUE(cyc.Add("z", 1, {"y"}).ok());
  ASSERT_TRUE(cyc.Add("after", 1, {"z"}).ok());
  absl::Status cycle = cyc.Order(DefaultPolicy).status();
  EXPECT_EQ(CodeOf(cycle), ErrorCode::kInvalidArgument);
  EXPECT_THAT(cycle.message(), HasSubstr("cycle: 'x' -> 'z' -> 'y' -> 'x'"));

  TaskGraph self;
  ASSERT_TRUE(self.Add("me", 1, {"me"}).ok());
  EXPECT_THAT(self.Order(DefaultPolicy).status().message(), HasSubstr("'me' -> 'me'"));
}

// Equal priorities one at a time, different ones at once; each task after
// its dependencies.
TEST(SchedulerTest, RunsEachPriorityOnItsOwnThreadAfterDependencies) {
  TaskGraph g;
  ASSERT_TRUE(g.Add("slow_high", 10, {}).ok());
  ASSERT_TRUE(g.Add("low_a", 1, {}).ok());
  ASSERT_TRUE(g.Add("low_b", 1, {}).ok());
  ASSERT_TRUE(g.Add("high_after_low", 10, {"low_b"}).ok());
  absl::StatusOr<std::vector<int>> order = g.Order(DefaultPolicy);
  ASSERT_TRUE(order.ok());
  absl::Mutex mu;
  std::vector<std::string> log;
  std::atomic<int> running_low{0}, max_low{0};
  absl::Notification low_started;
  std::thread::id high_thread, low_thread;
  absl::Status s = g.Run(*order, [&](int t) {
    const std::string& id = g.task(t).id;
    if (id == "slow_high") {
      high_thread = std::this_thread::get_id();
      // Runs while the low-priority tasks run: they do not wait for it.
      low_started.WaitForNotification();
    } else if (g.task(t).priority == 1) {
      low_thread = std::this_thread::get_id();
      if (!low_started.HasBeenNotified()) low_started.Notify();  // one thread: no race
      int now = ++running_low;
      max_low = std::max(max_low.load(), now);
      absl::SleepFor(absl::Milliseconds(5));
      --running_low;
    }
    absl::MutexLock l(&mu);
    log.push_back(id);
    return absl::OkStatus();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(max_low.load(), 1);
  EXPECT_NE(high_thread, low_thread);
  // low_a before low_b (one thread, registration order); high_after_low last.
  auto pos = [&](const std::string& id) { return std::find(log.begin(), log.end(), id) - log.begin(); };
  EXPECT_LT(pos("low_a"), pos("low_b"));
  EXPECT_LT(pos("low_b"), pos("high_after_low"));
  EXPECT_LT(pos("slow_high"), pos("high_after_low"));
}

TEST(SchedulerTest, AFailedTaskIsNamedAndItsDependantsDoNotRun) {
  TaskGraph g;
  ASSERT_TRUE(g.Add("sync", 10, {}).ok());
  ASSERT_TRUE(g.Add("update", 5, {"sync"}).ok());
  ASSERT_TRUE(g.Add("log", 1, {"update"}).ok());
  ASSERT_TRUE(g.Add("independent", 1, {}).ok());
  absl::StatusOr<std::vector<int>> order = g.Order(DefaultPolicy);
  ASSERT_TRUE(order.ok());
  std::vector<std::string> ran;
  absl::Mutex mu;
  absl::Status s = g.Run(*order, [&](int t) {
    absl::MutexLock l(&mu);
    ran.push_back(g.task(t).id);
    if (g.task(t).id == "sync") return Timeout("allreduce #0 timed out");
    return absl::OkStatus();
  });
  EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout);
  EXPECT_THAT(s.message(), HasSubstr("task 'sync' (priority 10) failed: allreduce #0 timed out"));
  EXPECT_THAT(s.message(), HasSubstr("not run, as they depend on a failed task: 'update', 'log'"));
  std::sort(ran.begin(), ran.end());
  EXPECT_THAT(ran, ElementsAre("independent", "sync"));
}

}  // namespace
}  // namespace hcomm
