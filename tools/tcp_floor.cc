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
// With -u BYTES (2 processes), the floor under priorities over TCP instead:
// the -k allreduce runs on one connection in a thread of each process while
// an exchange of BYTES (what a 2-rank allreduce of them sends) goes over a
// second connection, started a quarter of the bulk's time in (the bulk is
// timed alone first). Two connections are the most any TCP design can give
// urgent bytes: nothing of the bulk is queued ahead of them in a socket.
// What is left is the CPUs, busy copying the bulk through the kernel and
// reducing it. The processes are left unbound (as `hcomm_run` leaves 2
// ranks on 2 CPUs). Prints the best and the median of the urgent
// exchange's time, and the bulk's, alone and with it; set beside `hcomm_bench
// priority` on the same sizes (HCOMM_TRANSPORTS=tcp).
//
//   tcp_floor -u 8 -k 262144 -r 9  # 8 bytes while 256 MiB are in flight
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
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
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
  // -u only: the bulk's time with the urgent exchange, and alone.
  double bulk_ns[kMaxProcs][kMaxRuns];
  double alone_ns[kMaxProcs];
};

void Barrier(Shared* s, int procs, int k) {
  s->arrived.fetch_add(1, std::memory_order_acq_rel);
  while (s->arrived.load(std::memory_order_acquire) < procs * k) sched_yield();
}

int Usage(const char* why) {
  std::fprintf(stderr,
               "tcp_floor: %s\nusage: tcp_floor [-n PROCS 2-%d, a power of two] "
               "[-k KIB 1-1048576] [-r RUNS 1-%d] [-i ITERS 1-100000] [-u BYTES 1-65536]\n",
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

// One connection per partner me ^ mask (the lower rank listens), filed by
// the mask's bit. False when one fails.
bool Connect(const std::vector<sockaddr_in>& addrs, const std::vector<int>& listeners, int me,
             int procs, std::vector<int>* fds) {
  std::vector<int>& fd_of_mask_bit = *fds;
  fd_of_mask_bit.clear();
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
        return Fail("connect", me);
      }
    } else {
      ++to_accept;
    }
    fd_of_mask_bit.push_back(fd);
  }
  for (int i = 0; i < to_accept; ++i) {
    const int c = accept4(listeners[me], nullptr, nullptr, SOCK_CLOEXEC);
    int id = -1;
    if (c < 0 || read(c, &id, sizeof id) != sizeof id) return Fail("accept", me);
    // Partners connect in any order: file each by its rank.
    for (int mask = procs / 2, b = 0; mask >= 1; mask /= 2, ++b) {
      if ((me ^ mask) == id) fd_of_mask_bit[b] = c;
    }
  }
  for (int fd : fd_of_mask_bit) {
    if (fd < 0) {
      std::fprintf(stderr, "tcp_floor: process %d: a partner did not connect\n", me);
      return false;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return true;
}

void SleepUntilNs(int64_t t) {
  const int64_t left = t - hcomm::MonoNs();
  if (left <= 0) return;
  timespec ts = {static_cast<time_t>(left / 1'000'000'000), static_cast<long>(left % 1'000'000'000)};
  nanosleep(&ts, nullptr);
}

// -u: an exchange of `small` bytes on one connection while the allreduce
// of `count` floats runs on another, in a thread of its own (2 processes).
int UrgentChild(Shared* s, const std::vector<sockaddr_in>& addrs,
                const std::vector<int>& listeners, int me, size_t count, size_t small, int runs) {
  std::vector<int> bulk_fd, urgent_fd;
  if (!Connect(addrs, listeners, me, 2, &bulk_fd) || !Connect(addrs, listeners, me, 2, &urgent_fd)) {
    return 1;
  }
  std::vector<float> v(count, static_cast<float>(me + 1)), tmp(count / 2);
  std::vector<char> out(small, static_cast<char>(me + 1)), in(small);
  int k = 0;
  for (int warm = 0; warm < 2; ++warm) {  // the first also touches the memory
    Barrier(s, 2, ++k);
    const int64_t t0 = hcomm::MonoNs();
    if (!AllReduce(v.data(), tmp.data(), count, me, 2, bulk_fd)) return 1;
    s->alone_ns[me] = static_cast<double>(hcomm::MonoNs() - t0);
  }
  Barrier(s, 2, ++k);
  const int64_t delay = static_cast<int64_t>(std::max(s->alone_ns[0], s->alone_ns[1]) / 4);
  for (int run = 0; run < runs; ++run) {
    Barrier(s, 2, ++k);
    const int64_t t0 = hcomm::MonoNs();
    bool bulk_ok = false;
    int64_t bulk_end = 0;
    std::thread bulk([&] {
      bulk_ok = AllReduce(v.data(), tmp.data(), count, me, 2, bulk_fd);
      bulk_end = hcomm::MonoNs();
    });
    SleepUntilNs(t0 + delay);
    const int64_t t1 = hcomm::MonoNs();
    const bool urgent_ok = Exchange(urgent_fd[0], out.data(), in.data(), small, me);
    s->ns[me][run] = static_cast<double>(hcomm::MonoNs() - t1);
    bulk.join();
    if (!urgent_ok || !bulk_ok) return 1;
    s->bulk_ns[me][run] = static_cast<double>(bulk_end - t0);
    if (in[0] != static_cast<char>(2 - me) || in[small - 1] != static_cast<char>(2 - me)) {
      std::fprintf(stderr, "tcp_floor: process %d: the urgent bytes came wrong\n", me);
      return 1;
    }
  }
  return 0;
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
  std::vector<int> fd_of_mask_bit;
  if (!Connect(addrs, listeners, me, procs, &fd_of_mask_bit)) return 1;
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
  int procs = 4, kib = 1024, runs = 5, iters = 50, urgent = 0;
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
    } else if (std::strcmp(argv[i], "-u") == 0) {
      if (!ParseInt(v, 1, 65536, &urgent)) return Usage("bad -u");
    } else {
      return Usage("unknown option");
    }
  }
  if (urgent > 0 && procs != 2) {
    bool set = false;  // -u takes 2 processes; said when another -n was given
    for (int i = 1; i < argc; i += 2) set |= std::strcmp(argv[i], "-n") == 0;
    if (set) return Usage("-u runs 2 processes (-n 2)");
    procs = 2;
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
    if (urgent > 0) return UrgentChild(s, addrs, listeners, r, count, urgent, runs);
    return Child(s, addrs, listeners, r, procs, count, runs, iters, bound ? cpus[r] : -1);
  });
  if (!ok) return 1;
  if (urgent > 0) {
    std::vector<double> small(runs), bulk(runs);
    for (int r = 0; r < runs; ++r) {
      small[r] = std::max(s->ns[0][r], s->ns[1][r]);
      bulk[r] = std::max(s->bulk_ns[0][r], s->bulk_ns[1][r]);
    }
    std::sort(small.begin(), small.end());
    std::sort(bulk.begin(), bulk.end());
    std::printf("tcp_floor: 2 processes, a %d-byte exchange on one loopback TCP connection while "
                "a %d KiB float32 sum runs on another, unbound\n",
                urgent, kib);
    std::printf("urgent_best_us %.1f urgent_median_us %.1f bulk_alone_us %.1f bulk_median_us "
                "%.1f\n",
                small.front() / 1e3, small[runs / 2] / 1e3,
                std::max(s->alone_ns[0], s->alone_ns[1]) / 1e3, bulk[runs / 2] / 1e3);
    return 0;
  }

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
