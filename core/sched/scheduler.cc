#include "core/sched/scheduler.h"

#include <algorithm>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/base/status.h"

namespace hcomm {
namespace {

std::string Quoted(const std::string& id) { return absl::StrCat("'", id, "'"); }

}  // namespace

absl::StatusOr<int> DefaultPolicy(absl::Span<const ReadyTask> ready) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(ready.size()); ++i) {
    const ReadyTask& a = ready[i];
    const ReadyTask& b = ready[best];
    if (a.priority > b.priority ||
        (a.priority == b.priority && a.registration_index < b.registration_index)) {
      best = i;
    }
  }
  return best;
}

absl::Status TaskGraph::Add(std::string id, int priority, std::vector<std::string> depends_on) {
  if (id.empty()) return InvalidArgument("a task's id is empty");
  if (index_.contains(id)) {
    return InvalidArgument(absl::StrCat("task ", Quoted(id), " is registered twice"));
  }
  index_[id] = size();
  tasks_.push_back(Task{std::move(id), priority, std::move(depends_on)});
  return absl::OkStatus();
}

std::vector<int> TaskGraph::Priorities() const {
  std::vector<int> out;
  for (const Task& t : tasks_) out.push_back(t.priority);
  std::sort(out.begin(), out.end(), std::greater<int>());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::StatusOr<std::vector<std::vector<int>>> TaskGraph::Dependencies() const {
  std::vector<std::vector<int>> deps(tasks_.size());
  for (int i = 0; i < size(); ++i) {
    for (const std::string& d : tasks_[i].depends_on) {
      auto it = index_.find(d);
      if (it == index_.end()) {
        return InvalidArgument(absl::StrCat("task ", Quoted(tasks_[i].id),
                                            " depends on ", Quoted(d),
                                            ", which is not a registered task"));
      }
      if (std::find(deps[i].begin(), deps[i].end(), it->second) == deps[i].end()) {
        deps[i].push_back(it->second);
      }
    }
  }
  return deps;
}

// Every task left out of the order waits for another left out, so a walk
// along such dependencies comes back to a task it has seen: that is a cycle.
std::string TaskGraph::CycleAmong(const std::vector<std::vector<int>>& deps,
                                  const std::vector<bool>& placed) const {
  int at = static_cast<int>(std::find(placed.begin(), placed.end(), false) - placed.begin());
  std::vector<int> walk;
  std::vector<int> seen_at(tasks_.size(), -1);
  while (seen_at[at] < 0) {
    seen_at[at] = static_cast<int>(walk.size());
    walk.push_back(at);
    for (int d : deps[at]) {
      if (!placed[d]) {
        at = d;
        break;
      }
    }
  }
  std::vector<std::string> names;
  for (size_t i = seen_at[at]; i < walk.size(); ++i) names.push_back(Quoted(tasks_[walk[i]].id));
  names.push_back(Quoted(tasks_[at].id));
  return absl::StrJoin(names, " -> ");
}

absl::StatusOr<std::vector<int>> TaskGraph::Order(Policy policy) const {
  HCOMM_ASSIGN_OR_RETURN(std::vector<std::vector<int>> deps, Dependencies());
  const int n = size();
  std::vector<int> waiting(n);
  std::vector<std::vector<int>> dependants(n);
  for (int i = 0; i < n; ++i) {
    waiting[i] = static_cast<int>(deps[i].size());
    for (int d : deps[i]) dependants[d].push_back(i);
  }
  std::vector<int> ready;  // by registration
  for (int i = 0; i < n; ++i) {
    if (waiting[i] == 0) ready.push_back(i);
  }
  std::vector<int> order;
  std::vector<bool> placed(n, false);
  std::vector<ReadyTask> view;
  while (!ready.empty()) {
    view.clear();
    for (int t : ready) view.push_back(ReadyTask{&tasks_[t].id, tasks_[t].priority, t});
    absl::StatusOr<int> pick = policy(view);
    if (!pick.ok()) return Annotate(pick.status(), "the scheduler's policy");
    if (*pick < 0 || *pick >= static_cast<int>(ready.size())) {
      return InvalidArgument(absl::StrCat("the scheduler's policy picked ", *pick, " of ",
                                          ready.size(), " ready tasks (0 to ", ready.size() - 1,
                                          ")"));
    }
    const int t = ready[*pick];
    ready.erase(ready.begin() + *pick);
    order.push_back(t);
    placed[t] = true;
    for (int d : dependants[t]) {
      if (--waiting[d] == 0) ready.insert(std::lower_bound(ready.begin(), ready.end(), d), d);
    }
  }
  if (static_cast<int>(order.size()) < n) {
    return InvalidArgument(
        absl::StrCat("tasks depend on each other in a cycle: ", CycleAmong(deps, placed)));
  }
  return order;
}

absl::Status TaskGraph::Run(const std::vector<int>& order,
                            absl::FunctionRef<absl::Status(int task)> run) const {
  HCOMM_ASSIGN_OR_RETURN(std::vector<std::vector<int>> deps, Dependencies());
  enum State { kPending, kDone, kFailed, kNotRun };
  absl::Mutex mu;
  std::vector<State> state(tasks_.size(), kPending);
  std::vector<absl::Status> failure(tasks_.size());
  std::map<int, std::vector<int>, std::greater<int>> lanes;  // priority -> its tasks in order
  for (int t : order) lanes[tasks_[t].priority].push_back(t);

  auto lane = [&](const std::vector<int>& mine) {
    for (int t : mine) {
      bool dep_failed = false;
      {
        absl::MutexLock l(&mu);
        auto ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
          for (int d : deps[t]) {
            if (state[d] == kPending) return false;
          }
          return true;
        };
        mu.Await(absl::Condition(&ended));
        for (int d : deps[t]) dep_failed |= state[d] != kDone;
        if (dep_failed) state[t] = kNotRun;
      }
      if (dep_failed) continue;
      absl::Status s = run(t);
      absl::MutexLock l(&mu);
      state[t] = s.ok() ? kDone : kFailed;
      failure[t] = std::move(s);
    }
  };
  std::vector<std::thread> threads;
  for (const auto& [priority, mine] : lanes) threads.emplace_back(lane, std::cref(mine));
  for (std::thread& th : threads) th.join();

  absl::Status first;
  std::vector<std::string> failed, not_run;
  for (int t : order) {
    if (state[t] == kFailed) {
      if (first.ok()) first = failure[t];
      failed.push_back(Quoted(tasks_[t].id));
    }
    if (state[t] == kNotRun) not_run.push_back(Quoted(tasks_[t].id));
  }
  if (first.ok()) return absl::OkStatus();
  const int t = *std::find_if(order.begin(), order.end(),
                              [&](int i) { return state[i] == kFailed; });
  std::string what = absl::StrCat("task ", Quoted(tasks_[t].id), " (priority ",
                                  tasks_[t].priority, ") failed");
  absl::Status out = Annotate(first, what);
  std::string more;
  if (failed.size() > 1) {
    absl::StrAppend(&more, "; also failed: ",
                    absl::StrJoin(failed.begin() + 1, failed.end(), ", "));
  }
  if (!not_run.empty()) {
    absl::StrAppend(&more, "; not run, as they depend on a failed task: ",
                    absl::StrJoin(not_run, ", "));
  }
  if (more.empty()) return out;
  return absl::Status(out.code(), absl::StrCat(out.message(), more));
}

}  // namespace hcomm
