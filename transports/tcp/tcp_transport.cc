#include "transports/tcp/tcp_transport.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/priority.h"
#include "core/base/status.h"

namespace hcomm {
namespace {

constexpr uint32_t kMagic = 0x464d4348;  // "HCMF"
// epoll's tag for a WatchFd descriptor (connections are tagged by peer).
constexpr uint32_t kWatchedFd = UINT32_MAX;
constexpr size_t kStageBytes = 256 * 1024;
// Payload bytes still due above which the rest is read straight into the
// destination instead of through the staging buffer.
constexpr size_t kDirectReadMin = 16 * 1024;
// While a header is due, a connection whose last frame with a payload was
// large (kLargeFrame or more: rendezvous data) reads at most
// kLargeStageRead through the staging buffer, so that the rest of the next
// large payload goes straight into its destination once the header has
// named it, instead of into the stage and then copied out. Any other
// connection reads up to kStageBytes: a run of small frames in one recv,
// each handed over whole (small reads everywhere made medium eager frames,
// read in two pieces, slower; measured: docs/performance.md, "TCP: reading
// after a large frame"). Header-only frames do not change the mode.
constexpr size_t kLargeFrame = 128 * 1024;
constexpr size_t kLargeStageRead = 36 * 1024;
constexpr int kMaxIov = 64;
// A frame whose payload is at most this many bytes leaves TrySendNow as one
// contiguous buffer through send(2): the kernel takes two pieces through
// sendmsg more slowly than one copied buffer, which costs about what a bare
// send of the payload does (measured: docs/performance.md, "TCP: small
// frames in one send").
constexpr size_t kGatherBytes = 1024;

// Frames of more than kPieceBytes move in pieces (tcp_transport.h).
constexpr size_t kPieceBytes = TcpTransport::kPieceBytes;
// A receiver keeps at most this many frames between their pieces (a frame
// is left between two pieces only for frames of a higher priority), and a
// sender opens at most kMostOpen: past that a frame in pieces waits for
// those in the way to end rather than pass them.
constexpr size_t kMostPartial = 64;
constexpr size_t kMostOpen = 16;

// Before every frame, or every piece of a frame that moves in pieces.
struct WireHeader {
  uint32_t magic;
  // 0: the whole frame follows. Otherwise the sender's number (on this
  // connection) of a frame that moves in pieces, whose pieces come in
  // order, perhaps with other frames between them.
  uint32_t piece;
  uint64_t payload_len;  // the frame's whole payload
  uint64_t piece_len;    // payload bytes after this header
  FrameMeta meta;
};
static_assert(sizeof(WireHeader) == 24 + kFrameMetaBytes, "wire header has no padding");
// Lazy mode hands poll(2)'s revents to the code that reads epoll's events.
static_assert(POLLIN == EPOLLIN && POLLOUT == EPOLLOUT && POLLRDHUP == EPOLLRDHUP &&
                  POLLHUP == EPOLLHUP && POLLERR == EPOLLERR,
              "poll and epoll share their event bits");

using Completions = std::vector<std::pair<SendCallback, absl::Status>>;

void RunCompletions(Completions* done) {
  for (auto& [cb, st] : *done) {
    if (cb) cb(st);
  }
  done->clear();
}

absl::Status SetIntOption(int fd, int level, int name, const char* what, int value) {
  if (::setsockopt(fd, level, name, &value, sizeof value) == 0) return absl::OkStatus();
  return Internal(absl::StrCat("setsockopt(", what, "=", value, ") on the connection: ",
                               strerror(errno)));
}

// The congestion control of a connection between ranks. BBR, the host
// default on many machines, paces a connection at the bandwidth it has
// estimated; between ranks over loopback that slowed bulk transfers against
// a loss-based controller (measured: docs/performance.md, "TCP: congestion
// control"). HCOMM_TCP_CONGESTION names another (as in
// /proc/sys/net/ipv4/tcp_available_congestion_control), or `system` for the
// host's default. Unset: cubic, else reno (which every unprivileged process
// may choose), else the host's default.
absl::Status SetCongestion(int fd) {
  const char* env = getenv("HCOMM_TCP_CONGESTION");
  const bool asked = env != nullptr && *env != '\0';
  if (asked && strcmp(env, "system") == 0) return absl::OkStatus();
  for (const char* name : {asked ? env : "cubic", asked ? nullptr : "reno"}) {
    if (name == nullptr) break;
    if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, strlen(name)) == 0) {
      return absl::OkStatus();
    }
  }
  if (!asked) return absl::OkStatus();
  return InvalidArgument(absl::StrCat("HCOMM_TCP_CONGESTION=", env,
                                      ": the kernel refused this congestion control (",
                                      strerror(errno), "); `system` keeps the host's default"));
}

}  // namespace

TcpLinkOptions TcpLinkOptions::For(absl::Duration timeout) {
  const absl::Duration bound = std::clamp(timeout, kMinDeadPeer, kMaxDeadPeer);
  // Keepalive counts whole seconds: half the bound quiet, then a probe a
  // second until the bound, so an idle link to a vanished host ends then.
  const int secs = static_cast<int>(absl::ToInt64Seconds(bound));
  TcpLinkOptions o;
  o.keepidle_s = std::max(1, secs / 2);
  o.keepintvl_s = 1;
  o.keepcnt = std::max(1, secs - o.keepidle_s);
  o.user_timeout_ms = static_cast<unsigned int>(absl::ToInt64Milliseconds(bound));
  return o;
}

absl::Status ApplyLinkOptions(int fd, const TcpLinkOptions& o) {
  HCOMM_RETURN_IF_ERROR(SetIntOption(fd, SOL_SOCKET, SO_KEEPALIVE, "SO_KEEPALIVE", 1));
  HCOMM_RETURN_IF_ERROR(SetIntOption(fd, IPPROTO_TCP, TCP_KEEPIDLE, "TCP_KEEPIDLE", o.keepidle_s));
  HCOMM_RETURN_IF_ERROR(
      SetIntOption(fd, IPPROTO_TCP, TCP_KEEPINTVL, "TCP_KEEPINTVL", o.keepintvl_s));
  HCOMM_RETURN_IF_ERROR(SetIntOption(fd, IPPROTO_TCP, TCP_KEEPCNT, "TCP_KEEPCNT", o.keepcnt));
  return SetIntOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, "TCP_USER_TIMEOUT",
                      static_cast<int>(o.user_timeout_ms));
}

struct TcpTransport::OutFrame {
  FrameHandle handle = 0;
  int priority = 0;  // of the thread that queued it
  WireHeader hdr;    // of the piece being written (the frame, when whole)
  const char* payload = nullptr;
  size_t len = 0;
  size_t pos = 0;  // payload bytes of the pieces written before this one
  size_t off = 0;  // bytes of this piece's header + payload already written
  std::unique_ptr<char[]> owned;  // set when Cancel had to keep the payload
  SendCallback done;
  size_t total() const { return sizeof(WireHeader) + hdr.piece_len; }
  // Whether a frame queued later may go before this one: nothing of its
  // current piece has left.
  bool at_boundary() const { return off == 0; }
};

struct TcpTransport::Conn {
  int peer = -1;
  net::Fd fd;

  absl::Mutex send_mu;
  std::deque<OutFrame> queue ABSL_GUARDED_BY(send_mu);
  uint32_t next_piece_id ABSL_GUARDED_BY(send_mu) = 0;
  // Frames in pieces whose first piece has left and whose last has not.
  size_t open ABSL_GUARDED_BY(send_mu) = 0;
  // Whether writability matters (frames queued); written under send_mu,
  // read by lazy mode's poll(2) without it.
  std::atomic<bool> out_armed{false};
  bool in_epoll ABSL_GUARDED_BY(send_mu) = false;
  bool close_write ABSL_GUARDED_BY(send_mu) = false;
  bool write_closed ABSL_GUARDED_BY(send_mu) = false;
  bool dead ABSL_GUARDED_BY(send_mu) = false;
  absl::Status death ABSL_GUARDED_BY(send_mu);
  std::atomic<bool> lost_reported{false};
  std::atomic<bool> dead_hint{false};

  absl::Mutex recv_mu;
  std::unique_ptr<char[]> stage ABSL_GUARDED_BY(recv_mu);
  size_t hdr_got ABSL_GUARDED_BY(recv_mu) = 0;
  WireHeader rx_hdr ABSL_GUARDED_BY(recv_mu);
  // The payload being read: a whole frame's, or one piece's.
  bool in_payload ABSL_GUARDED_BY(recv_mu) = false;
  char* rx_dst ABSL_GUARDED_BY(recv_mu) = nullptr;  // where this piece's bytes go
  uint64_t rx_off ABSL_GUARDED_BY(recv_mu) = 0;
  uint64_t rx_len ABSL_GUARDED_BY(recv_mu) = 0;
  // Frames arriving in pieces; rx_partial indexes the one being read, -1
  // while a whole frame is.
  struct Partial {
    uint32_t piece;
    FrameMeta meta;
    char* dst;  // nullptr: discarded
    uint64_t len;
    uint64_t got;
  };
  std::vector<Partial> partial ABSL_GUARDED_BY(recv_mu);
  int rx_partial ABSL_GUARDED_BY(recv_mu) = -1;
  bool large_frames ABSL_GUARDED_BY(recv_mu) = false;  // see kLargeFrame
};

TcpTransport::TcpTransport(int self, int world_size, FrameSink* sink, absl::Duration timeout)
    : self_(self), sink_(sink), link_options_(TcpLinkOptions::For(timeout)), conns_(world_size) {
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
}

TcpTransport::~TcpTransport() {
  if (epfd_ >= 0) ::close(epfd_);
}

absl::Status TcpTransport::AddConnection(int peer, net::Fd fd) {
  if (peer < 0 || peer >= static_cast<int>(conns_.size()) || peer == self_) {
    return InvalidArgument(absl::StrCat("tcp: bad peer ", peer));
  }
  if (epfd_ < 0) return Internal(absl::StrCat("epoll_create1: ", strerror(errno)));
  HCOMM_RETURN_IF_ERROR(net::SetNonBlocking(fd.get()));
  HCOMM_RETURN_IF_ERROR(net::SetNoDelay(fd.get()));
  HCOMM_RETURN_IF_ERROR(Annotate(ApplyLinkOptions(fd.get(), link_options_),
                                  absl::StrCat("tcp: connection to rank ", peer)));
  HCOMM_RETURN_IF_ERROR(SetCongestion(fd.get()));
  // At most about a piece not yet sent in the kernel (see the header). A
  // kernel without the option (ENOPROTOOPT) only keeps more queued: not
  // worth failing; any other refusal is.
  const int lowat = static_cast<int>(kPieceBytes);
  if (::setsockopt(fd.get(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat) != 0 &&
      errno != ENOPROTOOPT) {
    return Internal(absl::StrCat("tcp: connection to rank ", peer, ": setsockopt(TCP_NOTSENT_LOWAT=",
                                 lowat, "): ", strerror(errno)));
  }
  auto c = std::make_unique<Conn>();
  c->peer = peer;
  c->fd = std::move(fd);
  {
    absl::MutexLock l(&c->recv_mu);
    c->stage.reset(new char[kStageBytes]);
  }
  Conn* added = c.get();
  conns_[peer] = std::move(c);
  added_.push_back(added);
  if (lazy_ && added_.size() <= kLazyMaxConns) return absl::OkStatus();
  // Too many for poll(2) on every look: all stay in the epoll set.
  lazy_ = false;
  for (Conn* a : added_) {
    absl::MutexLock l(&a->send_mu);
    if (!SetWatchedLocked(a, true)) return Internal(absl::StrCat("epoll_ctl: ", strerror(errno)));
  }
  return absl::OkStatus();
}

namespace {

struct epoll_event Interest(int peer, bool out) {
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN | EPOLLRDHUP | (out ? EPOLLOUT : 0);
  ev.data.u32 = static_cast<uint32_t>(peer);
  return ev;
}

}  // namespace

bool TcpTransport::SetWatchedLocked(Conn* c, bool on) {
  if (on == c->in_epoll || (on && c->dead)) return c->in_epoll;
  if (on) {
    struct epoll_event ev = Interest(c->peer, c->out_armed.load(std::memory_order_relaxed));
    c->in_epoll = ::epoll_ctl(epfd_, EPOLL_CTL_ADD, c->fd.get(), &ev) == 0;
  } else {
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, c->fd.get(), nullptr);
    c->in_epoll = false;
  }
  return c->in_epoll;
}

void TcpTransport::SetWatched(Conn* c, bool on) {
  absl::MutexLock l(&c->send_mu);
  SetWatchedLocked(c, on);
}

bool TcpTransport::TrySendNow(int peer, const FrameMeta& meta, const void* payload, size_t len) {
  if (peer < 0 || peer >= static_cast<int>(conns_.size()) || conns_[peer] == nullptr) return false;
  Conn* c = conns_[peer].get();
  absl::MutexLock l(&c->send_mu);
  if (c->dead || c->close_write || !c->queue.empty() || len > kPieceBytes) return false;
  WireHeader hdr;
  hdr.magic = kMagic;
  hdr.piece = 0;
  hdr.payload_len = len;
  hdr.piece_len = len;
  hdr.meta = meta;
  ssize_t w;
  if (len <= kGatherBytes) {
    // One buffer and send(2): sendmsg's message header and iovec array
    // cost more to bring into the kernel than copying a small frame here.
    char frame[sizeof hdr + kGatherBytes];
    memcpy(frame, &hdr, sizeof hdr);
    if (len > 0) memcpy(frame + sizeof hdr, payload, len);
    do {
      w = ::send(c->fd.get(), frame, sizeof hdr + len, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (w < 0 && errno == EINTR);
  } else {
    struct iovec iov[2] = {{&hdr, sizeof hdr}, {const_cast<void*>(payload), len}};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    do {
      w = ::sendmsg(c->fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (w < 0 && errno == EINTR);
  }
  if (w <= 0) return false;  // full, or broken: Send queues it or reports why
  const size_t total = sizeof hdr + len;
  if (static_cast<size_t>(w) == total) return true;
  // Part of it left: keep the rest (header included) for Poll to finish.
  c->queue.emplace_back();
  OutFrame& f = c->queue.back();
  f.handle = next_handle_.fetch_add(1, std::memory_order_relaxed);
  f.priority = ThreadPriority();
  f.hdr = hdr;
  f.len = len;
  f.off = static_cast<size_t>(w);
  f.payload = static_cast<const char*>(payload);
  KeepPayload(f);
  pending_.fetch_add(1, std::memory_order_relaxed);
  UpdateInterestLocked(c);
  return true;
}

FrameHandle TcpTransport::Send(int peer, const FrameMeta& meta, const void* payload, size_t len,
                               SendCallback done) {
  Conn* c = conns_[peer].get();
  FrameHandle h = next_handle_.fetch_add(1, std::memory_order_relaxed);
  Completions completions;
  absl::Status dead_status;
  bool failed = false;
  {
    absl::MutexLock l(&c->send_mu);
    if (c->dead || c->close_write) {
      failed = true;
      dead_status = c->dead ? c->death
                            : PeerFailure(absl::StrCat("connection to rank ", peer, " is closing"));
    } else {
      // Behind every frame of its priority or a higher one, and behind a
      // frame whose current piece has begun to leave; ahead of the rest.
      const int priority = ThreadPriority();
      auto at = c->queue.end();
      const bool opens = len > kPieceBytes;  // passing a frame between pieces opens another
      while (at != c->queue.begin()) {
        auto before = std::prev(at);
        if (before->priority >= priority || !before->at_boundary()) break;
        if (opens && before->pos > 0 && c->open >= kMostOpen) break;
        at = before;
      }
      OutFrame& f = *c->queue.emplace(at);
      f.handle = h;
      f.priority = priority;
      f.hdr.magic = kMagic;
      f.hdr.piece = 0;
      f.hdr.payload_len = len;
      f.hdr.piece_len = len;
      f.hdr.meta = meta;
      if (len > kPieceBytes) {
        f.hdr.piece = ++c->next_piece_id == 0 ? ++c->next_piece_id : c->next_piece_id;
        f.hdr.piece_len = kPieceBytes;
      }
      f.payload = static_cast<const char*>(payload);
      f.len = len;
      f.done = std::move(done);
      pending_.fetch_add(1, std::memory_order_relaxed);
      if (c->queue.size() == 1) FlushLocked(c, &completions);
      UpdateInterestLocked(c);
    }
  }
  if (failed) {
    if (done) done(dead_status);
    return h;
  }
  RunCompletions(&completions);
  if (c->dead_hint.load()) {
    absl::Status why;
    {
      absl::MutexLock l(&c->send_mu);
      why = c->death;
    }
    MarkDead(c, why);
  }
  return h;
}

void TcpTransport::FlushLocked(Conn* c, Completions* done) {
  while (!c->queue.empty() && !c->dead) {
    struct iovec iov[kMaxIov];
    int n = 0;
    for (auto it = c->queue.begin(); it != c->queue.end() && n + 2 <= kMaxIov; ++it) {
      const OutFrame& f = *it;
      const char* piece = f.payload + f.pos;
      if (f.off < sizeof(WireHeader)) {
        iov[n].iov_base = const_cast<char*>(reinterpret_cast<const char*>(&f.hdr)) + f.off;
        iov[n].iov_len = sizeof(WireHeader) - f.off;
        ++n;
        if (f.hdr.piece_len > 0) {
          iov[n].iov_base = const_cast<char*>(piece);
          iov[n].iov_len = f.hdr.piece_len;
          ++n;
        }
      } else {
        size_t poff = f.off - sizeof(WireHeader);
        iov[n].iov_base = const_cast<char*>(piece) + poff;
        iov[n].iov_len = f.hdr.piece_len - poff;
        ++n;
      }
      // A frame in pieces ends the write at the end of its piece: what goes
      // next is decided then, when a frame queued meanwhile may pass it.
      if (f.hdr.piece != 0) break;
    }
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t w = ::sendmsg(c->fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      c->dead = true;
      c->dead_hint = true;
      c->death = PeerFailure(
          absl::StrCat("connection to rank ", c->peer, " broke while sending: ", strerror(errno)));
      return;
    }
    size_t left = static_cast<size_t>(w);
    while (left > 0 && !c->queue.empty()) {
      OutFrame& f = c->queue.front();
      size_t need = f.total() - f.off;
      if (left < need) {
        f.off += left;
        break;
      }
      left -= need;
      const bool was_open = f.pos > 0;
      f.pos += f.hdr.piece_len;
      if (f.pos < f.len) {  // the next piece, behind frames of higher priorities queued since
        if (!was_open) ++c->open;
        f.off = 0;
        f.hdr.piece_len = std::min(kPieceBytes, f.len - f.pos);
        if (c->queue.size() > 1 && c->queue[1].priority > f.priority && c->open < kMostOpen) {
          OutFrame paused = std::move(f);
          c->queue.pop_front();
          auto at = c->queue.begin();
          while (at != c->queue.end() && at->priority > paused.priority) ++at;
          c->queue.insert(at, std::move(paused));
        }
        continue;
      }
      if (was_open) --c->open;
      done->emplace_back(std::move(f.done), absl::OkStatus());
      c->queue.pop_front();
      pending_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  if (c->queue.empty() && c->close_write && !c->write_closed) {
    ::shutdown(c->fd.get(), SHUT_WR);
    c->write_closed = true;
  }
}

void TcpTransport::UpdateInterestLocked(Conn* c) {
  bool want = !c->queue.empty() && !c->dead;
  if (want == c->out_armed.load(std::memory_order_relaxed)) return;
  c->out_armed.store(want, std::memory_order_relaxed);
  if (!c->in_epoll) return;
  struct epoll_event ev = Interest(c->peer, want);
  ::epoll_ctl(epfd_, EPOLL_CTL_MOD, c->fd.get(), &ev);
}

void TcpTransport::HandleWritable(Conn* c) {
  Completions completions;
  {
    absl::MutexLock l(&c->send_mu);
    FlushLocked(c, &completions);
    UpdateInterestLocked(c);
  }
  RunCompletions(&completions);
  if (c->dead_hint.load()) {
    absl::Status why;
    {
      absl::MutexLock l(&c->send_mu);
      why = c->death;
    }
    MarkDead(c, why);
  }
}

bool TcpTransport::Cancel(int peer, FrameHandle handle) {
  Conn* c = conns_[peer].get();
  absl::MutexLock l(&c->send_mu);
  for (auto it = c->queue.begin(); it != c->queue.end(); ++it) {
    if (it->handle != handle) continue;
    if (it->off == 0 && it->pos == 0) {
      c->queue.erase(it);
      pending_.fetch_sub(1, std::memory_order_relaxed);
      UpdateInterestLocked(c);
      return true;
    }
    KeepPayload(*it);
    return false;
  }
  return false;  // already sent
}

absl::Status TcpTransport::BeginPayload(Conn* c) {
  const WireHeader& h = c->rx_hdr;
  auto malformed = [c](const char* why) {
    return PeerFailure(absl::StrCat("rank ", c->peer, " sent a malformed frame (", why, ")"));
  };
  if (h.magic != kMagic) return malformed("bad magic");
  // No sender writes more than a piece after one header (a larger frame
  // moves in pieces): a length beyond it is corrupt, and reading it would
  // swallow the frames behind it as payload.
  if (h.piece_len > kPieceBytes) {
    return PeerFailure(absl::StrCat("rank ", c->peer, " sent a malformed frame (", h.piece_len,
                                    " bytes after one header, larger than the ", kPieceBytes,
                                    " any sender writes)"));
  }
  if (h.payload_len > 0) c->large_frames = h.payload_len >= kLargeFrame;
  c->rx_off = 0;
  c->rx_len = h.piece_len;
  if (h.piece == 0) {
    if (h.piece_len != h.payload_len) return malformed("a whole frame's lengths differ");
    c->rx_partial = -1;
    c->rx_dst = static_cast<char*>(sink_->OnFrame(c->peer, h.meta, h.payload_len));
    if (h.payload_len == 0) {
      sink_->OnPayload(c->peer, h.meta, 0);
      return absl::OkStatus();
    }
    c->in_payload = true;
    return absl::OkStatus();
  }
  size_t i = 0;
  while (i < c->partial.size() && c->partial[i].piece != h.piece) ++i;
  if (i == c->partial.size()) {  // its first piece
    if (c->partial.size() >= kMostPartial) return malformed("too many frames in pieces at once");
    if (h.piece_len == 0 || h.piece_len > kPieceBytes || h.payload_len <= kPieceBytes) {
      return malformed("a first piece of a bad size");
    }
    char* dst = static_cast<char*>(sink_->OnFrame(c->peer, h.meta, h.payload_len));
    c->partial.push_back({h.piece, h.meta, dst, h.payload_len, 0});
  }
  Conn::Partial& p = c->partial[i];
  if (h.piece_len == 0 || h.piece_len > p.len - p.got) return malformed("a piece past its frame's end");
  c->rx_partial = static_cast<int>(i);
  c->rx_dst = p.dst == nullptr ? nullptr : p.dst + p.got;
  c->in_payload = true;
  return absl::OkStatus();
}

void TcpTransport::EndPayload(Conn* c) {
  c->in_payload = false;
  if (c->rx_partial < 0) {
    sink_->OnPayload(c->peer, c->rx_hdr.meta, c->rx_len);
    return;
  }
  Conn::Partial& p = c->partial[c->rx_partial];
  p.got += c->rx_len;
  c->rx_partial = -1;
  if (p.got < p.len) return;
  const FrameMeta meta = p.meta;
  const uint64_t len = p.len;
  p = c->partial.back();
  c->partial.pop_back();
  sink_->OnPayload(c->peer, meta, len);
}

absl::Status TcpTransport::Consume(Conn* c, const char* data, size_t n) {
  while (n > 0) {
    if (!c->in_payload && c->hdr_got == 0 && n >= sizeof(WireHeader)) {
      // A whole frame whole in the buffer: one call hands it over.
      WireHeader h;
      memcpy(&h, data, sizeof h);
      const uint64_t len = h.payload_len;
      if (h.magic == kMagic && h.piece == 0 && h.piece_len == len &&
          len <= n - sizeof(WireHeader)) {
        if (len > 0) c->large_frames = len >= kLargeFrame;
        sink_->OnWholeFrame(c->peer, h.meta, data + sizeof(WireHeader), len);
        data += sizeof(WireHeader) + len;
        n -= sizeof(WireHeader) + len;
        continue;
      }
    }
    if (!c->in_payload) {
      size_t take = std::min(n, sizeof(WireHeader) - c->hdr_got);
      memcpy(reinterpret_cast<char*>(&c->rx_hdr) + c->hdr_got, data, take);
      c->hdr_got += take;
      data += take;
      n -= take;
      if (c->hdr_got < sizeof(WireHeader)) return absl::OkStatus();
      c->hdr_got = 0;
      HCOMM_RETURN_IF_ERROR(BeginPayload(c));
      if (!c->in_payload) continue;
    }
    size_t take = static_cast<size_t>(std::min<uint64_t>(n, c->rx_len - c->rx_off));
    if (c->rx_dst != nullptr) memcpy(c->rx_dst + c->rx_off, data, take);
    c->rx_off += take;
    data += take;
    n -= take;
    if (c->rx_off == c->rx_len) EndPayload(c);
  }
  return absl::OkStatus();
}

absl::Status TcpTransport::ReadAvailable(Conn* c, int* reads) {
  for (;;) {
    ssize_t r;
    size_t staged = 0;
    bool direct = c->in_payload && c->rx_dst != nullptr && c->rx_len - c->rx_off >= kDirectReadMin;
    if (direct) {
      r = ::recv(c->fd.get(), c->rx_dst + c->rx_off, c->rx_len - c->rx_off, MSG_DONTWAIT);
    } else {
      staged = c->large_frames ? kLargeStageRead : kStageBytes;
      r = ::recv(c->fd.get(), c->stage.get(), staged, MSG_DONTWAIT);
    }
    if (r > 0) {
      if (reads != nullptr) ++*reads;
      if (direct) {
        c->rx_off += static_cast<uint64_t>(r);
        if (c->rx_off == c->rx_len) EndPayload(c);
      } else {
        HCOMM_RETURN_IF_ERROR(Consume(c, c->stage.get(), static_cast<size_t>(r)));
        // A short read drained the socket; the next look (level-triggered)
        // reports anything that arrives later, so skip the recv that would
        // say EAGAIN.
        if (static_cast<size_t>(r) < staged) return absl::OkStatus();
      }
      continue;
    }
    if (r == 0) {
      return PeerFailure(absl::StrCat("rank ", c->peer, " closed its connection"));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
    return PeerFailure(
        absl::StrCat("connection to rank ", c->peer, " broke: ", strerror(errno)));
  }
}

int TcpTransport::TakeWhole(int peer, uint64_t max_payload, hcomm_transport_take_fn take,
                            void* take_arg) {
  if (peer < 0 || peer >= static_cast<int>(conns_.size()) || conns_[peer] == nullptr) return -1;
  Conn* c = conns_[peer].get();
  if (c->dead_hint.load(std::memory_order_relaxed) ||
      c->lost_reported.load(std::memory_order_relaxed) || !c->recv_mu.TryLock()) {
    return -1;
  }
  int result = -1;
  absl::Status st;
  if (c->in_payload || c->hdr_got != 0) {
    // In the middle of a frame: Poll goes on with it.
  } else {
    // No further than the end of the longest frame `take` accepts: a frame
    // behind it stays in the socket for the next TakeWhole, where read
    // here it would go the full way, to the queue of unexpected messages.
    const size_t want =
        sizeof(WireHeader) +
        static_cast<size_t>(std::min<uint64_t>(max_payload, kStageBytes - sizeof(WireHeader)));
    ssize_t r = ::recv(c->fd.get(), c->stage.get(), want, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      result = 0;
    } else if (r == 0) {
      st = PeerFailure(absl::StrCat("rank ", c->peer, " closed its connection"));
    } else if (r < 0) {
      st = PeerFailure(absl::StrCat("connection to rank ", c->peer, " broke: ", strerror(errno)));
    } else {
      const char* data = c->stage.get();
      size_t n = static_cast<size_t>(r);
      WireHeader h;
      if (n >= sizeof h) {
        memcpy(&h, data, sizeof h);
        if (h.magic == kMagic && h.piece == 0 && h.piece_len == h.payload_len &&
            h.payload_len <= n - sizeof h &&
            take(take_arg, h.meta.bytes, data + sizeof h, h.payload_len) != 0) {
          data += sizeof h + h.payload_len;
          n -= sizeof h + h.payload_len;
          result = 1;
        }
      }
      st = Consume(c, data, n);
    }
  }
  c->recv_mu.Unlock();
  if (!st.ok()) {
    MarkDead(c, st);
    return -1;
  }
  return result;
}

void TcpTransport::MarkDead(Conn* c, const absl::Status& why) {
  Completions failed;
  {
    absl::MutexLock l(&c->send_mu);
    if (!c->dead) {
      c->dead = true;
      c->death = why;
    }
    c->dead_hint = true;
    for (OutFrame& f : c->queue) {
      failed.emplace_back(std::move(f.done), c->death);
      pending_.fetch_sub(1, std::memory_order_relaxed);
    }
    c->queue.clear();
    c->open = 0;
    UpdateInterestLocked(c);
    SetWatchedLocked(c, false);
  }
  if (c->lost_reported.exchange(true)) return;
  ::shutdown(c->fd.get(), SHUT_RDWR);
  RunCompletions(&failed);
  sink_->OnConnectionLost(c->peer, why);
}

int TcpTransport::Poll(absl::Duration timeout) {
  int ms = 0;
  if (timeout > absl::ZeroDuration()) {
    ms = static_cast<int>(std::min<int64_t>(
        absl::ToInt64Milliseconds(timeout + absl::Microseconds(999)), 1000));
  }
  if (lazy_ && ms == 0) {
    CountLook();
    if (!in_set_hint_.load(std::memory_order_relaxed)) return PollNow();
  }
  if (lazy_ && ms > 0) JoinSet();
  struct epoll_event evs[32];
  int n = ::epoll_wait(epfd_, evs, 32, ms);
  if (lazy_ && ms > 0) {
    absl::MutexLock l(&set_mu_);
    --sleeping_;
  }
  int events = 0;
  for (int i = 0; i < n; ++i) events += Dispatch(evs[i].data.u32, evs[i].events, ms > 0);
  return events;
}

void TcpTransport::CountLook() {
  // A long run of looks without a sleep: leave the set.
  if (lazy_ && in_set_hint_.load(std::memory_order_relaxed) &&
      hot_looks_.fetch_add(1, std::memory_order_relaxed) + 1 >= kHotLooks) {
    LeaveSet();
  }
}

void TcpTransport::JoinSet() {
  absl::MutexLock l(&set_mu_);
  ++sleeping_;
  hot_looks_.store(0, std::memory_order_relaxed);
  if (in_set_) return;
  for (Conn* c : added_) SetWatched(c, true);
  in_set_ = true;
  in_set_hint_.store(true, std::memory_order_relaxed);
}

void TcpTransport::LeaveSet() {
  absl::MutexLock l(&set_mu_);
  hot_looks_.store(0, std::memory_order_relaxed);
  if (!in_set_ || sleeping_ > 0) return;
  for (Conn* c : added_) SetWatched(c, false);
  in_set_ = false;
  in_set_hint_.store(false, std::memory_order_relaxed);
}

int TcpTransport::PollNow() {
  struct pollfd fds[kLazyMaxConns];
  uint32_t peers[kLazyMaxConns];
  nfds_t k = 0;
  for (Conn* c : added_) {
    if (c->lost_reported.load(std::memory_order_relaxed)) continue;
    fds[k].fd = c->fd.get();
    fds[k].events = static_cast<short>(
        POLLIN | POLLRDHUP | (c->out_armed.load(std::memory_order_relaxed) ? POLLOUT : 0));
    fds[k].revents = 0;
    peers[k++] = static_cast<uint32_t>(c->peer);
  }
  if (k == 0 || ::poll(fds, k, 0) <= 0) return 0;
  int events = 0;
  for (nfds_t i = 0; i < k; ++i) {
    if (fds[i].revents != 0) events += Dispatch(peers[i], fds[i].revents, false);
  }
  return events;
}

int TcpTransport::Dispatch(uint32_t tag, uint32_t events, bool waited) {
  // Left for its owner to read. It ends a wait (an event) but does not
  // count when nobody waited: a byte that came after its owner stopped
  // watching would otherwise look like traffic to every spinning poll.
  if (tag == kWatchedFd) return waited ? 1 : 0;
  Conn* c = conns_[tag].get();
  if (c == nullptr) return 1;
  if (events & EPOLLOUT) HandleWritable(c);
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    absl::Status st;
    if (c->recv_mu.TryLock()) {
      if (!c->lost_reported.load()) st = ReadAvailable(c);
      c->recv_mu.Unlock();
    }
    if (!st.ok()) MarkDead(c, st);
  }
  return 1;
}

bool TcpTransport::WatchFd(int fd) {
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN;
  ev.data.u32 = kWatchedFd;
  return ::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) == 0;
}

int TcpTransport::PollPeer(int peer) {
  if (peer < 0 || peer >= static_cast<int>(conns_.size()) || conns_[peer] == nullptr) return 0;
  // Frames waiting for room in some socket: Poll looks after those too.
  if (pending_.load(std::memory_order_relaxed) > 0) return Poll(absl::ZeroDuration());
  CountLook();
  Conn* c = conns_[peer].get();
  if (c->lost_reported.load(std::memory_order_relaxed) || !c->recv_mu.TryLock()) return 0;
  int events = 0;
  absl::Status st;
  if (!c->lost_reported.load()) st = ReadAvailable(c, &events);
  c->recv_mu.Unlock();
  if (!st.ok()) {
    MarkDead(c, st);
    return 1;
  }
  return events;
}

void TcpTransport::CloseWrite(int peer) {
  Conn* c = conns_[peer].get();
  if (c == nullptr) return;
  Completions completions;
  {
    absl::MutexLock l(&c->send_mu);
    c->close_write = true;
    if (!c->dead) FlushLocked(c, &completions);
    UpdateInterestLocked(c);
  }
  RunCompletions(&completions);
}

void TcpTransport::ShutdownAll() {
  for (auto& c : conns_) {
    if (c) ::shutdown(c->fd.get(), SHUT_RDWR);
  }
}

void TcpTransport::FailPeer(int peer, const absl::Status& why) {
  Conn* c = conns_[peer].get();
  if (c != nullptr) MarkDead(c, why);
}

}  // namespace hcomm
