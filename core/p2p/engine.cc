// The engine's state and the posting of sends and receives (eager, by
// rendezvous, to oneself), and their matching against what arrived.
#include "core/base/priority.h"
#include "core/p2p/engine.h"

#include <sched.h>
#include <string.h>

#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/base/spin.h"
#include "core/base/status.h"
#include "core/p2p/protocol.h"
#include "core/p2p/request.h"

namespace hcomm {

// Every eager payload is staged in one of the pool's size classes.
static_assert(Engine::kEagerBytes <= PayloadPool::kMaxPooled);

const char kClashUrl[] = "hcomm.dev/clash";

Engine::Engine(const Options& opts)
    : rank_(opts.rank),
      size_(opts.world_size),
      host_id_(opts.host_id),
      timeout_ms_(opts.timeout_ms),
      spin_(absl::Microseconds(50)) {
  peers_.reserve(size_);
  for (int i = 0; i < size_; ++i) peers_.push_back(std::make_unique<PeerInfo>());
  if (const char* s = getenv("HCOMM_SPIN_US")) {
    int us = 0;
    if (absl::SimpleAtoi(s, &us) && us >= 0) {
      spin_ = absl::Microseconds(us);
      spin_set_ = true;
    }
  }
}

Engine::~Engine() { Destroy().IgnoreError(); }

void Engine::Complete(const std::shared_ptr<Request>& r, absl::Status s) {
  if (r->done.load(std::memory_order_relaxed)) return;
  // (The hang reports' own requests tell the application nothing.)
  r->status = Told(std::move(s), r->ctx);
  r->phase = Request::Phase::kDone;
  if (r->rts_counted) --rts_out_[r->peer];
  if (r->kind == Request::Kind::kSend) {
    r->out_source = r->peer;
    r->out_tag = r->tag;
    r->out_bytes = r->bytes;
  }
  r->done.store(true, std::memory_order_release);
  if (sleepers_ > 0) cv_.SignalAll();
}

void Engine::FailTruncated(const std::shared_ptr<Request>& r, int source, int tag,
                           uint64_t bytes) {
  r->out_source = source;
  r->out_tag = tag;
  r->out_bytes = 0;  // nothing of it arrived
  Complete(r, Mismatch(absl::StrCat("rank ", rank_, ": message of ", bytes, " bytes from rank ",
                                    source, " ", TagName(tag), " exceeds the receive buffer of ",
                                    r->bytes, " bytes")));
}

bool Engine::Clash(const std::shared_ptr<Request>& r, uint64_t fingerprint, int source) {
  if (r->fingerprint == 0 || fingerprint == r->fingerprint) return false;
  absl::Status why = Mismatch(absl::StrCat("rank ", rank_, ": rank ", source,
                                           " is in another collective (tag ", r->tag, ")"));
  why.SetPayload(kClashUrl, absl::Cord(absl::StrCat(fingerprint, " ", source, " ",
                                                    r->fingerprint)));
  r->out_source = source;
  Complete(r, why);
  return true;
}

void Engine::CheckArrivalAgainstPosted(Matcher& matcher, int source, int tag,
                                       uint64_t fingerprint) {
  if (fingerprint == 0) return;
  for (auto it = matcher.posted().begin(); it != matcher.posted().end(); ++it) {
    const Request& r = **it;
    if (r.tag == tag && r.fingerprint != 0 && r.fingerprint != fingerprint) {
      std::shared_ptr<Request> hit = *it;
      matcher.posted().erase(it);
      Clash(hit, fingerprint, source);
      return;
    }
  }
}

void Engine::CompleteExternal(const std::shared_ptr<Request>& r, absl::Status s) {
  absl::MutexLock l(&mu_);
  Complete(r, std::move(s));
}

uint32_t Engine::NextFreeContext() {
  absl::MutexLock l(&mu_);
  return next_free_ctx_;
}

void Engine::ReserveContexts(uint32_t first, uint32_t count) {
  absl::MutexLock l(&mu_);
  next_free_ctx_ = std::max(next_free_ctx_, first + count);
}

void Engine::EraseMatcherLocked(
    absl::flat_hash_map<uint32_t, std::unique_ptr<Matcher>>::iterator it) {
  if (last_ctx_ == it->first) {
    last_ctx_ = UINT32_MAX;
    last_matcher_ = nullptr;
  }
  contexts_.erase(it);
}

Matcher& Engine::MatcherFor(uint32_t ctx) {
  if (ctx == last_ctx_) return *last_matcher_;
  std::unique_ptr<Matcher>& m = contexts_[ctx];
  if (!m) m = std::make_unique<Matcher>(flow_.get());
  last_ctx_ = ctx;
  last_matcher_ = m.get();
  return *m;
}

absl::Status Engine::Destroyed() const {
  return Aborted(absl::StrCat("rank ", rank_, ": the communicator was destroyed"));
}

absl::Status Engine::CheckUsable(int peer) {
  if (aborted_) return Aborted(absl::StrCat("rank ", rank_, ": the communicator was aborted"));
  if (destroyed_) return Destroyed();
  if (peer != kAnySource && peer != rank_ && peers_[peer]->state != PeerState::kUp) {
    return peers_[peer]->failure;
  }
  return absl::OkStatus();
}

std::string Engine::Describe(const Request& r) const {
  if (r.kind == Request::Kind::kSend) {
    return absl::StrCat("send to rank ", r.peer, " ", TagName(r.tag), " (", r.bytes, " bytes)");
  }
  return absl::StrCat("recv from ", PeerName(r.peer), " ", TagName(r.tag), " (capacity ", r.bytes,
                      " bytes)");
}

absl::StatusOr<std::shared_ptr<Request>> Engine::Isend(uint32_t ctx, const void* buf,
                                                       size_t bytes, size_t elem_size, int peer,
                                                       int tag, uint64_t fingerprint) {
  std::shared_ptr<Request> r = NewRequest();
  r->kind = Request::Kind::kSend;
  r->ctx = ctx;
  r->fingerprint = fingerprint;
  r->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  r->peer = peer;
  r->tag = tag;
  r->send_buf = static_cast<const char*>(buf);
  r->bytes = bytes;
  r->elem_size = elem_size;
  r->started = MonoNow();
  {
    absl::MutexLock l(&mu_);
    if (absl::Status usable = CheckUsable(peer); !usable.ok()) {
      return Annotate(Told(usable, ctx), Describe(*r));  // described only on failure
    }
    if (any_poisoned_.load(std::memory_order_relaxed)) {
      HCOMM_RETURN_IF_ERROR(RefusedLocked(ctx, tag));
      if (absl::Status a = AbandonedLocked(ctx, peer); !a.ok()) return Annotate(a, Describe(*r));
    }
    if (peer == rank_) {
      SelfSend(r);
      return r;
    }
    NoteSentTo(peer);
    // Eagerly while the peer's window has room (core/p2p/flow.h); else by
    // rendezvous, which the peer holds without the payload.
    if (bytes <= eager_bytes_[peer] && flow_->TakeCredit(peer, bytes)) {
      sending_[r->id] = r;
    } else {
      if (rts_out_[peer] >= flow_->MaxRts(peer)) {
        return Annotate(
            OutOfMem(absl::StrCat(
                "rank ", rank_, ": ", rts_out_[peer], " sends to rank ", peer,
                " already wait for their receives, the most rank ", peer,
                " holds (its unexpected_bytes / ", FlowControl::kEntryBytes,
                "); complete some of them first")),
            Describe(*r));
      }
      ++rts_out_[peer];
      r->rts_counted = true;
      r->rendezvous = true;
      awaiting_cts_[r->id] = r;
    }
  }
  if (r->rendezvous) {
    Meta m = MakeMeta(kRts, r->ctx, rank_, tag, bytes, r->id, r->fingerprint);
    route_[peer]->Send(peer, Pack(m), nullptr, 0, [this, r](absl::Status s) {
      if (s.ok()) return;
      absl::MutexLock l(&mu_);
      awaiting_cts_.erase(r->id);
      Complete(r, Annotate(s, Describe(*r)));
    });
  } else {
    Meta m = MakeMeta(kEager, r->ctx, rank_, tag, bytes, r->id, r->fingerprint);
    uint64_t h = route_[peer]->Send(peer, Pack(m), buf, bytes, [this, r](absl::Status s) {
      absl::MutexLock l(&mu_);
      sending_.erase(r->id);
      Complete(r, s.ok() ? s : Annotate(s, Describe(*r)));
    });
    absl::MutexLock l(&mu_);
    r->frame = h;
  }
  return r;
}

void Engine::SelfSend(const std::shared_ptr<Request>& r) {
  Matcher& matcher = MatcherFor(r->ctx);
  std::shared_ptr<Request> recv = matcher.TakePosted(rank_, r->tag);
  if (recv && Clash(recv, r->fingerprint, rank_)) {
    Complete(r, absl::OkStatus());
    return;
  }
  if (recv) {
    recv->out_source = rank_;
    recv->out_tag = r->tag;
    recv->out_fingerprint = r->fingerprint;
    if (r->bytes > recv->bytes) {
      FailTruncated(recv, rank_, r->tag, r->bytes);
    } else {
      if (r->bytes > 0) memcpy(recv->recv_buf, r->send_buf, r->bytes);
      recv->out_bytes = r->bytes;
      Complete(recv, absl::OkStatus());
    }
    Complete(r, absl::OkStatus());
    return;
  }
  Unexpected u;
  u.source = rank_;
  u.tag = r->tag;
  u.bytes = r->bytes;
  u.fingerprint = r->fingerprint;
  if (r->bytes <= kEagerBytes) {
    u.kind = Unexpected::Kind::kEager;
    u.data = payloads_.Take(r->bytes);
    if (r->bytes > 0) memcpy(u.data.get(), r->send_buf, r->bytes);
    u.complete = true;
    matcher.AddUnexpected(std::move(u));
    Complete(r, absl::OkStatus());
  } else {
    u.kind = Unexpected::Kind::kSelf;
    u.sender = r;
    matcher.AddUnexpected(std::move(u));
  }
}

absl::StatusOr<std::shared_ptr<Request>> Engine::Irecv(uint32_t ctx, void* buf, size_t bytes,
                                                       size_t elem_size, int peer, int tag,
                                                       uint64_t fingerprint) {
  std::shared_ptr<Request> r = NewRequest();
  r->kind = Request::Kind::kRecv;
  r->ctx = ctx;
  r->fingerprint = fingerprint;
  r->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  r->peer = peer;
  r->tag = tag;
  r->recv_buf = static_cast<char*>(buf);
  r->bytes = bytes;
  r->elem_size = elem_size;
  r->started = MonoNow();
  std::vector<Outgoing> out;
  {
    absl::MutexLock l(&mu_);
    if (aborted_ || destroyed_) return Annotate(CheckUsable(kAnySource), Describe(*r));
    if (any_poisoned_.load(std::memory_order_relaxed)) {
      HCOMM_RETURN_IF_ERROR(RefusedLocked(ctx, tag));
    }
    Matcher& matcher = MatcherFor(ctx);
    auto it = matcher.FindUnexpected(peer, tag);
    if (it == matcher.unexpected().end() && any_poisoned_.load(std::memory_order_relaxed)) {
      // What it sent before aborting the communicator is still delivered.
      if (absl::Status a = AbandonedLocked(ctx, peer); !a.ok()) return Annotate(a, Describe(*r));
    }
    if (it != matcher.unexpected().end()) {
      DeliverUnexpected(matcher, it, r, &out);
    } else {
      // Nothing has arrived: a dead peer can no longer send it, nor can
      // any rank once every other has failed or left.
      absl::Status usable = CheckUsable(peer);
      if (!usable.ok()) return Annotate(Told(usable, ctx), Describe(*r));
      if (peer == kAnySource && size_ > 1) {
        int up = -1;
        for (int p = 0; p < size_ && up < 0; ++p) {
          if (p != rank_ && peers_[p]->state == PeerState::kUp) up = p;
        }
        if (up < 0) {
          const int other = rank_ == 0 ? 1 : 0;
          return Annotate(Told(PeerFailure(absl::StrCat("rank ", rank_,
                                                   ": every other rank has failed or left (",
                                                   peers_[other]->failure.message(), ")")),
                               ctx),
                          Describe(*r));
        }
      }
      if (fingerprint != 0) {
        // A message of another collective under the same tag, from anyone:
        // the ranks disagree, whoever it was meant for.
        for (const Unexpected& u : matcher.unexpected()) {
          if (u.tag == tag && u.fingerprint != 0 && u.fingerprint != fingerprint) {
            Clash(r, u.fingerprint, u.source);
            return r;
          }
        }
      }
      if (peer == kAnySource) {
        bool any_up = false;
        for (int p = 0; p < size_; ++p) {
          if (p == rank_ || peers_[p]->state == PeerState::kUp) any_up = true;
        }
        if (!any_up) {
          return Told(
              PeerFailure(absl::StrCat(Describe(*r), ": every other rank has failed or left")), ctx);
        }
      }
      matcher.Post(r);
    }
  }
  Flush(&out);
  SendDueCredits();
  return r;
}

void Engine::DeliverUnexpected(Matcher& matcher, Matcher::UnexpectedList::iterator it,
                                     const std::shared_ptr<Request>& r,
                                     std::vector<Outgoing>* out) {
  Unexpected& u = *it;
  r->out_source = u.source;
  r->out_tag = u.tag;
  r->out_fingerprint = u.fingerprint;
  if (u.kind != Unexpected::Kind::kRts && Clash(r, u.fingerprint, u.source)) {
    if (u.kind == Unexpected::Kind::kSelf) {
      Complete(u.sender, absl::OkStatus());
      matcher.EraseUnexpected(it);
    } else if (u.complete) {
      matcher.EraseUnexpected(it);
    } else {
      u.claimed = r;  // let it finish arriving, then drop it
    }
    return;
  }
  switch (u.kind) {
    case Unexpected::Kind::kEager: {
      if (u.bytes > r->bytes) {
        FailTruncated(r, u.source, u.tag, u.bytes);
        if (u.complete) {
          matcher.EraseUnexpected(it);
        } else {
          // Still arriving: let it finish into the staging buffer, then drop it.
          u.claimed = r;
        }
        return;
      }
      if (!u.complete) {
        r->phase = Request::Phase::kMatched;
        u.claimed = r;
        return;
      }
      if (u.bytes > 0) memcpy(r->recv_buf, u.data.get(), u.bytes);
      r->out_bytes = u.bytes;
      Complete(r, absl::OkStatus());
      matcher.EraseUnexpected(it);
      return;
    }
    case Unexpected::Kind::kRts: {
      int source = u.source, tag = u.tag;
      uint64_t bytes = u.bytes, send_id = u.send_id, fingerprint = u.fingerprint;
      matcher.EraseUnexpected(it);
      MatchRts(source, tag, bytes, send_id, fingerprint, r, out);
      return;
    }
    case Unexpected::Kind::kSelf: {
      std::shared_ptr<Request> sender = u.sender;
      matcher.EraseUnexpected(it);
      if (sender->bytes > r->bytes) {
        FailTruncated(r, rank_, sender->tag, sender->bytes);
      } else {
        memcpy(r->recv_buf, sender->send_buf, sender->bytes);
        r->out_bytes = sender->bytes;
        Complete(r, absl::OkStatus());
      }
      Complete(sender, absl::OkStatus());
      return;
    }
  }
}

void Engine::MatchRts(int peer, int tag, uint64_t bytes, uint64_t send_id, uint64_t fingerprint,
                      const std::shared_ptr<Request>& r, std::vector<Outgoing>* out) {
  r->out_source = peer;
  r->out_tag = tag;
  r->out_fingerprint = fingerprint;
  if (Clash(r, fingerprint, peer)) {
    out->push_back({peer, Pack(MakeMeta(kReject, r->ctx, rank_, tag, bytes, send_id))});
    return;
  }
  if (bytes > r->bytes) {
    out->push_back({peer, Pack(MakeMeta(kReject, r->ctx, rank_, tag, bytes, send_id))});
    FailTruncated(r, peer, tag, bytes);
    return;
  }
  r->phase = Request::Phase::kMatched;
  r->out_bytes = bytes;
  awaiting_data_[r->id] = r;
  out->push_back({peer, Pack(MakeMeta(kCts, r->ctx, rank_, tag, bytes, send_id, r->id))});
}

absl::Status Engine::Send(uint32_t ctx, const void* buf, size_t bytes, size_t elem_size,
                          int peer, int tag, absl::Duration timeout,
                          const HangReporter* reporter, uint64_t fingerprint) {
  if (SendNow(ctx, buf, bytes, peer, tag, fingerprint)) return absl::OkStatus();
  HCOMM_ASSIGN_OR_RETURN(std::shared_ptr<Request> r,
                         Isend(ctx, buf, bytes, elem_size, peer, tag, fingerprint));
  std::string report;
  absl::Status s = WaitWithReport(r.get(), r->started + timeout, reporter, &report);
  if (CodeOf(s) != ErrorCode::kTimeout || r->done.load()) return s;
  // Withdraw the send so that the caller may reuse its buffer at once.
  absl::Status why;
  {
    absl::MutexLock l(&mu_);
    if (r->done.load()) return r->status;
    why = TimeoutStatus(*r, MonoNow() - r->started);
  }
  absl::Status result = Withdraw(r, why);
  if (report.empty() || CodeOf(result) != ErrorCode::kTimeout) return result;
  return Timeout(absl::StrCat(result.message(), "\n", report));
}

bool Engine::TakeArrived(uint32_t ctx, void* buf, size_t bytes, int peer, int tag) {
  {
    absl::MutexLock l(&mu_);
    if (ClosedLocked(ctx)) return false;
    Matcher& m = MatcherFor(ctx);
    auto it = m.FindUnexpected(peer, tag);
    if (it == m.unexpected().end() || it->kind != Unexpected::Kind::kEager || !it->complete ||
        it->claimed != nullptr || it->bytes != bytes) {
      return false;
    }
    if (bytes > 0) memcpy(buf, it->data.get(), bytes);
    m.EraseUnexpected(it);
  }
  SendDueCredits();
  return true;
}

bool Engine::RecvDirect(uint32_t ctx, void* buf, size_t bytes, int peer, int tag,
                        uint64_t fingerprint, bool exact) {
  // (A stream's own thread takes the full path, which sleeps without
  // spinning: core/base/priority.h.)
  if (OnBackgroundThread() || peer < 0 || peer >= size_ || peer == rank_ || route_.empty() ||
      route_[peer] == nullptr || aborted_flag_.load(std::memory_order_acquire) ||
      closing_.load(std::memory_order_acquire) || any_poisoned_.load(std::memory_order_acquire) ||
      !peers_[peer]->fast_send.load(std::memory_order_acquire)) {
    return false;
  }
  const Matcher* matcher;
  uint64_t arrivals;
  {
    // Only if no receive is posted here (it would come first) and nothing
    // from `peer` that we accept is waiting already (order).
    absl::MutexLock l(&mu_);
    Matcher& m = MatcherFor(ctx);
    if (!m.posted().empty() || m.FindUnexpected(peer, tag) != m.unexpected().end()) {
      return false;
    }
    matcher = &m;
    arrivals = m.arrivals();
  }
  Transport* t = route_[peer];
  // What the transport offers a frame to. Runs under the transport's receive
  // lock for `peer`, which every delivery from `peer` into the queue also
  // held: if the count has not moved, nothing of `peer`'s that we might
  // accept was queued since the look above.
  struct Want {
    uint32_t ctx;
    void* buf;
    size_t bytes;
    int tag;
    uint64_t fingerprint;
    bool exact;
    const Matcher* matcher;
    uint64_t arrivals;
    FlowControl* flow;
    int peer;
  } want{ctx, buf, bytes, tag, fingerprint, exact, matcher, arrivals, flow_.get(), peer};
  hcomm_transport_take_fn take = [](void* arg, const void* header, const void* payload,
                                    uint64_t len) -> int {
    Want& w = *static_cast<Want*>(arg);
    const Meta m = Unpack(*static_cast<const FrameMeta*>(header));
    if (m.kind != kEager || len > kEagerBytes || m.comm_id != w.ctx ||
        m.id2 != w.fingerprint || (w.exact ? len != w.bytes : len > w.bytes) ||
        (w.tag != kAnyTag && m.tag != w.tag) || w.matcher->arrivals() != w.arrivals) {
      return 0;  // the full path deals with it
    }
    if (len > 0) memcpy(w.buf, payload, len);
    w.flow->Consumed(w.peer, FlowControl::Cost(len));  // (under the receive lock)
    return 1;
  };
  // Counts as a wait, so that the background thread stays out of the way
  // (it would take the frame from under us, and sleep where every send
  // has to wake it).
  waits_ended_.fetch_add(1, std::memory_order_relaxed);
  // For as long as a wait spins before it sleeps, at most: then the full
  // path, which also watches the clock, the peer's health and the other
  // connections. (A look costs a few nanoseconds on shared memory and a
  // system call on a socket.) Where ranks share CPUs, each look that finds
  // nothing yields (the peer may need this CPU to send), and the full path
  // takes over after kSharedCpuDirectSpin.
  const int64_t end_ns = MonoNs() + direct_spin_ns_;
  for (int i = 1;; ++i) {
    const int got = t->TakeWhole(peer, bytes, take, &want);
    if (got == 1) {
      peers_[peer]->last_rx_ns.store(CoarseNs(), std::memory_order_relaxed);
      SendDueCredits();
      return true;
    }
    if (got < 0) return false;
    if (oversubscribed_) {
      // A yield may hand the CPU over for a while: read the clock each time.
      if (MonoNs() >= end_ns) return false;
      sched_yield();
    } else {
      if (i % 16 == 0 && MonoNs() >= end_ns) return false;
      CpuRelax();
    }
  }
}

namespace {

void NoteArrival(const Request& r, Engine::Arrival* a) {
  a->fingerprint = r.out_fingerprint;
  a->bytes = r.out_bytes;
  a->source = r.out_source;
  a->tag = r.out_tag;
}

}  // namespace

absl::Status Engine::Recv(uint32_t ctx, void* buf, size_t bytes, size_t elem_size, int peer,
                          int tag, absl::Duration timeout, std::shared_ptr<Request>* out,
                          const HangReporter* reporter, Arrival* arrival) {
  if (arrival != nullptr) arrival->fingerprint = 0;
  if (out == nullptr && RecvDirect(ctx, buf, bytes, peer, tag)) return absl::OkStatus();
  HCOMM_ASSIGN_OR_RETURN(std::shared_ptr<Request> r,
                         Irecv(ctx, buf, bytes, elem_size, peer, tag));
  if (out != nullptr) *out = r;
  std::string report;
  absl::Status s = WaitWithReport(r.get(), r->started + timeout, reporter, &report);
  if (arrival != nullptr && r->done.load()) NoteArrival(*r, arrival);
  if (CodeOf(s) != ErrorCode::kTimeout || r->done.load()) return s;
  {
    absl::MutexLock l(&mu_);
    if (MatcherFor(r->ctx).RemovePosted(r.get())) {
      absl::Status t = TimeoutStatus(*r, MonoNow() - r->started);
      if (!report.empty()) t = Timeout(absl::StrCat(t.message(), "\n", report));
      Complete(r, t);
      return t;
    }
  }
  // The message is arriving into the buffer, which must not be written once
  // this returns, and the deadline has passed. A stream stopped
  // mid-message cannot resume: the connection to its sender is closed
  // (operations with that rank fail from now on), and the receive fails.
  int src;
  absl::Status t;
  std::string cut;
  {
    absl::MutexLock l(&mu_);
    if (r->done.load()) {  // it ended meanwhile
      if (arrival != nullptr) NoteArrival(*r, arrival);
      return r->status;
    }
    t = TimeoutStatus(*r, MonoNow() - r->started);
    src = r->out_source;
    if (src >= 0 && src != rank_ && route_[src] != nullptr) {
      cut = absl::StrCat("rank ", rank_, " closed its connection to rank ", src, ": a message from ",
                         "it was still arriving when a receive's deadline (", Seconds(timeout),
                         ") passed, and a stream stopped mid-message cannot resume");
      peers_[src]->cut = cut;
    }
  }
  if (!cut.empty()) route_[src]->FailPeer(src, PeerFailure(cut));
  s = Wait(r.get(), MonoNow() + absl::Seconds(1));
  // Landed whole meanwhile, or ended otherwise than by the cut.
  if (arrival != nullptr && r->done.load()) NoteArrival(*r, arrival);
  if (s.ok() || (r->done.load() && CodeOf(s) != ErrorCode::kPeerFailure)) return s;
  return Timeout(absl::StrCat(t.message(), "; ", cut.empty() ? std::string(s.message()) : cut,
                              report.empty() ? "" : "\n", report));
}

void Engine::Release(const std::shared_ptr<Request>& r) {
  if (r->kind != Request::Kind::kRecv || r->done.load()) return;
  absl::MutexLock l(&mu_);
  if (ClosedLocked(r->ctx)) return;  // (landing: it finishes by itself)
  if (MatcherFor(r->ctx).RemovePosted(r.get())) {
    Complete(r, Aborted("receive was freed before a message arrived"));
  }
}

}  // namespace hcomm
