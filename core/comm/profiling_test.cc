// The profiler over a communicator (core/comm/profiling.cc): what rank 0
// writes at the world's destroy, read back as a trace viewer would.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "algorithms/kernels/reduce.h"
#include "core/comm/comm_scheduler.h"
#include "core/comm/comm_stream.h"
#include "core/comm/communicator.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/multirank.h"

namespace hcomm {
namespace {

std::string TempFile(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name + "." +
         std::to_string(getpid());
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

std::vector<nlohmann::json> Spans(const nlohmann::json& j) {
  std::vector<nlohmann::json> out;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") out.push_back(e);
  }
  return out;
}

// Spans of one track must nest: each starts after the previous ended, or
// ends within it (times in microseconds, exact to the nanosecond).
void ExpectNested(const std::vector<nlohmann::json>& spans) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  for (const auto& s : spans) {
    const double ts = s["ts"].get<double>(), dur = s["dur"].get<double>();
    EXPECT_GE(dur, 0.0);
    tracks[{s["pid"].get<int>(), s["tid"].get<int>()}].push_back({ts, ts + dur});
  }
  for (auto& [track, v] : tracks) {
    std::sort(v.begin(), v.end(), [](auto a, auto b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<double> open;  // ends of the enclosing spans
    for (const auto& [b, e] : v) {
      while (!open.empty() && open.back() <= b + 1e-3) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(e, open.back() + 1e-3)
            << "rank " << track.first << " track " << track.second << ": a span from " << b
            << " to " << e << " overlaps one ending at " << open.back();
      }
      open.push_back(e);
    }
  }
}

StreamOp AllReduceOp(float* buf, size_t n) {
  StreamOp op;
  op.kind = StreamOpKind::kAllReduce;
  op.send = buf;
  op.recv = buf;
  op.count = n;
  op.dtype = DataType::kFloat32;
  return op;
}

// Four ranks: collectives, a send and receive, a stream, a scheduler task;
// rank 2 comes 30 ms late to the third allreduce. Rank 0's file holds every
// rank's spans on one clock.
TEST(ProfileTest, FourRanksOneFile) {
  const std::string path = TempFile("profile4.json");
  std::remove(path.c_str());
  testing::RunRanks(4, [&](int rank, const Options& base) {
    Options o = base;
    o.profile = true;
    o.profile_file = path;
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    Communicator& c = **world;
    std::vector<float> v(1024, 1.0f);
    for (int i = 0; i < 5; ++i) {
      if (i == 2 && rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      ASSERT_TRUE(c.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32,
                              ReduceOp::kSum).ok());
    }
    ASSERT_TRUE(c.Broadcast(v.data(), 16, DataType::kFloat32, 1).ok());
    if (rank == 0) {
      ASSERT_TRUE(c.Send(v.data(), 400, 4, 1, 7).ok());
    } else if (rank == 1) {
      ASSERT_TRUE(c.Recv(v.data(), 400, 4, 0, 7).ok());
    }
    // Nonblocking requests that overlap: two receives and two sends each
    // between ranks 2 and 3, waited in another order than posted.
    if (rank >= 2) {
      std::vector<float> in(2 * 256);
      auto r1 = c.Irecv(in.data(), 1024, 4, kAnySource, 8);
      auto r2 = c.Irecv(in.data() + 256, 1024, 4, 5 - rank, 9);
      auto s1 = c.Isend(v.data(), 1024, 4, 5 - rank, 9);
      auto s2 = c.Isend(v.data(), 1024, 4, 5 - rank, 8);
      ASSERT_TRUE(r1.ok() && r2.ok() && s1.ok() && s2.ok());
      for (auto* r : {&*r2, &*s1, &*r1, &*s2}) ASSERT_TRUE(c.Wait(r->get(), c.Deadline()).ok());
    }
    {
      auto s = CommStream::Create(c, 3);
      ASSERT_TRUE(s.ok()) << s.status();
      (*s)->Enqueue(AllReduceOp(v.data(), 64));
      (*s)->EnqueueHost([](void*) {}, nullptr);
      ASSERT_TRUE((*s)->Synchronize().ok());
      ASSERT_TRUE((*s)->Destroy().ok());
    }
    {
      auto sched = CommScheduler::Create(c);
      ASSERT_TRUE(sched.ok()) << sched.status();
      ASSERT_TRUE((*sched)->AddTask("grad_sync", 10, {}, [&](CommStream& st) {
                     st.Enqueue(AllReduceOp(v.data(), 32));
                     return absl::OkStatus();
                   }).ok());
      ASSERT_TRUE((*sched)->Run().ok());
      ASSERT_TRUE((*sched)->Destroy().ok());
    }
    ASSERT_TRUE(c.Destroy().ok());
  });
  nlohmann::json j = ReadJson(path);
  EXPECT_EQ(j["otherData"]["nranks"], 4);
  EXPECT_EQ(j["otherData"]["clock_error_us"].size(), 4u);
  EXPECT_EQ(j["otherData"]["missing_ranks"].size(), 0u);
  EXPECT_EQ(j["displayTimeUnit"], "ms");
  int processes = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") ++processes;
  }
  EXPECT_EQ(processes, 4);
  std::vector<nlohmann::json> spans = Spans(j);
  ExpectNested(spans);

  // The world's allreduces: seq 0..4 on every rank, on one comm.
  std::map<std::pair<int, int>, double> start;  // (seq, rank) -> ts
  int world_comm = -1;
  for (const auto& s : spans) {
    if (s["name"] != "allreduce" || s["cat"] != "collective" || s["args"]["count"] != 1024) {
      continue;
    }
    EXPECT_EQ(s["args"]["bytes"], 4096);
    EXPECT_EQ(s["args"]["dtype"], "float32");
    EXPECT_EQ(s["args"]["op"], "sum");
    EXPECT_EQ(s["args"]["status"], "ok");
    EXPECT_TRUE(s["args"].contains("algo"));
    if (world_comm < 0) world_comm = s["args"]["comm"];
    EXPECT_EQ(s["args"]["comm"], world_comm);
    start[{s["args"]["seq"].get<int>(), s["pid"].get<int>()}] = s["ts"].get<double>();
  }
  ASSERT_EQ(start.size(), 20u);
  // Rank 2 arrives at seq 2 last, about 30 ms after the first.
  double first = 1e18, last = -1;
  int last_rank = -1;
  for (int r = 0; r < 4; ++r) {
    const double ts = start[{2, r}];
    first = std::min(first, ts);
    if (ts > last) {
      last = ts;
      last_rank = r;
    }
  }
  EXPECT_EQ(last_rank, 2);
  EXPECT_GT(last - first, 20000.0);

  // The send and its receive; the stream's allreduce on its own track; the
  // task on its priority's.
  int sends = 0, recvs = 0, stream_ops = 0, tasks = 0;
  for (const auto& s : spans) {
    if (s["name"] == "send") {
      ++sends;
      EXPECT_EQ(s["pid"], 0);
      EXPECT_EQ(s["args"]["peer"], 1);
      EXPECT_EQ(s["args"]["tag"], 7);
      EXPECT_EQ(s["args"]["bytes"], 400);
    }
    if (s["name"] == "recv") ++recvs;
    // (A stream's allreduce carries its fusion lanes: core/comm/fusion.h.)
    if (s["cat"] == "stream" && s["args"]["priority"] == 3 && s["name"] == "allreduce") {
      ++stream_ops;
      EXPECT_GE(s["tid"].get<int>(), 1001);
      EXPECT_GE(s["args"]["count"].get<int>(), 64);
    }
    if (s["cat"] == "task") {
      ++tasks;
      EXPECT_EQ(s["name"], "task grad_sync");
      EXPECT_EQ(s["args"]["priority"], 10);
    }
  }
  EXPECT_EQ(sends, 1);
  EXPECT_EQ(recvs, 1);
  // The requests: on lanes of their own, the receives naming their sender.
  int isends = 0, irecvs = 0;
  for (const auto& s : spans) {
    if (s["name"] != "isend" && s["name"] != "irecv") continue;
    EXPECT_EQ(s["cat"], "p2p");
    EXPECT_GE(s["tid"].get<int>(), 100000);
    EXPECT_EQ(s["args"]["bytes"], 1024);
    EXPECT_EQ(s["args"]["peer"], 5 - s["pid"].get<int>());
    (s["name"] == "isend" ? isends : irecvs) += 1;
  }
  int callbacks = 0;
  for (const auto& s : spans) {
    if (s["name"] != "host_callback") continue;
    ++callbacks;
    EXPECT_EQ(s["cat"], "stream");
    EXPECT_EQ(s["args"]["priority"], 3);
    EXPECT_GE(s["tid"].get<int>(), 1001);
  }
  EXPECT_EQ(callbacks, 4);
  EXPECT_EQ(isends, 4);
  EXPECT_EQ(irecvs, 4);
  EXPECT_EQ(stream_ops, 4);
  EXPECT_EQ(tasks, 4);
  std::remove(path.c_str());
}

TEST(ProfileTest, OffWritesNothing) {
  const std::string path = TempFile("profile_off.json");
  std::remove(path.c_str());
  testing::RunRanks(2, [&](int, const Options& base) {
    Options o = base;
    o.profile_file = path;  // profile stays off
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    EXPECT_EQ((*world)->profiler(), nullptr);
    ASSERT_TRUE((*world)->Barrier().ok());
    ASSERT_TRUE((*world)->Destroy().ok());
  });
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

TEST(ProfileTest, BoundedWithTheLossCounted) {
  const std::string path = TempFile("profile_bound.json");
  std::remove(path.c_str());
  testing::RunRanks(2, [&](int, const Options& base) {
    Options o = base;
    o.profile = true;
    o.profile_file = path;
    o.profile_max_events = 50;
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    int x = 1;
    for (int i = 0; i < 300; ++i) {
      ASSERT_TRUE((*world)->AllReduce(&x, &x, 1, DataType::kInt32, ReduceOp::kMax).ok());
    }
    ASSERT_TRUE((*world)->Destroy().ok());
  });
  nlohmann::json j = ReadJson(path);
  std::vector<nlohmann::json> spans = Spans(j);
  EXPECT_LE(spans.size(), 100u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_GE(j["otherData"]["dropped_events"][r].get<int>(), 250) << r;
  }
  // The newest are kept: the last allreduce (seq 299) is there.
  bool last = false;
  for (const auto& s : spans) last |= s["args"]["seq"] == 299;
  EXPECT_TRUE(last);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace hcomm
