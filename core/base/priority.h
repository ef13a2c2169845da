// Priorities among the operations of one process (API.md, "Streams,
// priorities and fusion"): while an operation of a higher priority runs,
// large operations of lower ones step aside between their pieces, so that
// the urgent one has the CPUs and the wire instead of waiting for a whole
// bulk transfer.
//
//   {
//     PriorityScope scope(stream_priority);   // this thread runs priority-10 work
//     comm.AllReduce(...);
//   }
//   // in an algorithm's loop, between two pieces:
//   YieldToHigherPriority();
//
// A thread outside any scope runs priority 0 (blocking calls). A step aside
// lasts while a higher-priority operation is active here, but at most
// kMostYield at a time: the urgent operation may itself wait for a peer
// whose progress needs this one's, and a bounded step aside can never
// deadlock.
//
// THREAD SAFETY: everything, from any thread.
#ifndef HCOMM_CORE_BASE_PRIORITY_H_
#define HCOMM_CORE_BASE_PRIORITY_H_

#include <atomic>
#include <climits>

#include "absl/time/time.h"

namespace hcomm {

inline constexpr absl::Duration kMostYield = absl::Milliseconds(5);

namespace priority_internal {
// The highest priority of the scopes active in this process; INT_MIN when
// none is.
extern std::atomic<int> highest;
int CurrentPriority();
void Yield(int mine);
}  // namespace priority_internal

// Marks the calling thread, for good, as one that runs communication in
// the background of the program's computation (a stream's own thread): its
// waits sleep at once instead of spinning, leaving the CPUs to the
// computation. Waits on a thread that the program waits on anyway spin as
// before.
// (Functions, not an inline thread-local variable: that would show in
// libhcomm_c.so's dynamic symbols.)
void MarkBackgroundThread();
bool OnBackgroundThread();

// Marks the calling thread as running work of `priority` while it lives.
class PriorityScope {
 public:
  explicit PriorityScope(int priority);
  ~PriorityScope();
  PriorityScope(const PriorityScope&) = delete;
  PriorityScope& operator=(const PriorityScope&) = delete;

 private:
  int priority_;
  int outer_;  // the thread's priority before
};

// The calling thread's priority: its innermost scope's, 0 outside any.
inline int ThreadPriority() { return priority_internal::CurrentPriority(); }

// Between two pieces of a large operation: steps aside while a higher
// priority than the calling thread's is active (one relaxed load when none
// is).
inline void YieldToHigherPriority() {
  const int highest = priority_internal::highest.load(std::memory_order_relaxed);
  if (highest == INT_MIN) return;
  const int mine = priority_internal::CurrentPriority();
  if (highest > mine) priority_internal::Yield(mine);
}

}  // namespace hcomm

#endif  // HCOMM_CORE_BASE_PRIORITY_H_
