// Happens-before annotations for the system Abseil's synchronisation
// primitives, so that ThreadSanitizer can see them (--config=tsan links this
// file into every test binary through --custom_malloc; see
// docs/sanitizers.md).
//
// Why: Debian's libabsl_synchronization.so is not built with
// -fsanitize=thread. absl::Mutex blocks and wakes threads with raw futex
// system calls and its own atomics, none of which TSan intercepts, and the
// TSan hooks inside mutex.cc (ABSL_TSAN_MUTEX_*) are compiled out. Without
// help TSan sees no ordering between two critical sections of one mutex and
// reports every field guarded by an absl::Mutex as a data race.
//
// How: this file defines the public lock/unlock/wait entry points of
// absl::Mutex, absl::CondVar and absl::Notification in the test binary
// itself. The binary's definitions interpose on the shared library's (for
// hcomm's calls and, through the PLT, for Abseil's own), forward to the
// real functions (dlsym(RTLD_NEXT)), and tell TSan what they mean:
//   a call that returns holding the mutex   -> __tsan_acquire(mutex) after it
//   a call that gives the mutex up          -> __tsan_release(mutex) before it
//   Notify / WaitForNotification            -> release / acquire on the object
// Memory accesses made inside the real call (Abseil evaluates a waiter's
// absl::Condition on whichever thread happens to hold the mutex) are ignored
// (__tsan_ignore_thread_begin/end), as Abseil's own TSan build does.
//
// It also builds in TSan suppressions for two known false positives (see
// __tsan_default_suppressions at the end).
//
// Limits: reader locks are treated like writer locks for ordering (two
// readers are ordered with each other), so a write made under a reader lock
// is not reported; accesses inside Condition functions are not checked.
//
// Outside a -fsanitize=thread build the file compiles to nothing.
#if defined(__SANITIZE_THREAD__)

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#if !ABSL_OPTION_USE_INLINE_NAMESPACE
#error "tsan_absl_annotations.cc expects Abseil with an inline namespace (as Debian ships it)"
#endif

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
}

namespace {

#define HCOMM_STR2(x) #x
#define HCOMM_STR(x) HCOMM_STR2(x)

// "_ZN4absl" + <inline namespace> + rest: the mangled name of an Abseil
// member function (`rest` uses S0_ for absl::<inline namespace>).
std::string Mangled(const char* prefix, const char* rest) {
  const std::string ns = HCOMM_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  return std::string(prefix) + "4absl" + std::to_string(ns.size()) + ns + rest;
}

void* Real(const char* prefix, const char* rest) {
  const std::string name = Mangled(prefix, rest);
  void* f = dlsym(RTLD_NEXT, name.c_str());
  if (f == nullptr) {
    fprintf(stderr, "tsan_absl_annotations: cannot find %s in the Abseil library\n", name.c_str());
    abort();
  }
  return f;
}

#define REAL(type, prefix, rest) static const auto real = reinterpret_cast<type>(Real(prefix, rest))

struct Ignore {
  Ignore() { __tsan_ignore_thread_begin(); }
  ~Ignore() { __tsan_ignore_thread_end(); }
};

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

// ---- Mutex: acquire ----

void Mutex::Lock() {
  REAL(void (*)(Mutex*), "_ZN", "5Mutex4LockEv");
  {
    Ignore i;
    real(this);
  }
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  REAL(void (*)(Mutex*), "_ZN", "5Mutex10ReaderLockEv");
  {
    Ignore i;
    real(this);
  }
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  REAL(bool (*)(Mutex*), "_ZN", "5Mutex7TryLockEv");
  bool ok;
  {
    Ignore i;
    ok = real(this);
  }
  if (ok) __tsan_acquire(this);
  return ok;
}

bool Mutex::ReaderTryLock() {
  REAL(bool (*)(Mutex*), "_ZN", "5Mutex13ReaderTryLockEv");
  bool ok;
  {
    Ignore i;
    ok = real(this);
  }
  if (ok) __tsan_acquire(this);
  return ok;
}

void Mutex::LockWhen(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "_ZN", "5Mutex8LockWhenERKNS0_9ConditionE");
  {
    Ignore i;
    real(this, cond);
  }
  __tsan_acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "_ZN", "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  {
    Ignore i;
    real(this, cond);
  }
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, absl::Time), "_ZN",
       "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  bool ok;
  {
    Ignore i;
    ok = real(this, cond, deadline);
  }
  __tsan_acquire(this);  // held whatever the condition's value
  return ok;
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, absl::Duration), "_ZN",
       "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  bool ok;
  {
    Ignore i;
    ok = real(this, cond, timeout);
  }
  __tsan_acquire(this);
  return ok;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, absl::Time), "_ZN",
       "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  bool ok;
  {
    Ignore i;
    ok = real(this, cond, deadline);
  }
  __tsan_acquire(this);
  return ok;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, absl::Duration), "_ZN",
       "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  bool ok;
  {
    Ignore i;
    ok = real(this, cond, timeout);
  }
  __tsan_acquire(this);
  return ok;
}

// ---- Mutex: release ----

void Mutex::Unlock() {
  REAL(void (*)(Mutex*), "_ZN", "5Mutex6UnlockEv");
  __tsan_release(this);
  Ignore i;  // Unlock may evaluate other threads' conditions
  real(this);
}

void Mutex::ReaderUnlock() {
  REAL(void (*)(Mutex*), "_ZN", "5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  Ignore i;
  real(this);
}

// ---- Mutex / CondVar: release, wait, reacquire ----

void Mutex::Await(const Condition& cond) {
  REAL(void (*)(Mutex*, const Condition&), "_ZN", "5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  {
    Ignore i;
    real(this, cond);
  }
  __tsan_acquire(this);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  REAL(bool (*)(Mutex*, const Condition&, absl::Time), "_ZN",
       "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  bool ok;
  __tsan_release(this);
  {
    Ignore i;
    ok = real(this, cond, deadline);
  }
  __tsan_acquire(this);
  return ok;
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  REAL(bool (*)(Mutex*, const Condition&, absl::Duration), "_ZN",
       "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  bool ok;
  __tsan_release(this);
  {
    Ignore i;
    ok = real(this, cond, timeout);
  }
  __tsan_acquire(this);
  return ok;
}

void CondVar::Wait(Mutex* mu) {
  REAL(void (*)(CondVar*, Mutex*), "_ZN", "7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  {
    Ignore i;
    real(this, mu);
  }
  __tsan_acquire(mu);
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  REAL(bool (*)(CondVar*, Mutex*, absl::Time), "_ZN",
       "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  bool timed_out;
  __tsan_release(mu);
  {
    Ignore i;
    timed_out = real(this, mu, deadline);
  }
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  REAL(bool (*)(CondVar*, Mutex*, absl::Duration), "_ZN",
       "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  bool timed_out;
  __tsan_release(mu);
  {
    Ignore i;
    timed_out = real(this, mu, timeout);
  }
  __tsan_acquire(mu);
  return timed_out;
}

// ---- Notification ----

void Notification::Notify() {
  REAL(void (*)(Notification*), "_ZN", "12Notification6NotifyEv");
  __tsan_release(this);
  Ignore i;
  real(this);
}

void Notification::WaitForNotification() const {
  REAL(void (*)(const Notification*), "_ZNK", "12Notification19WaitForNotificationEv");
  {
    Ignore i;
    real(this);
  }
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  REAL(bool (*)(const Notification*, absl::Duration), "_ZNK",
       "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  bool ok;
  {
    Ignore i;
    ok = real(this, timeout);
  }
  if (ok) __tsan_acquire(const_cast<Notification*>(this));
  return ok;
}

bool Notification::WaitForNotificationWithDeadline(absl::Time deadline) const {
  REAL(bool (*)(const Notification*, absl::Time), "_ZNK",
       "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  bool ok;
  {
    Ignore i;
    ok = real(this, deadline);
  }
  if (ok) __tsan_acquire(const_cast<Notification*>(this));
  return ok;
}

// Mutex destruction erases the mutex from Abseil's deadlock-detection
// graph under Abseil's own spin lock, which TSan cannot see either.
Mutex::~Mutex() {
  REAL(void (*)(Mutex*), "_ZN", "5MutexD1Ev");
  Ignore i;
  real(this);
}

ABSL_NAMESPACE_END
}  // namespace absl

// Known false positives, built in (TSan reads this hook at start-up) so that
// no test needs a suppressions file in its runfiles.
extern "C" const char* __tsan_default_suppressions() {
  return
      // Abseil's deadlock-detection graph (GraphCycles) is guarded by an
      // Abseil spin lock that TSan cannot see; the library's own memmove
      // calls would otherwise be reported as races.
      "called_from_lib:libabsl_graphcycles_internal.so\n"
      // hcomm::Channel takes over a process-shared robust mutex whose owner
      // process was killed (EOWNERDEAD). TSan models one process, so it sees
      // an unlock of a mutex that no thread of this process locked.
      "mutex:hcomm::Channel::Unlock\n";
}

#endif  // __SANITIZE_THREAD__
