#include "core/p2p/flight_recorder.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace hcomm {
namespace {

using State = FlightRecorder::State;

TEST(FlightRecorderTest, KeepsTheLastNInOrderWithTheirStates) {
  FlightRecorder fr(4);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(fr.Begin(i % 2 ? "recv" : "send", 0, -1, i, 10 + i, 100 * i,
                           State::kInProgress));
  }
  fr.End(ids[5], true);
  fr.End(ids[4], false);
  fr.End(ids[0], true);  // overwritten long ago: changes nothing
  std::vector<FlightRecorder::Entry> all = fr.Snapshot();
  ASSERT_EQ(all.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(all[i].id, ids[i + 2]);
    EXPECT_EQ(all[i].peer, static_cast<int>(i + 2));
    EXPECT_EQ(all[i].tag, static_cast<int>(i + 12));
    EXPECT_EQ(all[i].bytes, 100 * (i + 2));
    EXPECT_GT(all[i].start_unix_ns, 0);
  }
  EXPECT_EQ(all[0].state, State::kInProgress);
  EXPECT_EQ(all[0].end_unix_ns, 0);
  EXPECT_EQ(all[2].state, State::kFailed);
  EXPECT_EQ(all[3].state, State::kDone);
  EXPECT_GE(all[3].end_unix_ns, all[3].start_unix_ns);
  std::vector<FlightRecorder::Entry> last2 = fr.Snapshot(2);
  ASSERT_EQ(last2.size(), 2u);
  EXPECT_EQ(last2[0].id, ids[4]);
}

TEST(FlightRecorderTest, KeepsExactlyNWhereNIsNoPowerOfTwo) {
  FlightRecorder fr(5);  // 8 slots underneath
  for (int i = 0; i < 20; ++i) fr.End(fr.Begin("send", 0, -1, i, i, i, State::kInProgress), true);
  std::vector<FlightRecorder::Entry> all = fr.Snapshot();
  ASSERT_EQ(all.size(), 5u);
  EXPECT_EQ(all.front().peer, 15);
  EXPECT_EQ(all.back().peer, 19);
  EXPECT_EQ(fr.capacity(), 5u);
}

TEST(FlightRecorderTest, ZeroRecordsNothing) {
  FlightRecorder fr(0);
  EXPECT_FALSE(fr.enabled());
  EXPECT_EQ(fr.Begin("send", 0, -1, 1, 1, 1, State::kPosted), 0u);
  fr.End(0, true);
  EXPECT_TRUE(fr.Snapshot().empty());
}

TEST(FlightRecorderTest, MarkMovesAPostedOperationOn) {
  FlightRecorder fr(8);
  uint64_t id = fr.Begin("irecv", 0, -1, -1, -1, 64, State::kPosted);
  EXPECT_EQ(fr.Snapshot()[0].state, State::kPosted);
  fr.Mark(id, State::kInProgress);
  EXPECT_EQ(fr.Snapshot()[0].state, State::kInProgress);
  fr.End(id, true);
  EXPECT_EQ(fr.Snapshot()[0].state, State::kDone);
}

TEST(FlightRecorderTest, EncodeDecodeRoundTripKeepsTheNewestThatFit) {
  FlightRecorder fr(16);
  for (int i = 0; i < 10; ++i) {
    fr.End(fr.Begin("allreduce", 1, i, -1, -1, 4096, State::kInProgress), i != 3);
  }
  std::vector<FlightRecorder::Entry> all = fr.Snapshot();
  std::vector<FlightRecorder::Entry> back =
      FlightRecorder::Decode("C 1 2 3 1\nR 0 1 2 3\n" + FlightRecorder::Encode(all, 1 << 20));
  ASSERT_EQ(back.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(back[i].id, all[i].id);
    EXPECT_EQ(back[i].op, "allreduce");
    EXPECT_EQ(back[i].seq, all[i].seq);
    EXPECT_EQ(back[i].state, all[i].state);
    EXPECT_EQ(back[i].start_unix_ns, all[i].start_unix_ns);
    EXPECT_EQ(back[i].end_unix_ns, all[i].end_unix_ns);
  }
  std::string line = FlightRecorder::Encode({all.back()}, 1 << 20);
  std::vector<FlightRecorder::Entry> cut =
      FlightRecorder::Decode(FlightRecorder::Encode(all, 3 * line.size()));
  ASSERT_EQ(cut.size(), 3u);
  EXPECT_EQ(cut.back().id, all.back().id);
}

TEST(FlightRecorderTest, ConcurrentWritersLeaveWholeEntries) {
  FlightRecorder fr(64);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&fr, t] {
      for (int i = 0; i < 20000; ++i) {
        fr.End(fr.Begin("send", 0, -1, t, t, t, State::kInProgress), true);
      }
    });
  }
  for (int k = 0; k < 200; ++k) {
    for (const auto& e : fr.Snapshot()) {
      ASSERT_EQ(e.peer, e.tag);
      ASSERT_EQ(static_cast<uint64_t>(e.peer), e.bytes);
    }
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(fr.Snapshot().size(), 64u);
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(FlightRecorderTest, DumpsJsonOfItsOwnRecordThenWithTheLastReport) {
  FlightRecorder fr(8);
  fr.End(fr.Begin("send", 0, -1, 1, 5, 16, State::kInProgress), true);
  fr.Begin("allreduce", 1, 0, -1, -1, 16, State::kInProgress);
  const std::string pattern = ::testing::TempDir() + "/fr-%r.json";
  const std::string path = FlightRecorder::PathFor(pattern, 2);
  EXPECT_EQ(path, ::testing::TempDir() + "/fr-2.json");

  ASSERT_TRUE(fr.Dump(path, 2, 3, "hcomm_comm_destroy").ok());
  nlohmann::json own = ReadJson(path);
  EXPECT_EQ(own["rank"], 2);
  EXPECT_EQ(own["capacity"], 8);
  EXPECT_TRUE(own["hang_report"].is_null());
  ASSERT_EQ(own["ranks"].size(), 1u);
  EXPECT_EQ(own["ranks"][0]["rank"], 2);
  ASSERT_EQ(own["ranks"][0]["entries"].size(), 2u);
  EXPECT_EQ(own["ranks"][0]["entries"][0]["op"], "send");
  EXPECT_EQ(own["ranks"][0]["entries"][0]["state"], "done");
  EXPECT_EQ(own["ranks"][0]["entries"][0]["tag"], 5);
  EXPECT_EQ(own["ranks"][0]["entries"][1]["op"], "allreduce");
  EXPECT_EQ(own["ranks"][0]["entries"][1]["state"], "in_progress");

  FlightRecorder other(4);
  other.Begin("recv", 0, -1, 2, 9, 4, State::kInProgress);
  fr.KeepReport({{0, other.Snapshot()}}, "hang report: rank 1 did not answer \"\xff\"");
  fr.Begin("barrier", 1, 1, -1, -1, 0, State::kInProgress);
  ASSERT_TRUE(fr.Dump(path, 2, 3, "timeout").ok());
  nlohmann::json doc = ReadJson(path);
  EXPECT_EQ(doc["reason"], "timeout");
  EXPECT_TRUE(doc["hang_report"].is_string());
  ASSERT_EQ(doc["ranks"].size(), 3u);
  EXPECT_EQ(doc["ranks"][0]["answered"], true);
  EXPECT_EQ(doc["ranks"][0]["entries"][0]["op"], "recv");
  EXPECT_EQ(doc["ranks"][0]["entries"][0]["peer"], 2);
  EXPECT_EQ(doc["ranks"][1]["answered"], false);
  EXPECT_EQ(doc["ranks"][2]["answered"], true);
  ASSERT_EQ(doc["ranks"][2]["entries"].size(), 3u);  // its own, as of now
  EXPECT_EQ(doc["ranks"][2]["entries"][2]["op"], "barrier");
  EXPECT_FALSE(fr.Dump("/nonexistent-dir/x.json", 0, 1, "").ok());
}

}  // namespace
}  // namespace hcomm
