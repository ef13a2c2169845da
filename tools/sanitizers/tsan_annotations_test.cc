// Checks what --config=tsan relies on (tools/sanitizers/tsan_absl_annotations.cc):
// ThreadSanitizer sees the ordering that the system Abseil's absl::Mutex,
// CondVar and Notification provide, and still reports a real race.
//
//   1. Fields guarded by absl::Mutex (Lock, TryLock, ReaderLock, LockWhen,
//      Await, CondVar waits) and handed over through absl::Notification are
//      updated from two threads: no report (TSAN_OPTIONS has
//      halt_on_error=1, so a report fails this test).
//   2. Under TSan only: a child process races on an unguarded int and must
//      be stopped by TSan (exit code 66).
// Outside a TSan build only step 1 runs, as a plain functional check.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

absl::Mutex mu;
absl::CondVar cv;
int guarded ABSL_GUARDED_BY(mu) = 0;
bool ready ABSL_GUARDED_BY(mu) = false;
int handed_over = 0;  // written before Notify, read after the wait
#if defined(__SANITIZE_THREAD__)
int racy = 0;  // the forked child's deliberate race (main, below)
#endif

bool Enough(int* n) { return *n >= 4000; }

int GuardedRun() {
  absl::Notification note;
  std::thread t([&] {
    for (int i = 0; i < 1000; ++i) {
      absl::MutexLock l(&mu);
      ++guarded;
    }
    for (int i = 0; i < 1000;) {
      if (mu.TryLock()) {
        ++guarded;
        ++i;
        mu.Unlock();
      }
    }
    handed_over = 42;
    note.Notify();
    absl::MutexLock l(&mu);
    ready = true;
    cv.Signal();
  });
  for (int i = 0; i < 2000; ++i) {
    absl::MutexLock l(&mu);
    ++guarded;
  }
  {
    absl::MutexLock l(&mu);
    while (!ready) cv.WaitWithTimeout(&mu, absl::Seconds(1));
  }
  mu.LockWhen(absl::Condition(&Enough, &guarded));
  mu.Await(absl::Condition(&Enough, &guarded));
  mu.Unlock();
  note.WaitForNotification();
  const int seen = handed_over;
  t.join();
  mu.ReaderLock();
  const int total = guarded;
  mu.ReaderUnlock();
  if (total != 4000 || seen != 42) {
    fprintf(stderr, "FAIL: guarded=%d handed_over=%d\n", total, seen);
    return 1;
  }
  printf("ok: guarded counter from two threads, no report\n");
  return 0;
}

}  // namespace

int main() {
#if defined(__SANITIZE_THREAD__)
  // Before any thread exists: fork the racy child.
  pid_t child = fork();
  if (child == 0) {
    std::thread t([] { ++racy; });
    ++racy;
    t.join();
    _exit(0);  // not reached when TSan reports (halt_on_error=1)
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 66) {
    fprintf(stderr, "FAIL: TSan did not report the race in the child (status %d)\n", status);
    return 1;
  }
  printf("ok: TSan reports a real race (the report above is expected)\n");
#endif
  return GuardedRun();
}
