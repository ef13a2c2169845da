// Hang reports: what this rank waits for (PendingState) and its last
// operations (the flight recorder), answered to a rank that timed out and
// collected from every rank: through the store while rank 0 serves it, over
// the connections (kHangCtx) once it is gone.
#include "core/p2p/engine.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
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
    if (ctx == kHangCtx) continue;  // the reports' own messages
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

std::string Engine::HangAnswer() {
  std::string out = PendingState();
  if (out.size() > kHangAnswerBytes) {
    out.resize(out.rfind('\n', kHangAnswerBytes - 1) + 1);  // whole lines
  }
  return out + FlightRecorder::Encode(flight_->Snapshot(), kHangAnswerBytes - out.size());
}

namespace {

// Tag of the asks in kHangCtx; each report's answers come under a tag of
// its own (>= 1).
constexpr int kHangAskTag = 0;

}  // namespace

void Engine::AnswerHangRequests() {
  // The store lives in rank 0's process: once rank 0 is gone (or the store
  // failed us), asks come over the connections alone.
  if (store_lost_.load(std::memory_order_relaxed) || (rank_ != 0 && !PeerHealth(0).ok())) {
    return;
  }
  auto n = job_->store().Add("hcomm/hang/req", 0, MonoNow() + absl::Milliseconds(100));
  if (!n.ok()) {
    if (CodeOf(n.status()) == ErrorCode::kUnavailable) store_lost_.store(true);
    return;
  }
  absl::MutexLock l(&hang_mu_);
  if (hang_answered_ < 0) hang_answered_ = *n;  // requests before we started are old
  if (*n <= hang_answered_) return;
  // Several ranks may time out at once, each with its own request: answer
  // every one since the last.
  std::string state = HangAnswer();
  for (int64_t q = std::max<int64_t>(hang_answered_ + 1, *n - 64); q <= *n; ++q) {
    job_->store()
        .Set(absl::StrCat("hcomm/hang/", q, "/", rank_), state,
              MonoNow() + absl::Milliseconds(500))
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

void Engine::AnswerHangAsks() {
  if (hang_ask_ != nullptr) {
    if (!hang_ask_->done.load(std::memory_order_acquire)) return;
    std::shared_ptr<Request> ask = std::move(hang_ask_);
    hang_ask_.reset();
    const int32_t tag = hang_ask_buf_[0];
    if (ask->status.ok() && ask->out_bytes == sizeof hang_ask_buf_ && tag > 0 &&
        ask->out_source >= 0 && ask->out_source != rank_) {
      auto answer = std::make_shared<std::string>(HangAnswer());
      auto sent = Isend(kHangCtx, answer->data(), answer->size(), 1, ask->out_source, tag);
      if (sent.ok()) {
        (*sent)->keep = answer;  // the send completes in the background
        Release(*sent);
      }
      if (!hang_report_file_.empty()) {
        std::string path = absl::StrCat(hang_report_file_, ".", rank_);
        if (FILE* f = fopen(path.c_str(), "w")) {
          fprintf(f, "rank %d pending state (hang report from rank %d):\n%s", rank_,
                  ask->out_source, answer->c_str());
          fclose(f);
        }
      }
    }
  }
  if (!Usable().ok()) return;
  auto posted = Irecv(kHangCtx, hang_ask_buf_, sizeof hang_ask_buf_, sizeof(int32_t), kAnySource,
                      kHangAskTag);
  if (posted.ok()) hang_ask_ = *std::move(posted);
}

void Engine::HangResponderLoop() {
  while (!stop_.load(std::memory_order_acquire)) {
    AnswerHangRequests();
    AnswerHangAsks();
    // Look again in 50 ms (a timing-out rank waits for our answer), waking
    // at once when the engine stops (it signals bg_cv_ once stop_ is set).
    absl::MutexLock l(&bg_mu_);
    if (!stop_.load(std::memory_order_acquire)) bg_cv_.WaitFor(&bg_mu_, absl::Milliseconds(50));
  }
}

std::map<int, std::string> Engine::CollectHangReport(MonoTime deadline) {
  std::map<int, std::string> out;
  if (job_ == nullptr) return out;
  if (store_lost_.load(std::memory_order_relaxed) || (rank_ != 0 && !PeerHealth(0).ok())) {
    return CollectHangReportDirect(deadline);
  }
  auto n = job_->store().Add("hcomm/hang/req", 1, deadline);
  if (!n.ok()) {
    // Rank 0, and the store with it, is gone (or unreachable): ask the
    // ranks over the connections in the time left.
    if (CodeOf(n.status()) == ErrorCode::kUnavailable) store_lost_.store(true);
    return CollectHangReportDirect(deadline);
  }
  out[rank_] = HangAnswer();
  job_->store().Set(absl::StrCat("hcomm/hang/", *n, "/", rank_), out[rank_], deadline)
      .IgnoreError();
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(absl::StrCat("hcomm/hang/", *n, "/", r));
  // Wait for the answers until just before the deadline, then read whoever
  // answered (a few local round trips). Ranks timing out at the same moment
  // wait for our answer as we wait for theirs: answer between looks.
  const absl::Duration left = deadline - MonoNow();
  const MonoTime wait_until = deadline - std::min(absl::Milliseconds(20), left / 4);
  for (;;) {
    const MonoTime look = std::min(wait_until, MonoNow() + absl::Milliseconds(50));
    if (job_->store().Wait(keys, look).ok() || look >= wait_until) break;
    AnswerHangRequests();
  }
  const MonoTime read_by = std::max(deadline, MonoNow() + absl::Milliseconds(20));
  auto have = job_->store().Check(keys, read_by);
  if (!have.ok()) return out;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !(*have)[r]) continue;
    auto v = job_->store().Get(keys[r], read_by);
    if (v.ok()) out[r] = *v;
  }
  return out;
}

std::map<int, std::string> Engine::CollectHangReportDirect(MonoTime deadline) {
  std::map<int, std::string> out;
  out[rank_] = HangAnswer();
  if (!Usable().ok()) return out;
  const int32_t tag = (hang_next_tag_.fetch_add(1, std::memory_order_relaxed) & 0x3fffffff) + 1;
  // The answers, one at a time, into one buffer: eager messages of at most
  // kHangAnswerBytes, from whichever rank answers first.
  // (Each receive keeps it: one withdrawn while its message lands still
  // writes there.)
  std::shared_ptr<char[]> buf(new char[kHangAnswerBytes]);
  auto recv = Irecv(kHangCtx, buf.get(), kHangAnswerBytes, 1, kAnySource, tag);
  if (!recv.ok()) return out;
  std::shared_ptr<Request> r = *std::move(recv);
  r->keep = buf;
  int asked = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !PeerHealth(p).ok()) continue;
    auto ask = std::make_shared<std::array<int32_t, 2>>(std::array<int32_t, 2>{tag, 0});
    auto sent = Isend(kHangCtx, ask->data(), sizeof(*ask), sizeof(int32_t), p, kHangAskTag);
    if (!sent.ok()) continue;
    (*sent)->keep = ask;
    Release(*sent);
    ++asked;
  }
  // Until just before the deadline, as through the store.
  const absl::Duration left = deadline - MonoNow();
  const MonoTime wait_until = deadline - std::min(absl::Milliseconds(20), left / 4);
  int answered = 0;
  while (answered < asked && r != nullptr) {
    Wait(r.get(), wait_until).IgnoreError();
    if (!r->done.load(std::memory_order_acquire)) break;  // out of time
    if (r->status.ok() && r->out_source >= 0) {
      out[r->out_source] = std::string(buf.get(), r->out_bytes);
      ++answered;
    } else if (!Usable().ok()) {
      return out;
    }
    // (A failed receive of any rank: some rank failed; the others may
    // still answer.)
    r.reset();
    if (answered < asked) {
      auto again = Irecv(kHangCtx, buf.get(), kHangAnswerBytes, 1, kAnySource, tag);
      if (again.ok()) {
        r = *std::move(again);
        r->keep = buf;
      }
    }
  }
  if (r != nullptr && !r->done.load(std::memory_order_acquire)) {
    Withdraw(r, Timeout("hang report: the time to collect answers is over")).IgnoreError();
  }
  return out;
}

}  // namespace hcomm
