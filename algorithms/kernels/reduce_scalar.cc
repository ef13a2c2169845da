// Portable scalar reduction kernels and the software float16/bfloat16
// conversions. This is the fallback level ("scalar") and the definition of
// the semantics that the vector levels (reduce_simd.cc) reproduce bit for bit.
#include <cstring>
#include <type_traits>

#include "algorithms/kernels/reduce.h"

namespace hcomm {

// ---- float16 / bfloat16 <-> float32 -----------------------------------------

namespace {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) {
    // inf, or NaN: keep the payload and set the quiet bit (VCVTPH2PS does).
    return BitsFloat(sign | 0x7f800000u | (man << 13) |
                     (man != 0 ? 0x00400000u : 0u));
  }
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24, exact in float (a normal float).
    const float mag = static_cast<float>(man) * 0x1p-24f;
    return sign != 0 ? -mag : mag;
  }
  return BitsFloat(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t bits = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: quiet, top 9 payload bits kept
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  // 65520 is halfway between 65504 (max finite, odd significand) and 2^16:
  // ties go to even, i.e. to inf.
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs >= 0x38800000u) {  // normal half (>= 2^-14)
    uint32_t h = (abs >> 13) - (112u << 10);
    const uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal half or zero. Up to 2^-25 (half the smallest subnormal, a tie
  // that goes to the even 0) everything rounds to zero.
  if (abs <= 0x33000000u) return sign;
  const uint32_t e = abs >> 23;  // 102..112
  const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // value / 2^-24 == m >> shift; 14..24
  uint32_t h = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;  // 0x400 = min normal
  return static_cast<uint16_t>(sign | h);
}

float BFloat16ToFloat(uint16_t b) {
  return BitsFloat(static_cast<uint32_t>(b) << 16);
}

uint16_t FloatToBFloat16(float f) {
  uint32_t bits = FloatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: quiet, top payload kept
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest-even
  return static_cast<uint16_t>(bits >> 16);
}

namespace reduce_internal {
namespace {

// ---- element access -----------------------------------------------------------

template <typename T>
inline T LoadAt(const void* p, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(p) + i * sizeof(T), sizeof v);
  return v;
}

template <typename T>
inline void StoreAt(void* p, size_t i, T v) {
  std::memcpy(static_cast<char*>(p) + i * sizeof(T), &v, sizeof v);
}

// ---- ops ------------------------------------------------------------------------

struct Sum {
  template <typename T>
  static T Apply(T a, T b) {
    return static_cast<T>(a + b);
  }
};
struct Prod {
  template <typename T>
  static T Apply(T a, T b) {
    return static_cast<T>(a * b);
  }
};
struct MinInt {
  template <typename T>
  static T Apply(T a, T b) {
    return b < a ? b : a;
  }
};
struct MaxInt {
  template <typename T>
  static T Apply(T a, T b) {
    return a < b ? b : a;
  }
};

template <typename F>
using BitsOf = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;

// Commutative, -0 < +0, NaN-propagating min: if a and b compare equal or are
// unordered, OR their bits (-0 | +0 == -0; a NaN stays a NaN).
template <typename F>
inline F FloatMin(F a, F b) {
  if (a < b) return a;
  if (b < a) return b;
  BitsOf<F> x, y;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  x |= y;
  F r;
  std::memcpy(&r, &x, sizeof r);
  return r;
}

template <typename F>
inline F Negate(F a) {  // flips the sign bit, NaNs included
  BitsOf<F> x;
  std::memcpy(&x, &a, sizeof x);
  x ^= BitsOf<F>{1} << (sizeof(F) * 8 - 1);
  F r;
  std::memcpy(&r, &x, sizeof r);
  return r;
}

struct MinFloat {
  template <typename F>
  static F Apply(F a, F b) {
    return FloatMin(a, b);
  }
};
// max(a, b) == -min(-a, -b): commutative, +0 > -0, NaN-propagating.
struct MaxFloat {
  template <typename F>
  static F Apply(F a, F b) {
    return Negate(FloatMin(Negate(a), Negate(b)));
  }
};

// The average of two: (a + b) / 2, the sum rounded first, as an average
// over two ranks computes it.
struct HalfOfSum {
  template <typename F>
  static F Apply(F a, F b) {
    return (a + b) / F(2);
  }
};

// ---- kernels --------------------------------------------------------------------

// Plain element type T; arithmetic in C (C = unsigned for integer sum/prod).
template <typename T, typename C, typename Op>
void Binary(void* dst, const void* a, const void* b, size_t count) {
  static_assert(sizeof(T) == sizeof(C), "same representation");
  for (size_t i = 0; i < count; ++i) {
    const C x = static_cast<C>(LoadAt<T>(a, i));
    const C y = static_cast<C>(LoadAt<T>(b, i));
    StoreAt<T>(dst, i, static_cast<T>(Op::Apply(x, y)));
  }
}

struct HalfCodec {
  static float Widen(uint16_t h) { return HalfToFloat(h); }
  static uint16_t Narrow(float f) { return FloatToHalf(f); }
};
struct BFloat16Codec {
  static float Widen(uint16_t h) { return BFloat16ToFloat(h); }
  static uint16_t Narrow(float f) { return FloatToBFloat16(f); }
};

template <typename Codec, typename Op>
void BinaryNarrow(void* dst, const void* a, const void* b, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const float x = Codec::Widen(LoadAt<uint16_t>(a, i));
    const float y = Codec::Widen(LoadAt<uint16_t>(b, i));
    StoreAt<uint16_t>(dst, i, Codec::Narrow(Op::Apply(x, y)));
  }
}

template <typename T>
void DivideInt(void* dst, size_t count, int n) {
  // C's usual conversions do the right thing for n >= 1: int8/uint8 promote
  // to int, uint32/uint64 divide as unsigned, int64 as int64. No INT_MIN / -1.
  for (size_t i = 0; i < count; ++i) {
    StoreAt<T>(dst, i, static_cast<T>(LoadAt<T>(dst, i) / n));
  }
}

template <typename F>
void DivideFloat(void* dst, size_t count, int n) {
  const F divisor = static_cast<F>(n);
  for (size_t i = 0; i < count; ++i) {
    StoreAt<F>(dst, i, LoadAt<F>(dst, i) / divisor);
  }
}

template <typename Codec>
void DivideNarrow(void* dst, size_t count, int n) {
  const float divisor = static_cast<float>(n);
  for (size_t i = 0; i < count; ++i) {
    const float x = Codec::Widen(LoadAt<uint16_t>(dst, i));
    StoreAt<uint16_t>(dst, i, Codec::Narrow(x / divisor));
  }
}

template <typename T>
constexpr BinaryKernel IntRow[kNumKernelOps] = {
    &Binary<T, std::make_unsigned_t<T>, Sum>,
    &Binary<T, std::make_unsigned_t<T>, Prod>,
    &Binary<T, T, MinInt>,
    &Binary<T, T, MaxInt>,
};

template <typename F>
constexpr BinaryKernel FloatRow[kNumKernelOps] = {
    &Binary<F, F, Sum>,
    &Binary<F, F, Prod>,
    &Binary<F, F, MinFloat>,
    &Binary<F, F, MaxFloat>,
};

template <typename Codec>
constexpr BinaryKernel NarrowRow[kNumKernelOps] = {
    &BinaryNarrow<Codec, Sum>,
    &BinaryNarrow<Codec, Prod>,
    &BinaryNarrow<Codec, MinFloat>,
    &BinaryNarrow<Codec, MaxFloat>,
};

template <typename Codec, typename Op>
void Many(void* dst, const void* const* parts, int n, size_t count, int mode, float k) {
  for (size_t i = 0; i < count; ++i) {
    float acc = Codec::Widen(LoadAt<uint16_t>(parts[0], i));
    for (int j = 1; j < n; ++j) acc = Op::Apply(acc, Codec::Widen(LoadAt<uint16_t>(parts[j], i)));
    if (mode == 1) acc = acc * k;
    if (mode == 2) acc = acc / k;
    StoreAt<uint16_t>(dst, i, Codec::Narrow(acc));
  }
}

template <typename Codec>
constexpr ManyKernel ManyRow[kNumKernelOps] = {
    &Many<Codec, Sum>,
    &Many<Codec, Prod>,
    &Many<Codec, MinFloat>,
    &Many<Codec, MaxFloat>,
};

template <typename Codec>
void WidenNarrow(float* dst, const void* src, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] = Codec::Widen(LoadAt<uint16_t>(src, i));
}

template <typename Codec>
void NarrowWide(void* dst, const float* src, size_t count) {
  for (size_t i = 0; i < count; ++i) StoreAt<uint16_t>(dst, i, Codec::Narrow(src[i]));
}

KernelTable MakeScalarTable() {
  KernelTable t{};
  t.isa = "scalar";
  t.widen[0] = &WidenNarrow<HalfCodec>;
  t.widen[1] = &WidenNarrow<BFloat16Codec>;
  t.narrow[0] = &NarrowWide<HalfCodec>;
  t.narrow[1] = &NarrowWide<BFloat16Codec>;
  t.average2[0] = &Binary<float, float, HalfOfSum>;
  t.average2[1] = &Binary<double, double, HalfOfSum>;
  for (int op = 0; op < kNumKernelOps; ++op) {
    t.many[0][op] = ManyRow<HalfCodec>[op];
    t.many[1][op] = ManyRow<BFloat16Codec>[op];
  }
  auto set_row = [&t](DataType d, const BinaryKernel* row) {
    for (int op = 0; op < kNumKernelOps; ++op) {
      t.binary[static_cast<int>(d)][op] = row[op];
    }
  };
  set_row(DataType::kInt8, IntRow<int8_t>);
  set_row(DataType::kUint8, IntRow<uint8_t>);
  set_row(DataType::kInt32, IntRow<int32_t>);
  set_row(DataType::kUint32, IntRow<uint32_t>);
  set_row(DataType::kInt64, IntRow<int64_t>);
  set_row(DataType::kUint64, IntRow<uint64_t>);
  set_row(DataType::kFloat16, NarrowRow<HalfCodec>);
  set_row(DataType::kBFloat16, NarrowRow<BFloat16Codec>);
  set_row(DataType::kFloat32, FloatRow<float>);
  set_row(DataType::kFloat64, FloatRow<double>);
  t.divide[static_cast<int>(DataType::kInt8)] = &DivideInt<int8_t>;
  t.divide[static_cast<int>(DataType::kUint8)] = &DivideInt<uint8_t>;
  t.divide[static_cast<int>(DataType::kInt32)] = &DivideInt<int32_t>;
  t.divide[static_cast<int>(DataType::kUint32)] = &DivideInt<uint32_t>;
  t.divide[static_cast<int>(DataType::kInt64)] = &DivideInt<int64_t>;
  t.divide[static_cast<int>(DataType::kUint64)] = &DivideInt<uint64_t>;
  t.divide[static_cast<int>(DataType::kFloat16)] = &DivideNarrow<HalfCodec>;
  t.divide[static_cast<int>(DataType::kBFloat16)] =
      &DivideNarrow<BFloat16Codec>;
  t.divide[static_cast<int>(DataType::kFloat32)] = &DivideFloat<float>;
  t.divide[static_cast<int>(DataType::kFloat64)] = &DivideFloat<double>;
  return t;
}

}  // namespace

const KernelTable* ScalarKernels() {
  static const KernelTable table = MakeScalarTable();
  return &table;
}

}  // namespace reduce_internal
}  // namespace hcomm
