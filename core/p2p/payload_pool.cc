#include "core/p2p/payload_pool.h"

#include <algorithm>

namespace hcomm {

void PayloadPool::Release::operator()(char* p) const {
  if (pool != nullptr) {
    pool->Give(p, size_class);
  } else {
    delete[] p;
  }
}

PayloadPool::~PayloadPool() {
  for (auto& list : free_) {
    for (char* p : list) delete[] p;
  }
}

PayloadPool::Buffer PayloadPool::Take(size_t bytes) {
  if (bytes < kMinPooled || bytes > kMaxPooled) {
    return Buffer(new char[std::max<size_t>(bytes, 1)], Release{});
  }
  int c = 0;
  while (ClassBytes(c) < bytes) ++c;
  {
    absl::MutexLock l(&mu_);
    if (!free_[c].empty()) {
      char* p = free_[c].back();
      free_[c].pop_back();
      kept_bytes_ -= ClassBytes(c);
      return Buffer(p, Release{this, c});
    }
  }
  return Buffer(new char[ClassBytes(c)], Release{this, c});
}

void PayloadPool::Give(char* p, int size_class) {
  {
    absl::MutexLock l(&mu_);
    if (kept_bytes_ + ClassBytes(size_class) <= kKeepBytes) {
      free_[size_class].push_back(p);
      kept_bytes_ += ClassBytes(size_class);
      return;
    }
  }
  delete[] p;
}

size_t PayloadPool::KeptBytes() const {
  absl::MutexLock l(&mu_);
  return kept_bytes_;
}

}  // namespace hcomm
