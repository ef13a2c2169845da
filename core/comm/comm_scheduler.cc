#include "core/comm/comm_scheduler.h"

#include <cstdint>
#include <functional>
#include <numeric>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/spin.h"
#include "core/base/status.h"

namespace hcomm {
namespace {

// A task's id as the same number on every rank (the ranks run one build,
// and libstdc++'s string hash is not seeded per process).
uint64_t IdHash(const std::string& id) { return std::hash<std::string_view>()(id); }

}  // namespace

absl::StatusOr<std::unique_ptr<CommScheduler>> CommScheduler::Create(Communicator& comm) {
  std::vector<int> all(comm.size());
  std::iota(all.begin(), all.end(), 0);
  absl::StatusOr<std::unique_ptr<Communicator>> own = comm.CreateGroup(all);
  if (!own.ok()) return Annotate(own.status(), "scheduler_create");
  return std::unique_ptr<CommScheduler>(new CommScheduler(*std::move(own)));
}

CommScheduler::CommScheduler(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {}

CommScheduler::~CommScheduler() { Destroy().IgnoreError(); }

absl::Status CommScheduler::AddTask(std::string id, int priority,
                                    std::vector<std::string> depends_on, TaskFn fn) {
  HCOMM_RETURN_IF_ERROR(graph_.Add(std::move(id), priority, std::move(depends_on)));
  fns_.push_back(std::move(fn));
  return absl::OkStatus();
}

CommStream* CommScheduler::stream(int priority) const {
  auto it = streams_.find(priority);
  return it == streams_.end() ? nullptr : it->second.get();
}

absl::Status CommScheduler::Agree(const absl::StatusOr<std::vector<int>>& local) {
  const int n = comm_->size();
  std::vector<uint64_t> mine(2 * graph_.size());
  uint64_t digest = 0;
  if (local.ok()) {
    for (size_t p = 0; p < local->size(); ++p) {
      const TaskGraph::Task& t = graph_.task((*local)[p]);
      mine[2 * p] = IdHash(t.id);
      mine[2 * p + 1] = static_cast<uint64_t>(static_cast<int64_t>(t.priority));
      digest = digest * 1000003 + mine[2 * p] * 31 + mine[2 * p + 1];
    }
  }
  const uint64_t header[3] = {static_cast<uint64_t>(graph_.size()), local.ok() ? 0u : 1u, digest};
  std::vector<uint64_t> headers(3 * n);
  HCOMM_RETURN_IF_ERROR(comm_->AllGather(header, headers.data(), 3, DataType::kUint64));
  for (int r = 0; r < n; ++r) {
    if (headers[3 * r + 1] == 0) continue;
    if (!local.ok()) return local.status();
    return Mismatch(absl::StrCat("scheduler run: rank ", r, " could not order its tasks (its "
                                 "error says why); no task ran"));
  }
  for (int r = 1; r < n; ++r) {
    if (headers[3 * r] != headers[0]) {
      return Mismatch(absl::StrCat("scheduler run: rank 0 registered ", headers[0],
                                   " tasks and rank ", r, " ", headers[3 * r],
                                   "; every rank registers the same tasks; no task ran"));
    }
  }
  bool same = true;
  for (int r = 1; r < n; ++r) same &= headers[3 * r + 2] == headers[2];
  if (same) return absl::OkStatus();
  // Where do they differ? Every rank's whole order, to name the tasks.
  std::vector<uint64_t> orders(mine.size() * n);
  HCOMM_RETURN_IF_ERROR(
      comm_->AllGather(mine.data(), orders.data(), mine.size(), DataType::kUint64));
  auto name = [this](uint64_t hash, uint64_t priority) {
    for (int i = 0; i < graph_.size(); ++i) {
      if (IdHash(graph_.task(i).id) == hash) {
        return absl::StrCat("task '", graph_.task(i).id, "' (priority ",
                            static_cast<int64_t>(priority), ")");
      }
    }
    return std::string("a task this rank has not registered");
  };
  for (size_t p = 0; p < static_cast<size_t>(graph_.size()); ++p) {
    for (int r = 1; r < n; ++r) {
      const uint64_t* a = &orders[2 * p];
      const uint64_t* b = &orders[r * mine.size() + 2 * p];
      if (a[0] == b[0] && a[1] == b[1]) continue;
      return Mismatch(absl::StrCat(
          "scheduler run: the ranks' policies order the tasks differently: at position ", p,
          " rank 0 starts ", name(a[0], a[1]), " where rank ", r, " starts ", name(b[0], b[1]),
          "; a policy must order the same tasks the same way on every rank; no task ran"));
    }
  }
  return Internal("scheduler run: the ranks' orders differ in their digests alone");
}

absl::Status CommScheduler::Run() {
  if (destroyed_) return InvalidArgument("scheduler run: the scheduler was destroyed");
  const int run = runs_++;
  PolicyFn policy = policy_ ? policy_ : PolicyFn(DefaultPolicy);
  absl::StatusOr<std::vector<int>> order = graph_.Order(policy);
  HCOMM_RETURN_IF_ERROR(Annotate(Agree(order), absl::StrCat("run ", run)));
  // The same priorities, in the same order, on every rank now.
  for (int priority : graph_.Priorities()) {
    if (streams_.count(priority)) continue;
    HCOMM_ASSIGN_OR_RETURN(streams_[priority], CommStream::Create(*comm_, priority));
  }
  return graph_.Run(*order, [this](int t) {
    const int priority = graph_.task(t).priority;
    CommStream& s = *streams_.at(priority);
    const int64_t start = Recorder::Now();
    absl::Status status = fns_[t](s);
    // What the task queued runs out either way, and leaves no error behind.
    absl::Status ran = s.Synchronize();
    if (status.ok()) status = ran;
    if (Recorder* rec = comm_->profiler(); rec != nullptr) {
      // Tasks of one priority run one at a time: a track per priority.
      Span sp;
      sp.start_ns = start;
      sp.end_ns = Recorder::Now();
      sp.name = "task";
      sp.cat = SpanCat::kTask;
      sp.task = rec->InternName(graph_.task(t).id);
      sp.priority = priority;
      sp.track = rec->NamedTrack(absl::StrCat("tasks (priority ", priority, ")"));
      if (!status.ok()) sp.status = ErrorCodeName(CodeOf(status));
      rec->Record(sp);
    }
    return status;
  });
}

absl::Status CommScheduler::Destroy() {
  if (destroyed_) return absl::OkStatus();
  destroyed_ = true;
  absl::Status first;
  for (auto& [priority, s] : streams_) {
    absl::Status st = s->Destroy();
    if (first.ok()) first = st;
  }
  streams_.clear();
  absl::Status ended = comm_->Destroy();
  return first.ok() ? ended : first;
}

}  // namespace hcomm
