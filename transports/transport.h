// The interface every hcomm transport implements.
//
// A transport moves frames between this process and its peers. A frame is a
// fixed-size, opaque `FrameMeta` (the core's protocol header: tags, ids,
// kinds; the transport never looks inside) followed by a payload of any
// length. The transport knows nothing of tags, matching or collectives.
//
// Outbound: Connection::Send queues a frame; the payload is NOT copied and
// must stay valid until the frame's SendCallback runs. Frames on one
// connection that the same priority queued (core/base/priority.h) leave in
// the order they were queued; a transport may let a frame of a higher
// priority pass frames of lower ones that wait (the TCP transport does).
//
// Inbound: for every frame the transport calls FrameSink::OnFrame with the
// meta and the payload length; the sink answers where the payload must go
// (straight into a user buffer, a staging buffer, or nowhere: discard). Once
// the payload is in place the transport calls FrameSink::OnPayload. Frames
// of more than 64 KiB (rendezvous data) may arrive in pieces with other
// frames between them: OnFrame, other frames' calls, then its OnPayload.
// Frames of up to 64 KiB (everything else) arrive whole: their OnFrame and
// OnPayload follow each other.
//
// Threads: the transport has no thread of its own. Whoever calls
// Transport::Poll drives it; callbacks run on that thread. Several threads
// may call Poll and Send concurrently.
//
// Lock order (callers must respect it): a transport may hold a per-connection
// receive lock while it calls the sink; it never holds any lock while it
// runs a SendCallback or OnConnectionLost. A sink may call Send from inside
// OnFrame/OnPayload.
#ifndef HCOMM_TRANSPORTS_TRANSPORT_H_
#define HCOMM_TRANSPORTS_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "hcomm/hcomm_transport.h"

namespace hcomm {

// The core's per-frame header; opaque to transports.
inline constexpr size_t kFrameMetaBytes = 40;
struct FrameMeta {
  unsigned char bytes[kFrameMetaBytes];
};

// Runs once per frame when it has left (status OK: handed to the kernel or
// the peer) or can never leave (the connection failed; status says why).
using SendCallback = std::function<void(absl::Status)>;

// Identifies a queued frame, for Cancel.
using FrameHandle = uint64_t;

// Points a queued frame's payload at a copy of its own, so that the sender
// may reuse its buffer while the frame is still partly to write (a short
// write, Cancel); a frame that has its copy already keeps it. Frame has
// `payload` (const char*), `len` and `owned` (std::unique_ptr<char[]>).
template <typename Frame>
void KeepPayload(Frame& f) {
  if (f.owned != nullptr || f.len == 0) return;
  f.owned.reset(new char[f.len]);
  memcpy(f.owned.get(), f.payload, f.len);
  f.payload = f.owned.get();
}

class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // A frame from `peer` has begun to arrive. Returns where its payload of
  // `payload_len` bytes goes, or nullptr to have the transport discard it.
  // Called even for payload_len == 0 (the return value is then ignored).
  virtual void* OnFrame(int peer, const FrameMeta& meta, uint64_t payload_len) = 0;
  // The payload of a frame announced by OnFrame (the one just announced,
  // for frames of up to 64 KiB) is fully in place; `meta` is the one
  // OnFrame was given.
  virtual void OnPayload(int peer, const FrameMeta& meta, uint64_t payload_len) = 0;
  // A whole frame whose payload is already readable at `payload` (a
  // transport's own memory, valid only during the call): instead of
  // OnFrame and OnPayload, for a sink that can take it in one step. The
  // default does the two steps.
  virtual void OnWholeFrame(int peer, const FrameMeta& meta, const void* payload,
                            uint64_t payload_len) {
    void* dst = OnFrame(peer, meta, payload_len);
    if (dst != nullptr && payload_len > 0) memcpy(dst, payload, payload_len);
    OnPayload(peer, meta, payload_len);
  }
  // The connection to `peer` ended (closed by the peer, broken, or failed
  // through FailPeer); `status` says how, as a PeerFailure. Runs once per
  // connection. Whether a close was orderly is for the core to judge from
  // its own protocol.
  virtual void OnConnectionLost(int peer, const absl::Status& status) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // "tcp", "shm", ...
  virtual const char* name() const = 0;

  // Queues a frame to `peer`. The payload must stay valid until `done` runs.
  // `done` may run before Send returns (written at once, or the connection
  // is already down). Returns a handle for Cancel.
  virtual FrameHandle Send(int peer, const FrameMeta& meta, const void* payload, size_t len,
                           SendCallback done) = 0;

  // Sends the frame at once if it can leave whole without waiting and
  // without a callback: nothing queued ahead of it on the connection and
  // room for it now. Returns true when the payload is no longer needed (the
  // frame is out, or the transport kept a copy of what could not leave
  // yet); false when nothing was sent, and the caller should use Send.
  virtual bool TrySendNow(int peer, const FrameMeta& meta, const void* payload, size_t len) = 0;

  // For a receiver that waits on one peer: if the next frame from `peer` is
  // whole and readable in place, offers it to `take` (take_arg, the meta's
  // bytes, payload, length: the plugin table's hcomm_transport_take_fn, so
  // that the library's call reaches a transport with no wrapper between),
  // and consumes it if `take` returns non-zero. Returns 1 when
  // consumed; 0 when nothing from `peer` is there yet; -1 when something
  // else is (a frame `take` refused or one not whole in place) or the
  // connection is busy or down, which Poll then handles. A transport that
  // cannot look ahead returns -1. `take` refuses every payload longer than
  // `max_payload`: a transport that reads a stream need not read past the
  // end of such a frame.
  virtual int TakeWhole(int peer, uint64_t max_payload, hcomm_transport_take_fn take,
                        void* take_arg) {
    return -1;
  }

  // Withdraws a queued frame. Returns true if none of it had left: the frame
  // is dropped and its callback never runs. Returns false if it is partly or
  // wholly sent; then the transport copies what remains so the caller's
  // payload may be released at once, and the callback still runs.
  virtual bool Cancel(int peer, FrameHandle handle) = 0;

  // Moves bytes for up to `timeout` (zero: only what is ready now). Returns
  // the number of events handled.
  virtual int Poll(absl::Duration timeout) = 0;

  // Progress on the connection to `peer` alone, without blocking: for a
  // waiter that expects its next frame from there (on a socket this spares
  // the readiness call in front of every read). Returns what Poll would.
  virtual int PollPeer(int peer) { return Poll(absl::ZeroDuration()); }

  // Poll for a background thread: sleeps at once when nothing is ready,
  // never spinning (its CPU may be the one a caller's thread needs).
  virtual int PollQuiet(absl::Duration timeout) { return Poll(timeout); }

  // One wait for two transports: a caller about to block in another
  // transport's Poll arms this one (ArmWake: false, arming nothing, when
  // work is ready here already), and that Poll also watches OpenWakeFd()
  // (WatchFd), which turns readable when work arrives here while armed;
  // DisarmWake after. OpenWakeFd opens the fd on its first call (a setup
  // call: not thread-safe against the others); -1 where not supported.
  virtual int OpenWakeFd() { return -1; }
  virtual bool ArmWake() { return false; }
  virtual void DisarmWake() {}
  // Poll(timeout > 0) also returns, counting an event, once `fd` is
  // readable (it does not read it; Poll(0) does not count it). A setup
  // call; false where not supported.
  virtual bool WatchFd(int fd) { return false; }

  // True if Poll(timeout > 0) spins by itself before it sleeps, adapting
  // the spin to how soon work came before; a caller then need not spin.
  virtual bool SpinsBeforeSleep() const { return false; }

  // Queued frames not yet handed on, over all connections.
  virtual size_t PendingSends() const = 0;

  // Payload bytes up to which the core sends a message whole with its
  // header (eagerly) instead of by rendezvous, where the core's own limit
  // (64 KiB) would cost more on this transport.
  virtual size_t EagerBytes() const { return 64 * 1024; }

  // Closes the write side towards `peer` once everything queued has left.
  virtual void CloseWrite(int peer) = 0;

  // Tears every connection down at once (abort): peers see them fail.
  virtual void ShutdownAll() = 0;

  // Fails the connection to `peer` as if it had broken.
  virtual void FailPeer(int peer, const absl::Status& why) = 0;
};

// Transport::TakeWhole for a caller holding a C++ callable
// f(const FrameMeta&, const void* payload, uint64_t len) -> bool.
template <typename F>
int TakeWholeWith(Transport& t, int peer, uint64_t max_payload, F& f) {
  return t.TakeWhole(
      peer, max_payload,
      [](void* arg, const void* header, const void* payload, uint64_t len) -> int {
        return (*static_cast<F*>(arg))(*static_cast<const FrameMeta*>(header), payload, len) ? 1
                                                                                            : 0;
      },
      &f);
}

}  // namespace hcomm

#endif  // HCOMM_TRANSPORTS_TRANSPORT_H_
