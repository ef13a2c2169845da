#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/bootstrap/handshake.h"
#include "core/base/net.h"
#include "core/base/status.h"
#include "core/bootstrap/store.pb.h"
#include "core/bootstrap/store_client.h"
#include "core/bootstrap/store_server.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

constexpr char kToken[] = "job-token-1234";

MonoTime Soon() { return MonoNow() + absl::Seconds(10); }

bool Contains(absl::string_view haystack, absl::string_view needle) {
  return haystack.find(needle) != absl::string_view::npos;
}

std::unique_ptr<StoreServer> StartServer(std::string token = kToken) {
  absl::StatusOr<std::unique_ptr<StoreServer>> s = StoreServer::Start("127.0.0.1", 0, token);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

net::HostPort AddrOf(const StoreServer& s) { return net::HostPort{"127.0.0.1", s.port()}; }

std::unique_ptr<StoreClient> ConnectTo(const StoreServer& s, std::string token = kToken) {
  absl::StatusOr<std::unique_ptr<StoreClient>> c = StoreClient::Connect(AddrOf(s), token, Soon());
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

std::string LengthPrefix(uint32_t n) {
  return std::string{static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 24)};
}

// A raw TCP connection to the server that has received the server's hello.
net::Fd RawConnection(const StoreServer& s) {
  absl::StatusOr<net::Fd> fd = net::Connect(AddrOf(s), Soon());
  EXPECT_TRUE(fd.ok()) << fd.status();
  if (!fd.ok()) return net::Fd();
  absl::StatusOr<std::string> hello = net::ReadFrame(fd->get(), 1024, Soon());
  EXPECT_TRUE(hello.ok()) << hello.status();
  return *std::move(fd);
}

// Expects the server to close `fd`: reading ends with EOF or a reset.
void ExpectClosedByServer(const net::Fd& fd) {
  char buf[64];
  absl::Status s = net::ReadFull(fd.get(), buf, sizeof buf, Soon());
  EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;
}

// Port that refuses connections: bound (SO_REUSEADDR) but not listening.
struct ReservedPort {
  net::Fd fd;
  int port = 0;
};

ReservedPort ReservePort() {
  ReservedPort r;
  r.fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(r.fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(::bind(r.fd.get(), reinterpret_cast<struct sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(r.fd.get(), reinterpret_cast<struct sockaddr*>(&a), &len);
  r.port = ntohs(a.sin_port);
  return r;
}

TEST(StoreTest, SetGetAddWaitCheck) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto c = ConnectTo(*server);
  ASSERT_NE(c, nullptr);

  ASSERT_TRUE(c->Set("a", "alpha", Soon()).ok());
  absl::StatusOr<std::string> v = c->Get("a", Soon());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "alpha");
  ASSERT_TRUE(c->Set("a", "again", Soon()).ok());
  EXPECT_EQ(*c->Get("a", Soon()), "again");

  const std::string bin_key("k\0\xff", 3), bin_value("\0\1\2\xfe", 4);
  ASSERT_TRUE(c->Set(bin_key, bin_value, Soon()).ok());
  EXPECT_EQ(*c->Get(bin_key, Soon()), bin_value);
  ASSERT_TRUE(c->Set("empty-value", "", Soon()).ok());
  EXPECT_EQ(*c->Get("empty-value", Soon()), "");

  absl::StatusOr<int64_t> n = c->Add("counter", 5, Soon());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 5);
  EXPECT_EQ(*c->Add("counter", -7, Soon()), -2);
  EXPECT_EQ(*c->Get("counter", Soon()), "-2");

  absl::StatusOr<std::vector<bool>> e = c->Check({"a", "nope", "counter", bin_key}, Soon());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(*e, (std::vector<bool>{true, false, true, true}));
  EXPECT_TRUE(c->Wait({"a", "counter"}, Soon()).ok());
  EXPECT_TRUE(c->Wait({}, Soon()).ok());

  absl::Status bad = c->Add("a", 1, Soon()).status();
  EXPECT_EQ(CodeOf(bad), ErrorCode::kInvalidArgument) << bad;
  ASSERT_TRUE(c->Set("big", "9223372036854775807", Soon()).ok());
  bad = c->Add("big", 1, Soon()).status();
  EXPECT_EQ(CodeOf(bad), ErrorCode::kInvalidArgument) << bad;
  EXPECT_TRUE(Contains(bad.message(), "overflow")) << bad;

  EXPECT_EQ(CodeOf(c->Set("", "x", Soon())), ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(c->Get(std::string(StoreServer::kMaxKeyBytes + 1, 'k'), Soon()).status()),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(c->Set("huge", std::string(StoreServer::kMaxValueBytes + 1, 'v'), Soon())),
            ErrorCode::kInvalidArgument);
  // Still usable after refused requests.
  EXPECT_EQ(*c->Get("a", Soon()), "again");
}

TEST(StoreTest, LargeValueRoundTrips) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto c = ConnectTo(*server);
  ASSERT_NE(c, nullptr);
  std::string big(4 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
  ASSERT_TRUE(c->Set("big", big, Soon()).ok());
  absl::StatusOr<std::string> got = c->Get("big", Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == big);
}

TEST(StoreTest, ManyClientThreads) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  constexpr int kThreads = 8, kAdds = 50;
  auto shared = ConnectTo(*server);
  ASSERT_NE(shared, nullptr);
  std::vector<std::vector<int64_t>> seen(2 * kThreads);
  std::vector<absl::Status> errors(2 * kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    // An own connection per rank, like ranks of a job.
    threads.emplace_back([&, t] {
      auto c = ConnectTo(*server);
      if (c == nullptr) return;
      absl::Status s = c->Set(absl::StrCat("rank/", t), absl::StrCat("addr-", t), Soon());
      for (int i = 0; s.ok() && i < kAdds; ++i) {
        absl::StatusOr<int64_t> n = c->Add("counter", 1, Soon());
        s = n.status();
        if (n.ok()) seen[t].push_back(*n);
      }
      std::vector<std::string> keys;
      for (int r = 0; r < kThreads; ++r) keys.push_back(absl::StrCat("rank/", r));
      if (s.ok()) s = c->Wait(keys, Soon());
      for (int r = 0; s.ok() && r < kThreads; ++r) {
        absl::StatusOr<std::string> v = c->Get(keys[r], Soon());
        s = v.status();
        if (v.ok() && *v != absl::StrCat("addr-", r)) s = Internal(absl::StrCat("bad ", *v));
      }
      errors[t] = s;
    });
    // Threads sharing one client.
    threads.emplace_back([&, t] {
      absl::Status s;
      for (int i = 0; s.ok() && i < kAdds; ++i) {
        absl::StatusOr<int64_t> n = shared->Add("counter", 1, Soon());
        s = n.status();
        if (n.ok()) seen[kThreads + t].push_back(*n);
      }
      errors[kThreads + t] = s;
    });
  }
  for (auto& th : threads) th.join();
  for (const absl::Status& s : errors) EXPECT_TRUE(s.ok()) << s;
  std::vector<int64_t> all;
  for (const auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), size_t{2 * kThreads * kAdds});
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<int64_t>(i + 1));
  EXPECT_EQ(*shared->Get("counter", Soon()), absl::StrCat(2 * kThreads * kAdds));
}

TEST(StoreTest, GetAndWaitBlockUntilSet) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto setter = ConnectTo(*server);
  auto getter = ConnectTo(*server);
  auto waiter = ConnectTo(*server);
  ASSERT_TRUE(setter && getter && waiter);

  absl::StatusOr<std::string> got;
  absl::Status waited = Internal("not run");
  std::thread g([&] { got = getter->Get("late", Soon()); });
  std::thread w([&] { waited = waiter->Wait({"late", "later"}, Soon()); });
  // Both requests are parked on the server before anything is set.
  ASSERT_TRUE(server->AwaitWaiters(2, Soon()).ok());
  // Parked requests do not block other clients.
  EXPECT_EQ(*setter->Add("unrelated", 1, Soon()), 1);
  ASSERT_TRUE(setter->Set("late", "finally", Soon()).ok());
  g.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "finally");
  // The WAIT still needs "later".
  ASSERT_TRUE(server->AwaitWaiters(1, Soon()).ok());
  ASSERT_TRUE(setter->Set("later", "x", Soon()).ok());
  w.join();
  EXPECT_TRUE(waited.ok()) << waited;
}

TEST(StoreTest, GetAndWaitTimeOutNamingKeys) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto c = ConnectTo(*server);
  ASSERT_NE(c, nullptr);

  MonoTime start = MonoNow();
  absl::StatusOr<std::string> v = c->Get("never-set-key", start + absl::Milliseconds(200));
  absl::Duration took = MonoNow() - start;
  EXPECT_EQ(CodeOf(v.status()), ErrorCode::kTimeout) << v.status();
  EXPECT_TRUE(Contains(v.status().message(), "never-set-key")) << v.status();
  EXPECT_GE(took, absl::Milliseconds(100));
  EXPECT_LT(took, absl::Milliseconds(1200));

  ASSERT_TRUE(c->Set("present-key", "1", Soon()).ok());
  start = MonoNow();
  absl::Status s =
      c->Wait({"present-key", "missing-one", "missing-two"}, start + absl::Milliseconds(200));
  took = MonoNow() - start;
  EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
  EXPECT_TRUE(Contains(s.message(), "missing-one")) << s;
  EXPECT_TRUE(Contains(s.message(), "missing-two")) << s;
  EXPECT_LT(took, absl::Milliseconds(1200));

  // A deadline already past fails at once.
  EXPECT_EQ(CodeOf(c->Get("present-key", MonoNow() - absl::Seconds(1)).status()),
            ErrorCode::kTimeout);
  // The client is still in step with the server afterwards.
  EXPECT_EQ(*c->Get("present-key", Soon()), "1");
  EXPECT_EQ(*c->Add("n", 3, Soon()), 3);
}

TEST(StoreTest, ClientDeadlineHoldsAgainstSilentServer) {
  // Handshakes correctly, then never answers.
  int port = 0;
  absl::StatusOr<net::Fd> lfd = net::Listen("127.0.0.1", 0, &port);
  ASSERT_TRUE(lfd.ok()) << lfd.status();
  absl::Notification done;
  std::thread silent([&] {
    absl::StatusOr<net::Fd> c = net::Accept(lfd->get(), Soon());
    if (!c.ok()) return;
    if (!HandshakeAsServer(c->get(), kToken, Soon()).ok()) return;
    done.WaitForNotificationWithTimeout(absl::Seconds(20));
  });
  absl::StatusOr<std::unique_ptr<StoreClient>> c =
      StoreClient::Connect(net::HostPort{"127.0.0.1", port}, kToken, Soon());
  ASSERT_TRUE(c.ok()) << c.status();

  MonoTime start = MonoNow();
  absl::StatusOr<std::string> v = (*c)->Get("some-key", start + absl::Milliseconds(200));
  absl::Duration took = MonoNow() - start;
  EXPECT_EQ(CodeOf(v.status()), ErrorCode::kTimeout) << v.status();
  EXPECT_TRUE(Contains(v.status().message(), "some-key")) << v.status();
  EXPECT_LT(took, absl::Milliseconds(1200));

  // The connection was dropped; the next call reconnects, but nobody runs the
  // handshake on the new connection: it still ends by its deadline.
  start = MonoNow();
  absl::Status s = (*c)->Set("k", "v", start + absl::Milliseconds(200));
  EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
  EXPECT_LT(MonoNow() - start, absl::Milliseconds(1200));
  done.Notify();
  silent.join();
}

TEST(StoreTest, QueuedCallOnBusyClientKeepsItsDeadline) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto shared = ConnectTo(*server);
  auto other = ConnectTo(*server);
  ASSERT_TRUE(shared && other);
  absl::StatusOr<std::string> got;
  std::thread g([&] { got = shared->Get("gate", Soon()); });
  ASSERT_TRUE(server->AwaitWaiters(1, Soon()).ok());  // g holds the client now
  MonoTime start = MonoNow();
  absl::Status s = shared->Set("x", "y", start + absl::Milliseconds(200));
  EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
  EXPECT_LT(MonoNow() - start, absl::Milliseconds(1200));
  ASSERT_TRUE(other->Set("gate", "open", Soon()).ok());
  g.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "open");
  EXPECT_TRUE(shared->Set("x", "y", Soon()).ok());
}

TEST(StoreTest, WrongTokenRefusedWhileGoodClientWorks) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto good = ConnectTo(*server);
  ASSERT_NE(good, nullptr);
  ASSERT_TRUE(good->Set("k", "v1", Soon()).ok());

  absl::StatusOr<std::unique_ptr<StoreClient>> bad =
      StoreClient::Connect(AddrOf(*server), "wrong-token", Soon());
  EXPECT_EQ(CodeOf(bad.status()), ErrorCode::kPermissionDenied) << bad.status();
  EXPECT_TRUE(Contains(bad.status().message(), "refused our job token")) << bad.status();

  absl::StatusOr<std::unique_ptr<StoreClient>> none =
      StoreClient::Connect(AddrOf(*server), "", Soon());
  EXPECT_EQ(CodeOf(none.status()), ErrorCode::kPermissionDenied) << none.status();

  EXPECT_EQ(*good->Get("k", Soon()), "v1");
  ASSERT_TRUE(good->Set("k", "v2", Soon()).ok());
  EXPECT_EQ(*good->Get("k", Soon()), "v2");
}

TEST(StoreTest, OpenStoreWithoutToken) {
  auto server = StartServer("");
  ASSERT_NE(server, nullptr);
  auto c = ConnectTo(*server, "");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->Set("k", "v", Soon()).ok());
  absl::StatusOr<std::unique_ptr<StoreClient>> with_token =
      StoreClient::Connect(AddrOf(*server), "some-token", Soon());
  EXPECT_EQ(CodeOf(with_token.status()), ErrorCode::kPermissionDenied) << with_token.status();
}

TEST(StoreTest, JunkConnectionsDoNotDisturbGoodClient) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto good = ConnectTo(*server);
  ASSERT_NE(good, nullptr);
  ASSERT_TRUE(good->Set("before", "intact", Soon()).ok());

  // A connection that sends nothing holds its slot but nothing else.
  net::Fd silent = RawConnection(*server);
  ASSERT_TRUE(silent.valid());

  std::mt19937 rng(4242);
  std::string random_bytes(4096, '\0');
  for (char& ch : random_bytes) ch = static_cast<char>(rng());
  random_bytes[3] = static_cast<char>(0xA5);  // a length prefix far over any limit

  {
    net::Fd fd = RawConnection(*server);
    ASSERT_TRUE(net::WriteFull(fd.get(), random_bytes.data(), random_bytes.size(), Soon()).ok());
    ExpectClosedByServer(fd);
  }
  {
    net::Fd fd = RawConnection(*server);
    std::string huge = LengthPrefix(0xFFFFFFFFu);
    ASSERT_TRUE(net::WriteFull(fd.get(), huge.data(), huge.size(), Soon()).ok());
    ExpectClosedByServer(fd);
  }
  {
    net::Fd fd = RawConnection(*server);
    ASSERT_TRUE(net::WriteFrame(fd.get(), std::string(40, '\xff'), Soon()).ok());
    ExpectClosedByServer(fd);
  }
  {
    net::Fd fd = RawConnection(*server);
    std::string truncated = LengthPrefix(500) + "just the beginning";
    ASSERT_TRUE(net::WriteFull(fd.get(), truncated.data(), truncated.size(), Soon()).ok());
  }  // closed mid-frame
  {
    absl::StatusOr<net::Fd> fd = net::Connect(AddrOf(*server), Soon());
    ASSERT_TRUE(fd.ok()) << fd.status();
  }  // connects and leaves at once

  ASSERT_TRUE(good->Set("after", "fine", Soon()).ok());
  EXPECT_EQ(*good->Get("before", Soon()), "intact");
  EXPECT_EQ(*good->Get("after", Soon()), "fine");
  EXPECT_EQ(*good->Add("n", 2, Soon()), 2);
  // New good clients still get in while the silent one is connected.
  auto another = ConnectTo(*server);
  ASSERT_NE(another, nullptr);
  EXPECT_EQ(*another->Get("after", Soon()), "fine");
}

TEST(StoreTest, AuthenticatedJunkIsAnsweredOrDropped) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto good = ConnectTo(*server);
  ASSERT_NE(good, nullptr);

  absl::StatusOr<net::Fd> fd = net::Connect(AddrOf(*server), Soon());
  ASSERT_TRUE(fd.ok()) << fd.status();
  ASSERT_TRUE(HandshakeAsClient(fd->get(), kToken, Soon()).ok());

  // An unparsable request keeps framing intact: answered with an error.
  ASSERT_TRUE(net::WriteFrame(fd->get(), std::string(40, '\xff'), Soon()).ok());
  absl::StatusOr<std::string> frame = net::ReadFrame(fd->get(), 1 << 20, Soon());
  ASSERT_TRUE(frame.ok()) << frame.status();
  store::Response resp;
  ASSERT_TRUE(resp.ParseFromString(*frame));
  EXPECT_EQ(resp.code(), static_cast<int>(ErrorCode::kInvalidArgument));

  // A request without an operation, and one with an over-long key.
  store::Request req;
  req.set_id(7);
  ASSERT_TRUE(net::WriteFrame(fd->get(), req.SerializeAsString(), Soon()).ok());
  frame = net::ReadFrame(fd->get(), 1 << 20, Soon());
  ASSERT_TRUE(frame.ok()) << frame.status();
  ASSERT_TRUE(resp.ParseFromString(*frame));
  EXPECT_EQ(resp.id(), 7u);
  EXPECT_EQ(resp.code(), static_cast<int>(ErrorCode::kInvalidArgument));
  req.mutable_set()->set_key(std::string(StoreServer::kMaxKeyBytes + 1, 'k'));
  ASSERT_TRUE(net::WriteFrame(fd->get(), req.SerializeAsString(), Soon()).ok());
  frame = net::ReadFrame(fd->get(), 1 << 20, Soon());
  ASSERT_TRUE(frame.ok()) << frame.status();
  ASSERT_TRUE(resp.ParseFromString(*frame));
  EXPECT_EQ(resp.code(), static_cast<int>(ErrorCode::kInvalidArgument));

  // An over-long frame cannot be skipped: the connection is dropped.
  std::string huge = LengthPrefix(0xFFFFFFFFu);
  ASSERT_TRUE(net::WriteFull(fd->get(), huge.data(), huge.size(), Soon()).ok());
  ExpectClosedByServer(*fd);

  EXPECT_TRUE(good->Set("k", "v", Soon()).ok());
  EXPECT_EQ(*good->Get("k", Soon()), "v");
  absl::StatusOr<std::vector<bool>> e = good->Check({std::string(10, 'k')}, Soon());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(*e, std::vector<bool>{false});
}

TEST(StoreTest, ServerDestroyedWhileClientsWait) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  const net::HostPort addr = AddrOf(*server);
  constexpr int kWaiters = 3;
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < kWaiters; ++i) clients.push_back(ConnectTo(*server));
  auto idle = ConnectTo(*server);
  ASSERT_NE(idle, nullptr);
  net::Fd silent = RawConnection(*server);  // stuck in the handshake

  std::vector<absl::Status> results(kWaiters, absl::OkStatus());
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    ASSERT_NE(clients[i], nullptr);
    threads.emplace_back([&, i] {
      if (i == 0) {
        results[i] = clients[i]->Wait({"never-a", "never-b"}, MonoNow() + absl::Seconds(30));
      } else {
        results[i] = clients[i]->Get("never", MonoNow() + absl::Seconds(30)).status();
      }
    });
  }
  ASSERT_TRUE(server->AwaitWaiters(kWaiters, Soon()).ok());
  const MonoTime start = MonoNow();
  server.reset();
  EXPECT_LT(MonoNow() - start, absl::Seconds(5));
  for (auto& t : threads) t.join();
  EXPECT_LT(MonoNow() - start, absl::Seconds(5));
  for (const absl::Status& s : results) {
    EXPECT_EQ(CodeOf(s), ErrorCode::kUnavailable) << s;
  }
  // The idle client learns on its next call, without hanging.
  absl::Status s = idle->Set("k", "v", MonoNow() + absl::Seconds(5));
  EXPECT_EQ(CodeOf(s), ErrorCode::kUnavailable) << s;
  ExpectClosedByServer(silent);
  (void)addr;
}

TEST(StoreTest, UnreachableStoreIsUnavailableByDeadline) {
  ReservedPort reserved = ReservePort();
  const MonoTime start = MonoNow();
  absl::StatusOr<std::unique_ptr<StoreClient>> c = StoreClient::Connect(
      net::HostPort{"127.0.0.1", reserved.port}, kToken, start + absl::Milliseconds(300));
  const absl::Duration took = MonoNow() - start;
  EXPECT_EQ(CodeOf(c.status()), ErrorCode::kUnavailable) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), "unreachable")) << c.status();
  EXPECT_TRUE(Contains(c.status().message(), absl::StrCat("127.0.0.1:", reserved.port)))
      << c.status();
  EXPECT_LT(took, absl::Milliseconds(1300));
}

TEST(StoreTest, ConnectRetriesUntilServerIsUp) {
  ReservedPort reserved = ReservePort();  // refuses until the server listens
  absl::StatusOr<std::unique_ptr<StoreClient>> c;
  std::thread t([&] {
    c = StoreClient::Connect(net::HostPort{"127.0.0.1", reserved.port}, kToken, Soon());
  });
  absl::StatusOr<std::unique_ptr<StoreServer>> server =
      StoreServer::Start("127.0.0.1", reserved.port, kToken);
  reserved.fd.reset();
  if (!server.ok()) {
    t.join();
    GTEST_SKIP() << "could not take over the reserved port: " << server.status();
  }
  t.join();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->Set("k", "v", Soon()).ok());
  EXPECT_EQ(*(*c)->Get("k", Soon()), "v");
}

}  // namespace
}  // namespace hcomm
