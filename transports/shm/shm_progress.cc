// The shared-memory transport's liveness, failures and polling.
#include "transports/shm/shm_layout.h"

namespace hcomm {

// ---------------------------------------------------------------------------
// Failure

bool ShmTransport::PeerAlive(Conn* c) {
  if (c->pidfd >= 0) {
    struct pollfd p = {c->pidfd, POLLIN, 0};
    return poll(&p, 1, 0) == 0;
  }
  return kill(c->pid, 0) == 0 || errno == EPERM;
}

void ShmTransport::NoteLoss(Conn* c, const absl::Status& why, bool drain, bool closed) {
  Locked l(&c->loss_mu);
  if (c->loss_flag.load(std::memory_order_relaxed)) {
    // A close record read while draining explains a remote loss better.
    if (closed && c->loss_drain && !c->loss_closed) {
      c->loss_why = why;
      c->loss_closed = true;
    }
    return;
  }
  c->loss_why = why;
  c->loss_drain = drain;
  c->loss_closed = closed;
  c->loss_flag.store(true, std::memory_order_release);
}

int ShmTransport::HandleLoss(Conn* c) {
  if (c->lost_reported.load(std::memory_order_acquire)) return 0;
  bool drain;
  {
    Locked l(&c->loss_mu);
    drain = c->loss_drain;
  }
  int events = 0;
  if (drain) {
    // Deliver everything that fully arrived before reporting the loss.
    if (!c->recv_mu.TryAcquire()) return 0;  // another thread reads; next pass
    events += ReadRing(c, /*drain=*/true);
    c->recv_mu.Release();
  }
  absl::Status why;
  {
    Locked l(&c->loss_mu);
    why = c->loss_why;
  }
  MarkDead(c, why);
  return events + 1;
}

void ShmTransport::MarkDead(Conn* c, const absl::Status& why) {
  Completions failed;
  {
    Locked l(&c->send_mu);
    if (!c->dead) {
      c->dead = true;
      c->death = why;
    }
    if (c->connected.load(std::memory_order_acquire)) {
      // Frames the peer acknowledged before it went away completed: they
      // must not be reported as failed.
      ReapAcksLocked(c, &failed);
      AbortSendsLocked(c, &failed);
    }
    UpdateOutStateLocked(c);
  }
  {
    Locked l(&c->loss_mu);
    if (!c->loss_flag.load(std::memory_order_relaxed)) {
      c->loss_why = why;
      c->loss_flag.store(true, std::memory_order_release);
    }
  }
  SignalPeerGone(c);
  RunCompletions(&failed);
  if (!c->lost_reported.exchange(true, std::memory_order_acq_rel)) {
    sink_->OnConnectionLost(c->peer, why);
  }
}

void ShmTransport::SignalPeerGone(Conn* c) {
  if (!c->connected.load(std::memory_order_acquire)) return;
  c->in_ctl->reader_gone.store(1, std::memory_order_release);
  c->out_ctl->writer_gone.store(1, std::memory_order_release);
  c->peer_hdr->attention.fetch_add(1, std::memory_order_acq_rel);
  RingPeer(c);
}

void ShmTransport::CheckLiveness() {
  const int64_t now = CoarseNs();
  const uint32_t att = seg_->hdr->attention.load(std::memory_order_acquire);
  const bool flags = att != attention_seen_.load(std::memory_order_relaxed);
  const bool pids = now >= next_liveness_ns_.load(std::memory_order_relaxed);
  if (!flags && !pids) return;
  if (!liveness_mu_.TryAcquire()) return;
  attention_seen_.store(att, std::memory_order_relaxed);
  if (pids) {
    next_liveness_ns_.store(now + int64_t{kLivenessIntervalMs} * 1'000'000,
                            std::memory_order_relaxed);
  }
  std::vector<struct pollfd> fds;
  std::vector<Conn*> who;
  for (Conn* c : local_) {
    if (!c->connected.load(std::memory_order_acquire) ||
        c->loss_flag.load(std::memory_order_acquire)) {
      continue;
    }
    if (c->peer_hdr->dead.load(std::memory_order_acquire) != 0) {
      NoteLoss(
          c, PeerFailure(absl::StrCat("rank ", c->peer, " shut down its shared-memory transport")),
          /*drain=*/true, /*closed=*/false);
    } else if (c->in_ctl->writer_gone.load(std::memory_order_acquire) != 0 ||
               c->out_ctl->reader_gone.load(std::memory_order_acquire) != 0) {
      NoteLoss(c, PeerFailure(absl::StrCat("rank ", c->peer, " closed its connection")),
               /*drain=*/true, /*closed=*/false);
    } else if (pids) {
      if (c->pidfd >= 0) {
        fds.push_back({c->pidfd, POLLIN, 0});
        who.push_back(c);
      } else if (!PeerAlive(c)) {
        NoteLoss(c, c->Died(), /*drain=*/true, /*closed=*/false);
      }
    }
  }
  if (!fds.empty() && poll(fds.data(), fds.size(), 0) > 0) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) NoteLoss(who[i], who[i]->Died(), /*drain=*/true, /*closed=*/false);
    }
  }
  liveness_mu_.Release();
}

void ShmTransport::ShutdownAll() {
  shutdown_.store(true, std::memory_order_release);
  seg_->hdr->dead.store(1, std::memory_order_release);
  for (Conn* c : local_) {
    absl::Status why =
        PeerFailure(absl::StrCat("rank ", self_, " shut down its connection to rank ", c->peer));
    {
      Locked l(&c->send_mu);
      if (!c->dead) {
        c->dead = true;
        c->death = why;
      }
      // Peers must not read our buffers after this returns; the callbacks
      // themselves run from the next Poll.
      if (c->connected.load(std::memory_order_acquire)) {
        for (OutFrame& f : c->inflight) CancelSlotLocked(c, &f);
      }
    }
    NoteLoss(c, why, /*drain=*/false, /*closed=*/false);
    SignalPeerGone(c);
  }
  // A thread of ours asleep in Poll reports the losses now.
  seg_->hdr->attention.fetch_add(1, std::memory_order_acq_rel);
  Ring(seg_->hdr, bell_, bell_len_);
}

void ShmTransport::FailPeer(int peer, const absl::Status& why) {
  Conn* c = ConnFor(peer);
  if (c != nullptr) MarkDead(c, why);
}

// ---------------------------------------------------------------------------
// Progress

int ShmTransport::PollOnce() {
  int events = 0;
  CheckLiveness();
  Completions done;
  for (Conn* c : local_) {
    if (!c->connected.load(std::memory_order_acquire) ||
        c->lost_reported.load(std::memory_order_relaxed)) {
      continue;
    }
    if (c->loss_flag.load(std::memory_order_acquire)) {
      events += HandleLoss(c);
      continue;
    }
    if (InboundReady(c)) {
      if (c->recv_mu.TryAcquire()) {
        events += ReadRing(c, /*drain=*/false);
        c->recv_mu.Release();
      }
    }
    uint32_t s = c->out_state.load(std::memory_order_acquire);
    if (s != 0 && OutReady(c, s) && c->send_mu.TryAcquire()) {
      size_t before = done.size();
      ReapAcksLocked(c, &done);
      FlushLocked(c, &done);
      UpdateOutStateLocked(c);
      c->send_mu.Release();
      events += static_cast<int>(done.size() - before);
    }
    if (!done.empty()) RunCompletions(&done);
    if (c->loss_flag.load(std::memory_order_acquire)) events += HandleLoss(c);
  }
  return events;
}

bool ShmTransport::InboundReady(Conn* c) {
  if (c->rx_more.load(std::memory_order_relaxed)) return true;
  const uint64_t head = c->in_ctl->head.load(std::memory_order_acquire);
  if (c->rx_partial.load(std::memory_order_relaxed)) {
    return c->in_ctl->tail.load(std::memory_order_acquire) != head;
  }
  return SealedAt(c->in_data, c->in_size, c->in_seal_key, head);
}

bool ShmTransport::AnythingReady() {
  return CoarseNs() >= next_liveness_ns_.load(std::memory_order_relaxed) || WorkReady();
}

bool ShmTransport::WorkReady() {
  if (seg_->hdr->attention.load(std::memory_order_acquire) !=
      attention_seen_.load(std::memory_order_relaxed)) {
    return true;
  }
  for (Conn* c : local_) {
    if (!c->connected.load(std::memory_order_acquire) ||
        c->lost_reported.load(std::memory_order_relaxed)) {
      continue;
    }
    if (c->loss_flag.load(std::memory_order_acquire) || InboundReady(c)) return true;
    uint32_t s = c->out_state.load(std::memory_order_acquire);
    if (s != 0 && OutReady(c, s)) return true;
  }
  return false;
}

int ShmTransport::Poll(absl::Duration timeout) {
  int events = PollOnce();
  if (events > 0 || timeout <= absl::ZeroDuration()) return events;
  const int64_t start = MonoNs();
  const int64_t deadline =
      timeout == absl::InfiniteDuration() ? INT64_MAX : start + absl::ToInt64Nanoseconds(timeout);
  // 1. Spin: a reply that comes within microseconds costs no wakeup.
  const int64_t spin = std::max(spin_ns_.load(std::memory_order_relaxed),
                                min_spin_ns_.load(std::memory_order_relaxed));
  // Look often (an arrival waits at most one short pause) and read the
  // clock seldom.
  for (uint32_t i = 0;; ++i) {
    if ((i & 31) == 0) {
      const int64_t now = MonoNs();
      if (now >= deadline) return 0;
      if (now - start >= spin) break;
    }
    CpuRelax();
    // A full PollOnce (which also looks at liveness) now and then; in
    // between only the shared words that say work is waiting.
    if ((i & 31) != 31 && !WorkReady()) continue;
    events = PollOnce();
    if (events > 0) {
      spin_ns_.store(std::min(kMaxSpinNs, spin + spin / 4 + 1000), std::memory_order_relaxed);
      return events;
    }
  }
  spin_ns_.store(std::max(min_spin_ns_.load(std::memory_order_relaxed), spin / 2),
                 std::memory_order_relaxed);
  return SleepUntilReady(deadline);
}

int ShmTransport::PollQuiet(absl::Duration timeout) {
  int events = PollOnce();
  if (events > 0 || timeout <= absl::ZeroDuration()) return events;
  return SleepUntilReady(timeout == absl::InfiniteDuration()
                             ? INT64_MAX
                             : MonoNs() + absl::ToInt64Nanoseconds(timeout));
}

void ShmTransport::Ring(SegHeader* h, const sockaddr_un& bell, socklen_t bell_len) {
  WakeOwner(h);  // its fence also orders the load below
  if (h->ext_sleepers.load(std::memory_order_relaxed) == 0 || bell_tx_ < 0 || bell_len == 0) {
    return;
  }
  // A full socket buffer is a bell already rung; a closed one, an owner gone.
  const char b = 1;
  (void)sendto(bell_tx_, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL,
               reinterpret_cast<const sockaddr*>(&bell), bell_len);
}

void ShmTransport::RingPeer(Conn* c) { Ring(c->peer_hdr, c->peer_bell, c->peer_bell_len); }

int ShmTransport::OpenWakeFd() {
  if (bell_rx_ < 0 || bell_tx_ < 0) return -1;
  for (Conn* c : local_) {
    if (!c->connected.load(std::memory_order_acquire) || c->peer_bell_len == 0) return -1;
  }
  wake_open_ = true;
  return bell_rx_;
}

void ShmTransport::DrainBell() {
  char buf[64];
  while (recv(bell_rx_, buf, sizeof buf, MSG_DONTWAIT) > 0) {
  }
}

bool ShmTransport::ArmWake() {
  if (!wake_open_) return false;
  DrainBell();
  SegHeader* h = seg_->hdr;
  h->ext_sleepers.fetch_add(1, std::memory_order_seq_cst);
  // Pairs with a waker's fence (WakeOwner): it sees us, or we see its work.
  FullFence();
  if (AnythingReady()) {
    h->ext_sleepers.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void ShmTransport::DisarmWake() {
  seg_->hdr->ext_sleepers.fetch_sub(1, std::memory_order_relaxed);
  DrainBell();
}

int ShmTransport::SleepUntilReady(int64_t deadline) {
  int events = 0;
  // Sleep on our doorbell, in slices so that liveness is still checked.
  SegHeader* h = seg_->hdr;
  for (;;) {
    const int64_t now = MonoNs();
    if (now >= deadline) return 0;
    const int64_t slice =
        std::min<int64_t>(deadline - now, int64_t{kLivenessIntervalMs} * 1'000'000);
    h->sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t v = h->doorbell.load(std::memory_order_acquire);
    FullFence();
    if (!AnythingReady()) {
      FutexWaitUntil(&h->doorbell, v, MonoNow() + absl::Nanoseconds(slice), /*shared=*/true);
    }
    h->sleepers.fetch_sub(1, std::memory_order_relaxed);
    events = PollOnce();
    if (events > 0) return events;
  }
}

}  // namespace hcomm
