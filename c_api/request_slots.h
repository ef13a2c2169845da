// Where the C API's request handles live. A handle is the address of a slot
// in slabs that are never given back, so a handle the caller already freed
// still points at memory this library owns, and a call with it is told so
// (INVALID_ARGUMENT, as API.md says of a destroyed handle) instead of
// reading freed memory. A freed slot is handed out again only after
// kQuarantine slots freed later than it, so a use after free is caught
// unless that many requests were freed in between.
#ifndef HCOMM_C_API_REQUEST_SLOTS_H_
#define HCOMM_C_API_REQUEST_SLOTS_H_

#include <atomic>
#include <cstddef>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "c_api/internal.h"

namespace hcomm_c {

class RequestSlots {
 public:
  static constexpr size_t kQuarantine = 1024;
  static constexpr int kMaxSlabs = 40;  // slab i holds kFirstSlab << min(i, 12) slots
  static constexpr size_t kFirstSlab = 2048;  // the quarantine and a few live ones

  // The one table of the process; never destroyed.
  static RequestSlots& Get();

  // A slot for a new request, marked live, with nothing in it.
  // Null only once kMaxSlabs slabs are in use (billions of live requests).
  hcomm_request_s* Take();

  // Ends a live slot: what it held is released (outside the table's lock)
  // and the slot waits in quarantine. False if the slot was not live (freed
  // already, or freed by another thread at the same time).
  bool Give(hcomm_request_s* slot);

  // Whether `p` is the address of a slot of this table, live or not.
  bool Owns(const hcomm_request_s* p) const;

 private:
  RequestSlots() = default;
  static size_t SlabSize(int i) { return kFirstSlab << (i < 12 ? i : 12); }

  // Slabs are published before slab_count_ counts them, so Owns reads them
  // without the lock.
  std::atomic<hcomm_request_s*> slabs_[kMaxSlabs] = {};
  std::atomic<int> slab_count_{0};

  absl::Mutex mu_;
  size_t used_in_last_ ABSL_GUARDED_BY(mu_) = 0;  // slots of the newest slab handed out
  std::deque<hcomm_request_s*> freed_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace hcomm_c

#endif  // HCOMM_C_API_REQUEST_SLOTS_H_
