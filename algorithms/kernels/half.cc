// float32 <-> fp16/bf16 chunk conversion (half.h): a portable scalar loop
// over reduce.h's element conversions, and AVX2 + F16C loops chosen at run
// time. The vector functions carry target attributes (as shared_copy.cc's
// streamed copies do), so this file builds without -m flags and runs on any
// x86-64 CPU; the dispatch below calls them only where the CPU has both
// extensions.
#include "algorithms/kernels/half.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "algorithms/kernels/reduce.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define HCOMM_HALF_HAVE_AVX2 1
#endif

namespace hcomm {
namespace {

// Bits of |x| from which a finite float32 rounds to Inf: fp16 65520 (the
// midpoint between 65504 and 2^16, a tie that goes to the even Inf), bf16
// 0x1.ffp127 (the midpoint between 0x1.fep127 and 2^128, likewise).
constexpr uint32_t kFp16OverflowBits = 0x477ff000u;
constexpr uint32_t kBf16OverflowBits = 0x7f7f8000u;
constexpr uint32_t kInfBits = 0x7f800000u;

inline uint32_t OverflowBits(HalfFormat f) {
  return f == HalfFormat::kFp16 ? kFp16OverflowBits : kBf16OverflowBits;
}

inline bool ValidFormat(HalfFormat f) { return f == HalfFormat::kFp16 || f == HalfFormat::kBf16; }

// ---- portable scalar loops ----------------------------------------------------

bool EncodeScalar(HalfFormat f, const float* in, size_t n, uint16_t* out) {
  const uint32_t overflow = OverflowBits(f);
  bool fits = true;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &in[i], sizeof bits);
    const uint32_t abs = bits & 0x7fffffffu;
    fits &= !(abs >= overflow && abs < kInfBits);
    out[i] = f == HalfFormat::kFp16 ? FloatToHalf(in[i]) : FloatToBFloat16(in[i]);
  }
  return fits;
}

void DecodeScalar(HalfFormat f, const uint16_t* in, size_t n, float* out) {
  if (f == HalfFormat::kFp16) {
    for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(in[i]);
  }
}

void AccumulateScalar(HalfFormat f, const uint16_t* in, size_t n, float* acc) {
  if (f == HalfFormat::kFp16) {
    for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + HalfToFloat(in[i]);
  } else {
    for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + BFloat16ToFloat(in[i]);
  }
}

// ---- AVX2 + F16C loops --------------------------------------------------------
//
// Eight elements per step. A tail of fewer than eight goes through the same
// step on a zero-padded copy on the stack, so it takes the same instructions
// as the body (zeros neither overflow nor disturb the sums).

#ifdef HCOMM_HALF_HAVE_AVX2
#define HCOMM_HALF_TARGET __attribute__((target("avx2,f16c")))
#define HCOMM_HALF_INLINE __attribute__((target("avx2,f16c"), always_inline)) inline

// Lanes of `x` (float32 bits) that are finite and at or above `overflow` in
// magnitude, as all-ones lanes.
HCOMM_HALF_INLINE __m256i OverflowLanes(__m256i x, __m256i overflow_minus_1) {
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  // abs is non-negative as int32, so signed compares order it correctly.
  return _mm256_and_si256(_mm256_cmpgt_epi32(abs, overflow_minus_1),
                          _mm256_cmpgt_epi32(_mm256_set1_epi32(kInfBits), abs));
}

// FloatToBFloat16 on eight lanes, the results in the low 16 bits of each.
HCOMM_HALF_INLINE __m256i Bf16Lanes(__m256i x) {
  const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(kInfBits));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

// Eight 16-bit lanes (low halves of `h`) packed into 128 bits, in order.
HCOMM_HALF_INLINE __m128i Pack16(__m256i h) {
  return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

HCOMM_HALF_INLINE __m256 WidenBf16(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

HCOMM_HALF_INLINE __m128i EncodeStep(HalfFormat f, __m256 x, __m256i overflow_minus_1,
                                     __m256i* bad) {
  const __m256i bits = _mm256_castps_si256(x);
  *bad = _mm256_or_si256(*bad, OverflowLanes(bits, overflow_minus_1));
  if (f == HalfFormat::kFp16) return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
  return Pack16(Bf16Lanes(bits));
}

HCOMM_HALF_INLINE __m256 DecodeStep(HalfFormat f, __m128i h) {
  return f == HalfFormat::kFp16 ? _mm256_cvtph_ps(h) : WidenBf16(h);
}

template <HalfFormat F>
HCOMM_HALF_TARGET bool EncodeAvx2(const float* in, size_t n, uint16_t* out) {
  const __m256i overflow_minus_1 = _mm256_set1_epi32(static_cast<int>(OverflowBits(F) - 1));
  __m256i bad = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i a = EncodeStep(F, _mm256_loadu_ps(in + i), overflow_minus_1, &bad);
    const __m128i b = EncodeStep(F, _mm256_loadu_ps(in + i + 8), overflow_minus_1, &bad);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 8), b);
  }
  for (; i + 8 <= n; i += 8) {
    const __m128i a = EncodeStep(F, _mm256_loadu_ps(in + i), overflow_minus_1, &bad);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), a);
  }
  if (i < n) {
    float tail_in[8] = {};
    uint16_t tail_out[8];
    std::memcpy(tail_in, in + i, (n - i) * sizeof(float));
    const __m128i a = EncodeStep(F, _mm256_loadu_ps(tail_in), overflow_minus_1, &bad);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(tail_out), a);
    std::memcpy(out + i, tail_out, (n - i) * sizeof(uint16_t));
  }
  return _mm256_testz_si256(bad, bad) != 0;
}

template <HalfFormat F>
HCOMM_HALF_TARGET void DecodeAvx2(const uint16_t* in, size_t n, float* out) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = DecodeStep(F, _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    const __m256 b = DecodeStep(F, _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 8)));
    _mm256_storeu_ps(out + i, a);
    _mm256_storeu_ps(out + i + 8, b);
  }
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i,
                     DecodeStep(F, _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  if (i < n) {
    uint16_t tail_in[8] = {};
    float tail_out[8];
    std::memcpy(tail_in, in + i, (n - i) * sizeof(uint16_t));
    _mm256_storeu_ps(tail_out,
                     DecodeStep(F, _mm_loadu_si128(reinterpret_cast<const __m128i*>(tail_in))));
    std::memcpy(out + i, tail_out, (n - i) * sizeof(float));
  }
}

template <HalfFormat F>
HCOMM_HALF_TARGET void AccumulateAvx2(const uint16_t* in, size_t n, float* acc) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = DecodeStep(F, _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    const __m256 b = DecodeStep(F, _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 8)));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), a));
    _mm256_storeu_ps(acc + i + 8, _mm256_add_ps(_mm256_loadu_ps(acc + i + 8), b));
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 a = DecodeStep(F, _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), a));
  }
  if (i < n) {
    uint16_t tail_in[8] = {};
    float tail_acc[8] = {};
    std::memcpy(tail_in, in + i, (n - i) * sizeof(uint16_t));
    std::memcpy(tail_acc, acc + i, (n - i) * sizeof(float));
    const __m256 a = DecodeStep(F, _mm_loadu_si128(reinterpret_cast<const __m128i*>(tail_in)));
    _mm256_storeu_ps(tail_acc, _mm256_add_ps(_mm256_loadu_ps(tail_acc), a));
    std::memcpy(acc + i, tail_acc, (n - i) * sizeof(float));
  }
}
#endif  // HCOMM_HALF_HAVE_AVX2

// ---- dispatch -------------------------------------------------------------------

enum class Level : int { kScalar = 0, kAvx2 = 1 };

bool CpuSupports(Level level) {
  if (level == Level::kScalar) return true;
#ifdef HCOMM_HALF_HAVE_AVX2
  // libgcc's CPU model also checks (XGETBV) that the OS saves YMM state.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

// -1 until the first call picks a level.
std::atomic<int> g_level{-1};

Level PickOnce() {
  // A function-local static: the environment is read exactly once.
  static const Level chosen = [] {
    const char* cap = std::getenv("HCOMM_KERNELS");
    if (cap != nullptr && std::strcmp(cap, "scalar") == 0) return Level::kScalar;
    return CpuSupports(Level::kAvx2) ? Level::kAvx2 : Level::kScalar;
  }();
  int expected = -1;
  // A ForceHalfKernelIsaForTesting that ran first wins.
  g_level.compare_exchange_strong(expected, static_cast<int>(chosen), std::memory_order_acq_rel);
  return static_cast<Level>(g_level.load(std::memory_order_acquire));
}

inline Level Active() {
  const int level = g_level.load(std::memory_order_acquire);
  return level >= 0 ? static_cast<Level>(level) : PickOnce();
}

}  // namespace

const char* HalfFormatName(HalfFormat f) {
  switch (f) {
    case HalfFormat::kFp16:
      return "fp16";
    case HalfFormat::kBf16:
      return "bf16";
  }
  return "invalid";
}

bool EncodeHalf(HalfFormat f, const float* in, size_t n, uint16_t* out) {
  if (!ValidFormat(f)) return false;
  if (n == 0) return true;
#ifdef HCOMM_HALF_HAVE_AVX2
  if (Active() == Level::kAvx2) {
    return f == HalfFormat::kFp16 ? EncodeAvx2<HalfFormat::kFp16>(in, n, out)
                                  : EncodeAvx2<HalfFormat::kBf16>(in, n, out);
  }
#endif
  return EncodeScalar(f, in, n, out);
}

void DecodeHalf(HalfFormat f, const uint16_t* in, size_t n, float* out) {
  if (!ValidFormat(f) || n == 0) return;
#ifdef HCOMM_HALF_HAVE_AVX2
  if (Active() == Level::kAvx2) {
    if (f == HalfFormat::kFp16) {
      DecodeAvx2<HalfFormat::kFp16>(in, n, out);
    } else {
      DecodeAvx2<HalfFormat::kBf16>(in, n, out);
    }
    return;
  }
#endif
  DecodeScalar(f, in, n, out);
}

void DecodeHalfInPlace(HalfFormat f, void* buf, size_t n) {
  if (!ValidFormat(f) || n == 0) return;
  // Block [i, i + k) reads buf[2i, 2i + 2k) and writes buf[4i, 4i + 4k): the
  // write can only cover 16-bit values of elements >= 2i >= i + k (for
  // i >= k) or of this very block (copied out first), all decoded already.
  constexpr size_t kBlock = 2048;
  uint16_t block[kBlock];
  char* base = static_cast<char*>(buf);
  size_t end = n;
  while (end > 0) {
    const size_t k = std::min(end, kBlock);
    const size_t i = end - k;
    memcpy(block, base + 2 * i, 2 * k);
    DecodeHalf(f, block, k, reinterpret_cast<float*>(base + 4 * i));
    end = i;
  }
}

void AccumulateHalf(HalfFormat f, const uint16_t* in, size_t n, float* acc) {
  if (!ValidFormat(f) || n == 0) return;
#ifdef HCOMM_HALF_HAVE_AVX2
  if (Active() == Level::kAvx2) {
    if (f == HalfFormat::kFp16) {
      AccumulateAvx2<HalfFormat::kFp16>(in, n, acc);
    } else {
      AccumulateAvx2<HalfFormat::kBf16>(in, n, acc);
    }
    return;
  }
#endif
  AccumulateScalar(f, in, n, acc);
}

const char* HalfKernelIsa() { return Active() == Level::kAvx2 ? "avx2" : "scalar"; }

bool ForceHalfKernelIsaForTesting(const char* isa) {
  if (isa == nullptr) return false;
  Level level;
  if (std::strcmp(isa, "scalar") == 0) {
    level = Level::kScalar;
  } else if (std::strcmp(isa, "avx2") == 0) {
    level = Level::kAvx2;
  } else {
    return false;
  }
  if (!CpuSupports(level)) return false;
  g_level.store(static_cast<int>(level), std::memory_order_release);
  return true;
}

}  // namespace hcomm
