// Flow control of eager messages (core/p2p/flow.h), ranks as threads of
// this process over shared memory and over TCP:
// - a burst of messages that no receive waits for is held within the
//   receiver's window (the rest wait at the sender as RTS) and is delivered
//   whole and in order once receives come; eager sends resume after;
// - a peer that ignores the window (raw eager frames, raw RTS) is failed
//   with a message naming the flood, and the receiver's memory stays
//   bounded and the receiver usable;
// - a sender keeps at most window / 128 RTS unanswered per receiver, and
//   says so beyond.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
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

constexpr absl::Duration kStep = absl::Seconds(10);  // bound on every wait here

// How much a rank may grow while it holds its window (1 MiB) of unreceived
// messages; the bursts here are 32 MiB and more, which would land whole
// without flow control. ThreadSanitizer adds shadow memory for the bytes
// a program touches and holds freed blocks back, so its builds get more
// room (a whole burst and its shadow would still pass it by far).
#if defined(__SANITIZE_THREAD__)
constexpr int64_t kMostGrowth = 32 << 20;
#else
constexpr int64_t kMostGrowth = 12 << 20;
#endif

// This process's resident memory, bytes.
int64_t ResidentBytes() {
  FILE* f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f != nullptr) {
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
    fclose(f);
  }
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

void Fill(char* p, size_t n, int seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<char>((i * 131 + seed * 7) & 0xff);
}

class FlowControlTest : public ::testing::TestWithParam<testing::TransportMode> {
 protected:
  void SetUp() override { testing::SetTransportMode(GetParam()); }
  void TearDown() override { testing::SetTransportMode(testing::TransportMode::kDefault); }
};

// Rank 1 sends 32 MiB in 8 KiB messages (eager on every transport) that
// rank 0 does not receive yet.
// Rank 0 holds at most its 1 MiB window of them (without flow control it
// held all 32 MiB); then it receives them all, byte-exact and in order, and
// eager sends to it resume.
TEST_P(FlowControlTest, BurstIsHeldWithinTheWindowAndDeliveredInOrder) {
  constexpr size_t kMsg = 8 * 1024;
  constexpr int kCount = 4096;
  constexpr int64_t kWindow = 1 << 20;
  constexpr int kTag = 3;
  std::vector<char> data(kMsg * kCount);
  for (int i = 0; i < kCount; ++i) Fill(data.data() + i * kMsg, kMsg, i);
  std::atomic<bool> sent{false}, received{false}, done{false};
  RunRanks(2, [&](int rank, const Options& base) {
    Options o = base;
    o.unexpected_bytes = kWindow;
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    if (rank == 1) {
      std::vector<std::shared_ptr<Request>> reqs;
      for (int i = 0; i < kCount; ++i) {
        auto r = c->Isend(0, data.data() + i * kMsg, kMsg, 1, /*peer=*/0, kTag);
        ASSERT_TRUE(r.ok()) << r.status();
        reqs.push_back(*r);
      }
      int rendezvous = 0;
      for (auto& r : reqs) rendezvous += r->rendezvous;
      // The window's worth went eagerly; the rest waits as RTS.
      EXPECT_GT(rendezvous, kCount - 200) << "no flow control: every message went eagerly";
      EXPECT_LT(rendezvous, kCount);
      sent.store(true);
      for (auto& r : reqs) ASSERT_OK(c->Wait(r.get(), MonoNow() + kStep));
      ASSERT_TRUE(WaitFor([&] { return received.load(); }, MonoNow() + kStep));
      // Rank 0 took everything: its credit comes back, and small messages
      // go eagerly again.
      bool eager = false;
      char byte = 7;
      for (int i = 0; i < 200 && !eager; ++i) {
        auto r = c->Isend(0, &byte, 1, 1, 0, kTag + 1);
        ASSERT_TRUE(r.ok()) << r.status();
        eager = !(*r)->rendezvous;
        ASSERT_OK(c->Wait(r->get(), MonoNow() + kStep));
        if (!eager) absl::SleepFor(absl::Milliseconds(10));
      }
      EXPECT_TRUE(eager) << "eager sends never resumed: no credit came back";
      done.store(true);
    } else {
      const int64_t before = ResidentBytes();
      ASSERT_TRUE(WaitFor([&] { return sent.load(); }, MonoNow() + kStep));
      // Give the arrivals time to land (they would all land within this
      // without flow control).
      absl::SleepFor(absl::Milliseconds(300));
      const int64_t held = c->HeldFromForTesting(1);
      EXPECT_LE(held, kWindow);
      EXPECT_GT(held, kWindow / 2) << "the window was not used";
      EXPECT_LT(ResidentBytes() - before, kMostGrowth)
          << "rank 0 grew by more than " << (kMostGrowth >> 20)
          << " MiB holding unreceived messages";
      std::vector<char> buf(kMsg);
      for (int i = 0; i < kCount; ++i) {
        ASSERT_OK(c->Recv(0, buf.data(), kMsg, 1, 1, kTag, kStep));
        ASSERT_EQ(0, memcmp(buf.data(), data.data() + i * kMsg, kMsg)) << "message " << i;
      }
      EXPECT_EQ(c->HeldFromForTesting(1), 0);
      received.store(true);
      char byte = 0;
      while (!done.load()) {
        auto got = c->Irecv(0, &byte, 1, 1, 1, kTag + 1);
        ASSERT_TRUE(got.ok()) << got.status();
        while (!done.load() && !c->Test(got->get())) absl::SleepFor(absl::Milliseconds(1));
        if (!(*got)->done.load()) c->Release(*got);
      }
    }
  });
}

// Rank 1 ignores the protocol and writes raw eager frames to rank 0 without
// end: rank 0 fails rank 1 once its window is full, naming the flood, holds
// no more than the window, and goes on with rank 2.
TEST_P(FlowControlTest, FloodOfRawEagerFramesFailsTheSenderNotTheReceiver) {
  constexpr size_t kMsg = 64 * 1024;
  constexpr int64_t kWindow = 1 << 20;
  std::atomic<bool> flooded{false};
  std::atomic<int> finished{0};
  RunRanks(3, [&](int rank, const Options& base) {
    Options o = base;
    o.unexpected_bytes = kWindow;
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    if (rank == 1) {
      std::vector<char> junk(kMsg, 'x');
      int written = 0;
      for (; written < 1024; ++written) {  // 64 MiB, if rank 0 took it all
        Meta m = MakeMeta(kEager, /*ctx=*/0, /*src=*/1, /*tag=*/5, kMsg, 1000 + written);
        if (!c->SendRawFrameForTesting(0, Pack(m), junk.data(), kMsg, MonoNow() + kStep).ok()) {
          break;
        }
      }
      // (Rank 0 may drain its side of a failed connection: what the writes
      // return says nothing; rank 0's health and memory do.)
      flooded.store(true);
    } else if (rank == 0) {
      const int64_t before = ResidentBytes();
      ASSERT_TRUE(WaitFor([&] { return !c->PeerHealth(1).ok(); }, MonoNow() + 3 * kStep));
      absl::Status health = c->PeerHealth(1);
      EXPECT_EQ(CodeOf(health), ErrorCode::kPeerFailure) << health;
      EXPECT_TRUE(absl::StrContains(health.message(), "flow control") &&
                  absl::StrContains(health.message(), "unexpected_bytes"))
          << health;
      EXPECT_LE(c->HeldFromForTesting(1), kWindow);
      EXPECT_LT(ResidentBytes() - before, kMostGrowth);
      // Still usable with the others.
      int v = 0;
      ASSERT_OK(c->Recv(0, &v, sizeof v, 4, /*peer=*/2, /*tag=*/9, kStep));
      EXPECT_EQ(v, 42);
    } else {
      int v = 42;
      ASSERT_OK(c->Send(0, &v, sizeof v, 4, /*peer=*/0, /*tag=*/9, kStep));
    }
    finished.fetch_add(1);
    WaitFor([&] { return finished.load() == 3; }, MonoNow() + 3 * kStep);
  });
}

// Raw RTS frames without end: each is only an entry at rank 0, but entries
// are bounded too (twice window / 128).
TEST_P(FlowControlTest, FloodOfRawRtsFailsTheSender) {
  constexpr int64_t kWindow = 1 << 17;  // 1024 RTS a sender may keep; 2048 held
  std::atomic<int> finished{0};
  RunRanks(2, [&](int rank, const Options& base) {
    Options o = base;
    o.unexpected_bytes = kWindow;
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    if (rank == 1) {
      int written = 0;
      for (; written < 20000; ++written) {
        Meta m = MakeMeta(kRts, /*ctx=*/0, /*src=*/1, /*tag=*/5, 1 << 20, 5000 + written);
        if (!c->SendRawFrameForTesting(0, Pack(m), nullptr, 0, MonoNow() + kStep).ok()) break;
      }
    } else {
      ASSERT_TRUE(WaitFor([&] { return !c->PeerHealth(1).ok(); }, MonoNow() + 3 * kStep));
      absl::Status health = c->PeerHealth(1);
      EXPECT_EQ(CodeOf(health), ErrorCode::kPeerFailure) << health;
      EXPECT_TRUE(absl::StrContains(health.message(), "RTS")) << health;
    }
    finished.fetch_add(1);
    WaitFor([&] { return finished.load() == 2; }, MonoNow() + 3 * kStep);
  });
}

// A sender keeps at most the receiver's window / 128 rendezvous sends
// unanswered: the next is refused with OUT_OF_MEM saying why, and those
// before it complete once received.
TEST_P(FlowControlTest, SenderRefusesRtsBeyondTheReceiversBound) {
  constexpr int64_t kWindow = 1 << 17;  // rank 1 holds 1024 RTS of rank 0's
  constexpr size_t kMsg = 80 * 1024;    // above the eager limit
  constexpr int kMax = kWindow / FlowControl::kEntryBytes;
  std::vector<char> data(kMsg, 'd');
  std::atomic<bool> refused{false};
  RunRanks(2, [&](int rank, const Options& base) {
    Options o = base;
    o.unexpected_bytes = kWindow;
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    if (rank == 0) {
      std::vector<std::shared_ptr<Request>> reqs;
      for (int i = 0; i < kMax; ++i) {
        auto r = c->Isend(0, data.data(), kMsg, 1, /*peer=*/1, /*tag=*/2);
        ASSERT_TRUE(r.ok()) << i << ": " << r.status();
        reqs.push_back(*r);
      }
      auto over = c->Isend(0, data.data(), kMsg, 1, 1, 2);
      ASSERT_FALSE(over.ok());
      EXPECT_EQ(CodeOf(over.status()), ErrorCode::kOutOfMem) << over.status();
      EXPECT_TRUE(absl::StrContains(over.status().message(), "unexpected_bytes"))
          << over.status();
      refused.store(true);
      for (auto& r : reqs) ASSERT_OK(c->Wait(r.get(), MonoNow() + kStep));
      // Answered: room again.
      auto again = c->Isend(0, data.data(), kMsg, 1, 1, 2);
      ASSERT_TRUE(again.ok()) << again.status();
      ASSERT_OK(c->Wait(again->get(), MonoNow() + kStep));
    } else {
      ASSERT_TRUE(WaitFor([&] { return refused.load(); }, MonoNow() + kStep));
      std::vector<char> buf(kMsg);
      for (int i = 0; i <= kMax; ++i) ASSERT_OK(c->Recv(0, buf.data(), kMsg, 1, 0, 2, kStep));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Transports, FlowControlTest,
    ::testing::Values(testing::TransportMode::kTcp, testing::TransportMode::kShm),
    [](const ::testing::TestParamInfo<testing::TransportMode>& info) {
      return std::string(testing::TransportModeName(info.param));
    });

}  // namespace
}  // namespace hcomm
