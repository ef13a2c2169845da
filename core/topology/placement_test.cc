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

TEST(PlacementTest, OwnCpusListsWhereThisProcessMayRun) {
  const std::string mine = OwnCpus();
  ASSERT_FALSE(mine.empty());
  EXPECT_EQ(mine.find_first_not_of("0123456789,-"), std::string::npos) << mine;
}

}  // namespace
}  // namespace hcomm
