// ReduceParts on each of its paths: two parts (the pair kernels, and
// AverageOfTwo for float32/float64), up to kMaxHalfParts 16-bit parts
// (ReduceHalfParts, 16-bit averages of two included), more
// than that (float32 chunks), and the plain types, against a reference
// that combines each element in float32 (double for float64) in part order.
#include "algorithms/kernels/reduce_parts.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace hcomm {
namespace {

template <typename F>
F Combine(F a, F b, ReduceOp op) {
  switch (op) {
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMin: return std::min(a, b);
    case ReduceOp::kMax: return std::max(a, b);
    default: return a + b;
  }
}

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kAvg};

// Small multiples of 1/8 (no -0, no NaN): sums and products stay exact or
// round the same way in any correct float32 evaluation of the same order.
float Value(std::mt19937_64& rng) {
  return static_cast<float>(static_cast<int>(rng() % 101) - 50) / 8;
}

TEST(ReducePartsTest, SixteenBitPartsRoundOnceOnEveryPath) {
  std::mt19937_64 rng(5);
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    const bool half = t == DataType::kFloat16;
    auto widen = [half](uint16_t h) { return half ? HalfToFloat(h) : BFloat16ToFloat(h); };
    auto narrow = [half](float f) { return half ? FloatToHalf(f) : FloatToBFloat16(f); };
    // 1-2: the pair kernels; 3-8: ReduceHalfParts; 9 and 12: float32 chunks
    // (more than one: 5000 elements).
    for (int n : {1, 2, 3, 8, 9, 12}) {
      for (ReduceOp op : kOps) {
        const size_t count = 5000;
        std::vector<std::vector<uint16_t>> in(n, std::vector<uint16_t>(count));
        std::vector<uint16_t> want(count), got(count);
        for (size_t i = 0; i < count; ++i) {
          for (int j = 0; j < n; ++j) {
            // Products of many parts stay in range with factors near 1.
            in[j][i] = narrow(op == ReduceOp::kProd ? 1 + Value(rng) / 64 : Value(rng));
          }
          float acc = widen(in[0][i]);
          for (int j = 1; j < n; ++j) {
            acc = Combine(acc, widen(in[j][i]), op == ReduceOp::kAvg ? ReduceOp::kSum : op);
          }
          if (op == ReduceOp::kAvg) acc /= static_cast<float>(n);
          want[i] = narrow(acc);
        }
        ReduceParts(
            got.data(), [&](int j) { return reinterpret_cast<const char*>(in[j].data()); }, n,
            count, t, op, n);
        EXPECT_EQ(got, want) << DataTypeName(t) << " " << n << " parts "
                             << ReduceOpName(op);
        // In place, into the first part.
        std::vector<uint16_t> first = in[0];
        ReduceParts(
            first.data(),
            [&](int j) {
              return reinterpret_cast<const char*>(j == 0 ? first.data() : in[j].data());
            },
            n, count, t, op, n);
        EXPECT_EQ(first, want) << DataTypeName(t) << " " << n << " parts "
                               << ReduceOpName(op) << " in place";
      }
    }
  }
}

// 60000 is a float16; the sum of two or three is not, their average is.
TEST(ReducePartsTest, SixteenBitAverageDoesNotOverflowOnTheWay) {
  for (int n : {2, 3, 9}) {
    std::vector<uint16_t> part(17, FloatToHalf(60000.0f)), out(17);
    ReduceParts(
        out.data(), [&](int) { return reinterpret_cast<const char*>(part.data()); }, n,
        part.size(), DataType::kFloat16, ReduceOp::kAvg, n);
    for (uint16_t x : out) EXPECT_EQ(HalfToFloat(x), 60000.0f) << n << " parts";
  }
}

template <typename F>
void CheckPlain(DataType t, std::mt19937_64& rng) {
  for (int n : {1, 2, 3}) {
    for (ReduceOp op : kOps) {
      const size_t count = 1000;
      std::vector<std::vector<F>> in(n, std::vector<F>(count));
      std::vector<F> want(count), got(count);
      for (size_t i = 0; i < count; ++i) {
        for (int j = 0; j < n; ++j) in[j][i] = static_cast<F>(Value(rng)) / 3;
        F acc = in[0][i];
        for (int j = 1; j < n; ++j) {
          acc = Combine(acc, in[j][i], op == ReduceOp::kAvg ? ReduceOp::kSum : op);
        }
        if (op == ReduceOp::kAvg) acc /= static_cast<F>(n);
        want[i] = acc;
      }
      ReduceParts(
          got.data(), [&](int j) { return reinterpret_cast<const char*>(in[j].data()); }, n,
          count, t, op, n);
      EXPECT_EQ(got, want) << DataTypeName(t) << " " << n << " parts " << ReduceOpName(op);
    }
  }
}

TEST(ReducePartsTest, PlainTypes) {
  std::mt19937_64 rng(6);
  CheckPlain<float>(DataType::kFloat32, rng);
  CheckPlain<double>(DataType::kFloat64, rng);
}

}  // namespace
}  // namespace hcomm
