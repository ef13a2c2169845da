// Tasks with priorities and dependencies, the order they start in, and a
// run of them on one thread per priority (API.md, "Communication
// scheduler"). What a task does, and on which stream, is its caller's
// business: this layer knows no communicator (core/comm/comm_scheduler.h
// puts each priority on a stream of its own).
//
//   TaskGraph g;
//   HCOMM_RETURN_IF_ERROR(g.Add("sync", 10, {}));
//   HCOMM_RETURN_IF_ERROR(g.Add("update", 5, {"sync"}));
//   HCOMM_ASSIGN_OR_RETURN(std::vector<int> order, g.Order(DefaultPolicy));
//   HCOMM_RETURN_IF_ERROR(g.Run(order, [&](int task) { return RunTask(task); }));
//
// The order is fixed before anything runs: the policy picks, among the
// tasks whose dependencies come earlier, the one to start next, as if every
// task ended as soon as it started. Each priority's thread then runs its
// tasks in that order, one at a time, each once its dependencies have
// ended. So what every thread runs, and in which order, depends on the
// tasks and the policy alone, never on timing: ranks that register the same
// tasks run the same operations on each priority's stream in the same
// order.
//
// THREAD SAFETY: Add and Order from one thread; Run calls `run` from one
// thread per priority at once.
#ifndef HCOMM_CORE_SCHED_SCHEDULER_H_
#define HCOMM_CORE_SCHED_SCHEDULER_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace hcomm {

// A task as a policy sees it.
struct ReadyTask {
  const std::string* id;
  int priority;
  int registration_index;  // 0 for the first task added
};

// Given the tasks that may start now (at least one), the index into
// `ready` of the one to start next; an error (or an index out of range)
// ends Order with that error.
using Policy = absl::FunctionRef<absl::StatusOr<int>(absl::Span<const ReadyTask> ready)>;

// Higher priority first, then the earlier registered.
absl::StatusOr<int> DefaultPolicy(absl::Span<const ReadyTask> ready);

class TaskGraph {
 public:
  struct Task {
    std::string id;
    int priority;
    std::vector<std::string> depends_on;
  };

  // InvalidArgument for an empty or duplicate id (naming it).
  absl::Status Add(std::string id, int priority, std::vector<std::string> depends_on);

  int size() const { return static_cast<int>(tasks_.size()); }
  const Task& task(int i) const { return tasks_[i]; }
  // The distinct priorities, highest first.
  std::vector<int> Priorities() const;

  // Every task's index, in the order they start. InvalidArgument naming the
  // task and the id for an unknown dependency, and naming the tasks of a
  // cycle ("a -> b -> a").
  absl::StatusOr<std::vector<int>> Order(Policy policy) const;

  // Runs `run(task)` for every task of `order` (from Order): one thread per
  // priority, each running its tasks in `order`'s order, one at a time, each
  // once the tasks it depends on have ended. A task one of whose
  // dependencies failed or did not run is not run. Returns OK, or the first
  // failure in `order` with the task named and the tasks not run listed.
  absl::Status Run(const std::vector<int>& order,
                   absl::FunctionRef<absl::Status(int task)> run) const;

 private:
  // The indices of each task's dependencies; InvalidArgument for an
  // unknown one.
  absl::StatusOr<std::vector<std::vector<int>>> Dependencies() const;
  std::string CycleAmong(const std::vector<std::vector<int>>& deps,
                         const std::vector<bool>& placed) const;

  std::vector<Task> tasks_;
  absl::flat_hash_map<std::string, int> index_;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_SCHED_SCHEDULER_H_
