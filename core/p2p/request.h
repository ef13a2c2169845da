// One point-to-point operation (a send or a receive) and its outcome.
//
// A Request is shared between the caller's handle and the engine's tables
// until it completes; its mutable fields are guarded by the owning
// communicator's mutex (Communicator::mu_). `done` may be read without it.
#ifndef HCOMM_CORE_P2P_REQUEST_H_
#define HCOMM_CORE_P2P_REQUEST_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/base/clock.h"

namespace hcomm {

inline constexpr int kAnySource = -1;
inline constexpr int kAnyTag = -1;

struct Request {
  enum class Kind { kSend, kRecv, kCollective };
  enum class Phase {
    kPosted,    // recv: waiting in the posted queue; send: waiting for the peer
    kMatched,   // data is moving into / out of the user buffer
    kDone,
  };

  // Back to a fresh state, for reuse.
  void Reset() {
    kind = Kind::kRecv;
    id = 0;
    ctx = 0;
    fingerprint = 0;
    peer = kAnySource;
    tag = kAnyTag;
    recv_buf = nullptr;
    send_buf = nullptr;
    bytes = 0;
    elem_size = 1;
    started = MonoTime();
    phase = Phase::kPosted;
    rendezvous = false;
    rts_counted = false;
    frame = 0;
    done.store(false, std::memory_order_relaxed);
    status = absl::OkStatus();
    out_source = -1;
    out_tag = -1;
    out_bytes = 0;
    out_fingerprint = 0;
    finish = nullptr;
    finished.store(false, std::memory_order_relaxed);
    keep.reset();
    flight = 0;
  }

  Kind kind = Kind::kRecv;
  uint64_t id = 0;
  uint32_t ctx = 0;  // matching context
  // Collectives: what the caller is doing (op, count, dtype, root), sent
  // with every message and compared with the matching receive's. 0: none.
  uint64_t fingerprint = 0;
  // As given by the caller (ranks of the communicator).
  int peer = kAnySource;
  int tag = kAnyTag;
  char* recv_buf = nullptr;        // receives
  const char* send_buf = nullptr;  // sends
  size_t bytes = 0;                // send size, or receive capacity
  size_t elem_size = 1;
  MonoTime started;

  // Engine state (guarded by the communicator's mutex).
  Phase phase = Phase::kPosted;
  bool rendezvous = false;  // send: went out as a request-to-send
  bool rts_counted = false;  // send: counted in its peer's Engine::rts_out_
  uint64_t frame = 0;       // transport handle of the frame carrying the payload

  // Outcome, valid once done.
  std::atomic<bool> done{false};
  absl::Status status;
  int out_source = -1;
  int out_tag = -1;
  size_t out_bytes = 0;
  // Receives: the fingerprint the matched message carried (a collective's,
  // or how a point-to-point payload was coded: core/comm/wire_codec.h).
  uint64_t out_fingerprint = 0;

  // A step that turns what arrived into what the caller asked for (a
  // receive's decoding: core/comm/wire_codec.h), or null. FinishRequest
  // runs it once, when the first waiter sees `done`.
  absl::Status (*finish)(Request& r) = nullptr;
  std::atomic<bool> finished{false};
  // What the request's buffers need kept until it ends (a send's encoded
  // copy of the caller's data), or null.
  std::shared_ptr<void> keep;
  // Its entry in the flight recorder (core/p2p/flight_recorder.h), ended
  // when a wait or test first sees it done; 0: none.
  uint64_t flight = 0;
};

// For a request that is done: runs its finish step if it has one that has
// not run yet (an error of the step replaces an OK status) and returns the
// request's status. One waiter at a time per request, as for Wait.
inline const absl::Status& FinishRequest(Request* r) {
  if (r->finish != nullptr && !r->finished.exchange(true, std::memory_order_acq_rel)) {
    absl::Status s = r->finish(*r);
    if (r->status.ok() && !s.ok()) r->status = std::move(s);
  }
  return r->status;
}

// A fresh request: one of the calling thread's recent ones when nothing
// else holds it any more, or a new one.
std::shared_ptr<Request> NewRequest();

}  // namespace hcomm

#endif  // HCOMM_CORE_P2P_REQUEST_H_
