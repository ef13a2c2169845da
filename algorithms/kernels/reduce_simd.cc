// Vector reduction kernels, written once with GCC/Clang vector extensions and
// compiled once per ISA level by algorithms/BUILD.bazel, each time with its
// own -m flags and HCOMM_REDUCE_SIMD_VARIANT:
//   1: AVX2 + FMA + F16C, 32-byte vectors       -> reduce_internal::Avx2Kernels()
//   2: AVX-512 F/BW/VL/DQ, 64-byte vectors      -> reduce_internal::Avx512Kernels()
//   3: test only: the 64-byte (AVX-512) code shape built for AVX2, so the
//      wide-vector loop/tail logic is exercised on CPUs without AVX-512
//                                               -> WideEmulationKernelsForTesting()
// Built without the matching -m flags (e.g. not on x86-64), the getter
// returns null and dispatch never selects the level.
//
// Everything here has internal linkage, and this file includes no header
// that defines out-of-line inline functions: code compiled with -mavx512f
// must never be picked by the linker for a call from the scalar path (the
// classic ODR trap of per-file ISA flags). The tables are constant-initialised
// so merely taking a getter's result runs no ISA-specific code.
//
// Semantics match reduce_scalar.cc bit for bit; see reduce.h.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "algorithms/kernels/reduce.h"

#ifndef HCOMM_REDUCE_SIMD_VARIANT
#error "build this file through the reduce_avx2 / reduce_avx512 targets"
#endif

#if HCOMM_REDUCE_SIMD_VARIANT == 1 || HCOMM_REDUCE_SIMD_VARIANT == 3
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define HCOMM_REDUCE_SIMD_ENABLED 1
#endif
#elif HCOMM_REDUCE_SIMD_VARIANT == 2
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__)
#define HCOMM_REDUCE_SIMD_ENABLED 1
#endif
#else
#error "unknown HCOMM_REDUCE_SIMD_VARIANT"
#endif

#if HCOMM_REDUCE_SIMD_VARIANT == 1
#define HCOMM_REDUCE_SIMD_GETTER Avx2Kernels
#define HCOMM_REDUCE_SIMD_NAME "avx2"
#elif HCOMM_REDUCE_SIMD_VARIANT == 2
#define HCOMM_REDUCE_SIMD_GETTER Avx512Kernels
#define HCOMM_REDUCE_SIMD_NAME "avx512"
#else
#define HCOMM_REDUCE_SIMD_GETTER WideEmulationKernelsForTesting
#define HCOMM_REDUCE_SIMD_NAME "avx512-emulated-on-avx2"
#endif

#ifdef HCOMM_REDUCE_SIMD_ENABLED
#include <immintrin.h>
#endif

namespace hcomm {
namespace reduce_internal {

#if HCOMM_REDUCE_SIMD_VARIANT == 3
const KernelTable* HCOMM_REDUCE_SIMD_GETTER();  // declared here, not in reduce.h
#endif

#ifdef HCOMM_REDUCE_SIMD_ENABLED
namespace {

constexpr size_t kVecBytes = HCOMM_REDUCE_SIMD_VARIANT == 1 ? 32 : 64;

template <typename T>
struct VecOf {
  typedef T type __attribute__((vector_size(kVecBytes)));
};
// A full vector of T.
template <typename T>
using Vec = typename VecOf<T>::type;

using VF = Vec<float>;
using VU32 = Vec<uint32_t>;
using VI32 = Vec<int32_t>;

// Reinterprets the bits of one vector type as another of the same size (what
// a C cast between GCC vector types means).
template <typename To, typename From>
inline To BitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  return (To)v;  // NOLINT(google-readability-casting): vector bit cast
}

template <typename V>
inline V LoadVec(const char* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

template <typename V>
inline void StoreVec(char* p, V v) {
  __builtin_memcpy(p, &v, sizeof v);
}

// ---- codecs: how one chunk of kLanes elements is computed ----------------------
//
// Each codec has Step<Op>(d, x, y): d = x op y for the kLanes elements at
// those addresses, DivStep(d, divisor): d = d / divisor, and ScaleStep(d,
// factor): d = d * factor. A Step loads all
// of its inputs before it stores, so d == x or d == y is fine.

// What StepMany does after combining (reduce_internal::ManyMode): mode 1
// multiplies by k, mode 2 divides by k.
template <typename V>
inline V Finish(V acc, int mode, float k) {
  if (mode == 1) return acc * k;
  if (mode == 2) return acc / k;
  return acc;
}

// Codecs whose chunk is one compute vector V (Load/Store from the codec).
template <typename Codec>
struct OneVector {
  template <typename Op>
  static void Step(char* d, const char* x, const char* y) {
    Codec::Store(d, Op::Apply(Codec::Load(x), Codec::Load(y)));
  }
  template <typename E>
  static void DivStep(char* d, E divisor) {
    Codec::Store(d, Codec::Load(d) / divisor);
  }
  template <typename E>
  static void ScaleStep(char* d, E factor) {
    Codec::Store(d, Codec::Load(d) * factor);
  }
  // d = p[0] op ... op p[n-1] at offset `off` of each, then * k (mode 1) or
  // / k (mode 2); loads all of a chunk before it stores.
  template <typename Op>
  static void StepMany(char* d, const char* const* p, size_t off, int n, int mode, float k) {
    auto acc = Codec::Load(p[0] + off);
    for (int j = 1; j < n; ++j) acc = Op::Apply(acc, Codec::Load(p[j] + off));
    Codec::Store(d + off, Finish(acc, mode, k));
  }
};

template <typename T>
struct Plain : OneVector<Plain<T>> {
  using V = Vec<T>;
  using E = T;
  static constexpr size_t kElemSize = sizeof(T);
  static constexpr size_t kLanes = kVecBytes / sizeof(T);
  static V Load(const char* p) { return LoadVec<V>(p); }
  static void Store(char* p, V v) { StoreVec(p, v); }
};

// IEEE binary16 via the hardware conversions (F16C / AVX512F), which are
// exact on widening and round to nearest-even on narrowing, like the scalar
// FloatToHalf/HalfToFloat.
struct Half : OneVector<Half> {
  using V = VF;
  using E = float;
  static constexpr size_t kElemSize = 2;
  static constexpr size_t kLanes = kVecBytes / 4;
#if HCOMM_REDUCE_SIMD_VARIANT == 1
  static V Load(const char* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void Store(char* p, V v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
#elif HCOMM_REDUCE_SIMD_VARIANT == 2
  // The all-lanes maskz forms: the plain ones start from
  // _mm512_undefined_*(), which GCC 12 reports as uninitialised under -Wall.
  static V Load(const char* p) {
    return _mm512_maskz_cvtph_ps(
        0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void Store(char* p, V v) {
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(p),
        _mm512_maskz_cvtps_ph(0xffff, v, _MM_FROUND_TO_NEAREST_INT));
  }
#else  // 64-byte vectors from two 32-byte F16C conversions
  static V Load(const char* p) {
    const __m256 lo =
        _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256 hi = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
    V v;
    __builtin_memcpy(&v, &lo, 32);
    __builtin_memcpy(reinterpret_cast<char*>(&v) + 32, &hi, 32);
    return v;
  }
  static void Store(char* p, V v) {
    __m256 lo, hi;
    __builtin_memcpy(&lo, &v, 32);
    __builtin_memcpy(&hi, reinterpret_cast<const char*>(&v) + 32, 32);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 16),
                     _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT));
  }
#endif
};

// bfloat16, a full vector of elements per chunk, with no shuffles: read as
// 32-bit words, the even elements are the low halves and the odd ones the
// high halves (little-endian), so `w << 16` and `w & 0xffff0000` are the even
// and odd elements widened to float. Narrowing rounds to nearest-even with
// integer arithmetic (not VCVTNEPS2BF16, which flushes subnormals) and turns
// a NaN into a quiet NaN, exactly like FloatToBFloat16.
struct BFloat16 {
  using E = float;
  static constexpr size_t kElemSize = 2;
  static constexpr size_t kLanes = kVecBytes / 2;

  static void Widen(const char* p, VF* even, VF* odd) {
    const VU32 w = LoadVec<VU32>(p);
    *even = BitCast<VF>(w << 16);
    *odd = BitCast<VF>(w & 0xffff0000u);
  }
  // The bfloat16 of each lane, in the high 16 bits.
  static VU32 RoundHigh(VF f) {
    const VU32 u = BitCast<VU32>(f);
    const VI32 is_nan =
        BitCast<VI32>(u & 0x7fffffffu) > static_cast<int32_t>(0x7f800000);
    return is_nan ? (u | 0x00400000u) : (u + 0x7fffu + ((u >> 16) & 1u));
  }
  static void Narrow(char* p, VF even, VF odd) {
    StoreVec(p, (RoundHigh(odd) & 0xffff0000u) | (RoundHigh(even) >> 16));
  }

  template <typename Op>
  static void Step(char* d, const char* x, const char* y) {
    VF xe, xo, ye, yo;
    Widen(x, &xe, &xo);
    Widen(y, &ye, &yo);
    Narrow(d, Op::Apply(xe, ye), Op::Apply(xo, yo));
  }
  static void DivStep(char* d, float divisor) {
    VF e, o;
    Widen(d, &e, &o);
    Narrow(d, e / divisor, o / divisor);
  }
  static void ScaleStep(char* d, float factor) {
    VF e, o;
    Widen(d, &e, &o);
    Narrow(d, e * factor, o * factor);
  }
  template <typename Op>
  static void StepMany(char* d, const char* const* p, size_t off, int n, int mode, float k) {
    VF e, o, e2, o2;
    Widen(p[0] + off, &e, &o);
    for (int j = 1; j < n; ++j) {
      Widen(p[j] + off, &e2, &o2);
      e = Op::Apply(e, e2);
      o = Op::Apply(o, o2);
    }
    Narrow(d + off, Finish(e, mode, k), Finish(o, mode, k));
  }
};

// ---- ops (same definitions as reduce_scalar.cc, lane by lane) ----------------

struct Sum {
  template <typename V>
  static V Apply(V a, V b) {
    return a + b;
  }
};
struct Prod {
  template <typename V>
  static V Apply(V a, V b) {
    return a * b;
  }
};
struct MinInt {
  template <typename V>
  static V Apply(V a, V b) {
    return b < a ? b : a;
  }
};
struct MaxInt {
  template <typename V>
  static V Apply(V a, V b) {
    return a < b ? b : a;
  }
};

// Commutative, -0 < +0, NaN-propagating: ordered lanes take the smaller
// value; equal or unordered lanes take a | b bitwise.
template <typename V>
inline V FloatMin(V a, V b) {
  using M = decltype(a < b);  // signed integer lanes of the same width
  const M lt = a < b;
  const M gt = b < a;
  const V either = BitCast<V>(BitCast<M>(a) | BitCast<M>(b));
  return lt ? a : (gt ? b : either);
}

template <typename V>
inline V Negate(V a) {
  using M = decltype(a < a);  // signed integer lanes of the same width
  using Lane = std::remove_cv_t<std::remove_reference_t<decltype(a[0])>>;
  using MLane = std::conditional_t<sizeof(Lane) == 4, int32_t, int64_t>;
  using ULane = std::make_unsigned_t<MLane>;
  // Only the sign bit (conversion to signed is modular in GCC and Clang).
  const MLane kSign = static_cast<MLane>(~(~ULane{0} >> 1));
  return BitCast<V>(BitCast<M>(a) ^ kSign);
}

struct MinFloat {
  template <typename V>
  static V Apply(V a, V b) {
    return FloatMin(a, b);
  }
};
struct MaxFloat {
  template <typename V>
  static V Apply(V a, V b) {
    return Negate(FloatMin(Negate(a), Negate(b)));
  }
};

// (a + b) / 2 as AverageOfTwo computes it: the multiply by 0.5 is the same
// correctly rounded halving as the scalar path's division.
struct HalfOfSum {
  template <typename V>
  static V Apply(V a, V b) {
    return (a + b) * 0.5f;
  }
};

// ---- kernels ---------------------------------------------------------------------

// Bytes [i, i + K) of a tail when bit K of its length n is set: a copy of
// fixed size, which the compiler inlines.
template <size_t K>
inline void CopyPiece(char* d, const char* s, size_t n, size_t& i) {
  if (n & K) {
    __builtin_memcpy(d + i, s + i, K);
    i += K;
  }
}

// n < 64 bytes in fixed-size pieces: a memcpy of variable size is a library
// call (a tail of 2 floats took ~80 instructions with three of them, ~60
// with these).
inline void CopyTail(char* d, const char* s, size_t n) {
  static_assert(kVecBytes <= 64, "a tail is shorter than 64 bytes");
  // A tail is shorter than a vector (every caller's count < kLanes); said
  // for the compiler, which otherwise warns of copies past the buffers.
  if (n >= kVecBytes) __builtin_unreachable();
  size_t i = 0;
  CopyPiece<32>(d, s, n, i);
  CopyPiece<16>(d, s, n, i);
  CopyPiece<8>(d, s, n, i);
  CopyPiece<4>(d, s, n, i);
  CopyPiece<2>(d, s, n, i);
  CopyPiece<1>(d, s, n, i);
}

// The last count < kLanes elements: one Step on zero-padded copies, so tails
// compute exactly what full chunks do.
template <typename Codec, typename Op>
__attribute__((noinline)) void BinaryTail(char* d, const char* x,
                                          const char* y, size_t count) {
  alignas(64) char bx[kVecBytes] = {};
  alignas(64) char by[kVecBytes] = {};
  alignas(64) char bd[kVecBytes];
  const size_t bytes = count * Codec::kElemSize;
  CopyTail(bx, x, bytes);
  CopyTail(by, y, bytes);
  Codec::template Step<Op>(bd, bx, by);
  CopyTail(d, bd, bytes);
}

// dst = a op b, four chunks per iteration.
template <typename Codec, typename Op>
void Binary(void* dst, const void* a, const void* b, size_t count) {
  constexpr size_t kLanes = Codec::kLanes;
  constexpr size_t kStep = kLanes * Codec::kElemSize;
  char* d = static_cast<char*>(dst);
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  size_t i = 0;
  for (; i + 4 * kLanes <= count; i += 4 * kLanes) {
    Codec::template Step<Op>(d, x, y);
    Codec::template Step<Op>(d + kStep, x + kStep, y + kStep);
    Codec::template Step<Op>(d + 2 * kStep, x + 2 * kStep, y + 2 * kStep);
    Codec::template Step<Op>(d + 3 * kStep, x + 3 * kStep, y + 3 * kStep);
    x += 4 * kStep;
    y += 4 * kStep;
    d += 4 * kStep;
  }
  for (; i + kLanes <= count; i += kLanes) {
    Codec::template Step<Op>(d, x, y);
    x += kStep;
    y += kStep;
    d += kStep;
  }
  if (i < count) BinaryTail<Codec, Op>(d, x, y, count - i);
}

// ReduceHalfParts: one StepMany per chunk; the tail on zero-padded copies.
template <typename Codec, typename Op>
void Many(void* dst, const void* const* parts, int n, size_t count, int mode, float k) {
  // ReduceHalfParts checked this; said for the compiler, which otherwise
  // warns of parts read uninitialized or written past the arrays.
  if (n < 1 || n > kMaxHalfParts) __builtin_unreachable();
  constexpr size_t kStep = Codec::kLanes * Codec::kElemSize;
  const char* p[kMaxHalfParts];
  for (int j = 0; j < n; ++j) p[j] = static_cast<const char*>(parts[j]);
  char* d = static_cast<char*>(dst);
  size_t i = 0, off = 0;
  for (; i + Codec::kLanes <= count; i += Codec::kLanes, off += kStep) {
    Codec::template StepMany<Op>(d, p, off, n, mode, k);
  }
  if (i == count) return;
  alignas(64) char tails[kMaxHalfParts][kVecBytes] = {};
  alignas(64) char bd[kVecBytes];
  const char* q[kMaxHalfParts];
  const size_t bytes = (count - i) * Codec::kElemSize;
  for (int j = 0; j < n; ++j) {
    CopyTail(tails[j], p[j] + off, bytes);
    q[j] = tails[j];
  }
  Codec::template StepMany<Op>(bd, q, 0, n, mode, k);
  CopyTail(d + off, bd, bytes);
}

template <typename Codec>
__attribute__((noinline)) void DivideTail(char* d, size_t count,
                                          typename Codec::E divisor) {
  alignas(64) char bd[kVecBytes] = {};
  const size_t bytes = count * Codec::kElemSize;
  CopyTail(bd, d, bytes);
  Codec::DivStep(bd, divisor);
  CopyTail(d, bd, bytes);
}

// Floating point: IEEE division by n, lane by lane, so it equals the scalar
// x / n exactly. Where n is a power of two the reciprocal is exact and x * (1
// / n) is the same correctly rounded x * 2^-k as x / n, bit for bit
// (subnormals, infinities and NaNs included), for a multiply's cost instead
// of a divide's (a vector divide issues a few times less often).
template <typename Codec>
void DivideFloat(void* dst, size_t count, int n) {
  constexpr size_t kLanes = Codec::kLanes;
  constexpr size_t kStep = kLanes * Codec::kElemSize;
  using E = typename Codec::E;
  const E divisor = static_cast<E>(n);
  char* d = static_cast<char*>(dst);
  size_t i = 0;
  if ((n & (n - 1)) == 0) {
    const E factor = static_cast<E>(1) / divisor;
    for (; i + kLanes <= count; i += kLanes) {
      Codec::ScaleStep(d, factor);
      d += kStep;
    }
  } else {
    for (; i + kLanes <= count; i += kLanes) {
      Codec::DivStep(d, divisor);
      d += kStep;
    }
  }
  if (i < count) DivideTail<Codec>(d, count - i, divisor);
}

// Integers: C semantics (truncation toward zero), as in reduce_scalar.cc.
// There is no vector integer division, and a scalar divide per element made
// an 8-bit average many times slower than the sum (measured:
// docs/performance.md, "Integer averages"). So, for n >= 2:
//  - a power of two below 2^(bits of T) shifts (a negative value first adds
//    n - 1, so that the shift rounds toward zero);
//  - 8-bit values divide in float, 32-bit ones in double: |v| < 2^24 (resp.
//    2^53) and n are exact there, and if v / n is not a whole number it lies
//    at least 1/n from one while the rounded quotient is off by at most
//    |v| / n * 2^-24 (2^-53), less than 1/n, so truncating the rounded
//    quotient gives the exact one (and a whole quotient is exact);
//  - what is left (64-bit values, n >= 2^24 for 8-bit ones) divides one
//    element at a time.
// The lanes convert only between int32 and float or double, one instruction
// each way (GCC converts int8 or uint32 lanes to floating point one at a
// time): each byte of a 32-bit lane is shifted out into an int32 lane of
// its own, uint32 values are biased by 2^31 into int32 on the way in (exact
// in double), and come back as int32, which holds any uint32 quotient for
// n >= 2.
template <typename T>
void DivideIntShift(char* d, size_t count, int n, size_t* done) {
  constexpr size_t kLanes = kVecBytes / sizeof(T);
  using V = Vec<T>;
  const int k = __builtin_ctz(static_cast<unsigned>(n));
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    V v = LoadVec<V>(d + i * sizeof(T));
    if (std::is_signed<T>::value) v += (v >> (sizeof(T) * 8 - 1)) & static_cast<T>(n - 1);
    StoreVec(d + i * sizeof(T), v >> k);
  }
  *done = i;
}

template <typename T>  // int8_t or uint8_t
void DivideByteViaFloat(char* d, size_t count, int n, size_t* done) {
  const float divisor = static_cast<float>(n);
  size_t i = 0;
  for (; i + kVecBytes <= count; i += kVecBytes) {
    // Byte j of every 32-bit lane, as int32: shifted to the top and back
    // (arithmetic for int8), quotient truncated and put back in its place.
    const VU32 w = LoadVec<VU32>(d + i);
    VU32 out = {};
    for (int j = 0; j < 4; ++j) {
      const VI32 b = std::is_signed<T>::value ? BitCast<VI32>(w << (24 - 8 * j)) >> 24
                                              : BitCast<VI32>((w >> (8 * j)) & 0xffu);
      const VI32 q = __builtin_convertvector(__builtin_convertvector(b, VF) / divisor, VI32);
      out |= (BitCast<VU32>(q) & 0xffu) << (8 * j);
    }
    StoreVec(d + i, out);
  }
  *done = i;
}

template <typename T>  // int32_t or uint32_t
void DivideWordViaDouble(char* d, size_t count, int n, size_t* done) {
  constexpr size_t kLanes = kVecBytes / sizeof(double);
  typedef int32_t VW __attribute__((vector_size(kLanes * 4)));
  using VD = Vec<double>;
  const double divisor = static_cast<double>(n);
  constexpr bool kUnsigned = std::is_unsigned<T>::value;
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    VW w = LoadVec<VW>(d + i * 4);
    if (kUnsigned) w ^= INT32_MIN;  // v - 2^31, as int32
    VD x = __builtin_convertvector(w, VD);
    if (kUnsigned) x += 2147483648.0;
    StoreVec(d + i * 4, __builtin_convertvector(x / divisor, VW));
  }
  *done = i;
}

template <typename T>
void DivideInt(void* dst, size_t count, int n) {
  if (n == 1) return;
  char* d = static_cast<char*>(dst);
  size_t i = 0;
  if ((n & (n - 1)) == 0 && __builtin_ctz(static_cast<unsigned>(n)) < int{8 * sizeof(T)}) {
    DivideIntShift<T>(d, count, n, &i);
  } else if constexpr (sizeof(T) == 1) {
    if (n < (1 << 24)) DivideByteViaFloat<T>(d, count, n, &i);
  } else if constexpr (sizeof(T) == 4) {
    DivideWordViaDouble<T>(d, count, n, &i);
  }
  for (; i < count; ++i) {
    T v;
    __builtin_memcpy(&v, d + i * sizeof(T), sizeof v);
    v = static_cast<T>(v / n);
    __builtin_memcpy(d + i * sizeof(T), &v, sizeof v);
  }
}

// ---- conversions between the 16-bit floats and float32 ---------------------------
//
// Half: the codec's Load/Store are the hardware conversions. bfloat16: each
// element zero-extended to 32 bits and shifted up (exact), and back with
// BFloat16::RoundHigh. Tails use the scalar conversions, which agree bit for
// bit.

constexpr size_t kFloatLanes = kVecBytes / 4;
using VU16 = uint16_t __attribute__((vector_size(kVecBytes / 2)));

void WidenHalf(float* dst, const void* src, size_t count) {
  const char* s = static_cast<const char*>(src);
  char* d = reinterpret_cast<char*>(dst);
  size_t i = 0;
  for (; i + kFloatLanes <= count; i += kFloatLanes) {
    StoreVec(d + 4 * i, Half::Load(s + 2 * i));
  }
  for (; i < count; ++i) {
    uint16_t h;
    __builtin_memcpy(&h, s + 2 * i, 2);
    dst[i] = HalfToFloat(h);
  }
}

void NarrowHalf(void* dst, const float* src, size_t count) {
  const char* s = reinterpret_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  size_t i = 0;
  for (; i + kFloatLanes <= count; i += kFloatLanes) {
    Half::Store(d + 2 * i, LoadVec<VF>(s + 4 * i));
  }
  for (; i < count; ++i) {
    const uint16_t h = FloatToHalf(src[i]);
    __builtin_memcpy(d + 2 * i, &h, 2);
  }
}

void WidenBFloat16(float* dst, const void* src, size_t count) {
  const char* s = static_cast<const char*>(src);
  char* d = reinterpret_cast<char*>(dst);
  size_t i = 0;
  for (; i + kFloatLanes <= count; i += kFloatLanes) {
    const VU32 w = __builtin_convertvector(LoadVec<VU16>(s + 2 * i), VU32);
    StoreVec(d + 4 * i, BitCast<VF>(w << 16));
  }
  for (; i < count; ++i) {
    uint16_t b;
    __builtin_memcpy(&b, s + 2 * i, 2);
    dst[i] = BFloat16ToFloat(b);
  }
}

void NarrowBFloat16(void* dst, const float* src, size_t count) {
  const char* s = reinterpret_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  size_t i = 0;
  for (; i + kFloatLanes <= count; i += kFloatLanes) {
    const VU32 high = BFloat16::RoundHigh(LoadVec<VF>(s + 4 * i)) >> 16;
    StoreVec(d + 2 * i, __builtin_convertvector(high, VU16));
  }
  for (; i < count; ++i) {
    const uint16_t b = FloatToBFloat16(src[i]);
    __builtin_memcpy(d + 2 * i, &b, 2);
  }
}

// ---- the table -------------------------------------------------------------------

template <typename T>
constexpr void SetIntRow(KernelTable& t, DataType dt) {
  using U = std::make_unsigned_t<T>;
  BinaryKernel* row = t.binary[static_cast<int>(dt)];
  row[static_cast<int>(ReduceOp::kSum)] = &Binary<Plain<U>, Sum>;
  row[static_cast<int>(ReduceOp::kProd)] = &Binary<Plain<U>, Prod>;
  row[static_cast<int>(ReduceOp::kMin)] = &Binary<Plain<T>, MinInt>;
  row[static_cast<int>(ReduceOp::kMax)] = &Binary<Plain<T>, MaxInt>;
  t.divide[static_cast<int>(dt)] = &DivideInt<T>;
}

template <typename Codec>
constexpr void SetFloatRow(KernelTable& t, DataType dt) {
  BinaryKernel* row = t.binary[static_cast<int>(dt)];
  row[static_cast<int>(ReduceOp::kSum)] = &Binary<Codec, Sum>;
  row[static_cast<int>(ReduceOp::kProd)] = &Binary<Codec, Prod>;
  row[static_cast<int>(ReduceOp::kMin)] = &Binary<Codec, MinFloat>;
  row[static_cast<int>(ReduceOp::kMax)] = &Binary<Codec, MaxFloat>;
  t.divide[static_cast<int>(dt)] = &DivideFloat<Codec>;
}

constexpr KernelTable MakeTable() {
  KernelTable t{};
  t.isa = HCOMM_REDUCE_SIMD_NAME;
  SetIntRow<int8_t>(t, DataType::kInt8);
  SetIntRow<uint8_t>(t, DataType::kUint8);
  SetIntRow<int32_t>(t, DataType::kInt32);
  SetIntRow<uint32_t>(t, DataType::kUint32);
  SetIntRow<int64_t>(t, DataType::kInt64);
  SetIntRow<uint64_t>(t, DataType::kUint64);
  SetFloatRow<Half>(t, DataType::kFloat16);
  SetFloatRow<BFloat16>(t, DataType::kBFloat16);
  SetFloatRow<Plain<float>>(t, DataType::kFloat32);
  SetFloatRow<Plain<double>>(t, DataType::kFloat64);
  t.widen[0] = &WidenHalf;
  t.widen[1] = &WidenBFloat16;
  t.narrow[0] = &NarrowHalf;
  t.narrow[1] = &NarrowBFloat16;
  t.average2[0] = &Binary<Plain<float>, HalfOfSum>;
  t.average2[1] = &Binary<Plain<double>, HalfOfSum>;
  t.many[0][static_cast<int>(ReduceOp::kSum)] = &Many<Half, Sum>;
  t.many[0][static_cast<int>(ReduceOp::kProd)] = &Many<Half, Prod>;
  t.many[0][static_cast<int>(ReduceOp::kMin)] = &Many<Half, MinFloat>;
  t.many[0][static_cast<int>(ReduceOp::kMax)] = &Many<Half, MaxFloat>;
  t.many[1][static_cast<int>(ReduceOp::kSum)] = &Many<BFloat16, Sum>;
  t.many[1][static_cast<int>(ReduceOp::kProd)] = &Many<BFloat16, Prod>;
  t.many[1][static_cast<int>(ReduceOp::kMin)] = &Many<BFloat16, MinFloat>;
  t.many[1][static_cast<int>(ReduceOp::kMax)] = &Many<BFloat16, MaxFloat>;
  return t;
}

constexpr KernelTable kTable = MakeTable();

}  // namespace

const KernelTable* HCOMM_REDUCE_SIMD_GETTER() { return &kTable; }

#else  // !HCOMM_REDUCE_SIMD_ENABLED

const KernelTable* HCOMM_REDUCE_SIMD_GETTER() { return nullptr; }

#endif  // HCOMM_REDUCE_SIMD_ENABLED

}  // namespace reduce_internal
}  // namespace hcomm
