#include "core/topology/host_topology.h"

#include <string>
#include <thread>
#include <vector>

#include "core/topology/placement.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

TEST(HostTopologyTest, ThisHostCountsWhatIsThere) {
  const HostTopology& host = ThisHost();
  SCOPED_TRACE(host.Describe());
  ASSERT_TRUE(host.reason.find("hwloc failed") == std::string::npos) << host.reason;
  EXPECT_GE(host.packages, 1);
  EXPECT_GE(host.numa_nodes, 1);
  EXPECT_GE(host.cores, 1);
  EXPECT_GE(host.pus, host.cores);
  EXPECT_GE(static_cast<int>(host.numa_of_cpu.size()), host.pus);
  EXPECT_FALSE(host.Describe().empty());
  EXPECT_EQ(host.flat, !host.reason.empty());
  int known = 0;
  for (int node : host.numa_of_cpu) {
    EXPECT_LT(node, host.numa_nodes);
    if (node >= 0) ++known;
  }
  EXPECT_EQ(known, host.pus);  // every PU hwloc found is on some node
  if (host.numa_nodes == 1) {
    EXPECT_TRUE(host.flat);
    EXPECT_EQ(host.reason, "one NUMA node");
  }
}

TEST(HostTopologyTest, ThisHostLoadsOnceForAllThreads) {
  std::vector<const HostTopology*> seen(4, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] { seen[i] = &ThisHost(); });
  }
  for (std::thread& t : threads) t.join();
  for (const HostTopology* host : seen) EXPECT_EQ(host, &ThisHost());
}

TEST(HostTopologyTest, EachCpuOfThisHostIsOnItsNode) {
  const HostTopology& host = ThisHost();
  for (size_t cpu = 0; cpu < host.numa_of_cpu.size(); ++cpu) {
    EXPECT_EQ(NumaNodeOf(std::to_string(cpu), host), host.numa_of_cpu[cpu]) << "cpu " << cpu;
  }
  // This process's own CPUs, as it publishes them.
  if (host.numa_nodes == 1) {
    EXPECT_EQ(NumaNodeOf(OwnCpus(), host), 0) << OwnCpus();
  }
}

TEST(HostTopologyTest, TwoNumaNodesAreNotFlat) {
  const HostTopology host = DescribeSynthetic("numa:2 core:2 pu:1");
  EXPECT_FALSE(host.flat) << host.reason;
  EXPECT_EQ(host.reason, "");
  EXPECT_EQ(host.numa_nodes, 2);
  EXPECT_EQ(host.cores, 4);
  EXPECT_EQ(host.pus, 4);
  EXPECT_EQ(host.numa_of_cpu, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(host.Describe(), "0 packages, 2 NUMA nodes, 4 cores, 4 PUs");
}

TEST(HostTopologyTest, TwoPackagesOfTwoThreadsPerCore) {
  const HostTopology host = DescribeSynthetic("pack:2 numa:1 core:2 pu:2");
  EXPECT_FALSE(host.flat);
  EXPECT_EQ(host.Describe(), "2 packages, 2 NUMA nodes, 4 cores, 8 PUs");
  EXPECT_EQ(host.numa_of_cpu, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(NumaNodeOf("0-3", host), 0);
  EXPECT_EQ(NumaNodeOf("4-7", host), 1);
  EXPECT_EQ(NumaNodeOf("0-7", host), -1);
}

TEST(HostTopologyTest, OneNumaNodeIsFlat) {
  const HostTopology host = DescribeSynthetic("pack:2 core:2 pu:1");
  EXPECT_TRUE(host.flat);
  EXPECT_EQ(host.reason, "one NUMA node");
  EXPECT_EQ(host.Describe(), "2 packages, 1 NUMA node, 4 cores, 4 PUs (flat: one NUMA node)");
  EXPECT_EQ(NumaNodeOf("0-3", host), 0);
}

TEST(HostTopologyTest, AMemoryOnlyNodeIsNoCpusOwn) {
  // A node over the whole machine (as CXL memory shows), one per package.
  const HostTopology host = DescribeSynthetic("[numa(memory=1000)] pack:2 [numa] core:2 pu:1");
  EXPECT_EQ(host.numa_nodes, 3);
  EXPECT_FALSE(host.flat);
  EXPECT_EQ(host.numa_of_cpu, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(NumaNodeOf("2,3", host), 1);
}

TEST(HostTopologyTest, TwoNodesOverTheSameCpusAreFlat) {
  const HostTopology host = DescribeSynthetic("[numa] [numa] core:2 pu:1");
  EXPECT_EQ(host.numa_nodes, 2);
  EXPECT_TRUE(host.flat);
  EXPECT_EQ(host.reason, "all CPUs on one NUMA node");
  EXPECT_EQ(host.numa_of_cpu, (std::vector<int>{0, 0}));  // the lower index on a tie
}

TEST(HostTopologyTest, AnInvalidDescriptionGivesFlatWithTheReason) {
  const HostTopology host = DescribeSynthetic("bogus:7");
  EXPECT_TRUE(host.flat);
  EXPECT_EQ(host.reason, "hwloc failed: invalid synthetic topology \"bogus:7\"");
  EXPECT_EQ(host.pus, 0);
  EXPECT_TRUE(host.numa_of_cpu.empty());
  EXPECT_EQ(host.Describe(), "layout unknown (flat: " + host.reason + ")");
  EXPECT_EQ(NumaNodeOf("0", host), -1);
}

TEST(HostTopologyTest, NumaNodeOfListsAndRanges) {
  const HostTopology host = DescribeSynthetic("numa:2 core:2 pu:1");
  EXPECT_EQ(NumaNodeOf("0,1", host), 0);
  EXPECT_EQ(NumaNodeOf("2,3", host), 1);
  EXPECT_EQ(NumaNodeOf("1,2", host), -1);  // spread over two nodes
  EXPECT_EQ(NumaNodeOf("0", host), 0);
  EXPECT_EQ(NumaNodeOf("3", host), 1);
  EXPECT_EQ(NumaNodeOf("0-1", host), 0);
  EXPECT_EQ(NumaNodeOf("2-3", host), 1);
  EXPECT_EQ(NumaNodeOf("2-2,3", host), 1);
  EXPECT_EQ(NumaNodeOf("1,0,1", host), 0);
  EXPECT_EQ(NumaNodeOf("0-3", host), -1);
  EXPECT_EQ(NumaNodeOf("4", host), -1);  // no such CPU
  EXPECT_EQ(NumaNodeOf("2-4", host), -1);
}

TEST(HostTopologyTest, NumaNodeOfAnythingElseIsUnknown) {
  const HostTopology host = DescribeSynthetic("numa:2 core:2 pu:1");
  for (const std::string& bad :
       {std::string("-"), std::string(""), std::string(","), std::string("0,"), std::string(",0"),
        std::string("0,,1"), std::string("1-0"), std::string("0-"), std::string("-1"),
        std::string(" 0"), std::string("0 "), std::string("+0"), std::string("0x1"),
        std::string("a"), std::string("0;1"), std::string("0-1-2"),
        std::string("99999999999999999999999"), std::string("0-4000000000"),
        std::string("0\0001", 3) /* "0", NUL, "1" */}) {
    EXPECT_EQ(NumaNodeOf(bad, host), -1) << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace hcomm
