#include "c_api/request_slots.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace hcomm_c {

RequestSlots& RequestSlots::Get() {
  static RequestSlots* table = new RequestSlots();
  return *table;
}

hcomm_request_s* RequestSlots::Take() {
  hcomm_request_s* slot = nullptr;
  {
    absl::MutexLock l(&mu_);
    if (freed_.size() > kQuarantine) {
      slot = freed_.front();
      freed_.pop_front();
    } else {
      int n = slab_count_.load(std::memory_order_relaxed);
      if (n == 0 || used_in_last_ == SlabSize(n - 1)) {
        if (n == kMaxSlabs) return nullptr;
        slabs_[n].store(new hcomm_request_s[SlabSize(n)], std::memory_order_relaxed);
        slab_count_.store(n + 1, std::memory_order_release);
        used_in_last_ = 0;
        ++n;
      }
      slot = slabs_[n - 1].load(std::memory_order_relaxed) + used_in_last_++;
    }
  }
  slot->live.store(true, std::memory_order_release);
  return slot;
}

bool RequestSlots::Give(hcomm_request_s* slot) {
  if (!slot->live.exchange(false, std::memory_order_acq_rel)) return false;
  // Taken out here, released when this returns, after the lock: the last
  // reference to an engine may be among them, and its end takes a while.
  std::shared_ptr<hcomm::Request> impl = std::move(slot->impl);
  std::shared_ptr<hcomm::RequestDriver> driver = std::move(slot->driver);
  std::shared_ptr<const std::vector<int>> world_to_group = std::move(slot->world_to_group);
  absl::MutexLock l(&mu_);
  freed_.push_back(slot);
  return true;
}

bool RequestSlots::Owns(const hcomm_request_s* p) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  const int n = slab_count_.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    const auto base = reinterpret_cast<uintptr_t>(slabs_[i].load(std::memory_order_relaxed));
    const size_t bytes = SlabSize(i) * sizeof(hcomm_request_s);
    if (at >= base && at - base < bytes) return (at - base) % sizeof(hcomm_request_s) == 0;
  }
  return false;
}

}  // namespace hcomm_c
