#include "core/base/interrupt.h"

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "core/base/clock.h"

namespace hcomm {
namespace {

std::atomic<int> calls{0};
std::atomic<int> answer{0};
int Check() {
  calls.fetch_add(1);
  return answer.load();
}

class InterruptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    calls = 0;
    answer = 0;
    SetInterruptCheck(&Check);
    ClearInterrupt();
  }
  void TearDown() override { SetInterruptCheck(nullptr); }
};

TEST_F(InterruptTest, WithoutACheckNothingIsInterrupted) {
  SetInterruptCheck(nullptr);
  answer = 1;
  const MonoTime t0 = MonoNow();
  EXPECT_FALSE(InterruptNow(t0));
  EXPECT_FALSE(InterruptNow(t0 + absl::Seconds(10)));
  EXPECT_FALSE(Interrupted());
  EXPECT_EQ(calls.load(), 0);
}

TEST_F(InterruptTest, TheCheckRunsOnceAPeriodHasBeenWaited) {
  const MonoTime t0 = MonoNow();
  EXPECT_FALSE(InterruptNow(t0));  // the first look only starts the period
  EXPECT_FALSE(InterruptNow(t0 + kInterruptCheckPeriod / 2));
  EXPECT_EQ(calls.load(), 0);
  EXPECT_FALSE(InterruptNow(t0 + kInterruptCheckPeriod));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_FALSE(InterruptNow(t0 + kInterruptCheckPeriod * 1.5));
  EXPECT_EQ(calls.load(), 1);
  answer = 1;
  EXPECT_TRUE(InterruptNow(t0 + kInterruptCheckPeriod * 2));
  EXPECT_EQ(calls.load(), 2);
}

TEST_F(InterruptTest, InterruptedLastsUntilTheNextCall) {
  answer = 1;
  const MonoTime t0 = MonoNow();
  EXPECT_FALSE(InterruptNow(t0));
  EXPECT_TRUE(InterruptNow(t0 + kInterruptCheckPeriod));
  answer = 0;
  EXPECT_TRUE(Interrupted());
  EXPECT_TRUE(InterruptNow(t0 + kInterruptCheckPeriod));  // without asking again
  EXPECT_EQ(calls.load(), 1);
  ClearInterrupt();
  EXPECT_FALSE(Interrupted());
  EXPECT_FALSE(InterruptNow(t0 + kInterruptCheckPeriod * 3));  // a new period
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(InterruptTest, EachThreadHasItsOwn) {
  answer = 1;
  const MonoTime t0 = MonoNow();
  ASSERT_FALSE(InterruptNow(t0));
  ASSERT_TRUE(InterruptNow(t0 + kInterruptCheckPeriod));
  bool other = true;
  std::thread([&] { other = Interrupted(); }).join();
  EXPECT_FALSE(other);
  EXPECT_TRUE(Interrupted());
}

}  // namespace
}  // namespace hcomm
