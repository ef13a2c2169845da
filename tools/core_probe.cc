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
// Prints one line: "core_probe cpus 0 1 one_way_ns 71.4". Exit status 2 on
// bad arguments, 1 when a thread cannot be pinned.
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
  const long total = kBatches * kRoundTrips;
  std::thread echo([&] {
    if (!Pin(b)) pinned.store(false);
    for (long i = 1; i <= total; ++i) {
      while (ping.value.load(std::memory_order_acquire) != i) {
        if (!pinned.load(std::memory_order_relaxed)) return;
      }
      pong.value.store(i, std::memory_order_release);
    }
  });
  if (!Pin(a)) pinned.store(false);
  std::vector<double> one_way_ns;
  long i = 0;
  for (int batch = 0; batch < kBatches && pinned.load(); ++batch) {
    const auto start = std::chrono::steady_clock::now();
    for (long k = 0; k < kRoundTrips; ++k) {
      ++i;
      ping.value.store(i, std::memory_order_release);
      while (pong.value.load(std::memory_order_acquire) != i) {
        if (!pinned.load(std::memory_order_relaxed)) break;
      }
    }
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    one_way_ns.push_back(took.count() / kRoundTrips / 2);
  }
  if (!pinned.load()) {
    ping.value.store(total, std::memory_order_release);  // let the echo thread out
    echo.join();
    std::fprintf(stderr, "core_probe: cannot pin threads to CPUs %d and %d\n", a, b);
    return 1;
  }
  echo.join();
  std::nth_element(one_way_ns.begin(), one_way_ns.begin() + kBatches / 2, one_way_ns.end());
  std::printf("core_probe cpus %d %d one_way_ns %.1f\n", a, b, one_way_ns[kBatches / 2]);
  return 0;
}
