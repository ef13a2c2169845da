// Helpers for waiting loops: a pause for spinning, and monotonic clocks.
//
//   for (int i = 0; !ready(); ++i) {
//     CpuRelax();
//     if ((i & 1023) == 0 && MonoNs() > deadline_ns) break;
//   }
#ifndef HCOMM_CORE_BASE_SPIN_H_
#define HCOMM_CORE_BASE_SPIN_H_

#include <time.h>

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace hcomm {

// Tells the CPU that this thread spins (lets the sibling hyperthread run).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// CLOCK_MONOTONIC in nanoseconds.
inline int64_t MonoNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// CLOCK_MONOTONIC_COARSE in nanoseconds: a few milliseconds' resolution
// for a fraction of the cost, for bookkeeping read on every message.
inline int64_t CoarseNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace hcomm

#endif  // HCOMM_CORE_BASE_SPIN_H_
