#include "transports/tcp/tcp_transport.h"

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "core/base/clock.h"
#include "core/base/net.h"
#include "core/base/priority.h"
#include "core/base/status.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

class NoFrames : public FrameSink {
 public:
  void* OnFrame(int, const FrameMeta&, uint64_t) override {
    ADD_FAILURE() << "no frame expected";
    return nullptr;
  }
  void OnPayload(int, const FrameMeta&, uint64_t) override {}
  void OnConnectionLost(int, const absl::Status&) override {}
};

// A watched descriptor ends a blocking Poll (counted as an event) and is
// left for its owner to read; while it is not readable, Poll waits; a Poll
// that does not wait does not count it.
TEST(TcpTransportTest, WatchedFdEndsAWaitWithoutBeingRead) {
  NoFrames sink;
  TcpTransport t(0, 2, &sink);
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(t.WatchFd(fd));
  EXPECT_EQ(0, t.Poll(absl::ZeroDuration()));
  EXPECT_EQ(0, t.Poll(absl::Milliseconds(20)));  // nothing: the wait runs out
  uint64_t one = 1;
  ASSERT_EQ(8, write(fd, &one, sizeof one));
  // 0 would mean the 10 s ran out.
  EXPECT_EQ(1, t.Poll(absl::Seconds(10)));
  EXPECT_EQ(1, t.Poll(absl::Milliseconds(20)));  // still readable: not read
  // A poll that does not wait does not count it: a stale byte is no work.
  EXPECT_EQ(0, t.Poll(absl::ZeroDuration()));
  uint64_t got = 0;
  ASSERT_EQ(8, read(fd, &got, sizeof got));
  EXPECT_EQ(0, t.Poll(absl::ZeroDuration()));
  close(fd);
}

// Keeps every frame it is given (payloads into buffers of its own).
class Keep : public FrameSink {
 public:
  void* OnFrame(int peer, const FrameMeta&, uint64_t len) override {
    absl::MutexLock l(&mu_);
    bufs_.emplace_back(len, '\0');
    return bufs_.back().data();
  }
  void OnPayload(int peer, const FrameMeta& meta, uint64_t) override {
    absl::MutexLock l(&mu_);
    from_.push_back(peer);
    firsts_.push_back(meta.bytes[0]);
  }
  void OnConnectionLost(int, const absl::Status& s) override { ADD_FAILURE() << s; }
  std::vector<int> from() {
    absl::MutexLock l(&mu_);
    return from_;
  }
  // The first byte of each frame's meta, in the order the frames ended.
  std::vector<uint8_t> firsts() {
    absl::MutexLock l(&mu_);
    return firsts_;
  }
  std::string payload(size_t i) {
    absl::MutexLock l(&mu_);
    return bufs_[i];
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> bufs_;
  std::vector<int> from_;
  std::vector<uint8_t> firsts_;
};

// A connected pair of loopback TCP sockets.
std::pair<net::Fd, net::Fd> TcpPair() {
  int port = 0;
  auto l = net::Listen("127.0.0.1", 0, &port);
  EXPECT_TRUE(l.ok()) << l.status();
  const MonoTime deadline = MonoNow() + absl::Seconds(10);
  auto a = net::Connect(net::HostPort{"127.0.0.1", port}, deadline);
  EXPECT_TRUE(a.ok()) << a.status();
  auto b = net::Accept(l->get(), deadline);
  EXPECT_TRUE(b.ok()) << b.status();
  return {std::move(*a), std::move(*b)};
}

// Descriptors in every epoll set of this process (/proc/self/fdinfo).
int WatchedByEpoll() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (struct dirent* e = readdir(d)) {
    char link[64] = {0};
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(path.c_str(), link, sizeof link - 1) <= 0) continue;
    if (std::string(link) != "anon_inode:[eventpoll]") continue;
    std::ifstream info(std::string("/proc/self/fdinfo/") + e->d_name);
    for (std::string line; std::getline(info, line);) n += line.rfind("tfd:", 0) == 0;
  }
  closedir(d);
  return n;
}

// Rank 0 with `peers` peers, each another transport in this process.
struct Star {
  explicit Star(int peers) : hub(0, peers + 1, &hub_sink) {
    for (int j = 1; j <= peers; ++j) {
      auto [a, b] = TcpPair();
      EXPECT_TRUE(hub.AddConnection(j, std::move(a)).ok());
      leaf_sinks.push_back(std::make_unique<Keep>());
      leaves.push_back(std::make_unique<TcpTransport>(j, peers + 1, leaf_sinks.back().get()));
      EXPECT_TRUE(leaves.back()->AddConnection(0, std::move(b)).ok());
    }
  }
  Keep hub_sink;
  TcpTransport hub;
  std::vector<std::unique_ptr<Keep>> leaf_sinks;
  std::vector<std::unique_ptr<TcpTransport>> leaves;
};

// TakeWhole reads no further than the end of the longest frame its taker
// accepts: the frames behind stay in the socket for the next TakeWhole
// instead of going to the sink; a longer frame goes to the sink whole.
TEST(TcpTransportTest, TakeWholeLeavesTheNextFrameInTheSocket) {
  Star s(1);
  TcpTransport& leaf = *s.leaves[0];
  FrameMeta meta;
  memset(&meta, 3, sizeof meta);
  const std::string first = "first!!!", second = "second!!", long_one(100, 'L');
  for (const std::string* f : {&first, &second, &long_one}) {
    ASSERT_TRUE(leaf.TrySendNow(0, meta, f->data(), f->size()));
  }
  std::string got;
  auto take = [&](const FrameMeta&, const void* p, uint64_t len) {
    if (len > 8) return false;
    got.assign(static_cast<const char*>(p), len);
    return true;
  };
  // Loopback delivers within send(2); a frame still on its way would
  // only make a look below return 0, so look until something is there.
  auto take_one = [&] {
    const MonoTime deadline = MonoNow() + absl::Seconds(10);
    int r;
    while ((r = TakeWholeWith(s.hub, 1, 8, take)) == 0 && MonoNow() < deadline) {
    }
    return r;
  };
  EXPECT_EQ(1, take_one());
  EXPECT_EQ(first, got);
  EXPECT_EQ(1, take_one());
  EXPECT_EQ(second, got);
  EXPECT_TRUE(s.hub_sink.from().empty()) << "a frame behind the taken one went to the sink";
  EXPECT_EQ(-1, take_one());  // the long frame: refused, read on by Poll
  const MonoTime deadline = MonoNow() + absl::Seconds(10);
  while (s.hub_sink.from().empty() && MonoNow() < deadline) s.hub.Poll(absl::Milliseconds(10));
  ASSERT_EQ(std::vector<int>{1}, s.hub_sink.from());
  EXPECT_EQ(long_one, s.hub_sink.payload(0));
  EXPECT_EQ(0, TakeWholeWith(s.hub, 1, 8, take));
}

FrameMeta MetaStarting(uint8_t first) {
  FrameMeta meta;
  memset(&meta, 0, sizeof meta);
  meta.bytes[0] = first;
  return meta;
}

// A bytes pattern that shows a misplaced piece.
std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7919) >> 9);
  return s;
}

// A frame queued by a thread of a higher priority passes a large frame
// between two of its pieces, and the frames queued before it at its own
// priority; frames of one priority keep their order; the large frame
// arrives whole and in place.
TEST(TcpTransportTest, HigherPriorityPassesBetweenPieces) {
  Star s(1);
  const std::string bulk = Pattern(16 << 20), later = "queued after the bulk",
                    urgent = "urgent";
  std::atomic<int> sent{0};
  auto count = [&](absl::Status st) {
    EXPECT_TRUE(st.ok()) << st;
    ++sent;
  };
  s.hub.Send(1, MetaStarting(1), bulk.data(), bulk.size(), count);
  s.hub.Send(1, MetaStarting(2), later.data(), later.size(), count);
  ASSERT_EQ(0, sent.load()) << "the socket took 16 MiB at once";
  {
    PriorityScope scope(10);
    s.hub.Send(1, MetaStarting(3), urgent.data(), urgent.size(), count);
  }
  const MonoTime deadline = MonoNow() + absl::Seconds(30);
  while (s.leaf_sinks[0]->firsts().size() < 3 && MonoNow() < deadline) {
    s.hub.Poll(absl::ZeroDuration());
    s.leaves[0]->Poll(absl::Milliseconds(1));
  }
  EXPECT_EQ(3, sent.load());
  // The urgent frame ended first, though the bulk's first piece had begun.
  ASSERT_EQ((std::vector<uint8_t>{3, 1, 2}), s.leaf_sinks[0]->firsts());
  EXPECT_EQ(bulk, s.leaf_sinks[0]->payload(0));
  EXPECT_EQ(urgent, s.leaf_sinks[0]->payload(1));
  EXPECT_EQ(later, s.leaf_sinks[0]->payload(2));
}

// Remembers how the connection ended.
class Lost : public FrameSink {
 public:
  void* OnFrame(int, const FrameMeta&, uint64_t len) override {
    if (len > (1u << 20)) return nullptr;  // never allocate what a bad header claims
    buf_.assign(len, '\0');
    return buf_.data();
  }
  void OnPayload(int, const FrameMeta&, uint64_t) override { ++frames; }
  void OnConnectionLost(int, const absl::Status& s) override {
    absl::MutexLock l(&mu);
    why = s;
  }
  std::string why_text() {
    absl::MutexLock l(&mu);
    return std::string(why.message());
  }
  int frames = 0;
  absl::Mutex mu;
  absl::Status why;

 private:
  std::string buf_;
};

// The wire header as the transport writes it (tcp_transport.cc).
struct RawHeader {
  uint32_t magic = 0x464d4348;
  uint32_t piece;
  uint64_t payload_len;
  uint64_t piece_len;
  FrameMeta meta;
};

// Frames in pieces that do not add up, or too many of them at once, end
// the connection as malformed instead of growing the receiver's state or
// writing past a frame's end.
TEST(TcpTransportTest, BadPiecesEndTheConnection) {
  struct Case {
    const char* name;
    std::vector<RawHeader> headers;
    const char* says;
  };
  const uint64_t big = TcpTransport::kPieceBytes + 1;
  std::vector<RawHeader> many;
  for (uint32_t id = 1; id <= 65; ++id) many.push_back({0x464d4348, id, big, 1, {}});
  const std::vector<Case> cases = {
      {"a piece past the end",
       {{0x464d4348, 5, big, 4096, {}}, {0x464d4348, 5, big, TcpTransport::kPieceBytes, {}}},
       "past its frame's end"},
      {"whole frame, lengths differ", {{0x464d4348, 0, 10, 4, {}}}, "lengths differ"},
      {"a small frame in pieces", {{0x464d4348, 9, 100, 10, {}}}, "bad size"},
      {"too many at once", many, "too many frames in pieces"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Lost sink;
    TcpTransport t(0, 2, &sink);
    auto [a, b] = TcpPair();
    ASSERT_TRUE(t.AddConnection(1, std::move(a)).ok());
    for (const RawHeader& h : c.headers) {
      std::string frame(reinterpret_cast<const char*>(&h), sizeof h);
      frame.append(h.piece_len <= 4096 ? h.piece_len : 0, 'p');
      ASSERT_EQ(static_cast<ssize_t>(frame.size()), write(b.get(), frame.data(), frame.size()));
    }
    const MonoTime deadline = MonoNow() + absl::Seconds(10);
    while (sink.why_text().empty() && MonoNow() < deadline) t.Poll(absl::Milliseconds(10));
    EXPECT_NE(std::string::npos, sink.why_text().find(c.says)) << sink.why_text();
    EXPECT_EQ(0, sink.frames);
  }
}

class TcpWaitTest : public testing::TestWithParam<int> {};

// With few connections the sockets join the epoll set when a Poll sleeps
// and leave it after a run of Polls that do not (a socket there costs every
// packet a wake-up callback); with more, they stay. Either way a sleeping
// Poll wakes for a frame that arrives, and for room in a socket that a
// queued frame waits for.
TEST_P(TcpWaitTest, SleepingPollWakesForDataAndForRoom) {
  const int peers = GetParam();
  Star s(peers);
  const bool lazy = peers <= static_cast<int>(TcpTransport::kLazyMaxConns);
  // Polls that do not wait, enough for every transport to leave its set.
  auto spin = [&] {
    for (uint32_t i = 0; i < TcpTransport::kHotLooks; ++i) {
      s.hub.Poll(absl::ZeroDuration());
      for (auto& leaf : s.leaves) leaf->Poll(absl::ZeroDuration());
    }
  };
  EXPECT_EQ(0, s.hub.Poll(absl::ZeroDuration()));
  EXPECT_EQ(lazy ? 0 : peers, WatchedByEpoll());
  EXPECT_EQ(0, s.hub.Poll(absl::Milliseconds(5)));
  EXPECT_EQ(peers, WatchedByEpoll());
  spin();
  EXPECT_EQ(lazy ? 0 : peers, WatchedByEpoll());

  // A frame sent while the hub sleeps ends its sleep (a Poll returns at
  // most after 1 s; 0 would mean it slept through).
  FrameMeta meta;
  memset(&meta, 7, sizeof meta);
  const std::string hello = "hello from the last peer";
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(s.leaves.back()->TrySendNow(0, meta, hello.data(), hello.size()));
  });
  EXPECT_GE(s.hub.Poll(absl::Seconds(10)), 1);
  late.join();
  ASSERT_EQ(std::vector<int>{peers}, s.hub_sink.from());
  EXPECT_EQ(hello, s.hub_sink.payload(0));
  spin();
  EXPECT_EQ(lazy ? 0 : peers, WatchedByEpoll());

  // A frame larger than the sockets hold waits in the hub's queue; the
  // peer drains it after a while, and each of the hub's sleeping Polls
  // must end with the room that makes (none may run out).
  const std::string big(32 << 20, 'x');
  std::atomic<bool> sent{false};
  s.hub.Send(1, meta, big.data(), big.size(), [&](absl::Status st) {
    EXPECT_TRUE(st.ok()) << st;
    sent = true;
  });
  ASSERT_FALSE(sent.load()) << "the sockets took 32 MiB at once";
  std::atomic<bool> stop{false};
  std::thread drain([&] {
    absl::SleepFor(absl::Milliseconds(100));
    while (!stop.load()) s.leaves[0]->Poll(absl::Milliseconds(10));
  });
  int slept_through = 0;
  const MonoTime deadline = MonoNow() + absl::Seconds(30);
  while (!sent.load() && MonoNow() < deadline) {
    if (s.hub.Poll(absl::Seconds(10)) == 0) ++slept_through;
  }
  stop = true;
  drain.join();
  EXPECT_TRUE(sent.load());
  EXPECT_EQ(0, slept_through);
  // `sent` says the last bytes left the hub for its socket, not that the
  // peer read them: the drain may have stopped just before.
  for (const MonoTime end = MonoNow() + absl::Seconds(10);
       s.leaf_sinks[0]->from().empty() && MonoNow() < end;) {
    s.leaves[0]->Poll(absl::Milliseconds(10));
  }
  ASSERT_EQ(std::vector<int>{0}, s.leaf_sinks[0]->from());
  EXPECT_EQ(big, s.leaf_sinks[0]->payload(0));
  spin();
  EXPECT_EQ(lazy ? 0 : peers, WatchedByEpoll());
}

INSTANTIATE_TEST_SUITE_P(FewAndMany, TcpWaitTest,
                         testing::Values(1, static_cast<int>(TcpTransport::kLazyMaxConns) + 1));


// Keepalive and TCP_USER_TIMEOUT follow the communicator's timeout: a dead
// peer is noticed within about min(timeout, kMaxDeadPeer), never sooner
// than a second (the kernel counts keepalive in whole seconds).
TEST(TcpLinkOptionsTest, FollowTheTimeout) {
  struct Case {
    absl::Duration timeout;
    TcpLinkOptions want;
  };
  const std::vector<Case> cases = {
      {absl::Minutes(5), {5, 1, 5, 10000}},        // the default timeout_ms
      {absl::InfiniteDuration(), {5, 1, 5, 10000}},
      {absl::Seconds(10), {5, 1, 5, 10000}},
      {absl::Seconds(4), {2, 1, 2, 4000}},
      {absl::Milliseconds(1500), {1, 1, 1, 1500}},
      {absl::Milliseconds(100), {1, 1, 1, 1000}},
      {absl::ZeroDuration(), {1, 1, 1, 1000}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::FormatDuration(c.timeout));
    const TcpLinkOptions got = TcpLinkOptions::For(c.timeout);
    EXPECT_EQ(c.want.keepidle_s, got.keepidle_s);
    EXPECT_EQ(c.want.keepintvl_s, got.keepintvl_s);
    EXPECT_EQ(c.want.keepcnt, got.keepcnt);
    EXPECT_EQ(c.want.user_timeout_ms, got.user_timeout_ms);
  }
}

int SockOpt(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  EXPECT_EQ(0, getsockopt(fd, level, name, &v, &len)) << strerror(errno);
  return v;
}

// A connection the transport takes over carries the options derived from
// the timeout it was made with (read back through a duplicate descriptor,
// which shares the socket).
TEST(TcpLinkOptionsTest, AddConnectionSetsThemOnTheSocket) {
  NoFrames sink;
  TcpTransport t(0, 2, &sink, absl::Seconds(4));
  auto [a, b] = TcpPair();
  net::Fd seen(dup(a.get()));
  ASSERT_TRUE(seen.valid());
  ASSERT_TRUE(t.AddConnection(1, std::move(a)).ok());
  EXPECT_EQ(1, SockOpt(seen.get(), SOL_SOCKET, SO_KEEPALIVE));
  EXPECT_EQ(2, SockOpt(seen.get(), IPPROTO_TCP, TCP_KEEPIDLE));
  EXPECT_EQ(1, SockOpt(seen.get(), IPPROTO_TCP, TCP_KEEPINTVL));
  EXPECT_EQ(2, SockOpt(seen.get(), IPPROTO_TCP, TCP_KEEPCNT));
  EXPECT_EQ(4000, SockOpt(seen.get(), IPPROTO_TCP, TCP_USER_TIMEOUT));
}

// A setsockopt that fails is reported, naming the option, not ignored.
TEST(TcpLinkOptionsTest, AFailedOptionIsReported) {
  const TcpLinkOptions o = TcpLinkOptions::For(absl::Seconds(4));
  int p[2];
  ASSERT_EQ(0, pipe(p));
  net::Fd r(p[0]), w(p[1]);
  absl::Status st = ApplyLinkOptions(r.get(), o);  // not a socket at all
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string::npos, st.message().find("SO_KEEPALIVE")) << st;
  int u[2];
  ASSERT_EQ(0, socketpair(AF_UNIX, SOCK_STREAM, 0, u));
  net::Fd u0(u[0]), u1(u[1]);
  st = ApplyLinkOptions(u0.get(), o);  // a socket, but not TCP
  EXPECT_FALSE(st.ok());
  EXPECT_NE(std::string::npos, st.message().find("TCP_KEEPIDLE")) << st;
}

// A header no sender writes fails the peer at once, naming it and what was
// wrong, instead of reading (and dropping) the bytes behind it as payload:
// the valid frame written after it is never delivered.
TEST(TcpTransportTest, CorruptHeadersFailThePeerAtOnce) {
  struct Case {
    const char* name;
    std::vector<RawHeader> headers;
    const char* says;
  };
  const uint64_t piece = TcpTransport::kPieceBytes;
  const std::vector<Case> cases = {
      {"bad magic", {{0x12345678, 0, 8, 8, {}}}, "bad magic"},
      // Whole frames are at most kPieceBytes (larger ones move in pieces):
      // this length would swallow everything that follows.
      {"whole frame of an impossible length", {{0x464d4348, 0, 1ull << 40, 1ull << 40, {}}},
       "larger than"},
      {"whole frame one byte over a piece", {{0x464d4348, 0, piece + 1, piece + 1, {}}},
       "larger than"},
      {"a later piece larger than a piece",
       {{0x464d4348, 7, 4 * piece, 1, {}}, {0x464d4348, 7, 4 * piece, piece + 1, {}}},
       "larger than"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Lost sink;
    TcpTransport t(0, 2, &sink);
    auto [a, b] = TcpPair();
    ASSERT_TRUE(t.AddConnection(1, std::move(a)).ok());
    std::string wire;
    for (const RawHeader& h : c.headers) {
      wire.append(reinterpret_cast<const char*>(&h), sizeof h);
      wire.append(h.piece_len <= 4096 ? h.piece_len : 0, 'p');
    }
    RawHeader good{0x464d4348, 0, 3, 3, {}};  // a valid frame behind the bad one
    wire.append(reinterpret_cast<const char*>(&good), sizeof good);
    wire.append("abc");
    ASSERT_EQ(static_cast<ssize_t>(wire.size()), write(b.get(), wire.data(), wire.size()));
    const MonoTime t0 = MonoNow();
    while (sink.why_text().empty() && MonoNow() < t0 + absl::Seconds(5)) {
      t.Poll(absl::Milliseconds(10));
    }
    EXPECT_LT(MonoNow() - t0, absl::Seconds(2)) << "the peer was not failed promptly";
    const std::string why = sink.why_text();
    EXPECT_NE(std::string::npos, why.find("rank 1 sent a malformed frame")) << why;
    EXPECT_NE(std::string::npos, why.find(c.says)) << why;
    {
      absl::MutexLock l(&sink.mu);
      EXPECT_EQ(CodeOf(sink.why), ErrorCode::kPeerFailure) << sink.why;
    }
    EXPECT_EQ(0, sink.frames);
  }
}

}  // namespace
}  // namespace hcomm
