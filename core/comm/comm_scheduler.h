// A communicator's task scheduler (API.md, "Communication scheduler"):
// tasks with priorities and dependencies (core/sched/scheduler.h), each run
// with the stream of its priority, made once per priority from the
// scheduler's own copy of the communicator.
//
//   HCOMM_ASSIGN_OR_RETURN(auto sched, CommScheduler::Create(world));
//   sched->AddTask("sync", 10, {}, [&](CommStream& s) { s.Enqueue(grads); return absl::OkStatus(); });
//   sched->AddTask("update", 5, {"sync"}, ...);
//   HCOMM_RETURN_IF_ERROR(sched->Run());   // collective
//
// A task has ended when its function has returned and the operations it
// queued on its stream have run. Before a run the ranks compare the order
// their policies give (one small allgather): ranks that registered other
// tasks, or whose policies order them differently, get Mismatch naming the
// first task on which they differ, on every rank, instead of collectives
// that would pair up wrongly or wait for each other.
//
// THREAD SAFETY: one thread; task functions run on one thread per priority.
#ifndef HCOMM_CORE_COMM_COMM_SCHEDULER_H_
#define HCOMM_CORE_COMM_COMM_SCHEDULER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/comm_stream.h"
#include "core/comm/communicator.h"
#include "core/sched/scheduler.h"

namespace hcomm {

class CommScheduler {
 public:
  using TaskFn = absl::AnyInvocable<absl::Status(CommStream& stream)>;
  using PolicyFn = std::function<absl::StatusOr<int>(absl::Span<const ReadyTask> ready)>;

  // Collective over `comm`.
  static absl::StatusOr<std::unique_ptr<CommScheduler>> Create(Communicator& comm);
  ~CommScheduler();

  // InvalidArgument for an empty or duplicate id. Dependencies are checked
  // by Run (they may be added in any order).
  absl::Status AddTask(std::string id, int priority, std::vector<std::string> depends_on,
                       TaskFn fn);
  // nullptr: DefaultPolicy.
  void SetPolicy(PolicyFn policy) { policy_ = std::move(policy); }

  // Collective: runs every task once (see above). InvalidArgument for an
  // unknown dependency or a cycle (naming the tasks); Mismatch where the
  // ranks' orders differ; else the first failed task's status naming it.
  absl::Status Run();
  // The stream of `priority`, made by an earlier Run (nullptr if none).
  CommStream* stream(int priority) const;
  // Ends the streams and the scheduler's communicator.
  absl::Status Destroy();

 private:
  explicit CommScheduler(std::unique_ptr<Communicator> comm);
  // The ranks' orders compared (see above); `local` is this rank's Order().
  absl::Status Agree(const absl::StatusOr<std::vector<int>>& local);

  std::unique_ptr<Communicator> comm_;
  TaskGraph graph_;
  std::vector<TaskFn> fns_;
  PolicyFn policy_;
  std::map<int, std::unique_ptr<CommStream>> streams_;
  int runs_ = 0;
  bool destroyed_ = false;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_COMM_COMM_SCHEDULER_H_
