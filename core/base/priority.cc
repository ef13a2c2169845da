#include "core/base/priority.h"

#include <map>

#include "absl/synchronization/mutex.h"
#include "core/base/clock.h"

namespace hcomm {
namespace priority_internal {
namespace {

absl::Mutex& Mu() {
  static absl::Mutex* mu = new absl::Mutex;
  return *mu;
}

// Active scopes by priority; guarded by Mu().
std::map<int, int>& Active() {
  static auto* active = new std::map<int, int>;
  return *active;
}

// Signalled whenever Active() changes (Publish): Yield's waiters look again.
CondVar& Changed() {
  static auto* changed = new CondVar;
  return *changed;
}

// INT_MIN: outside any scope (priority 0).
thread_local int current = INT_MIN;
thread_local bool background = false;  // MarkBackgroundThread

void Publish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(Mu()) {
  highest.store(Active().empty() ? INT_MIN : Active().rbegin()->first,
                std::memory_order_relaxed);
  Changed().SignalAll();
}

}  // namespace

std::atomic<int> highest{INT_MIN};

int CurrentPriority() { return current == INT_MIN ? 0 : current; }

void Yield(int mine) {
  absl::MutexLock l(&Mu());
  auto clear = [mine]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(Mu()) {
    return Active().empty() || Active().rbegin()->first <= mine;
  };
  const MonoTime until = MonoNow() + kMostYield;
  while (!clear()) {
    if (Changed().WaitUntil(&Mu(), until)) return;
  }
}

}  // namespace priority_internal

void MarkBackgroundThread() { priority_internal::background = true; }
bool OnBackgroundThread() { return priority_internal::background; }

PriorityScope::PriorityScope(int priority)
    : priority_(priority), outer_(priority_internal::current) {
  priority_internal::current = priority;
  absl::MutexLock l(&priority_internal::Mu());
  ++priority_internal::Active()[priority];
  priority_internal::Publish();
}

PriorityScope::~PriorityScope() {
  priority_internal::current = outer_;
  absl::MutexLock l(&priority_internal::Mu());
  auto it = priority_internal::Active().find(priority_);
  if (--it->second == 0) priority_internal::Active().erase(it);
  priority_internal::Publish();
}

}  // namespace hcomm
