#include "core/topology/switches.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  const char* dir = getenv("TEST_TMPDIR");
  std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(SwitchesTest, OwnKeyThenFileThenUnknown) {
  const std::string path = WriteFile("topo.txt",
                                     "# two racks\n"
                                     "switches { name: \"s1\" hosts: \"a\" hosts: \"b\" }\n"
                                     "switches { name: \"s2\" hosts: \"c\" }\n");
  EXPECT_EQ(*SwitchOf("mine", path, "a"), "mine");
  EXPECT_EQ(*SwitchOf("", path, "b"), "s1");
  EXPECT_EQ(*SwitchOf("", path, "c"), "s2");
  EXPECT_EQ(*SwitchOf("", path, "z"), "");
  EXPECT_EQ(*SwitchOf("", "", "a"), "");
}

TEST(SwitchesTest, BadFilesSayWhy) {
  auto bad = [](const std::string& text, const std::string& want) {
    const std::string path = WriteFile("bad.txt", text);
    absl::StatusOr<std::string> s = SwitchOf("", path, "a");
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(CodeOf(s.status()), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(s.status().message()).find(want), std::string::npos)
        << s.status() << " (wanted '" << want << "')";
    EXPECT_NE(std::string(s.status().message()).find("topology='"), std::string::npos);
  };
  bad("switches { name: \"s1\" hosts: a }", "line 1 column");
  bad("racks { }", "line 1");
  bad("switches { hosts: \"a\" }", "without a name");
  bad("switches { name: \"s1\" hosts: \"a\" }\nswitches { name: \"s2\" hosts: \"a\" }",
      "under two switches");
  absl::StatusOr<std::string> missing = SwitchOf("", "/nonexistent/topo.txt", "a");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("cannot read"), std::string::npos);
}

TEST(SwitchesTest, RingOrderGroupsSwitchesThenHosts) {
  // Ranks 0..7 on hosts a b c d (two each, interleaved), a and c on s1.
  const std::vector<std::string> hosts = {"a", "b", "c", "d", "a", "b", "c", "d"};
  const std::vector<std::string> sw = {"s1", "s2", "s1", "s2", "s1", "s2", "s1", "s2"};
  EXPECT_EQ(RingOrderBySwitch(sw, hosts), (std::vector<int>{0, 4, 2, 6, 1, 5, 3, 7}));
  // One switch (or none known): rank order.
  EXPECT_TRUE(RingOrderBySwitch({"s", "s", "s"}, {"a", "b", "a"}).empty());
  // Within a host, by NUMA node (unknown, -1, first), then by index.
  EXPECT_EQ(RingOrderBySwitch({"s1", "s1", "s2", "s1", "s1"}, {"a", "a", "b", "a", "a"},
                              {1, 0, 0, -1, 0}),
            (std::vector<int>{3, 1, 4, 0, 2}));
  EXPECT_TRUE(RingOrderBySwitch({"", ""}, {"a", "b"}).empty());
  // Unknown counts as a switch of its own.
  EXPECT_EQ(RingOrderBySwitch({"", "s1", "", "s1"}, {"a", "b", "c", "d"}),
            (std::vector<int>{0, 2, 1, 3}));
}

}  // namespace
}  // namespace hcomm
