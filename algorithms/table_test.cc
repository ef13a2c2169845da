// The algorithm table: every operation's rows, the selector reading them,
// and the shared segment's rows taking every call where a segment exists.
#include "algorithms/table.h"

#include <set>
#include <utility>

#include "algorithms/selector.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

constexpr CollectiveOp kOps[] = {
    CollectiveOp::kAllReduce, CollectiveOp::kBroadcast,     CollectiveOp::kReduce,
    CollectiveOp::kAllGather, CollectiveOp::kReduceScatter, CollectiveOp::kAllToAll,
    CollectiveOp::kGather,    CollectiveOp::kScatter,       CollectiveOp::kBarrier,
};

TEST(TableTest, OneRowPerOperationAndAlgorithmWithARunAndACost) {
  std::set<std::pair<int, int>> seen;
  for (const AlgorithmEntry& e : AlgorithmTable()) {
    EXPECT_TRUE(seen.insert({static_cast<int>(e.op), static_cast<int>(e.algo)}).second)
        << CollectiveOpName(e.op) << " " << AlgorithmName(e.algo) << " twice";
    EXPECT_NE(e.run, nullptr);
    EXPECT_NE(e.cost, nullptr);
    EXPECT_NE(e.algo, Algorithm::kAuto);
    EXPECT_EQ(FindAlgorithm(e.op, e.algo), &e);
  }
}

TEST(TableTest, EveryOperationHasMessagesAndTheSegment) {
  for (CollectiveOp op : kOps) {
    EXPECT_TRUE(Supports(op, Algorithm::kSegment)) << CollectiveOpName(op);
    int by_messages = 0;
    for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kDirect}) {
      by_messages += Supports(op, a) ? 1 : 0;
    }
    EXPECT_GE(by_messages, 1) << CollectiveOpName(op);
  }
  // The shapes of the operations: alltoall is an exchange, a barrier a
  // dissemination, gather and scatter have no ring, reduce_scatter no tree.
  EXPECT_FALSE(Supports(CollectiveOp::kAllToAll, Algorithm::kRing));
  EXPECT_FALSE(Supports(CollectiveOp::kAllToAll, Algorithm::kTree));
  EXPECT_FALSE(Supports(CollectiveOp::kBarrier, Algorithm::kRing));
  EXPECT_FALSE(Supports(CollectiveOp::kBarrier, Algorithm::kDirect));
  EXPECT_FALSE(Supports(CollectiveOp::kGather, Algorithm::kRing));
  EXPECT_FALSE(Supports(CollectiveOp::kReduceScatter, Algorithm::kTree));
  EXPECT_FALSE(Supports(CollectiveOp::kAllReduce, Algorithm::kAuto));
}

TEST(TableTest, TheSegmentTakesEveryCallUnlessAnAlgorithmIsForced) {
  const LinkModel shm = LinkModelFor("shm");
  for (CollectiveOp op : kOps) {
    for (size_t bytes : {size_t{0}, size_t{8}, size_t{1} << 20, size_t{64} << 20}) {
      for (int n : {2, 3, 8}) {
        Choice c = ChooseAlgorithm(op, bytes, n, shm, Algorithm::kAuto, /*segment=*/true);
        EXPECT_EQ(c.algo, Algorithm::kSegment) << CollectiveOpName(op) << " " << bytes;
        EXPECT_FALSE(c.forced);
        // Without a segment, a message algorithm of the table.
        c = ChooseAlgorithm(op, bytes, n, shm, Algorithm::kAuto, /*segment=*/false);
        EXPECT_NE(c.algo, Algorithm::kSegment);
        EXPECT_NE(FindAlgorithm(op, c.algo), nullptr) << CollectiveOpName(op);
        EXPECT_EQ(c.entry, FindAlgorithm(op, c.algo));
      }
    }
  }
  // A forced algorithm the operation has wins over the segment.
  const Choice forced = ChooseAlgorithm(CollectiveOp::kAllReduce, 1 << 20, 4, shm,
                                        Algorithm::kRing, /*segment=*/true);
  EXPECT_EQ(forced.algo, Algorithm::kRing);
  EXPECT_TRUE(forced.forced);
  // One it has not is ignored: the model chooses among the others.
  const Choice unavailable = ChooseAlgorithm(CollectiveOp::kAllToAll, 1 << 20, 4, shm,
                                             Algorithm::kRing, /*segment=*/false);
  EXPECT_EQ(unavailable.algo, Algorithm::kDirect);
  EXPECT_FALSE(unavailable.forced);
}

TEST(TableTest, CostsGrowWithTheBytesAndAreNamedInTheExplanation) {
  const LinkModel tcp = LinkModelFor("tcp");
  for (const AlgorithmEntry& e : AlgorithmTable()) {
    if (e.op == CollectiveOp::kBarrier) continue;
    const double small = e.cost(4096, 4, tcp), large = e.cost(64 << 20, 4, tcp);
    if (small < 0) continue;  // not a choice at 4 ranks (allgather's tree: powers of two)
    EXPECT_GT(large, small) << CollectiveOpName(e.op) << " " << AlgorithmName(e.algo);
  }
  const Choice c = ChooseAlgorithm(CollectiveOp::kAllReduce, 1 << 20, 4, tcp, Algorithm::kAuto);
  EXPECT_NE(c.Explain().find("ring"), std::string::npos) << c.Explain();
  EXPECT_NE(c.Explain().find("direct"), std::string::npos) << c.Explain();
}

TEST(TableTest, TheRingGoesByCpuUpToFourMebibytesWhereAnOrderIsGiven) {
  const std::vector<int> order = {0, 2, 1, 3}, none;
  EXPECT_TRUE(RingByCpu(4 << 20, &order));
  EXPECT_FALSE(RingByCpu((4 << 20) + 1, &order));
  EXPECT_FALSE(RingByCpu(8, &none));
  EXPECT_FALSE(RingByCpu(8, nullptr));
}

}  // namespace
}  // namespace hcomm
