#include "core/comm/comm_stream.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "algorithms/kernels/reduce.h"
#include "core/base/status.h"
#include "core/comm/communicator.h"
#include "core/sched/stream.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/multirank.h"

namespace hcomm {
namespace {

using ::testing::HasSubstr;

constexpr int kRanks = 4;

class CommStreamTest : public ::testing::TestWithParam<testing::TransportMode> {
 protected:
  void SetUp() override { testing::SetTransportMode(GetParam()); }
  void TearDown() override { testing::SetTransportMode(testing::TransportMode::kDefault); }
};

StreamOp AllReduceOp(const float* send, float* recv, size_t n) {
  StreamOp op;
  op.kind = StreamOpKind::kAllReduce;
  op.send = send;
  op.recv = recv;
  op.count = n;
  op.dtype = DataType::kFloat32;
  op.op = ReduceOp::kSum;
  return op;
}

std::unique_ptr<CommStream> MakeStream(Communicator& c, int priority) {
  auto s = CommStream::Create(c, priority);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

// Two streams whose operations the ranks enqueue in different interleavings:
// each stream matches only itself, in its own order.
TEST_P(CommStreamTest, StreamsMatchOnlyThemselvesInOrder) {
  testing::RunRanks(kRanks, [](int rank, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    Communicator& w = **world;
    std::unique_ptr<CommStream> bulk = MakeStream(w, 0);
    std::unique_ptr<CommStream> urgent = MakeStream(w, 1);
    ASSERT_TRUE(bulk && urgent);
    EXPECT_EQ(bulk->stream().priority(), 0);
    EXPECT_EQ(urgent->stream().priority(), 1);
    EXPECT_EQ(bulk->stream().name(), absl::StrCat("stream 0 of rank ", rank));
    EXPECT_EQ(bulk->comm().size(), kRanks);
    EXPECT_EQ(bulk->comm().rank(), rank);

    constexpr size_t kBig = 1 << 16, kSmall = 8;
    constexpr int kOps = 3;
    std::vector<std::vector<float>> big_in(kOps, std::vector<float>(kBig)), big_out = big_in;
    std::vector<std::vector<float>> small_in(kOps, std::vector<float>(kSmall)), small_out = small_in;
    for (int i = 0; i < kOps; ++i) {
      for (size_t j = 0; j < kBig; ++j) big_in[i][j] = static_cast<float>(rank + i + j % 7);
      for (size_t j = 0; j < kSmall; ++j) small_in[i][j] = static_cast<float>(10 * rank + i);
    }
    // Even ranks queue bulk first, odd ranks urgent first, op by op.
    for (int i = 0; i < kOps; ++i) {
      auto b = [&] { bulk->Enqueue(AllReduceOp(big_in[i].data(), big_out[i].data(), kBig)); };
      auto u = [&] {
        urgent->Enqueue(AllReduceOp(small_in[i].data(), small_out[i].data(), kSmall));
      };
      if (rank % 2 == 0) {
        b();
        u();
      } else {
        u();
        b();
      }
    }
    ASSERT_TRUE(urgent->Synchronize().ok());
    ASSERT_TRUE(bulk->Synchronize().ok());
    const float rank_sum = kRanks * (kRanks - 1) / 2.0f;
    for (int i = 0; i < kOps; ++i) {
      for (size_t j = 0; j < kBig; j += 997) {
        ASSERT_EQ(big_out[i][j], rank_sum + kRanks * (i + j % 7)) << "op " << i << " [" << j << "]";
      }
      for (size_t j = 0; j < kSmall; ++j) ASSERT_EQ(small_out[i][j], 10 * rank_sum + kRanks * i);
    }
    EXPECT_TRUE(bulk->Destroy().ok());
    EXPECT_TRUE(urgent->Destroy().ok());
    // The world goes on after its streams.
    int v = 1, sum = 0;
    const absl::Status after = w.AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum);
    ASSERT_TRUE(after.ok()) << "rank " << rank << ": " << after;
    EXPECT_EQ(sum, kRanks);
    EXPECT_TRUE(w.Destroy().ok());
  });
}

// Point-to-point on a stream, host callbacks in order with it, and an
// event that makes a second stream's allreduce read the first one's result.
TEST_P(CommStreamTest, MessagesCallbacksAndEvents) {
  testing::RunRanks(kRanks, [](int rank, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    std::unique_ptr<CommStream> a = MakeStream(**world, 0);
    std::unique_ptr<CommStream> b = MakeStream(**world, 0);
    ASSERT_TRUE(a && b);

    // A ring of messages: to the right, from the left.
    std::vector<int> out(1000, rank), in(1000, -1);
    StreamOp send;
    send.kind = StreamOpKind::kSend;
    send.send = out.data();
    send.count = out.size();
    send.dtype = DataType::kInt32;
    send.peer_or_root = (rank + 1) % kRanks;
    send.tag = 7;
    StreamOp recv = send;
    recv.kind = StreamOpKind::kRecv;
    recv.send = nullptr;
    recv.recv = in.data();
    recv.peer_or_root = (rank + kRanks - 1) % kRanks;
    // Odd ranks receive first; each stream runs one op at a time, so the
    // even ranks' sends must go out without a posted receive (eagerly or
    // by rendezvous, either way the receive comes).
    if (rank % 2 == 0) {
      a->Enqueue(send);
      a->Enqueue(recv);
    } else {
      a->Enqueue(recv);
      a->Enqueue(send);
    }
    struct Log {
      std::mutex mu;
      std::vector<int> seen;  // in[0] as each callback found it
      const std::vector<int>* in;
    } log{{}, {}, &in};
    auto note = [](void* arg) {
      Log* l = static_cast<Log*>(arg);
      std::lock_guard<std::mutex> g(l->mu);
      l->seen.push_back((*l->in)[0]);
    };
    a->EnqueueHost(note, &log);

    std::vector<float> x(4096, static_cast<float>(rank + 1)), y(4096), z(4096);
    a->Enqueue(AllReduceOp(x.data(), y.data(), x.size()));
    Event done;
    done.Record(a->stream());
    b->stream().WaitEvent(done);
    b->Enqueue(AllReduceOp(y.data(), z.data(), y.size()));
    ASSERT_TRUE(b->Synchronize().ok());
    ASSERT_TRUE(a->Synchronize().ok());
    EXPECT_EQ(in, std::vector<int>(1000, (rank + kRanks - 1) % kRanks));
    ASSERT_EQ(log.seen.size(), 1u);
    EXPECT_EQ(log.seen[0], (rank + kRanks - 1) % kRanks);  // after the receive
    const float ranks_sum = kRanks * (kRanks + 1) / 2.0f;  // sum of rank + 1
    EXPECT_EQ(y[0], ranks_sum);
    EXPECT_EQ(z[4095], kRanks * ranks_sum);
    EXPECT_TRUE(a->Destroy().ok());
    EXPECT_TRUE(b->Destroy().ok());
    EXPECT_TRUE((*world)->Destroy().ok());
  });
}

// A collective rank 0 refused at enqueue fails the others' at once; their
// streams then skip their next collective, which fails rank 0's at once
// too (MISMATCH, not a timeout); after Synchronize every stream works again.
TEST_P(CommStreamTest, AFailureFailsTheStreamAndNeverHangsThePeers) {
  testing::RunRanks(
      kRanks,
      [](int rank, const Options& o) {
        auto world = Communicator::Init(o);
        ASSERT_TRUE(world.ok()) << world.status();
        std::unique_ptr<CommStream> s = MakeStream(**world, 0);
        ASSERT_TRUE(s);
        std::vector<float> in(64, 1.0f), out(64, 0.0f);
        if (rank == 0) {
          s->EnqueueRejection(StreamOpKind::kAllReduce);
        } else {
          s->Enqueue(AllReduceOp(in.data(), out.data(), in.size()));
        }
        s->Enqueue(AllReduceOp(in.data(), out.data(), in.size()));
        absl::Status st = s->Synchronize();
        EXPECT_EQ(CodeOf(st), ErrorCode::kMismatch) << st;
        EXPECT_THAT(std::string(st.message()),
                    HasSubstr(absl::StrCat("stream 'stream 0 of rank ", rank, "', allreduce #")));
        EXPECT_THAT(std::string(st.message()), HasSubstr(rank == 0 ? "allreduce #1" : "allreduce #0"));
        // Cleared: the stream runs again, in step on every rank.
        s->Enqueue(AllReduceOp(in.data(), out.data(), in.size()));
        ASSERT_TRUE(s->Synchronize().ok());
        EXPECT_EQ(out[63], static_cast<float>(kRanks));
        EXPECT_TRUE(s->Destroy().ok());
        EXPECT_TRUE((*world)->Destroy().ok());
      },
      /*timeout_ms=*/60000);
}

// Allreduces queued back to back run in batches that the ranks agree on
// although each has queued a different number by the time its stream gets
// to them: rank 0 queues all at once, the others one by one with pauses.
// Every result is exact; fusion_bytes = 0 runs each alone; a stream's
// fusion_bytes is the least of the ranks'.
TEST_P(CommStreamTest, FusesWhatIsQueuedAndAgreesOnTheBatches) {
  testing::RunRanks(kRanks, [](int rank, const Options& base) {
    Options o = base;
    o.fusion_bytes = rank == 2 ? 40000 : -1;  // auto elsewhere: larger
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    Communicator& w = **world;
    std::unique_ptr<CommStream> s = MakeStream(w, 0);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->fusion_bytes(), 40000u);

    constexpr int kOps = 300;
    constexpr size_t kCount = 100;  // 400 bytes: 100 fit in 40000
    std::vector<std::vector<float>> in(kOps, std::vector<float>(kCount)), out = in;
    for (int i = 0; i < kOps; ++i) {
      for (size_t j = 0; j < kCount; ++j) in[i][j] = static_cast<float>(rank * 1000 + i + j);
    }
    // A slow first allreduce, so that rank 0's whole queue is there behind it.
    std::vector<float> big_in(1 << 18, 1.0f), big_out(big_in.size());
    s->Enqueue(AllReduceOp(big_in.data(), big_out.data(), big_in.size()));
    for (int i = 0; i < kOps; ++i) {
      s->Enqueue(AllReduceOp(in[i].data(), out[i].data(), kCount));
      if (rank != 0 && i % 37 == 0) absl::SleepFor(absl::Milliseconds(2));
    }
    ASSERT_TRUE(s->Synchronize().ok());
    for (int i = 0; i < kOps; ++i) {
      for (size_t j = 0; j < kCount; ++j) {
        ASSERT_EQ(out[i][j], static_cast<float>(6000 + 4 * (i + j))) << "op " << i << " [" << j << "]";
      }
    }
    EXPECT_GT(s->fused_batches(), 0u);
    EXPECT_GT(s->fused_ops(), 2 * s->fused_batches());

    // An event's mark after each allreduce (what the bindings record for a
    // Work) does not stop fusion; the marks are reached.
    const uint64_t batches = s->fused_batches();
    std::vector<Event> marks(kOps);
    s->Enqueue(AllReduceOp(big_in.data(), big_out.data(), big_in.size()));
    for (int i = 0; i < kOps; ++i) {
      s->Enqueue(AllReduceOp(in[i].data(), out[i].data(), kCount));
      marks[i].Record(s->stream());
    }
    ASSERT_TRUE(marks[kOps - 1].Synchronize(absl::Seconds(30)).ok());
    ASSERT_TRUE(s->Synchronize().ok());
    EXPECT_GT(s->fused_batches(), batches);
    for (const Event& m : marks) EXPECT_TRUE(m.Query());
    EXPECT_EQ(out[kOps - 1][kCount - 1], static_cast<float>(6000 + 4 * (kOps - 1 + kCount - 1)));
    EXPECT_TRUE(s->Destroy().ok());

    // fusion_bytes 0 on one rank: no fusion anywhere.
    ASSERT_TRUE(w.SetOption("fusion_bytes", rank == 1 ? "0" : "auto").ok());
    std::unique_ptr<CommStream> plain = MakeStream(w, 0);
    ASSERT_TRUE(plain);
    EXPECT_EQ(plain->fusion_bytes(), 0u);
    for (int i = 0; i < kOps; ++i) plain->Enqueue(AllReduceOp(in[i].data(), out[i].data(), kCount));
    ASSERT_TRUE(plain->Synchronize().ok());
    EXPECT_EQ(out[kOps - 1][0], static_cast<float>(6000 + 4 * (kOps - 1)));
    EXPECT_EQ(plain->fused_batches(), 0u);
    EXPECT_TRUE(plain->Destroy().ok());
    EXPECT_TRUE(w.Destroy().ok());
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, CommStreamTest,
                         ::testing::Values(testing::TransportMode::kShm,
                                           testing::TransportMode::kTcp),
                         [](const ::testing::TestParamInfo<testing::TransportMode>& info) {
                           return std::string(testing::TransportModeName(info.param));
                         });

}  // namespace
}  // namespace hcomm
