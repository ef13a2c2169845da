// Hang reports: what this rank waits for (PendingState), answered through
// the store to a rank that timed out, and collected from every rank.
#include "core/p2p/engine.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/status.h"

namespace hcomm {

Engine::Activity* Engine::ActivityFor(uint32_t ctx) {
  absl::MutexLock l(&activity_mu_);
  std::unique_ptr<Activity>& a = activity_[ctx];
  if (!a) a = std::make_unique<Activity>();
  return a.get();
}

void Engine::NoteSegmentWait(uint32_t ctx, const std::vector<int>& peers, size_t bytes) {
  Activity* a = ActivityFor(ctx);
  absl::MutexLock l(&activity_mu_);
  a->segment_waits = peers;
  a->segment_seq = a->seq.load(std::memory_order_relaxed);
  a->segment_bytes = bytes;
}

std::string Engine::PendingState() {
  std::string out;
  {
    absl::MutexLock l(&activity_mu_);
    for (const auto& [ctx, a] : activity_) {
      uint64_t seq = 0, fp = 0;
      bool in_progress = false;
      for (int tries = 0; tries < 100; ++tries) {
        const uint64_t v1 = a->version.load(std::memory_order_acquire);
        seq = a->seq.load(std::memory_order_relaxed);
        fp = a->fingerprint.load(std::memory_order_relaxed);
        in_progress = a->in_progress.load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if ((v1 & 1) == 0 && a->version.load(std::memory_order_relaxed) == v1) break;
      }
      absl::StrAppend(&out, "C ", ctx, " ", seq, " ", fp, " ", in_progress ? 1 : 0, "\n");
      if (!in_progress || a->segment_seq != seq) continue;
      for (int p : a->segment_waits) {
        absl::StrAppend(&out, "M ", ctx, " ", p, " ", seq, " ", a->segment_bytes, "\n");
      }
    }
  }
  absl::MutexLock l(&mu_);
  for (const auto& [ctx, matcher] : contexts_) {
    for (const auto& r : matcher->posted()) {
      absl::StrAppend(&out, "R ", ctx, " ", r->peer, " ", r->tag, " ", r->bytes, "\n");
    }
  }
  for (const auto& [id, r] : awaiting_data_) {
    absl::StrAppend(&out, "X ", r->ctx, " ", r->out_source, " ", r->out_tag, " ", r->out_bytes,
                    "\n");
  }
  for (const auto& [id, r] : awaiting_cts_) {
    absl::StrAppend(&out, "S ", r->ctx, " ", r->peer, " ", r->tag, " ", r->bytes, " w\n");
  }
  for (const auto& [id, r] : sending_) {
    absl::StrAppend(&out, "S ", r->ctx, " ", r->peer, " ", r->tag, " ", r->bytes, " q\n");
  }
  return out;
}

void Engine::AnswerHangRequests() {
  auto n = job_->store().Add("hcomm/hang/req", 0, absl::Now() + absl::Milliseconds(100));
  if (!n.ok()) return;
  absl::MutexLock l(&hang_mu_);
  if (hang_answered_ < 0) hang_answered_ = *n;  // requests before we started are old
  if (*n <= hang_answered_) return;
  // Several ranks may time out at once, each with its own request: answer
  // every one since the last.
  std::string state = PendingState();
  for (int64_t q = std::max<int64_t>(hang_answered_ + 1, *n - 64); q <= *n; ++q) {
    job_->store()
        .Set(absl::StrCat("hcomm/hang/", q, "/", rank_), state,
              absl::Now() + absl::Milliseconds(500))
        .IgnoreError();
  }
  if (!hang_report_file_.empty()) {
    std::string path = absl::StrCat(hang_report_file_, ".", rank_);
    if (FILE* f = fopen(path.c_str(), "w")) {
      fprintf(f, "rank %d pending state (hang report %lld):\n%s", rank_,
              static_cast<long long>(*n), state.c_str());
      fclose(f);
    }
  }
  hang_answered_ = *n;
}

void Engine::HangResponderLoop() {
  absl::Mutex m;
  absl::MutexLock l(&m);
  while (!stop_.load(std::memory_order_acquire)) {
    AnswerHangRequests();
    // Look again in 50 ms (a timing-out rank waits for our answer), waking
    // at once when the engine stops.
    m.AwaitWithTimeout(absl::Condition(
                           +[](std::atomic<bool>* stop) { return stop->load(); }, &stop_),
                       absl::Milliseconds(50));
  }
}

std::map<int, std::string> Engine::CollectHangReport(absl::Time deadline) {
  std::map<int, std::string> out;
  if (job_ == nullptr) return out;
  auto n = job_->store().Add("hcomm/hang/req", 1, deadline);
  if (!n.ok()) return out;
  out[rank_] = PendingState();
  job_->store().Set(absl::StrCat("hcomm/hang/", *n, "/", rank_), out[rank_], deadline)
      .IgnoreError();
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(absl::StrCat("hcomm/hang/", *n, "/", r));
  // Wait for the answers until just before the deadline, then read whoever
  // answered (a few local round trips). Ranks timing out at the same moment
  // wait for our answer as we wait for theirs: answer between looks.
  const absl::Duration left = deadline - absl::Now();
  const absl::Time wait_until = deadline - std::min(absl::Milliseconds(20), left / 4);
  for (;;) {
    const absl::Time look = std::min(wait_until, absl::Now() + absl::Milliseconds(50));
    if (job_->store().Wait(keys, look).ok() || look >= wait_until) break;
    AnswerHangRequests();
  }
  const absl::Time read_by = std::max(deadline, absl::Now() + absl::Milliseconds(20));
  auto have = job_->store().Check(keys, read_by);
  if (!have.ok()) return out;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !(*have)[r]) continue;
    auto v = job_->store().Get(keys[r], read_by);
    if (v.ok()) out[r] = *v;
  }
  return out;
}

}  // namespace hcomm
