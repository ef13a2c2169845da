#include "core/p2p/request.h"

#include <atomic>
#include <memory>

namespace hcomm {

std::shared_ptr<Request> NewRequest() {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer does not model std::atomic_thread_fence, so it cannot
  // see the hand-over below and reports the reused request's last writes on
  // another thread as a race: under it, every request is new.
  return std::make_shared<Request>();
#endif
  // A request held only by this pool can gain a new reference only from
  // this thread; the fence pairs with the release by whoever dropped the
  // last other one.
  constexpr int kPool = 8;
  thread_local std::shared_ptr<Request> pool[kPool];
  thread_local unsigned next = 0;
  for (int i = 0; i < kPool; ++i) {
    std::shared_ptr<Request>& r = pool[(next + i) % kPool];
    if (r && r.use_count() == 1) {
      std::atomic_thread_fence(std::memory_order_acquire);
      r->Reset();
      next = (next + i + 1) % kPool;
      return r;
    }
  }
  std::shared_ptr<Request>& slot = pool[next];
  next = (next + 1) % kPool;
  slot = std::make_shared<Request>();
  return slot;
}

}  // namespace hcomm
