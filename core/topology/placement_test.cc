#include "core/topology/placement.h"

#include "gtest/gtest.h"

namespace hcomm {
namespace {

TEST(PlacementTest, RanksPinnedToCpusOfTheirOwnDoNotShare) {
  EXPECT_FALSE(CpusShared({{"h", "0"}, {"h", "1"}}, "h"));
  EXPECT_FALSE(CpusShared({{"h", "0"}}, "h"));
}

TEST(PlacementTest, MoreRanksThanTheirCpusShare) {
  // Four ranks pinned round robin to two CPUs, as hcomm_run does.
  EXPECT_TRUE(CpusShared({{"h", "0"}, {"h", "1"}, {"h", "0"}, {"h", "1"}}, "h"));
  // Two unpinned ranks on a one-CPU machine.
  EXPECT_TRUE(CpusShared({{"h", "0"}, {"h", "0"}}, "h"));
  // CPUs unknown: two ranks count as sharing one.
  EXPECT_TRUE(CpusShared({{"h", "-"}, {"h", "-"}}, "h"));
}

TEST(PlacementTest, OnlyTheRanksOfTheHostCount) {
  const std::vector<Placement> ranks = {{"a", "0"}, {"a", "0"}, {"b", "0"}};
  EXPECT_TRUE(CpusShared(ranks, "a"));
  EXPECT_FALSE(CpusShared(ranks, "b"));
  EXPECT_FALSE(CpusShared(ranks, "c"));
}

TEST(PlacementTest, RanksFillTheCpusTheyMayUse) {
  // Two unpinned ranks on two CPUs: no CPU left idle for a third thread.
  EXPECT_TRUE(CpusFilled({{"h", "0,1"}, {"h", "0,1"}}, "h"));
  EXPECT_TRUE(CpusFilled({{"h", "0"}, {"h", "1"}, {"h", "0"}, {"h", "1"}}, "h"));
  EXPECT_TRUE(CpusFilled({{"h", "0"}}, "h"));
  // One rank on two CPUs, or two on four, leave some idle.
  EXPECT_FALSE(CpusFilled({{"h", "0,1"}}, "h"));
  EXPECT_FALSE(CpusFilled({{"h", "0,1,2,3"}, {"h", "0,1,2,3"}}, "h"));
  EXPECT_FALSE(CpusFilled({{"a", "0"}, {"b", "0,1"}}, "b"));
}

TEST(PlacementTest, OwnCpusListsWhereThisProcessMayRun) {
  const std::string mine = OwnCpus();
  ASSERT_FALSE(mine.empty());
  EXPECT_EQ(mine.find_first_not_of("0123456789,-"), std::string::npos) << mine;
}

}  // namespace
}  // namespace hcomm
