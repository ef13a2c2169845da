#include "core/profile/recorder.h"

#include <sys/mman.h>

#include <algorithm>
#include <memory>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/spin.h"

namespace hcomm {
namespace {

// A thread's buffer grows by at most this many spans at a time, from the
// budget.
constexpr int64_t kChunkSpans = 4096;

std::atomic<uint64_t> next_recorder_id{1};


// The kernel keeps time with the time-stamp counter: it found the counter
// steady and alike on every CPU.
bool KernelUsesTsc() {
  FILE* f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (f == nullptr) return false;
  char name[32] = {0};
  const bool read = fgets(name, sizeof name, f) != nullptr;
  fclose(f);
  return read && strncmp(name, "tsc", 3) == 0 && (name[3] == '\n' || name[3] == '\0');
}

}  // namespace

namespace profile_internal {
std::atomic<bool> use_tsc{false};
thread_local LastUsed last_used;
}  // namespace profile_internal

using profile_internal::last_used;

namespace {

// Chooses the clock once, before any recorder reads it; then Now().
int64_t StartClock() {
  static const bool chosen = [] {
#if defined(__x86_64__)
    profile_internal::use_tsc.store(KernelUsesTsc(), std::memory_order_relaxed);
#endif
    return true;
  }();
  (void)chosen;
  return Recorder::Now();
}

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

// A thread's spans: blocks taken from the budget as it goes (never moved
// once written; the cursor runs through the last), then, when the budget is
// gone, a ring over those blocks.
struct Recorder::ThreadBuffer {
  std::thread::id thread;
  int track = 0;
  profile_internal::Cursor cursor;
  std::vector<Span*> blocks;  // in the recorder's arena
  size_t capacity = 0;  // spans the blocks hold
  bool ring = false;
  size_t oldest = 0;    // in a ring: the next one overwritten
  uint64_t dropped = 0;
  // Every block but the last holds 2^shift spans.
  int shift = 0;

  Span& At(size_t i) { return blocks[i >> shift][i & ((size_t{1} << shift) - 1)]; }
  // Spans held: the blocks but what the cursor has not reached.
  size_t Size() const {
    return ring ? capacity : capacity - static_cast<size_t>(cursor.end - cursor.next);
  }
  void Clear() {
    blocks.clear();
    capacity = oldest = 0;
    cursor.next = cursor.end = nullptr;
    ring = false;
    dropped = 0;
  }
};

Recorder::Recorder(size_t max_spans)
    : max_spans_(max_spans),
      id_(next_recorder_id.fetch_add(1, std::memory_order_relaxed)),
      created_ns_(MonoNs()),
      created_ticks_(StartClock()),
      budget_(0) {
  const size_t huge = size_t{2} << 20;
  arena_bytes_ = (max_spans * sizeof(Span) + huge - 1) / huge * huge;
  void* p = mmap(nullptr, arena_bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;
  madvise(p, arena_bytes_, MADV_HUGEPAGE);
  arena_ = static_cast<Span*>(p);
  budget_.store(static_cast<int64_t>(max_spans), std::memory_order_relaxed);
}

Recorder::~Recorder() {
  if (arena_ != nullptr) munmap(arena_, arena_bytes_);
}

Recorder::ThreadBuffer* Recorder::Mine() {
  if (last_used.recorder == id_) return static_cast<ThreadBuffer*>(last_used.buffer);
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
    found->cursor.track = found->track;
    // Blocks of a power of two spans, at most kChunkSpans and a sixteenth
    // of the budget (one busy thread leaves the others room), at least 16.
    while (found->shift < 30 && (int64_t{2} << found->shift) <= kChunkSpans &&
           (int64_t{2} << found->shift) <= std::max<int64_t>(16, max_spans_ / 16)) {
      ++found->shift;
    }
    track_names_[found->track] = absl::StrCat("thread ", found->track);
  }
  last_used = {id_, &found->cursor, found};
  return found;
}

void Recorder::Record(const Span& span) {
  Span* slot = Slot();
  if (slot == nullptr) return;
  const int32_t track = slot->track;
  *slot = span;
  if (slot->track == 0) slot->track = track;
}

Span* Recorder::SlowSlot() {
  ThreadBuffer* b = Mine();
  if (!b->ring && b->cursor.next == b->cursor.end) {
    int64_t left = budget_.load(std::memory_order_relaxed);
    int64_t take = 0;
    while (left > 0) {
      take = std::min(left, int64_t{1} << b->shift);
      if (budget_.compare_exchange_weak(left, left - take, std::memory_order_relaxed)) break;
      take = 0;
    }
    if (take > 0) {
      // The block after the last one handed out (spans are taken in
      // order of the budget going down).
      Span* block = arena_ + (static_cast<int64_t>(max_spans_) - left);
      std::uninitialized_default_construct_n(block, static_cast<size_t>(take));
      b->blocks.push_back(block);
      b->capacity += static_cast<size_t>(take);
      b->cursor.next = block;
      b->cursor.end = block + take;
    } else {
      b->ring = true;
    }
  }
  Span* slot;
  if (!b->ring) {
    slot = b->cursor.next++;
  } else {
    ++b->dropped;
    const size_t n = b->Size();
    if (n == 0) return nullptr;  // nothing of its own to give up
    // (Blocks fill in order, so the ring's places run over them in order.)
    slot = &b->At(b->oldest);
    b->oldest = (b->oldest + 1) % n;
  }
  slot->track = b->track;
  return slot;
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
  // The counter's rate against MonoNs(), over at least a millisecond.
  if (MonoNs() - created_ns_ < 1'000'000) absl::SleepFor(absl::Milliseconds(1));
  const int64_t ticks = Now(), ns = MonoNs();
  const double ns_per_tick =
      ticks > created_ticks_
          ? static_cast<double>(ns - created_ns_) / static_cast<double>(ticks - created_ticks_)
          : 1.0;
  auto to_ns = [&](int64_t t) {
    return created_ns_ + static_cast<int64_t>(static_cast<double>(t - created_ticks_) * ns_per_tick);
  };
  absl::MutexLock l(&mu_);
  for (const auto& b : buffers_) {
    out.dropped += b->dropped;
    const size_t n = b->Size();
    for (size_t i = 0; i < n; ++i) {
      Span s = b->At((b->oldest + i) % n);
      s.start_ns = to_ns(s.start_ns);
      s.end_ns = to_ns(s.end_ns);
      out.spans.push_back(s);
    }
    b->Clear();
  }
  if (arena_ != nullptr) budget_.store(static_cast<int64_t>(max_spans_), std::memory_order_relaxed);
  out.names = names_;
  out.track_names = track_names_;
  return out;
}

}  // namespace hcomm
