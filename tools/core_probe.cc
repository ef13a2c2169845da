// core_probe: how far apart two CPUs are, as the caches see it.
//
// Two threads, pinned to CPUs A and B, hand one cache line back and forth
// and report the median one-way time. On a virtual machine this moves when
// the host places the virtual CPUs anew: two CPUs behind one L3 cache hand a
// line over in well under 100 ns, two behind different caches take several
// times that, and every shared-memory transfer between them slows alike.
// tools/compare_peers.sh runs it before each round so that a reader can tell
// a slow round of the machine from a slow library.
//
//   core_probe            # CPUs 0 and 1
//   core_probe 2 5        # CPUs 2 and 5
//
// Prints one line: "core_probe cpus 0 1 one_way_ns 71.4". Gives up after
// about two seconds (CPUs busy with other work hand the line over only when
// both threads happen to run) with the batches done by then, or none:
// exit status 1, as when a thread cannot be pinned; 2 on bad arguments.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

constexpr int kBatches = 9;
constexpr long kRoundTrips = 20000;  // per batch
constexpr auto kGiveUpAfter = std::chrono::seconds(2);

struct alignas(64) Line {
  std::atomic<long> value{0};
};

bool Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

bool ParseCpu(const char* s, int* out) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 0 || v >= CPU_SETSIZE) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int a = 0, b = 1;
  if (argc != 1 && argc != 3) {
    std::fprintf(stderr, "usage: core_probe [CPU_A CPU_B]\n");
    return 2;
  }
  if (argc == 3 && (!ParseCpu(argv[1], &a) || !ParseCpu(argv[2], &b) || a == b)) {
    std::fprintf(stderr, "core_probe: CPU_A and CPU_B must be two different CPU numbers\n");
    return 2;
  }
  Line ping, pong;
  std::atomic<bool> pinned{true};
  std::atomic<bool> running{true};  // false: both threads stop
  std::thread echo([&] {
    if (!Pin(b)) {
      pinned.store(false);
      running.store(false);
    }
    for (long i = 1;; ++i) {
      while (ping.value.load(std::memory_order_acquire) != i) {
        if (!running.load(std::memory_order_relaxed)) return;
      }
      pong.value.store(i, std::memory_order_release);
    }
  });
  if (!Pin(a)) {
    pinned.store(false);
    running.store(false);
  }
  const auto give_up = std::chrono::steady_clock::now() + kGiveUpAfter;
  std::vector<double> one_way_ns;
  long i = 0;
  for (int batch = 0; batch < kBatches && running.load(); ++batch) {
    const auto start = std::chrono::steady_clock::now();
    for (long k = 0; k < kRoundTrips && running.load(std::memory_order_relaxed); ++k) {
      ++i;
      ping.value.store(i, std::memory_order_release);
      while (pong.value.load(std::memory_order_acquire) != i) {
        if (!running.load(std::memory_order_relaxed)) break;
      }
      if (k % 1024 == 1023 && std::chrono::steady_clock::now() > give_up) running.store(false);
    }
    if (!running.load()) break;  // an unfinished batch does not count
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    one_way_ns.push_back(took.count() / kRoundTrips / 2);
  }
  running.store(false);
  echo.join();
  if (!pinned.load()) {
    std::fprintf(stderr, "core_probe: cannot pin threads to CPUs %d and %d\n", a, b);
    return 1;
  }
  if (one_way_ns.empty()) {
    std::fprintf(stderr,
                 "core_probe: no batch of %ld round trips finished within %lld s (CPUs %d and "
                 "%d busy?)\n",
                 kRoundTrips, static_cast<long long>(kGiveUpAfter.count()), a, b);
    return 1;
  }
  const size_t mid = one_way_ns.size() / 2;
  std::nth_element(one_way_ns.begin(), one_way_ns.begin() + mid, one_way_ns.end());
  std::printf("core_probe cpus %d %d one_way_ns %.1f\n", a, b, one_way_ns[mid]);
  return 0;
}
