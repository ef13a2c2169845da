// Switches (core/topology/switches.h) as a communicator uses them: the ring
// allreduce visits the ranks grouped by switch, with the same order on
// every rank and exact results; a bad topology file fails init saying so.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "core/comm/communicator.h"
#include "gtest/gtest.h"
#include "testing/multirank.h"

namespace hcomm {
namespace {

class TopologyTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::SetTransportMode(testing::TransportMode::kTcp); }
  void TearDown() override { testing::SetTransportMode(testing::TransportMode::kDefault); }
};

TEST_F(TopologyTest, RingGroupsRanksBySwitch) {
  const char* dir = getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/switches.txt";
  // Ranks 1 and 3 name their switch themselves; 0 and 2 find theirs by host.
  std::ofstream(path) << "switches { name: \"s1\" hosts: \"h0\" hosts: \"h2\" }\n";
  testing::RunRanks(4, [&](int rank, const Options& base) {
    Options o = base;
    o.host_id = absl::StrCat("h", rank);
    if (rank % 2 == 1) o.switch_id = "s2";
    o.topology = path;
    auto made = Communicator::Init(o);
    ASSERT_TRUE(made.ok()) << made.status();
    Communicator& c = **made;
    EXPECT_EQ(c.switch_order(), (std::vector<int>{0, 2, 1, 3}));
    ASSERT_TRUE(c.SetOption("algo", "ring").ok());
    for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
      std::vector<int32_t> v(count), got(count);
      for (size_t i = 0; i < count; ++i) v[i] = static_cast<int32_t>(i * 3 + rank);
      ASSERT_TRUE(c.AllReduce(v.data(), got.data(), count, DataType::kInt32, ReduceOp::kSum).ok());
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], static_cast<int32_t>(i * 12 + 6)) << i;
    }
    // A group within one switch keeps the rank order.
    auto half = c.Split(rank % 2, rank);
    ASSERT_TRUE(half.ok()) << half.status();
    EXPECT_TRUE((*half)->switch_order().empty());
    EXPECT_TRUE((*half)->Destroy().ok());
    EXPECT_TRUE(c.Destroy().ok());
  });
}

TEST_F(TopologyTest, BadFileFailsInitNamingIt) {
  const char* dir = getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/broken.txt";
  std::ofstream(path) << "switches { name: \"s1\" hosts: h0 }\n";
  Options o = testing::RankOptions(0, 1, testing::FreePort());
  o.topology = path;
  auto made = Communicator::Init(o);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(CodeOf(made.status()), ErrorCode::kInvalidArgument) << made.status();
  EXPECT_NE(std::string(made.status().message()).find("broken.txt': line 1"), std::string::npos)
      << made.status();
}

// algo=hierarchical over two pretend hosts (shm within, TCP between): exact
// results at every size (padded where the ranks per host do not divide the
// count), in place and not, several ops; where the shape does not fit (all
// ranks on one host), the flat algorithms run.
TEST(HierarchicalTest, AllReduceAcrossTwoHosts) {
  for (int n : {4, 6, -4}) {
    // -4: four ranks on one host.
    const bool one_host = n < 0;
    n = std::abs(n);
    testing::SetTransportMode(one_host ? testing::TransportMode::kShm
                                       : testing::TransportMode::kMixed);
    testing::RunRanks(n, [n, one_host](int rank, const Options& base) {
      Options o = base;
      o.algo = "hierarchical";
      auto made = Communicator::Init(o);
      ASSERT_TRUE(made.ok()) << made.status();
      Communicator& c = **made;
      EXPECT_EQ(c.hierarchy_fits(), !one_host) << n;
      for (size_t count : {size_t{1}, size_t{5}, size_t{1000}, size_t{300001}}) {
        std::vector<int32_t> v(count), got(count);
        for (size_t i = 0; i < count; ++i) v[i] = static_cast<int32_t>(i % 1000 + rank);
        absl::Status st =
            c.AllReduce(v.data(), got.data(), count, DataType::kInt32, ReduceOp::kSum);
        ASSERT_TRUE(st.ok()) << "n " << n << " rank " << rank << ": " << st;
        const int32_t ranks_sum = n * (n - 1) / 2;
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(got[i], static_cast<int32_t>(n * (i % 1000)) + ranks_sum)
              << "n " << n << " rank " << rank << " count " << count << " i " << i;
        }
        ASSERT_TRUE(c.AllReduce(v.data(), v.data(), count, DataType::kInt32, ReduceOp::kMax).ok());
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(v[i], static_cast<int32_t>(i % 1000) + n - 1) << count << " " << i;
        }
      }
      std::vector<float> f(4099, 0.5f);
      ASSERT_TRUE(c.AllReduce(f.data(), f.data(), f.size(), DataType::kFloat32, ReduceOp::kAvg)
                      .ok());
      EXPECT_EQ(f[4098], 0.5f);
      EXPECT_TRUE(c.Destroy().ok());
    });
  }
  testing::SetTransportMode(testing::TransportMode::kDefault);
}

// Hierarchical broadcast and reduce over two pretend hosts (ranks
// alternate between them): every root, counts that the ranks per host do
// not divide, exact results; non-roots' receive buffers untouched.
TEST(HierarchicalTest, BroadcastAndReduceFromEveryRoot) {
  testing::SetTransportMode(testing::TransportMode::kMixed);
  for (int n : {4, 6}) {
    testing::RunRanks(n, [n](int rank, const Options& base) {
      Options o = base;
      o.algo = "hierarchical";
      auto made = Communicator::Init(o);
      ASSERT_TRUE(made.ok()) << made.status();
      Communicator& c = **made;
      ASSERT_TRUE(c.hierarchy_fits());
      for (size_t count : {size_t{1}, size_t{7}, size_t{100003}}) {
        for (int root = 0; root < n; ++root) {
          std::vector<int32_t> b(count, -1);
          if (rank == root) {
            for (size_t i = 0; i < count; ++i) b[i] = static_cast<int32_t>(i * 3 + root);
          }
          absl::Status s = c.Broadcast(b.data(), count, DataType::kInt32, root);
          ASSERT_TRUE(s.ok()) << "n " << n << " root " << root << ": " << s;
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(b[i], static_cast<int32_t>(i * 3 + root))
                << "n " << n << " rank " << rank << " root " << root << " i " << i;
          }
          std::vector<int32_t> v(count), got(count, -7);
          for (size_t i = 0; i < count; ++i) v[i] = static_cast<int32_t>(i % 100 + rank);
          s = c.Reduce(v.data(), got.data(), count, DataType::kInt32, ReduceOp::kSum, root);
          ASSERT_TRUE(s.ok()) << "n " << n << " root " << root << ": " << s;
          for (size_t i = 0; i < count; ++i) {
            const int32_t want = rank == root ? static_cast<int32_t>(n * (i % 100) + n * (n - 1) / 2)
                                              : -7;
            ASSERT_EQ(got[i], want) << "n " << n << " rank " << rank << " root " << root;
          }
        }
      }
      EXPECT_TRUE(c.Destroy().ok());
    });
  }
  testing::SetTransportMode(testing::TransportMode::kDefault);
}

// Four hosts of two ranks on two switches (hosts alternate): the levels are
// ranks per host, hosts per switch, switches; the cross-host groups split
// again by switch. Allreduce, broadcast and reduce are exact, forced and
// under auto with a slow link between the switches.
TEST_F(TopologyTest, HostsAndSwitchesNest) {
  for (const char* algo : {"hierarchical", "auto"}) {
    testing::RunRanks(8, [algo](int rank, const Options& base) {
      Options o = base;
      o.host_id = absl::StrCat("h", rank % 4);
      o.switch_id = absl::StrCat("s", rank % 2);
      o.algo = algo;
      o.switch_link_mbit = 100;
      auto made = Communicator::Init(o);
      ASSERT_TRUE(made.ok()) << made.status();
      Communicator& c = **made;
      ASSERT_EQ(c.hierarchy_levels().size(), 3u);
      for (const HierarchyLevel& l : c.hierarchy_levels()) EXPECT_EQ(l.members, 2);
      EXPECT_DOUBLE_EQ(c.hierarchy_levels()[2].link.gbps, 100.0 / 8000);
      if (std::string(algo) == "auto") {
        EXPECT_TRUE(c.UsesHierarchy(CollectiveOp::kAllReduce, 4 << 20));
        EXPECT_FALSE(c.UsesHierarchy(CollectiveOp::kAllReduce, 4));
      }
      for (size_t count : {size_t{3}, size_t{1} << 20}) {
        std::vector<int32_t> v(count, rank + 1), got(count, -1);
        absl::Status s = c.AllReduce(v.data(), got.data(), count, DataType::kInt32, ReduceOp::kSum);
        ASSERT_TRUE(s.ok()) << algo << " rank " << rank << ": " << s;
        ASSERT_EQ(got[0], 36);
        ASSERT_EQ(got[count - 1], 36);
        std::vector<int32_t> b(count, rank == 5 ? 9 : 0);
        ASSERT_TRUE(c.Broadcast(b.data(), count, DataType::kInt32, 5).ok());
        ASSERT_EQ(b[count - 1], 9);
        s = c.Reduce(v.data(), got.data(), count, DataType::kInt32, ReduceOp::kMax, 6);
        ASSERT_TRUE(s.ok()) << s;
        if (rank == 6) {
          ASSERT_EQ(got[count - 1], 8);
        }
      }
      EXPECT_TRUE(c.Destroy().ok());
    });
  }
}

// Hosts that differ in how crowded they are (three ranks on one pretend
// host, two on the other, all sharing this machine's CPUs): every rank
// still picks the same algorithm for each call (they price the links from
// everyone's placement, not their own host's), so the automatic choice
// gives the right answer at every size.
TEST(UnevenHostsTest, AutomaticChoicesAgree) {
  testing::SetTransportMode(testing::TransportMode::kMixed);
  testing::RunRanks(5, [](int rank, const Options& o) {
    auto made = Communicator::Init(o);
    ASSERT_TRUE(made.ok()) << made.status();
    Communicator& c = **made;
    for (size_t count : {size_t{1}, size_t{1000}, size_t{100000}, size_t{1} << 20}) {
      std::vector<int32_t> v(count, rank + 1), got(count, -1);
      absl::Status s = c.AllReduce(v.data(), got.data(), count, DataType::kInt32, ReduceOp::kSum);
      ASSERT_TRUE(s.ok()) << "rank " << rank << " count " << count << ": " << s;
      ASSERT_EQ(got[0], 15) << "rank " << rank << " count " << count;
      ASSERT_EQ(got[count - 1], 15) << "rank " << rank << " count " << count;
      std::vector<int32_t> b(count, rank == 3 ? 7 : 0);
      ASSERT_TRUE(c.Broadcast(b.data(), count, DataType::kInt32, 3).ok());
      ASSERT_EQ(b[count - 1], 7);
    }
    EXPECT_TRUE(c.Destroy().ok());
  });
  testing::SetTransportMode(testing::TransportMode::kDefault);
}

}  // namespace
}  // namespace hcomm
