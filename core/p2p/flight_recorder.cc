#include "core/p2p/flight_recorder.h"

#include <errno.h>
#include <string.h>

#include <cstdio>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/base/spin.h"
#include "core/base/status.h"
#include "nlohmann/json.hpp"

namespace hcomm {

namespace {

// CoarseNs() to the wall clock, as of now.
int64_t UnixOffsetNs() { return absl::GetCurrentTimeNanos() - CoarseNs(); }

}  // namespace

namespace {

uint64_t PowerOfTwoAtLeast(size_t n) {
  uint64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

FlightRecorder::FlightRecorder(size_t capacity)
    : n_(capacity),
      mask_(PowerOfTwoAtLeast(capacity) - 1),
      slots_(capacity ? new Slot[mask_ + 1] : nullptr) {}

int64_t FlightRecorder::Clock() { return CoarseNs(); }

void FlightRecorder::Mark(uint64_t id, State state, bool ended) {
  if (id == 0 || n_ == 0) return;
  Slot& s = slots_[(id - 1) & mask_];
  const uint64_t w = s.word.load(std::memory_order_relaxed);
  // Only while the slot is still this operation's and not being refilled.
  // (A later operation takes the slot only after mask_ + 1 >= n_ others
  // began: this check and the stores cannot race with it in practice, and
  // a lost race garbles one entry of a diagnostic, nothing else.)
  if ((w >> 3) != id || (w & 7) == kWriting) return;
  if (ended) s.end_ns.store(Clock(), std::memory_order_relaxed);
  s.word.store(Word(id, static_cast<uint64_t>(state)), std::memory_order_release);
}

std::vector<FlightRecorder::Entry> FlightRecorder::Snapshot(size_t max) const {
  std::vector<Entry> out;
  if (n_ == 0) return out;
  const uint64_t last = next_.load(std::memory_order_acquire);
  const uint64_t keep = std::min<uint64_t>(last, max == 0 ? n_ : std::min(max, n_));
  const int64_t offset = UnixOffsetNs();
  out.reserve(keep);
  for (uint64_t id = last - keep + 1; id <= last; ++id) {
    const Slot& s = slots_[(id - 1) & mask_];
    const uint64_t w1 = s.word.load(std::memory_order_acquire);
    if ((w1 >> 3) != id || (w1 & 7) == kWriting) continue;  // refilled, or being filled
    Entry e;
    e.id = id;
    e.op = s.op.load(std::memory_order_relaxed);
    e.ctx = s.ctx.load(std::memory_order_relaxed);
    e.seq = s.seq.load(std::memory_order_relaxed);
    e.peer = s.peer.load(std::memory_order_relaxed);
    e.tag = s.tag.load(std::memory_order_relaxed);
    e.bytes = s.bytes.load(std::memory_order_relaxed);
    const int64_t start = s.start_ns.load(std::memory_order_relaxed);
    const int64_t end = s.end_ns.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint64_t w2 = s.word.load(std::memory_order_relaxed);
    if ((w2 >> 3) != id) continue;  // taken over while we read it
    e.state = static_cast<State>(w2 & 3);
    e.start_unix_ns = start + offset;
    e.end_unix_ns = end != 0 && e.state >= State::kDone ? end + offset : 0;
    out.push_back(std::move(e));
  }
  return out;
}

const char* FlightRecorder::StateName(State s) {
  switch (s) {
    case State::kPosted: return "posted";
    case State::kInProgress: return "in_progress";
    case State::kDone: return "done";
    case State::kFailed: return "failed";
  }
  return "unknown";
}

std::string FlightRecorder::Encode(const std::vector<Entry>& entries, size_t max_bytes) {
  std::vector<std::string> lines;
  size_t total = 0;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    std::string line = absl::StrCat("F ", it->id, " ", it->op.empty() ? "?" : it->op, " ",
                                    it->ctx, " ", it->seq, " ", it->peer, " ", it->tag, " ",
                                    it->bytes, " ", static_cast<int>(it->state), " ",
                                    it->start_unix_ns, " ", it->end_unix_ns, "\n");
    if (total + line.size() > max_bytes) break;
    total += line.size();
    lines.push_back(std::move(line));
  }
  std::string out;
  out.reserve(total);
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) out += *it;
  return out;
}

std::vector<FlightRecorder::Entry> FlightRecorder::Decode(absl::string_view text) {
  std::vector<Entry> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    if (f.size() != 11 || f[0] != "F") continue;
    Entry e;
    int state = 0;
    if (!absl::SimpleAtoi(f[1], &e.id) || !absl::SimpleAtoi(f[3], &e.ctx) ||
        !absl::SimpleAtoi(f[4], &e.seq) || !absl::SimpleAtoi(f[5], &e.peer) ||
        !absl::SimpleAtoi(f[6], &e.tag) || !absl::SimpleAtoi(f[7], &e.bytes) ||
        !absl::SimpleAtoi(f[8], &state) || state < 0 || state > 3 ||
        !absl::SimpleAtoi(f[9], &e.start_unix_ns) || !absl::SimpleAtoi(f[10], &e.end_unix_ns)) {
      continue;
    }
    e.op = std::string(f[2]);
    e.state = static_cast<State>(state);
    out.push_back(std::move(e));
  }
  return out;
}

std::string FlightRecorder::Describe(const Entry& e, int64_t now_unix_ns) {
  std::string what = absl::StrCat("#", e.id, " ", e.op);
  if (e.seq >= 0) {
    absl::StrAppend(&what, " seq ", e.seq, " (", e.peer >= 0 ? absl::StrCat("root ", e.peer, ", ")
                                                             : std::string(),
                    e.bytes, " bytes)");
  } else {
    const bool recv = e.op == "recv" || e.op == "irecv";
    absl::StrAppend(&what, recv ? " from " : " to ",
                    e.peer < 0 ? std::string("any rank") : absl::StrCat("rank ", e.peer),
                    e.tag < 0 ? std::string(" any tag") : absl::StrCat(" tag ", e.tag), " (",
                    e.bytes, " bytes)");
  }
  absl::StrAppend(&what, " ", StateName(e.state));
  const int64_t at = e.end_unix_ns != 0 ? e.end_unix_ns : e.start_unix_ns;
  if (at != 0 && now_unix_ns >= at) {
    absl::StrAppend(&what, absl::StrFormat(" %.2f s ago", (now_unix_ns - at) * 1e-9));
  }
  return what;
}

void FlightRecorder::KeepReport(std::map<int, std::vector<Entry>> ranks, std::string report) {
  absl::MutexLock l(&report_mu_);
  reported_ = std::move(ranks);
  report_ = std::move(report);
  reported_unix_ns_ = absl::GetCurrentTimeNanos();
}

absl::Status FlightRecorder::Dump(const std::string& path, int rank, int world_size,
                                  absl::string_view reason) {
  const int64_t now = absl::GetCurrentTimeNanos();
  std::map<int, std::vector<Entry>> ranks;
  std::map<int, int64_t> as_of;
  nlohmann::json doc;
  {
    absl::MutexLock l(&report_mu_);
    ranks = reported_;
    for (const auto& [r, e] : reported_) as_of[r] = reported_unix_ns_;
    doc["hang_report"] = report_.empty() ? nlohmann::json() : nlohmann::json(report_);
  }
  const bool all_ranks = !ranks.empty();
  ranks[rank] = Snapshot();
  as_of[rank] = now;
  doc["rank"] = rank;
  doc["world_size"] = world_size;
  doc["reason"] = std::string(reason);
  doc["written_unix_ns"] = now;
  doc["capacity"] = n_;
  nlohmann::json all = nlohmann::json::array();
  for (int r = 0; r < world_size; ++r) {
    auto it = ranks.find(r);
    if (it == ranks.end() && !all_ranks) continue;
    nlohmann::json one;
    one["rank"] = r;
    one["answered"] = it != ranks.end();
    one["as_of_unix_ns"] = it != ranks.end() ? as_of[r] : 0;
    nlohmann::json entries = nlohmann::json::array();
    if (it != ranks.end()) {
      for (const Entry& e : it->second) {
        entries.push_back({{"id", e.id},
                           {"op", e.op},
                           {"ctx", e.ctx},
                           {"seq", e.seq},
                           {"peer", e.peer},
                           {"tag", e.tag},
                           {"bytes", e.bytes},
                           {"state", StateName(e.state)},
                           {"start_unix_ns", e.start_unix_ns},
                           {"end_unix_ns", e.end_unix_ns}});
      }
    }
    one["entries"] = std::move(entries);
    all.push_back(std::move(one));
  }
  doc["ranks"] = std::move(all);
  // Invalid UTF-8 in `reason` (a path, a peer's text) is replaced, never thrown on.
  const std::string text =
      doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  // Written beside and renamed over: a reader never sees half a file.
  const std::string tmp = absl::StrCat(path, ".tmp");
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return Internal(absl::StrCat("flight recorder: cannot write ", tmp, ": ", strerror(errno)));
  }
  const bool written = fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = fclose(f) == 0;
  if (!written || !closed || rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    remove(tmp.c_str());
    return Internal(absl::StrCat("flight recorder: cannot write ", path, ": ", strerror(err)));
  }
  return absl::OkStatus();
}

std::string FlightRecorder::PathFor(absl::string_view pattern, int rank) {
  return absl::StrReplaceAll(pattern, {{"%r", absl::StrCat(rank)}});
}

}  // namespace hcomm
