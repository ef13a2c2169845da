// exchange_floor: what moving an allreduce's bytes between processes of one
// host takes, with nothing else done: the floor under any allreduce whose
// ranks keep their vectors in private memory, as the ranks of hcomm, Open
// MPI, MPICH and Gloo do.
//
// N processes form a ring. Each moves 2(N-1)/N x S bytes of its private
// vector into its right neighbour's private output (S bytes for 2: what a
// rank of a 2-rank allreduce of S bytes must take in from the other, half
// of the other's vector and half of the result), in one of two ways:
//
//   shm  through K chunk buffers in shared memory: the sender copies each
//        chunk in (memcpy), the receiver copies it out with non-temporal
//        stores (hcomm's StreamCopy). Two passes per byte, one on each CPU:
//        the least that any design staging data in shared memory does.
//   cma  the receiver reads the sender's vector into its output with
//        process_vm_readv, 256 KiB a call: one copy per byte, in the kernel.
//
// Every process sends and receives at once, a chunk at a time, as the ranks
// of an allreduce do. No reduction, matching, tags or timeouts: an
// allreduce does all of this and more. Set the result beside `hcomm_bench
// allreduce` and `hcomm_bench copy_stream` on the same ranks and size: both
// floors bound an allreduce from below, the copy by memory and this one by
// the exchange between CPUs.
//
//   exchange_floor                       # 2 processes, 16 MiB, both ways
//   exchange_floor -n 2 -k 65536 -m shm  # 64 MiB, shared memory only
//
// Processes are bound one to a CPU when there are CPUs enough and left to
// the scheduler otherwise (they then yield while they wait). A run times
// -i exchanges, from the first process's start (after a barrier) to the
// last one's end; for each way, prints the best and the median run's time
// per exchange. The bytes of each way's first exchange are checked.
//
// Exit status: 0; 1 when a process fails (a read refused, wrong bytes) or
// the whole takes over 300 s; 2 on bad arguments.
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "algorithms/kernels/shared_copy.h"
#include "core/base/spin.h"
#include "tools/floor_procs.h"

namespace {

using hcomm::floor_tools::ParseInt;

constexpr int kMaxProcs = 64;
constexpr int kMaxRuns = 64;
constexpr int kTimeLimitS = 300;  // the whole measurement
constexpr int kWindow = 4;        // chunks in flight per sender
constexpr size_t kCmaPiece = 256 * 1024;
constexpr size_t kLine = 64;

enum Way { kShm = 0, kCma = 1 };
const char* const kWayName[] = {"shm", "cma"};

// One flag per cache line.
struct alignas(kLine) Flag {
  std::atomic<int64_t> v;
};

// In a shared anonymous mapping: the run barrier, each process's pid and
// the times it started and ended each run, and each sender's chunk flags
// (full: the last chunk the sender put in buffer b; done: the last its
// receiver took out).
struct Shared {
  std::atomic<int> arrived;
  pid_t pid[kMaxProcs];
  int64_t start_ns[2][kMaxProcs][kMaxRuns];
  int64_t end_ns[2][kMaxProcs][kMaxRuns];
  Flag full[kMaxProcs][kWindow];
  Flag done[kMaxProcs][kWindow];
};

// Waits for `ready`: spinning with one process per CPU, yielding without.
template <typename Ready>
void WaitFor(Ready ready, bool spin) {
  while (!ready()) {
    if (spin) {
      hcomm::CpuRelax();
    } else {
      sched_yield();
    }
  }
}

void Barrier(Shared* s, int procs, int k, bool spin) {
  s->arrived.fetch_add(1, std::memory_order_acq_rel);
  WaitFor([&] { return s->arrived.load(std::memory_order_acquire) >= procs * k; }, spin);
}

int Usage(const char* why) {
  std::fprintf(stderr,
               "exchange_floor: %s\nusage: exchange_floor [-n PROCS 2-%d] [-k KIB 1-1048576] "
               "[-m shm|cma|both] [-c CHUNK_KIB 4-4096] [-r RUNS 1-%d] [-i ITERS 1-100000]\n",
               why, kMaxProcs, kMaxRuns);
  return 2;
}

struct Job {
  Shared* s;
  char* ring;       // kWindow chunks per process, shared
  char* in;         // private (each process's own copy, same address)
  char* out;        // private
  size_t bytes;     // moved per process per exchange
  size_t chunk;
  int procs, runs, iters;
  bool spin;
  bool ways[2];
};

// The byte at offset i of process p's vector.
inline char Pattern(int p, size_t i) { return static_cast<char>(p * 31 + (i >> 6) * 7 + i); }

// One exchange through the shared chunks; `seq0` numbers its first chunk.
void ExchangeShm(const Job& j, int me, int64_t seq0) {
  Shared* s = j.s;
  const int left = (me + j.procs - 1) % j.procs;
  char* mine = j.ring + static_cast<size_t>(me) * kWindow * j.chunk;
  const char* theirs = j.ring + static_cast<size_t>(left) * kWindow * j.chunk;
  const size_t chunks = (j.bytes + j.chunk - 1) / j.chunk;
  for (size_t c = 0; c < chunks; ++c) {
    // Chunk seq goes in buffer seq % kWindow, whose last one was seq - kWindow.
    const int64_t seq = seq0 + static_cast<int64_t>(c);
    const int b = static_cast<int>(seq % kWindow);
    const size_t o = c * j.chunk, n = std::min(j.chunk, j.bytes - o);
    // The right neighbour has taken that one out.
    WaitFor([&] { return s->done[me][b].v.load(std::memory_order_acquire) >= seq - kWindow; },
            j.spin);
    std::memcpy(mine + b * j.chunk, j.in + o, n);
    s->full[me][b].v.store(seq, std::memory_order_release);
    WaitFor([&] { return s->full[left][b].v.load(std::memory_order_acquire) >= seq; }, j.spin);
    hcomm::StreamCopy(j.out + o, theirs + b * j.chunk, n);
    s->done[left][b].v.store(seq, std::memory_order_release);
  }
}

// One exchange by cross-memory attach: the left neighbour's vector, read
// into the output (the vectors do not change, so no flags are needed).
bool ExchangeCma(const Job& j, int me) {
  const int left = (me + j.procs - 1) % j.procs;
  const pid_t pid = j.s->pid[left];
  for (size_t o = 0; o < j.bytes;) {
    const size_t n = std::min(kCmaPiece, j.bytes - o);
    iovec l = {j.out + o, n};
    iovec r = {j.in + o, n};
    const ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      std::fprintf(stderr, "exchange_floor: process %d: process_vm_readv from process %d: %s\n",
                   me, left, got < 0 ? std::strerror(errno) : "nothing read");
      return false;
    }
    o += static_cast<size_t>(got);
  }
  return true;
}

bool CheckOut(const Job& j, int me, Way w) {
  const int left = (me + j.procs - 1) % j.procs;
  for (size_t i = 0; i < j.bytes; ++i) {
    if (j.out[i] != Pattern(left, i)) {
      std::fprintf(stderr, "exchange_floor: process %d (%s): byte %zu is wrong\n", me,
                   kWayName[w], i);
      return false;
    }
  }
  std::memset(j.out, 0, j.bytes);
  return true;
}

int Child(const Job& j, int me, int cpu) {
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
      std::fprintf(stderr, "exchange_floor: process %d: bind to CPU %d: %s\n", me, cpu,
                   std::strerror(errno));
      return 1;
    }
  }
  // Lets the neighbour read this process's memory where Yama restricts
  // ptrace to descendants.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  for (size_t i = 0; i < j.bytes; ++i) j.in[i] = Pattern(me, i);  // this process's own pages
  std::memset(j.out, 0, j.bytes);
  j.s->pid[me] = getpid();
  int k = 0;  // barriers passed
  Barrier(j.s, j.procs, ++k, j.spin);
  const size_t chunks = (j.bytes + j.chunk - 1) / j.chunk;
  int64_t seq = 0;
  for (Way w : {kShm, kCma}) {
    if (!j.ways[w]) continue;
    if (w == kShm) {
      ExchangeShm(j, me, seq);
      seq += static_cast<int64_t>(chunks);
    } else if (!ExchangeCma(j, me)) {
      return 1;
    }
    if (!CheckOut(j, me, w)) return 1;
    for (int run = 0; run < j.runs; ++run) {
      Barrier(j.s, j.procs, ++k, j.spin);
      j.s->start_ns[w][me][run] = hcomm::MonoNs();
      for (int i = 0; i < j.iters; ++i) {
        if (w == kShm) {
          ExchangeShm(j, me, seq);
          seq += static_cast<int64_t>(chunks);
        } else if (!ExchangeCma(j, me)) {
          return 1;
        }
      }
      j.s->end_ns[w][me][run] = hcomm::MonoNs();
    }
    // Nobody reads this process's vector once it has left the last barrier.
    Barrier(j.s, j.procs, ++k, j.spin);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int procs = 2, kib = 16384, runs = 5, iters = 0, chunk_kib = 256;
  bool ways[2] = {true, true};
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) return Usage("an option without its value");
    const char* v = argv[i + 1];
    if (std::strcmp(argv[i], "-n") == 0) {
      if (!ParseInt(v, 2, kMaxProcs, &procs)) return Usage("bad -n");
    } else if (std::strcmp(argv[i], "-k") == 0) {
      if (!ParseInt(v, 1, 1 << 20, &kib)) return Usage("bad -k");
    } else if (std::strcmp(argv[i], "-c") == 0) {
      if (!ParseInt(v, 4, 4096, &chunk_kib)) return Usage("bad -c");
    } else if (std::strcmp(argv[i], "-r") == 0) {
      if (!ParseInt(v, 1, kMaxRuns, &runs)) return Usage("bad -r");
    } else if (std::strcmp(argv[i], "-i") == 0) {
      if (!ParseInt(v, 1, 100000, &iters)) return Usage("bad -i");
    } else if (std::strcmp(argv[i], "-m") == 0) {
      if (std::strcmp(v, "shm") == 0) {
        ways[kCma] = false;
      } else if (std::strcmp(v, "cma") == 0) {
        ways[kShm] = false;
      } else if (std::strcmp(v, "both") != 0) {
        return Usage("bad -m");
      }
    } else {
      return Usage("unknown option");
    }
  }
  const size_t vector = static_cast<size_t>(kib) * 1024;
  // 2(N-1)/N x S, in whole cache lines.
  const size_t bytes = std::max(kLine, vector * 2 * (procs - 1) / procs / kLine * kLine);
  // About 5e7 bytes a run, as hcomm_bench's runs, unless -i says.
  if (iters == 0) iters = static_cast<int>(std::clamp<size_t>(50'000'000 / bytes, 1, 1000));

  const std::vector<int> cpus = hcomm::floor_tools::AllowedCpus();
  const bool bound = procs <= static_cast<int>(cpus.size());

  Job j;
  j.bytes = bytes;
  j.chunk = static_cast<size_t>(chunk_kib) * 1024;
  j.procs = procs;
  j.runs = runs;
  j.iters = iters;
  j.spin = bound;
  j.ways[kShm] = ways[kShm];
  j.ways[kCma] = ways[kCma];
  const size_t ring_bytes = static_cast<size_t>(procs) * kWindow * j.chunk;
  void* mem = mmap(nullptr, sizeof(Shared) + ring_bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  // The vectors are mapped before fork, so every process has its own at
  // the same address: the neighbour's is found there.
  void* in = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* out = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED || in == MAP_FAILED || out == MAP_FAILED) {
    std::perror("exchange_floor: mmap");
    return 1;
  }
  j.s = new (mem) Shared();
  for (int p = 0; p < procs; ++p) {
    for (int b = 0; b < kWindow; ++b) {
      j.s->full[p][b].v.store(-1);
      j.s->done[p][b].v.store(-1);
    }
  }
  j.ring = static_cast<char*>(mem) + sizeof(Shared);
  j.in = static_cast<char*>(in);
  j.out = static_cast<char*>(out);

  // A failed process leaves its neighbours waiting: RunProcesses stops
  // them all.
  const bool ok = hcomm::floor_tools::RunProcesses(procs, kTimeLimitS, "exchange_floor",
                                                   [&](int r) {
                                                     return Child(j, r, bound ? cpus[r] : -1);
                                                   });
  if (!ok) return 1;

  std::printf("exchange_floor: %d processes, %d KiB vector, %zu bytes to the next process, %s\n",
              procs, kib, bytes, bound ? "one per CPU" : "unbound (more processes than CPUs)");
  for (Way w : {kShm, kCma}) {
    if (!ways[w]) continue;
    // A run lasts from the first start to the last end: processes that
    // share a CPU may take turns rather than run together.
    std::vector<double> slowest(runs, 0.0);
    for (int r = 0; r < runs; ++r) {
      int64_t first = j.s->start_ns[w][0][r], last = j.s->end_ns[w][0][r];
      for (int p = 1; p < procs; ++p) {
        first = std::min(first, j.s->start_ns[w][p][r]);
        last = std::max(last, j.s->end_ns[w][p][r]);
      }
      slowest[r] = static_cast<double>(last - first) / iters;
    }
    std::sort(slowest.begin(), slowest.end());
    std::printf("%s best_us %.1f median_us %.1f\n", kWayName[w], slowest.front() / 1e3,
                slowest[runs / 2] / 1e3);
  }
  return 0;
}
