#include "core/bootstrap/handshake.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/net.h"
#include "core/base/status.h"
#include "core/bootstrap/store.pb.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

// A connected pair of non-blocking stream sockets.
struct Pair {
  net::Fd a, b;
};

Pair MakePair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  return Pair{net::Fd(fds[0]), net::Fd(fds[1])};
}

MonoTime Soon() { return MonoNow() + absl::Seconds(5); }

struct Outcome {
  absl::Status client;
  absl::Status server;
};

Outcome RunBoth(absl::string_view client_token, absl::string_view server_token) {
  Pair p = MakePair();
  Outcome out;
  std::thread server([&] { out.server = HandshakeAsServer(p.a.get(), server_token, Soon()); });
  out.client = HandshakeAsClient(p.b.get(), client_token, Soon());
  server.join();
  return out;
}

TEST(HandshakeTest, SameTokenSucceeds) {
  Outcome o = RunBoth("s3cret-token", "s3cret-token");
  EXPECT_TRUE(o.client.ok()) << o.client;
  EXPECT_TRUE(o.server.ok()) << o.server;
}

TEST(HandshakeTest, BinaryTokenSucceeds) {
  const std::string token("a\0b\xff", 4);
  Outcome o = RunBoth(token, token);
  EXPECT_TRUE(o.client.ok()) << o.client;
  EXPECT_TRUE(o.server.ok()) << o.server;
}

TEST(HandshakeTest, OpenJobBothEmptySucceeds) {
  Outcome o = RunBoth("", "");
  EXPECT_TRUE(o.client.ok()) << o.client;
  EXPECT_TRUE(o.server.ok()) << o.server;
}

TEST(HandshakeTest, DifferentTokensBothDenied) {
  Outcome o = RunBoth("token-a", "token-b");
  EXPECT_EQ(CodeOf(o.client), ErrorCode::kPermissionDenied) << o.client;
  EXPECT_NE(o.client.message().find("refused our job token"), absl::string_view::npos)
      << o.client;
  EXPECT_EQ(CodeOf(o.server), ErrorCode::kPermissionDenied) << o.server;
}

TEST(HandshakeTest, TokenAgainstNoTokenDenied) {
  Outcome o1 = RunBoth("", "server-token");
  EXPECT_EQ(CodeOf(o1.client), ErrorCode::kPermissionDenied) << o1.client;
  EXPECT_EQ(CodeOf(o1.server), ErrorCode::kPermissionDenied) << o1.server;
  Outcome o2 = RunBoth("client-token", "");
  EXPECT_EQ(CodeOf(o2.client), ErrorCode::kPermissionDenied) << o2.client;
  EXPECT_EQ(CodeOf(o2.server), ErrorCode::kPermissionDenied) << o2.server;
}

TEST(HandshakeTest, PrefixOfTokenDenied) {
  Outcome o = RunBoth("secret", "secret2");
  EXPECT_EQ(CodeOf(o.client), ErrorCode::kPermissionDenied) << o.client;
  EXPECT_EQ(CodeOf(o.server), ErrorCode::kPermissionDenied) << o.server;
}

// Runs the server against raw bytes written by `feed` on the other end.
template <typename Feed>
absl::Status ServerAgainst(Feed feed, MonoTime deadline) {
  Pair p = MakePair();
  absl::Status server;
  std::thread t([&] { server = HandshakeAsServer(p.a.get(), "tok", deadline); });
  feed(p.b);
  t.join();
  return server;
}

std::string LengthPrefix(uint32_t n) {
  return std::string{static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 24)};
}

void WriteAll(const net::Fd& fd, absl::string_view bytes) {
  ASSERT_TRUE(net::WriteFull(fd.get(), bytes.data(), bytes.size(), Soon()).ok());
}

TEST(HandshakeTest, ServerRejectsHugeLengthPrefix) {
  absl::Status s = ServerAgainst([](net::Fd& c) { WriteAll(c, LengthPrefix(0xFFFFFFFFu)); },
                                 Soon());
  EXPECT_EQ(CodeOf(s), ErrorCode::kInvalidArgument) << s;
}

TEST(HandshakeTest, ServerRejectsRandomBytes) {
  std::mt19937 rng(12345);
  std::string junk(256, '\0');
  for (char& ch : junk) ch = static_cast<char>(rng());
  junk[3] = static_cast<char>(0x80);  // make the "length" clearly over the limit
  absl::Status s = ServerAgainst([&](net::Fd& c) { WriteAll(c, junk); }, Soon());
  EXPECT_EQ(CodeOf(s), ErrorCode::kInvalidArgument) << s;
}

TEST(HandshakeTest, ServerRejectsUnparsableFrame) {
  absl::Status s = ServerAgainst(
      [](net::Fd& c) {
        ASSERT_TRUE(net::WriteFrame(c.get(), std::string(16, '\xff'), Soon()).ok());
      },
      Soon());
  EXPECT_EQ(CodeOf(s), ErrorCode::kInvalidArgument) << s;
}

TEST(HandshakeTest, ServerRejectsParsableButMalformedProof) {
  absl::Status s = ServerAgainst(
      [](net::Fd& c) {
        store::Proof proof;
        proof.set_client_nonce("short");
        proof.set_mac("short");
        ASSERT_TRUE(net::WriteFrame(c.get(), proof.SerializeAsString(), Soon()).ok());
      },
      Soon());
  EXPECT_EQ(CodeOf(s), ErrorCode::kInvalidArgument) << s;
}

TEST(HandshakeTest, ServerSeesTruncatedFrameAsPeerFailure) {
  absl::Status s = ServerAgainst(
      [](net::Fd& c) {
        WriteAll(c, LengthPrefix(100) + "only a few bytes");
        c.reset();
      },
      Soon());
  EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;
}

TEST(HandshakeTest, ServerTimesOutOnSilentClient) {
  const MonoTime start = MonoNow();
  absl::Status s = ServerAgainst([](net::Fd&) {}, MonoNow() + absl::Milliseconds(200));
  EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
  EXPECT_LT(MonoNow() - start, absl::Seconds(3));
}

// A server that does not know the token but pretends to accept anyone.
TEST(HandshakeTest, ClientDeniesImpostorServer) {
  Pair p = MakePair();
  std::thread impostor([&] {
    store::Hello hello;
    hello.set_magic("HCOMM");
    hello.set_version(1);
    hello.set_server_nonce(std::string(32, 'n'));
    ASSERT_TRUE(net::WriteFrame(p.a.get(), hello.SerializeAsString(), Soon()).ok());
    ASSERT_TRUE(net::ReadFrame(p.a.get(), 1024, Soon()).ok());
    store::Verdict verdict;
    verdict.set_accepted(true);
    verdict.set_mac(std::string(32, 'm'));
    ASSERT_TRUE(net::WriteFrame(p.a.get(), verdict.SerializeAsString(), Soon()).ok());
  });
  absl::Status s = HandshakeAsClient(p.b.get(), "tok", Soon());
  impostor.join();
  EXPECT_EQ(CodeOf(s), ErrorCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("could not prove"), absl::string_view::npos) << s;
}

TEST(HandshakeTest, ClientRejectsNonHcommServer) {
  Pair p = MakePair();
  ASSERT_TRUE(net::WriteFrame(p.a.get(), "HTTP/1.1 200 OK", Soon()).ok());
  absl::Status s = HandshakeAsClient(p.b.get(), "tok", Soon());
  EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;

  Pair q = MakePair();
  WriteAll(q.a, LengthPrefix(0xFFFFFFFFu));
  s = HandshakeAsClient(q.b.get(), "tok", Soon());
  EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;
}

TEST(HandshakeTest, ClientRejectsOtherVersion) {
  Pair p = MakePair();
  store::Hello hello;
  hello.set_magic("HCOMM");
  hello.set_version(2);
  hello.set_server_nonce(std::string(32, 'n'));
  ASSERT_TRUE(net::WriteFrame(p.a.get(), hello.SerializeAsString(), Soon()).ok());
  absl::Status s = HandshakeAsClient(p.b.get(), "tok", Soon());
  EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;
  EXPECT_NE(s.message().find("version 2"), absl::string_view::npos) << s;
}

TEST(HandshakeTest, ClientTimesOutOnSilentServer) {
  Pair p = MakePair();
  const MonoTime start = MonoNow();
  absl::Status s = HandshakeAsClient(p.b.get(), "tok", MonoNow() + absl::Milliseconds(200));
  EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
  EXPECT_LT(MonoNow() - start, absl::Seconds(3));
}

TEST(HandshakeTest, ClientSeesClosedConnectionAsPeerFailure) {
  Pair p = MakePair();
  p.a.reset();
  absl::Status s = HandshakeAsClient(p.b.get(), "tok", Soon());
  EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;
}

TEST(HandshakeTest, WorksOverTcp) {
  int port = 0;
  absl::StatusOr<net::Fd> lfd = net::Listen("127.0.0.1", port, &port);
  ASSERT_TRUE(lfd.ok()) << lfd.status();
  absl::Status server;
  std::thread t([&] {
    absl::StatusOr<net::Fd> c = net::Accept(lfd->get(), Soon());
    server = c.ok() ? HandshakeAsServer(c->get(), "tcp-token", Soon()) : c.status();
  });
  absl::StatusOr<net::Fd> fd = net::Connect(net::HostPort{"127.0.0.1", port}, Soon());
  ASSERT_TRUE(fd.ok()) << fd.status();
  absl::Status client = HandshakeAsClient(fd->get(), "tcp-token", Soon());
  t.join();
  EXPECT_TRUE(client.ok()) << client;
  EXPECT_TRUE(server.ok()) << server;
}

}  // namespace
}  // namespace hcomm
