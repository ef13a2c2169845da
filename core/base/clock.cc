#include "core/base/clock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

#include "core/base/spin.h"

namespace hcomm {

MonoTime MonoNow() { return MonoTime(absl::Nanoseconds(MonoNs())); }

void FutexWaitUntil(std::atomic<uint32_t>* word, uint32_t expected, MonoTime deadline,
                    bool shared) {
  timespec ts;
  timespec* timeout = nullptr;
  if (deadline != MonoTime::InfiniteFuture()) {
    const absl::Duration left = deadline - MonoNow();
    if (left <= absl::ZeroDuration()) return;
    ts = absl::ToTimespec(left);
    timeout = &ts;  // FUTEX_WAIT's timeout is relative, measured on CLOCK_MONOTONIC
  }
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word),
          shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, expected, timeout, nullptr, 0);
}

void FutexWake(std::atomic<uint32_t>* word, int n, bool shared) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word),
          shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, n, nullptr, nullptr, 0);
}

bool CondVar::WaitUntil(absl::Mutex* mu, MonoTime deadline) {
  // Counted, then the sequence read, both before the mutex goes: a signal
  // that follows a change made under the mutex either moves seq_ after our
  // read (the futex will not sleep, or is woken: it sees waiters_) or came
  // before the change, which the caller's condition saw.
  waiters_.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t seen = seq_.load(std::memory_order_seq_cst);
  mu->Unlock();
  FutexWaitUntil(&seq_, seen, deadline, /*shared=*/false);
  mu->Lock();
  waiters_.fetch_sub(1, std::memory_order_relaxed);
  return deadline != MonoTime::InfiniteFuture() && MonoNow() >= deadline;
}

void CondVar::Wake(int n) {
  seq_.fetch_add(1, std::memory_order_seq_cst);
  if (waiters_.load(std::memory_order_seq_cst) > 0) FutexWake(&seq_, n, /*shared=*/false);
}

}  // namespace hcomm
