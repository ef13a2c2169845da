// Fences for the handshake between a thread that publishes (stores a
// counter, then looks whether anyone sleeps waiting for it) and one that
// sleeps (counts itself a sleeper, then looks at the counter once more
// before it sleeps). Each side must see the other's store or have its own
// seen: store-load order, which only a full fence gives.
//
//   publisher:  counter.store(v, release); LightFence(light);
//               if (sleepers.load() > 0) wake;
//   sleeper:    sleepers.fetch_add(1); HeavyFence(light);
//               if (counter.load() < v) futex_wait(bell, nap);
//
// A full fence on every publish makes the publisher wait until its store
// has reached the other CPUs' caches, which slows every small collective
// where the CPUs sit behind different caches (measured:
// docs/performance.md, "Light fences on publish"). Where the kernel has
// membarrier(2), the publisher (the hot path) fences only against the
// compiler, and the sleeper (once per sleep) has the kernel run a full
// fence on every CPU that runs a thread of a registered process.
//
// Both sides of one handshake must agree on `light`: it may be true only
// if every process taking part registered (RegisterAsymmetricFences).
#ifndef HCOMM_CORE_BASE_FENCE_H_
#define HCOMM_CORE_BASE_FENCE_H_

#include <atomic>

namespace hcomm {

// Registers this process for membarrier's expedited global command, once
// per process (a forked child registers anew). False where the kernel or
// a seccomp filter refuses it, or HCOMM_MEMBARRIER=0 declines it (the
// heavy fence interrupts the CPUs running registered processes):
// handshakes this process takes part in must then fence on both sides.
bool RegisterAsymmetricFences();

// A full barrier. On x86 a locked add to the stack orders as mfence does,
// at about half the cost (as Linux's smp_mb).
inline void FullFence() {
#if defined(__x86_64__)
  asm volatile("lock; addl $0,-4(%%rsp)" ::: "memory", "cc");
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// The publisher's fence: against the compiler only where `light`.
inline void LightFence(bool light) {
  if (light) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    FullFence();
  }
}

// The sleeper's fence: where `light`, a full fence on every CPU running a
// registered process (a system call of a microsecond or more).
void HeavyFence(bool light);

}  // namespace hcomm

#endif  // HCOMM_CORE_BASE_FENCE_H_
