// Tests for the fp16/bf16 chunk codec (half.h), on every implementation this
// CPU can run: exhaustive round trips of all 16-bit patterns, rounding to
// nearest-even checked against the neighbouring representable values (not
// against the library's own conversions), the documented error bounds, the
// overflow refusal, Inf/NaN/subnormals, the vector path against the scalar
// path bit for bit, and the documented bound of a compressed sum.
#include "algorithms/kernels/half.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace hcomm {
namespace {

constexpr HalfFormat kFormats[] = {HalfFormat::kFp16, HalfFormat::kBf16};

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Format facts, written here independently of the library.
struct Spec {
  uint16_t inf;        // bits of +Inf
  uint16_t quiet_bit;  // the fraction's top bit
  double u;            // relative bound in the normal range
  double eta;          // absolute bound below it
  double min_normal;
};

Spec SpecOf(HalfFormat f) {
  if (f == HalfFormat::kFp16) return {0x7c00, 0x0200, 0x1p-11, 0x1p-25, 0x1p-14};
  return {0x7f80, 0x0040, 0x1p-8, 0x1p-134, 0x1p-126};
}

bool IsNan16(HalfFormat f, uint16_t h) {
  const Spec s = SpecOf(f);
  return (h & s.inf) == s.inf && (h & (s.inf ^ 0x7fff)) != 0;
}

// The value of a 16-bit pattern, computed with ldexp (not bit shifts into a
// float32), for non-NaN patterns. +-Inf for the infinities.
double RefValue(HalfFormat f, uint16_t h) {
  const bool neg = (h & 0x8000) != 0;
  const int man_bits = f == HalfFormat::kFp16 ? 10 : 7;
  const int bias = f == HalfFormat::kFp16 ? 15 : 127;
  const int exp = (h & 0x7fff) >> man_bits;
  const int man = h & ((1 << man_bits) - 1);
  const int max_exp = f == HalfFormat::kFp16 ? 31 : 255;
  double mag;
  if (exp == max_exp) {
    mag = std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    mag = std::ldexp(man, 1 - bias - man_bits);
  } else {
    mag = std::ldexp(man + (1 << man_bits), exp - bias - man_bits);
  }
  return neg ? -mag : mag;
}

float Decode1(HalfFormat f, uint16_t h) {
  float x;
  DecodeHalf(f, &h, 1, &x);
  return x;
}

uint16_t Encode1(HalfFormat f, float x, bool* fits = nullptr) {
  uint16_t h = 0xdead;
  const bool ok = EncodeHalf(f, &x, 1, &h);
  if (fits != nullptr) *fits = ok;
  return h;
}

// Whether `h` is x rounded to nearest-even in format f, judged from the
// neighbouring magnitudes (Inf counts as the next value above the largest
// finite, 2^16 or 2^128, as IEEE rounding does).
::testing::AssertionResult IsNearestEven(HalfFormat f, float x, uint16_t h) {
  const Spec s = SpecOf(f);
  const uint16_t sign = Bits(x) >> 31 ? 0x8000 : 0;
  if ((h & 0x8000) != sign) {
    return ::testing::AssertionFailure() << "sign of " << x << " lost: " << std::hex << h;
  }
  const uint16_t mag = h & 0x7fff;
  if (mag > s.inf) return ::testing::AssertionFailure() << x << " became NaN";
  auto value = [&](uint16_t m) {
    if (m == s.inf) return f == HalfFormat::kFp16 ? 65536.0 : std::ldexp(1.0, 128);
    return RefValue(f, m);
  };
  const double ax = std::fabs(static_cast<double>(x));
  const double err = std::fabs(ax - value(mag));
  if (mag < s.inf && std::fabs(ax - value(mag + 1)) < err) {
    return ::testing::AssertionFailure()
           << x << " -> " << std::hex << h << ": the next value up is nearer";
  }
  if (mag > 0 && std::fabs(ax - value(mag - 1)) < err) {
    return ::testing::AssertionFailure()
           << x << " -> " << std::hex << h << ": the next value down is nearer";
  }
  const bool tie = (mag < s.inf && std::fabs(ax - value(mag + 1)) == err) ||
                   (mag > 0 && std::fabs(ax - value(mag - 1)) == err);
  if (tie && (mag & 1) != 0) {
    return ::testing::AssertionFailure() << x << " -> " << std::hex << h << ": a tie went to odd";
  }
  return ::testing::AssertionSuccess();
}

// ---- every test runs on every implementation this CPU has ----------------------

class HalfTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!ForceHalfKernelIsaForTesting(GetParam().c_str())) {
      GTEST_SKIP() << "this CPU or build cannot run " << GetParam();
    }
    ASSERT_EQ(GetParam(), HalfKernelIsa());
  }
};

TEST_P(HalfTest, EveryPatternRoundTrips) {
  for (HalfFormat f : kFormats) {
    SCOPED_TRACE(HalfFormatName(f));
    std::vector<uint16_t> all(65536), back(65536);
    std::vector<float> wide(65536);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    DecodeHalf(f, all.data(), all.size(), wide.data());
    // Only Inf and NaN among the inputs are at or above the overflow
    // threshold, and those are not finite: accepted.
    ASSERT_TRUE(EncodeHalf(f, wide.data(), wide.size(), back.data()));
    const Spec s = SpecOf(f);
    for (size_t i = 0; i < all.size(); ++i) {
      const uint16_t h = all[i];
      if (IsNan16(f, h)) {
        ASSERT_TRUE(std::isnan(wide[i])) << std::hex << h;
        // Canonicalisation: quiet bit set, sign and payload kept.
        ASSERT_EQ(back[i], h | s.quiet_bit) << std::hex << h;
      } else {
        ASSERT_EQ(static_cast<double>(wide[i]), RefValue(f, h)) << std::hex << h;
        ASSERT_EQ(back[i], h) << std::hex << h;
      }
    }
  }
}

TEST_P(HalfTest, RandomFloatsRoundToNearestEvenWithinTheDocumentedBound) {
  std::mt19937 rng(7);
  for (HalfFormat f : kFormats) {
    SCOPED_TRACE(HalfFormatName(f));
    const Spec s = SpecOf(f);
    const double max_finite = RefValue(f, s.inf - 1);
    std::vector<float> in;
    // Uniform bit patterns (every exponent), and values spread over the
    // format's own range, its subnormals and the overflow edge.
    std::uniform_int_distribution<uint32_t> bits;
    std::uniform_real_distribution<double> unit(-1, 1);
    for (int i = 0; i < 200000; ++i) in.push_back(FromBits(bits(rng)));
    for (int e = -30; e <= 17; ++e) {
      for (int i = 0; i < 2000; ++i) in.push_back(static_cast<float>(std::ldexp(unit(rng), e)));
    }
    for (int i = 0; i < 2000; ++i) {
      in.push_back(static_cast<float>(max_finite * (1 + unit(rng) * 0x1p-6)));
    }
    for (float x : in) {
      bool fits;
      const uint16_t h = Encode1(f, x, &fits);
      if (!std::isfinite(x)) continue;
      const double ax = std::fabs(static_cast<double>(x));
      const bool overflows = ax >= (f == HalfFormat::kFp16 ? 65520.0 : 0x1.ffp127);
      ASSERT_EQ(fits, !overflows) << x;
      if (!fits) continue;
      ASSERT_TRUE(IsNearestEven(f, x, h));
      const double y = Decode1(f, h);
      ASSERT_FALSE(std::isinf(y)) << x;
      const double err = std::fabs(y - static_cast<double>(x));
      if (ax >= s.min_normal) {
        ASSERT_LE(err, s.u * ax) << x;
      } else {
        ASSERT_LE(err, s.eta) << x;
      }
    }
  }
}

TEST_P(HalfTest, FiniteValuesThatWouldOverflowAreRefused) {
  struct Case {
    HalfFormat f;
    float x;
    bool fits;
    uint16_t bits;  // when it fits
  };
  const Case cases[] = {
      {HalfFormat::kFp16, 65504.0f, true, 0x7bff},
      {HalfFormat::kFp16, -65504.0f, true, 0xfbff},
      {HalfFormat::kFp16, std::nextafter(65520.0f, 0.0f), true, 0x7bff},
      {HalfFormat::kFp16, 65520.0f, false, 0},
      {HalfFormat::kFp16, -65520.0f, false, 0},
      {HalfFormat::kFp16, 1e10f, false, 0},
      {HalfFormat::kFp16, FLT_MAX, false, 0},
      {HalfFormat::kBf16, 3.0e38f, true, 0x7f62},
      {HalfFormat::kBf16, FromBits(0x7f7f7fffu), true, 0x7f7f},
      {HalfFormat::kBf16, FromBits(0x7f7f8000u), false, 0},
      {HalfFormat::kBf16, FLT_MAX, false, 0},
      {HalfFormat::kBf16, -FLT_MAX, false, 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(HalfFormatName(c.f)) + " " + std::to_string(c.x));
    bool fits;
    const uint16_t h = Encode1(c.f, c.x, &fits);
    EXPECT_EQ(fits, c.fits);
    if (c.fits) {
      EXPECT_EQ(h, c.bits) << std::hex << h;
    }
  }
  // One overflowing value at any position of a chunk, body or tail, is
  // found; the same chunk without it is accepted.
  for (HalfFormat f : kFormats) {
    const float big = f == HalfFormat::kFp16 ? 70000.0f : FLT_MAX;
    for (size_t n : {1u, 7u, 8u, 9u, 16u, 17u, 31u, 33u, 100u}) {
      std::vector<float> in(n);
      for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) - 3.5f;
      std::vector<uint16_t> out(n);
      ASSERT_TRUE(EncodeHalf(f, in.data(), n, out.data())) << n;
      for (size_t at = 0; at < n; ++at) {
        std::vector<float> bad = in;
        bad[at] = at % 2 ? big : -big;
        EXPECT_FALSE(EncodeHalf(f, bad.data(), n, out.data()))
            << HalfFormatName(f) << " n=" << n << " at=" << at;
        // Inf or NaN in the same place is no overflow.
        bad[at] = at % 2 ? INFINITY : NAN;
        EXPECT_TRUE(EncodeHalf(f, bad.data(), n, out.data()));
      }
    }
  }
}

TEST_P(HalfTest, InfinitiesAndNansArePreserved) {
  for (HalfFormat f : kFormats) {
    SCOPED_TRACE(HalfFormatName(f));
    const Spec s = SpecOf(f);
    EXPECT_EQ(Encode1(f, INFINITY), s.inf);
    EXPECT_EQ(Encode1(f, -INFINITY), s.inf | 0x8000);
    EXPECT_EQ(Decode1(f, s.inf), INFINITY);
    EXPECT_EQ(Decode1(f, s.inf | 0x8000), -INFINITY);
    // Quiet and signalling NaNs, either sign, payloads high and low (a
    // payload only in the low bits must not turn into Inf).
    for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0x7fbfffffu, 0x7f800100u,
                         0xffc00000u, 0xff800001u, 0x7fffffffu}) {
      bool fits;
      const uint16_t h = Encode1(f, FromBits(nan), &fits);
      EXPECT_TRUE(fits);
      EXPECT_TRUE(IsNan16(f, h)) << std::hex << nan << " -> " << h;
      EXPECT_EQ(h & 0x8000, (nan >> 16) & 0x8000) << std::hex << nan;
      EXPECT_TRUE(std::isnan(Decode1(f, h)));
    }
  }
}

TEST_P(HalfTest, Subnormals) {
  const HalfFormat f16 = HalfFormat::kFp16;
  EXPECT_EQ(Encode1(f16, 0x1p-24f), 0x0001);       // smallest subnormal
  EXPECT_EQ(Encode1(f16, 0x1p-25f), 0x0000);       // tie: to the even zero
  EXPECT_EQ(Encode1(f16, -0x1p-25f), 0x8000);      // signed zero
  EXPECT_EQ(Encode1(f16, 0x1.0002p-25f), 0x0001);  // just above the tie
  EXPECT_EQ(Encode1(f16, 0x1.8p-24f), 0x0002);     // tie between 1 and 2: even
  EXPECT_EQ(Encode1(f16, 0x1.4p-23f), 0x0002);     // 2.5 units: even 2
  EXPECT_EQ(Encode1(f16, -0x1p-26f), 0x8000);
  EXPECT_EQ(Encode1(f16, 1023 * 0x1p-24f), 0x03ff);     // largest subnormal
  EXPECT_EQ(Encode1(f16, 1023.5f * 0x1p-24f), 0x0400);  // tie up into the normals
  EXPECT_EQ(Encode1(f16, 0x1p-14f), 0x0400);            // smallest normal
  EXPECT_EQ(Encode1(f16, 1e-40f), 0x0000);              // a float32 subnormal
  EXPECT_EQ(Encode1(f16, -0.0f), 0x8000);
  EXPECT_EQ(Decode1(f16, 0x0001), 0x1p-24f);
  EXPECT_EQ(Decode1(f16, 0x83ff), -1023 * 0x1p-24f);
  EXPECT_TRUE(std::signbit(Decode1(f16, 0x8000)));
  // bfloat16 keeps float32's subnormals, rounded to 7 fraction bits.
  const HalfFormat b16 = HalfFormat::kBf16;
  EXPECT_EQ(Encode1(b16, FromBits(0x00000001u)), 0x0000);  // 2^-149: to zero
  EXPECT_EQ(Encode1(b16, FromBits(0x00008000u)), 0x0000);  // tie: to even zero
  EXPECT_EQ(Encode1(b16, FromBits(0x00018000u)), 0x0002);  // tie: to even 2
  EXPECT_EQ(Encode1(b16, FromBits(0x807fffffu)), 0x8080);  // up into the normals
  EXPECT_EQ(Decode1(b16, 0x0001), 0x1p-133f);
}

TEST_P(HalfTest, AccumulateAddsTheDecodedValuesInFloat32) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> unit(-4, 4);
  for (HalfFormat f : kFormats) {
    for (size_t n : {0u, 1u, 5u, 8u, 16u, 23u, 1000u}) {
      std::vector<float> x(n), acc(n), want(n);
      std::vector<uint16_t> h(n);
      for (size_t i = 0; i < n; ++i) {
        x[i] = unit(rng);
        acc[i] = unit(rng);
      }
      ASSERT_TRUE(EncodeHalf(f, x.data(), n, h.data()));
      for (size_t i = 0; i < n; ++i) {
        want[i] = acc[i] + static_cast<float>(RefValue(f, h[i]));
      }
      AccumulateHalf(f, h.data(), n, acc.data());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(acc[i]), Bits(want[i])) << HalfFormatName(f) << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST_P(HalfTest, CompressedSumStaysWithinTheDocumentedBound) {
  // A ring of n ranks: the partial sum leaves each rank rounded to the
  // format and the next rank adds its own value in float32 (h = n - 1
  // roundings so far); the final sum is rounded once more for the allgather
  // (h = R = n). half.h: |result - sum| <= g sum|x| + (1 + g) R eta.
  std::mt19937 rng(3);
  for (HalfFormat f : kFormats) {
    const Spec s = SpecOf(f);
    for (int n : {2, 3, 8, 64}) {
      for (const double scale : {1.0, 0x1p-20, 100.0}) {
        SCOPED_TRACE(std::string(HalfFormatName(f)) + " n=" + std::to_string(n) +
                     " scale=" + std::to_string(scale));
        constexpr size_t kCount = 4096;
        std::uniform_real_distribution<double> unit(-scale, scale);
        std::vector<std::vector<float>> x(n, std::vector<float>(kCount));
        for (auto& v : x) {
          for (float& e : v) e = static_cast<float>(unit(rng));
        }
        std::vector<float> acc = x[0];
        std::vector<uint16_t> wire(kCount);
        for (int r = 1; r < n; ++r) {
          ASSERT_TRUE(EncodeHalf(f, acc.data(), kCount, wire.data()));
          acc = x[r];
          AccumulateHalf(f, wire.data(), kCount, acc.data());
        }
        ASSERT_TRUE(EncodeHalf(f, acc.data(), kCount, wire.data()));
        DecodeHalf(f, wire.data(), kCount, acc.data());
        const int h = n, roundings = n;
        const double g = std::pow(1 + s.u, h) * std::pow(1 + 0x1p-24, n - 1) - 1;
        double worst = 0;
        for (size_t i = 0; i < kCount; ++i) {
          long double sum = 0, abs_sum = 0;
          for (int r = 0; r < n; ++r) {
            sum += x[r][i];
            abs_sum += std::fabs(x[r][i]);
          }
          const double bound = g * static_cast<double>(abs_sum) + (1 + g) * roundings * s.eta;
          const double err = std::fabs(static_cast<double>(acc[i] - sum));
          ASSERT_LE(err, bound) << "element " << i;
          worst = std::max(worst, err / bound);
        }
        std::printf("%s n=%d scale=%g: largest error %.3f of the bound\n", HalfFormatName(f), n,
                    scale, worst);
        // The bound is meant to be reachable in order of magnitude, not loose.
        EXPECT_GT(worst, 0.01);
      }
    }
  }
}

TEST_P(HalfTest, InvalidFormatWritesNothing) {
  const auto bad = static_cast<HalfFormat>(7);
  float x = 1.0f, acc = 2.0f;
  uint16_t h = 0x1234;
  EXPECT_FALSE(EncodeHalf(bad, &x, 1, &h));
  EXPECT_EQ(h, 0x1234);
  DecodeHalf(bad, &h, 1, &x);
  EXPECT_EQ(x, 1.0f);
  AccumulateHalf(bad, &h, 1, &acc);
  EXPECT_EQ(acc, 2.0f);
  EXPECT_STREQ(HalfFormatName(bad), "invalid");
  // n == 0 touches nothing, null pointers included.
  EXPECT_TRUE(EncodeHalf(HalfFormat::kFp16, nullptr, 0, nullptr));
  DecodeHalf(HalfFormat::kBf16, nullptr, 0, nullptr);
  AccumulateHalf(HalfFormat::kBf16, nullptr, 0, nullptr);
}

INSTANTIATE_TEST_SUITE_P(Isa, HalfTest, ::testing::Values("scalar", "avx2"),
                         [](const auto& info) { return info.param; });

// ---- the vector path against the scalar path -------------------------------------

// Random inputs rich in edge cases: every exponent, NaN, Inf, zeros, values
// near the overflow thresholds and subnormals.
std::vector<float> EdgeRichInput(size_t n, std::mt19937* rng) {
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_real_distribution<float> unit(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) {
    switch (kind(*rng)) {
      case 0:
        x = FromBits(bits(*rng));
        break;
      case 1:
        x = FromBits((bits(*rng) & 0x807fffffu) | 0x7f800000u);  // Inf or NaN
        break;
      case 2:
        x = unit(*rng) * 65530.0f;
        break;
      case 3:
        x = unit(*rng) * 0x1p-20f;
        break;
      case 4:
        x = FromBits(0x477ff000u + (bits(*rng) % 3) - 1);  // around 65520
        break;
      default:
        x = unit(*rng) * 100.0f;
    }
  }
  return v;
}

TEST(HalfSimdTest, VectorPathMatchesScalarPathBitForBit) {
  if (!ForceHalfKernelIsaForTesting("avx2")) GTEST_SKIP() << "no AVX2 + F16C here";
  std::mt19937 rng(5);
  std::vector<size_t> sizes;
  for (size_t n = 0; n <= 67; ++n) sizes.push_back(n);
  sizes.push_back(100003);
  for (HalfFormat f : kFormats) {
    for (size_t n : sizes) {
      for (size_t offset : {0u, 1u}) {  // 16-byte-aligned starts and not
        SCOPED_TRACE(std::string(HalfFormatName(f)) + " n=" + std::to_string(n) +
                     " offset=" + std::to_string(offset));
        std::vector<float> in = EdgeRichInput(n + offset, &rng);
        // Chunks that fit as well as chunks that do not.
        if (n > 0 && rng() % 2) {
          for (float& x : in) {
            if (std::isfinite(x) && std::fabs(x) >= 65504.0f) x = 1.0f;
          }
        }
        const float* src = in.data() + offset;
        std::vector<uint16_t> enc[2];
        std::vector<float> dec[2], acc[2];
        bool fits[2];
        std::vector<float> acc0 = EdgeRichInput(n, &rng);
        for (int level = 0; level < 2; ++level) {
          ASSERT_TRUE(ForceHalfKernelIsaForTesting(level == 0 ? "scalar" : "avx2"));
          enc[level].assign(n + offset, 0);
          fits[level] = EncodeHalf(f, src, n, enc[level].data() + offset);
          dec[level].assign(n + offset, 0);
          DecodeHalf(f, enc[level].data() + offset, n, dec[level].data() + offset);
          acc[level] = acc0;
          AccumulateHalf(f, enc[level].data() + offset, n, acc[level].data());
        }
        ASSERT_EQ(fits[0], fits[1]);
        ASSERT_EQ(enc[0], enc[1]);
        for (size_t i = 0; i < n + offset; ++i) {
          ASSERT_EQ(Bits(dec[0][i]), Bits(dec[1][i])) << i;
        }
        for (size_t i = 0; i < n; ++i) {
          // Which payload a sum of two NaNs keeps is not specified.
          if (std::isnan(acc[0][i]) && std::isnan(acc[1][i])) continue;
          ASSERT_EQ(Bits(acc[0][i]), Bits(acc[1][i])) << i;
        }
      }
    }
  }
}

TEST(HalfSimdTest, ForcingAnUnknownLevelChangesNothing) {
  ASSERT_TRUE(ForceHalfKernelIsaForTesting("scalar"));
  EXPECT_FALSE(ForceHalfKernelIsaForTesting("bogus"));
  EXPECT_FALSE(ForceHalfKernelIsaForTesting(nullptr));
  EXPECT_STREQ(HalfKernelIsa(), "scalar");
}

}  // namespace
}  // namespace hcomm

namespace hcomm {
namespace {

// In place, from the front of the float buffer, equals the two-buffer
// decode, at sizes around the block (2048) and its multiples.
TEST(HalfInPlaceTest, MatchesDecodeHalf) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
  for (HalfFormat f : {HalfFormat::kFp16, HalfFormat::kBf16}) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{2047}, size_t{2048}, size_t{2049},
                     size_t{3000}, size_t{4096}, size_t{10001}}) {
      std::vector<float> x(n);
      for (float& v : x) v = dist(rng);
      std::vector<uint16_t> wire(n);
      ASSERT_TRUE(EncodeHalf(f, x.data(), n, wire.data()));
      std::vector<float> want(n);
      DecodeHalf(f, wire.data(), n, want.data());
      std::vector<float> buf(n, -1.0f);
      memcpy(buf.data(), wire.data(), 2 * n);
      DecodeHalfInPlace(f, buf.data(), n);
      ASSERT_EQ(memcmp(buf.data(), want.data(), 4 * n), 0) << HalfFormatName(f) << " n " << n;
    }
  }
}

}  // namespace
}  // namespace hcomm
