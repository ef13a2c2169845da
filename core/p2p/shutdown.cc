// Ends: a group's contexts closed or aborted, the whole engine aborted or
// destroyed in order.
#include "core/p2p/engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/base/interrupt.h"
#include "core/base/status.h"
#include "core/p2p/protocol.h"

namespace hcomm {

bool Engine::InFlightLocked(uint32_t first, uint32_t count) {
  auto ours = [&](uint32_t ctx) { return ctx - first < count; };
  for (const auto* table : {&awaiting_cts_, &awaiting_data_, &sending_}) {
    for (const auto& [id, r] : *table) {
      if (ours(r->ctx)) return true;
    }
  }
  for (const auto& p : peers_) {
    if (p->rx_req && ours(p->rx_req->ctx)) return true;
    for (const auto& r : p->rx_data) {
      if (ours(r->ctx)) return true;
    }
  }
  for (uint32_t c = first; ours(c); ++c) {
    auto it = contexts_.find(c);
    if (it == contexts_.end()) continue;
    for (const Unexpected& u : it->second->unexpected()) {
      if (u.kind == Unexpected::Kind::kEager && !u.complete) return true;
    }
  }
  return false;
}

void Engine::CloseContexts(uint32_t first, uint32_t count, MonoTime deadline) {
  auto ours = [&](uint32_t ctx) { return ctx - first < count; };
  // 1. As Destroy does for the whole job: our sends reach their peers, and
  //    messages already landing land (not after an abort of them).
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (aborted_ || destroyed_ || ClosedLocked(first) || !InFlightLocked(first, count)) break;
    }
    const MonoTime now = MonoNow();
    if (now >= deadline || InterruptNow(now)) break;
    if (!transports_.empty() && progress_mu_.TryLock()) {
      PollAll(absl::Milliseconds(5));
      progress_mu_.Unlock();
    } else {
      absl::SleepFor(absl::Milliseconds(1));  // another thread drives progress
    }
  }
  // 2. Fail what is pending, drop what arrived unreceived.
  const absl::Status why = Destroyed();
  std::vector<std::shared_ptr<Request>> sends;
  std::vector<Outgoing> out;
  {
    absl::MutexLock l(&mu_);
    for (uint32_t c = first; ours(c); ++c) {
      closed_contexts_.insert(c);
      members_.erase(c);
      broken_.erase(c);
    }
    for (auto it = abandoned_.begin(); it != abandoned_.end();) {
      if (ours(it->first.first)) {
        abandoned_.erase(it++);
      } else {
        ++it;
      }
    }
    poisoned_.erase(std::remove_if(poisoned_.begin(), poisoned_.end(),
                                   [&](const auto& p) { return ours(p.first.first); }),
                    poisoned_.end());
    // With nothing refused any more, operations take their fast paths again
    // (also after this group was aborted or broken by a member's failure).
    any_poisoned_.store(!poisoned_.empty() || !broken_.empty() || !abandoned_.empty(),
                        std::memory_order_release);
    EndContextsLocked(first, count, why, &sends, &out);
  }
  // (Each ends ABORTED, or ABORTED saying the rest of it is still on its
  // way: nobody waits for it any more.)
  for (const auto& r : sends) Withdraw(r, why).IgnoreError();
  Flush(&out);
}

void Engine::AbortCommunicator(uint32_t p2p_ctx, uint32_t coll_ctx,
                               const std::vector<int>& members, absl::Status why) {
  const uint32_t first = std::min(p2p_ctx, coll_ctx);
  const uint32_t count = std::max(p2p_ctx, coll_ctx) - first + 1;
  std::vector<std::shared_ptr<Request>> sends;
  std::vector<Outgoing> out;
  if (why.ok()) why = Aborted(absl::StrCat("rank ", rank_, ": the communicator was aborted"));
  {
    absl::MutexLock l(&mu_);
    if (aborted_ || destroyed_ || ClosedLocked(p2p_ctx)) return;
    for (uint32_t c : {p2p_ctx, coll_ctx}) {
      closed_contexts_.insert(c);
      broken_[c] = why;  // later operations there fail at once
    }
    any_poisoned_.store(true, std::memory_order_release);
    // The members hear of the abort before anything else of it: a sender
    // whose request-to-send is refused below then fails with the abort's
    // reason first, rather than completing as if a receive had been too
    // small.
    for (int p : members) {
      if (p == rank_ || peers_[p]->state != PeerState::kUp) continue;
      out.push_back({p, Pack(MakeMeta(kAbandon, p2p_ctx, rank_, 0, 0, coll_ctx))});
    }
    EndContextsLocked(first, count, why, &sends, &out);
  }
  Flush(&out);
  for (const auto& r : sends) Withdraw(r, why).IgnoreError();
}

void Engine::EndContextsLocked(uint32_t first, uint32_t count, const absl::Status& why,
                               std::vector<std::shared_ptr<Request>>* sends,
                               std::vector<Outgoing>* out) {
  auto ours = [&](uint32_t ctx) { return ctx - first < count; };
  for (const auto* table : {&awaiting_cts_, &sending_}) {
    for (const auto& [id, r] : *table) {
      if (ours(r->ctx)) sends->push_back(r);
    }
  }
  auto landing = [&](const std::shared_ptr<Request>& r) {
    for (const auto& p : peers_) {
      if (p->Landing(r.get())) return true;
    }
    return false;
  };
  // A receive whose payload is landing finishes with it (its buffer is
  // being written); one whose payload has not begun gives it up (the DATA
  // frame then finds no receive and is discarded).
  for (auto it = awaiting_data_.begin(); it != awaiting_data_.end();) {
    std::shared_ptr<Request> r = it->second;
    if (ours(r->ctx) && !landing(r)) {
      awaiting_data_.erase(it++);
      Complete(r, why);
    } else {
      ++it;
    }
  }
  for (uint32_t c = first; ours(c); ++c) {
    auto it = contexts_.find(c);
    if (it == contexts_.end()) continue;
    Matcher& m = *it->second;
    for (auto& r : m.posted()) Complete(r, why);
    m.posted().clear();
    bool keep = false;  // an arrival still landing: its end drops it
    for (auto u = m.unexpected().begin(); u != m.unexpected().end();) {
      if (u->claimed) Complete(u->claimed, why);
      u->claimed.reset();
      if (u->kind == Unexpected::Kind::kEager && !u->complete) {
        keep = true;
        ++u;
        continue;
      }
      if (u->sender) Complete(u->sender, why);
      if (u->kind == Unexpected::Kind::kRts) {
        out->push_back({u->source, Pack(MakeMeta(kReject, c, rank_, u->tag, u->bytes,
                                                 u->send_id))});
      }
      u = m.EraseUnexpected(u);
    }
    if (!keep) EraseMatcherLocked(it);
  }
}

bool Engine::DropClosedLocked(int peer, const FrameMeta& fm, std::vector<Outgoing>* out) {
  const Meta m = Unpack(fm);
  PeerInfo& p = *peers_[peer];
  switch (m.kind) {
    case kEager: {
      // OnFrame discarded the payload, unless it began landing before the
      // close: into a receive (left to finish), or into the queue.
      if (p.rx_req) {
        std::shared_ptr<Request> r = std::move(p.rx_req);
        Complete(r, p.rx_truncated ? Destroyed() : absl::OkStatus());
      }
      if (p.rx_unexpected != nullptr) {
        auto it = contexts_.find(m.comm_id);
        if (it != contexts_.end()) {
          it->second->EraseUnexpected(p.rx_unexpected);
          if (it->second->unexpected().empty() && it->second->posted().empty()) {
            EraseMatcherLocked(it);
          }
        }
      }
      p.rx_unexpected = nullptr;
      p.rx_truncated = false;
      return true;
    }
    case kRts:  // nobody will receive it: the sender's send completes
      out->push_back({peer, Pack(MakeMeta(kReject, m.comm_id, rank_, m.tag, m.size, m.id))});
      return true;
    case kCancelRts:
    case kNotice:
    case kAbandon:
      return true;
    default:
      return false;
  }
}

void Engine::FailAllPendingLocked(const absl::Status& why) {
  for (auto& [ctx, matcher] : contexts_) {
    for (auto& r : matcher->posted()) Complete(r, why);
    matcher->posted().clear();
  }
  for (auto* table : {&awaiting_cts_, &awaiting_data_, &sending_}) {
    for (auto& [id, r] : *table) Complete(r, why);
    table->clear();
  }
  for (auto& [ctx, matcher] : contexts_) {
    for (auto& u : matcher->unexpected()) {
      if (u.claimed) Complete(u.claimed, why);
      if (u.sender) Complete(u.sender, why);
    }
  }
  for (auto& p : peers_) {
    if (p->rx_req) Complete(p->rx_req, why);
    for (auto& r : p->rx_data) Complete(r, why);
  }
}

void Engine::Abort() {
  {
    absl::MutexLock l(&mu_);
    if (aborted_) return;
    aborted_ = true;
    aborted_flag_ = true;
    FailAllPendingLocked(
        Aborted(absl::StrCat("rank ", rank_, ": the communicator was aborted")));
  }
  for (auto& t : transports_) t->ShutdownAll();
}

std::string Engine::UndeliveredLocked() {
  std::vector<std::string> sends;
  size_t n = 0;
  for (const auto* table : {&awaiting_cts_, &sending_}) {
    for (const auto& [id, r] : *table) {
      if (++n <= 3) sends.push_back(Describe(*r));
    }
  }
  std::string what = absl::StrCat(n, " send", n == 1 ? "" : "s", " not delivered");
  if (!sends.empty()) {
    absl::StrAppend(&what, " (", absl::StrJoin(sends, "; "), n > 3 ? "; ..." : "", ")");
  }
  if (size_t queued = PendingSendsAll(); queued > 0) {
    absl::StrAppend(&what, ", ", queued, " frame", queued == 1 ? "" : "s",
                    " still queued in the transports");
  }
  return what;
}

absl::Status Engine::LostPeersStatus() {
  // An application told of a failure knows what it may have lost (and may
  // have shrunk the job since): only a failure it never saw is news.
  if (failure_told_.load(std::memory_order_relaxed)) return absl::OkStatus();
  absl::MutexLock l(&mu_);
  std::vector<int> lost;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && peers_[p]->state == PeerState::kFailed &&
        peers_[p]->sent.load(std::memory_order_relaxed)) {
      lost.push_back(p);
    }
  }
  if (lost.empty()) return absl::OkStatus();
  return PeerFailure(absl::StrCat(
      "hcomm_comm_destroy: rank ", rank_, ": rank", lost.size() == 1 ? " " : "s ",
      absl::StrJoin(lost, ", "), " failed before confirming that it had read every message this rank sent it; the last of them "
      "may be lost (",
      peers_[lost[0]]->failure.message(), ")"));
}

absl::Status Engine::Destroy() {
  {
    absl::MutexLock l(&mu_);
    if (destroyed_) return absl::OkStatus();
  }
  if (job_ != nullptr) job_->MarkEnded();
  closing_.store(true, std::memory_order_release);
  absl::Status result;
  if (!transports_.empty() && !aborted_flag_.load()) {
    // 1. Let our own sends reach their peers.
    const MonoTime start = MonoNow();
    const MonoTime deadline = start + timeout();
    for (;;) {
      bool pending;
      {
        absl::MutexLock l(&mu_);
        pending = !awaiting_cts_.empty() || !sending_.empty() || PendingSendsAll() > 0;
        if (pending && MonoNow() >= deadline) {
          result = Timeout(absl::StrCat("hcomm_comm_destroy: rank ", rank_, ": ",
                                        UndeliveredLocked(), " after ",
                                        Seconds(MonoNow() - start),
                                        " (timeout_ms); they are dropped"));
        }
      }
      if (!pending || !result.ok()) break;
      const MonoTime now = MonoNow();
      if (InterruptNow(now)) break;
      PollOnce(absl::Milliseconds(5));
    }
    // 2. Goodbye to every peer still up, then close our side.
    std::vector<int> up;
    {
      absl::MutexLock l(&mu_);
      for (int p = 0; p < size_; ++p) {
        if (p != rank_ && peers_[p]->state == PeerState::kUp) {
          peers_[p]->fast_send.store(false, std::memory_order_release);
          peers_[p]->said_goodbye = true;
          up.push_back(p);
        }
      }
    }
    for (int p : up) {
      route_[p]->Send(p, Pack(MakeMeta(kGoodbye, 0, rank_, 0, 0, 0)), nullptr, 0, nullptr);
      route_[p]->CloseWrite(p);
    }
    // 3. Wait (briefly) for each peer to close its side, which it does as
    //    soon as it reads our goodbye: everything we sent has been read.
    const MonoTime close_deadline = std::min(deadline, MonoNow() + absl::Seconds(10));
    for (;;) {
      bool open = false;
      {
        absl::MutexLock l(&mu_);
        for (int p : up) {
          if (peers_[p]->state == PeerState::kUp && !peers_[p]->got_goodbye) open = true;
        }
        destroyed_ = !open;  // EOFs after the goodbyes are not failures
      }
      if (!open || MonoNow() >= close_deadline) break;
      PollOnce(absl::Milliseconds(5));
    }
    if (absl::Status lost = LostPeersStatus(); !lost.ok()) result = lost;
  }
  stop_ = true;
  {
    absl::MutexLock l(&bg_mu_);
    bg_cv_.SignalAll();
  }
  if (progress_thread_.joinable()) progress_thread_.join();
  if (hang_thread_.joinable()) hang_thread_.join();
  {
    absl::MutexLock l(&mu_);
    destroyed_ = true;
    FailAllPendingLocked(Destroyed());
    for (auto& [ctx, matcher] : contexts_) matcher->unexpected().clear();
    // A receive whose message was still arriving is failed above: after
    // our goodbye the peer's close counts as orderly and fails nothing.
    for (auto& p : peers_) {
      p->rx_req.reset();
      p->rx_data.clear();
    }
  }
  {
    // Requests outlive their communicator (hcomm.h), and a thread may still
    // be waiting on one, polling the transports: none polls once this lock
    // is ours, nor after (PollAll). The transports are shut now and freed
    // with the Engine, when the last request lets go of it.
    absl::MutexLock p(&progress_mu_);
    torn_down_.store(true, std::memory_order_release);
    for (auto& t : transports_) t->ShutdownAll();
  }
  job_.reset();  // rank 0 stops serving the store
  return result;
}

}  // namespace hcomm
