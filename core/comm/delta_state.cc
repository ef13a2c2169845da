#include "core/comm/delta_state.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "algorithms/kernels/delta.h"
#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/comm/wire_codec.h"

namespace hcomm {

DeltaState::Send DeltaState::Plan(int peer, int tag, const void* buf, size_t n) {
  Send plan;
  const size_t per_peer = PerPeer();
  if (n < kMinDeltaBytes || n > per_peer) return plan;
  DrainLost(peer);
  std::vector<Notice> notices;
  Out* e;
  bool have_base;
  {
    absl::MutexLock l(&mu_);
    auto [it, made] = out_.try_emplace({peer, tag});
    e = &it->second;
    if (e->busy) return plan;  // another thread sends on this key now
    have_base = e->data != nullptr && e->size == n;
    if (!have_base) {
      // A base of another size is replaced at the peer by this message.
      const bool had_base = e->data != nullptr;
      if (had_base) out_bytes_[peer] -= e->size;
      e->data.reset();
      size_t& used = out_bytes_[peer];
      while (used + n > per_peer) {
        // The least recently used other key to this peer gives way.
        auto victim = out_.end();
        for (auto v = out_.begin(); v != out_.end(); ++v) {
          if (v->first.first != peer || v == it || v->second.busy || v->second.data == nullptr) {
            continue;
          }
          if (victim == out_.end() || v->second.used < victim->second.used) victim = v;
        }
        if (victim == out_.end()) break;
        used -= victim->second.size;
        notices.push_back({peer, victim->first.second, victim->second.gen});
        out_.erase(victim);
      }
      if (used + n > per_peer) {
        // No room: this message goes as it is, and the peer drops its copy.
        if (had_base) notices.push_back({peer, tag, e->gen});
        out_.erase(it);
        e = nullptr;
      } else {
        e->data.reset(new char[n]);
        e->size = n;
        used += n;
      }
    }
    if (e != nullptr) {
      e->busy = true;
      e->used = ++clock_;
    }
  }
  SendNotices(notices);
  if (e == nullptr) return plan;  // no room: as it is
  // Only this thread touches *e while it is busy.
  const uint8_t gen = static_cast<uint8_t>(e->gen + 1);
  plan.coded = true;
  plan.peer = peer;
  plan.tag = tag;
  plan.payload = buf;
  plan.payload_bytes = n;
  plan.fingerprint = DeltaFingerprint(WireCoding::kDeltaFull, gen, n);
  bool advanced = false;
  if (have_base) {
    // Worth a frame only if it takes at most half the message. The base
    // becomes this message as the frame is made.
    const size_t cap = n / 2;
    std::shared_ptr<char[]> frame(new char[cap]);
    absl::StatusOr<size_t> len = EncodeDeltaAdvancing(e->data.get(), buf, n, frame.get(), cap);
    if (len.ok()) {
      plan.frame = std::move(frame);
      plan.payload = plan.frame.get();
      plan.payload_bytes = *len;
      plan.fingerprint = DeltaFingerprint(WireCoding::kDeltaFrame, gen, n);
      advanced = true;
    }
  }
  if (!advanced) memcpy(e->data.get(), buf, n);
  e->gen = gen;
  return plan;
}

void DeltaState::Sent(const Send& plan, bool ok) {
  if (!plan.coded) return;
  std::vector<Notice> notices;
  {
    absl::MutexLock l(&mu_);
    auto it = out_.find({plan.peer, plan.tag});
    if (it == out_.end()) return;
    it->second.busy = false;
    if (!ok) {
      // Whether the peer kept it is unknown: start the key afresh.
      out_bytes_[plan.peer] -= it->second.size;
      notices.push_back({plan.peer, plan.tag, it->second.gen});
      out_.erase(it);
    }
  }
  SendNotices(notices);
}

void DeltaState::SendNotices(const std::vector<Notice>& notices, int tag) {
  for (const Notice& n : notices) {
    std::shared_ptr<uint32_t[]> body(new uint32_t[2]{static_cast<uint32_t>(n.tag), n.gen});
    if (engine_->SendNow(ctx_, body.get(), 8, n.peer, tag)) continue;
    auto r = engine_->Isend(ctx_, body.get(), 8, 1, n.peer, tag);
    // (It completes in the background; a peer that is gone needs no notice.)
    if (r.ok()) (*r)->keep = std::move(body);
  }
}

void DeltaState::DrainLost(int peer) {
  uint32_t body[2];
  while (engine_->TakeArrived(ctx_, body, sizeof body, peer, kDeltaLostTag)) {
    absl::MutexLock l(&mu_);
    auto it = out_.find({peer, static_cast<int>(body[0])});
    if (it == out_.end() || it->second.busy) continue;
    if (it->second.data != nullptr) out_bytes_[peer] -= it->second.size;
    it->second.data.reset();  // (keeps its generation: the next goes whole)
  }
}

void DeltaState::DrainNotices(int peer) {
  uint32_t body[2];
  while (engine_->TakeArrived(ctx_, body, sizeof body, peer, kDeltaNoticeTag)) {
    absl::MutexLock l(&mu_);
    const int tag = static_cast<int>(body[0]);
    const uint8_t gen = static_cast<uint8_t>(body[1]);
    auto it = in_.find({peer, tag});
    if (it != in_.end() && it->second.gen == gen && !it->second.busy) {
      DropIn(it);
    } else if (released_.size() < 65536) {
      released_.insert({peer, tag, gen});
    }
  }
}

void DeltaState::DropIn(std::map<Key, In>::iterator it) {
  if (it->second.data != nullptr) in_bytes_[it->first.first] -= it->second.size;
  in_.erase(it);
  changed_.SignalAll();
}

absl::Status DeltaState::Receive(int peer, int tag, uint64_t fp, void* buf, size_t capacity,
                                 size_t got, size_t* out_bytes) {
  const MonoTime deadline =
      MonoNow() + absl::Nanoseconds(timeout_ns_.load(std::memory_order_relaxed));
  const WireCoding c = CodingOf(fp);
  const size_t n = CodedBytes(fp);
  const uint8_t gen = GenerationOf(fp);
  *out_bytes = 0;
  const auto from = [&] { return absl::StrCat("from rank ", peer, " tag ", tag); };
  if (n > capacity) {
    // Its generation is lost here: a frame built on it fails at once.
    absl::MutexLock l(&mu_);
    auto it = in_.find({peer, tag});
    if (it != in_.end() && !it->second.busy) {
      if (it->second.data != nullptr) in_bytes_[peer] -= it->second.size;
      it->second.data.reset();
      it->second.gen = gen;
      changed_.SignalAll();
    }
    SendLost(peer, tag, gen);
    return Mismatch(absl::StrCat("message of ", n, " bytes ", from(),
                                 " exceeds the receive buffer of ", capacity,
                                 " bytes (it travelled delta-coded)"));
  }
  if (got != n && c == WireCoding::kDeltaFull) {
    return Mismatch(absl::StrCat("a delta-coded message ", from(), " has ", got,
                                 " bytes where it announced ", n));
  }
  DrainNotices(peer);
  const Key key{peer, tag};
  // The sender keeps at most PerPeer(its budget) for this rank; twice that
  // here leaves room for copies whose notice is still on its way. (The
  // sender's budget is taken to be this rank's: delta_cache_bytes should
  // be the same on every rank.)
  const size_t limit = 2 * PerPeer();
  // Generation gen - 1 of the key is the base of a frame, and must have
  // been received first (a receive of it on another thread may still be
  // decoding).
  const uint8_t base_gen = static_cast<uint8_t>(gen - 1);
  absl::MutexLock l(&mu_);
  auto idle = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = in_.find(key);
    if (c == WireCoding::kDeltaFull) return it == in_.end() || !it->second.busy;
    return it != in_.end() && !it->second.busy && it->second.gen == base_gen;
  };
  while (!idle()) {
    if (changed_.WaitUntil(&mu_, deadline)) break;
  }
  if (!idle()) {
    return Timeout(absl::StrCat("a delta-coded message ", from(), " (generation ", gen,
                                ") waited until its deadline for the receive of generation ",
                                base_gen, " before it to end here"));
  }
  if (c == WireCoding::kDeltaFull) {
    In& e = in_[key];
    if (e.data != nullptr) in_bytes_[peer] -= e.size;
    e.data.reset();
    e.size = n;
    e.gen = gen;
    *out_bytes = n;
    if (released_.erase({peer, tag, gen}) != 0) {
      DropIn(in_.find(key));
    } else if (in_bytes_[peer] + n <= limit) {
      e.data.reset(new char[n]);
      memcpy(e.data.get(), buf, n);
      in_bytes_[peer] += n;
    }
    changed_.SignalAll();
    return absl::OkStatus();
  }
  auto it = in_.find(key);
  In& e = it->second;
  if (e.data == nullptr || e.size != n) {
    DropIn(it);
    SendLost(peer, tag, gen);
    return Internal(absl::StrCat("a delta frame ", from(), " came for a base this rank could not ",
                                 "keep (at most ", limit, " bytes per sender: set the same ",
                                 "delta_cache_bytes on every rank); the message is lost"));
  }
  e.busy = true;
  char* base = e.data.get();
  // The frame lies in buf: it moves aside, and the message is rebuilt in
  // the base (no one else touches it while busy) and copied into buf.
  mu_.Unlock();
  std::unique_ptr<char[]> frame(new char[got]);
  memcpy(frame.get(), buf, got);
  absl::Status s = DecodeDeltaCopying(base, frame.get(), got, buf, n);
  mu_.Lock();
  it = in_.find(key);
  it->second.busy = false;
  if (!s.ok()) {
    DropIn(it);
    SendLost(peer, tag, gen);
    return Internal(absl::StrCat("a delta frame ", from(), " (generation ", gen,
                                 ") did not rebuild its message: ", s.message(),
                                 "; the message is lost"));
  }
  it->second.gen = gen;
  *out_bytes = n;
  if (released_.erase({peer, tag, gen}) != 0) DropIn(it);
  changed_.SignalAll();
  return absl::OkStatus();
}

size_t DeltaState::kept_for_sending() const {
  absl::MutexLock l(&mu_);
  size_t total = 0;
  for (const auto& [peer, b] : out_bytes_) total += b;
  return total;
}

size_t DeltaState::kept_received() const {
  absl::MutexLock l(&mu_);
  size_t total = 0;
  for (const auto& [peer, b] : in_bytes_) total += b;
  return total;
}

}  // namespace hcomm
