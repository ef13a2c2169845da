#include "core/profile/recorder.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/spin.h"

namespace hcomm {
namespace {

// A thread's buffer grows by at most this many spans at a time, from the
// budget, and by a sixteenth of the budget at most: one busy thread leaves
// the others room.
constexpr int64_t kChunkSpans = 4096;

std::atomic<uint64_t> next_recorder_id{1};

// The buffer this thread used last, and whose: a thread records for one
// recorder at a time nearly always (a rank's), so this is the fast path.
struct LastBuffer {
  uint64_t recorder = 0;
  void* buffer = nullptr;
};
thread_local LastBuffer last;

}  // namespace

const char* SpanCatName(SpanCat c) {
  switch (c) {
    case SpanCat::kCollective: return "collective";
    case SpanCat::kP2p: return "p2p";
    case SpanCat::kStream: return "stream";
    case SpanCat::kTask: return "task";
  }
  return "collective";
}

struct Recorder::ThreadBuffer {
  std::thread::id thread;
  int track = 0;
  std::vector<Span> spans;  // grows while the budget lasts, then a ring
  bool ring = false;
  size_t oldest = 0;        // in a ring: the next one overwritten
  uint64_t dropped = 0;
};

Recorder::Recorder(size_t max_spans)
    : max_spans_(max_spans),
      id_(next_recorder_id.fetch_add(1, std::memory_order_relaxed)),
      created_ns_(MonoNs()),
      budget_(static_cast<int64_t>(max_spans)) {}

Recorder::~Recorder() = default;

Recorder::ThreadBuffer* Recorder::Mine() {
  if (last.recorder == id_) return static_cast<ThreadBuffer*>(last.buffer);
  const std::thread::id me = std::this_thread::get_id();
  absl::MutexLock l(&mu_);
  ThreadBuffer* found = nullptr;
  for (const auto& b : buffers_) {
    if (b->thread == me) found = b.get();
  }
  if (found == nullptr) {
    buffers_.push_back(std::make_unique<ThreadBuffer>());
    found = buffers_.back().get();
    found->thread = me;
    found->track = static_cast<int>(buffers_.size());
    track_names_[found->track] = absl::StrCat("thread ", found->track);
  }
  last = {id_, found};
  return found;
}

void Recorder::Record(const Span& s) {
  ThreadBuffer* b = Mine();
  if (!b->ring && b->spans.size() == b->spans.capacity()) {
    int64_t left = budget_.load(std::memory_order_relaxed);
    int64_t take = 0;
    while (left > 0) {
      take = std::min({left, kChunkSpans, std::max<int64_t>(16, max_spans_ / 16)});
      if (budget_.compare_exchange_weak(left, left - take, std::memory_order_relaxed)) break;
      take = 0;
    }
    if (take > 0) {
      b->spans.reserve(b->spans.capacity() + static_cast<size_t>(take));
    } else {
      b->ring = true;
    }
  }
  if (!b->ring) {
    b->spans.push_back(s);
    return;
  }
  ++b->dropped;
  if (b->spans.empty()) return;  // nothing of its own to give up
  b->spans[b->oldest] = s;
  b->oldest = (b->oldest + 1) % b->spans.size();
}

int Recorder::ThreadTrack() { return Mine()->track; }

int Recorder::NamedTrack(const std::string& name) {
  absl::MutexLock l(&mu_);
  auto it = named_tracks_.find(name);
  if (it != named_tracks_.end()) return it->second;
  const int track = 1001 + static_cast<int>(named_tracks_.size());
  named_tracks_.emplace(name, track);
  track_names_[track] = name;
  return track;
}

int Recorder::InternName(absl::string_view name) {
  absl::MutexLock l(&mu_);
  auto it = name_index_.find(name);
  if (it != name_index_.end()) return it->second;
  const int index = static_cast<int>(names_.size());
  names_.emplace_back(name);
  name_index_.emplace(std::string(name), index);
  return index;
}

Recorder::Contents Recorder::Take() {
  Contents out;
  absl::MutexLock l(&mu_);
  for (const auto& b : buffers_) {
    out.dropped += b->dropped;
    const size_t n = b->spans.size();
    for (size_t i = 0; i < n; ++i) out.spans.push_back(b->spans[(b->oldest + i) % n]);
    std::vector<Span>().swap(b->spans);
    b->ring = false;
    b->oldest = 0;
    b->dropped = 0;
  }
  budget_.store(static_cast<int64_t>(max_spans_), std::memory_order_relaxed);
  out.names = names_;
  out.track_names = track_names_;
  return out;
}

}  // namespace hcomm
