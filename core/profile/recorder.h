// What one rank's profiler records (API.md, "Profiling"): a span per
// operation, collective, point-to-point call, stream operation or
// scheduler task, with bounded memory.
//
//   auto rec = std::make_shared<Recorder>(/*max_spans=*/131072);
//   Span s;
//   s.start_ns = Recorder::Now();
//   ... the operation ...
//   s.end_ns = Recorder::Now();
//   s.name = "allreduce";
//   rec->Record(s);                         // on the calling thread's track
//   Recorder::Contents all = rec->Take();   // at the end, oldest first
//
// Each thread writes into a buffer of its own (no lock on the way); the
// buffers together hold at most `max_spans` spans. Once they are full, a
// thread's newest span takes the place of its oldest, and the spans so lost
// are counted (Contents::dropped).
//
// Spans name their strings by pointer: every `const char*` field must point
// to a string that lives as long as the program (the library's names of
// ops, types and algorithms). Task names, which the program gives, are kept
// by the recorder (InternName).
//
// THREAD SAFETY: Record, ThreadTrack, NamedTrack and InternName from any
// thread; Take while no thread records.
#ifndef HCOMM_CORE_PROFILE_RECORDER_H_
#define HCOMM_CORE_PROFILE_RECORDER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/base/spin.h"

namespace hcomm {

enum class SpanCat : uint8_t { kCollective, kP2p, kStream, kTask };

// "collective", "p2p", "stream", "task".
const char* SpanCatName(SpanCat c);

namespace profile_internal {
// Whether Recorder::Now reads the CPU's time-stamp counter.
extern std::atomic<bool> use_tsc;
}  // namespace profile_internal

struct Span;
namespace profile_internal {
// A thread's place in the block it fills: spans go to next until end.
struct Cursor {
  Span* next = nullptr;
  Span* end = nullptr;
  int32_t track = 0;
};
// The recorder the calling thread used last and its cursor there: a thread
// records for one recorder at a time nearly always (its rank's). Initial
// exec: a few bytes of the static TLS that glibc keeps for libraries, so
// that the hot path reads it without a call. (libhcomm_c.so's version
// script makes it local; its dynamic table still lists it, as a local, for
// the TLS relocation.)
struct LastUsed {
  uint64_t recorder = 0;
  Cursor* cursor = nullptr;
  void* buffer = nullptr;
};
extern thread_local LastUsed last_used __attribute__((tls_model("initial-exec")));
}  // namespace profile_internal

// Span::track of a nonblocking request (isend, irecv): such spans overlap
// in any order, so the trace writer spreads them over "requests" lanes
// (kFirstRequestLane, ...), each holding spans that do not overlap.
inline constexpr int32_t kRequestTrack = -1;
inline constexpr int32_t kFirstRequestLane = 100000;

struct Span {
  int64_t start_ns = 0;  // Recorder::Now() while recording; MonoNs() once taken
  int64_t end_ns = 0;
  const char* name = "";          // "allreduce", "send", "task" ...
  const char* dtype = nullptr;    // nullptr: none
  const char* redop = nullptr;
  const char* algo = nullptr;
  const char* status = nullptr;   // nullptr: it succeeded; else the error's name
  uint64_t bytes = 0;
  uint64_t count = 0;
  int64_t seq = -1;     // a collective's sequence number in its communicator
  uint32_t comm = 0;    // the communicator's id (its collective context)
  int32_t peer = -1;    // point-to-point: the peer's rank in the communicator
  int32_t tag = -1;
  int32_t root = -1;
  int32_t stream = -1;  // a stream's operation: the stream's number
  int32_t track = 0;    // ThreadTrack, NamedTrack or kRequestTrack; 0: the recording thread's
  int32_t task = -1;    // a task: InternName of its id
  int32_t priority = 0; // a task's or a stream's priority
  SpanCat cat = SpanCat::kCollective;
};

class Recorder {
 public:
  explicit Recorder(size_t max_spans);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // The recording clock: the CPU's time-stamp counter where the kernel
  // keeps time with it (its clocksource is "tsc": every CPU's counter then
  // agrees and ticks at one rate), a few instructions; MonoNs() elsewhere.
  // Take converts to MonoNs(), by the rate measured between the recorder's
  // making and the Take.
  static int64_t Now() {
#if defined(__x86_64__)
    if (profile_internal::use_tsc.load(std::memory_order_relaxed)) {
      return static_cast<int64_t>(__builtin_ia32_rdtsc());
    }
#endif
    return MonoNs();
  }

  size_t max_spans() const { return max_spans_; }
  // MonoNs() when it was made: the start of the profile.
  int64_t created_ns() const { return created_ns_; }

  // Keeps `s` (on the calling thread's track when s.track is 0).
  void Record(const Span& s);
  // Where to write one span of the calling thread (every field: the place
  // may hold an older span), its track set to the thread's; null when it
  // is to be dropped. The hot path: a thread-local look and a pointer bump.
  Span* Slot() {
    profile_internal::LastUsed& l = profile_internal::last_used;
    if (ABSL_PREDICT_TRUE(l.recorder == id_ && l.cursor->next != l.cursor->end)) {
      Span* s = l.cursor->next++;
      s->track = l.cursor->track;
      return s;
    }
    return SlowSlot();
  }

  // The calling thread's track: 1, 2, ... in the order threads first ask
  // ("thread N").
  int ThreadTrack();
  // The track called `name` ("stream 1 (priority 10)"), made on first use:
  // 1001, 1002, ...
  int NamedTrack(const std::string& name);
  // An index for `name` (a task's id), the same for the same name.
  int InternName(absl::string_view name);

  struct Contents {
    std::vector<Span> spans;                // oldest first within each thread; times
                                            // in MonoNs()
    std::vector<std::string> names;         // InternName's, by index
    std::map<int, std::string> track_names; // every track any span uses
    uint64_t dropped = 0;
  };
  // Everything recorded; the recorder is empty afterwards.
  Contents Take();

 private:
  struct ThreadBuffer;
  ThreadBuffer* Mine();
  Span* SlowSlot();

  const size_t max_spans_;
  const uint64_t id_;  // tells recorders apart in the threads' caches
  const int64_t created_ns_;
  const int64_t created_ticks_;  // Now() at created_ns_
  // Every span's place: one mapping of max_spans_ spans (huge pages where
  // the kernel gives them, so that filling it costs few page faults),
  // handed out to the threads in blocks. Null when it could not be mapped:
  // then every span is dropped.
  Span* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  // Spans the buffers may still take; a buffer that finds none wraps.
  std::atomic<int64_t> budget_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<ThreadBuffer>> buffers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> named_tracks_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::string> track_names_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int, std::less<>> name_index_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hcomm

#endif  // HCOMM_CORE_PROFILE_RECORDER_H_
