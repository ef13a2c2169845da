// Helpers for tests of the engine with ranks as threads (testing/multirank.h).
#ifndef HCOMM_CORE_P2P_ENGINE_TESTING_H_
#define HCOMM_CORE_P2P_ENGINE_TESTING_H_

#include <sched.h>

#include <memory>

#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/p2p/engine.h"
#include "gtest/gtest.h"

// Fails the test (and returns) unless `expr`, an absl::Status, is OK.
#define ASSERT_OK(expr)           \
  do {                            \
    absl::Status st_ = (expr);    \
    ASSERT_TRUE(st_.ok()) << st_; \
  } while (0)

namespace hcomm {
namespace testing {

// Engine::Init, with a test failure (and null) where it fails.
inline std::unique_ptr<Engine> MustInit(const Options& o) {
  auto c = Engine::Init(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(c).value() : nullptr;
}

// Waits (yielding, never sleeping) until `pred` holds or `deadline` passes.
template <typename Pred>
bool WaitFor(Pred pred, MonoTime deadline) {
  while (!pred()) {
    if (MonoNow() >= deadline) return false;
    sched_yield();
  }
  return true;
}

}  // namespace testing
}  // namespace hcomm

#endif  // HCOMM_CORE_P2P_ENGINE_TESTING_H_
