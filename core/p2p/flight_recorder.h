// The flight recorder: this rank's last N operations (sends, receives,
// collectives) in a fixed ring, for the report of a timeout or a failure
// and for a dump to a file (docs/reliability.md, "Flight recorder").
//
//   FlightRecorder fr(256);
//   uint64_t id = fr.Begin("send", ctx, /*seq=*/-1, /*peer=*/2, /*tag=*/7, bytes,
//                          FlightRecorder::State::kInProgress);
//   ... the send ...
//   fr.End(id, s.ok());
//   std::vector<FlightRecorder::Entry> last = fr.Snapshot(8);
//
// Recording is a few stores into a slot allocated at construction: one
// atomic add takes the slot, a coarse clock (CoarseNs, milliseconds'
// resolution) stamps it, nothing is allocated or formatted; ending it is a
// load and two stores. Reading
// (Snapshot) copies the slots, skipping one that a writer is filling at
// that moment.
//
// THREAD SAFETY: every method may be called from any thread at any time.
#ifndef HCOMM_CORE_P2P_FLIGHT_RECORDER_H_
#define HCOMM_CORE_P2P_FLIGHT_RECORDER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace hcomm {

class FlightRecorder {
 public:
  enum class State : uint8_t { kPosted = 0, kInProgress = 1, kDone = 2, kFailed = 3 };

  // What a snapshot holds of one operation.
  struct Entry {
    uint64_t id = 0;          // 1, 2, ...: this rank's operations in order
    std::string op;           // "send", "recv", "isend", "irecv", "allreduce", ...
    uint32_t ctx = 0;         // the matching context (a communicator has two)
    int64_t seq = -1;         // a collective's sequence number; -1 for point-to-point
    int32_t peer = -1;        // world rank: the peer, or a collective's root (-1: none, any)
    int32_t tag = -1;         // point-to-point tag (-1: any, or none)
    uint64_t bytes = 0;
    State state = State::kPosted;
    int64_t start_unix_ns = 0;  // wall clock of this rank (0: not known)
    int64_t end_unix_ns = 0;    // 0 while not ended
  };

  // Keeps the last `capacity` operations; 0 records nothing.
  explicit FlightRecorder(size_t capacity);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  size_t capacity() const { return n_; }
  bool enabled() const { return n_ != 0; }

  // Records the start of an operation (`op` must be a string that lives
  // for ever, a literal); returns its id for End, 0 when disabled.
  uint64_t Begin(const char* op, uint32_t ctx, int64_t seq, int peer, int tag, uint64_t bytes,
                 State state) {
    if (n_ == 0) return 0;
    const uint64_t id = next_.fetch_add(1, std::memory_order_relaxed) + 1;
    Slot& s = slots_[(id - 1) & mask_];
    s.word.store(Word(id, kWriting), std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    s.op.store(op, std::memory_order_relaxed);
    s.ctx.store(ctx, std::memory_order_relaxed);
    s.seq.store(seq, std::memory_order_relaxed);
    s.peer.store(peer, std::memory_order_relaxed);
    s.tag.store(tag, std::memory_order_relaxed);
    s.bytes.store(bytes, std::memory_order_relaxed);
    s.start_ns.store(Clock(), std::memory_order_relaxed);
    s.end_ns.store(0, std::memory_order_relaxed);
    s.word.store(Word(id, static_cast<uint64_t>(state)), std::memory_order_release);
    return id;
  }
  // Operation `id` ended (done or failed). Nothing if id is 0 or its slot
  // has been taken by a later operation since.
  void End(uint64_t id, bool ok) { Mark(id, ok ? State::kDone : State::kFailed, true); }
  // Operation `id` moved on (posted -> in progress).
  void Mark(uint64_t id, State state, bool ended = false);

  // The last `max` operations recorded, oldest first (all kept if max is 0).
  std::vector<Entry> Snapshot(size_t max = 0) const;

  // Entries as text lines (for a hang report's answer), newest kept where
  // they do not all fit in `max_bytes`:
  //   F <id> <op> <ctx> <seq> <peer> <tag> <bytes> <state> <start ns> <end ns>
  static std::string Encode(const std::vector<Entry>& entries, size_t max_bytes);
  // Parses the F lines among `text`'s lines (others are skipped).
  static std::vector<Entry> Decode(absl::string_view text);

  static const char* StateName(State s);
  // "#12 allreduce seq 3 (root 0, 64 bytes) done 1.20 s ago"-like line for
  // messages; `now_unix_ns` is the time the ages are counted from.
  static std::string Describe(const Entry& e, int64_t now_unix_ns);

  // Keeps what a hang report collected (`ranks`: every world rank's entries
  // that answered; `report`: its text), for the dumps after it.
  void KeepReport(std::map<int, std::vector<Entry>> ranks, std::string report);

  // Writes a dump as JSON (nlohmann/json) to `path`, this rank's record as
  // of now and, after a hang report (KeepReport), the other ranks' as that
  // report collected them:
  //   {"rank": R, "world_size": N, "reason": "...", "written_unix_ns": T,
  //    "capacity": C, "hang_report": "..." | null,
  //    "ranks": [{"rank": r, "answered": true|false, "as_of_unix_ns": T,
  //               "entries": [{"id":..,"op":..,"ctx":..,"seq":..,"peer":..,
  //                            "tag":..,"bytes":..,"state":"done",
  //                            "start_unix_ns":..,"end_unix_ns":..}]}]}
  // After a report every rank of the job is listed ("answered": false for
  // those that did not); else this rank alone.
  // Errors: Internal naming the path and errno's text when it cannot be
  // written.
  absl::Status Dump(const std::string& path, int rank, int world_size, absl::string_view reason);
  // `pattern` with every "%r" replaced by `rank`.
  static std::string PathFor(absl::string_view pattern, int rank);

 private:
  static constexpr uint64_t kWriting = 7;
  static uint64_t Word(uint64_t id, uint64_t state) { return id << 3 | state; }
  static int64_t Clock();

  struct Slot {
    // id << 3 | state (kWriting while Begin fills the slot); 0: never used.
    std::atomic<uint64_t> word{0};
    std::atomic<const char*> op{""};
    std::atomic<uint32_t> ctx{0};
    std::atomic<int64_t> seq{-1};
    std::atomic<int32_t> peer{-1};
    std::atomic<int32_t> tag{-1};
    std::atomic<uint64_t> bytes{0};
    std::atomic<int64_t> start_ns{0};  // CoarseNs()
    std::atomic<int64_t> end_ns{0};
  };

  // The last n_ are kept, in a ring of a power of two >= n_ slots (a mask,
  // not a division, picks the slot).
  const size_t n_;
  const uint64_t mask_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> next_{0};

  absl::Mutex report_mu_;  // the last hang report's (KeepReport)
  std::map<int, std::vector<Entry>> reported_ ABSL_GUARDED_BY(report_mu_);
  std::string report_ ABSL_GUARDED_BY(report_mu_);
  int64_t reported_unix_ns_ ABSL_GUARDED_BY(report_mu_) = 0;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_P2P_FLIGHT_RECORDER_H_
