// The shared-memory transport's sending side: writing frames into a
// peer's ring (whole, streamed or by CMA), completions, Cancel.
#include "transports/shm/shm_layout.h"

namespace hcomm {

// ---------------------------------------------------------------------------
// Sending

namespace {

// Free bytes in c's outbound ring, at least `want` if possible. When fewer
// are free, announces that the writer waits (the reader then wakes it).
uint64_t FreeLockedImpl(uint64_t tail, uint64_t* head_cached, uint64_t size, RingCtl* ctl,
                        uint64_t want) {
  uint64_t free = size - (tail - *head_cached);
  if (free >= want) return free;
  uint64_t h = ctl->head.load(std::memory_order_acquire);
  if (h > tail || tail - h > size) return 0;  // corrupt index: write nothing
  *head_cached = h;
  free = size - (tail - h);
  if (free >= want) return free;
  ctl->writer_waiting.store(1, std::memory_order_relaxed);
  FullFence();
  h = ctl->head.load(std::memory_order_acquire);
  if (h > tail || tail - h > size) return 0;
  *head_cached = h;
  return size - (tail - h);
}

}  // namespace

bool ShmTransport::WriteWholeLocked(Conn* c, const FrameMeta& meta, const void* payload,
                                    size_t len) {
  const uint64_t total = RecordBytes(len);
  if (!c->queue.empty() || total > kWholeWriteMax ||
      FreeLockedImpl(c->tail, &c->head_cached, c->out_size, c->out_ctl, total) < total) {
    return false;
  }
  // The whole record goes in now, one publish.
  WriteRecordPiece(c->out_data, c->out_size, c->tail, MakeRecHdr(kRecWhole, 0, len, meta),
                   static_cast<const char*>(payload), 0, total, c->copier);
  SealRecord(c->out_data, c->out_size, c->out_seal_key, c->tail);
  c->tail += total;
  c->out_ctl->tail.store(c->tail, std::memory_order_release);
  c->tail_published = c->tail;
  RingPeer(c);
  return true;
}

bool ShmTransport::TrySendNow(int peer, const FrameMeta& meta, const void* payload, size_t len) {
  Conn* c = ConnFor(peer);
  if (c == nullptr || (len > 0 && payload == nullptr) || len > kCmaMinBytes ||
      !c->connected.load(std::memory_order_acquire)) {
    return false;  // Send reports what is wrong
  }
  Locked l(&c->send_mu);
  if (c->dead || c->close_write || !WriteWholeLocked(c, meta, payload, len)) return false;
  UpdateOutStateLocked(c);
  return true;
}

FrameHandle ShmTransport::Send(int peer, const FrameMeta& meta, const void* payload, size_t len,
                               SendCallback done) {
  const FrameHandle handle = next_handle_.fetch_add(1, std::memory_order_relaxed);
  Conn* c = ConnFor(peer);
  absl::Status fail;
  if (c == nullptr) {
    fail =
        InvalidArgument(absl::StrCat("shm: rank ", peer, " is not a local peer of rank ", self_));
  } else if (len > 0 && payload == nullptr) {
    fail = InvalidArgument(
        absl::StrCat("shm: send of ", len, " bytes to rank ", peer, " from a null buffer"));
  } else if (len >= kMaxPayload) {
    fail = InvalidArgument(
        absl::StrCat("shm: send of ", len, " bytes to rank ", peer, " is too large"));
  } else if (!c->connected.load(std::memory_order_acquire)) {
    fail = PeerFailure(
        absl::StrCat("rank ", self_, " is not attached to rank ", peer, " over shared memory"));
  }
  if (!fail.ok()) {
    if (done) done(fail);
    return handle;
  }
  Completions completions;
  bool written_now = false;
  {
    Locked l(&c->send_mu);
    if (c->dead || c->close_write) {
      fail = c->dead ? c->death
                     : PeerFailure(absl::StrCat("connection to rank ", peer, " is closing"));
    } else {
      const bool cma = len > kCmaMinBytes && cma_enabled_ &&
                       c->out_ctl->reader_cma.load(std::memory_order_relaxed) == 1;
      if (!cma && WriteWholeLocked(c, meta, payload, len)) {
        written_now = true;
      } else {
        c->queue.emplace_back();
        OutFrame& f = c->queue.back();
        f.handle = handle;
        f.meta = meta;
        f.len = len;
        f.payload = static_cast<const char*>(payload);
        f.cma = cma;
        f.done = std::move(done);
        pending_.fetch_add(1, std::memory_order_relaxed);
        FlushLocked(c, &completions);
      }
      UpdateOutStateLocked(c);
    }
  }
  if (!fail.ok()) {
    if (done) done(fail);
    return handle;
  }
  if (written_now) {
    if (done) done(absl::OkStatus());
    return handle;
  }
  RunCompletions(&completions);
  return handle;
}

void ShmTransport::PublishLocked(Conn* c) {
  if (c->tail == c->tail_published) return;
  c->out_ctl->tail.store(c->tail, std::memory_order_release);
  c->tail_published = c->tail;
  RingPeer(c);
}

void ShmTransport::FlushLocked(Conn* c, Completions* done) {
  c->blocked_space = false;
  if (c->dead) return;
  bool blocked = false;
  while (!c->queue.empty() && !blocked) {
    OutFrame& f = c->queue.front();
    if (f.cma) {
      if (c->cma_sent - c->cma_acked >= kCmaSlots) {
        ReapAcksLocked(c, done);
        if (c->cma_sent - c->cma_acked >= kCmaSlots) break;  // Poll retries on acks
      }
      if (FreeLockedImpl(c->tail, &c->head_cached, c->out_size, c->out_ctl, kRecAlign) <
          kRecAlign) {
        c->blocked_space = blocked = true;
        break;
      }
      f.slot = static_cast<uint32_t>(c->cma_sent % kCmaSlots);
      CmaSlot& s = c->out_ctl->slots[f.slot];
      s.addr.store(reinterpret_cast<uintptr_t>(f.payload), std::memory_order_relaxed);
      s.state.store(kSlotLive, std::memory_order_relaxed);
      const RecHdr h = MakeRecHdr(kRecCma, static_cast<uint16_t>(f.slot), f.len, f.meta);
      RingWrite(c->out_data, c->out_size, c->tail, &h, kRecHdrBytes, c->copier);
      SealRecord(c->out_data, c->out_size, c->out_seal_key, c->tail);
      c->tail += kRecAlign;
      f.written = kRecAlign;
      ++c->cma_sent;
      c->inflight.push_back(std::move(f));
      c->queue.pop_front();
      continue;
    }
    const uint64_t total = RecordBytes(f.len);
    const RecHdr h = MakeRecHdr(kRecStream, 0, f.len, f.meta);
    while (f.written < total) {
      uint64_t free = FreeLockedImpl(c->tail, &c->head_cached, c->out_size, c->out_ctl, kRecAlign);
      if (free < kRecAlign) {
        c->blocked_space = blocked = true;
        break;
      }
      uint64_t n = std::min<uint64_t>({free, total - f.written, kPipeChunkBytes});
      WriteRecordPiece(c->out_data, c->out_size, c->tail, h, f.payload, f.written, n, c->copier);
      // Sealed with its first piece, so the reader starts copying out; it
      // follows the tail from there.
      if (f.written == 0) SealRecord(c->out_data, c->out_size, c->out_seal_key, c->tail);
      c->tail += n;
      f.written += n;
      if (c->tail - c->tail_published >= kPipeChunkBytes) PublishLocked(c);
    }
    if (blocked) break;
    done->emplace_back(std::move(f.done), absl::OkStatus());
    c->queue.pop_front();
    pending_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (c->queue.empty() && c->close_write && !c->close_written) {
    if (FreeLockedImpl(c->tail, &c->head_cached, c->out_size, c->out_ctl, kRecAlign) >= kRecAlign) {
      RecHdr h;
      memset(&h, 0, sizeof h);
      h.kind = kRecClose;
      RingWrite(c->out_data, c->out_size, c->tail, &h, kRecHdrBytes, c->copier);
      SealRecord(c->out_data, c->out_size, c->out_seal_key, c->tail);
      c->tail += kRecAlign;
      c->close_written = true;
    } else {
      c->blocked_space = true;
    }
  }
  PublishLocked(c);
}

int ShmTransport::ReapAcksLocked(Conn* c, Completions* done) {
  if (c->inflight.empty()) return 0;
  uint64_t a = c->out_ctl->cma_acked.load(std::memory_order_acquire);
  if (a > c->cma_sent) a = c->cma_sent;  // never trust more than was sent
  int n = 0;
  while (c->cma_acked < a && !c->inflight.empty()) {
    done->emplace_back(std::move(c->inflight.front().done), absl::OkStatus());
    c->inflight.pop_front();
    pending_.fetch_sub(1, std::memory_order_relaxed);
    ++c->cma_acked;
    ++n;
  }
  c->acked_seen.store(c->cma_acked, std::memory_order_relaxed);
  return n;
}

void ShmTransport::UpdateOutStateLocked(Conn* c) {
  uint32_t s = 0;
  if (!c->dead) {
    bool want_write = !c->queue.empty() || (c->close_write && !c->close_written);
    if (want_write) {
      if (c->blocked_space) {
        s |= kOutSpace;
      } else if (c->inflight.empty()) {
        s |= kOutRetry;  // not blocked on acknowledgements: just try again
      }
    }
    if (!c->inflight.empty()) s |= kOutAcks;
  }
  c->out_state.store(s, std::memory_order_release);
}

bool ShmTransport::OutReady(Conn* c, uint32_t s) {
  if (s & kOutRetry) return true;
  if ((s & kOutSpace) && c->out_ctl->writer_waiting.load(std::memory_order_acquire) == 0) {
    return true;
  }
  if ((s & kOutAcks) && c->out_ctl->cma_acked.load(std::memory_order_acquire) !=
                            c->acked_seen.load(std::memory_order_relaxed)) {
    return true;
  }
  return false;
}

bool ShmTransport::LockSlot(Conn* c, void* slot, uint32_t who) {
  CmaSlot* s = static_cast<CmaSlot*>(slot);
  for (uint64_t i = 0;; ++i) {
    uint32_t e = 0;
    if (s->lock.load(std::memory_order_relaxed) == 0 &&
        s->lock.compare_exchange_weak(e, who, std::memory_order_acquire)) {
      return true;
    }
    CpuRelax();
    if ((i & 255) == 255) sched_yield();
    if ((i & 4095) == 4095 && !PeerAlive(c)) return false;  // never spin on a dead peer
  }
}

void ShmTransport::CancelSlotLocked(Conn* c, OutFrame* f) {
  if (f->slot_cancelled) return;
  CmaSlot& s = c->out_ctl->slots[f->slot];
  bool locked = LockSlot(c, &s, kLockWriter);
  s.state.store(kSlotCancelled, std::memory_order_relaxed);
  if (locked) s.lock.store(0, std::memory_order_release);
  f->slot_cancelled = true;
}

void ShmTransport::AbortSendsLocked(Conn* c, Completions* done) {
  for (OutFrame& f : c->inflight) {
    CancelSlotLocked(c, &f);
    done->emplace_back(std::move(f.done), c->death);
    pending_.fetch_sub(1, std::memory_order_relaxed);
  }
  c->inflight.clear();
  for (OutFrame& f : c->queue) {
    done->emplace_back(std::move(f.done), c->death);
    pending_.fetch_sub(1, std::memory_order_relaxed);
  }
  c->queue.clear();
}

bool ShmTransport::Cancel(int peer, FrameHandle handle) {
  Conn* c = ConnFor(peer);
  if (c == nullptr) return false;
  Locked l(&c->send_mu);
  for (auto it = c->queue.begin(); it != c->queue.end(); ++it) {
    if (it->handle != handle) continue;
    if (it->written == 0) {
      c->queue.erase(it);
      pending_.fetch_sub(1, std::memory_order_relaxed);
      UpdateOutStateLocked(c);
      return true;
    }
    KeepPayload(*it);
    return false;
  }
  for (OutFrame& f : c->inflight) {
    if (f.handle != handle) continue;
    if (!f.owned && !f.slot_cancelled) {
      // The reader takes the slot lock around every piece it reads, so
      // after this swap it reads only from our copy.
      CmaSlot& s = c->out_ctl->slots[f.slot];
      bool locked = LockSlot(c, &s, kLockWriter);
      KeepPayload(f);
      s.addr.store(reinterpret_cast<uintptr_t>(f.payload), std::memory_order_relaxed);
      if (locked) s.lock.store(0, std::memory_order_release);
    }
    return false;
  }
  return false;  // already sent
}

void ShmTransport::CloseWrite(int peer) {
  Conn* c = ConnFor(peer);
  if (c == nullptr || !c->connected.load(std::memory_order_acquire)) return;
  Completions completions;
  {
    Locked l(&c->send_mu);
    c->close_write = true;
    if (!c->dead) FlushLocked(c, &completions);
    UpdateOutStateLocked(c);
  }
  RunCompletions(&completions);
}

}  // namespace hcomm
