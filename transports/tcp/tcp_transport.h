// TCP transport: one non-blocking socket per peer, driven by epoll.
//
//   TcpTransport t(/*self=*/rank, &sink);
//   t.AddConnection(peer, std::move(fd));      // sockets made at bootstrap
//   t.Send(peer, meta, buf, len, [](absl::Status s) { ... });
//   t.Poll(absl::Milliseconds(10));
//
// Priorities: a frame queued while others wait goes ahead of the frames of
// lower priorities (the queuing thread's, core/base/priority.h) that have
// not begun to leave, and behind those of its own priority or higher: the
// order of one priority's frames is kept. A frame larger than kPieceBytes
// moves in pieces, each with its own header, so that a more urgent frame
// waits for at most one piece; the receiver puts the pieces back together
// in the destination the sink chose for the frame. TCP_NOTSENT_LOWAT keeps
// the kernel from holding more than a piece not yet sent, which an urgent
// frame would otherwise wait behind.
//
// Sends are written inline by the calling thread when the connection is
// idle (no wakeup of any other thread on the fast path), header and payload
// together with writev straight from the caller's buffer; what does not fit
// in the socket waits for EPOLLOUT. Reception reads into a per-connection
// staging buffer and copies small payloads out; a large payload's remainder
// is read straight into the buffer the sink chose.
//
// With few connections (kLazyMaxConns), the sockets join the epoll set
// when a Poll sleeps and leave it after kHotLooks looks without a sleep;
// looks outside the set use poll(2), which registers nothing. A socket in
// an epoll set makes every packet that reaches it run epoll's wake-up
// callback on the sender's side, whether or not anyone sleeps: a measurable
// part of a small message's one-way time over loopback (docs/performance.md,
// "TCP: sockets in the epoll set only while sleeping"). A rank that sleeps
// often keeps them in the set (no epoll_ctl per sleep); one that spins from
// message to message, as a ping-pong does, leaves it.
#ifndef HCOMM_TRANSPORTS_TCP_TCP_TRANSPORT_H_
#define HCOMM_TRANSPORTS_TCP_TCP_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/net.h"
#include "transports/transport.h"

namespace hcomm {

// How a connection notices a peer that vanished without closing it (host
// down, cable pulled): keepalive probes while the link is idle, and
// TCP_USER_TIMEOUT while sent data waits for its acknowledgement. Both
// follow the communicator's timeout, bounded so that a dead peer fails the
// pending operations within seconds (docs/reliability.md, "TCP links"):
// the bound is `timeout` clamped to [kMinDeadPeer, kMaxDeadPeer]. Linux
// drops a connection whose keepalive probes go unanswered for
// TCP_USER_TIMEOUT when that is set, so the user timeout is the same bound,
// not the communicator's whole timeout (which would be minutes).
//
//   HCOMM_RETURN_IF_ERROR(ApplyLinkOptions(fd, TcpLinkOptions::For(timeout)));
struct TcpLinkOptions {
  static constexpr absl::Duration kMinDeadPeer = absl::Seconds(1);
  static constexpr absl::Duration kMaxDeadPeer = absl::Seconds(10);

  int keepidle_s = 5;   // TCP_KEEPIDLE: quiet seconds before the first probe
  int keepintvl_s = 1;  // TCP_KEEPINTVL: seconds between probes
  int keepcnt = 5;      // TCP_KEEPCNT: unanswered probes that end the link
  unsigned int user_timeout_ms = 10000;  // TCP_USER_TIMEOUT

  // The options for a communicator whose operations time out after
  // `timeout` (any value; infinite and zero included).
  static TcpLinkOptions For(absl::Duration timeout);
};

// Sets SO_KEEPALIVE and the options above on the TCP socket `fd`. A
// setsockopt the kernel refuses fails the call, naming the option and why;
// the options set before it stay set.
absl::Status ApplyLinkOptions(int fd, const TcpLinkOptions& options);

class TcpTransport final : public Transport {
 public:
  // `sink` must outlive the transport. `timeout`: the communicator's
  // (timeout_ms), from which every connection's TcpLinkOptions come.
  TcpTransport(int self, int world_size, FrameSink* sink,
               absl::Duration timeout = absl::InfiniteDuration());
  ~TcpTransport() override;

  // Takes over a connected, authenticated socket to `peer`. Call for every
  // peer before the first Send or Poll; not thread-safe against them.
  absl::Status AddConnection(int peer, net::Fd fd);

  const char* name() const override { return "tcp"; }
  bool TrySendNow(int peer, const FrameMeta& meta, const void* payload, size_t len) override;
  FrameHandle Send(int peer, const FrameMeta& meta, const void* payload, size_t len,
                   SendCallback done) override;
  // Reads what the peer's socket holds: a first frame that is whole in it
  // goes to `take`; everything else (or everything, when `take` refuses)
  // goes the usual way to the sink.
  int TakeWhole(int peer, uint64_t max_payload, hcomm_transport_take_fn take,
                void* take_arg) override;
  bool Cancel(int peer, FrameHandle handle) override;
  int Poll(absl::Duration timeout) override;
  int PollPeer(int peer) override;
  bool WatchFd(int fd) override;
  size_t PendingSends() const override { return pending_.load(std::memory_order_relaxed); }
  // A frame that fits one loopback segment (MTU 64 KiB, less the IP and TCP
  // headers) goes out as one packet: a 64 KiB payload and its header need
  // two, and measured slower one way than by rendezvous, whose round trip of
  // small frames keeps both sides polling (docs/performance.md, "TCP: one
  // loopback segment eagerly").
  size_t EagerBytes() const override { return 64 * 1024 - 128; }
  // Up to this many connections the sockets are in the epoll set only
  // around sleeping Polls (see above); beyond it they stay in it.
  static constexpr size_t kLazyMaxConns = 8;
  // Looks that do not wait (Poll without a timeout, PollPeer), in a row,
  // after which the sockets leave the set: about a millisecond of spinning.
  static constexpr uint32_t kHotLooks = 1024;
  // A frame with a larger payload moves in pieces of this many bytes, and
  // between two of them a frame queued later by a thread of a higher
  // priority (core/base/priority.h) goes first (see above).
  static constexpr size_t kPieceBytes = 256 * 1024;

  void CloseWrite(int peer) override;
  void ShutdownAll() override;
  void FailPeer(int peer, const absl::Status& why) override;

 private:
  struct Conn;
  struct OutFrame;

  // Writes what the socket takes. Completed frames' callbacks are appended
  // to *done for the caller to run after unlocking.
  void FlushLocked(Conn* c, std::vector<std::pair<SendCallback, absl::Status>>* done)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->send_mu);
  void UpdateInterestLocked(Conn* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->send_mu);
  // Puts c's socket into the epoll set or takes it out (a dead one is not
  // put in); returns whether it is in the set.
  bool SetWatchedLocked(Conn* c, bool on) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->send_mu);
  void SetWatched(Conn* c, bool on);
  // Lazy mode: a Poll about to sleep puts the sockets into the epoll set;
  // LeaveSet takes them out unless a Poll sleeps there, and CountLook calls
  // it after kHotLooks looks without a sleep.
  void CountLook();
  void JoinSet();
  void LeaveSet();
  // A look that does not wait, through poll(2) (lazy mode, outside the set).
  int PollNow();
  // Handles `events` (epoll's bits, which poll's share) of the socket or
  // watched descriptor `tag`; returns how many events count as work.
  int Dispatch(uint32_t tag, uint32_t events, bool waited);
  void HandleWritable(Conn* c);
  // Reads and dispatches everything available, counting the reads that
  // brought data into *reads when given. Returns !ok when the connection
  // ended.
  absl::Status ReadAvailable(Conn* c, int* reads = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->recv_mu);
  absl::Status Consume(Conn* c, const char* data, size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->recv_mu);
  // A header is in c->rx_hdr: checks it and readies reading its payload
  // (a whole frame's, or one piece's).
  absl::Status BeginPayload(Conn* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->recv_mu);
  // The payload being read is all there: hands over the frame it ends.
  void EndPayload(Conn* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->recv_mu);
  void MarkDead(Conn* c, const absl::Status& why);

  const int self_;
  FrameSink* const sink_;
  const TcpLinkOptions link_options_;
  int epfd_ = -1;
  std::vector<std::unique_ptr<Conn>> conns_;  // by peer rank; null for self
  std::vector<Conn*> added_;  // every connection, in the order added
  bool lazy_ = true;          // at most kLazyMaxConns connections
  absl::Mutex set_mu_;
  bool in_set_ ABSL_GUARDED_BY(set_mu_) = false;  // the sockets are in the epoll set
  int sleeping_ ABSL_GUARDED_BY(set_mu_) = 0;     // Polls asleep in it
  std::atomic<bool> in_set_hint_{false};          // in_set_, read without the lock
  std::atomic<uint32_t> hot_looks_{0};            // looks since the last sleep
  std::atomic<uint64_t> next_handle_{1};
  std::atomic<size_t> pending_{0};
};

}  // namespace hcomm

#endif  // HCOMM_TRANSPORTS_TCP_TCP_TRANSPORT_H_
