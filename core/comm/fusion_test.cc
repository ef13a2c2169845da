#include "core/comm/fusion.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace hcomm {
namespace {

constexpr DataType kTypes[] = {DataType::kInt8,    DataType::kUint8,    DataType::kInt32,
                               DataType::kUint32,  DataType::kInt64,    DataType::kUint64,
                               DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                               DataType::kFloat64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kAvg};

// What the allreduce does to the lanes of `nranks` ranks: the library's own
// reduction kernel, then the division of avg.
std::vector<char> Reduced(const std::vector<size_t>& queued, DataType t, ReduceOp op) {
  const size_t bytes = LaneBytes(t);
  std::vector<char> acc(bytes), mine(bytes);
  WriteLanes(acc.data(), t, op, queued[0]);
  for (size_t r = 1; r < queued.size(); ++r) {
    WriteLanes(mine.data(), t, op, queued[r]);
    ReduceInto(acc.data(), mine.data(), kFusionLanes, t, op == ReduceOp::kAvg ? ReduceOp::kSum : op);
  }
  if (op == ReduceOp::kAvg) DivideBy(acc.data(), kFusionLanes, t, static_cast<int>(queued.size()));
  return acc;
}

size_t Expected(const std::vector<size_t>& queued) {
  const size_t least = std::min<size_t>(*std::min_element(queued.begin(), queued.end()),
                                        kMaxFusedOps);
  size_t p = 0;
  while ((p == 0 ? 1 : p * 2) <= least) p = p == 0 ? 1 : p * 2;
  return p;
}

TEST(FusionTest, EveryDtypeAndOpAgreesOnTheLargestPowerOfTwoAllHave) {
  const std::vector<std::vector<size_t>> cases = {
      {0, 0}, {5, 0}, {1, 1}, {1, 7}, {7, 9, 12}, {3000, 3000}, {1024, 1500}, {2, 3, 4, 5},
      {1000, 1000, 1000, 999}};
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      for (const auto& queued : cases) {
        const int n = static_cast<int>(queued.size());
        ASSERT_TRUE(LanesExact(t, op, n));
        std::vector<char> lanes = Reduced(queued, t, op);
        EXPECT_EQ(AgreedBatch(lanes.data(), t, op, n), Expected(queued))
            << DataTypeName(t) << " " << ReduceOpName(op) << " over " << n << " ranks, first has "
            << queued[0];
      }
    }
  }
}

TEST(FusionTest, ManyRanks) {
  // 200 ranks: int8 cannot hold a sum of 200 ones (bfloat16 can, to 256)
  // are refused; the others agree.
  std::vector<size_t> queued(200, 64);
  queued[137] = 9;
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      const bool exact = LanesExact(t, op, 200);
      if ((op == ReduceOp::kSum || op == ReduceOp::kAvg) &&
          t == DataType::kInt8) {
        EXPECT_FALSE(exact) << DataTypeName(t) << " " << ReduceOpName(op);
        continue;
      }
      ASSERT_TRUE(exact) << DataTypeName(t) << " " << ReduceOpName(op);
      std::vector<char> lanes = Reduced(queued, t, op);
      EXPECT_EQ(AgreedBatch(lanes.data(), t, op, 200), 8u) << DataTypeName(t) << " " << ReduceOpName(op);
    }
  }
}

}  // namespace
}  // namespace hcomm
