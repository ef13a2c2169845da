// Tests for the reduction kernels (reduce.h): every ISA level this CPU can
// run x every dtype x every op, against a reference written here with plain
// loops and its own float16/bfloat16 conversions (arithmetic with ldexp /
// nearbyint, not the library's bit manipulation).
#include "algorithms/kernels/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace hcomm {
namespace reduce_internal {
// From :reduce_wide_emulation_for_test (reduce_simd.cc, variant 3).
const KernelTable* WideEmulationKernelsForTesting();
}  // namespace reduce_internal

// Readable test parameters (found by ADL; internal linkage).
static void PrintTo(DataType t, std::ostream* os) { *os << DataTypeName(t); }
static void PrintTo(ReduceOp op, std::ostream* os) { *os << ReduceOpName(op); }

namespace {

using reduce_internal::KernelTable;

constexpr DataType kAllTypes[] = {
    DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
    DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
    DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
    DataType::kFloat64,
};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd,
                                ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kAvg};
constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 63, 64, 65, 1023, 4099};

// ---- independent reference ------------------------------------------------------

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FloatFromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool HalfIsNan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }
bool BF16IsNan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }

float RefHalfToFloat(uint16_t h) {
  const bool neg = h & 0x8000;
  const int exp = (h >> 10) & 31;
  const int man = h & 1023;
  if (exp == 31) {
    if (man == 0) return neg ? -INFINITY : INFINITY;
    // Quiet NaN with the payload moved up.
    return FloatFromBits((neg ? 0x80000000u : 0u) | 0x7fc00000u |
                         (static_cast<uint32_t>(man) << 13));
  }
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(man), -24)
                             : std::ldexp(static_cast<float>(man + 1024),
                                          exp - 25);
  return neg ? -mag : mag;
}

uint16_t RefFloatToHalf(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) {
    return static_cast<uint16_t>(sign | 0x7e00 | ((Bits(f) >> 13) & 0x3ff));
  }
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7c00;
  if (a < std::ldexp(1.0, -14)) {
    return static_cast<uint16_t>(sign | static_cast<int>(std::nearbyint(
                                            std::ldexp(a, 24))));
  }
  int e;
  std::frexp(a, &e);
  int exp = e - 1;  // a = s * 2^exp, s in [1, 2)
  int q = static_cast<int>(std::nearbyint(std::ldexp(a, 10 - exp)));
  if (q == 2048) {
    q = 1024;
    ++exp;
  }
  return static_cast<uint16_t>(sign | ((exp + 15) << 10) | (q - 1024));
}

float RefBF16ToFloat(uint16_t b) {
  const bool neg = b & 0x8000;
  const int exp = (b >> 7) & 255;
  const int man = b & 127;
  if (exp == 255) {
    if (man == 0) return neg ? -INFINITY : INFINITY;
    return FloatFromBits(static_cast<uint32_t>(b) << 16);  // NaN, as is
  }
  const float mag =
      exp == 0 ? std::ldexp(static_cast<float>(man), -133)
               : std::ldexp(static_cast<float>(man + 128), exp - 134);
  return neg ? -mag : mag;
}

uint16_t RefFloatToBF16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return static_cast<uint16_t>((Bits(f) >> 16) | 0x40);
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return sign | 0x7f80;
  if (a < std::ldexp(1.0, -126)) {
    return static_cast<uint16_t>(
        sign | static_cast<int>(std::nearbyint(std::ldexp(a, 133))));
  }
  int e;
  std::frexp(a, &e);
  int exp = e - 1;
  int q = static_cast<int>(std::nearbyint(std::ldexp(a, 7 - exp)));
  if (q == 256) {
    q = 128;
    ++exp;
  }
  if (exp + 127 >= 255) return sign | 0x7f80;
  return static_cast<uint16_t>(sign | ((exp + 127) << 7) | (q - 128));
}

template <typename F>
F RefMin(F a, F b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<F>::quiet_NaN();
  if (a == 0 && b == 0) return (std::signbit(a) || std::signbit(b)) ? -F(0) : F(0);
  return a < b ? a : b;
}

template <typename F>
F RefMax(F a, F b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<F>::quiet_NaN();
  if (a == 0 && b == 0) return (std::signbit(a) && std::signbit(b)) ? -F(0) : F(0);
  return a > b ? a : b;
}

template <typename F>
F RefFloatOp(F a, F b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMin:
      return RefMin(a, b);
    case ReduceOp::kMax:
      return RefMax(a, b);
  }
  return 0;
}

template <typename T>
T RefIntOp(T a, T b, ReduceOp op) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case ReduceOp::kProd:
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    case ReduceOp::kMin:
      return a < b ? a : b;
    case ReduceOp::kMax:
      return a > b ? a : b;
  }
  return 0;
}

// Everything the harness needs to know about one dtype, byte-oriented.
struct TypeOps {
  size_t size = 0;
  // out = a op b.
  std::function<void(const unsigned char*, const unsigned char*, ReduceOp,
                     unsigned char*)>
      op;
  // out = a / n.
  std::function<void(const unsigned char*, int, unsigned char*)> divide;
  // Whether `got` is right given the reference `want` (bitwise, except that
  // a NaN reference only asks for some NaN).
  std::function<bool(const unsigned char*, const unsigned char*)> same;
  // A random finite test value.
  std::function<void(std::mt19937_64&, unsigned char*)> gen;
  bool is_float = false;
};

template <typename T>
T Get(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
void Put(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

template <typename T>
TypeOps IntOps() {
  TypeOps t;
  t.size = sizeof(T);
  t.op = [](const unsigned char* a, const unsigned char* b, ReduceOp op,
            unsigned char* out) {
    Put<T>(out, RefIntOp<T>(Get<T>(a), Get<T>(b), op));
  };
  t.divide = [](const unsigned char* a, int n, unsigned char* out) {
    if (std::is_signed<T>::value) {
      Put<T>(out, static_cast<T>(static_cast<long long>(Get<T>(a)) /
                                 static_cast<long long>(n)));
    } else {
      Put<T>(out, static_cast<T>(static_cast<unsigned long long>(Get<T>(a)) /
                                 static_cast<unsigned long long>(n)));
    }
  };
  t.same = [](const unsigned char* g, const unsigned char* w) {
    return std::memcmp(g, w, sizeof(T)) == 0;
  };
  t.gen = [](std::mt19937_64& rng, unsigned char* out) {
    uint64_t r = rng();
    switch (rng() % 8) {
      case 0:
        r = 0;
        break;
      case 1:
        r = 1;
        break;
      case 2:
        r = ~uint64_t{0};  // -1 / max
        break;
      case 3:  // min / max of signed
        r = static_cast<uint64_t>(rng() % 2 ? std::numeric_limits<T>::min()
                                            : std::numeric_limits<T>::max());
        break;
      default:
        break;
    }
    Put<T>(out, static_cast<T>(r));
  };
  return t;
}

template <typename F>
TypeOps FloatOps() {
  using B = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  constexpr int kManBits = sizeof(F) == 4 ? 23 : 52;
  constexpr B kExpMask = sizeof(F) == 4 ? B{0xff} : B{0x7ff};
  TypeOps t;
  t.size = sizeof(F);
  t.is_float = true;
  t.op = [](const unsigned char* a, const unsigned char* b, ReduceOp op,
            unsigned char* out) {
    Put<F>(out, RefFloatOp<F>(Get<F>(a), Get<F>(b), op));
  };
  t.divide = [](const unsigned char* a, int n, unsigned char* out) {
    Put<F>(out, Get<F>(a) / static_cast<F>(n));
  };
  t.same = [](const unsigned char* g, const unsigned char* w) {
    if (std::isnan(Get<F>(w))) return std::isnan(Get<F>(g));
    return std::memcmp(g, w, sizeof(F)) == 0;
  };
  t.gen = [kManBits, kExpMask](std::mt19937_64& rng, unsigned char* out) {
    F v;
    const B r = static_cast<B>(rng());
    switch (rng() % 8) {
      case 0:
      case 1:
      case 2: {  // any finite bit pattern
        B bits = r;
        if (((bits >> kManBits) & kExpMask) == kExpMask) bits ^= B{1} << (kManBits + 1);
        std::memcpy(&v, &bits, sizeof v);
        break;
      }
      case 3:
        v = static_cast<F>(static_cast<int>(r % 201) - 100);
        break;
      case 4:
        v = F(1) + static_cast<F>(r % 4096) / F(4096);
        break;
      case 5: {  // subnormal
        B bits = r & ((B{1} << kManBits) - 1);
        bits |= (r >> 7 & 1) ? B{1} << (sizeof(F) * 8 - 1) : 0;
        std::memcpy(&v, &bits, sizeof v);
        break;
      }
      case 6:
        v = (r & 1) ? -F(0) : F(0);
        break;
      default:
        v = std::ldexp(F(1) + static_cast<F>(r % 1000) / 1000,
                       static_cast<int>(r % 40) - 20);
        break;
    }
    Put<F>(out, v);
  };
  return t;
}

template <bool kHalf>
TypeOps NarrowOps() {
  TypeOps t;
  t.size = 2;
  t.is_float = true;
  auto widen = [](uint16_t h) {
    return kHalf ? RefHalfToFloat(h) : RefBF16ToFloat(h);
  };
  auto narrow = [](float f) {
    return kHalf ? RefFloatToHalf(f) : RefFloatToBF16(f);
  };
  t.op = [widen, narrow](const unsigned char* a, const unsigned char* b,
                         ReduceOp op, unsigned char* out) {
    const float r = RefFloatOp<float>(widen(Get<uint16_t>(a)),
                                      widen(Get<uint16_t>(b)), op);
    Put<uint16_t>(out, narrow(r));
  };
  t.divide = [widen, narrow](const unsigned char* a, int n,
                             unsigned char* out) {
    Put<uint16_t>(out, narrow(widen(Get<uint16_t>(a)) / static_cast<float>(n)));
  };
  t.same = [](const unsigned char* g, const unsigned char* w) {
    const uint16_t gv = Get<uint16_t>(g), wv = Get<uint16_t>(w);
    if (kHalf ? HalfIsNan(wv) : BF16IsNan(wv)) {
      return kHalf ? HalfIsNan(gv) : BF16IsNan(gv);
    }
    return gv == wv;
  };
  t.gen = [](std::mt19937_64& rng, unsigned char* out) {
    uint16_t h = static_cast<uint16_t>(rng());
    if (kHalf && (h & 0x7c00) == 0x7c00) h ^= 0x4000;   // finite
    if (!kHalf && (h & 0x7f80) == 0x7f80) h ^= 0x4000;  // finite
    if (rng() % 8 == 0) h &= kHalf ? 0x83ff : 0x807f;   // subnormal or 0
    Put<uint16_t>(out, h);
  };
  return t;
}

TypeOps OpsFor(DataType t) {
  switch (t) {
    case DataType::kInt8:
      return IntOps<int8_t>();
    case DataType::kUint8:
      return IntOps<uint8_t>();
    case DataType::kInt32:
      return IntOps<int32_t>();
    case DataType::kUint32:
      return IntOps<uint32_t>();
    case DataType::kInt64:
      return IntOps<int64_t>();
    case DataType::kUint64:
      return IntOps<uint64_t>();
    case DataType::kFloat16:
      return NarrowOps<true>();
    case DataType::kBFloat16:
      return NarrowOps<false>();
    case DataType::kFloat32:
      return FloatOps<float>();
    case DataType::kFloat64:
      return FloatOps<double>();
  }
  return TypeOps{};
}

// ---- ISA levels ---------------------------------------------------------------------

bool CpuHasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}
bool CpuHasAvx512() {
  return CpuHasAvx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq");
}

constexpr const char* kEmulated = "avx512-emulated";

// Runs kernels at one level: the public functions after
// ForceKernelIsaForTesting for real levels; the table directly for the
// test-only wide emulation.
class Backend {
 public:
  // Returns false (with a reason) if this CPU/build cannot run `isa`.
  bool Init(const std::string& isa, std::string* why) {
    if (isa == kEmulated) {
      table_ = reduce_internal::WideEmulationKernelsForTesting();
      if (table_ == nullptr || !CpuHasAvx2()) {
        *why = "wide emulation needs an AVX2 build and CPU";
        return false;
      }
      return true;
    }
    table_ = nullptr;
    if (!ForceKernelIsaForTesting(isa.c_str())) {
      *why = "this CPU or build has no " + isa;
      return false;
    }
    if (isa != KernelIsa()) {
      *why = "KernelIsa() is " + std::string(KernelIsa());
      return false;
    }
    return true;
  }

  void Reduce2(void* d, const void* a, const void* b, size_t n, DataType t,
               ReduceOp op) const {
    if (table_ == nullptr) return hcomm::Reduce2(d, a, b, n, t, op);
    if (n == 0) return;
    if (op == ReduceOp::kAvg) op = ReduceOp::kSum;
    table_->binary[static_cast<int>(t)][static_cast<int>(op)](d, a, b, n);
  }
  void ReduceInto(void* d, const void* s, size_t n, DataType t,
                  ReduceOp op) const {
    if (table_ == nullptr) return hcomm::ReduceInto(d, s, n, t, op);
    Reduce2(d, d, s, n, t, op);
  }
  void DivideBy(void* d, size_t n, DataType t, int by) const {
    if (table_ == nullptr) return hcomm::DivideBy(d, n, t, by);
    if (n == 0) return;
    table_->divide[static_cast<int>(t)](d, n, by);
  }
  void Widen(float* d, const void* s, size_t n, DataType t) const {
    if (table_ == nullptr) return hcomm::WidenToFloat32(d, s, n, t);
    if (n > 0) table_->widen[t == DataType::kFloat16 ? 0 : 1](d, s, n);
  }
  void Narrow(void* d, const float* s, size_t n, DataType t) const {
    if (table_ == nullptr) return hcomm::NarrowFromFloat32(d, s, n, t);
    if (n > 0) table_->narrow[t == DataType::kFloat16 ? 0 : 1](d, s, n);
  }
  void ReduceHalfParts(void* d, const void* const* parts, int n, size_t count, DataType t,
                       ReduceOp op, int divisor) const {
    if (table_ == nullptr) return hcomm::ReduceHalfParts(d, parts, n, count, t, op, divisor);
    if (count == 0) return;
    int mode;
    float k;
    reduce_internal::ManyMode(op, divisor, &mode, &k);
    const int kop = op == ReduceOp::kAvg ? 0 : static_cast<int>(op);
    table_->many[t == DataType::kFloat16 ? 0 : 1][kop](d, parts, n, count, mode, k);
  }
  void AverageOfTwo(void* d, const void* a, const void* b, size_t n, DataType t) const {
    if (table_ == nullptr) return hcomm::AverageOfTwo(d, a, b, n, t);
    if (n > 0) table_->average2[t == DataType::kFloat32 ? 0 : 1](d, a, b, n);
  }

 private:
  const KernelTable* table_ = nullptr;
};

std::vector<std::string> AllIsas() {
  return {"scalar", "avx2", "avx512", kEmulated};
}

std::string IsaTestName(const std::string& isa) {
  std::string s = isa;
  for (char& c : s) {
    if (c == '-') c = '_';
  }
  return s;
}

// ---- buffers ------------------------------------------------------------------------

constexpr size_t kGuard = 64;
constexpr unsigned char kCanary = 0xa5;

// A 64-byte aligned allocation with guard bytes on both sides of the region
// [offset, offset + bytes).
class GuardedBuffer {
 public:
  GuardedBuffer(size_t bytes, size_t offset)
      : bytes_(bytes),
        storage_(bytes + offset + 2 * kGuard + 64, kCanary) {
    uintptr_t p = reinterpret_cast<uintptr_t>(storage_.data()) + kGuard;
    p = (p + 63) & ~uintptr_t{63};
    data_ = reinterpret_cast<unsigned char*>(p) + offset;
  }
  unsigned char* data() { return data_; }
  void Fill(const std::vector<unsigned char>& v) {
    if (bytes_ > 0) std::memcpy(data_, v.data(), bytes_);
  }
  // Whether everything outside the region still holds the canary.
  bool GuardsIntact() const {
    const unsigned char* begin = storage_.data();
    for (const unsigned char* p = begin; p < data_; ++p) {
      if (*p != kCanary) return false;
    }
    for (const unsigned char* p = data_ + bytes_; p < begin + storage_.size();
         ++p) {
      if (*p != kCanary) return false;
    }
    return true;
  }

 private:
  size_t bytes_;
  std::vector<unsigned char> storage_;
  unsigned char* data_;
};

// Whether p holds exactly the bytes of v.
bool Holds(const unsigned char* p, const std::vector<unsigned char>& v) {
  return v.empty() || std::memcmp(p, v.data(), v.size()) == 0;
}

std::string Hex(const unsigned char* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s = "0x";
  for (size_t i = n; i-- > 0;) {  // little-endian: print high byte first
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}

// Checks `got` against `want` element by element; reports the first bad one.
::testing::AssertionResult SameElements(const TypeOps& ops,
                                        const unsigned char* got,
                                        const std::vector<unsigned char>& want,
                                        size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const unsigned char* g = got + i * ops.size;
    const unsigned char* w = want.data() + i * ops.size;
    if (!ops.same(g, w)) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << count << ": got "
             << Hex(g, ops.size) << ", want " << Hex(w, ops.size);
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- the main sweep: ISA x dtype x op -----------------------------------------------

using KernelParam = std::tuple<std::string, DataType, ReduceOp>;

class ReduceKernelTest : public ::testing::TestWithParam<KernelParam> {
 protected:
  void SetUp() override {
    std::string why;
    if (!backend_.Init(std::get<0>(GetParam()), &why)) GTEST_SKIP() << why;
  }
  Backend backend_;
};

// Byte offsets of (dst, a, b) from a 64-byte boundary: all aligned; each
// misaligned by whole elements, differently; misaligned by odd bytes.
struct Offsets {
  size_t dst, a, b;
  bool whole_elements;
};
constexpr Offsets kOffsets[] = {
    {0, 0, 0, true}, {1, 2, 3, true}, {1, 3, 5, false}};

TEST_P(ReduceKernelTest, MatchesReferenceBitExactly) {
  const DataType t = std::get<1>(GetParam());
  const ReduceOp op = std::get<2>(GetParam());
  const TypeOps ops = OpsFor(t);
  ASSERT_EQ(ops.size, DataTypeSize(t));
  std::mt19937_64 rng(static_cast<uint64_t>(t) * 131 +
                      static_cast<uint64_t>(op));

  for (size_t count : kCounts) {
    const size_t bytes = count * ops.size;
    std::vector<unsigned char> a(bytes), b(bytes);
    for (size_t i = 0; i < count; ++i) {
      unsigned char* ai = &a[i * ops.size];
      unsigned char* bi = &b[i * ops.size];
      ops.gen(rng, ai);
      ops.gen(rng, bi);
      const uint64_t pick = rng() % 16;
      if (pick < 2) std::memcpy(bi, ai, ops.size);  // ties for min/max
      if (pick == 2 && ops.is_float) {              // b == -a
        std::memcpy(bi, ai, ops.size);
        bi[ops.size - 1] ^= 0x80;
      }
    }
    std::vector<unsigned char> want(bytes), want_self(bytes);
    for (size_t i = 0; i < count; ++i) {
      const size_t o = i * ops.size;
      ops.op(&a[o], &b[o], op, &want[o]);
      ops.op(&a[o], &a[o], op, &want_self[o]);
    }

    for (const Offsets& off : kOffsets) {
      const size_t scale = off.whole_elements ? ops.size : 1;
      const size_t od = off.dst * scale, oa = off.a * scale, ob = off.b * scale;
      SCOPED_TRACE(::testing::Message()
                   << DataTypeName(t) << " " << ReduceOpName(op) << " count "
                   << count << " offsets " << od << "/" << oa << "/" << ob);

      {  // Reduce2, out of place.
        GuardedBuffer d(bytes, od), ba(bytes, oa), bb(bytes, ob);
        ba.Fill(a);
        bb.Fill(b);
        backend_.Reduce2(d.data(), ba.data(), bb.data(), count, t, op);
        EXPECT_TRUE(SameElements(ops, d.data(), want, count)) << "Reduce2";
        EXPECT_TRUE(d.GuardsIntact()) << "Reduce2 wrote outside dst";
        EXPECT_TRUE(Holds(ba.data(), a)) << "a changed";
        EXPECT_TRUE(Holds(bb.data(), b)) << "b changed";
      }
      {  // Reduce2 with dst == a.
        GuardedBuffer ba(bytes, oa), bb(bytes, ob);
        ba.Fill(a);
        bb.Fill(b);
        backend_.Reduce2(ba.data(), ba.data(), bb.data(), count, t, op);
        EXPECT_TRUE(SameElements(ops, ba.data(), want, count)) << "dst == a";
        EXPECT_TRUE(ba.GuardsIntact());
      }
      {  // Reduce2 with dst == b.
        GuardedBuffer ba(bytes, oa), bb(bytes, ob);
        ba.Fill(a);
        bb.Fill(b);
        backend_.Reduce2(bb.data(), ba.data(), bb.data(), count, t, op);
        EXPECT_TRUE(SameElements(ops, bb.data(), want, count)) << "dst == b";
        EXPECT_TRUE(bb.GuardsIntact());
      }
      {  // ReduceInto, distinct buffers.
        GuardedBuffer d(bytes, od), bb(bytes, ob);
        d.Fill(a);
        bb.Fill(b);
        backend_.ReduceInto(d.data(), bb.data(), count, t, op);
        EXPECT_TRUE(SameElements(ops, d.data(), want, count)) << "ReduceInto";
        EXPECT_TRUE(d.GuardsIntact());
        EXPECT_TRUE(Holds(bb.data(), b)) << "b changed";
      }
      {  // ReduceInto with dst == src.
        GuardedBuffer d(bytes, od);
        d.Fill(a);
        backend_.ReduceInto(d.data(), d.data(), count, t, op);
        EXPECT_TRUE(SameElements(ops, d.data(), want_self, count))
            << "ReduceInto(x, x)";
        EXPECT_TRUE(d.GuardsIntact());
      }
      if (HasFailure()) return;  // one failing case says enough
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllIsasTypesOps, ReduceKernelTest,
    ::testing::Combine(::testing::ValuesIn(AllIsas()),
                       ::testing::ValuesIn(kAllTypes),
                       ::testing::ValuesIn(kAllOps)),
    [](const ::testing::TestParamInfo<KernelParam>& info) {
      return IsaTestName(std::get<0>(info.param)) + "_" +
             DataTypeName(std::get<1>(info.param)) + "_" +
             ReduceOpName(std::get<2>(info.param));
    });

// ---- per ISA: DivideBy, wraparound, conversions, NaN ----------------------------------

class ReduceIsaTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!backend_.Init(GetParam(), &why)) GTEST_SKIP() << why;
  }
  Backend backend_;
};

TEST_P(ReduceIsaTest, DivideByMatchesReference) {
  std::mt19937_64 rng(7);
  for (DataType t : kAllTypes) {
    const TypeOps ops = OpsFor(t);
    // Powers of two take the multiply by the reciprocal (integers: a shift);
    // 1 << 20 sends many float results into the subnormals; from 2^24 on
    // 8-bit integers no longer divide in float.
    for (int n : {1, 2, 3, 4, 7, 1000, 1024, 1 << 20, (1 << 24) + 1, 0x7fffffff}) {
      for (size_t count : kCounts) {
        for (size_t off : {size_t{0}, ops.size, size_t{3}}) {
          SCOPED_TRACE(::testing::Message()
                       << DataTypeName(t) << " / " << n << " count " << count
                       << " offset " << off);
          const size_t bytes = count * ops.size;
          std::vector<unsigned char> x(bytes), want(bytes);
          for (size_t i = 0; i < count; ++i) {
            ops.gen(rng, &x[i * ops.size]);
            ops.divide(&x[i * ops.size], n, &want[i * ops.size]);
          }
          GuardedBuffer d(bytes, off);
          d.Fill(x);
          backend_.DivideBy(d.data(), count, t, n);
          ASSERT_TRUE(SameElements(ops, d.data(), want, count));
          ASSERT_TRUE(d.GuardsIntact());
        }
      }
    }
  }
}

template <typename T>
std::vector<T> Repeat(T v, size_t n) {
  return std::vector<T>(n, v);
}

TEST_P(ReduceIsaTest, DivideByIntegersTruncateTowardZero) {
  constexpr size_t kN = 37;  // vector body and tail
  auto check32 = [&](int32_t v, int n, int32_t want) {
    std::vector<int32_t> x = Repeat(v, kN);
    backend_.DivideBy(x.data(), kN, DataType::kInt32, n);
    EXPECT_EQ(x, Repeat(want, kN)) << v << " / " << n;
  };
  check32(-7, 2, -3);
  check32(7, 2, 3);
  check32(-1, 2, 0);
  check32(-9, 3, -3);
  check32(std::numeric_limits<int32_t>::min(), 1,
          std::numeric_limits<int32_t>::min());
  check32(std::numeric_limits<int32_t>::min(), 2, -1073741824);

  std::vector<int8_t> i8 = Repeat<int8_t>(-128, kN);
  backend_.DivideBy(i8.data(), kN, DataType::kInt8, 3);
  EXPECT_EQ(i8, Repeat<int8_t>(-42, kN));
  i8 = Repeat<int8_t>(-128, kN);
  backend_.DivideBy(i8.data(), kN, DataType::kInt8, 200);  // n beyond int8
  EXPECT_EQ(i8, Repeat<int8_t>(0, kN));
  std::vector<uint8_t> u8 = Repeat<uint8_t>(255, kN);
  backend_.DivideBy(u8.data(), kN, DataType::kUint8, 2);
  EXPECT_EQ(u8, Repeat<uint8_t>(127, kN));
  std::vector<uint32_t> u32 = Repeat<uint32_t>(0xffffffffu, kN);
  backend_.DivideBy(u32.data(), kN, DataType::kUint32, 2);
  EXPECT_EQ(u32, Repeat<uint32_t>(0x7fffffffu, kN));
  std::vector<int64_t> i64 = Repeat<int64_t>(-7000000000000LL, kN);
  backend_.DivideBy(i64.data(), kN, DataType::kInt64, 3);
  EXPECT_EQ(i64, Repeat<int64_t>(-2333333333333LL, kN));
  std::vector<uint64_t> u64 = Repeat<uint64_t>(~uint64_t{0}, kN);
  backend_.DivideBy(u64.data(), kN, DataType::kUint64, 3);
  EXPECT_EQ(u64, Repeat<uint64_t>(~uint64_t{0} / 3, kN));
}

// The reference conversions of float16 (`half`) or bfloat16.
struct Ref16 {
  bool half;
  float widen(uint16_t h) const { return half ? RefHalfToFloat(h) : RefBF16ToFloat(h); }
  uint16_t narrow(float f) const { return half ? RefFloatToHalf(f) : RefFloatToBF16(f); }
};

// The average of two 16-bit floats (ReduceHalfParts) is the float32 one,
// rounded once: the sum of two large values overflows the 16-bit type but
// not their average.
TEST_P(ReduceIsaTest, SixteenBitAverageOfTwoMatchesReference) {
  std::mt19937_64 rng(11);
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    const bool half = t == DataType::kFloat16;
    const TypeOps ops = OpsFor(t);
    const Ref16 ref{half};
    auto widen = [&](uint16_t h) { return ref.widen(h); };
    auto narrow = [&](float f) { return ref.narrow(f); };
    const uint16_t largest = half ? 0x7bff : 0x7f7f;
    for (size_t count : kCounts) {
      std::vector<unsigned char> a(2 * count), b(2 * count), want(2 * count);
      for (size_t i = 0; i < count; ++i) {
        ops.gen(rng, &a[2 * i]);
        ops.gen(rng, &b[2 * i]);
        if (i % 5 == 0) {
          Put<uint16_t>(&a[2 * i], largest);
          Put<uint16_t>(&b[2 * i], i % 10 == 0 ? largest : uint16_t(largest - 3));
        }
        Put<uint16_t>(&want[2 * i], narrow((widen(Get<uint16_t>(&a[2 * i])) +
                                            widen(Get<uint16_t>(&b[2 * i]))) /
                                           2.0f));
      }
      SCOPED_TRACE(::testing::Message() << DataTypeName(t) << " count " << count);
      GuardedBuffer d(2 * count, 1), ba(2 * count, 0), bb(2 * count, 3);
      ba.Fill(a);
      bb.Fill(b);
      const void* parts[2] = {ba.data(), bb.data()};
      backend_.ReduceHalfParts(d.data(), parts, 2, count, t, ReduceOp::kAvg, 2);
      ASSERT_TRUE(SameElements(ops, d.data(), want, count));
      ASSERT_TRUE(d.GuardsIntact());
      backend_.ReduceHalfParts(ba.data(), parts, 2, count, t, ReduceOp::kAvg, 2);  // dst == a
      ASSERT_TRUE(SameElements(ops, ba.data(), want, count));
      if (count > 0 && half) {  // bfloat16's largest doubled overflows float32 too
        EXPECT_EQ(widen(Get<uint16_t>(d.data())), widen(largest));
      }
    }
  }
}

// Up to kMaxHalfParts 16-bit vectors combined in float32 in order, an
// average divided, rounded once: against the reference, every op, on
// unaligned buffers and with dst == parts[0].
TEST_P(ReduceIsaTest, ReduceHalfPartsMatchesReference) {
  std::mt19937_64 rng(17);
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    const TypeOps ops = OpsFor(t);
    const Ref16 ref{t == DataType::kFloat16};
    auto widen = [&](uint16_t h) { return ref.widen(h); };
    auto narrow = [&](float f) { return ref.narrow(f); };
    for (int n = 1; n <= kMaxHalfParts; ++n) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                          ReduceOp::kAvg}) {
        for (int divisor : {n, 3, 4}) {
          if (op != ReduceOp::kAvg && divisor != n) continue;
          for (size_t count : kCounts) {
            SCOPED_TRACE(::testing::Message() << DataTypeName(t) << " " << n << " parts "
                                              << ReduceOpName(op) << " / " << divisor
                                              << " count " << count);
            std::vector<std::vector<unsigned char>> in(n, std::vector<unsigned char>(2 * count));
            std::vector<unsigned char> want(2 * count);
            for (size_t i = 0; i < count; ++i) {
              for (int j = 0; j < n; ++j) ops.gen(rng, &in[j][2 * i]);
              float acc = widen(Get<uint16_t>(&in[0][2 * i]));
              const ReduceOp rop = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
              for (int j = 1; j < n; ++j) {
                acc = RefFloatOp<float>(acc, widen(Get<uint16_t>(&in[j][2 * i])), rop);
              }
              if (op == ReduceOp::kAvg) acc /= static_cast<float>(divisor);
              Put<uint16_t>(&want[2 * i], narrow(acc));
            }
            std::vector<GuardedBuffer> bufs;
            const void* ptrs[kMaxHalfParts];
            for (int j = 0; j < n; ++j) bufs.emplace_back(2 * count, static_cast<size_t>(j % 3));
            for (int j = 0; j < n; ++j) {
              bufs[j].Fill(in[j]);
              ptrs[j] = bufs[j].data();
            }
            GuardedBuffer d(2 * count, 1);
            backend_.ReduceHalfParts(d.data(), ptrs, n, count, t, op, divisor);
            ASSERT_TRUE(SameElements(ops, d.data(), want, count));
            ASSERT_TRUE(d.GuardsIntact());
            backend_.ReduceHalfParts(bufs[0].data(), ptrs, n, count, t, op, divisor);
            ASSERT_TRUE(SameElements(ops, bufs[0].data(), want, count)) << "dst == parts[0]";
            ASSERT_TRUE(bufs[0].GuardsIntact());
          }
        }
      }
    }
  }
}

// float32 and float64: the sum rounded, then halved, as Reduce2 and
// DivideBy compute it.
template <typename F>
void CheckAverageOfTwo(const Backend& backend, DataType t, std::mt19937_64& rng) {
  const TypeOps ops = OpsFor(t);
  for (size_t count : kCounts) {
    std::vector<unsigned char> a(count * sizeof(F)), b(count * sizeof(F)), want(a.size());
    for (size_t i = 0; i < count; ++i) {
      ops.gen(rng, &a[i * sizeof(F)]);
      ops.gen(rng, &b[i * sizeof(F)]);
      Put<F>(&want[i * sizeof(F)], (Get<F>(&a[i * sizeof(F)]) + Get<F>(&b[i * sizeof(F)])) / 2);
    }
    SCOPED_TRACE(::testing::Message() << DataTypeName(t) << " count " << count);
    GuardedBuffer d(a.size(), 1), ba(a.size(), 0), bb(a.size(), 3);
    ba.Fill(a);
    bb.Fill(b);
    backend.AverageOfTwo(d.data(), ba.data(), bb.data(), count, t);
    ASSERT_TRUE(SameElements(ops, d.data(), want, count));
    ASSERT_TRUE(d.GuardsIntact());
    backend.AverageOfTwo(bb.data(), ba.data(), bb.data(), count, t);  // dst == b
    ASSERT_TRUE(SameElements(ops, bb.data(), want, count));
  }
}

TEST_P(ReduceIsaTest, AverageOfTwoFloatsIsTheHalvedSum) {
  std::mt19937_64 rng(13);
  CheckAverageOfTwo<float>(backend_, DataType::kFloat32, rng);
  CheckAverageOfTwo<double>(backend_, DataType::kFloat64, rng);
}

// 8-bit integers divide in float (32-bit in double): every value, every
// divisor up to 300 and a few beyond, against C's division.
TEST_P(ReduceIsaTest, DivideByEightBitIntegersEveryValue) {
  std::vector<int> divisors;
  for (int n = 1; n <= 300; ++n) divisors.push_back(n);
  for (int n : {1 << 12, (1 << 24) - 1, 1 << 24, 0x7fffffff}) divisors.push_back(n);
  for (int n : divisors) {
    std::vector<int8_t> i8(256), want_i8(256);
    std::vector<uint8_t> u8(256), want_u8(256);
    for (int v = 0; v < 256; ++v) {
      i8[v] = static_cast<int8_t>(v - 128);
      want_i8[v] = static_cast<int8_t>((v - 128) / n);
      u8[v] = static_cast<uint8_t>(v);
      want_u8[v] = static_cast<uint8_t>(v / n);
    }
    backend_.DivideBy(i8.data(), i8.size(), DataType::kInt8, n);
    backend_.DivideBy(u8.data(), u8.size(), DataType::kUint8, n);
    ASSERT_EQ(i8, want_i8) << "int8 / " << n;
    ASSERT_EQ(u8, want_u8) << "uint8 / " << n;
  }
}

TEST_P(ReduceIsaTest, DivideByFloats) {
  constexpr size_t kN = 37;
  std::vector<float> f = Repeat(1.0f, kN);
  backend_.DivideBy(f.data(), kN, DataType::kFloat32, 3);
  EXPECT_EQ(f, Repeat(1.0f / 3.0f, kN));  // true division, not * (1/3)
  std::vector<double> d = Repeat(-10.0, kN);
  backend_.DivideBy(d.data(), kN, DataType::kFloat64, 4);
  EXPECT_EQ(d, Repeat(-2.5, kN));
  std::vector<uint16_t> h = Repeat<uint16_t>(0x3c00, kN);  // 1.0
  backend_.DivideBy(h.data(), kN, DataType::kFloat16, 3);
  EXPECT_EQ(h, Repeat<uint16_t>(0x3555, kN));  // 0.33325195
  std::vector<uint16_t> bf = Repeat<uint16_t>(0x3f80, kN);  // 1.0
  backend_.DivideBy(bf.data(), kN, DataType::kBFloat16, 3);
  EXPECT_EQ(bf, Repeat<uint16_t>(0x3eab, kN));  // 0.333984375
}

// a op b over a vector body and a tail. Every lane must agree, up to the
// payload of a NaN (unspecified for sum/prod: x86 returns the NaN of one
// operand, and which one depends on how the compiler ordered them).
template <typename T>
std::vector<T> Apply(const Backend& be, DataType t, ReduceOp op, T a, T b) {
  constexpr size_t kN = 131;
  std::vector<T> x = Repeat(a, kN), y = Repeat(b, kN), d(kN);
  be.Reduce2(d.data(), x.data(), y.data(), kN, t, op);
  const TypeOps ops = OpsFor(t);
  const auto* lanes = reinterpret_cast<const unsigned char*>(d.data());
  for (size_t i = 1; i < kN; ++i) {
    if (!ops.same(lanes + i * sizeof(T), lanes)) {
      ADD_FAILURE() << DataTypeName(t) << " " << ReduceOpName(op) << ": lane "
                    << i << " is " << Hex(lanes + i * sizeof(T), sizeof(T))
                    << ", lane 0 is " << Hex(lanes, sizeof(T));
    }
  }
  return d;
}

TEST_P(ReduceIsaTest, IntegersWrapAround) {
  const Backend& be = backend_;
  using L8 = std::numeric_limits<int8_t>;
  using L32 = std::numeric_limits<int32_t>;
  using L64 = std::numeric_limits<int64_t>;
  EXPECT_EQ(Apply<int8_t>(be, DataType::kInt8, ReduceOp::kSum, 127, 1)[0], -128);
  EXPECT_EQ(Apply<int8_t>(be, DataType::kInt8, ReduceOp::kSum, -128, -1)[0], 127);
  EXPECT_EQ(Apply<int8_t>(be, DataType::kInt8, ReduceOp::kProd, 16, 16)[0], 0);
  EXPECT_EQ(Apply<int8_t>(be, DataType::kInt8, ReduceOp::kProd, L8::min(), -1)[0],
            L8::min());
  EXPECT_EQ(Apply<int8_t>(be, DataType::kInt8, ReduceOp::kProd, -3, 50)[0], 106);
  EXPECT_EQ(Apply<uint8_t>(be, DataType::kUint8, ReduceOp::kSum, 255, 1)[0], 0);
  EXPECT_EQ(Apply<uint8_t>(be, DataType::kUint8, ReduceOp::kProd, 16, 17)[0], 16);
  EXPECT_EQ(Apply<int32_t>(be, DataType::kInt32, ReduceOp::kSum, L32::max(), 1)[0],
            L32::min());
  EXPECT_EQ(Apply<int32_t>(be, DataType::kInt32, ReduceOp::kProd, L32::min(), -1)[0],
            L32::min());
  EXPECT_EQ(Apply<int32_t>(be, DataType::kInt32, ReduceOp::kProd, 65536, 65537)[0],
            65536);
  EXPECT_EQ(Apply<uint32_t>(be, DataType::kUint32, ReduceOp::kSum, 0xffffffffu, 2)[0],
            1u);
  EXPECT_EQ(Apply<int64_t>(be, DataType::kInt64, ReduceOp::kSum, L64::max(), 1)[0],
            L64::min());
  EXPECT_EQ(Apply<int64_t>(be, DataType::kInt64, ReduceOp::kProd, L64::min(), -1)[0],
            L64::min());
  EXPECT_EQ(Apply<int64_t>(be, DataType::kInt64, ReduceOp::kProd,
                           int64_t{1} << 32, (int64_t{1} << 32) + 3)[0],
            int64_t{3} << 32);
  EXPECT_EQ(Apply<uint64_t>(be, DataType::kUint64, ReduceOp::kProd, ~uint64_t{0},
                            ~uint64_t{0})[0],
            1u);
  // Signed vs unsigned ordering of the same bits.
  EXPECT_EQ(Apply<int8_t>(be, DataType::kInt8, ReduceOp::kMin, -1, 1)[0], -1);
  EXPECT_EQ(Apply<uint8_t>(be, DataType::kUint8, ReduceOp::kMin, 255, 1)[0], 1);
  EXPECT_EQ(Apply<int64_t>(be, DataType::kInt64, ReduceOp::kMax, L64::min(), -1)[0],
            -1);
  EXPECT_EQ(Apply<uint64_t>(be, DataType::kUint64, ReduceOp::kMax, ~uint64_t{0}, 1)[0],
            ~uint64_t{0});
}

// Every float16 value through a kernel: x + (-0) == x, min(x, x) == x, and
// NaNs come back quiet with their payload.
TEST_P(ReduceIsaTest, Float16AllValuesRoundTripThroughKernels) {
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    const bool half = t == DataType::kFloat16;
    std::vector<uint16_t> all(65536), zero(65536, 0x8000), out(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
      const std::vector<uint16_t>& other = op == ReduceOp::kSum ? zero : all;
      backend_.Reduce2(out.data(), all.data(), other.data(), all.size(), t, op);
      for (uint32_t h = 0; h < 65536; ++h) {
        const bool nan = half ? HalfIsNan(h) : BF16IsNan(h);
        const uint16_t want =
            static_cast<uint16_t>(nan ? (h | (half ? 0x200 : 0x40)) : h);
        ASSERT_EQ(out[h], want) << DataTypeName(t) << " " << ReduceOpName(op)
                                << " of 0x" << std::hex << h;
      }
    }
  }
}

// Every float16/bfloat16 value times a few factors: products land on
// subnormals, overflow and rounding ties; compared with the reference.
TEST_P(ReduceIsaTest, NarrowFloatProductsRoundLikeReference) {
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    const TypeOps ops = OpsFor(t);
    const std::vector<uint16_t> factors =
        t == DataType::kFloat16
            ? std::vector<uint16_t>{0x3555, 0x0001, 0x7bff, 0x1400, 0xb801,
                                    0x3c01}
            : std::vector<uint16_t>{0x3eab, 0x0001, 0x7f7f, 0x3a80, 0xbf01,
                                    0x3f81};
    std::vector<uint16_t> all(65536), out(65536), want(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    for (uint16_t f : factors) {
      std::vector<uint16_t> fv(all.size(), f);
      backend_.Reduce2(out.data(), all.data(), fv.data(), all.size(), t,
                       ReduceOp::kProd);
      for (size_t i = 0; i < all.size(); ++i) {
        ops.op(reinterpret_cast<const unsigned char*>(&all[i]),
               reinterpret_cast<const unsigned char*>(&f), ReduceOp::kProd,
               reinterpret_cast<unsigned char*>(&want[i]));
        ASSERT_TRUE(ops.same(reinterpret_cast<const unsigned char*>(&out[i]),
                             reinterpret_cast<const unsigned char*>(&want[i])))
            << DataTypeName(t) << " 0x" << std::hex << i << " * 0x" << f
            << ": got 0x" << out[i] << ", want 0x" << want[i];
      }
    }
  }
}

template <typename F>
void ExpectNanSemantics(const Backend& be, DataType t) {
  const F nan = std::numeric_limits<F>::quiet_NaN();
  const F inf = std::numeric_limits<F>::infinity();
  for (ReduceOp op : kAllOps) {
    SCOPED_TRACE(ReduceOpName(op));
    EXPECT_TRUE(std::isnan(Apply<F>(be, t, op, nan, F(1))[0]));
    EXPECT_TRUE(std::isnan(Apply<F>(be, t, op, F(1), nan)[0]));
    EXPECT_TRUE(std::isnan(Apply<F>(be, t, op, nan, nan)[0]));
    EXPECT_TRUE(std::isnan(Apply<F>(be, t, op, -inf, nan)[0]));
    EXPECT_TRUE(std::isnan(Apply<F>(be, t, op, F(0), -nan)[0]));
  }
  // Zeros are ordered and the result does not depend on the operand order.
  EXPECT_TRUE(std::signbit(Apply<F>(be, t, ReduceOp::kMin, F(0), -F(0))[0]));
  EXPECT_TRUE(std::signbit(Apply<F>(be, t, ReduceOp::kMin, -F(0), F(0))[0]));
  EXPECT_FALSE(std::signbit(Apply<F>(be, t, ReduceOp::kMax, F(0), -F(0))[0]));
  EXPECT_FALSE(std::signbit(Apply<F>(be, t, ReduceOp::kMax, -F(0), F(0))[0]));
  EXPECT_EQ(Apply<F>(be, t, ReduceOp::kMin, -inf, F(3))[0], -inf);
  EXPECT_EQ(Apply<F>(be, t, ReduceOp::kMax, -inf, F(3))[0], F(3));
  EXPECT_TRUE(std::isnan(Apply<F>(be, t, ReduceOp::kSum, inf, -inf)[0]));
}

TEST_P(ReduceIsaTest, NanPropagatesAndZerosAreOrdered) {
  {
    SCOPED_TRACE("float32");
    ExpectNanSemantics<float>(backend_, DataType::kFloat32);
  }
  {
    SCOPED_TRACE("float64");
    ExpectNanSemantics<double>(backend_, DataType::kFloat64);
  }
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    SCOPED_TRACE(DataTypeName(t));
    const bool half = t == DataType::kFloat16;
    const uint16_t nan = half ? 0x7e00 : 0x7fc0, one = half ? 0x3c00 : 0x3f80;
    const uint16_t snan = half ? 0xfc01 : 0xff81;
    for (ReduceOp op : kAllOps) {
      for (auto [x, y] : {std::pair<uint16_t, uint16_t>{nan, one}, {one, nan},
                          {snan, one}, {one, snan}, {nan, snan}}) {
        const uint16_t r = Apply<uint16_t>(backend_, t, op, x, y)[0];
        EXPECT_TRUE(half ? HalfIsNan(r) : BF16IsNan(r))
            << ReduceOpName(op) << " gave 0x" << std::hex << r;
      }
    }
    EXPECT_EQ(Apply<uint16_t>(backend_, t, ReduceOp::kMin, 0x0000, 0x8000)[0],
              0x8000);
    EXPECT_EQ(Apply<uint16_t>(backend_, t, ReduceOp::kMax, 0x8000, 0x0000)[0],
              0x0000);
  }
}

// min/max are commutative bit for bit, NaN payloads included, and every
// level computes the same bits as the scalar one.
TEST_P(ReduceIsaTest, MinMaxCommutativeAndEqualToScalarEvenWithNans) {
  std::mt19937_64 rng(11);
  const KernelTable* scalar = reduce_internal::ScalarKernels();
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16,
                     DataType::kFloat32, DataType::kFloat64}) {
    const size_t size = DataTypeSize(t);
    constexpr size_t kN = 1029;
    std::vector<unsigned char> a(kN * size), b(kN * size);
    for (auto& c : a) c = static_cast<unsigned char>(rng());
    for (auto& c : b) c = static_cast<unsigned char>(rng());
    for (size_t i = 0; i < kN; i += 3) {  // plenty of NaNs: exponent all ones
      a[i * size + size - 1] |= 0x7f;
      a[i * size + size - 2] |= t == DataType::kBFloat16 ? 0xc0 : 0xf0;
    }
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      std::vector<unsigned char> ab(a.size()), ba(a.size()), ref(a.size());
      backend_.Reduce2(ab.data(), a.data(), b.data(), kN, t, op);
      backend_.Reduce2(ba.data(), b.data(), a.data(), kN, t, op);
      scalar->binary[static_cast<int>(t)][static_cast<int>(op)](
          ref.data(), a.data(), b.data(), kN);
      EXPECT_EQ(ab, ba) << DataTypeName(t) << " " << ReduceOpName(op);
      EXPECT_EQ(ab, ref) << DataTypeName(t) << " " << ReduceOpName(op);
    }
  }
}

// Every 16-bit pattern widens like the scalar conversion, and every float32
// narrows like it (specials, the rounding boundaries around every 16-bit
// value, random bits), at counts and offsets that leave vector tails.
TEST_P(ReduceIsaTest, BulkConversionsMatchScalarBitForBit) {
  std::mt19937 rng(11);
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    SCOPED_TRACE(DataTypeName(t));
    auto widen1 = [t](uint16_t h) {
      return t == DataType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
    };
    auto narrow1 = [t](float f) {
      return t == DataType::kFloat16 ? FloatToHalf(f) : FloatToBFloat16(f);
    };
    std::vector<uint16_t> all(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    std::vector<float> floats;
    for (uint16_t h : all) {
      const float f = widen1(h);
      uint32_t u;
      memcpy(&u, &f, 4);
      for (uint32_t du : {0u, 1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
        const uint32_t v = u + du;
        float g;
        memcpy(&g, &v, 4);
        floats.push_back(g);
      }
    }
    for (int i = 0; i < 100000; ++i) {
      const uint32_t v = rng();
      float g;
      memcpy(&g, &v, 4);
      floats.push_back(g);
    }
    for (size_t off : {size_t{0}, size_t{1}, size_t{3}}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{15}, size_t{17}, size_t{65535 - 3}}) {
        SCOPED_TRACE(::testing::Message() << "offset " << off << " count " << count);
        std::vector<float> wide(count + 1, -1.0f);
        backend_.Widen(wide.data(), all.data() + off, count, t);
        for (size_t i = 0; i < count; ++i) {
          const float want = widen1(all[off + i]);
          ASSERT_EQ(memcmp(&wide[i], &want, 4), 0) << "widen " << all[off + i];
        }
        ASSERT_EQ(wide[count], -1.0f) << "wrote past the end";
      }
      const size_t count = floats.size() - off;
      std::vector<uint16_t> narrow(count + 1, 0xabcd);
      backend_.Narrow(narrow.data(), floats.data() + off, count, t);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(narrow[i], narrow1(floats[off + i])) << "narrow " << floats[off + i];
      }
      ASSERT_EQ(narrow[count], 0xabcd) << "wrote past the end";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, ReduceIsaTest, ::testing::ValuesIn(AllIsas()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return IsaTestName(info.param);
                         });

// ---- conversions ----------------------------------------------------------------------

TEST(ReduceConversionTest, HalfSpecialValues) {
  struct Case {
    uint16_t h;
    uint32_t f;
  };
  const Case kCases[] = {
      {0x0000, 0x00000000}, {0x8000, 0x80000000},  // +-0
      {0x7c00, 0x7f800000}, {0xfc00, 0xff800000},  // +-inf
      {0x0001, 0x33800000},                        // min subnormal 2^-24
      {0x03ff, 0x387fc000},                        // max subnormal
      {0x0400, 0x38800000},                        // min normal 2^-14
      {0x7bff, 0x477fe000},                        // max finite 65504
      {0xfbff, 0xc77fe000},  {0x3c00, 0x3f800000}, {0xc000, 0xc0000000},
      {0x7e00, 0x7fc00000},                        // quiet NaN
      {0x7c01, 0x7fc02000},                        // signalling NaN, quieted
      {0xfd55, 0xffeaa000},
  };
  for (const Case& c : kCases) {
    EXPECT_EQ(Bits(HalfToFloat(c.h)), c.f) << std::hex << c.h;
    EXPECT_EQ(Bits(RefHalfToFloat(c.h)), c.f) << std::hex << c.h;
  }
  struct Back {
    float f;
    uint16_t h;
  };
  const Back kBack[] = {
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00},
      {65504.0f, 0x7bff},
      {65519.99f, 0x7bff},
      {65520.0f, 0x7c00},  // tie between 65504 (odd) and 2^16: even = inf
      {1e10f, 0x7c00},
      {-1e10f, 0xfc00},
      {1.0f + 0x1p-11f, 0x3c00},            // tie, stays even
      {1.0f + 3 * 0x1p-11f, 0x3c02},        // tie, up to even
      {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, // just above the tie
      {0x1p-24f, 0x0001},
      {0x1p-25f, 0x0000},                   // tie between 0 and 2^-24
      {0x1.000002p-25f, 0x0001},
      {3 * 0x1p-25f, 0x0002},               // tie, up to even
      {0x1p-14f - 0x1p-25f, 0x0400},        // max subnormal/min normal tie
      {0x1p-14f - 0x1p-24f, 0x03ff},
      {1e-10f, 0x0000},
      {-1e-10f, 0x8000},
      {FloatFromBits(0x7fc00000), 0x7e00},
      {FloatFromBits(0x7f800001), 0x7e00},  // sNaN: quiet, low payload lost
      {FloatFromBits(0xffffffff), 0xffff},
  };
  for (const Back& c : kBack) {
    EXPECT_EQ(FloatToHalf(c.f), c.h) << c.f;
    EXPECT_EQ(RefFloatToHalf(c.f), c.h) << c.f;
  }
}

TEST(ReduceConversionTest, BFloat16SpecialValues) {
  EXPECT_EQ(Bits(BFloat16ToFloat(0x7f80)), 0x7f800000u);
  EXPECT_EQ(Bits(BFloat16ToFloat(0xff80)), 0xff800000u);
  EXPECT_EQ(Bits(BFloat16ToFloat(0x8000)), 0x80000000u);
  EXPECT_EQ(Bits(BFloat16ToFloat(0x0001)), 0x00010000u);  // subnormal
  EXPECT_EQ(Bits(BFloat16ToFloat(0x7f81)), 0x7f810000u);  // exact, even NaN
  struct Back {
    uint32_t f;
    uint16_t b;
  };
  const Back kBack[] = {
      {0x00000000, 0x0000}, {0x80000000, 0x8000}, {0x7f800000, 0x7f80},
      {0xff800000, 0xff80}, {0x3f808000, 0x3f80},  // 1 + 2^-8: tie, even
      {0x3f818000, 0x3f82},                        // tie, up to even
      {0x3f808001, 0x3f81},                        // above the tie
      {0x7f7fffff, 0x7f80},                        // max float rounds to inf
      {0x7f7f7fff, 0x7f7f}, {0x7f7f8000, 0x7f80},  // tie at the top: inf
      {0x00000001, 0x0000}, {0x00008000, 0x0000},  // subnormal tie -> 0
      {0x00018000, 0x0002},                        // subnormal tie, up
      {0x007fffff, 0x0080},                        // max subnormal -> min normal
      {0x7fc00000, 0x7fc0}, {0x7f800001, 0x7fc0},  // sNaN: quiet
      {0xff800001, 0xffc0}, {0x7fffffff, 0x7fff},
  };
  for (const Back& c : kBack) {
    EXPECT_EQ(FloatToBFloat16(FloatFromBits(c.f)), c.b) << std::hex << c.f;
    EXPECT_EQ(RefFloatToBF16(FloatFromBits(c.f)), c.b) << std::hex << c.f;
  }
}

TEST(ReduceConversionTest, AllNarrowValuesWidenLikeReferenceAndRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    ASSERT_EQ(Bits(HalfToFloat(v)), Bits(RefHalfToFloat(v))) << std::hex << h;
    ASSERT_EQ(Bits(BFloat16ToFloat(v)), Bits(RefBF16ToFloat(v))) << std::hex << h;
    ASSERT_EQ(FloatToHalf(HalfToFloat(v)),
              HalfIsNan(v) ? static_cast<uint16_t>(v | 0x200) : v)
        << std::hex << h;
    ASSERT_EQ(FloatToBFloat16(BFloat16ToFloat(v)),
              BF16IsNan(v) ? static_cast<uint16_t>(v | 0x40) : v)
        << std::hex << h;
  }
}

// Narrowing: every sign and exponent, with mantissas at and around the
// rounding boundaries of both formats plus random ones.
TEST(ReduceConversionTest, NarrowingMatchesReference) {
  std::mt19937_64 rng(3);
  const uint32_t kLow[] = {0,      1,      0xfff,  0x1000, 0x1001, 0x1fff,
                           0x7fff, 0x8000, 0x8001, 0xffff, 0x2000, 0x3000};
  for (uint32_t se = 0; se < 512; ++se) {
    for (int k = 0; k < 600; ++k) {
      uint32_t man = static_cast<uint32_t>(rng()) & 0x7fffff;
      if (k < 240) {
        const uint32_t low = kLow[k % 12];
        man = (man & ~((k / 12) % 2 ? 0xffffu : 0x1fffu)) | low;
      }
      const uint32_t bits = (se << 23) | man;
      const float f = FloatFromBits(bits);
      ASSERT_EQ(FloatToHalf(f), RefFloatToHalf(f)) << std::hex << bits;
      ASSERT_EQ(FloatToBFloat16(f), RefFloatToBF16(f)) << std::hex << bits;
    }
  }
}

// ---- enums, invalid input, dispatch ------------------------------------------------------

TEST(ReduceEnumTest, SizesNamesAndValidity) {
  const size_t kSizes[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
  const char* const kNames[] = {"int8",    "uint8",    "int32",   "uint32",
                                "int64",   "uint64",   "float16", "bfloat16",
                                "float32", "float64"};
  for (int v = 0; v < 10; ++v) {
    EXPECT_TRUE(IsValidDataType(v));
    EXPECT_EQ(DataTypeSize(static_cast<DataType>(v)), kSizes[v]);
    EXPECT_STREQ(DataTypeName(static_cast<DataType>(v)), kNames[v]);
  }
  for (int v : {-1, 10, 11, 1000, std::numeric_limits<int>::min()}) {
    EXPECT_FALSE(IsValidDataType(v)) << v;
    EXPECT_EQ(DataTypeSize(static_cast<DataType>(v)), 0u) << v;
    EXPECT_STREQ(DataTypeName(static_cast<DataType>(v)), "invalid") << v;
  }
  const char* const kOpNames[] = {"sum", "prod", "min", "max", "avg"};
  for (int v = 0; v < 5; ++v) {
    EXPECT_TRUE(IsValidReduceOp(v));
    EXPECT_STREQ(ReduceOpName(static_cast<ReduceOp>(v)), kOpNames[v]);
  }
  for (int v : {-1, 5, 6, 1000}) {
    EXPECT_FALSE(IsValidReduceOp(v)) << v;
    EXPECT_STREQ(ReduceOpName(static_cast<ReduceOp>(v)), "invalid") << v;
  }
}

TEST(ReduceEnumTest, InvalidArgumentsChangeNothing) {
  std::vector<int32_t> d = {1, 2, 3}, s = {4, 5, 6};
  const std::vector<int32_t> before = d;
  Reduce2(d.data(), d.data(), s.data(), 3, static_cast<DataType>(10),
          ReduceOp::kSum);
  Reduce2(d.data(), d.data(), s.data(), 3, static_cast<DataType>(-1),
          ReduceOp::kSum);
  ReduceInto(d.data(), s.data(), 3, DataType::kInt32, static_cast<ReduceOp>(5));
  ReduceInto(d.data(), s.data(), 3, DataType::kInt32, static_cast<ReduceOp>(-1));
  DivideBy(d.data(), 3, DataType::kInt32, 0);
  DivideBy(d.data(), 3, DataType::kInt32, -2);
  DivideBy(d.data(), 3, static_cast<DataType>(42), 2);
  EXPECT_EQ(d, before);
  // count == 0 never touches the pointers.
  Reduce2(nullptr, nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum);
  ReduceInto(nullptr, nullptr, 0, DataType::kFloat16, ReduceOp::kMax);
  DivideBy(nullptr, 0, DataType::kInt8, 3);
}

TEST(ReduceDispatchTest, SelectsBestLevelTheCpuSupports) {
  using reduce_internal::SelectKernels;
  const char* best =
      CpuHasAvx512() ? "avx512" : (CpuHasAvx2() ? "avx2" : "scalar");
  EXPECT_STREQ(SelectKernels(nullptr)->isa, best);
  EXPECT_STREQ(SelectKernels("")->isa, best);
  EXPECT_STREQ(SelectKernels("bogus")->isa, best);
  EXPECT_STREQ(SelectKernels("avx512")->isa, best);
  EXPECT_STREQ(SelectKernels("avx2")->isa, CpuHasAvx2() ? "avx2" : "scalar");
  EXPECT_STREQ(SelectKernels("scalar")->isa, "scalar");
  EXPECT_EQ(SelectKernels("scalar"), reduce_internal::ScalarKernels());

  EXPECT_TRUE(ForceKernelIsaForTesting("scalar"));
  EXPECT_STREQ(KernelIsa(), "scalar");
  EXPECT_FALSE(ForceKernelIsaForTesting("bogus"));
  EXPECT_FALSE(ForceKernelIsaForTesting(nullptr));
  EXPECT_STREQ(KernelIsa(), "scalar");  // unchanged by a failed call
  EXPECT_EQ(ForceKernelIsaForTesting("avx2"), CpuHasAvx2());
  EXPECT_EQ(ForceKernelIsaForTesting("avx512"), CpuHasAvx512());
  EXPECT_TRUE(ForceKernelIsaForTesting(best));
  EXPECT_STREQ(KernelIsa(), best);
}

// HCOMM_KERNELS is read at the first call of the process, so each case runs
// in a fresh child process (threadsafe death-test style re-executes the
// binary for just this test).
TEST(ReduceDispatchDeathTest, EnvironmentCapsTheLevelAtFirstUse) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const char* best =
      CpuHasAvx512() ? "avx512" : (CpuHasAvx2() ? "avx2" : "scalar");
  struct Case {
    const char* env;
    const char* want;
  };
  const Case kCases[] = {
      {"scalar", "scalar"},
      {"avx2", CpuHasAvx2() ? "avx2" : "scalar"},
      {"avx512", best},
      {"nonsense", best},
  };
  for (const Case& c : kCases) {
    EXPECT_EXIT(
        {
          setenv("HCOMM_KERNELS", c.env, 1);
          const bool ok = std::strcmp(KernelIsa(), c.want) == 0;
          setenv("HCOMM_KERNELS", "scalar", 1);  // read once: ignored now
          std::exit(ok && std::strcmp(KernelIsa(), c.want) == 0 ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "")
        << "HCOMM_KERNELS=" << c.env;
  }
}

}  // namespace
}  // namespace hcomm
