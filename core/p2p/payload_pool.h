// Staging memory for eager payloads that arrive before their receive.
//
//   PayloadPool pool;
//   PayloadPool::Buffer b = pool.Take(len);   // at least len bytes
//   ...                                       // b's destruction returns it
//
// A payload of kMinPooled bytes or more takes a block from a free list of
// its power-of-two size class instead of a fresh allocation. A stream of
// 64 KiB arrivals, each allocated and freed on its own, makes glibc's heap
// grow and shrink at every one (sbrk), and the page faults of that made a
// ring allreduce sent in 64 KiB eager pieces far slower (measured:
// docs/performance.md, "Pooled staging for eager payloads").
// The pool keeps up to kKeepBytes of freed blocks in all (128 blocks of
// 64 KiB); beyond that they go back to the allocator, so a burst does not
// pin its memory.
// Smaller payloads are plain allocations, which glibc's caches serve well.
//
// Thread-safe. The pool must outlive every Buffer it handed out.
#ifndef HCOMM_CORE_P2P_PAYLOAD_POOL_H_
#define HCOMM_CORE_P2P_PAYLOAD_POOL_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace hcomm {

class PayloadPool {
 public:
  static constexpr size_t kMinPooled = 4 * 1024;
  static constexpr size_t kMaxPooled = 64 * 1024;  // the eager protocol's limit
  static constexpr size_t kKeepBytes = 8 * 1024 * 1024;

  // Frees a buffer: back to its class (`pool` set) or to the allocator.
  struct Release {
    PayloadPool* pool = nullptr;
    int size_class = 0;
    void operator()(char* p) const;
  };
  using Buffer = std::unique_ptr<char[], Release>;

  PayloadPool() = default;
  PayloadPool(const PayloadPool&) = delete;
  PayloadPool& operator=(const PayloadPool&) = delete;
  ~PayloadPool();

  // A buffer of at least `bytes` bytes (at least one).
  Buffer Take(size_t bytes);
  // Freed blocks kept, in bytes (for tests).
  size_t KeptBytes() const;

 private:
  static constexpr int kClasses = 5;  // 4, 8, 16, 32 and 64 KiB
  static size_t ClassBytes(int c) { return kMinPooled << c; }
  void Give(char* p, int size_class);

  mutable absl::Mutex mu_;
  std::vector<char*> free_[kClasses] ABSL_GUARDED_BY(mu_);
  size_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // in free_
};

}  // namespace hcomm

#endif  // HCOMM_CORE_P2P_PAYLOAD_POOL_H_
