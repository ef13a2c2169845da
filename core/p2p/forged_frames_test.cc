// Control frames of the rendezvous protocol (CTS, REJECT, DATA, DATA_ABORT)
// forged by a third rank: three ranks as threads of this process, rank 2
// sending raw frames (Engine::SendRawFrameForTesting) that name the ids of
// an exchange between ranks 0 and 1. That exchange must go on untouched,
// byte-exact, and the forger be failed where its frame named a live id.
#include <sched.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/p2p/engine.h"
#include "core/p2p/engine_testing.h"
#include "core/p2p/protocol.h"
#include "gtest/gtest.h"
#include "testing/multirank.h"

namespace hcomm {
namespace {

using testing::MustInit;
using testing::RunRanks;
using testing::WaitFor;

constexpr absl::Duration kStep = absl::Seconds(5);  // bound on every wait here

class ForgedFramesTest : public ::testing::TestWithParam<testing::TransportMode> {
 protected:
  void SetUp() override { testing::SetTransportMode(GetParam()); }
  void TearDown() override { testing::SetTransportMode(testing::TransportMode::kDefault); }
};

std::vector<char> Pattern(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed * 7) & 0xff);
  return v;
}

// Rank 2 forges a CTS for rank 0's rendezvous send to rank 1 before rank 1
// has posted its receive: rank 0 must neither send the payload to rank 2
// nor report the send done; rank 2 is failed, and the send then completes
// to rank 1 once rank 1's real CTS comes.
TEST_P(ForgedFramesTest, ForgedCtsDoesNotCompleteAnotherRanksSend) {
  constexpr size_t kBytes = 256 * 1024;
  constexpr int kTag = 7;
  std::atomic<uint64_t> send_id{0};
  std::atomic<bool> rank1_go{false};
  std::atomic<int> finished{0};
  RunRanks(3, [&](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    const std::vector<char> msg = Pattern(kBytes, 3);
    if (rank == 0) {
      auto r = c->Isend(0, msg.data(), kBytes, 1, /*peer=*/1, kTag);
      ASSERT_TRUE(r.ok()) << r.status();
      send_id.store((*r)->id);
      // Until rank 0 has dealt with the forged CTS: it fails rank 2, or
      // (the flaw) it sends the payload there and reports the send done.
      WaitFor([&] { return !c->PeerHealth(2).ok() || c->Test(r->get()); },
              MonoNow() + kStep);
      EXPECT_FALSE((*r)->done.load())
          << "rank 0's send to rank 1 was reported done (" << (*r)->status
          << ") before rank 1 posted its receive: a CTS forged by rank 2 completed it";
      absl::Status health = c->PeerHealth(2);
      EXPECT_EQ(CodeOf(health), ErrorCode::kPeerFailure) << health;
      EXPECT_TRUE(absl::StrContains(health.message(), "rank 2") &&
                  absl::StrContains(health.message(), "CTS"))
          << health;
      rank1_go.store(true);
      ASSERT_OK(c->Wait(r->get(), MonoNow() + kStep));
      EXPECT_EQ((*r)->out_source, 1);
    } else if (rank == 1) {
      ASSERT_TRUE(WaitFor([&] { return rank1_go.load(); }, MonoNow() + 2 * kStep));
      std::vector<char> buf(kBytes, 0);
      std::shared_ptr<Request> r;
      ASSERT_OK(c->Recv(0, buf.data(), kBytes, 1, /*peer=*/0, kTag, kStep, &r));
      EXPECT_EQ(r->out_bytes, kBytes);
      EXPECT_EQ(0, memcmp(buf.data(), msg.data(), kBytes)) << "rank 1 got other bytes";
    } else {
      ASSERT_TRUE(WaitFor([&] { return send_id.load() != 0; }, MonoNow() + kStep));
      Meta m = MakeMeta(kCts, /*ctx=*/0, /*src=*/2, kTag, kBytes, send_id.load(),
                        /*id2=*/12345);
      ASSERT_OK(c->SendRawFrameForTesting(0, Pack(m), nullptr, 0, MonoNow() + kStep));
    }
    finished.fetch_add(1);
    // Nobody leaves before the others are done with it.
    WaitFor([&] { return finished.load() == 3; }, MonoNow() + 3 * kStep);
  });
}

// Rank 2 forges DATA for rank 1's receive from rank 0 (sending it over and
// over, so that one lands while the receive waits for rank 0's data): rank
// 1 must receive rank 0's bytes, never rank 2's.
TEST_P(ForgedFramesTest, ForgedDataIsNotDeliveredAsAnotherRanksMessage) {
  constexpr size_t kBytes = 1024 * 1024;
  constexpr int kTag = 8;
  std::atomic<uint64_t> recv_id{0};
  std::atomic<bool> forging{false};
  std::atomic<bool> received{false};
  std::atomic<int> finished{0};
  RunRanks(3, [&](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    const std::vector<char> msg = Pattern(kBytes, 5);
    if (rank == 0) {
      ASSERT_TRUE(WaitFor([&] { return forging.load(); }, MonoNow() + 2 * kStep));
      ASSERT_OK(c->Send(0, msg.data(), kBytes, 1, /*peer=*/1, kTag, kStep));
    } else if (rank == 1) {
      std::vector<char> buf(kBytes, 0);
      auto r = c->Irecv(0, buf.data(), kBytes, 1, /*peer=*/0, kTag);
      ASSERT_TRUE(r.ok()) << r.status();
      recv_id.store((*r)->id);
      absl::Status s = c->Wait(r->get(), MonoNow() + 2 * kStep);
      received.store(true);
      ASSERT_OK(s);
      EXPECT_EQ((*r)->out_source, 0);
      EXPECT_EQ((*r)->out_bytes, kBytes);
      size_t forged = 0;
      for (size_t i = 0; i < kBytes; ++i) forged += buf[i] != msg[i];
      EXPECT_EQ(forged, 0u) << "rank 1's receive from rank 0 holds " << forged
                            << " bytes that rank 0 did not send (rank 2's forged DATA)";
    } else {
      ASSERT_TRUE(WaitFor([&] { return recv_id.load() != 0; }, MonoNow() + kStep));
      const std::vector<char> junk(kBytes, static_cast<char>(0xEE));
      const Meta m = MakeMeta(kData, /*ctx=*/0, /*src=*/2, kTag, kBytes, recv_id.load());
      const MonoTime end = MonoNow() + 2 * kStep;
      while (!received.load() && MonoNow() < end) {
        absl::Status s = c->SendRawFrameForTesting(1, Pack(m), junk.data(), kBytes, end);
        forging.store(true);
        if (!s.ok()) break;  // rank 1 may have cut us off
      }
    }
    finished.fetch_add(1);
    WaitFor([&] { return finished.load() == 3; }, MonoNow() + 3 * kStep);
  });
}

// Random forged control frames with random ids from rank 2 to ranks 0 and
// 1 while they exchange rendezvous messages both ways: every message
// arrives byte-exact and nothing waits past its bound.
TEST_P(ForgedFramesTest, RandomForgedControlFramesLeaveAnExchangeIntact) {
  constexpr int kRounds = 12;
  std::atomic<int> exchanging{2};
  std::atomic<int> finished{0};
  std::atomic<int> forged_frames{0};
  RunRanks(3, [&](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    if (rank < 2) {
      const int other = 1 - rank;
      std::mt19937 sizes(1234);  // the same sequence on both ranks
      for (int i = 0; i < kRounds; ++i) {
        const size_t to1 = 65537 + sizes() % (256 * 1024);
        const size_t to0 = 65537 + sizes() % (256 * 1024);
        const size_t out = rank == 0 ? to1 : to0, in = rank == 0 ? to0 : to1;
        const std::vector<char> msg = Pattern(out, 10 * i + rank);
        const std::vector<char> want = Pattern(in, 10 * i + other);
        std::vector<char> buf(in, 0);
        auto rr = c->Irecv(0, buf.data(), in, 1, other, 100 + i);
        ASSERT_TRUE(rr.ok()) << rr.status();
        auto sr = c->Isend(0, msg.data(), out, 1, other, 100 + i);
        ASSERT_TRUE(sr.ok()) << sr.status();
        {
          absl::Status s = c->Wait(sr->get(), MonoNow() + kStep);
          ASSERT_TRUE(s.ok()) << "rank " << rank << " round " << i << ": " << s;
        }
        {
          absl::Status s = c->Wait(rr->get(), MonoNow() + kStep);
          ASSERT_TRUE(s.ok()) << "rank " << rank << " round " << i << ": " << s;
        }
        EXPECT_EQ((*rr)->out_source, other);
        ASSERT_EQ((*rr)->out_bytes, in);
        ASSERT_EQ(0, memcmp(buf.data(), want.data(), in)) << "rank " << rank << " round " << i;
      }
      // (Whether a forged frame named one of this rank's live ids, for the log.)
      printf("rank %d: rank 2 is %s\n", rank,
             std::string(c->PeerHealth(2).ToString()).c_str());
      exchanging.fetch_sub(1);
    } else {
      std::mt19937_64 rng(GetParam() == testing::TransportMode::kTcp ? 7 : 11);
      const FrameKind kinds[] = {kCts, kReject, kData, kDataAbort};
      const std::vector<char> junk(128 * 1024, static_cast<char>(0xEE));
      const MonoTime end = MonoNow() + 2 * kStep;
      while (exchanging.load() > 0 && MonoNow() < end) {
        const FrameKind kind = kinds[rng() % 4];
        const int to = static_cast<int>(rng() % 2);
        const uint64_t id = 1 + rng() % 96, id2 = 1 + rng() % 96;
        const uint32_t ctx = static_cast<uint32_t>(rng() % 2);
        const int tag = 100 + static_cast<int>(rng() % kRounds);
        const size_t len = kind == kData ? rng() % junk.size() : 0;
        const Meta m = MakeMeta(kind, ctx, /*src=*/2, tag, len, id, id2);
        if (!c->SendRawFrameForTesting(to, Pack(m), junk.data(), len, end).ok()) break;
        forged_frames.fetch_add(1);
      }
    }
    finished.fetch_add(1);
    WaitFor([&] { return finished.load() == 3; }, MonoNow() + 3 * kStep);
  });
  printf("rank 2 forged %d frames\n", forged_frames.load());
  EXPECT_GT(forged_frames.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, ForgedFramesTest,
    ::testing::Values(testing::TransportMode::kTcp, testing::TransportMode::kShm),
    [](const ::testing::TestParamInfo<testing::TransportMode>& info) {
      return std::string(testing::TransportModeName(info.param));
    });

}  // namespace
}  // namespace hcomm
