// Point-to-point engine over TCP, ranks as threads of this process.
#include "core/p2p/engine.h"
#include "core/p2p/engine_testing.h"

#include <sched.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/base/status.h"
#include "gtest/gtest.h"
#include "testing/multirank.h"

namespace hcomm {
namespace {

using testing::MustInit;
using testing::RunRanks;
using testing::WaitFor;

class FabricTest : public ::testing::TestWithParam<testing::TransportMode> {
 protected:
  void SetUp() override { testing::SetTransportMode(GetParam()); }
  void TearDown() override { testing::SetTransportMode(testing::TransportMode::kDefault); }
};

std::vector<char> Pattern(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131 + seed * 7) & 0xff);
  return v;
}

TEST_P(FabricTest, SingleRankNeedsNoStore) {
  Options o;
  o.rank = 0;
  o.world_size = 1;
  auto c = MustInit(o);
  ASSERT_NE(c, nullptr);
  int v = 5, got = 0;
  ASSERT_OK(c->Send(0, &v, sizeof v, 4, 0, 1, c->timeout()));
  ASSERT_OK(c->Recv(0, &got, sizeof got, 4, 0, 1, c->timeout()));
  EXPECT_EQ(got, 5);
}

TEST_P(FabricTest, PingPongSmallAndLarge) {
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    for (size_t n : {size_t{0}, size_t{1}, size_t{8}, size_t{65536}, size_t{65537},
                     size_t{3} << 20}) {
      std::vector<char> msg = Pattern(n, static_cast<int>(n));
      std::vector<char> buf(n + 1, 0);
      if (rank == 0) {
        ASSERT_OK(c->Send(0, msg.data(), n, 1, 1, 5, c->timeout()));
        std::shared_ptr<Request> r;
        ASSERT_OK(c->Recv(0, buf.data(), n, 1, 1, 6, c->timeout(), &r));
        EXPECT_EQ(r->out_bytes, n);
        // n == 0: msg.data() may be NULL, which memcmp must not get.
        if (n > 0) {
          EXPECT_EQ(0, memcmp(buf.data(), msg.data(), n)) << n;
        }
      } else {
        std::shared_ptr<Request> r;
        absl::Status s = c->Recv(0, buf.data(), n + 1, 1, 0, 5, c->timeout(), &r);
        ASSERT_TRUE(s.ok()) << s;
        EXPECT_EQ(r->out_bytes, n);
        EXPECT_EQ(r->out_source, 0);
        EXPECT_EQ(r->out_tag, 5);
        ASSERT_OK(c->Send(0, buf.data(), n, 1, 0, 6, c->timeout()));
      }
    }
    EXPECT_TRUE(c->Destroy().ok());
  });
}

TEST_P(FabricTest, TagsReceivedOutOfOrder) {
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    const size_t sizes[] = {16, 200000, 4};  // eager, rendezvous, eager
    if (rank == 0) {
      // Nonblocking: a blocking rendezvous send of tag 2 would wait for a
      // receive that is only posted after tag 3 arrived.
      std::vector<std::vector<char>> msgs;
      std::vector<std::shared_ptr<Request>> reqs;
      for (int tag = 1; tag <= 3; ++tag) msgs.push_back(Pattern(sizes[tag - 1], tag));
      for (int tag = 1; tag <= 3; ++tag) {
        auto r = c->Isend(0, msgs[tag - 1].data(), msgs[tag - 1].size(), 1, 1, tag);
        ASSERT_TRUE(r.ok());
        reqs.push_back(*r);
      }
      for (auto& r : reqs) ASSERT_OK(c->Wait(r.get(), c->Deadline()));
    } else {
      for (int tag : {3, 1, 2}) {
        std::vector<char> buf(sizes[tag - 1]);
        ASSERT_OK(c->Recv(0, buf.data(), buf.size(), 1, 0, tag, c->timeout()));
        EXPECT_EQ(buf, Pattern(sizes[tag - 1], tag));
      }
    }
  });
}

TEST_P(FabricTest, NonOvertakingAcrossEagerAndRendezvous) {
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    const int kMsgs = 40;
    if (rank == 0) {
      std::vector<std::vector<char>> bufs;
      std::vector<std::shared_ptr<Request>> reqs;
      for (int i = 0; i < kMsgs; ++i) {
        bufs.push_back(std::vector<char>(i % 2 ? 100000 : 8, static_cast<char>(i)));
      }
      for (int i = 0; i < kMsgs; ++i) {
        auto r = c->Isend(0, bufs[i].data(), bufs[i].size(), 1, 1, 9);
        ASSERT_TRUE(r.ok());
        reqs.push_back(*r);
      }
      for (auto& r : reqs) ASSERT_OK(c->Wait(r.get(), c->Deadline()));
    } else {
      std::vector<char> buf(100000);
      for (int i = 0; i < kMsgs; ++i) {
        std::shared_ptr<Request> r;
        ASSERT_OK(c->Recv(0, buf.data(), buf.size(), 1, kAnySource, kAnyTag, c->timeout(), &r));
        ASSERT_EQ(r->out_bytes, i % 2 ? 100000u : 8u);
        EXPECT_EQ(buf[0], static_cast<char>(i)) << "message " << i << " overtaken";
      }
    }
  });
}

// Eager payloads that arrive before their receives are staged in pooled
// blocks (PayloadPool), which later rounds reuse: each arrives whole, with
// none of an earlier round's bytes.
TEST_P(FabricTest, UnexpectedEagerPayloadsArriveWhole) {
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    const size_t sizes[] = {4096, 5000, 16384, 40000, 60000, 100};
    const int kMsgs = 48, kDone = 1000;
    for (int round = 0; round < 3; ++round) {
      auto size_of = [&](int i) { return sizes[(i + round) % 6]; };
      if (rank == 0) {
        std::vector<std::vector<char>> msgs;
        std::vector<std::shared_ptr<Request>> reqs;
        for (int i = 0; i < kMsgs; ++i) msgs.push_back(Pattern(size_of(i), i + 100 * round));
        for (int i = 0; i < kMsgs; ++i) {
          auto r = c->Isend(0, msgs[i].data(), msgs[i].size(), 1, 1, i);
          ASSERT_TRUE(r.ok()) << r.status();
          reqs.push_back(*r);
        }
        // Sent after them on the same connection: once it is received,
        // the others have arrived unexpected.
        ASSERT_OK(c->Send(0, nullptr, 0, 1, 1, kDone, c->timeout()));
        for (auto& r : reqs) ASSERT_OK(c->Wait(r.get(), c->Deadline()));
      } else {
        ASSERT_OK(c->Recv(0, nullptr, 0, 1, 0, kDone, c->timeout()));
        for (int i = kMsgs - 1; i >= 0; --i) {
          std::vector<char> buf(size_of(i));
          std::shared_ptr<Request> r;
          ASSERT_OK(c->Recv(0, buf.data(), buf.size(), 1, 0, i, c->timeout(), &r));
          EXPECT_EQ(r->out_bytes, buf.size()) << i;
          EXPECT_EQ(buf, Pattern(size_of(i), i + 100 * round)) << "round " << round << " tag " << i;
        }
      }
    }
    EXPECT_TRUE(c->Destroy().ok());
  });
}

TEST_P(FabricTest, AnySourceAnyTagFromEveryRank) {
  RunRanks(4, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    if (rank == 0) {
      std::vector<bool> seen(4, false);
      for (int i = 0; i < 3; ++i) {
        int v = -1;
        std::shared_ptr<Request> r;
        ASSERT_OK(c->Recv(0, &v, sizeof v, 4, kAnySource, kAnyTag, c->timeout(), &r));
        EXPECT_EQ(v, r->out_source * 10);
        EXPECT_EQ(r->out_tag, 100 + r->out_source);
        seen[r->out_source] = true;
      }
      EXPECT_TRUE(seen[1] && seen[2] && seen[3]);
    } else {
      int v = rank * 10;
      ASSERT_OK(c->Send(0, &v, sizeof v, 4, 0, 100 + rank, c->timeout()));
    }
  });
}

TEST_P(FabricTest, TruncationIsMismatchAndWritesNothingPastTheBuffer) {
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    for (size_t n : {size_t{100}, size_t{300000}}) {
      if (rank == 0) {
        std::vector<char> m = Pattern(n, 3);
        absl::Status s = c->Send(0, m.data(), n, 1, 1, 7, c->timeout());
        EXPECT_TRUE(s.ok()) << s;  // the receiver is the one told
        ASSERT_OK(c->Send(0, m.data(), 4, 1, 1, 8, c->timeout()));
      } else {
        std::vector<char> buf(n, 'G');
        std::shared_ptr<Request> r;
        absl::Status s = c->Recv(0, buf.data(), n / 2, 1, kAnySource, kAnyTag, c->timeout(), &r);
        EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << s;
        EXPECT_NE(s.message().find("exceeds the receive buffer"), absl::string_view::npos) << s;
        // Who sent it and under which tag; nothing of it arrived.
        ASSERT_NE(r, nullptr);
        EXPECT_EQ(r->out_source, 0);
        EXPECT_EQ(r->out_tag, 7);
        EXPECT_EQ(r->out_bytes, 0u) << "n " << n;
        for (size_t i = n / 2; i < n; ++i) ASSERT_EQ(buf[i], 'G') << "byte " << i << " written";
        char small[4];
        ASSERT_OK(c->Recv(0, small, 4, 1, 0, 8, c->timeout()));  // still usable
      }
    }
  });
}

TEST_P(FabricTest, SendToSelf) {
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    for (size_t n : {size_t{4}, size_t{1} << 20}) {
      std::vector<char> m = Pattern(n, rank), buf(n);
      auto s = c->Isend(0, m.data(), n, 1, rank, 3);
      ASSERT_TRUE(s.ok());
      ASSERT_OK(c->Recv(0, buf.data(), n, 1, rank, 3, c->timeout()));
      ASSERT_OK(c->Wait(s->get(), c->Deadline()));
      EXPECT_EQ(buf, m);
    }
  });
}

TEST_P(FabricTest, RecvTimeoutNamesPeerTagAndBytesAndLeavesCommUsable) {
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->SetOption("timeout_ms", "300").ok());
    if (rank == 1) {
      char buf[64];
      MonoTime t0 = MonoNow();
      absl::Status s = c->Recv(0, buf, sizeof buf, 1, 0, 4242, c->timeout());
      absl::Duration took = MonoNow() - t0;
      EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
      EXPECT_NE(s.message().find("tag 4242"), absl::string_view::npos) << s;
      EXPECT_NE(s.message().find("rank 0"), absl::string_view::npos) << s;
      EXPECT_NE(s.message().find("64 bytes"), absl::string_view::npos) << s;
      EXPECT_GE(took, absl::Milliseconds(250));
      ASSERT_TRUE(c->SetOption("timeout_ms", "30000").ok());
      int go = 1;
      ASSERT_OK(c->Send(0, &go, sizeof go, 4, 0, 1, c->timeout()));
      // A message sent with the timed-out tag now lands in a new receive.
      ASSERT_OK(c->Recv(0, buf, sizeof buf, 1, 0, 4242, c->timeout()));
      EXPECT_EQ(buf[0], 'x');
    } else {
      ASSERT_TRUE(c->SetOption("timeout_ms", "30000").ok());
      int go = 0;
      ASSERT_OK(c->Recv(0, &go, sizeof go, 4, 1, 1, c->timeout()));
      char x = 'x';
      ASSERT_OK(c->Send(0, &x, 1, 1, 1, 4242, c->timeout()));
    }
  });
}

TEST_P(FabricTest, RendezvousSendTimeoutIsWithdrawn) {
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    if (rank == 0) {
      ASSERT_TRUE(c->SetOption("timeout_ms", "300").ok());
      std::vector<char> big(1 << 20, 'b');
      absl::Status s = c->Send(0, big.data(), big.size(), 1, 1, 11, c->timeout());
      EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
      EXPECT_NE(s.message().find("has not posted a matching receive"), absl::string_view::npos)
          << s;
      ASSERT_TRUE(c->SetOption("timeout_ms", "30000").ok());
      int done = 1;
      ASSERT_OK(c->Send(0, &done, sizeof done, 4, 1, 12, c->timeout()));
      ASSERT_OK(c->Recv(0, &done, sizeof done, 4, 1, 13, c->timeout()));  // stay until rank 1 checked
    } else {
      int done = 0;
      ASSERT_OK(c->Recv(0, &done, sizeof done, 4, 0, 12, c->timeout()));
      // The withdrawn message must not be delivered.
      std::vector<char> buf(1 << 20);
      ASSERT_TRUE(c->SetOption("timeout_ms", "200").ok());
      absl::Status s = c->Recv(0, buf.data(), buf.size(), 1, 0, 11, c->timeout());
      EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
      ASSERT_TRUE(c->SetOption("timeout_ms", "30000").ok());
      ASSERT_OK(c->Send(0, &done, sizeof done, 4, 0, 13, c->timeout()));
    }
  });
}

// Pins the calling thread (and the threads it starts) to its first allowed
// CPU while in scope, so that ranks run as its threads share one CPU.
class OneCpu {
 public:
  OneCpu() {
    if (sched_getaffinity(0, sizeof saved_, &saved_) != 0) return;
    int first = 0;
    while (!CPU_ISSET(first, &saved_)) ++first;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    pinned_ = sched_setaffinity(0, sizeof one, &one) == 0;
  }
  ~OneCpu() {
    if (pinned_) sched_setaffinity(0, sizeof saved_, &saved_);
  }
  bool pinned() const { return pinned_; }

 private:
  cpu_set_t saved_;
  bool pinned_ = false;
};

// Each transport says how large an eager message may be (TCP: a frame that
// fits one loopback segment; where ranks share CPUs, every transport the
// protocol's 64 KiB); one byte more goes by rendezvous, whose send waits
// for the receiver.
void ExpectEagerLimit(bool cpus_shared) {
  RunRanks(2, [cpus_shared](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    if (cpus_shared) {
      EXPECT_TRUE(c->oversubscribed());
    }
    const bool tcp = strcmp(c->TransportTo(1 - rank), "tcp") == 0;
    const size_t limit = tcp && !c->oversubscribed() ? 64 * 1024 - 128 : Engine::kEagerBytes;
    std::vector<char> eager = Pattern(limit, 1), over = Pattern(limit + 1, 2);
    if (rank == 0) {
      ASSERT_TRUE(c->SetOption("timeout_ms", "300").ok());
      ASSERT_OK(c->Send(0, eager.data(), eager.size(), 1, 1, 21, c->timeout()));
      absl::Status s = c->Send(0, over.data(), over.size(), 1, 1, 22, c->timeout());
      EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
      EXPECT_NE(s.message().find("has not posted a matching receive"), absl::string_view::npos)
          << s;
      ASSERT_TRUE(c->SetOption("timeout_ms", "30000").ok());
      int go = 1;
      ASSERT_OK(c->Send(0, &go, sizeof go, 4, 1, 23, c->timeout()));
      ASSERT_OK(c->Send(0, over.data(), over.size(), 1, 1, 24, c->timeout()));
    } else {
      int go = 0;
      ASSERT_OK(c->Recv(0, &go, sizeof go, 4, 0, 23, c->timeout()));
      std::vector<char> buf(limit + 1);
      std::shared_ptr<Request> r;
      ASSERT_OK(c->Recv(0, buf.data(), buf.size(), 1, 0, 21, c->timeout(), &r));
      ASSERT_EQ(r->out_bytes, limit);
      buf.resize(limit);
      EXPECT_EQ(buf, eager);
      buf.resize(limit + 1);
      ASSERT_OK(c->Recv(0, buf.data(), buf.size(), 1, 0, 24, c->timeout()));
      EXPECT_EQ(buf, over);
    }
  });
}

TEST_P(FabricTest, EagerLimitFollowsTheTransport) { ExpectEagerLimit(/*cpus_shared=*/false); }

// Both ranks on one CPU: a rendezvous would wait for the peer's time slice,
// so every transport sends up to the protocol's 64 KiB eagerly.
TEST_P(FabricTest, EagerLimitIsTheProtocolsWhereRanksShareACpu) {
  if (GetParam() == testing::TransportMode::kMixed) {
    GTEST_SKIP() << "the two ranks are on two hosts: they share no CPU";
  }
  OneCpu one_cpu;  // the rank threads inherit it
  ASSERT_TRUE(one_cpu.pinned());
  ExpectEagerLimit(/*cpus_shared=*/true);
}

TEST_P(FabricTest, AbortFromAnotherThreadFailsPendingRecv) {
  // Rank 0 aborts only once rank 1's init is over too: an abort during
  // rank 1's init (its last store reads) fails that init instead, which is
  // not what this test is about.
  std::atomic<int> inited{0};
  RunRanks(2, [&inited](int rank, const Options& o) {
    auto c = MustInit(o);
    inited.fetch_add(1);
    ASSERT_NE(c, nullptr);
    const MonoTime until = MonoNow() + absl::Seconds(30);
    while (inited.load() < 2 && MonoNow() < until) absl::SleepFor(absl::Milliseconds(1));
    if (rank == 0) {
      char buf[8];
      auto r = c->Irecv(0, buf, sizeof buf, 1, 1, 1);
      ASSERT_TRUE(r.ok());
      std::thread aborter([&] { c->Abort(); });
      MonoTime t0 = MonoNow();
      absl::Status s = c->Wait(r->get(), c->Deadline());
      aborter.join();
      EXPECT_EQ(CodeOf(s), ErrorCode::kAborted) << s;
      EXPECT_LT(MonoNow() - t0, absl::Seconds(5));
      // Later calls fail at once too.
      EXPECT_EQ(CodeOf(c->Send(0, buf, 1, 1, 1, 1, c->timeout())), ErrorCode::kAborted);
    } else {
      // Rank 0's abort closes the connection: our receive fails.
      char buf[8];
      absl::Status s = c->Recv(0, buf, sizeof buf, 1, 0, 1, c->timeout());
      EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;
    }
  });
}

// A request outlives its communicator's destroy: a thread waiting on it
// while another destroys the engine gets ABORTED (it polled transports that
// Destroy freed under it, over shared memory a crash), and can wait again.
TEST_P(FabricTest, DestroyWhileAnotherThreadWaitsOnARequest) {
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    if (rank == 0) {
      char buf[8];
      auto r = c->Irecv(0, buf, sizeof buf, 1, 1, 1);  // rank 1 sends nothing
      ASSERT_TRUE(r.ok());
      absl::Status waited;
      std::thread waiter([&] { waited = c->Wait(r->get(), c->Deadline()); });
      absl::SleepFor(absl::Milliseconds(300));  // it is waiting (and polling)
      const MonoTime t0 = MonoNow();
      EXPECT_TRUE(c->Destroy().ok());
      waiter.join();
      EXPECT_EQ(CodeOf(waited), ErrorCode::kAborted) << waited;
      EXPECT_LT(MonoNow() - t0, absl::Seconds(5));
      EXPECT_EQ(CodeOf(c->Wait(r->get(), c->Deadline())), ErrorCode::kAborted);
      EXPECT_TRUE(c->Test(r->get()));
      c->Release(*r);
    } else {
      // Rank 0's destroy says goodbye: nothing fails here.
      absl::SleepFor(absl::Milliseconds(600));
      EXPECT_TRUE(c->Destroy().ok());
    }
  });
}

// Destroy reports what it could not deliver: a rank this one sent a message
// to that failed before confirming it had read it (rank 0 aborts without a
// goodbye: its connections are torn down), naming it; a rank that sent it
// nothing destroys cleanly. (Before, both returned OK.)
TEST_P(FabricTest, DestroySaysWhichFailedRankMayHaveLostItsMessages) {
  std::atomic<int> sent{0}, ready{0};
  std::atomic<bool> aborted{false};
  RunRanks(3, [&](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    ready.fetch_add(1);
    if (rank == 0) {
      // Every rank's init has ended (they read the store rank 0 serves).
      ASSERT_TRUE(WaitFor([&] { return ready.load() == 3 && sent.load() == 1; },
                          MonoNow() + absl::Seconds(10)));
      c->Abort();  // as if it died: no goodbye
      aborted.store(true);
    } else {
      if (rank == 1) {
        int v = 5;
        ASSERT_OK(c->Send(0, &v, sizeof v, 4, /*peer=*/0, /*tag=*/1, c->timeout()));
        sent.store(1);
      }
      ASSERT_TRUE(WaitFor([&] { return aborted.load() && !c->PeerHealth(0).ok(); },
                          MonoNow() + absl::Seconds(10)));
      absl::Status s = c->Destroy();
      if (rank == 1) {
        EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;
        EXPECT_TRUE(absl::StrContains(s.message(), "rank 0 failed before confirming") &&
                    absl::StrContains(s.message(), "may be lost"))
            << s;
      } else {
        EXPECT_TRUE(s.ok()) << s;  // it sent rank 0 nothing
      }
    }
  });
}

// Destroy waits up to the timeout for this rank's sends; one still not
// delivered then (its receive never posted) makes it return TIMEOUT naming
// the send, not OK.
TEST_P(FabricTest, DestroySaysWhichSendsItCouldNotDeliver) {
  std::atomic<bool> destroyed{false};
  RunRanks(2, [&](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    if (rank == 1) {
      std::vector<char> big(256 * 1024, 'b');  // by rendezvous: waits for a receive
      auto r = c->Isend(0, big.data(), big.size(), 1, /*peer=*/0, /*tag=*/4);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_OK(c->SetOption("timeout_ms", "400"));
      absl::Status s = c->Destroy();
      EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "1 send not delivered") &&
                  absl::StrContains(s.message(), "rank 0"))
          << s;
      EXPECT_EQ(CodeOf((*r)->status), ErrorCode::kAborted) << (*r)->status;
      destroyed.store(true);
    } else {
      ASSERT_TRUE(WaitFor([&] { return destroyed.load(); }, MonoNow() + absl::Seconds(10)));
      c->Destroy().IgnoreError();
    }
  });
}

// A rank that leaves after another failed (as a survivor does whose
// collective failed) is named with the failed rank, which is the cause:
// rank 0 dies, rank 1 destroys its communicator, and rank 2's receive from
// rank 1 fails naming both. (Before, it named rank 1 alone.)
TEST_P(FabricTest, ALeavingRanksFailureNamesTheRanksThatFailedBefore) {
  std::atomic<bool> aborted{false}, posted{false};
  std::atomic<int> ready{0};
  RunRanks(3, [&](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    ready.fetch_add(1);
    if (rank == 0) {
      // Every rank's init has ended (they read the store rank 0 serves).
      ASSERT_TRUE(WaitFor([&] { return ready.load() == 3; }, MonoNow() + absl::Seconds(10)));
      c->Abort();  // as if it died: no goodbye
      aborted.store(true);
      return;
    }
    ASSERT_TRUE(WaitFor([&] { return aborted.load() && !c->PeerHealth(0).ok(); },
                        MonoNow() + absl::Seconds(10)));
    if (rank == 1) {
      ASSERT_TRUE(WaitFor([&] { return posted.load(); }, MonoNow() + absl::Seconds(10)));
      c->Destroy().IgnoreError();
    } else {
      char buf[8];
      auto r = c->Irecv(0, buf, sizeof buf, 1, /*peer=*/1, /*tag=*/9);
      ASSERT_TRUE(r.ok()) << r.status();
      posted.store(true);
      absl::Status s = c->Wait(r->get(), MonoNow() + absl::Seconds(20));
      EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "rank 1 destroyed its communicator") &&
                  absl::StrContains(s.message(), "(after rank 0 had failed)"))
          << s;
      c->Destroy().IgnoreError();
    }
  });
}

TEST_P(FabricTest, PeerThatLeavesFailsPendingRecvButDeliversWhatItSent) {
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    if (rank == 1) {
      int v = 77;
      ASSERT_OK(c->Send(0, &v, sizeof v, 4, 0, 1, c->timeout()));
      EXPECT_TRUE(c->Destroy().ok());
    } else {
      int v = 0;
      char buf[8];
      absl::Status s = c->Recv(0, buf, sizeof buf, 1, 1, 2, c->timeout());  // never sent
      EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;
      EXPECT_NE(s.message().find("rank 1"), absl::string_view::npos) << s;
      // What rank 1 sent before leaving is still delivered.
      ASSERT_OK(c->Recv(0, &v, sizeof v, 4, 1, 1, c->timeout()));
      EXPECT_EQ(v, 77);
      EXPECT_EQ(CodeOf(c->Send(0, &v, sizeof v, 4, 1, 1, c->timeout())), ErrorCode::kPeerFailure);
      // With every other rank gone, an any-source receive fails at once
      // instead of waiting out its timeout.
      const MonoTime start = MonoNow();
      absl::Status any = c->Recv(0, buf, sizeof buf, 1, kAnySource, 3, c->timeout());
      EXPECT_EQ(CodeOf(any), ErrorCode::kPeerFailure) << any;
      EXPECT_NE(any.message().find("every other rank has failed or left"), absl::string_view::npos)
          << any;
      EXPECT_LT(MonoNow() - start, absl::Seconds(10));
    }
  });
}

TEST_P(FabricTest, ManyThreadsShareOneFabric) {
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) {
      ts.emplace_back([&, t] {
        for (int i = 0; i < 50; ++i) {
          size_t n = (i % 5 == 0) ? 70000 : 16;
          std::vector<char> m(n, static_cast<char>(t * 50 + i)), buf(n);
          if (rank == 0) {
            ASSERT_OK(c->Send(0, m.data(), n, 1, 1, t, c->timeout()));
            ASSERT_OK(c->Recv(0, buf.data(), n, 1, 1, t, c->timeout()));
          } else {
            ASSERT_OK(c->Recv(0, buf.data(), n, 1, 0, t, c->timeout()));
            ASSERT_OK(c->Send(0, buf.data(), n, 1, 0, t, c->timeout()));
          }
          if (rank == 0) {
            ASSERT_EQ(buf, m);
          }
        }
      });
    }
    for (auto& th : ts) th.join();
  });
}

TEST_P(FabricTest, BlockingReceivesKeepOrderWhileAnotherThreadPolls) {
  // Rank 1's main thread receives with blocking calls (which take frames
  // straight off the connection when they can) while a second thread waits
  // on the same peer for a tag that comes last, polling all the while and
  // queueing what it finds. No message may overtake another of its tag.
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    const int kMsgs = 400;
    if (rank == 0) {
      for (int i = 0; i < kMsgs; ++i) {
        int v = i;
        ASSERT_OK(c->Send(0, &v, sizeof v, 4, 1, 1 + i % 2, c->timeout()));
      }
      int done = -1;
      ASSERT_OK(c->Send(0, &done, sizeof done, 4, 1, 9, c->timeout()));
    } else {
      std::thread poller([&] {
        int v = 0;
        ASSERT_OK(c->Recv(0, &v, sizeof v, 4, 0, 9, c->timeout()));
        EXPECT_EQ(v, -1);
      });
      int last[3] = {-1, -1, -1};
      for (int i = 0; i < kMsgs; ++i) {
        int v = -2;
        std::shared_ptr<Request> r;
        ASSERT_OK(c->Recv(0, &v, sizeof v, 4, 0, i % 3 == 0 ? kAnyTag : 1 + i % 2, c->timeout(),
                          i % 5 == 0 ? &r : nullptr));
        const int tag = 1 + v % 2;
        EXPECT_GT(v, last[tag]) << "message " << v << " of tag " << tag << " overtook " << last[tag];
        last[tag] = v;
      }
      poller.join();
    }
  });
}

TEST_P(FabricTest, UnknownTcpCongestionControlIsNamed) {
  if (GetParam() == testing::TransportMode::kShm || GetParam() == testing::TransportMode::kUds) {
    GTEST_SKIP() << "no TCP connection is made";
  }
  setenv("HCOMM_TCP_CONGESTION", "no-such-control", 1);
  std::atomic<int> named{0};
  RunRanks(2, [&](int rank, const Options& o) {
    auto c = Engine::Init(o);
    ASSERT_FALSE(c.ok());
    // A rank whose connection was refused names the setting; its peer may
    // instead see the connection go away.
    if (CodeOf(c.status()) == ErrorCode::kInvalidArgument) {
      EXPECT_NE(c.status().message().find("HCOMM_TCP_CONGESTION=no-such-control"),
                absl::string_view::npos)
          << c.status();
      ++named;
    }
  }, 3000);
  unsetenv("HCOMM_TCP_CONGESTION");
  EXPECT_GE(named.load(), 1);
  // `system` keeps the host's default and works.
  setenv("HCOMM_TCP_CONGESTION", "system", 1);
  RunRanks(2, [](int rank, const Options& o) {
    auto c = MustInit(o);
    ASSERT_NE(c, nullptr);
    int v = rank;
    if (rank == 0) {
      ASSERT_OK(c->Send(0, &v, sizeof v, 4, 1, 3, c->timeout()));
    } else {
      ASSERT_OK(c->Recv(0, &v, sizeof v, 4, 0, 3, c->timeout()));
      EXPECT_EQ(v, 0);
    }
  });
  unsetenv("HCOMM_TCP_CONGESTION");
}

// The rank with the wrong token dials first (it retries until rank 0's
// store is up), so that it reaches the store within rank 0's 1.5 s however
// late this machine starts a thread.
TEST_P(FabricTest, WrongTokenIsRefused) {
  int port = testing::FreePort();
  absl::Notification dialing;
  std::thread good([&] {
    dialing.WaitForNotification();
    auto c = Engine::Init(testing::RankOptions(0, 2, port, 1500, "right"));
    EXPECT_EQ(CodeOf(c.status()), ErrorCode::kUnavailable) << c.status();
    if (!c.ok()) {
      EXPECT_NE(c.status().message().find("1 of 2 ranks joined"), absl::string_view::npos)
          << c.status();
      EXPECT_NE(c.status().message().find("missing: 1"), absl::string_view::npos)
          << c.status();
    }
  });
  dialing.Notify();
  auto bad = Engine::Init(testing::RankOptions(1, 2, port, 5000, "wrong"));
  EXPECT_EQ(CodeOf(bad.status()), ErrorCode::kPermissionDenied) << bad.status();
  good.join();
}

// A rank whose init fails after it joined the store (here: it allows only
// shared memory and sits on a host of its own) makes the others fail at
// once, naming it and its reason, instead of waiting out their 30 s for a
// connection it will never make: whether they wait to accept it (it is the
// highest rank), to dial it, or it is rank 0, which serves the store. Each
// other rank either reads its reason in the store, or finds from its card
// that it cannot reach it, and says so.
TEST(FabricInitTest, AnotherRanksFailedInitEndsEveryRanksInitAtOnce) {
  for (int failing : {2, 1, 0}) {
    std::vector<absl::Status> got(3);
    const MonoTime start = MonoNow();
    RunRanks(3, [&](int rank, const Options& base) {
      Options o = base;
      if (rank == failing) {
        o.transports = {"shm"};
        o.host_id = "elsewhere";
      }
      got[rank] = Engine::Init(o).status();
    }, 30000);
    const absl::Duration took = MonoNow() - start;
    EXPECT_LT(took, absl::Seconds(15)) << "failing rank " << failing;
    for (int r = 0; r < 3; ++r) {
      if (r == failing) {
        EXPECT_EQ(CodeOf(got[r]), ErrorCode::kNoDevice) << got[r];
        continue;
      }
      const bool told = absl::StrContains(
          got[r].message(), absl::StrCat("another rank's init failed: rank ", failing,
                                         " of 3: transports=shm cannot reach"));
      const bool found =
          absl::StrContains(got[r].message(), absl::StrCat("cannot reach ranks ", failing, " ")) &&
          absl::StrContains(got[r].message(),
                            absl::StrCat("tcp is not in rank ", failing, "'s transports"));
      EXPECT_TRUE((CodeOf(got[r]) == ErrorCode::kPeerFailure && told) ||
                  (CodeOf(got[r]) == ErrorCode::kNoDevice && found))
          << "rank " << r << ": " << got[r];
    }
  }
}

// A rank of this host that shared memory cannot reach because a transports
// list leaves shm out is told so, not that the rank "cannot use" it.
TEST(FabricInitTest, ShmLeftOutOfTransportsIsNamedAsSuch) {
  std::vector<absl::Status> got(2);
  RunRanks(2, [&](int rank, const Options& base) {
    Options o = base;
    o.transports = {rank == 0 ? "tcp" : "shm"};
    got[rank] = Engine::Init(o).status();
  }, 30000);
  EXPECT_EQ(CodeOf(got[1]), ErrorCode::kNoDevice) << got[1];
  EXPECT_NE(got[1].message().find("shm is not in rank 0's transports"), absl::string_view::npos)
      << got[1];
  // And the other way round, seen from the rank that left shm out.
  EXPECT_EQ(CodeOf(got[0]), ErrorCode::kNoDevice) << got[0];
  EXPECT_TRUE(absl::StrContains(got[0].message(), "tcp is not in rank 1's transports")) << got[0];
  EXPECT_TRUE(absl::StrContains(got[0].message(), "shm is not in this rank's transports"))
      << got[0];
}

// A transport that no plugin or build provides is named at once, with the
// ones there are.
TEST(FabricInitTest, AnUnknownTransportIsNamed) {
  for (int size : {1, 2}) {
    std::vector<absl::Status> got(size);
    RunRanks(size, [&](int rank, const Options& base) {
      Options o = base;
      o.transports = {"tcp", "ibverbs"};
      got[rank] = Engine::Init(o).status();
    }, 30000);
    for (const absl::Status& s : got) {
      EXPECT_EQ(CodeOf(s), ErrorCode::kNoDevice) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "transports=tcp,ibverbs: no transport is named "
                                                 "'ibverbs' (there are shm (built in), tcp (built "
                                                 "in)"))
          << s;
    }
  }
}

// A plugin's transport that reaches no peer is named as such: the uds
// example joins only ranks of one host, so ranks of two hosts allowed
// nothing else cannot start, and say why, transport by transport, instead
// of falling back to another transport.
TEST(FabricInitTest, APluginThatReachesNoPeerIsNoDeviceNotAFallback) {
  std::vector<absl::Status> got(2);
  const MonoTime start = MonoNow();
  RunRanks(2, [&](int rank, const Options& base) {
    Options o = base;
    o.plugins = {testing::UdsPluginPath()};
    o.transports = {"uds"};
    o.host_id = absl::StrCat("host", rank);
    got[rank] = Engine::Init(o).status();
  }, 30000);
  EXPECT_LT(MonoNow() - start, absl::Seconds(15));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(CodeOf(got[r]), ErrorCode::kNoDevice) << got[r];
    EXPECT_TRUE(absl::StrContains(
        got[r].message(), absl::StrCat("transports=uds cannot reach ranks ", 1 - r, " (host host",
                                       1 - r, ", we are on host host", r, "): uds does not "
                                       "reach rank ", 1 - r, " on host host", 1 - r)))
        << got[r];
  }
}

// Ranks started with different world sizes fail at once, saying so,
// instead of waiting out their timeout for a rank that never comes.
TEST(FabricInitTest, DifferentWorldSizesAreNamed) {
  const int port = testing::FreePort();
  absl::Status zero, one;
  const MonoTime start = MonoNow();
  std::thread t([&] { zero = Engine::Init(testing::RankOptions(0, 2, port)).status(); });
  one = Engine::Init(testing::RankOptions(1, 3, port)).status();
  t.join();
  EXPECT_LT(MonoNow() - start, absl::Seconds(15));
  EXPECT_EQ(CodeOf(one), ErrorCode::kInvalidArgument) << one;
  EXPECT_NE(one.message().find("world_size is 3 here but rank 0 at"), absl::string_view::npos)
      << one;
  EXPECT_NE(one.message().find("runs a job of 2 ranks"), absl::string_view::npos) << one;
  EXPECT_EQ(CodeOf(zero), ErrorCode::kPeerFailure) << zero;
  EXPECT_NE(zero.message().find("world_size is 3 here"), absl::string_view::npos) << zero;
}

// Two processes given one rank: the second to join is told so. (The first
// and the others may have finished init with it already; if not, they fail
// naming the reason.) Each keeps its communicator until all three have an
// answer: rank 0's store lives as long as its communicator, and a duplicate
// that comes after a job has ended finds no store to be told by.
TEST(FabricInitTest, ARankClaimedTwiceIsNamed) {
  const int port = testing::FreePort();
  std::vector<absl::Status> got(3);
  absl::Barrier answered(3);
  const MonoTime start = MonoNow();
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      auto f = Engine::Init(testing::RankOptions(i == 0 ? 0 : 1, 2, port, 20000));
      got[i] = f.status();
      answered.Block();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LT(MonoNow() - start, absl::Seconds(15));
  int told = 0;
  for (int i = 0; i < 3; ++i) {
    if (CodeOf(got[i]) == ErrorCode::kInvalidArgument) {
      ++told;
      EXPECT_NE(got[i].message().find("joined the store at"), absl::string_view::npos);
      EXPECT_NE(got[i].message().find("as rank 1 first"), absl::string_view::npos) << got[i];
    } else if (!got[i].ok()) {
      EXPECT_EQ(CodeOf(got[i]), ErrorCode::kPeerFailure) << got[i];
      EXPECT_NE(got[i].message().find("as rank 1 first"), absl::string_view::npos) << got[i];
    }
  }
  EXPECT_EQ(told, 1) << got[0] << "\n" << got[1] << "\n" << got[2];
}

// A rank that destroys its engine and inits again at once may reach the old
// job's store before rank 0 has closed it (torch-style destroy, then init):
// it waits for the new store instead of being taken for a second rank 1.
TEST(FabricInitTest, InitRightAfterDestroyWaitsForTheNewStore) {
  const int port = testing::FreePort();
  std::vector<absl::Status> again(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      const Options o = testing::RankOptions(rank, 2, port, 20000);
      auto f = Engine::Init(o);
      ASSERT_TRUE(f.ok()) << f.status();
      if (rank == 0) absl::SleepFor(absl::Milliseconds(700));  // rank 1 is back first
      EXPECT_TRUE((*f)->Destroy().ok());
      f->reset();
      auto g = Engine::Init(o);
      again[rank] = g.status();
      if (!g.ok()) return;
      int v = 10 + rank, got = 0;
      const MonoTime deadline = MonoNow() + absl::Seconds(10);
      auto r = (*g)->Irecv(0, &got, sizeof got, 4, 1 - rank, 3);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_TRUE((*g)->Send(0, &v, sizeof v, 4, 1 - rank, 3, absl::Seconds(10)).ok());
      EXPECT_TRUE((*g)->Wait(r->get(), deadline).ok());
      EXPECT_EQ(got, 11 - rank);
      (*g)->Release(*r);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(again[0].ok()) << again[0];
  EXPECT_TRUE(again[1].ok()) << again[1];
}

// The job key names the job's segments in /dev/shm; hcomm_run sets it so
// that it can remove what a job stopped during init left there.
TEST(FabricInitTest, JobKeyComesFromTheLauncherWhenSet) {
  std::random_device random;
  const std::string key = absl::StrFormat("%08x%08x", random(), random());
  setenv("HCOMM_JOB_KEY", key.c_str(), 1);
  RunRanks(2, [&](int rank, const Options& o) {
    auto f = Engine::Init(o);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ((*f)->job_key().substr(0, key.size() + 1), key + "-") << (*f)->job_key();
    EXPECT_EQ((*f)->job_key().size(), 33u) << (*f)->job_key();
  });
  setenv("HCOMM_JOB_KEY", "not-a-key", 1);
  absl::Status bad = Engine::Init(testing::RankOptions(0, 2, testing::FreePort(), 2000)).status();
  unsetenv("HCOMM_JOB_KEY");
  EXPECT_EQ(CodeOf(bad), ErrorCode::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("HCOMM_JOB_KEY=not-a-key is not 16 hex digits"),
            absl::string_view::npos)
      << bad;
}

INSTANTIATE_TEST_SUITE_P(
    Transports, FabricTest,
    ::testing::Values(testing::TransportMode::kTcp, testing::TransportMode::kShm,
                      testing::TransportMode::kMixed, testing::TransportMode::kUds),
    [](const ::testing::TestParamInfo<testing::TransportMode>& info) {
      return std::string(testing::TransportModeName(info.param));
    });

}  // namespace
}  // namespace hcomm
