// The rendezvous store under abuse (docs/reliability.md, "The store under
// abuse"): floods of strangers, frames that promise more than they send, a
// store filled past its limit, a failed allocation in a connection thread.
#include <atomic>
#include <new>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/net.h"
#include "core/base/status.h"
#include "core/bootstrap/handshake.h"
#include "core/bootstrap/store_client.h"
#include "core/bootstrap/store_server.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

constexpr char kToken[] = "job-token-abuse";

MonoTime Soon() { return MonoNow() + absl::Seconds(10); }

bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

std::unique_ptr<StoreServer> StartServer(const StoreLimits& limits = StoreLimits()) {
  absl::StatusOr<std::unique_ptr<StoreServer>> s =
      StoreServer::Start("127.0.0.1", 0, kToken, limits);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

net::HostPort AddrOf(const StoreServer& s) { return net::HostPort{"127.0.0.1", s.port()}; }

std::unique_ptr<StoreClient> ConnectTo(const StoreServer& s) {
  absl::StatusOr<std::unique_ptr<StoreClient>> c = StoreClient::Connect(AddrOf(s), kToken, Soon());
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

std::string LengthPrefix(uint32_t n) {
  return std::string{static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 24)};
}

// (a) Strangers that connect and say nothing hold no slot a rank needs.
TEST(StoreAbuseTest, IdleFloodDoesNotLockOutRanks) {
  StoreLimits limits;
  limits.max_connections = 8;
  limits.max_unauthenticated = 4;
  limits.handshake_timeout = absl::Seconds(30);  // eviction, not the deadline, must help
  auto server = StartServer(limits);
  ASSERT_NE(server, nullptr);

  std::vector<net::Fd> flood;
  for (int i = 0; i < 32; ++i) {
    absl::StatusOr<net::Fd> fd = net::Connect(AddrOf(*server), Soon());
    ASSERT_TRUE(fd.ok()) << fd.status();
    flood.push_back(*std::move(fd));
  }
  // Every authenticated slot is still there for ranks, flood or not.
  std::vector<std::unique_ptr<StoreClient>> ranks;
  for (size_t r = 0; r < limits.max_connections; ++r) {
    absl::StatusOr<std::unique_ptr<StoreClient>> c =
        StoreClient::Connect(AddrOf(*server), kToken, Soon());
    ASSERT_TRUE(c.ok()) << "rank " << r << " locked out by idle strangers: " << c.status();
    ASSERT_TRUE((*c)->Set(absl::StrCat("rank/", r), "here", Soon()).ok());
    ranks.push_back(*std::move(c));
  }
  for (size_t r = 0; r < ranks.size(); ++r) {
    absl::StatusOr<std::string> v = ranks[0]->Get(absl::StrCat("rank/", r), Soon());
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, "here");
  }
}

// (a) A stranger that never finishes the handshake is dropped after the
// (short) default handshake deadline.
TEST(StoreAbuseTest, SilentStrangerDroppedAfterShortHandshakeDeadline) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<net::Fd> fd = net::Connect(AddrOf(*server), Soon());
  ASSERT_TRUE(fd.ok()) << fd.status();
  const MonoTime start = MonoNow();
  const absl::Duration limit = StoreLimits().handshake_timeout + absl::Seconds(2);
  // Hello, then nothing but the close.
  absl::StatusOr<std::string> hello = net::ReadFrame(fd->get(), 1024, Soon());
  ASSERT_TRUE(hello.ok()) << hello.status();
  char buf[16];
  absl::Status s = net::ReadFull(fd->get(), buf, sizeof buf, start + limit);
  EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure)
      << "still connected " << absl::FormatDuration(MonoNow() - start)
      << " after saying nothing: " << s;
  EXPECT_LE(StoreLimits().handshake_timeout, absl::Seconds(5));
}

// (b) A header promising a 64 MiB frame, followed by a trickle, reserves
// memory in proportion to what arrived, not to what was promised.
TEST(StoreAbuseTest, PromisedFrameCostsOnlyWhatArrived) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  constexpr int kConns = 8;
  std::vector<net::Fd> conns;
  for (int i = 0; i < kConns; ++i) {
    absl::StatusOr<net::Fd> fd = net::Connect(AddrOf(*server), Soon());
    ASSERT_TRUE(fd.ok()) << fd.status();
    ASSERT_TRUE(HandshakeAsClient(fd->get(), kToken, Soon()).ok());
    std::string start = LengthPrefix(StoreServer::kMaxFrameBytes) + std::string(100, 'x');
    ASSERT_TRUE(net::WriteFull(fd->get(), start.data(), start.size(), Soon()).ok());
    conns.push_back(*std::move(fd));
  }
  // Every connection has begun its frame (at least a little is reserved each).
  ASSERT_TRUE(server->AwaitPendingFrameBytes(kConns * 100, Soon()).ok());
  EXPECT_LE(server->PendingFrameBytes(), size_t{kConns} << 20)
      << kConns << " connections that sent 100 bytes each of a promised "
      << StoreServer::kMaxFrameBytes << "-byte frame";
  conns.clear();
  // Dropped frames give their reservation back.
  auto c = ConnectTo(*server);
  ASSERT_NE(c, nullptr);
  const MonoTime deadline = Soon();
  while (server->PendingFrameBytes() != 0 && MonoNow() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(server->PendingFrameBytes(), 0u);
  // A large frame that does arrive whole still works.
  std::string big(3 << 20, 'b');
  ASSERT_TRUE(c->Set("big", big, Soon()).ok());
  absl::StatusOr<std::string> got = c->Get("big", Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == big);
}

// (c) The store refuses data beyond its limit, with a clear error, and
// stays usable.
TEST(StoreAbuseTest, StoredBytesAreCapped) {
  StoreLimits limits;
  limits.max_stored_bytes = 1 << 20;
  auto server = StartServer(limits);
  ASSERT_NE(server, nullptr);
  auto c = ConnectTo(*server);
  ASSERT_NE(c, nullptr);
  const std::string chunk(600 << 10, 'v');
  ASSERT_TRUE(c->Set("a", chunk, Soon()).ok());
  absl::Status s = c->Set("b", chunk, Soon());
  EXPECT_EQ(CodeOf(s), ErrorCode::kOutOfMem) << s;
  EXPECT_TRUE(Contains(s.message(), "'b'")) << s;
  EXPECT_TRUE(Contains(s.message(), absl::StrCat(limits.max_stored_bytes))) << s;
  absl::StatusOr<std::vector<bool>> e = c->Check({"a", "b"}, Soon());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(*e, (std::vector<bool>{true, false}));
  // Replacing a value counts only the difference.
  EXPECT_TRUE(c->Set("a", chunk, Soon()).ok());
  ASSERT_TRUE(c->Set("a", "small", Soon()).ok());
  EXPECT_TRUE(c->Set("b", chunk, Soon()).ok());
  // Counters are stored data too.
  // Stored now: "a" (1 + 5 bytes) and "b" (1 + chunk); "r" leaves 10 bytes,
  // less than any new counter needs.
  const size_t kOverhead = StoreServer::kEntryOverheadBytes;
  const std::string rest(limits.max_stored_bytes - (6 + kOverhead) - (1 + chunk.size() + kOverhead) -
                             (1 + kOverhead) - 10,
                         'r');
  ASSERT_TRUE(c->Set("r", rest, Soon()).ok());
  EXPECT_EQ(CodeOf(c->Add("n", 1, Soon()).status()), ErrorCode::kOutOfMem);
  EXPECT_EQ(*c->Get("a", Soon()), "small");
}

std::atomic<int> g_refused{0};
void RefuseBigReservations(size_t bytes) {
  if (bytes >= (size_t{1} << 20)) {
    g_refused.fetch_add(1);
    throw std::bad_alloc();
  }
}

// (d) A failed allocation in one connection drops that connection, says
// why, and leaves the server serving everyone else.
TEST(StoreAbuseTest, FailedAllocationDropsOnlyThatConnection) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto victim = ConnectTo(*server);
  auto bystander = ConnectTo(*server);
  ASSERT_TRUE(victim && bystander);
  ASSERT_TRUE(bystander->Set("before", "1", Soon()).ok());

  testing::internal::CaptureStderr();
  StoreServer::SetAllocationHookForTest(&RefuseBigReservations);
  absl::Status s = victim->Set("big", std::string(4 << 20, 'x'), Soon());
  StoreServer::SetAllocationHookForTest(nullptr);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(s.ok());
  EXPECT_GE(g_refused.load(), 1);
  EXPECT_TRUE(Contains(log, "bad_alloc")) << log;

  EXPECT_EQ(*bystander->Get("before", Soon()), "1");
  ASSERT_TRUE(bystander->Set("after", "2", Soon()).ok());
  auto newcomer = ConnectTo(*server);
  ASSERT_NE(newcomer, nullptr);
  EXPECT_EQ(*newcomer->Get("after", Soon()), "2");
  // The victim reconnects on its next call.
  EXPECT_TRUE(victim->Set("big", std::string(4 << 20, 'x'), Soon()).ok());
}

}  // namespace
}  // namespace hcomm
