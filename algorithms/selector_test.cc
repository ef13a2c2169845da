// The cost model's choices at the corners it was calibrated on.
#include "algorithms/selector.h"

#include "algorithms/cost_model.h"

#include "gtest/gtest.h"

namespace hcomm {
namespace {

TEST(SelectorTest, SmallAllReduceFansOutOnlyWhileCpusAreFree) {
  const Choice free_cpus =
      ChooseAlgorithm(CollectiveOp::kAllReduce, 8, 4, LinkModelFor("tcp"), Algorithm::kAuto);
  EXPECT_EQ(free_cpus.algo, Algorithm::kDirect) << free_cpus.Explain();
  const Choice shared = ChooseAlgorithm(CollectiveOp::kAllReduce, 8, 4,
                                        LinkModelFor("tcp", /*cpus_shared=*/true),
                                        Algorithm::kAuto);
  EXPECT_EQ(shared.algo, Algorithm::kTree) << shared.Explain();
  EXPECT_GT(shared.cost_us[static_cast<int>(Algorithm::kDirect)],
            free_cpus.cost_us[static_cast<int>(Algorithm::kDirect)]);
}

TEST(SelectorTest, LargeAllReduceTakesTheRing) {
  for (bool shared : {false, true}) {
    for (const char* t : {"tcp", "shm"}) {
      const Choice c = ChooseAlgorithm(CollectiveOp::kAllReduce, 64 << 20, 8,
                                       LinkModelFor(t, shared), Algorithm::kAuto);
      EXPECT_EQ(c.algo, Algorithm::kRing) << t << " " << shared << ": " << c.Explain();
      EXPECT_FALSE(c.forced);
    }
  }
}

TEST(SelectorTest, MidSizedAllReduceHalvesAndDoubles) {
  for (int n : {4, 8}) {
    const LinkModel tcp = LinkModelFor("tcp");
    const Choice c = ChooseAlgorithm(CollectiveOp::kAllReduce, 1 << 20, n, tcp, Algorithm::kAuto);
    EXPECT_EQ(c.algo, Algorithm::kTree) << n << ": " << c.Explain();
    EXPECT_TRUE(TreeAllReduceHalves(1 << 20, n, tcp));
  }
  // Whole vectors while they are small; the ring's chunks once halves
  // outgrow the cache.
  EXPECT_FALSE(TreeAllReduceHalves(64, 4, LinkModelFor("tcp")));
  EXPECT_FALSE(TreeAllReduceHalves(64 << 20, 4, LinkModelFor("tcp")));
  // Ranks sharing CPUs switch to the ring sooner.
  EXPECT_TRUE(TreeAllReduceHalves(4 << 20, 4, LinkModelFor("tcp")));
  EXPECT_FALSE(TreeAllReduceHalves(4 << 20, 4, LinkModelFor("tcp", /*cpus_shared=*/true)));
  const Choice shared = ChooseAlgorithm(CollectiveOp::kAllReduce, 4 << 20, 4,
                                        LinkModelFor("tcp", true), Algorithm::kAuto);
  EXPECT_EQ(shared.algo, Algorithm::kRing) << shared.Explain();
}

// Over loopback TCP a message above one segment goes by rendezvous and
// costs ~45 us more, so two ranks exchange whole vectors while the
// halves would be rendezvous messages too and the whole vector's reduction
// stays in the cache (interleaved medians, 2 ranks: 128 KiB direct 126 us
// against tree 157, 512 KiB 236 against 331, 1 MiB 199 against 229), but
// halve 64 KiB vectors, whose 32 KiB halves go eagerly (47 against 85 us),
// and vectors from 2 MiB (402 against 431 us; 4 MiB 1.31 against the
// ring's 1.56 ms), and take the ring from 8 MiB (3.6 against 5.4 ms).
TEST(SelectorTest, TwoRanksOverTcpCountTheRendezvous) {
  const LinkModel tcp = LinkModelFor("tcp");
  auto algo = [&](size_t bytes) {
    return ChooseAlgorithm(CollectiveOp::kAllReduce, bytes, 2, tcp, Algorithm::kAuto);
  };
  for (size_t bytes :
       {size_t{128} << 10, size_t{256} << 10, size_t{512} << 10, size_t{1} << 20}) {
    EXPECT_EQ(algo(bytes).algo, Algorithm::kDirect) << bytes << ": " << algo(bytes).Explain();
  }
  EXPECT_EQ(algo(64 << 10).algo, Algorithm::kTree) << algo(64 << 10).Explain();
  EXPECT_EQ(algo(2 << 20).algo, Algorithm::kTree) << algo(2 << 20).Explain();
  EXPECT_EQ(algo(4 << 20).algo, Algorithm::kTree) << algo(4 << 20).Explain();
  EXPECT_EQ(algo(8 << 20).algo, Algorithm::kRing) << algo(8 << 20).Explain();
  const int direct = static_cast<int>(Algorithm::kDirect);
  const double eager = algo(tcp.eager_bytes).cost_us[direct];
  const double rendezvous = algo(tcp.eager_bytes + 128).cost_us[direct];
  EXPECT_NEAR(rendezvous - eager, tcp.rendezvous_us, 1.0);
}

// Where ranks share CPUs, every transport sends up to 64 KiB eagerly, and
// each ring step waits for every rank's time slice: 4 ranks halve and
// double up to 1 MiB (over TCP, 3 alternated runs: 512 KiB 548-627 us
// against the ring's 1164-1324, 1 MiB 0.82-1.03 ms against 1.46-1.61) and
// take the ring from 2 MiB.
TEST(SelectorTest, SharedCpusHalveUpToAMebibyte) {
  const LinkModel shared = LinkModelFor("tcp", /*cpus_shared=*/true);
  EXPECT_EQ(shared.eager_bytes, 64 * 1024);  // the protocol's (core/p2p/engine.h)
  EXPECT_EQ(LinkModelFor("shm", /*cpus_shared=*/true).eager_bytes, 64 * 1024);
  for (size_t bytes : {size_t{128} << 10, size_t{256} << 10, size_t{512} << 10, size_t{1} << 20}) {
    const Choice c = ChooseAlgorithm(CollectiveOp::kAllReduce, bytes, 4, shared, Algorithm::kAuto);
    EXPECT_EQ(c.algo, Algorithm::kTree) << bytes << ": " << c.Explain();
  }
  const Choice c = ChooseAlgorithm(CollectiveOp::kAllReduce, 2 << 20, 4, shared, Algorithm::kAuto);
  EXPECT_EQ(c.algo, Algorithm::kRing) << c.Explain();
}

// A reduction of a vector that stays in the cache is counted at the
// kernel's cached rate, one past the caches at the slower rate, and one in
// between at a rate between the two; shared memory keeps a single rate.
// Where 2 ranks share a CPU, a reduce of 2 MiB over TCP by binomial tree
// took 474-491 us against the ring's 762-843, and 4 ranks on 2 CPUs
// reduce 512 KiB by tree in 365 us against the ring's 737.
TEST(SelectorTest, ReductionsInTheCacheCostLess) {
  const LinkModel shared = LinkModelFor("tcp", /*cpus_shared=*/true);
  auto reduce = [&](size_t bytes, int n) {
    return ChooseAlgorithm(CollectiveOp::kReduce, bytes, n, shared, Algorithm::kAuto);
  };
  EXPECT_EQ(reduce(2 << 20, 2).algo, Algorithm::kTree) << reduce(2 << 20, 2).Explain();
  EXPECT_EQ(reduce(512 << 10, 4).algo, Algorithm::kTree) << reduce(512 << 10, 4).Explain();
  // The same bytes reduced in larger pieces cost more, up to the rate past
  // the caches.
  const LinkModel tcp = LinkModelFor("tcp");
  const double total = 64 << 20;
  EXPECT_DOUBLE_EQ(ReduceUs(total, 256 << 10, tcp), ReduceUs(total, 1 << 20, tcp));
  EXPECT_LT(ReduceUs(total, 1 << 20, tcp), ReduceUs(total, 4 << 20, tcp));
  EXPECT_LT(ReduceUs(total, 4 << 20, tcp), ReduceUs(total, 8 << 20, tcp));
  EXPECT_DOUBLE_EQ(ReduceUs(total, 8 << 20, tcp), ReduceUs(total, 64 << 20, tcp));
  EXPECT_DOUBLE_EQ(ReduceUs(total, 64 << 20, tcp), total * 1e-3 / tcp.reduce_gbps);
  const LinkModel shm = LinkModelFor("shm");
  EXPECT_EQ(shm.reduce_cached_gbps, shm.reduce_gbps);
}

TEST(SelectorTest, ForcedAlgorithmWinsWhereTheOperationHasIt) {
  const LinkModel tcp = LinkModelFor("tcp");
  Choice c = ChooseAlgorithm(CollectiveOp::kAllReduce, 8, 4, tcp, Algorithm::kRing);
  EXPECT_EQ(c.algo, Algorithm::kRing);
  EXPECT_TRUE(c.forced);
  // Alltoall has only the direct exchange: a forced ring is ignored.
  c = ChooseAlgorithm(CollectiveOp::kAllToAll, 1 << 20, 4, tcp, Algorithm::kRing);
  EXPECT_EQ(c.algo, Algorithm::kDirect);
  EXPECT_FALSE(c.forced);
  EXPECT_LT(c.cost_us[static_cast<int>(Algorithm::kRing)], 0);
}

TEST(SelectorTest, ExplainNamesEveryCandidateWithItsCost) {
  const Choice c =
      ChooseAlgorithm(CollectiveOp::kAllReduce, 4 << 20, 8, LinkModelFor("tcp"), Algorithm::kAuto);
  const std::string e = c.Explain();
  EXPECT_NE(e.find("ring "), std::string::npos) << e;
  EXPECT_NE(e.find("tree "), std::string::npos) << e;
  EXPECT_NE(e.find("direct "), std::string::npos) << e;
  EXPECT_NE(e.find(" ms"), std::string::npos) << e;
}

// chunk_bytes' default is the largest power of two whose bytes take at
// most kChunkUs on the link, per link.
// Two hosts of 4 ranks (shared memory within, TCP between): a large
// allreduce pays for the steps within the hosts by moving a quarter of the
// vector per rank between them; a small one does not.
TEST(HierarchyTest, LargeAllReduceSplitsByHost) {
  const std::vector<HierarchyLevel> levels = {{4, LinkModelFor("shm")}, {2, LinkModelFor("tcp")}};
  const HierarchyCost big = PriceHierarchy(CollectiveOp::kAllReduce, 64 << 20, levels);
  EXPECT_GT(big.us, 0);
  EXPECT_LT(big.us, big.flat_us);
  EXPECT_NEAR(big.us, big.within_us + big.across_us, 1e-6);
  EXPECT_FALSE(big.across_hierarchical);  // the top level has no groups of its own
  // The flat price is the table's cheapest over all 8 ranks on TCP.
  EXPECT_DOUBLE_EQ(big.flat_us,
                   FlatCostUs(CollectiveOp::kAllReduce, 64 << 20, 8, LinkModelFor("tcp")));
  // Where the ranks of a host talk over TCP as well, a small allreduce pays
  // for three steps what the flat one does in one.
  const std::vector<HierarchyLevel> tcp_only = {{4, LinkModelFor("tcp")},
                                                {2, LinkModelFor("tcp")}};
  const HierarchyCost small = PriceHierarchy(CollectiveOp::kAllReduce, 8, tcp_only);
  EXPECT_GT(small.us, small.flat_us);
}

// Four hosts of 2 ranks on two switches: where the link between switches
// is as fast as the others, splitting the hosts' slices again by switch
// gains nothing; where it is 40x slower, the cross-host step is itself
// hierarchical, and broadcast and reduce split too.
TEST(HierarchyTest, SlowLinkBetweenSwitchesNestsTheLevels) {
  const LinkModel tcp = LinkModelFor("tcp");
  LinkModel slow = tcp;
  slow.gbps = tcp.gbps / 40;
  const std::vector<HierarchyLevel> even = {
      {2, LinkModelFor("shm")}, {2, tcp}, {2, tcp}};
  const std::vector<HierarchyLevel> uneven = {
      {2, LinkModelFor("shm")}, {2, tcp}, {2, slow}};
  EXPECT_FALSE(PriceHierarchy(CollectiveOp::kAllReduce, 16 << 20, even).across_hierarchical);
  for (CollectiveOp op : {CollectiveOp::kAllReduce, CollectiveOp::kBroadcast,
                          CollectiveOp::kReduce}) {
    const HierarchyCost c = PriceHierarchy(op, 16 << 20, uneven);
    EXPECT_TRUE(c.across_hierarchical) << CollectiveOpName(op);
    EXPECT_LT(c.us, c.flat_us) << CollectiveOpName(op);
  }
  // The flat price runs at the slowest link's rate.
  const HierarchyCost c = PriceHierarchy(CollectiveOp::kAllReduce, 16 << 20, uneven);
  EXPECT_DOUBLE_EQ(c.flat_us, FlatCostUs(CollectiveOp::kAllReduce, 16 << 20, 8, slow));
}

TEST(CostModelTest, ChunkBytesFromTheModel) {
  for (const char* transport : {"tcp", "shm"}) {
    SCOPED_TRACE(transport);
    const LinkModel link = LinkModelFor(transport);
    const double chunk = link.chunk_bytes;
    EXPECT_EQ(chunk, static_cast<double>(ChunkBytes(link)));
    auto bytes_us = [&](double s) { return s * 1e-3 / link.gbps; };
    EXPECT_LE(bytes_us(chunk), kChunkUs);
    EXPECT_GT(bytes_us(2 * chunk), kChunkUs);
    EXPECT_LT(link.alpha_us + link.rendezvous_us, bytes_us(chunk) / 3);
  }
  EXPECT_EQ(LinkModelFor("tcp").chunk_bytes, 512 * 1024);
  EXPECT_EQ(LinkModelFor("shm").chunk_bytes, 1024 * 1024);
}

}  // namespace
}  // namespace hcomm
