// The shared-memory transport's receiving side: reading records from the
// rings of this rank's segment, CMA reads, TakeWhole.
#include "transports/shm/shm_layout.h"

namespace hcomm {

// ---------------------------------------------------------------------------
// Receiving

void ShmTransport::PublishHeadLocked(Conn* c) {
  if (c->rx_head == c->rx_head_published) return;
  c->in_ctl->head.store(c->rx_head, std::memory_order_release);
  c->rx_head_published = c->rx_head;
  // Pairs with the writer's fence in FreeLockedImpl: it sees our head, or
  // we see its flag.
  FullFence();
  if (c->in_ctl->writer_waiting.load(std::memory_order_relaxed) != 0 &&
      c->in_ctl->writer_waiting.exchange(0, std::memory_order_acq_rel) != 0) {
    RingPeer(c);
  }
}

int ShmTransport::ReadCmaLocked(Conn* c, uint64_t budget) {
  const uint64_t len = c->rx_len;
  if (c->rx_dst == nullptr) {  // discarded: nothing to read
    c->rx_off = len;
    return kCmaDone;
  }
  CmaSlot* s = &c->in_ctl->slots[c->rx_slot];
  while (c->rx_off < len && budget > 0) {
    uint64_t n = std::min<uint64_t>({len - c->rx_off, kCmaPieceBytes, budget});
    if (!LockSlot(c, s, kLockReader)) {
      NoteLoss(c, c->Died(), /*drain=*/false, /*closed=*/false);
      return kCmaFailed;
    }
    uint32_t state = s->state.load(std::memory_order_relaxed);
    uint64_t addr = s->addr.load(std::memory_order_relaxed);
    if (state != kSlotLive) {
      s->lock.store(0, std::memory_order_release);
      NoteLoss(c,
               PeerFailure(absl::StrCat("rank ", c->peer, " withdrew a ", len,
                                        "-byte message while rank ", self_, " was reading it")),
               /*drain=*/false, /*closed=*/false);
      return kCmaFailed;
    }
    struct iovec local = {c->rx_dst + c->rx_off, n};
    struct iovec remote = {reinterpret_cast<void*>(addr + c->rx_off), n};
    ssize_t r = process_vm_readv(c->pid, &local, 1, &remote, 1, 0);
    int e = errno;
    s->lock.store(0, std::memory_order_release);
    if (r < 0 && e == EINTR) continue;
    if (r <= 0) {
      if (r == 0) e = EFAULT;
      absl::Status why = e == ESRCH
                             ? c->Died()
                             : PeerFailure(absl::StrCat("rank ", self_, ": process_vm_readv of ", n,
                                                        " bytes from rank ", c->peer, " (pid ",
                                                        c->pid, ") failed: ", strerror(e)));
      NoteLoss(c, why, /*drain=*/false, /*closed=*/false);
      return kCmaFailed;
    }
    c->rx_off += static_cast<uint64_t>(r);
    budget -= std::min<uint64_t>(budget, static_cast<uint64_t>(r));
  }
  return c->rx_off == len ? kCmaDone : kCmaMore;
}

int ShmTransport::TakeWhole(int peer, uint64_t /*max_payload*/, hcomm_transport_take_fn take,
                            void* take_arg) {
  Conn* c = ConnFor(peer);
  if (c == nullptr || !c->connected.load(std::memory_order_acquire) ||
      c->loss_flag.load(std::memory_order_acquire) ||
      c->lost_reported.load(std::memory_order_relaxed)) {
    return -1;
  }
  // Nothing there: answer without the lock (the common case while waiting).
  if (!InboundReady(c)) return 0;
  if (!c->recv_mu.TryAcquire()) return -1;
  int result = -1;
  if (c->rx_state == kRxIdle) {
    const uint64_t size = c->in_size;
    if (!SealedAt(c->in_data, size, c->in_seal_key, c->rx_head)) {
      result = 0;
    } else {
      const uint64_t pos = c->rx_head & (size - 1);
      RecHdr h;
      memcpy(&h, c->in_data + pos, kRecHdrBytes);
      if (h.kind == kRecWhole) {
        const uint64_t total = RecordBytes(h.len);
        if (pos + total <= size &&
            take(take_arg, h.meta.bytes, c->in_data + pos + kRecHdrBytes, h.len) != 0) {
          c->rx_head += total;
          PublishHeadLocked(c);
          result = 1;
        }
      }
    }
  }
  c->recv_mu.Release();
  return result;
}

int ShmTransport::ReadRing(Conn* c, bool drain) {
  if (c->rx_state == kRxStopped) return 0;
  const uint64_t size = c->in_size;
  int events = 0;
  uint64_t moved = 0;
  uint64_t cma_budget = drain ? UINT64_MAX : kCmaBudgetBytes;
  int records = 0;
  bool more = false;
  // (The lambdas run with c->recv_mu held, which the analysis cannot see.)
  auto malformed = [&](const std::string& what) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    c->rx_state = kRxStopped;
    NoteLoss(c,
             PeerFailure(absl::StrCat("rank ", c->peer,
                                      " wrote a malformed record into its shared-memory ring (",
                                      what, ")")),
             /*drain=*/false, /*closed=*/false);
  };
  // Bytes the writer's tail says are written past our head. (A sealed
  // record may be taken before the tail that covers it is published.)
  auto available = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> uint64_t {
    if (c->rx_tail_cached <= c->rx_head) {
      c->rx_tail_cached = c->in_ctl->tail.load(std::memory_order_acquire);
      if (c->rx_tail_cached <= c->rx_head) return 0;
    }
    return c->rx_tail_cached - c->rx_head;
  };
  for (;;) {
    if (!drain && (moved >= size || records >= kMaxRecordsPerVisit)) {
      more = true;
      break;
    }
    if (c->rx_state == kRxIdle) {
      if (!SealedAt(c->in_data, size, c->in_seal_key, c->rx_head)) break;
      RecHdr h;
      memcpy(&h, c->in_data + (c->rx_head & (size - 1)), kRecHdrBytes);
      if (h.kind == kRecWhole || h.kind == kRecStream) {
        const uint64_t total = RecordBytes(h.len);
        const uint64_t pos = c->rx_head & (size - 1);
        // A whole record is all there once sealed; a streamed one as far
        // as the tail says.
        if (pos + total <= size && (h.kind == kRecWhole || available() >= total)) {
          // All there and in one piece: the sink takes it in one step.
          sink_->OnWholeFrame(c->peer, h.meta, c->in_data + pos + kRecHdrBytes, h.len);
          c->rx_head += total;
          moved += total;
          ++records;
          ++events;
          if (c->rx_head - c->rx_head_published >= kPipeChunkBytes) PublishHeadLocked(c);
          continue;
        }
        c->rx_meta = h.meta;
        c->rx_len = h.len;
        c->rx_slot = h.slot;
        c->rx_rec_start = c->rx_head;
        c->rx_dst = static_cast<char*>(sink_->OnFrame(c->peer, h.meta, h.len));
        c->rx_state = kRxInline;
        ++records;
      } else if (h.kind == kRecCma) {
        if (h.len == 0 || h.slot != c->rx_cma_seen % kCmaSlots) {
          malformed(absl::StrCat("CMA frame of ", h.len, " bytes in slot ", h.slot));
          break;
        }
        c->rx_meta = h.meta;
        c->rx_len = h.len;
        c->rx_slot = h.slot;
        c->rx_head += kRecAlign;
        moved += kRecAlign;
        c->rx_off = 0;
        c->rx_dst = static_cast<char*>(sink_->OnFrame(c->peer, h.meta, h.len));
        c->rx_state = kRxCma;
        ++records;
      } else if (h.kind == kRecClose) {
        c->rx_head += kRecAlign;
        c->rx_state = kRxStopped;
        NoteLoss(c, PeerFailure(absl::StrCat("rank ", c->peer, " closed its connection")),
                 /*drain=*/false, /*closed=*/true);
        ++events;
        break;
      } else {
        malformed(absl::StrCat("kind ", static_cast<int>(h.kind)));
        break;
      }
    }
    if (c->rx_state == kRxInline) {
      const uint64_t total = RecordBytes(c->rx_len);
      uint64_t consumed = c->rx_head - c->rx_rec_start;
      while (consumed < total) {
        uint64_t avail = available();
        if (avail == 0) break;
        if (avail > size || (avail % kRecAlign) != 0) {
          malformed(absl::StrCat("tail index ", c->rx_tail_cached, " against head ", c->rx_head));
          break;
        }
        uint64_t n = std::min<uint64_t>({avail, total - consumed, kPipeChunkBytes});
        ReadRecordPiece(c->in_data, size, c->rx_head, c->rx_len, c->rx_dst, consumed, n);
        c->rx_head += n;
        consumed += n;
        moved += n;
        if (c->rx_head - c->rx_head_published >= kPipeChunkBytes) PublishHeadLocked(c);
      }
      if (c->rx_state != kRxInline || consumed < total) break;  // malformed, or not written yet
      c->rx_state = kRxIdle;
      sink_->OnPayload(c->peer, c->rx_meta, c->rx_len);
      ++events;
      continue;
    }
    if (c->rx_state == kRxCma) {
      PublishHeadLocked(c);  // the descriptor's ring space is free already
      uint64_t before = c->rx_off;
      int r = ReadCmaLocked(c, cma_budget);
      cma_budget -= std::min(cma_budget, c->rx_off - before);
      if (r == kCmaFailed) {
        c->rx_state = kRxStopped;
        break;
      }
      if (r == kCmaMore) {
        more = true;
        ++events;  // progress
        break;
      }
      ++c->rx_cma_seen;
      c->in_ctl->cma_acked.store(c->rx_cma_seen, std::memory_order_release);
      RingPeer(c);
      c->rx_state = kRxIdle;
      sink_->OnPayload(c->peer, c->rx_meta, c->rx_len);
      ++events;
      if (!drain && cma_budget == 0) {
        more = true;
        break;
      }
      continue;
    }
    break;  // stopped
  }
  // Before the head's release (InboundReady reads them the other way round).
  c->rx_partial.store(c->rx_state == kRxInline, std::memory_order_relaxed);
  c->rx_more.store(more, std::memory_order_relaxed);
  PublishHeadLocked(c);
  if (events == 0 && moved > 0) events = 1;
  return events;
}

}  // namespace hcomm
