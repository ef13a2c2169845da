// Deadlines on the monotonic clock, and a condition variable that waits on it.
//
// Every deadline in hcomm is a MonoTime: a point on CLOCK_MONOTONIC, which
// moves forward at the rate of real time and nothing else. The wall clock
// (absl::Now()) can be stepped by hours either way, by NTP at a VM's resume
// or by an administrator; a deadline read from it would then pass at once
// (a false timeout on every rank) or not for hours (a hang). MonoTime has
// absl::Time's arithmetic and does not mix with it, so the compiler refuses
// a deadline taken from the wall clock.
//
//   const MonoTime deadline = MonoNow() + absl::Seconds(5);
//   absl::MutexLock l(&mu);
//   while (!ready) {
//     if (cv.WaitUntil(&mu, deadline)) return Timeout("...");
//   }
//
// CondVar stands in for absl::CondVar wherever a wait has a deadline: the
// Abseil this builds with (20220623) turns every timed wait, even
// WaitWithTimeout, into a wall-clock instant, so a clock stepped back during
// the wait would stretch it by the step. CondVar sleeps in a futex with a
// relative timeout, which the kernel measures on CLOCK_MONOTONIC.
#ifndef HCOMM_CORE_BASE_CLOCK_H_
#define HCOMM_CORE_BASE_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace hcomm {

// A point on CLOCK_MONOTONIC (its origin is the host's boot), with the
// infinite points absl::Time has: InfiniteFuture() is a deadline that never
// passes. A value type, copied freely.
class MonoTime {
 public:
  constexpr MonoTime() = default;  // the clock's origin
  static constexpr MonoTime InfiniteFuture() { return MonoTime(absl::InfiniteDuration()); }
  static constexpr MonoTime InfinitePast() { return MonoTime(-absl::InfiniteDuration()); }

  // The time since the clock's origin (±InfiniteDuration for the infinite
  // points).
  constexpr absl::Duration SinceOrigin() const { return since_origin_; }

  MonoTime& operator+=(absl::Duration d) {
    since_origin_ += d;
    return *this;
  }
  MonoTime& operator-=(absl::Duration d) {
    since_origin_ -= d;
    return *this;
  }
  friend MonoTime operator+(MonoTime t, absl::Duration d) { return t += d; }
  friend MonoTime operator+(absl::Duration d, MonoTime t) { return t += d; }
  friend MonoTime operator-(MonoTime t, absl::Duration d) { return t -= d; }
  friend absl::Duration operator-(MonoTime a, MonoTime b) {
    return a.since_origin_ - b.since_origin_;
  }
  friend bool operator==(MonoTime a, MonoTime b) { return a.since_origin_ == b.since_origin_; }
  friend bool operator!=(MonoTime a, MonoTime b) { return a.since_origin_ != b.since_origin_; }
  friend bool operator<(MonoTime a, MonoTime b) { return a.since_origin_ < b.since_origin_; }
  friend bool operator<=(MonoTime a, MonoTime b) { return a.since_origin_ <= b.since_origin_; }
  friend bool operator>(MonoTime a, MonoTime b) { return a.since_origin_ > b.since_origin_; }
  friend bool operator>=(MonoTime a, MonoTime b) { return a.since_origin_ >= b.since_origin_; }

 private:
  explicit constexpr MonoTime(absl::Duration since_origin) : since_origin_(since_origin) {}
  friend MonoTime MonoNow();

  absl::Duration since_origin_;
};

// Now, on CLOCK_MONOTONIC.
MonoTime MonoNow();

// Sleeps while *word == expected (FUTEX_WAIT), at most until `deadline`
// (InfiniteFuture: no limit). Returns on a wake, a signal, the deadline or a
// changed word alike; the caller rechecks. `shared`: the word lives in
// memory shared between processes (else the cheaper private futex).
void FutexWaitUntil(std::atomic<uint32_t>* word, uint32_t expected, MonoTime deadline,
                    bool shared);
// Wakes up to `n` sleepers of FutexWaitUntil on `word` (same `shared`).
void FutexWake(std::atomic<uint32_t>* word, int n, bool shared);

// A condition variable for an absl::Mutex whose timed waits keep to the
// monotonic clock (see the top of this file). As absl::CondVar: waits may
// end spuriously, so the caller loops on its condition; Signal and
// SignalAll may be called with or without the mutex held.
// THREAD SAFETY: every method may be called from any thread.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Releases `mu` (held), sleeps until signalled (or spuriously), and takes
  // `mu` again.
  void Wait(absl::Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    WaitUntil(mu, MonoTime::InfiniteFuture());
  }
  // As Wait, at most until `deadline`. Returns true when the deadline has
  // passed (as absl::CondVar::WaitWithDeadline).
  bool WaitUntil(absl::Mutex* mu, MonoTime deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // As WaitUntil, at most for `timeout`.
  bool WaitFor(absl::Mutex* mu, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return WaitUntil(mu, MonoNow() + timeout);
  }

  // Wakes one waiter, if any.
  void Signal() { Wake(1); }
  // Wakes every waiter.
  void SignalAll() { Wake(INT32_MAX); }

 private:
  void Wake(int n);

  // Bumped by every signal; a waiter sleeps only while it has not moved
  // since the waiter read it (under the mutex, before letting go of it).
  std::atomic<uint32_t> seq_{0};
  std::atomic<int> waiters_{0};  // a signal with none skips the system call
};

}  // namespace hcomm

#endif  // HCOMM_CORE_BASE_CLOCK_H_
