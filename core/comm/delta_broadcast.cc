// Broadcast with the `delta` compression (API.md "Compression"): the root
// sends a delta frame (algorithms/kernels/delta.h) against the previous
// broadcast of the same size from it, which every rank kept; the ranks
// agree that each rebuilt the message (its checksum matched) or, if any
// could not, the root sends it whole.
//
// Steps, each an ordinary collective of this communicator: broadcast the
// frame's length (0: the message goes whole); broadcast the frame; an
// allreduce (min) of "rebuilt"; if one failed, broadcast the message. So a
// delta broadcast costs two small collectives more than a plain one, and
// pays where the frame saves more than that: large messages that change a
// little over links slower than shared memory (Communicator::Broadcast
// takes this path only then).
#include <algorithm>
#include <cstring>
#include <memory>

#include "algorithms/kernels/delta.h"
#include "core/comm/communicator.h"

namespace hcomm {

absl::Status Communicator::BroadcastDelta(void* buf, size_t bytes, int root) {
  const std::pair<int, size_t> key{root, bytes};
  const size_t budget =
      static_cast<size_t>(std::max<int64_t>(0, delta_cache_bytes_.load(std::memory_order_relaxed)));
  // The root's frame, if it has a base and the frame saves at least half.
  uint64_t header[2] = {0, 0};
  std::unique_ptr<char[]> frame;
  if (rank_ == root) {
    absl::MutexLock l(&bcast_mu_);
    auto it = bcast_bases_.find(key);
    if (it != bcast_bases_.end()) {
      frame.reset(new char[bytes / 2]);
      absl::StatusOr<size_t> len =
          EncodeDelta(it->second.data.get(), buf, bytes, frame.get(), bytes / 2);
      if (len.ok()) header[0] = *len;
    }
  }
  // Keeps buf as the base of key (making room by age), or drops the key.
  auto keep = [&]() {
    absl::MutexLock l(&bcast_mu_);
    auto it = bcast_bases_.find(key);
    if (it == bcast_bases_.end()) {
      if (bytes > budget) return;
      while (bcast_bytes_ + bytes > budget) {
        auto oldest = std::min_element(bcast_bases_.begin(), bcast_bases_.end(),
                                       [](const auto& a, const auto& b) {
                                         return a.second.used < b.second.used;
                                       });
        bcast_bytes_ -= oldest->first.second;
        bcast_bases_.erase(oldest);
      }
      it = bcast_bases_.try_emplace(key).first;
      it->second.data.reset(new char[bytes]);
      bcast_bytes_ += bytes;
    }
    memcpy(it->second.data.get(), buf, bytes);
    it->second.used = ++bcast_clock_;
  };
  auto drop = [&]() {
    absl::MutexLock l(&bcast_mu_);
    auto it = bcast_bases_.find(key);
    if (it == bcast_bases_.end()) return;
    bcast_bytes_ -= bytes;
    bcast_bases_.erase(it);
  };
  auto whole = [&]() -> absl::Status {
    absl::Status s =
        RunCollective({CollectiveOp::kBroadcast, buf, buf, bytes, DataType::kUint8,
                       ReduceOp::kSum, root});
    if (s.ok()) {
      keep();
    } else {
      drop();
    }
    return s;
  };
  absl::Status s = RunCollective(
      {CollectiveOp::kBroadcast, header, header, 2, DataType::kUint64, ReduceOp::kSum, root});
  if (!s.ok()) {
    drop();
    return s;
  }
  const size_t len = header[0];
  if (len == 0 || len > bytes / 2) return whole();
  if (rank_ != root) frame.reset(new char[len]);
  s = RunCollective(
      {CollectiveOp::kBroadcast, frame.get(), frame.get(), len, DataType::kUint8, ReduceOp::kSum,
       root});
  if (!s.ok()) {
    drop();
    return s;
  }
  int32_t rebuilt = 1;
  if (rank_ != root) {
    absl::MutexLock l(&bcast_mu_);
    auto it = bcast_bases_.find(key);
    rebuilt = it != bcast_bases_.end() &&
              DecodeDelta(it->second.data.get(), frame.get(), len, it->second.data.get(), bytes)
                  .ok();
    if (rebuilt) {
      memcpy(buf, it->second.data.get(), bytes);
      it->second.used = ++bcast_clock_;
    } else if (it != bcast_bases_.end()) {
      bcast_bytes_ -= bytes;
      bcast_bases_.erase(it);  // (its bytes are garbage now)
    }
  }
  s = RunCollective({CollectiveOp::kAllReduce, &rebuilt, &rebuilt, 1, DataType::kInt32,
                     ReduceOp::kMin, -1});
  if (!s.ok()) {
    drop();
    return s;
  }
  if (rebuilt == 0) return whole();  // some rank could not: the message whole
  if (rank_ == root) keep();
  return absl::OkStatus();
}

}  // namespace hcomm
