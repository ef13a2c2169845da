// How many forks this process has come out of: the one count that tells a
// fork's child from the process that made an object (net::Fd, the C API's
// handles).
//
//   const uint32_t made_at = ForkCount();
//   ... later ...
//   if (made_at != ForkCount()) ... made by an ancestor, before a fork
#ifndef HCOMM_CORE_BASE_FORKS_H_
#define HCOMM_CORE_BASE_FORKS_H_

#include <atomic>
#include <cstdint>

namespace hcomm {

namespace forks_internal {
// Incremented in the child of every fork (pthread_atfork, registered when
// the library is loaded, before any object can have read it).
extern std::atomic<uint32_t> count;
}  // namespace forks_internal

inline uint32_t ForkCount() { return forks_internal::count.load(std::memory_order_relaxed); }

}  // namespace hcomm

#endif  // HCOMM_CORE_BASE_FORKS_H_
