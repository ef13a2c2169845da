#include "core/comm/comm_scheduler.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "algorithms/kernels/reduce.h"
#include "core/base/status.h"
#include "core/comm/communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/multirank.h"

namespace hcomm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kRanks = 4;

StreamOp AllReduceOp(float* buf, size_t n) {
  StreamOp op;
  op.kind = StreamOpKind::kAllReduce;
  op.send = buf;
  op.recv = buf;
  op.count = n;
  op.dtype = DataType::kFloat32;
  return op;
}

// The seed's three tasks, run twice: gradient sync (priority 10), the
// parameter update after it, logging after both. Each sees the effects of
// what it depends on, and runs on the stream of its priority.
TEST(CommSchedulerTest, TheSeedsThreeTasks) {
  testing::RunRanks(kRanks, [](int rank, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    auto sched = CommScheduler::Create(**world);
    ASSERT_TRUE(sched.ok()) << sched.status();
    CommScheduler& s = **sched;
    std::vector<float> grad(1000), param(1000, 0.0f);
    absl::Mutex mu;
    std::vector<std::string> log;
    auto note = [&](const std::string& what) {
      absl::MutexLock l(&mu);
      log.push_back(what);
    };
    // Registered out of order: the dependencies decide.
    ASSERT_TRUE(s.AddTask("logging", 1, {"gradient_sync", "param_update"}, [&](CommStream& st) {
                   EXPECT_EQ(st.stream().priority(), 1);
                   note("logging");
                   return absl::OkStatus();
                 }).ok());
    ASSERT_TRUE(s.AddTask("param_update", 5, {"gradient_sync"}, [&](CommStream& st) {
                   EXPECT_EQ(st.stream().priority(), 5);
                   for (size_t i = 0; i < grad.size(); ++i) param[i] -= 0.1f * grad[i];
                   note("param_update");
                   return absl::OkStatus();
                 }).ok());
    ASSERT_TRUE(s.AddTask("gradient_sync", 10, {}, [&](CommStream& st) {
                   EXPECT_EQ(st.stream().priority(), 10);
                   for (float& g : grad) g = static_cast<float>(rank + 1);
                   st.Enqueue(AllReduceOp(grad.data(), grad.size()));  // ran before update starts
                   note("gradient_sync");
                   return absl::OkStatus();
                 }).ok());
    for (int step = 1; step <= 2; ++step) {
      absl::Status ran = s.Run();
      ASSERT_TRUE(ran.ok()) << ran;
      EXPECT_FLOAT_EQ(param[0], -0.1f * 10 * step);
    }
    EXPECT_THAT(log, ElementsAre("gradient_sync", "param_update", "logging", "gradient_sync",
                                 "param_update", "logging"));
    EXPECT_NE(s.stream(10), nullptr);
    EXPECT_EQ(s.stream(7), nullptr);
    EXPECT_TRUE(s.Destroy().ok());
    EXPECT_TRUE((*world)->Destroy().ok());
  });
}

// Rank 1's policy starts the lowest priority first: every rank gets
// Mismatch naming the two tasks, and nothing runs (no hang).
TEST(CommSchedulerTest, PoliciesThatDisagreeAreAMismatchNamingBothTasks) {
  testing::RunRanks(kRanks, [](int rank, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    auto sched = CommScheduler::Create(**world);
    ASSERT_TRUE(sched.ok());
    CommScheduler& s = **sched;
    std::atomic<int> ran{0};
    // A buffer per task: tasks of different priorities run at once.
    std::vector<std::vector<float>> bufs(2, std::vector<float>(8, 1.0f));
    int i = 0;
    for (const auto& [id, prio] : std::vector<std::pair<std::string, int>>{{"urgent", 9}, {"bulk", 1}}) {
      std::vector<float>& buf = bufs[i++];
      ASSERT_TRUE(s.AddTask(id, prio, {}, [&ran, &buf](CommStream& st) {
                     ++ran;
                     st.Enqueue(AllReduceOp(buf.data(), buf.size()));
                     return absl::OkStatus();
                   }).ok());
    }
    if (rank == 1) {
      s.SetPolicy([](absl::Span<const ReadyTask> ready) -> absl::StatusOr<int> {
        int best = 0;
        for (int i = 1; i < static_cast<int>(ready.size()); ++i) {
          if (ready[i].priority < ready[best].priority) best = i;
        }
        return best;
      });
    }
    absl::Status st = s.Run();
    EXPECT_EQ(CodeOf(st), ErrorCode::kMismatch) << st;
    EXPECT_THAT(st.message(), HasSubstr("rank 0 starts task 'urgent' (priority 9) where rank 1 "
                                        "starts task 'bulk' (priority 1)"));
    EXPECT_EQ(ran.load(), 0);
    // Agreeing again, they run.
    s.SetPolicy(nullptr);
    EXPECT_TRUE(s.Run().ok());
    EXPECT_EQ(ran.load(), 2);
    EXPECT_TRUE(s.Destroy().ok());
    EXPECT_TRUE((*world)->Destroy().ok());
  });
}

TEST(CommSchedulerTest, OtherTasksAndCyclesAreRefusedOnEveryRank) {
  testing::RunRanks(kRanks, [](int rank, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    auto sched = CommScheduler::Create(**world);
    ASSERT_TRUE(sched.ok());
    CommScheduler& s = **sched;
    auto nothing = [](CommStream&) { return absl::OkStatus(); };
    ASSERT_TRUE(s.AddTask("a", 1, {}, nothing).ok());
    if (rank == 3) ASSERT_TRUE(s.AddTask("extra", 1, {}, nothing).ok());
    absl::Status st = s.Run();
    EXPECT_EQ(CodeOf(st), ErrorCode::kMismatch) << st;
    EXPECT_THAT(st.message(), HasSubstr("rank 0 registered 1 tasks and rank 3 2"));

    auto other = CommScheduler::Create(**world);
    ASSERT_TRUE(other.ok());
    // Rank 2 alone makes a cycle: it gets InvalidArgument naming it, the
    // others Mismatch naming rank 2.
    std::vector<std::string> x_deps;
    if (rank == 2) x_deps.push_back("y");
    ASSERT_TRUE((*other)->AddTask("x", 1, x_deps, nothing).ok());
    ASSERT_TRUE((*other)->AddTask("y", 1, {"x"}, nothing).ok());
    st = (*other)->Run();
    if (rank == 2) {
      EXPECT_EQ(CodeOf(st), ErrorCode::kInvalidArgument) << st;
      EXPECT_THAT(st.message(), HasSubstr("cycle: 'x' -> 'y' -> 'x'"));
    } else {
      EXPECT_EQ(CodeOf(st), ErrorCode::kMismatch) << st;
      EXPECT_THAT(st.message(), HasSubstr("rank 2 could not order its tasks"));
    }
    EXPECT_TRUE((*other)->Destroy().ok());
    EXPECT_TRUE(s.Destroy().ok());
    EXPECT_TRUE((*world)->Destroy().ok());
  });
}

}  // namespace
}  // namespace hcomm
