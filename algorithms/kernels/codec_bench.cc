// Throughput of the compression codecs, one line per operation, in GB/s of
// float32 input (1e9 bytes of the uncompressed message per second), beside
// what a 1 Gbit/s link carries (0.125 GB/s of wire bytes):
//   EncodeHalf / DecodeHalf / AccumulateHalf, fp16 and bf16, 16 MiB of
//     float32 (4 Mi elements), on each implementation this CPU runs;
//   DeltaCodec Encode / Decode, 16 MiB with 1% of the bytes
//     changed at random places, at level 1, with the frame's size.
// Each figure is the median of 7 timed runs of about 0.2 s (--quick: 3 runs
// of about 0.05 s); buffers are touched before timing.
//
//   bazel run -c opt //algorithms/kernels:codec_bench [-- --quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "algorithms/kernels/delta.h"
#include "algorithms/kernels/half.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median GB/s (of `bytes` input per call) over `runs` timed runs of about
// `run_seconds` each.
double MeasureGBps(size_t bytes, int runs, double run_seconds, const std::function<void()>& call) {
  call();  // warm up (and let the codecs make their contexts)
  size_t reps = 1;
  for (;;) {
    const auto t0 = Clock::now();
    for (size_t r = 0; r < reps; ++r) call();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s >= run_seconds / 4 || reps >= (size_t{1} << 20)) {
      reps = std::max<size_t>(1, static_cast<size_t>(reps * run_seconds / std::max(s, 1e-9)));
      break;
    }
    reps *= 2;
  }
  std::vector<double> rates;
  for (int run = 0; run < runs; ++run) {
    const auto t0 = Clock::now();
    for (size_t r = 0; r < reps; ++r) call();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(bytes) * static_cast<double>(reps) / s / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// GB/s of input against the 0.125 GB/s of a 1 Gbit/s link: how many such
// links one core keeps fed.
void Print(const char* what, double gbps, const char* extra = "") {
  std::printf("%-36s %7.2f GB/s  (%5.1fx a 1 Gbit/s link)%s\n", what, gbps, gbps / 0.125, extra);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int runs = quick ? 3 : 7;
  const double run_seconds = quick ? 0.05 : 0.2;
  constexpr size_t kBytes = size_t{16} << 20;
  constexpr size_t kCount = kBytes / sizeof(float);

  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kCount), acc(kCount, 0.0f), back(kCount);
  for (float& v : x) v = normal(rng);
  std::vector<uint16_t> wire(kCount);

  for (const char* isa : {"avx2", "scalar"}) {
    if (!hcomm::ForceHalfKernelIsaForTesting(isa)) {
      std::printf("half %s: not available on this CPU or build\n", isa);
      continue;
    }
    for (hcomm::HalfFormat f : {hcomm::HalfFormat::kFp16, hcomm::HalfFormat::kBf16}) {
      char name[64];
      const char* fname = hcomm::HalfFormatName(f);
      std::snprintf(name, sizeof name, "EncodeHalf %s %s 16 MiB", fname, isa);
      Print(name, MeasureGBps(kBytes, runs, run_seconds, [&] {
              if (!hcomm::EncodeHalf(f, x.data(), kCount, wire.data())) std::abort();
            }));
      std::snprintf(name, sizeof name, "DecodeHalf %s %s 16 MiB", fname, isa);
      Print(name, MeasureGBps(kBytes, runs, run_seconds,
                              [&] { hcomm::DecodeHalf(f, wire.data(), kCount, back.data()); }));
      std::snprintf(name, sizeof name, "AccumulateHalf %s %s 16 MiB", fname, isa);
      Print(name, MeasureGBps(kBytes, runs, run_seconds,
                              [&] { hcomm::AccumulateHalf(f, wire.data(), kCount, acc.data()); }));
    }
  }

  // Delta: 16 MiB, 1% of the bytes changed at random places.
  std::vector<unsigned char> base(kBytes), msg;
  std::mt19937_64 rng64(2);
  for (auto& b : base) b = static_cast<unsigned char>(rng64());
  msg = base;
  for (size_t k = 0; k < kBytes / 100; ++k) {
    msg[rng64() % kBytes] ^= static_cast<unsigned char>(1 + rng64() % 255);
  }
  hcomm::DeltaCodec codec;
  std::vector<unsigned char> frame(hcomm::DeltaBound(kBytes));
  size_t frame_len = 0;
  const double enc = MeasureGBps(kBytes, runs, run_seconds, [&] {
    absl::StatusOr<size_t> len =
        codec.Encode(base.data(), msg.data(), kBytes, frame.data(), frame.size());
    if (!len.ok()) std::abort();
    frame_len = *len;
  });
  char extra[96];
  std::snprintf(extra, sizeof extra, "  frame %zu bytes, %.2f%% of n", frame_len,
                100.0 * static_cast<double>(frame_len) / static_cast<double>(kBytes));
  Print("EncodeDelta 16 MiB 1% changed", enc, extra);
  // Into a buffer of its own: in place, the second call would decode against
  // the message instead of the base and fail its checksum. Both ways read
  // the base and write the output once.
  std::vector<unsigned char> out(kBytes);
  const double dec = MeasureGBps(kBytes, runs, run_seconds, [&] {
    if (!codec.Decode(base.data(), frame.data(), frame_len, out.data(), kBytes).ok()) {
      std::abort();
    }
  });
  Print("DecodeDelta 16 MiB 1% changed", dec);
  if (out != msg) std::abort();
  return 0;
}
