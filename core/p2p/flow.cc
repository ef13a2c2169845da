#include "core/p2p/flow.h"

namespace hcomm {

FlowControl::FlowControl(int size, int rank, const std::vector<int64_t>& windows,
                         int64_t own_window)
    : size_(size),
      rank_(rank),
      windows_(windows),
      own_window_(own_window),
      return_at_(own_window / 4),
      credit_(new std::atomic<int64_t>[size]),
      freed_(new std::atomic<int64_t>[size]),
      arrived_(size, 0),
      held_(size, 0),
      held_rts_(size, 0) {
  for (int p = 0; p < size; ++p) {
    credit_[p].store(windows_[p], std::memory_order_relaxed);
    freed_[p].store(0, std::memory_order_relaxed);
  }
}

bool FlowControl::TakeCredit(int peer, uint64_t bytes) {
  const int64_t cost = Cost(bytes);
  if (credit_[peer].load(std::memory_order_relaxed) < cost) return false;
  if (credit_[peer].fetch_sub(cost, std::memory_order_acq_rel) >= cost) return true;
  credit_[peer].fetch_add(cost, std::memory_order_acq_rel);  // another sender took it first
  return false;
}

bool FlowControl::ReturnCredit(int peer, int64_t amount) {
  if (amount <= 0) return false;
  int64_t now = credit_[peer].load(std::memory_order_relaxed);
  do {
    if (now + amount > windows_[peer]) return false;
  } while (!credit_[peer].compare_exchange_weak(now, now + amount, std::memory_order_acq_rel));
  return true;
}

bool FlowControl::Hold(int peer, int64_t cost) {
  if (held_[peer] + cost > own_window_) return false;
  held_[peer] += cost;
  return true;
}

void FlowControl::Unhold(int peer, int64_t cost) {
  held_[peer] -= cost;
  Free(peer, cost);
}

void FlowControl::Free(int peer, int64_t cost) {
  if (freed_[peer].fetch_add(cost, std::memory_order_acq_rel) + cost >= return_at_) {
    due_.store(true, std::memory_order_release);
  }
}

bool FlowControl::HoldRts(int peer) {
  if (held_rts_[peer] >= 2 * (own_window_ / kEntryBytes)) return false;
  ++held_rts_[peer];
  return true;
}

void FlowControl::UnholdRts(int peer) { --held_rts_[peer]; }

std::vector<std::pair<int, int64_t>> FlowControl::TakeDue() {
  std::vector<std::pair<int, int64_t>> due;
  if (!due_.exchange(false, std::memory_order_acq_rel)) return due;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || freed_[p].load(std::memory_order_relaxed) < return_at_) continue;
    const int64_t amount = freed_[p].exchange(0, std::memory_order_acq_rel);
    if (amount > 0) due.emplace_back(p, amount);
  }
  return due;
}

}  // namespace hcomm
