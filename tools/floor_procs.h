// What the floor tools (tools/tcp_floor, tools/exchange_floor) share: their
// integer arguments, the CPUs they may bind to, and running one process per
// rank until all are done, one fails, or time runs out.
//
//   std::vector<int> cpus = hcomm::floor_tools::AllowedCpus();
//   bool ok = hcomm::floor_tools::RunProcesses(procs, 300, "tcp_floor", [&](int r) {
//     return Child(r, procs <= static_cast<int>(cpus.size()) ? cpus[r] : -1);
//   });
#ifndef HCOMM_TOOLS_FLOOR_PROCS_H_
#define HCOMM_TOOLS_FLOOR_PROCS_H_

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/base/spin.h"

namespace hcomm {
namespace floor_tools {

// `text` as an integer in [lo, hi], the whole of it.
inline bool ParseInt(const char* text, int lo, int hi, int* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

// The CPUs this process may run on, in order.
inline std::vector<int> AllowedCpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
  }
  return cpus;
}

// Forks `procs` processes, process r exiting with child(r), and waits for
// them all. A process that fails (exits with another status than 0, or is
// killed) leaves the others waiting on it, so all are killed then, and when
// `time_limit_s` have passed (said on stderr, after `tool`). True when every
// process exited with 0.
template <typename Child>
bool RunProcesses(int procs, int time_limit_s, const char* tool, Child child) {
  std::fflush(stdout);  // or the children would print what is buffered again
  std::vector<pid_t> kids;
  for (int r = 0; r < procs; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "%s: fork: %s\n", tool, std::strerror(errno));
      break;
    }
    if (pid == 0) _exit(child(r));
    kids.push_back(pid);
  }
  bool ok = static_cast<int>(kids.size()) == procs;
  const int64_t deadline = MonoNs() + int64_t{time_limit_s} * 1'000'000'000;
  auto stop_all = [&] {
    ok = false;
    for (pid_t k : kids) kill(k, SIGKILL);
  };
  if (!ok) stop_all();
  for (size_t done = 0; done < kids.size();) {
    int status = 0;
    const pid_t k = waitpid(-1, &status, WNOHANG);
    if (k < 0) break;
    if (k == 0) {
      if (ok && MonoNs() > deadline) {
        std::fprintf(stderr, "%s: gave up after %d s\n", tool, time_limit_s);
        stop_all();
      }
      usleep(10'000);
      continue;
    }
    ++done;
    if (ok && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) stop_all();
  }
  return ok;
}

}  // namespace floor_tools
}  // namespace hcomm

#endif  // HCOMM_TOOLS_FLOOR_PROCS_H_
