// Interrupting blocking calls from a language binding's signal handling.
//
// A Python program's Ctrl-C runs its SIGINT handler only once the main
// thread is back in the interpreter, which a call blocked in hcomm is not.
// A binding registers a check that runs those handlers (SetInterruptCheck);
// the library's waits ask InterruptNow() as they go, and once the check has
// said yes, they end as if their deadline had passed: the thread's call
// unwinds the way a timeout does (a receive is withdrawn, a collective
// fails), its message saying it was interrupted.
//
//   SetInterruptCheck(&RunSignalHandlers);  // the binding, once
//   ClearInterrupt();                        // each call into the library
//   while (!done) { ...; if (now >= deadline || InterruptNow(now)) break; }
//
// The check runs on the waiting thread, at most every kInterruptCheckPeriod,
// with no lock of the library held, and never before a thread has waited
// that long; without one registered, InterruptNow costs an atomic load.
// The interrupted state belongs to the thread and lasts until its next
// ClearInterrupt.
#ifndef HCOMM_CORE_BASE_INTERRUPT_H_
#define HCOMM_CORE_BASE_INTERRUPT_H_

#include <atomic>

#include "absl/base/optimization.h"
#include "absl/time/time.h"
#include "core/base/clock.h"

namespace hcomm {

// Returns nonzero when the waiting thread's call should end now (a C
// signature: the binding's hook is handed over as it is).
using InterruptCheck = int (*)();

constexpr absl::Duration kInterruptCheckPeriod = absl::Milliseconds(100);

namespace interrupt_internal {
extern std::atomic<InterruptCheck> check;
void ClearSlow();
}  // namespace interrupt_internal

// Registers `check` for every thread (nullptr: none).
void SetInterruptCheck(InterruptCheck check);
// Whether any check is registered. (Inline, as ClearInterrupt: every C API
// call asks.)
inline bool InterruptCheckSet() {
  return interrupt_internal::check.load(std::memory_order_relaxed) != nullptr;
}
// Whether this thread's call was interrupted, running the check when the
// period has passed.
bool InterruptNow(MonoTime now);
// Whether this thread's call was interrupted, without running the check.
bool Interrupted();
// How a wait that ended unfinished says why: "interrupted (a signal handler
// raised)" after an interrupt of this thread's call, else "timed out".
const char* TimedOutOrInterrupted();
// Starts a new call on this thread: not interrupted, the period afresh.
inline void ClearInterrupt() {
  if (ABSL_PREDICT_FALSE(InterruptCheckSet())) interrupt_internal::ClearSlow();
}

}  // namespace hcomm

#endif  // HCOMM_CORE_BASE_INTERRUPT_H_
