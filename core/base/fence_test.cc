#include "core/base/fence.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "core/base/spin.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

TEST(FenceTest, RegistersOncePerProcessAndAgainInAForkedChild) {
  const bool ok = RegisterAsymmetricFences();
  EXPECT_EQ(RegisterAsymmetricFences(), ok);
  HeavyFence(ok);  // either kind returns
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(RegisterAsymmetricFences() == ok ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child registered otherwise";
}

// The store-buffering litmus test, between two processes, as the wake-up
// handshakes use the fences: the publisher stores x and reads y after
// LightFence, the sleeper stores y and reads x after HeavyFence. Without
// store-load order both may read 0 (each store still in its CPU's
// buffer); with the fences that outcome must never occur.
struct Litmus {
  alignas(64) std::atomic<int64_t> go;     // the round the publisher may run
  alignas(64) std::atomic<int64_t> ready;  // the round the sleeper is set for
  alignas(64) std::atomic<int> x;
  alignas(64) std::atomic<int> y;
  alignas(64) std::atomic<int> seen_y[2];  // per round parity: the publisher's read
  alignas(64) std::atomic<int64_t> both_zero;
  alignas(64) std::atomic<int64_t> done;   // rounds the sleeper finished
  std::atomic<int> timed_out;
};

TEST(FenceTest, PublisherAndSleeperNeverBothMissTheOthersStore) {
  constexpr int64_t kRounds = 50000;
  void* mem = mmap(nullptr, sizeof(Litmus), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* l = new (mem) Litmus();
  const int64_t deadline = MonoNs() + 60'000'000'000;
  auto wait_for = [&](const std::atomic<int64_t>& v, int64_t at_least) {
    while (v.load(std::memory_order_acquire) < at_least) {
      CpuRelax();
      if (MonoNs() > deadline) {
        l->timed_out.store(1);
        return false;
      }
    }
    return true;
  };
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the sleeper
    const bool light = RegisterAsymmetricFences();
    for (int64_t r = 1; r <= kRounds; ++r) {
      l->y.store(0, std::memory_order_relaxed);
      l->ready.store(r, std::memory_order_release);
      if (!wait_for(l->go, r)) _exit(1);
      l->y.store(1, std::memory_order_relaxed);
      HeavyFence(light);
      const int x = l->x.load(std::memory_order_relaxed);
      // The publisher's read of this round, once it has made it.
      while (l->seen_y[r & 1].load(std::memory_order_acquire) == -1) {
        CpuRelax();
        if (MonoNs() > deadline) _exit(1);
      }
      if (x == 0 && l->seen_y[r & 1].load(std::memory_order_relaxed) == 0) {
        l->both_zero.fetch_add(1, std::memory_order_relaxed);
      }
      l->done.store(r, std::memory_order_release);
    }
    _exit(0);
  }
  const bool light = RegisterAsymmetricFences();
  for (int64_t r = 1; r <= kRounds; ++r) {
    if (!wait_for(l->ready, r)) break;
    if (r > 1 && !wait_for(l->done, r - 1)) break;
    l->x.store(0, std::memory_order_relaxed);
    l->seen_y[r & 1].store(-1, std::memory_order_relaxed);
    l->go.store(r, std::memory_order_release);
    l->x.store(1, std::memory_order_relaxed);
    LightFence(light);
    l->seen_y[r & 1].store(l->y.load(std::memory_order_relaxed), std::memory_order_release);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(l->timed_out.load(), 0);
  EXPECT_EQ(l->done.load(), kRounds);
  EXPECT_EQ(l->both_zero.load(), 0) << "rounds in which neither side saw the other's store, of "
                                    << kRounds << " (asymmetric fences: " << light << ")";
  munmap(mem, sizeof(Litmus));
}

}  // namespace
}  // namespace hcomm
