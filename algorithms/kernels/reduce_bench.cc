// Throughput of the float32 sum kernel per ISA level, in GB/s of output
// (1e9 bytes of dst per second, as in shared/peers/BASELINES.md section 1),
// for 4K, 256K, 4M and 64M byte buffers:
//   c = a + b  Reduce2 out of place (the baseline's "sum c=a+b")
//   a += b     ReduceInto in place
// and memcpy of the same size for reference. Each cell is the median of 7
// timed runs of about 25 ms each; buffers are touched before timing.
//
//   bazel run -c opt //algorithms:reduce_bench
//   bazel-bin/algorithms/reduce_bench [--quick]   # --quick: 3 runs of ~5 ms
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "algorithms/kernels/reduce.h"

namespace {

using Clock = std::chrono::steady_clock;

// A page-aligned, pre-touched float buffer.
class Buffer {
 public:
  explicit Buffer(size_t bytes) : bytes_(bytes) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, bytes) != 0) std::abort();
    data_ = static_cast<float*>(p);
    for (size_t i = 0; i < bytes / sizeof(float); ++i) {
      data_[i] = static_cast<float>(i % 1000) * 0.001f;
    }
  }
  ~Buffer() { std::free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  float* data() { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  float* data_;
};

// Median GB/s (of `bytes` output per call) over `runs` timed runs of about
// `run_seconds` each.
double MeasureGBps(size_t bytes, int runs, double run_seconds,
                   const std::function<void()>& call) {
  // Calibrate the repetitions per run.
  size_t reps = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (size_t r = 0; r < reps; ++r) call();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s >= run_seconds / 4 || reps >= (size_t{1} << 30)) {
      reps = std::max<size_t>(1, static_cast<size_t>(reps * run_seconds /
                                                     std::max(s, 1e-9)));
      break;
    }
    reps *= 4;
  }
  std::vector<double> rates;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = Clock::now();
    for (size_t r = 0; r < reps; ++r) call();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(bytes) * reps / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int runs = quick ? 3 : 7;
  const double run_seconds = quick ? 0.005 : 0.025;
  const size_t kSizes[] = {size_t{4} << 10, size_t{256} << 10,
                           size_t{4} << 20, size_t{64} << 20};
  const char* kSizeNames[] = {"4K", "256K", "4M", "64M"};

  std::printf("float32 sum, GB/s of output (median of %d runs)\n", runs);
  std::printf("%-7s %-6s %10s %10s %10s\n", "isa", "size", "c=a+b", "a+=b",
              "memcpy");
  for (const char* isa : {"scalar", "avx2", "avx512"}) {
    if (!hcomm::ForceKernelIsaForTesting(isa)) {
      std::printf("%-7s (not supported by this CPU or build)\n", isa);
      continue;
    }
    for (size_t k = 0; k < sizeof(kSizes) / sizeof(kSizes[0]); ++k) {
      const size_t bytes = kSizes[k];
      const size_t count = bytes / sizeof(float);
      Buffer a(bytes), b(bytes), c(bytes);
      const double sum2 = MeasureGBps(bytes, runs, run_seconds, [&] {
        hcomm::Reduce2(c.data(), a.data(), b.data(), count,
                       hcomm::DataType::kFloat32, hcomm::ReduceOp::kSum);
      });
      // a += b grows a; the values stay finite over any practical run.
      const double into = MeasureGBps(bytes, runs, run_seconds, [&] {
        hcomm::ReduceInto(a.data(), b.data(), count, hcomm::DataType::kFloat32,
                          hcomm::ReduceOp::kSum);
      });
      const double copy = MeasureGBps(bytes, runs, run_seconds, [&] {
        std::memcpy(c.data(), a.data(), bytes);
        asm volatile("" : : "r"(c.data()) : "memory");
      });
      std::printf("%-7s %-6s %10.1f %10.1f %10.1f\n", isa, kSizeNames[k], sum2,
                  into, copy);
      std::fflush(stdout);
    }
  }
  return 0;
}
