// The `delta` part of the `compression` key for point-to-point messages
// (API.md "Compression"; frames of algorithms/kernels/delta.h): what one
// communicator keeps of the messages it sent and received, so that a
// message can travel as its difference from the previous one of the same
// size on the same (peer, tag).
//
// Protocol (the fingerprint of core/comm/wire_codec.h carries the coding,
// an 8-bit generation and the message's size):
//   - kDeltaFull: the message as it is; the receiver keeps a copy as the
//     base for the next one on (peer, tag) (generation g).
//   - kDeltaFrame: a delta frame against generation g - 1; the receiver
//     reconstructs the message into its base, checks the frame's XXH64 of
//     the result, and hands it out.
// Messages on one (peer, tag) match receives in the order they were sent,
// so the receiver sees generations in order; a receive that finishes
// before the one of its base (two threads receiving on one key) waits for
// it, up to its deadline.
//
// Memory: the sender keeps at most delta_cache_bytes / (ranks - 1) bytes
// of bases per destination; to make room it drops its least recently used
// keys to that peer and tells the peer (a notice on the communicator's
// collective context, tag kDeltaNoticeTag), which drops its copy when it
// has seen that generation. A receiver keeps at most twice that per sender
// (its copies of keys whose notice it has not acted on yet included), and
// never drops a base on its own: a frame whose base it could not keep
// fails with an error that says so, never with wrong data.
//
// THREAD SAFETY: every method may be called from any thread.
#ifndef HCOMM_CORE_COMM_DELTA_STATE_H_
#define HCOMM_CORE_COMM_DELTA_STATE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/p2p/engine.h"

namespace hcomm {

// Smaller messages travel as they are: their delta frame would save
// less than coding it costs.
inline constexpr size_t kMinDeltaBytes = 64 * 1024;
// The tag of the notices (in the communicator's collective context, above
// every collective, setup and check tag).
inline constexpr int kDeltaNoticeTag = 0x70000000;
// A receiver's word to the sender that it lost its base of a key (a
// receive buffer too small, a frame it could not rebuild): the sender's
// next message there goes whole.
inline constexpr int kDeltaLostTag = 0x70000001;

class DeltaState {
 public:
  // `ctx`: the communicator's collective context (for notices).
  DeltaState(std::shared_ptr<Engine> engine, uint32_t ctx, int nranks, int64_t budget)
      : engine_(std::move(engine)), ctx_(ctx), nranks_(nranks), budget_(budget) {}

  // The communicator's delta_cache_bytes (for bases kept from now on).
  void set_budget(int64_t b) { budget_.store(b, std::memory_order_relaxed); }
  // How long a receive here waits for the receive of its base on another
  // thread (the communicator's timeout_ms).
  void set_timeout(absl::Duration t) { timeout_ns_.store(absl::ToInt64Nanoseconds(t)); }

  // How a send goes: coded (with the fingerprint, and the bytes to put on
  // the wire) or, where `coded` is false, as it is.
  struct Send {
    bool coded = false;
    uint64_t fingerprint = 0;
    const void* payload = nullptr;
    size_t payload_bytes = 0;
    std::shared_ptr<char[]> frame;  // owns payload for a frame
    int peer = -1;
    int tag = -1;
  };
  // Plans the send of buf[0, n) to world rank `peer` under `tag` and
  // records it as the
  // new base. The caller puts plan.payload on the wire and then calls
  // Sent(plan, ok) (before any other send on the same peer and tag is
  // planned the plan holds the key: a second sender there goes as it is).
  Send Plan(int peer, int tag, const void* buf, size_t n);
  // Ends a coded send: `ok` false drops its base here and at the peer.
  void Sent(const Send& plan, bool ok);

  // The receive of a delta-coded message (fingerprint `fp`) from world
  // rank `peer` under `tag`: `got` bytes arrived into buf, whose capacity
  // is `capacity`. Leaves the message in buf[0, *out_bytes).
  absl::Status Receive(int peer, int tag, uint64_t fp, void* buf, size_t capacity, size_t got,
                       size_t* out_bytes);

  // Bytes kept now (for tests): of bases for sending, and received.
  size_t kept_for_sending() const;
  size_t kept_received() const;

 private:
  using Key = std::pair<int, int>;  // (world peer, tag)
  struct Out {
    std::unique_ptr<char[]> data;
    size_t size = 0;
    uint8_t gen = 0;
    bool busy = false;
    uint64_t used = 0;  // LRU clock
  };
  struct In {
    std::unique_ptr<char[]> data;  // null: not kept (missing)
    size_t size = 0;
    uint8_t gen = 0;
    bool busy = false;
  };
  struct Notice {
    int peer;
    int32_t tag;
    uint32_t gen;
  };

  size_t PerPeer() const {
    const int64_t budget = budget_.load(std::memory_order_relaxed);
    return budget <= 0 ? 0 : static_cast<size_t>(budget) / (nranks_ > 1 ? nranks_ - 1 : 1);
  }
  void SendNotices(const std::vector<Notice>& notices, int tag = kDeltaNoticeTag);
  // Tells `peer` that this rank lost its base of `tag`.
  void SendLost(int peer, int tag, uint8_t gen) { SendNotices({{peer, tag, gen}}, kDeltaLostTag); }
  // Drops the bases of keys whose receiver said it lost them.
  void DrainLost(int peer);
  // Takes the notices that `peer` sent and that have arrived.
  void DrainNotices(int peer);
  // A notice (or a coded message of a key with one pending) drops a base.
  void DropIn(std::map<Key, In>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<Engine> engine_;
  const uint32_t ctx_;
  const int nranks_;
  std::atomic<int64_t> budget_;
  std::atomic<int64_t> timeout_ns_{300 * int64_t{1000000000}};
  mutable absl::Mutex mu_;
  CondVar changed_;
  std::map<Key, Out> out_ ABSL_GUARDED_BY(mu_);
  std::map<int, size_t> out_bytes_ ABSL_GUARDED_BY(mu_);  // per peer
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<Key, In> in_ ABSL_GUARDED_BY(mu_);
  std::map<int, size_t> in_bytes_ ABSL_GUARDED_BY(mu_);  // per peer
  // Notices for generations not received yet: (peer, tag, gen).
  std::set<std::tuple<int, int, uint8_t>> released_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hcomm

#endif  // HCOMM_CORE_COMM_DELTA_STATE_H_
