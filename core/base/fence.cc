#include "core/base/fence.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace hcomm {

namespace {

long Membarrier(int cmd) { return syscall(SYS_membarrier, cmd, 0, 0); }

}  // namespace

bool RegisterAsymmetricFences() {
  // Registration belongs to the process: a forked child, which inherits
  // these statics, asks again.
  static std::atomic<pid_t> registered_pid{0};
  static std::atomic<pid_t> refused_pid{0};
  const pid_t me = getpid();
  if (registered_pid.load(std::memory_order_acquire) == me) return true;
  if (refused_pid.load(std::memory_order_acquire) == me) return false;
  // HCOMM_MEMBARRIER=0 declines (as a kernel without the command would).
  const char* env = getenv("HCOMM_MEMBARRIER");
  const bool declined = env != nullptr && strcmp(env, "0") == 0;
  const long cmds = declined ? -1 : Membarrier(MEMBARRIER_CMD_QUERY);
  const bool ok = cmds > 0 && (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0 &&
                  Membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
  (ok ? registered_pid : refused_pid).store(me, std::memory_order_release);
  return ok;
}

void HeavyFence(bool light) {
  // (Registered processes cannot be refused the command; should it fail
  // all the same, the sleeper's timed nap bounds a missed wake.)
  if (!light || Membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0) FullFence();
}

}  // namespace hcomm
