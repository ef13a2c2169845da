#include "core/profile/recorder.h"

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "core/base/spin.h"
#include "core/profile/trace.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace hcomm {
namespace {

Span At(int64_t start, int64_t seq, int track) {
  Span s;
  s.start_ns = start;
  s.end_ns = start + 10;
  s.name = "allreduce";
  s.seq = seq;
  s.track = track;
  return s;
}

TEST(RecorderTest, EachThreadItsTrack) {
  Recorder r(1000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&r, t] {
      const int track = r.ThreadTrack();
      for (int i = 0; i < 10; ++i) r.Record(At(i, t * 100 + i, track));
    });
  }
  for (auto& th : threads) th.join();
  Recorder::Contents c = r.Take();
  ASSERT_EQ(c.spans.size(), 30u);
  EXPECT_EQ(c.dropped, 0u);
  std::set<int> tracks;
  for (const Span& s : c.spans) tracks.insert(s.track);
  EXPECT_EQ(tracks, (std::set<int>{1, 2, 3}));
  EXPECT_EQ(c.track_names.at(2), "thread 2");
  // Empty once taken.
  EXPECT_TRUE(r.Take().spans.empty());
}

TEST(RecorderTest, BoundedKeepsTheNewest) {
  Recorder r(5000);
  const int track = r.ThreadTrack();
  for (int i = 0; i < 12000; ++i) r.Record(At(i, i, track));
  Recorder::Contents c = r.Take();
  ASSERT_EQ(c.spans.size(), 5000u);
  EXPECT_EQ(c.dropped, 7000u);
  for (size_t i = 0; i < c.spans.size(); ++i) EXPECT_EQ(c.spans[i].seq, 7000 + int64_t(i));
  // The budget is whole again after Take.
  for (int i = 0; i < 5000; ++i) r.Record(At(i, i, track));
  EXPECT_EQ(r.Take().dropped, 0u);
}

TEST(RecorderTest, ThreadsShareTheBound) {
  Recorder r(6000);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&r] {
      const int track = r.ThreadTrack();
      for (int i = 0; i < 5000; ++i) r.Record(At(i, i, track));
    });
  }
  for (auto& th : threads) th.join();
  Recorder::Contents c = r.Take();
  EXPECT_LE(c.spans.size(), 6000u);
  EXPECT_EQ(c.spans.size() + c.dropped, 20000u);
}

// Times come back from Take on MonoNs(), whatever the recording clock.
TEST(RecorderTest, TakeConvertsToMonoNs) {
  Recorder r(10);
  Span s;
  const int64_t before = MonoNs();
  s.start_ns = Recorder::Now();
  absl::SleepFor(absl::Milliseconds(5));
  s.end_ns = Recorder::Now();
  const int64_t after = MonoNs();
  r.Record(s);
  Recorder::Contents c = r.Take();
  ASSERT_EQ(c.spans.size(), 1u);
  EXPECT_GE(c.spans[0].start_ns, before - 100'000);
  EXPECT_LE(c.spans[0].end_ns, after + 100'000);
  const int64_t dur = c.spans[0].end_ns - c.spans[0].start_ns;
  EXPECT_GE(dur, 4'900'000);
  EXPECT_LE(dur, after - before + 100'000);
}

TEST(RecorderTest, NamesAndNamedTracks) {
  Recorder r(10);
  EXPECT_EQ(r.NamedTrack("stream 0 (priority 10)"), 1001);
  EXPECT_EQ(r.NamedTrack("tasks (priority 1)"), 1002);
  EXPECT_EQ(r.NamedTrack("stream 0 (priority 10)"), 1001);
  EXPECT_EQ(r.InternName("grad_sync"), 0);
  EXPECT_EQ(r.InternName("update"), 1);
  EXPECT_EQ(r.InternName("grad_sync"), 0);
  Recorder::Contents c = r.Take();
  EXPECT_EQ(c.names, (std::vector<std::string>{"grad_sync", "update"}));
  EXPECT_EQ(c.track_names.at(1002), "tasks (priority 1)");
}

TEST(TraceTest, AFileOfTwoRanksParses) {
  Recorder r1(100);
  Recorder::Contents c0, c1;
  Span a = At(5000, 3, 1);
  a.bytes = 1024;
  a.algo = "ring";
  a.dtype = "float32";
  c0.spans.push_back(a);
  c0.track_names[1] = "thread 1";
  Span t;
  t.start_ns = 4000;
  t.end_ns = 9000;
  t.cat = SpanCat::kTask;
  t.name = "task";
  t.task = r1.InternName("grad \"sync\"");  // quotes must be escaped
  t.priority = 10;
  t.track = r1.NamedTrack("tasks (priority 10)");
  c1 = r1.Take();
  c1.spans.push_back(t);
  TraceInfo info;
  info.nranks = 2;
  info.clock_error_us = {0, 1.5};
  info.dropped = {0, 0};
  const std::string file = TraceBegin() + TraceEvents(c0, 0, 0, 1000) + ",\n" +
                           TraceEvents(c1, 1, 250, 1000) + TraceEnd(info);
  nlohmann::json j = nlohmann::json::parse(file);
  std::vector<nlohmann::json> spans;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") spans.push_back(e);
  }
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0]["pid"], 0);
  EXPECT_DOUBLE_EQ(spans[0]["ts"].get<double>(), 4.0);  // (5000 - 1000) ns
  EXPECT_DOUBLE_EQ(spans[0]["dur"].get<double>(), 0.01);
  EXPECT_EQ(spans[0]["args"]["algo"], "ring");
  EXPECT_EQ(spans[0]["args"]["seq"], 3);
  EXPECT_EQ(spans[1]["pid"], 1);
  EXPECT_DOUBLE_EQ(spans[1]["ts"].get<double>(), 3.25);  // (4000 + 250 - 1000) ns
  EXPECT_EQ(spans[1]["name"], "task grad \"sync\"");
  EXPECT_EQ(spans[1]["cat"], "task");
  EXPECT_EQ(spans[1]["tid"], 1001);
  EXPECT_EQ(j["otherData"]["clock_error_us"][1], 1.5);
  EXPECT_EQ(j["displayTimeUnit"], "ms");
}

}  // namespace
}  // namespace hcomm
