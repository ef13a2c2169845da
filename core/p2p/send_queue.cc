// Frames on their way out: sends that can leave at once, frames queued
// under the engine's lock and handed to the transports after it, and
// withdrawing a send.
#include "core/p2p/engine.h"

#include <atomic>
#include <climits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/p2p/protocol.h"

namespace hcomm {

bool Engine::SendNow(uint32_t ctx, const void* buf, size_t bytes, int peer, int tag,
                     uint64_t fingerprint) {
  if (peer == rank_ || peer < 0 || peer >= size_ || route_.empty() || route_[peer] == nullptr ||
      bytes > eager_bytes_[peer]) {
    return false;
  }
  if (aborted_flag_.load(std::memory_order_acquire) || closing_.load(std::memory_order_acquire) ||
      any_poisoned_.load(std::memory_order_acquire) ||
      !peers_[peer]->fast_send.load(std::memory_order_acquire)) {
    return false;
  }
  if (!flow_->TakeCredit(peer, bytes)) return false;
  Meta m = MakeMeta(kEager, ctx, rank_, tag, bytes, next_id_.fetch_add(1, std::memory_order_relaxed),
                    fingerprint);
  if (route_[peer]->TrySendNow(peer, Pack(m), buf, bytes)) {
    NoteSentTo(peer);
    return true;
  }
  flow_->ReturnCredit(peer, FlowControl::Cost(bytes));  // nothing left
  return false;
}

void Engine::Flush(std::vector<Outgoing>* out) {
  for (Outgoing& o : *out) {
    std::shared_ptr<Request> r = std::move(o.complete_on_sent);
    uint64_t h = route_[o.peer]->Send(o.peer, o.meta, o.payload, o.len, [this, r](absl::Status s) {
      if (!r) return;
      absl::MutexLock l(&mu_);
      sending_.erase(r->id);
      Complete(r, s.ok() ? s : Annotate(s, Describe(*r)));
    });
    if (r) {
      absl::MutexLock l(&mu_);
      r->frame = h;
    }
  }
  out->clear();
}

absl::Status Engine::Withdraw(const std::shared_ptr<Request>& r, const absl::Status& why) {
  std::vector<Outgoing> out;
  absl::Status result = why;
  {
    absl::MutexLock l(&mu_);
    if (r->done.load()) return r->status;
    if (r->kind == Request::Kind::kRecv) {
      if (!MatcherFor(r->ctx).RemovePosted(r.get())) return why;  // data is arriving
      Complete(r, why);
      return why;
    }
    if (r->peer == rank_) {
      // A send to ourselves waiting in our own unexpected queue.
      Matcher& m = MatcherFor(r->ctx);
      for (auto it = m.unexpected().begin(); it != m.unexpected().end(); ++it) {
        if (it->sender == r) {
          m.EraseUnexpected(it);
          break;
        }
      }
    } else if (awaiting_cts_.erase(r->id) > 0) {
      out.push_back({r->peer, Pack(MakeMeta(kCancelRts, r->ctx, rank_, r->tag, r->bytes, r->id))});
    } else if (route_[r->peer] != nullptr && !route_[r->peer]->Cancel(r->peer, r->frame)) {
      result = MakeError(CodeOf(why), absl::StrCat(why.message(), " (part of it had left; the "
                                                                  "rest will still be delivered)"));
    }
    sending_.erase(r->id);
    Complete(r, result);
  }
  Flush(&out);
  return result;
}

absl::Status Engine::SendRawFrameForTesting(int peer, const FrameMeta& meta, const void* payload,
                                            size_t len, MonoTime deadline) {
  if (peer == rank_ || peer < 0 || peer >= size_ || route_.empty() || route_[peer] == nullptr) {
    return InvalidArgument(absl::StrCat("rank ", rank_, " has no connection to rank ", peer));
  }
  // The callback may run after a timed-out caller has gone: it owns what it
  // touches.
  struct Sent {
    std::vector<char> copy;
    std::atomic<uint32_t> done{0};  // a futex word (core/base/clock.h): 1 once status is set
    absl::Status status;
  };
  auto sent = std::make_shared<Sent>();
  if (len > 0) sent->copy.assign(static_cast<const char*>(payload),
                                 static_cast<const char*>(payload) + len);
  route_[peer]->Send(peer, meta, sent->copy.data(), len, [sent](absl::Status s) {
    sent->status = std::move(s);
    sent->done.store(1, std::memory_order_release);
    FutexWake(&sent->done, INT_MAX, /*shared=*/false);
  });
  while (sent->done.load(std::memory_order_acquire) == 0 && MonoNow() < deadline) {
    FutexWaitUntil(&sent->done, 0, deadline, /*shared=*/false);
  }
  if (sent->done.load(std::memory_order_acquire) == 0) {
    return Timeout(absl::StrCat("rank ", rank_, ": a raw frame to rank ", peer, " (", len,
                                " bytes) was not written by the deadline"));
  }
  return sent->status;
}

}  // namespace hcomm
