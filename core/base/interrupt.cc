#include "core/base/interrupt.h"

#include <atomic>

#include "core/base/clock.h"

namespace hcomm {

std::atomic<InterruptCheck> interrupt_internal::check{nullptr};

namespace {

struct ThreadState {
  bool interrupted = false;
  // When the check may next run; InfinitePast: the thread has not waited
  // since its call began.
  MonoTime next_check = MonoTime::InfinitePast();
};

ThreadState& Mine() {
  thread_local ThreadState state;
  return state;
}

}  // namespace

void SetInterruptCheck(InterruptCheck check) {
  interrupt_internal::check.store(check, std::memory_order_release);
}

bool InterruptNow(MonoTime now) {
  const InterruptCheck check = interrupt_internal::check.load(std::memory_order_acquire);
  if (check == nullptr) return false;
  ThreadState& s = Mine();
  if (s.interrupted) return true;
  if (s.next_check == MonoTime::InfinitePast()) {
    s.next_check = now + kInterruptCheckPeriod;
    return false;
  }
  if (now < s.next_check) return false;
  s.next_check = now + kInterruptCheckPeriod;
  s.interrupted = check() != 0;
  return s.interrupted;
}

bool Interrupted() { return InterruptCheckSet() && Mine().interrupted; }

const char* TimedOutOrInterrupted() {
  return Interrupted() ? "interrupted (a signal handler raised)" : "timed out";
}

void interrupt_internal::ClearSlow() {
  ThreadState& s = Mine();
  s.interrupted = false;
  s.next_check = MonoTime::InfinitePast();
}

}  // namespace hcomm
