// tcp_floor: what bare loopback TCP sockets take for an allreduce, the floor
// under hcomm's TCP collectives on one host.
//
// N processes (a power of two) run the halving-doubling allreduce of float32
// sums over 127.0.0.1: log2(N) rounds in which partners exchange halves of
// what they hold and reduce the half they keep (with hcomm's reduction
// kernel), then log2(N) rounds that send the reduced blocks back. Each
// exchange is nonblocking send() and recv() on one socket per partner, with
// poll() when neither moves: no framing, matching, tags, progress thread or
// timeouts, the least any library can do over these sockets. Every byte goes
// through the kernel twice (into the socket's buffers, out of them), and a
// bandwidth-optimal allreduce of S bytes on N ranks sends 2(N-1)/N x S per
// rank, whatever its algorithm; set the result beside `hcomm_bench
// allreduce` on the same ranks and size (HCOMM_TRANSPORTS=tcp).
//
//   tcp_floor                      # 4 processes, 1 MiB
//   tcp_floor -n 2 -k 4096 -r 7    # 2 processes, 4 MiB, 7 runs
//
// Processes are bound one to a CPU when there are CPUs enough (as
// `hcomm_run --bind-to core` binds ranks) and left to the scheduler
// otherwise. A run times -i allreduces after all processes are ready and
// lasts until the slowest is done; prints the best and the median run's time
// per allreduce. The first allreduce is checked.
//
// Exit status: 0; 1 when a process fails (a socket error, a wrong sum) or
// the whole takes over 300 s; 2 on bad arguments.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "algorithms/kernels/reduce.h"
#include "core/base/spin.h"
#include "tools/floor_procs.h"

namespace {

using hcomm::floor_tools::ParseInt;

constexpr int kMaxProcs = 64;
constexpr int kMaxRuns = 64;
constexpr int kTimeLimitS = 300;  // the whole measurement

// In a shared anonymous mapping: the run barrier and each process's times.
struct Shared {
  std::atomic<int> arrived;
  std::atomic<int> failed;
  double ns[kMaxProcs][kMaxRuns];
};

void Barrier(Shared* s, int procs, int k) {
  s->arrived.fetch_add(1, std::memory_order_acq_rel);
  while (s->arrived.load(std::memory_order_acquire) < procs * k) sched_yield();
}

int Usage(const char* why) {
  std::fprintf(stderr,
               "tcp_floor: %s\nusage: tcp_floor [-n PROCS 2-%d, a power of two] "
               "[-k KIB 1-1048576] [-r RUNS 1-%d] [-i ITERS 1-100000]\n",
               why, kMaxProcs, kMaxRuns);
  return 2;
}

bool Fail(const char* what, int me) {
  std::fprintf(stderr, "tcp_floor: process %d: %s: %s\n", me, what, std::strerror(errno));
  return false;
}

// Sends n bytes of `out` to and receives n bytes into `in` from the peer on fd.
bool Exchange(int fd, const char* out, char* in, size_t n, int me) {
  size_t sent = 0, got = 0;
  while (sent < n || got < n) {
    bool moved = false;
    if (sent < n) {
      const ssize_t k = send(fd, out + sent, n - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k > 0) {
        sent += static_cast<size_t>(k);
        moved = true;
      } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return Fail("send", me);
      }
    }
    if (got < n) {
      const ssize_t k = recv(fd, in + got, n - got, MSG_DONTWAIT);
      if (k > 0) {
        got += static_cast<size_t>(k);
        moved = true;
      } else if (k == 0) {
        errno = ECONNRESET;
        return Fail("recv", me);
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return Fail("recv", me);
      }
    }
    if (!moved) {
      pollfd p = {fd, static_cast<short>((sent < n ? POLLOUT : 0) | (got < n ? POLLIN : 0)), 0};
      poll(&p, 1, -1);
    }
  }
  return true;
}

struct Step {
  size_t lo, mid, hi;
  int fd;
  bool keep_low;
};

// One halving-doubling allreduce of `count` floats in `v` (tmp: count / 2).
bool AllReduce(float* v, float* tmp, size_t count, int me, int procs,
               const std::vector<int>& fd_of_mask_bit) {
  Step steps[8];
  int nsteps = 0;
  size_t lo = 0, hi = count;
  for (int mask = procs / 2, bit = 0; mask >= 1; mask /= 2, ++bit) {
    const size_t mid = lo + (hi - lo) / 2;
    const bool keep_low = (me & mask) == 0;
    const size_t klo = keep_low ? lo : mid, khi = keep_low ? mid : hi;
    const size_t slo = keep_low ? mid : lo, shi = keep_low ? hi : mid;
    const int fd = fd_of_mask_bit[bit];
    if ((shi - slo) != (khi - klo)) return false;  // counts are multiples of procs
    if (!Exchange(fd, reinterpret_cast<const char*>(v + slo), reinterpret_cast<char*>(tmp),
                  (shi - slo) * sizeof(float), me)) {
      return false;
    }
    hcomm::ReduceInto(v + klo, tmp, khi - klo, hcomm::DataType::kFloat32, hcomm::ReduceOp::kSum);
    steps[nsteps++] = {lo, mid, hi, fd, keep_low};
    lo = klo;
    hi = khi;
  }
  for (int i = nsteps - 1; i >= 0; --i) {
    const Step& st = steps[i];
    const size_t glo = st.keep_low ? st.mid : st.lo;
    if (!Exchange(st.fd, reinterpret_cast<const char*>(v + lo), reinterpret_cast<char*>(v + glo),
                  (hi - lo) * sizeof(float), me)) {
      return false;
    }
    lo = st.lo;
    hi = st.hi;
  }
  return true;
}

int Child(Shared* s, const std::vector<sockaddr_in>& addrs, const std::vector<int>& listeners,
          int me, int procs, size_t count, int runs, int iters, int cpu) {
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      Fail("bind to a CPU", me);
      return 1;
    }
  }
  // One connection per partner me ^ mask: the lower rank listens.
  std::vector<int> fd_of_mask_bit;
  int to_accept = 0;
  for (int mask = procs / 2; mask >= 1; mask /= 2) {
    const int peer = me ^ mask;
    int fd = -1;  // a higher partner's: accepted below, once every connect has gone out
    if (peer < me) {
      fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const int id = me;
      if (fd < 0 ||
          connect(fd, reinterpret_cast<const sockaddr*>(&addrs[peer]), sizeof addrs[peer]) != 0 ||
          write(fd, &id, sizeof id) != sizeof id) {
        Fail("connect", me);
        return 1;
      }
    } else {
      ++to_accept;
    }
    fd_of_mask_bit.push_back(fd);
  }
  for (int i = 0; i < to_accept; ++i) {
    const int c = accept4(listeners[me], nullptr, nullptr, SOCK_CLOEXEC);
    int id = -1;
    if (c < 0 || read(c, &id, sizeof id) != sizeof id) {
      Fail("accept", me);
      return 1;
    }
    // Partners connect in any order: file each by its rank.
    for (int mask = procs / 2, b = 0; mask >= 1; mask /= 2, ++b) {
      if ((me ^ mask) == id) fd_of_mask_bit[b] = c;
    }
  }
  for (int fd : fd_of_mask_bit) {
    if (fd < 0) {
      std::fprintf(stderr, "tcp_floor: process %d: a partner did not connect\n", me);
      return 1;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  std::vector<float> v(count), tmp(count / 2);
  for (float& x : v) x = static_cast<float>(me + 1);
  if (!AllReduce(v.data(), tmp.data(), count, me, procs, fd_of_mask_bit)) return 1;
  const float want = static_cast<float>(procs) * (procs + 1) / 2;
  for (size_t i = 0; i < count; ++i) {
    if (v[i] != want) {
      std::fprintf(stderr, "tcp_floor: process %d: element %zu is %g, want %g\n", me, i,
                   static_cast<double>(v[i]), static_cast<double>(want));
      return 1;
    }
  }
  for (int run = 0; run < runs; ++run) {
    Barrier(s, procs, run + 1);
    const int64_t start = hcomm::MonoNs();
    for (int i = 0; i < iters; ++i) {
      if (!AllReduce(v.data(), tmp.data(), count, me, procs, fd_of_mask_bit)) return 1;
    }
    s->ns[me][run] = static_cast<double>(hcomm::MonoNs() - start) / iters;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 4, kib = 1024, runs = 5, iters = 50;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) return Usage("an option without its value");
    const char* v = argv[i + 1];
    if (std::strcmp(argv[i], "-n") == 0) {
      if (!ParseInt(v, 2, kMaxProcs, &procs) || (procs & (procs - 1)) != 0) {
        return Usage("bad -n (a power of two)");
      }
    } else if (std::strcmp(argv[i], "-k") == 0) {
      if (!ParseInt(v, 1, 1 << 20, &kib)) return Usage("bad -k");
    } else if (std::strcmp(argv[i], "-r") == 0) {
      if (!ParseInt(v, 1, kMaxRuns, &runs)) return Usage("bad -r");
    } else if (std::strcmp(argv[i], "-i") == 0) {
      if (!ParseInt(v, 1, 100000, &iters)) return Usage("bad -i");
    } else {
      return Usage("unknown option");
    }
  }
  const size_t count = static_cast<size_t>(kib) * 1024 / sizeof(float);

  const std::vector<int> cpus = hcomm::floor_tools::AllowedCpus();
  const bool bound = procs <= static_cast<int>(cpus.size());

  std::vector<int> listeners(procs);
  std::vector<sockaddr_in> addrs(procs);
  for (int r = 0; r < procs; ++r) {
    sockaddr_in& a = addrs[r];
    std::memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    listeners[r] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listeners[r] < 0 || bind(listeners[r], reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(listeners[r], reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
        listen(listeners[r], kMaxProcs) != 0) {
      std::perror("tcp_floor: listen on 127.0.0.1");
      return 1;
    }
  }
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("tcp_floor: mmap");
    return 1;
  }
  Shared* s = new (mem) Shared();
  // A failed process leaves its partners waiting at the barrier (or on
  // sockets that close as it exits): RunProcesses stops them all.
  const bool ok = hcomm::floor_tools::RunProcesses(procs, kTimeLimitS, "tcp_floor", [&](int r) {
    return Child(s, addrs, listeners, r, procs, count, runs, iters, bound ? cpus[r] : -1);
  });
  if (!ok) return 1;

  std::vector<double> slowest(runs, 0.0);
  for (int r = 0; r < runs; ++r) {
    for (int p = 0; p < procs; ++p) slowest[r] = std::max(slowest[r], s->ns[p][r]);
  }
  std::sort(slowest.begin(), slowest.end());
  std::printf("tcp_floor: %d processes, %d KiB float32 sum, halving-doubling over loopback TCP, "
              "%s\n",
              procs, kib, bound ? "one per CPU" : "unbound (more processes than CPUs)");
  std::printf("best_us %.1f median_us %.1f\n", slowest.front() / 1e3, slowest[runs / 2] / 1e3);
  return 0;
}
