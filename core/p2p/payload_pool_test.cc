#include "core/p2p/payload_pool.h"

#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace hcomm {
namespace {

TEST(PayloadPoolTest, BuffersHoldWhatWasAskedFor) {
  PayloadPool pool;
  for (size_t bytes : {0, 1, 4095, 4096, 4097, 40000, 65536, 65537, 200000}) {
    PayloadPool::Buffer b = pool.Take(bytes);
    ASSERT_NE(b.get(), nullptr) << bytes;
    memset(b.get(), 0x5a, bytes);
    if (bytes > 0) {
      EXPECT_EQ(b[bytes - 1], 0x5a) << bytes;
    }
  }
}

TEST(PayloadPoolTest, FreedBlockServesTheNextPayloadOfItsClass) {
  PayloadPool pool;
  char* first = nullptr;
  {
    PayloadPool::Buffer b = pool.Take(5000);  // the 8 KiB class
    first = b.get();
  }
  EXPECT_EQ(pool.KeptBytes(), 8u * 1024);
  {
    PayloadPool::Buffer other = pool.Take(20000);  // 32 KiB: not that block
    EXPECT_NE(other.get(), first);
    PayloadPool::Buffer same = pool.Take(8192);
    EXPECT_EQ(same.get(), first);
    EXPECT_EQ(pool.KeptBytes(), 0u);
  }
  EXPECT_EQ(pool.KeptBytes(), 40u * 1024);
}

TEST(PayloadPoolTest, SmallAndOversizedPayloadsAreNotKept) {
  PayloadPool pool;
  { PayloadPool::Buffer b = pool.Take(PayloadPool::kMinPooled - 1); }
  { PayloadPool::Buffer b = pool.Take(PayloadPool::kMaxPooled + 1); }
  EXPECT_EQ(pool.KeptBytes(), 0u);
}

TEST(PayloadPoolTest, KeepsAtMostItsLimitInAll) {
  PayloadPool pool;
  {
    std::vector<PayloadPool::Buffer> burst;
    const size_t n = 2 * PayloadPool::kKeepBytes / PayloadPool::kMaxPooled;
    for (size_t i = 0; i < n; ++i) burst.push_back(pool.Take(PayloadPool::kMaxPooled));
    for (size_t i = 0; i < n; ++i) burst.push_back(pool.Take(PayloadPool::kMinPooled));
  }
  EXPECT_EQ(pool.KeptBytes(), PayloadPool::kKeepBytes);
  // What is kept is handed out again.
  std::vector<PayloadPool::Buffer> again;
  for (size_t i = 0; i < PayloadPool::kKeepBytes / PayloadPool::kMaxPooled; ++i) {
    again.push_back(pool.Take(PayloadPool::kMaxPooled));
  }
  EXPECT_EQ(pool.KeptBytes(), 0u);
}

TEST(PayloadPoolTest, ThreadsTakeAndFreeConcurrently) {
  PayloadPool pool;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 2000; ++i) {
        const size_t bytes = 4096u << ((i + t) % 5);
        PayloadPool::Buffer b = pool.Take(bytes);
        b[0] = static_cast<char>(t);
        b[bytes - 1] = static_cast<char>(i);
        EXPECT_EQ(b[0], static_cast<char>(t));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_LE(pool.KeptBytes(), PayloadPool::kKeepBytes);
}

}  // namespace
}  // namespace hcomm
