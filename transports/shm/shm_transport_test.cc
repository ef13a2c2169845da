// Functional tests of the shared-memory transport: setup errors in one
// process, then pairs of forked processes exchanging frames of every size
// class over the CMA path and the pipelined ring path.
#include "transports/shm/shm_transport.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/clock.h"
#include "core/base/status.h"
#include "gtest/gtest.h"
#include "transports/shm/shm_test_util.h"

namespace hcomm {
namespace {

using shm_test::Group;
using shm_test::Leftovers;
using shm_test::Link;
using shm_test::MakeMeta;
using shm_test::PollUntil;
using shm_test::TestSink;
using shm_test::Tracker;
using shm_test::UniqueKey;

constexpr size_t kMiB = 1024 * 1024;
const std::vector<size_t> kSizes = {0,        1,        40, 4096, 64 * 1024 - 1, 64 * 1024 + 1,
                                    kMiB + 3, 48 * kMiB};

// A payload kept alive until its frame's callback ran (the tests keep
// every buffer until the end).
struct Payload {
  std::unique_ptr<char[]> bytes;
  size_t len = 0;
};

Payload MakePayload(int src, uint32_t stream, uint64_t seq, size_t len) {
  Payload p;
  p.len = len;
  p.bytes.reset(new char[len > 0 ? len : 1]);
  shm_test::Fill(p.bytes.get(), len, shm_test::SeedOf(src, stream, seq));
  return p;
}

void SetCmaEnv(bool cma) {
  setenv("HCOMM_SHM_CMA", cma ? "1" : "0", 1);
}

// ---------------------------------------------------------------------------
// One process

TEST(ShmTransportSetupTest, CreateRejectsBadArguments) {
  TestSink sink(4);
  const std::string key = UniqueKey("args");
  EXPECT_EQ(CodeOf(ShmTransport::Create(4, 4, {1}, key, &sink).status()),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(ShmTransport::Create(0, 4, {0, 1}, key, &sink).status()),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(ShmTransport::Create(0, 4, {1, 1}, key, &sink).status()),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(ShmTransport::Create(0, 4, {5}, key, &sink).status()),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(ShmTransport::Create(0, 4, {1}, "", &sink).status()),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(ShmTransport::Create(0, 4, {1}, key, nullptr).status()),
            ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Leftovers(key).empty());
}

TEST(ShmTransportSetupTest, SegmentIsPrivateAndRemovedWithoutFinishSetup) {
  TestSink sink(3);
  const std::string key = UniqueKey("life");
  {
    auto t = ShmTransport::Create(0, 3, {1, 2}, key, &sink);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_STREQ((*t)->name(), "shm");
    const std::string addr = (*t)->Address();
    EXPECT_TRUE(absl::StartsWith(addr, "shm1:")) << addr;
    EXPECT_TRUE(absl::StrContains(addr, absl::StrCat("/hcomm-", key, "-0"))) << addr;
    ASSERT_EQ(Leftovers(key).size(), 1u);
    struct stat st;
    ASSERT_EQ(stat(absl::StrCat("/dev/shm/hcomm-", key, "-0").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_FALSE((*t)->UsesCma(1));
    EXPECT_EQ((*t)->PendingSends(), 0u);
    // The same name again: refused, and the first segment stays.
    auto again = ShmTransport::Create(0, 3, {1, 2}, key, &sink);
    EXPECT_EQ(CodeOf(again.status()), ErrorCode::kUnavailable) << again.status();
    EXPECT_EQ(Leftovers(key).size(), 1u);
    // Sends to a peer not attached yet fail at once.
    Tracker tr;
    (*t)->Send(1, MakeMeta(0, 0, 0, 0), nullptr, 0, tr.Callback());
    EXPECT_EQ(tr.failed(), 1);
    (*t)->Send(7, MakeMeta(0, 0, 0, 0), nullptr, 0, tr.Callback());
    EXPECT_EQ(CodeOf(tr.first_failure()), ErrorCode::kPeerFailure);
    EXPECT_EQ(tr.failed(), 2);
  }
  EXPECT_TRUE(Leftovers(key).empty());
}

TEST(ShmTransportSetupTest, ProbeLeavesNothingAndSparesTheSegmentsName) {
  TestSink sink(2);
  const std::string key = UniqueKey("probe");
  EXPECT_TRUE(ShmTransport::Probe(key, 0).ok());
  EXPECT_TRUE(Leftovers(key).empty());
  // A probe beside a live segment of the same rank neither fails nor
  // touches it.
  auto t = ShmTransport::Create(0, 2, {1}, key, &sink);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(ShmTransport::Probe(key, 0).ok());
  EXPECT_EQ(Leftovers(key).size(), 1u);
}

TEST(ShmTransportSetupTest, DomainNamesTheBootAndTheDeviceOfDevShm) {
  const std::string d = ShmTransport::Domain();
  EXPECT_EQ(d, ShmTransport::Domain());
  const size_t dot = d.find('.');
  ASSERT_NE(dot, std::string::npos) << d;
  EXPECT_EQ(dot, 32u) << d;  // the boot's id: 32 hex digits without its dashes
  struct stat st;
  ASSERT_EQ(stat("/dev/shm", &st), 0);
  EXPECT_EQ(d.substr(dot + 1), absl::StrCat(absl::Hex(static_cast<uint64_t>(st.st_dev)))) << d;
  EXPECT_EQ(d.find(' '), std::string::npos) << d;  // one field of a rank's address
}

TEST(ShmTransportSetupTest, FinishSetupUnlinksAndReportsMissingPeers) {
  TestSink sink(2);
  const std::string key = UniqueKey("finish");
  auto t = ShmTransport::Create(0, 2, {1}, key, &sink);
  ASSERT_TRUE(t.ok()) << t.status();
  absl::Status s = (*t)->FinishSetup();
  EXPECT_EQ(CodeOf(s), ErrorCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "1")) << s;
  EXPECT_TRUE(Leftovers(key).empty());
}

TEST(ShmTransportSetupTest, ConnectRejectsBadAddresses) {
  TestSink sink(3);
  const std::string key = UniqueKey("conn");
  auto a = ShmTransport::Create(0, 3, {1}, key, &sink);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = ShmTransport::Create(1, 3, {0}, key, &sink);  // does not list rank 2
  ASSERT_TRUE(b.ok()) << b.status();
  auto c = ShmTransport::Create(2, 3, {1}, key, &sink);
  ASSERT_TRUE(c.ok()) << c.status();
  const MonoTime soon = MonoNow() + absl::Milliseconds(50);
  EXPECT_EQ(CodeOf((*a)->Connect(1, "garbage", soon)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf((*a)->Connect(1, "shm1:1:1:zz:/x", soon)), ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf((*a)->Connect(2, (*c)->Address(), soon)), ErrorCode::kInvalidArgument)
      << "rank 2 is not a local peer of rank 0";
  EXPECT_EQ(CodeOf((*a)->Connect(1, (*c)->Address(), soon)), ErrorCode::kInvalidArgument)
      << "the address is rank 2's";
  EXPECT_EQ(CodeOf((*c)->Connect(1, (*b)->Address(), soon)), ErrorCode::kInvalidArgument)
      << "rank 1 does not list rank 2";
  const std::string missing =
      absl::StrCat("shm1:", getpid(), ":1:1000:/hcomm-", key, "-nonexistent");
  EXPECT_EQ(CodeOf((*a)->Connect(1, missing, soon)), ErrorCode::kTimeout);
  // Both directions within one process work too (CMA towards ourselves).
  ASSERT_TRUE((*a)->Connect(1, (*b)->Address(), soon).ok());
  ASSERT_TRUE((*b)->Connect(0, (*a)->Address(), soon).ok());
  EXPECT_EQ(CodeOf((*a)->Connect(1, (*b)->Address(), soon)), ErrorCode::kInvalidArgument)
      << "already attached";
  EXPECT_TRUE((*a)->FinishSetup().ok());
  EXPECT_TRUE((*b)->FinishSetup().ok());
  EXPECT_EQ(Leftovers(key).size(), 1u);  // rank 2's, not set up
  c->reset();
  EXPECT_TRUE(Leftovers(key).empty());
  // A frame through the rings in one process.
  Tracker tr;
  char msg[5] = {};
  shm_test::Fill(msg, sizeof msg, shm_test::SeedOf(0, 0, 0));
  (*a)->Send(1, MakeMeta(0, 0, 0, sizeof msg), msg, sizeof msg, tr.Callback());
  EXPECT_EQ(tr.ok(), 1);
  EXPECT_TRUE(PollUntil(b->get(), [&] { return sink.frames_from(0) == 1; }));
  EXPECT_TRUE(sink.errors().empty());
}

// Ranks 0 and 1 of one process, attached to each other and set up; rank 0
// attaches to rank 1 at b_address_for_a(rank 1's address).
using Made = absl::StatusOr<std::unique_ptr<ShmTransport>>;
void AttachPair(const std::string& key, TestSink* sink, Made* a, Made* b,
                const std::function<std::string(const std::string&)>& b_address_for_a =
                    [](const std::string& address) { return address; }) {
  *a = ShmTransport::Create(0, 2, {1}, key, sink);
  ASSERT_TRUE(a->ok()) << a->status();
  *b = ShmTransport::Create(1, 2, {0}, key, sink);
  ASSERT_TRUE(b->ok()) << b->status();
  const MonoTime soon = MonoNow() + absl::Seconds(5);
  ASSERT_TRUE((**a)->Connect(1, b_address_for_a((**b)->Address()), soon).ok());
  ASSERT_TRUE((**b)->Connect(0, (**a)->Address(), soon).ok());
  ASSERT_TRUE((**a)->FinishSetup().ok());
  ASSERT_TRUE((**b)->FinishSetup().ok());
}

// CMA is checked per direction at Connect: a reader that cannot read its
// writer's memory (here: a wrong address for the probe, as EPERM would do)
// makes that writer use the ring copy, while the other direction keeps CMA.
TEST(ShmTransportSetupTest, UnreadablePeerFallsBackToRingCopy) {
  setenv("HCOMM_SHM_CMA", "1", 1);
  TestSink sink(2);
  const std::string key = UniqueKey("probe");
  Made a, b;
  ASSERT_NO_FATAL_FAILURE(AttachPair(key, &sink, &a, &b, [](const std::string& address) {
    std::vector<std::string> parts = absl::StrSplit(address, ':');
    EXPECT_EQ(parts.size(), 5u);
    parts[3] = "10";  // not where b's segment lives in b's address space
    return absl::StrJoin(parts, ":");
  }));
  EXPECT_TRUE((*a)->UsesCma(1));   // b reads a's memory
  EXPECT_FALSE((*b)->UsesCma(0));  // a could not read b's: b copies through the ring
  Tracker tr;
  std::vector<Payload> keep;
  const std::vector<size_t> sizes = {kMiB + 3, 5 * kMiB, 100};
  for (size_t i = 0; i < sizes.size(); ++i) {
    keep.push_back(MakePayload(0, 0, i, sizes[i]));
    (*a)->Send(1, MakeMeta(0, 0, i, sizes[i]), keep.back().bytes.get(), sizes[i], tr.Callback());
    keep.push_back(MakePayload(1, 0, i, sizes[i]));
    (*b)->Send(0, MakeMeta(1, 0, i, sizes[i]), keep.back().bytes.get(), sizes[i], tr.Callback());
  }
  const int64_t n = static_cast<int64_t>(sizes.size());
  const MonoTime deadline = MonoNow() + absl::Seconds(20);
  while ((tr.done() < 2 * n || sink.frames_from(0) < n || sink.frames_from(1) < n) &&
         MonoNow() < deadline) {
    (*a)->Poll(absl::ZeroDuration());
    (*b)->Poll(absl::ZeroDuration());
  }
  EXPECT_EQ(tr.ok(), 2 * n);
  EXPECT_EQ(sink.frames_from(0), n);
  EXPECT_EQ(sink.frames_from(1), n);
  EXPECT_TRUE(sink.errors().empty());
  EXPECT_TRUE(Leftovers(key).empty());
}

// The wake fd of a transport armed to block elsewhere turns readable when a
// peer sends to it; unarmed, or disarmed, no bell is sent; arming when a
// frame waits already arms nothing.
TEST(ShmTransportSetupTest, WakeFdRingsOnlyWhileArmed) {
  unsetenv("HCOMM_SHM_CMA");
  TestSink sink(2);
  const std::string key = UniqueKey("bell");
  Made a, b;
  ASSERT_NO_FATAL_FAILURE(AttachPair(key, &sink, &a, &b));
  EXPECT_FALSE((*a)->ArmWake());  // no wake fd yet
  const int fd = (*a)->OpenWakeFd();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(fd, (*a)->OpenWakeFd());
  auto readable = [fd](int ms) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, ms) == 1;
  };
  Tracker tr;
  std::vector<Payload> keep;
  auto send = [&](uint64_t seq, size_t len) {
    keep.push_back(MakePayload(1, 0, seq, len));
    (*b)->Send(0, MakeMeta(1, 0, seq, len), keep.back().bytes.get(), len, tr.Callback());
  };
  // Unarmed: the frame arrives, no bell.
  send(0, 100);
  EXPECT_FALSE(readable(0));
  // A frame waits: arming arms nothing.
  EXPECT_FALSE((*a)->ArmWake());
  while (sink.frames_from(1) < 1) (*a)->Poll(absl::ZeroDuration());
  // Armed with nothing waiting: a small and a streamed frame each ring.
  for (size_t len : {size_t{8}, 3 * kMiB}) {
    ASSERT_TRUE((*a)->ArmWake());
    EXPECT_FALSE(readable(0));
    send(keep.size(), len);
    ASSERT_TRUE(readable(10000)) << len;
    (*a)->DisarmWake();
    EXPECT_FALSE(readable(0));  // drained
    const int64_t want = static_cast<int64_t>(keep.size());
    const MonoTime deadline = MonoNow() + absl::Seconds(20);
    while ((sink.frames_from(1) < want || tr.done() < want) && MonoNow() < deadline) {
      (*a)->Poll(absl::ZeroDuration());
      (*b)->Poll(absl::ZeroDuration());
    }
    EXPECT_EQ(sink.frames_from(1), want);
  }
  EXPECT_EQ(tr.ok(), static_cast<int64_t>(keep.size()));
  // Disarmed: no bell.
  send(keep.size(), 100);
  EXPECT_FALSE(readable(0));
  EXPECT_TRUE(sink.errors().empty());
}

// ---------------------------------------------------------------------------
// Two processes

class ShmPairTest : public ::testing::TestWithParam<bool> {
 protected:
  bool cma() const { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Paths, ShmPairTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "Cma" : "RingCopy");
                         });

// A rank lowers its ptrace protection (PR_SET_PTRACER_ANY) only where
// peers read its memory by CMA: without HCOMM_SHM_CMA=1 a whole job leaves
// it as it was.
TEST_P(ShmPairTest, LowersPtraceProtectionOnlyForCma) {
  const std::string key = UniqueKey("ptrace");
  const bool cma = this->cma();
  Group g(2, [&](int rank, Link& link) {
    SetCmaEnv(cma);
    SHM_CHECK(!ShmTransport::LoweredPtraceProtection());  // a fresh child
    TestSink sink(2);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
    link.Barrier();  // both attached: the CMA choice is known
    SHM_CHECK(t->UsesCma(1 - rank) == cma);
    SHM_CHECK(ShmTransport::LoweredPtraceProtection() == cma);
    t.reset();
    SHM_CHECK(ShmTransport::LoweredPtraceProtection() == cma);
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

// Every size class, both ways at once, twice; then CloseWrite both ways.
TEST_P(ShmPairTest, AllSizesBothWaysThenClose) {
  const std::string key = UniqueKey("sizes");
  const bool cma = this->cma();
  Group g(2, [&](int rank, Link& link) {
    SetCmaEnv(cma);
    TestSink sink(2);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
    const int peer = 1 - rank;
    link.Barrier();  // both attached: the CMA choice is known
    SHM_CHECK(t->UsesCma(peer) == cma);
    Tracker tr;
    std::vector<Payload> keep;
    uint64_t seq = 0;
    for (int round = 0; round < 2; ++round) {
      for (size_t len : kSizes) {
        keep.push_back(MakePayload(rank, 0, seq, len));
        t->Send(peer, MakeMeta(rank, 0, seq, len), keep.back().bytes.get(), len, tr.Callback());
        ++seq;
      }
    }
    const int64_t n = static_cast<int64_t>(seq);
    SHM_CHECK(PollUntil(t.get(), [&] { return tr.done() == n && sink.frames_from(peer) == n; }));
    SHM_CHECK(tr.ok() == n);
    SHM_CHECK(t->PendingSends() == 0);
    SHM_CHECK(sink.errors().empty());
    // Close our side: the peer reads everything, then the close.
    t->CloseWrite(peer);
    Tracker late;
    t->Send(peer, MakeMeta(rank, 1, 0, 0), nullptr, 0, late.Callback());
    SHM_CHECK(late.failed() == 1);
    SHM_CHECK(PollUntil(t.get(), [&] { return sink.lost(peer); }));
    SHM_CHECK(CodeOf(sink.lost_status(peer)) == ErrorCode::kPeerFailure);
    SHM_CHECK(absl::StrContains(sink.lost_status(peer).message(), "closed its connection"));
    SHM_CHECK(sink.frames_before_loss(peer) == n);
    link.Barrier();
    t->Poll(absl::ZeroDuration());
    SHM_CHECK(sink.lost_reports(peer) == 1);
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

// TakeWhole: a frame the taker refuses -> -1 and Poll still delivers it; a
// frame it takes is consumed and never reaches the sink; nothing left -> 0.
TEST_P(ShmPairTest, TakeWholeConsumesOnlyWhatItAccepts) {
  const std::string key = UniqueKey("take");
  const bool cma = this->cma();
  Group g(2, [&](int rank, Link& link) {
    SetCmaEnv(cma);
    TestSink sink(2);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
    auto refuse = [](const FrameMeta&, const void*, uint64_t) { return false; };
    link.Barrier();
    if (rank == 0) {
      Tracker tr;
      Payload a = MakePayload(0, 1, 0, 100), b = MakePayload(0, 0, 0, 8);
      t->Send(1, MakeMeta(0, 1, 0, 100), a.bytes.get(), 100, tr.Callback());
      t->Send(1, MakeMeta(0, 0, 0, 8), b.bytes.get(), 8, tr.Callback());
      SHM_CHECK(PollUntil(t.get(), [&] { return tr.done() == 2; }));
      link.Barrier();
      link.Barrier();  // stay connected until rank 1 has looked
    } else {
      link.Barrier();  // both frames are in the ring
      SHM_CHECK(TakeWholeWith(*t, 0, 100, refuse) == -1);
      bool seen = false;
      auto take = [&](const FrameMeta& m, const void* p, uint64_t len) {
        const shm_test::TestMeta tm = shm_test::ReadMeta(m);
        seen = tm.stream == 1 && len == 100 &&
               shm_test::Matches(static_cast<const char*>(p), len, shm_test::SeedOf(0, 1, 0));
        return true;
      };
      SHM_CHECK(TakeWholeWith(*t, 0, 100, take) == 1);
      SHM_CHECK(seen);
      SHM_CHECK(PollUntil(t.get(), [&] { return sink.frames_from(0) == 1; }));
      SHM_CHECK(sink.frames_on(0, 1) == 0 && sink.frames_on(0, 0) == 1);
      SHM_CHECK(TakeWholeWith(*t, 0, 100, refuse) == 0);
      SHM_CHECK(sink.errors().empty());
      link.Barrier();
    }
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

// The receiver discards every other frame (OnFrame returns nullptr); the
// frames after each discarded one still arrive intact.
TEST_P(ShmPairTest, DiscardedPayloadsAreConsumed) {
  const std::string key = UniqueKey("discard");
  const bool cma = this->cma();
  Group g(2, [&](int rank, Link& link) {
    SetCmaEnv(cma);
    TestSink sink(2);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
    const std::vector<size_t> sizes = {0, 7, 64 * 1024, 64 * 1024 + 1, 3 * kMiB + 5, 200 * 1024};
    int64_t n = 0;
    if (rank == 0) {
      Tracker tr;
      std::vector<Payload> keep;
      for (int rep = 0; rep < 3; ++rep) {
        for (size_t len : sizes) {
          uint32_t flags = (n % 2 == 1) ? uint32_t{shm_test::kDiscard} : 0u;
          keep.push_back(MakePayload(0, 0, n, len));
          t->Send(1, MakeMeta(0, 0, n, len, flags), keep.back().bytes.get(), len, tr.Callback());
          ++n;
        }
      }
      SHM_CHECK(PollUntil(t.get(), [&] { return tr.done() == n; }));
      SHM_CHECK(tr.ok() == n);
    } else {
      n = 3 * static_cast<int64_t>(sizes.size());
      SHM_CHECK(PollUntil(t.get(), [&] { return sink.frames_from(0) == n; }));
      SHM_CHECK(sink.discarded_from(0) == n / 2);
      SHM_CHECK(sink.errors().empty());
    }
    link.Barrier();
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

// Far more than the ring holds is queued before the receiver polls at all:
// the frames wait in the sender's queue and drain in order.
TEST_P(ShmPairTest, RingFullQueuesAndDrainsInOrder) {
  const std::string key = UniqueKey("full");
  const bool cma = this->cma();
  Group g(2, [&](int rank, Link& link) {
    SetCmaEnv(cma);
    TestSink sink(2);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
    link.Barrier();
    const int64_t n = 20000;
    if (rank == 0) {
      Tracker tr;
      std::vector<Payload> keep;
      keep.reserve(n);
      for (int64_t i = 0; i < n; ++i) {
        size_t len = (i % 1000 == 999) ? 150 * 1024 : static_cast<size_t>((i * 37) % 3000);
        keep.push_back(MakePayload(0, 0, i, len));
        t->Send(1, MakeMeta(0, 0, i, len), keep.back().bytes.get(), len, tr.Callback());
      }
      SHM_CHECK(t->PendingSends() > 1000);  // the ring is full; the rest is queued
      SHM_CHECK(tr.done() < n);
      link.Barrier();  // only now does rank 1 start reading
      SHM_CHECK(PollUntil(t.get(), [&] { return tr.done() == n; }));
      SHM_CHECK(tr.ok() == n);
      SHM_CHECK(t->PendingSends() == 0);
    } else {
      link.Barrier();
      SHM_CHECK(PollUntil(t.get(), [&] { return sink.frames_from(0) == n; }));
      SHM_CHECK(sink.errors().empty());
    }
    link.Barrier();
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

// Several threads send and several poll, on both sides at once.
TEST_P(ShmPairTest, ConcurrentSendersAndPollers) {
  const std::string key = UniqueKey("threads");
  const bool cma = this->cma();
  Group g(2, [&](int rank, Link& link) {
    SetCmaEnv(cma);
    TestSink sink(2);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
    link.Barrier();
    const int peer = 1 - rank;
    constexpr int kSenders = 3;
    constexpr int kPerSender = 1500;
    const int64_t total = int64_t{kSenders} * kPerSender;
    Tracker tr;
    std::vector<std::vector<Payload>> keep(kSenders);
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int s = 0; s < kSenders; ++s) {
      threads.emplace_back([&, s] {
        for (int i = 0; i < kPerSender; ++i) {
          size_t len = (i % 100 == 42) ? 100 * 1024 + s : static_cast<size_t>((i * 131 + s) % 2000);
          keep[s].push_back(MakePayload(rank, s, i, len));
          t->Send(peer, MakeMeta(rank, s, i, len), keep[s].back().bytes.get(), len, tr.Callback());
          if (i % 64 == 0) t->Poll(absl::ZeroDuration());
        }
      });
    }
    for (int p = 0; p < 2; ++p) {
      threads.emplace_back([&] {
        while (!stop.load()) t->Poll(absl::Milliseconds(2));
      });
    }
    const MonoTime deadline = MonoNow() + absl::Seconds(20);
    while ((tr.done() < total || sink.frames_from(peer) < total) && MonoNow() < deadline) {
      t->Poll(absl::Milliseconds(2));
    }
    stop = true;
    for (auto& th : threads) th.join();
    SHM_CHECK(tr.ok() == total);
    SHM_CHECK(sink.frames_from(peer) == total);
    for (int s = 0; s < kSenders; ++s) SHM_CHECK(sink.frames_on(peer, s) == kPerSender);
    SHM_CHECK(sink.errors().empty());
    link.Barrier();
    return 0;
  });
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

// Cancel: a queued frame is withdrawn (its callback never runs); a frame
// partly in the ring or in flight by CMA is copied so that the caller may
// scribble over its buffer at once, and still arrives intact.
TEST_P(ShmPairTest, CancelWithdrawsOrCopies) {
  const std::string key = UniqueKey("cancel");
  const bool cma = this->cma();
  Group g(2, [&](int rank, Link& link) {
    SetCmaEnv(cma);
    TestSink sink(2);
    std::unique_ptr<ShmTransport> t;
    if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
    link.Barrier();
    if (rank == 0) {
      Tracker tr;
      // Big frame first: in flight by CMA, or partly written into the ring.
      Payload big = MakePayload(0, 0, 0, 3 * kMiB + 1);
      FrameHandle hb =
          t->Send(1, MakeMeta(0, 0, 0, big.len), big.bytes.get(), big.len, tr.Callback());
      SHM_CHECK(tr.done() == 0);
      SHM_CHECK(!t->Cancel(1, hb));
      memset(big.bytes.get(), 0xEE, big.len);  // the caller reuses its buffer
      // Fill the ring, then queue one more frame on stream 1 and withdraw it.
      std::vector<Payload> keep;
      uint64_t seq = 1;
      while (t->PendingSends() < 3) {
        keep.push_back(MakePayload(0, 0, seq, 4000));
        t->Send(1, MakeMeta(0, 0, seq, 4000), keep.back().bytes.get(), 4000, tr.Callback());
        ++seq;
      }
      Payload x = MakePayload(0, 1, 0, 100);
      std::atomic<int> x_calls{0};
      FrameHandle hx =
          t->Send(1, MakeMeta(0, 1, 0, 100), x.bytes.get(), 100, [&](absl::Status) { x_calls++; });
      SHM_CHECK(t->Cancel(1, hx));
      SHM_CHECK(!t->Cancel(1, hx));  // gone already
      keep.push_back(MakePayload(0, 0, seq, 10));
      t->Send(1, MakeMeta(0, 0, seq, 10), keep.back().bytes.get(), 10, tr.Callback());
      ++seq;
      link.Tell(std::to_string(seq));
      SHM_CHECK(PollUntil(t.get(), [&] { return tr.done() == static_cast<int64_t>(seq); }));
      SHM_CHECK(tr.ok() == static_cast<int64_t>(seq));
      SHM_CHECK(x_calls.load() == 0);
      SHM_CHECK(t->PendingSends() == 0);
    } else {
      int64_t n = std::stoll(link.Hear());
      SHM_CHECK(PollUntil(t.get(), [&] { return sink.frames_from(0) == n; }));
      SHM_CHECK(sink.frames_on(0, 1) == 0);
      SHM_CHECK(sink.errors().empty());
    }
    link.Barrier();
    return 0;
  });
  ASSERT_TRUE(g.ServeAllGather({0, 1}));  // addresses
  ASSERT_TRUE(g.ServeAllGather({0, 1}));  // attached
  ASSERT_TRUE(g.ServeAllGather({0, 1}));  // set up
  g.Tell(1, g.Hear(0));                   // how many frames rank 0 sent
  EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
  EXPECT_TRUE(Leftovers(key).empty());
}

}  // namespace
}  // namespace hcomm
