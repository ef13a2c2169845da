#include "c_api/request_slots.h"

#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace hcomm_c {
namespace {

TEST(RequestSlotsTest, AFreedSlotWaitsBehindTheQuarantine) {
  RequestSlots& slots = RequestSlots::Get();
  hcomm_request_s* first = slots.Take();
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(first->live.load());
  EXPECT_TRUE(slots.Owns(first));
  ASSERT_TRUE(slots.Give(first));
  EXPECT_FALSE(first->live.load());
  EXPECT_FALSE(slots.Give(first)) << "a second free of one slot must be refused";
  EXPECT_TRUE(slots.Owns(first)) << "a freed slot is still this table's memory";
  // Taking and giving back one slot at a time: `first` comes back only once
  // more than kQuarantine slots were freed after it.
  size_t until_reuse = 0;
  for (size_t i = 0; i < 4 * RequestSlots::kQuarantine; ++i) {
    hcomm_request_s* s = slots.Take();
    ASSERT_NE(s, nullptr);
    const bool again = s == first;
    ASSERT_TRUE(slots.Give(s));
    if (again) {
      until_reuse = i;
      break;
    }
  }
  EXPECT_GE(until_reuse, RequestSlots::kQuarantine);
}

TEST(RequestSlotsTest, OwnsOnlyItsSlots) {
  RequestSlots& slots = RequestSlots::Get();
  hcomm_request_s* s = slots.Take();
  ASSERT_NE(s, nullptr);
  hcomm_request_s elsewhere;
  EXPECT_FALSE(slots.Owns(&elsewhere));
  EXPECT_FALSE(slots.Owns(nullptr));
  const char* inside = reinterpret_cast<const char*>(s) + 1;  // not a slot's start
  EXPECT_FALSE(slots.Owns(reinterpret_cast<const hcomm_request_s*>(inside)));
  ASSERT_TRUE(slots.Give(s));
}

TEST(RequestSlotsTest, ThreadsTakeDistinctSlotsAcrossNewSlabs) {
  RequestSlots& slots = RequestSlots::Get();
  constexpr int kThreads = 4;
  constexpr int kEach = 3000;  // 12000 live at once: several new slabs
  std::vector<std::vector<hcomm_request_s*>> taken(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) taken[t].push_back(slots.Take());
    });
  }
  for (auto& th : threads) th.join();
  std::set<hcomm_request_s*> distinct;
  for (auto& v : taken) {
    for (hcomm_request_s* s : v) {
      ASSERT_NE(s, nullptr);
      EXPECT_TRUE(slots.Owns(s));
      distinct.insert(s);
    }
  }
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kThreads * kEach));
  threads.clear();
  std::vector<int> refused(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    // Every thread frees every slot: each slot is given back exactly once.
    threads.emplace_back([&, t] {
      for (auto& v : taken) {
        for (hcomm_request_s* s : v) refused[t] += slots.Give(s) ? 0 : 1;
      }
    });
  }
  for (auto& th : threads) th.join();
  int total_refused = 0;
  for (int r : refused) total_refused += r;
  EXPECT_EQ(total_refused, (kThreads - 1) * kThreads * kEach);
}

}  // namespace
}  // namespace hcomm_c
