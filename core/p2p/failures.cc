// When things go wrong: a peer's failure, a member's failure breaking its
// communicators, a collective clash poisoning a tag, an aborted group.
#include "core/p2p/engine.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "core/p2p/protocol.h"

namespace hcomm {

void Engine::PoisonLocked(uint32_t ctx, int tag, const absl::Status& why) {
  for (const auto& [key, st] : poisoned_) {
    if (key.first == ctx && key.second == tag) return;
  }
  poisoned_.push_back({{ctx, tag}, why});
  any_poisoned_.store(true, std::memory_order_release);
  if (poisoned_.size() > 64) poisoned_.pop_front();
  FailWaitingLocked(ctx, [tag](const Request& r) { return r.tag == tag; }, why,
                    /*describe=*/false);
}

void Engine::FailWaitingLocked(uint32_t ctx, absl::FunctionRef<bool(const Request&)> pick,
                               const absl::Status& why, bool describe) {
  auto fail = [&](const std::shared_ptr<Request>& r) {
    Complete(r, describe ? Annotate(why, Describe(*r)) : why);
  };
  if (auto m = contexts_.find(ctx); m != contexts_.end()) {
    auto& posted = m->second->posted();
    for (auto it = posted.begin(); it != posted.end();) {
      if (pick(**it)) {
        std::shared_ptr<Request> r = *it;
        it = posted.erase(it);
        fail(r);
      } else {
        ++it;
      }
    }
  }
  // Sends waiting for a receive: nothing of them has left (a late CTS is
  // answered with DATA_ABORT). Those already moving are left to finish.
  for (auto it = awaiting_cts_.begin(); it != awaiting_cts_.end();) {
    std::shared_ptr<Request> r = it->second;
    if (r->ctx == ctx && pick(*r)) {
      awaiting_cts_.erase(it++);
      fail(r);
    } else {
      ++it;
    }
  }
}

absl::Status Engine::RefusedLocked(uint32_t ctx, int tag) {
  for (const auto& [key, why] : poisoned_) {
    if (key.first == ctx && key.second == tag) return why;
  }
  if (!broken_.empty()) {
    auto it = broken_.find(ctx);
    if (it != broken_.end()) return Told(it->second, ctx);
  }
  return absl::OkStatus();
}

void Engine::WatchMembers(uint32_t ctx, const std::vector<int>& members) {
  absl::MutexLock l(&mu_);
  members_[ctx] = members;
  // A member that failed already (a communicator made after a failure,
  // Communicator::Shrink) breaks it as one failing later would.
  for (int p : members) {
    if (p != rank_ && peers_[p]->state == PeerState::kFailed) {
      BreakContextLocked(ctx, PeerFailure(absl::StrCat("a rank of this communicator failed: ",
                                                       peers_[p]->failure.message())));
      break;
    }
  }
}

void Engine::BreakCollectivesOfLocked(int peer, const absl::Status& why) {
  for (const auto& [ctx, members] : members_) {
    if (broken_.contains(ctx) || std::find(members.begin(), members.end(), peer) == members.end()) {
      continue;
    }
    BreakContextLocked(ctx, PeerFailure(absl::StrCat("a rank of this communicator failed: ",
                                                     why.message())));
  }
}

void Engine::BreakContextLocked(uint32_t ctx, const absl::Status& broken) {
  broken_[ctx] = broken;
  any_poisoned_.store(true, std::memory_order_release);
  FailWaitingLocked(ctx, [](const Request&) { return true; }, broken, /*describe=*/true);
}

void Engine::PeerAbandonedLocked(int peer, uint32_t p2p_ctx, uint32_t coll_ctx) {
  // Named by its rank in the communicator where this rank knows it (the
  // members, in group order, of a communicator it has made).
  std::string who = absl::StrCat("world rank ", peer);
  if (auto m = members_.find(coll_ctx); m != members_.end()) {
    auto at = std::find(m->second.begin(), m->second.end(), peer);
    if (at != m->second.end()) {
      who = absl::StrCat("rank ", at - m->second.begin(), " (world rank ", peer, ")");
    }
  }
  const absl::Status why =
      PeerFailure(absl::StrCat(who, " aborted the communicator (hcomm_comm_abort)"));
  // No collective of it can complete any more, whatever it waits for.
  if (!broken_.contains(coll_ctx)) BreakContextLocked(coll_ctx, why);
  // Point-to-point with the others goes on; with `peer`, nothing will.
  abandoned_[{p2p_ctx, peer}] = why;
  any_poisoned_.store(true, std::memory_order_release);
  // Receives that answered its request-to-send: their data will not come
  // (unless it is landing already, or comes anyway and is then dropped).
  for (auto it = awaiting_data_.begin(); it != awaiting_data_.end();) {
    std::shared_ptr<Request> r = it->second;
    if ((r->ctx == p2p_ctx || r->ctx == coll_ctx) && r->out_source == peer &&
        !peers_[peer]->Landing(r.get())) {
      awaiting_data_.erase(it++);
      Complete(r, Annotate(why, Describe(*r)));
    } else {
      ++it;
    }
  }
  // Receives from it fail, and so do receives from any rank, as when a peer
  // fails: it may be the one they wait for. Those posted later wait for
  // the others.
  FailWaitingLocked(
      p2p_ctx, [peer](const Request& r) { return r.peer == peer || r.peer == kAnySource; }, why,
      /*describe=*/true);
}

void Engine::Poison(uint32_t ctx, int tag, const std::vector<int>& members, uint64_t culprit_fp,
                    int culprit, uint64_t reporter_fp) {
  std::vector<Outgoing> out;
  {
    absl::MutexLock l(&mu_);
    absl::Status why = Mismatch(absl::StrCat("rank ", rank_, " found ranks disagreeing"));
    why.SetPayload(kClashUrl, absl::Cord(absl::StrCat(culprit_fp, " ", culprit, " ", reporter_fp,
                                                      " ", rank_)));
    PoisonLocked(ctx, tag, why);
    for (int p : members) {
      if (p == rank_ || peers_[p]->state != PeerState::kUp) continue;
      out.push_back({p, Pack(MakeMeta(kNotice, ctx, rank_, tag, static_cast<uint64_t>(culprit),
                                      culprit_fp, reporter_fp))});
    }
  }
  Flush(&out);
}

void Engine::FailPeerLocked(int peer, const absl::Status& why, bool any_source,
                            bool keep_queued_sends) {
  PeerInfo& p = *peers_[peer];
  p.fast_send.store(false, std::memory_order_release);
  p.state = PeerState::kFailed;
  p.failure = why;
  auto fails = [&](const Request& r) { return r.peer == peer || (any_source && r.peer == kAnySource); };
  for (auto& [ctx, matcher] : contexts_) {
    for (auto it = matcher->posted().begin(); it != matcher->posted().end();) {
      if (fails(**it)) {
        std::shared_ptr<Request> r = *it;
        it = matcher->posted().erase(it);
        Complete(r, Annotate(why, Describe(*r)));
      } else {
        ++it;
      }
    }
  }
  for (auto* table : {&awaiting_cts_, &awaiting_data_, &sending_}) {
    if (keep_queued_sends && table == &sending_) continue;
    for (auto it = table->begin(); it != table->end();) {
      std::shared_ptr<Request> r = it->second;
      bool hit = r->kind == Request::Kind::kSend ? r->peer == peer : r->out_source == peer;
      if (hit) {
        table->erase(it++);
        Complete(r, Annotate(why, Describe(*r)));
      } else {
        ++it;
      }
    }
  }
  // Arrivals still incomplete can never complete; complete ones stay deliverable.
  for (auto& [ctx, matcher] : contexts_) {
    auto& unexpected = matcher->unexpected();
    for (auto it = unexpected.begin(); it != unexpected.end();) {
      bool drop = it->source == peer && (it->kind == Unexpected::Kind::kRts ||
                                         (it->kind == Unexpected::Kind::kEager && !it->complete));
      if (drop) {
        if (it->claimed) Complete(it->claimed, Annotate(why, Describe(*it->claimed)));
        it = matcher->EraseUnexpected(it);
      } else {
        ++it;
      }
    }
  }
  if (p.rx_req) {
    Complete(p.rx_req, Annotate(why, Describe(*p.rx_req)));
    p.rx_req.reset();
  }
  for (const std::shared_ptr<Request>& r : p.rx_data) {
    awaiting_data_.erase(r->id);
    Complete(r, Annotate(why, Describe(*r)));
  }
  p.rx_data.clear();
  p.rx_unexpected = nullptr;
  // A member that left in order (its goodbye) did its part of every
  // collective it entered; one that failed may not have.
  if (!keep_queued_sends) BreakCollectivesOfLocked(peer, why);
}

void Engine::OnConnectionLost(int peer, const absl::Status& status) {
  absl::MutexLock l(&mu_);
  PeerInfo& p = *peers_[peer];
  if (aborted_ || p.state != PeerState::kUp) return;
  if (p.said_goodbye || p.got_goodbye || destroyed_) {
    // An orderly close: either side's goodbye came first.
    p.fast_send.store(false, std::memory_order_release);
    p.state = PeerState::kClosed;
    p.failure = PeerFailure(absl::StrCat("rank ", peer, " has closed its connection"));
    return;
  }
  FailPeerLocked(peer,
                 PeerFailure(!p.cut.empty()
                                 ? p.cut
                                 : absl::StrCat("rank ", rank_, ": connection to rank ", peer,
                                                " lost (", status.message(),
                                                "); the peer process died or the network broke")),
                 /*any_source=*/true);
}

}  // namespace hcomm
