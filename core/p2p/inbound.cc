// Inbound frames, on the polling thread under the transport's receive lock
// for the sending peer: eager payloads, rendezvous handshakes, data,
// goodbyes and notices.
#include "core/p2p/engine.h"

#include <string.h>

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/spin.h"
#include "core/base/status.h"
#include "core/p2p/protocol.h"

namespace hcomm {

void* Engine::OnFrame(int peer, const FrameMeta& fm, uint64_t payload_len) {
  Meta m = Unpack(fm);
  PeerInfo& p = *peers_[peer];
  p.last_rx_ns.store(CoarseNs(), std::memory_order_relaxed);
  if (payload_len == 0) return nullptr;
  absl::MutexLock l(&mu_);
  p.rx_req.reset();
  p.rx_unexpected = nullptr;
  p.rx_truncated = false;
  if (aborted_) return nullptr;
  if (m.kind == kEager) {
    if (payload_len > kEagerBytes) {
      FailOversizedEager(peer, payload_len);
      return nullptr;
    }
    const int64_t cost = FlowControl::Cost(payload_len);
    if (ClosedLocked(m.comm_id)) {
      flow_->Consumed(peer, cost);
      return nullptr;  // discard the payload
    }
    std::shared_ptr<Request> r = MatcherFor(m.comm_id).TakePosted(peer, m.tag);
    if (r) flow_->Consumed(peer, cost);
    if (r && Clash(r, m.id2, peer)) return nullptr;  // discard the payload
    if (r) {
      r->out_source = peer;
      r->out_tag = m.tag;
      r->out_fingerprint = m.id2;
      r->out_bytes = payload_len;
      p.rx_req = r;
      if (payload_len > r->bytes) {
        p.rx_truncated = true;
        return nullptr;
      }
      r->phase = Request::Phase::kMatched;
      return r->recv_buf;
    }
    p.rx_unexpected = QueueEager(MatcherFor(m.comm_id), peer, m.tag, m.id2, payload_len);
    return p.rx_unexpected != nullptr ? p.rx_unexpected->data.get() : nullptr;
  }
  if (m.kind == kData) {
    auto it = awaiting_data_.find(m.id);
    if (it == awaiting_data_.end()) return nullptr;
    std::shared_ptr<Request> r = it->second;
    if (!FromOwnerLocked(peer, kData, m.comm_id, *r)) return nullptr;  // discard the payload
    if (payload_len != r->out_bytes || payload_len > r->bytes) {
      awaiting_data_.erase(it);
      Complete(r, PeerFailure(absl::StrCat("rank ", peer, " sent ", payload_len,
                                           " bytes where ", r->out_bytes, " were announced")));
      return nullptr;
    }
    p.rx_data.push_back(r);
    return r->recv_buf;
  }
  return nullptr;  // a payload on a frame kind that has none: discard it
}

void Engine::FailOversizedEager(int peer, uint64_t payload_len) {
  // No rank sends more than kEagerBytes eagerly (larger messages go by
  // RTS/CTS): the header is corrupt or the peer does not follow the
  // protocol. Never allocate what such a header claims.
  FailPeerLocked(peer,
                 PeerFailure(absl::StrCat("rank ", rank_, ": rank ", peer,
                                          " sent an eager message of ", payload_len,
                                          " bytes, above the protocol's limit of ", kEagerBytes,
                                          "; its connection is unusable")),
                 /*any_source=*/true);
}

bool Engine::FromOwnerLocked(int peer, uint8_t kind, uint32_t ctx, const Request& r) {
  // A send's owner is the rank it targets; a receive's, the rank whose RTS
  // it matched (out_source). Ids are this engine's alone, so a frame from
  // anyone else names them only by accident or on purpose.
  const int owner = r.kind == Request::Kind::kSend ? r.peer : r.out_source;
  if (owner == peer && r.ctx == ctx) return true;
  if (peers_[peer]->state == PeerState::kUp) {
    FailPeerLocked(
        peer,
        PeerFailure(absl::StrCat(
            "rank ", rank_, ": rank ", peer, " sent a ", FrameKindName(kind), " frame (context ",
            ctx, ") for ", r.kind == Request::Kind::kSend ? "send " : "receive ", r.id,
            ", which belongs to rank ", owner, " in context ", r.ctx,
            ": a protocol violation (forged or corrupt frame); its connection is unusable")),
        /*any_source=*/true);
  }
  return false;
}

void Engine::OnWholeFrame(int peer, const FrameMeta& fm, const void* payload,
                          uint64_t payload_len) {
  Meta m = Unpack(fm);
  if (m.kind != kEager || payload_len == 0 || payload_len > kEagerBytes) {
    // (OnFrame fails the peer of an eager frame above kEagerBytes.)
    FrameSink::OnWholeFrame(peer, fm, payload, payload_len);
    return;
  }
  peers_[peer]->last_rx_ns.store(CoarseNs(), std::memory_order_relaxed);
  {
    absl::MutexLock l(&mu_);
    WholeEagerLocked(peer, fm, payload, payload_len);
  }
  SendDueCredits();
}

void Engine::WholeEagerLocked(int peer, const FrameMeta& fm, const void* payload,
                              uint64_t payload_len) {
  const Meta m = Unpack(fm);
  if (aborted_) return;
  const int64_t cost = FlowControl::Cost(payload_len);
  if (ClosedLocked(m.comm_id)) {
    flow_->Consumed(peer, cost);
    return;
  }
  Matcher& matcher = MatcherFor(m.comm_id);
  std::shared_ptr<Request> r = matcher.TakePosted(peer, m.tag);
  if (r) flow_->Consumed(peer, cost);
  if (r && Clash(r, m.id2, peer)) return;
  if (r) {
    r->out_source = peer;
    r->out_tag = m.tag;
    r->out_fingerprint = m.id2;
    r->out_bytes = payload_len;
    if (payload_len > r->bytes) {
      FailTruncated(r, peer, m.tag, payload_len);
      return;
    }
    memcpy(r->recv_buf, payload, payload_len);
    Complete(r, absl::OkStatus());
    return;
  }
  Unexpected* u = QueueEager(matcher, peer, m.tag, m.id2, payload_len);
  if (u == nullptr) return;  // a flood: the peer is failed
  memcpy(u->data.get(), payload, payload_len);
  u->complete = true;
}

Unexpected* Engine::QueueEager(Matcher& matcher, int peer, int tag, uint64_t fingerprint,
                               uint64_t payload_len) {
  const int64_t cost = FlowControl::Cost(payload_len);
  if (!flow_->Hold(peer, cost)) {
    FailFloodLocked(peer, absl::StrCat("an eager message of ", payload_len, " bytes"));
    return nullptr;
  }
  Unexpected u;
  u.held = cost;
  u.kind = Unexpected::Kind::kEager;
  u.source = peer;
  u.tag = tag;
  u.bytes = payload_len;
  u.fingerprint = fingerprint;
  u.data = payloads_.Take(payload_len);
  CheckArrivalAgainstPosted(matcher, peer, tag, fingerprint);
  return matcher.AddUnexpected(std::move(u));
}

void Engine::OnPayload(int peer, const FrameMeta& fm, uint64_t payload_len) {
  Meta m = Unpack(fm);
  PeerInfo& p = *peers_[peer];
  std::vector<Outgoing> out;
  {
    absl::MutexLock l(&mu_);
    if (ClosedLocked(m.comm_id) && DropClosedLocked(peer, fm, &out)) {
      // A communicator this rank destroyed (CloseContexts).
    } else {
      Matcher& matcher = MatcherFor(m.comm_id);
      switch (m.kind) {
        case kEager: {
          if (payload_len == 0) {
            // Zero-byte message: match it now.
            const int64_t cost = FlowControl::Cost(0);
            std::shared_ptr<Request> r = matcher.TakePosted(peer, m.tag);
            if (r) flow_->Consumed(peer, cost);
            if (r && Clash(r, m.id2, peer)) break;
            if (r) {
              r->out_source = peer;
              r->out_tag = m.tag;
              r->out_fingerprint = m.id2;
              r->out_bytes = 0;
              Complete(r, absl::OkStatus());
            } else {
              if (!flow_->Hold(peer, cost)) {
                FailFloodLocked(peer, "an eager message of 0 bytes");
                break;
              }
              Unexpected u;
              u.held = cost;
              u.kind = Unexpected::Kind::kEager;
              u.source = peer;
              u.tag = m.tag;
              u.bytes = 0;
              u.fingerprint = m.id2;
              u.complete = true;
              CheckArrivalAgainstPosted(matcher, peer, m.tag, m.id2);
              matcher.AddUnexpected(std::move(u));
            }
            break;
          }
          if (p.rx_req) {
            std::shared_ptr<Request> r = std::move(p.rx_req);
            if (p.rx_truncated) {
              FailTruncated(r, peer, m.tag, payload_len);
            } else {
              Complete(r, absl::OkStatus());
            }
          } else if (p.rx_unexpected != nullptr) {
            Unexpected* u = p.rx_unexpected;
            u->complete = true;
            if (u->claimed) {
              std::shared_ptr<Request> r = std::move(u->claimed);
              if (!r->done.load()) {
                memcpy(r->recv_buf, u->data.get(), u->bytes);
                r->out_bytes = u->bytes;
                Complete(r, absl::OkStatus());
              }
              matcher.EraseUnexpected(u);
            }
          }
          p.rx_unexpected = nullptr;
          p.rx_truncated = false;
          break;
        }
        case kData: {
          for (auto it = p.rx_data.begin(); it != p.rx_data.end(); ++it) {
            if ((*it)->id != m.id) continue;
            std::shared_ptr<Request> r = std::move(*it);
            p.rx_data.erase(it);
            awaiting_data_.erase(r->id);
            Complete(r, absl::OkStatus());
            break;
          }
          break;
        }
        case kRts: {
          std::shared_ptr<Request> r = matcher.TakePosted(peer, m.tag);
          if (r) {
            MatchRts(peer, m.tag, m.size, m.id, m.id2, r, &out);
          } else {
            if (!flow_->HoldRts(peer)) {
              FailFloodLocked(peer, absl::StrCat("an RTS (", m.size, " bytes)"));
              break;
            }
            Unexpected u;
            u.held_rts = true;
            u.kind = Unexpected::Kind::kRts;
            u.source = peer;
            u.tag = m.tag;
            u.bytes = m.size;
            u.send_id = m.id;
            u.fingerprint = m.id2;
            CheckArrivalAgainstPosted(matcher, peer, m.tag, m.id2);
            matcher.AddUnexpected(std::move(u));
          }
          break;
        }
        case kCts: {
          auto it = awaiting_cts_.find(m.id);
          if (it == awaiting_cts_.end()) {
            // We withdrew this send (timeout): tell the receiver.
            out.push_back({peer, Pack(MakeMeta(kDataAbort, m.comm_id, rank_, m.tag, 0, m.id2))});
            break;
          }
          std::shared_ptr<Request> r = it->second;
          if (!FromOwnerLocked(peer, kCts, m.comm_id, *r)) break;
          awaiting_cts_.erase(it);
          r->phase = Request::Phase::kMatched;
          sending_[r->id] = r;
          Outgoing o{peer, Pack(MakeMeta(kData, r->ctx, rank_, r->tag, r->bytes, m.id2))};
          o.payload = r->send_buf;
          o.len = r->bytes;
          o.complete_on_sent = r;
          out.push_back(std::move(o));
          break;
        }
        case kReject: {
          auto it = awaiting_cts_.find(m.id);
          if (it != awaiting_cts_.end() &&
              FromOwnerLocked(peer, kReject, m.comm_id, *it->second)) {
            std::shared_ptr<Request> r = it->second;
            awaiting_cts_.erase(it);
            Complete(r, absl::OkStatus());  // as in MPI, the receiver is the one told
          }
          break;
        }
        case kCancelRts: {
          for (auto it = matcher.unexpected().begin(); it != matcher.unexpected().end(); ++it) {
            if (it->kind == Unexpected::Kind::kRts && it->source == peer && it->send_id == m.id) {
              matcher.EraseUnexpected(it);
              break;
            }
          }
          break;
        }
        case kDataAbort: {
          auto it = awaiting_data_.find(m.id);
          if (it != awaiting_data_.end() &&
              FromOwnerLocked(peer, kDataAbort, m.comm_id, *it->second)) {
            std::shared_ptr<Request> r = it->second;
            awaiting_data_.erase(it);
            Complete(r, PeerFailure(absl::StrCat("rank ", peer, " withdrew the message (",
                                                 r->out_bytes, " bytes, tag ", r->out_tag,
                                                 ") it had announced: its send timed out, "
                                                 "failed or was aborted")));
          }
          break;
        }
        case kCredit: {
          if (!flow_->ReturnCredit(peer, static_cast<int64_t>(m.size)) &&
              peers_[peer]->state == PeerState::kUp) {
            FailPeerLocked(peer,
                           PeerFailure(absl::StrCat(
                               "rank ", rank_, ": rank ", peer, " returned ", m.size,
                               " bytes of flow-control credit, more than this rank had spent: a "
                               "protocol violation (forged or corrupt frame); its connection is "
                               "unusable")),
                           /*any_source=*/true);
          }
          break;
        }
        case kNotice: {
          absl::Status why = Mismatch(absl::StrCat("rank ", m.src, " found ranks disagreeing"));
          why.SetPayload(kClashUrl, absl::Cord(absl::StrCat(m.id, " ", m.size, " ", m.id2, " ",
                                                            m.src)));
          PoisonLocked(m.comm_id, m.tag, why);
          break;
        }
        case kAbandon: {
          if (m.id <= UINT32_MAX && m.id != m.comm_id) {
            PeerAbandonedLocked(peer, m.comm_id, static_cast<uint32_t>(m.id));
          }
          break;
        }
        case kGoodbye: {
          p.got_goodbye = true;
          if (p.state == PeerState::kUp) {
            // Sends whose payload is already with the transport are left to
            // it: they complete once the data is out (or fail if it cannot
            // be), whatever the peer does next.
            // A rank that leaves often does so because another rank died
            // (its collective failed, and the program gave up): name the
            // ranks known to have failed, so the message leads to the cause.
            std::vector<int> failed;
            for (int r = 0; r < size_; ++r) {
              if (r != peer && peers_[r]->state == PeerState::kFailed) failed.push_back(r);
            }
            std::string after;
            if (!failed.empty()) {
              after = absl::StrCat(" (after rank", failed.size() > 1 ? "s " : " ",
                                   absl::StrJoin(failed, ", "), " had failed)");
            }
            FailPeerLocked(peer,
                           PeerFailure(absl::StrCat("rank ", peer,
                                                    " destroyed its communicator while this was "
                                                    "pending",
                                                    after)),
                           /*any_source=*/false, /*keep_queued_sends=*/true);
            p.fast_send.store(false, std::memory_order_release);
            p.state = PeerState::kClosed;
          }
          break;
        }
        default:
          break;
      }
    }
  }
  if (m.kind == kGoodbye) {
    route_[peer]->CloseWrite(peer);
  }
  Flush(&out);
  SendDueCredits();
}

void Engine::FailFloodLocked(int peer, const std::string& what) {
  if (peers_[peer]->state != PeerState::kUp) return;
  FailPeerLocked(
      peer,
      PeerFailure(absl::StrCat(
          "rank ", rank_, ": rank ", peer, " sent ", what, " beyond what this rank holds of its "
          "unreceived messages (", flow_->held(peer), " of ", flow_->window(),
          " bytes, the unexpected_bytes key): it does not follow the flow control of the "
          "protocol (a flood, or a forged or corrupt frame); its connection is unusable")),
      /*any_source=*/true);
}

void Engine::SendDueCredits() {
  if (flow_ == nullptr || !flow_->CreditDue()) return;
  for (auto [peer, amount] : flow_->TakeDue()) {
    if (!peers_[peer]->fast_send.load(std::memory_order_acquire)) continue;  // not up
    route_[peer]->Send(peer, Pack(MakeMeta(kCredit, 0, rank_, 0, amount, 0)), nullptr, 0,
                       [](absl::Status) {});
  }
}

}  // namespace hcomm
