#include "core/base/forks.h"

#include <pthread.h>

namespace hcomm {

namespace forks_internal {
std::atomic<uint32_t> count{0};
}  // namespace forks_internal

namespace {

void CountInChild() { forks_internal::count.fetch_add(1, std::memory_order_relaxed); }

[[maybe_unused]] const int registered = pthread_atfork(nullptr, nullptr, CountInChild);

}  // namespace

}  // namespace hcomm
