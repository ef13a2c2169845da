#include "algorithms/collective.h"

#include <string>
#include <utility>
#include <vector>

#include "core/p2p/request.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

TEST(RingOrderByPlacementTest, PutsRanksSharingCpusSideBySide) {
  // hcomm_run pins 4 ranks round robin to 2 CPUs.
  EXPECT_EQ(RingOrderByPlacement({"h 0", "h 1", "h 0", "h 1"}), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(RingOrderByPlacement({"h 0", "h 1", "h 0", "h 1", "h 0"}),
            (std::vector<int>{0, 2, 4, 1, 3}));
  // Groups in the order of their lowest rank, whatever the strings say.
  EXPECT_EQ(RingOrderByPlacement({"h 5", "h 2", "h 5", "h 2", "h 7"}),
            (std::vector<int>{0, 2, 1, 3, 4}));
  // Hosts are part of the placement: CPU 0 of two hosts is not shared.
  EXPECT_EQ(RingOrderByPlacement({"a 0", "b 0", "a 0", "b 0"}), (std::vector<int>{0, 2, 1, 3}));
}

TEST(RingOrderByPlacementTest, EmptyWhereTheRankOrderAlreadyIsThatOrder) {
  EXPECT_TRUE(RingOrderByPlacement({}).empty());
  EXPECT_TRUE(RingOrderByPlacement({"h 0"}).empty());
  // Every rank a CPU of its own.
  EXPECT_TRUE(RingOrderByPlacement({"h 0", "h 1", "h 2", "h 3"}).empty());
  // All free to use the same CPUs.
  EXPECT_TRUE(RingOrderByPlacement({"h 0,1", "h 0,1", "h 0,1"}).empty());
  // Already grouped (hcomm_run --bind-to with blocks of ranks).
  EXPECT_TRUE(RingOrderByPlacement({"h 0", "h 0", "h 1", "h 1"}).empty());
}

// Records what an algorithm asks of its peers.
class RecordingPeers : public Peers {
 public:
  RecordingPeers(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::StatusOr<std::shared_ptr<Request>> Isend(const void*, size_t, int peer) override {
    calls.push_back("isend " + std::to_string(peer));
    return std::make_shared<Request>();
  }
  absl::StatusOr<std::shared_ptr<Request>> Irecv(void*, size_t, int peer) override {
    calls.push_back("irecv " + std::to_string(peer));
    return std::make_shared<Request>();
  }
  absl::Status Wait(Request*) override { return absl::OkStatus(); }
  bool SendNow(const void*, size_t, int peer) override {
    calls.push_back("sendnow " + std::to_string(peer));
    return true;
  }
  bool RecvNow(void*, size_t, int peer) override {
    calls.push_back("recvnow " + std::to_string(peer));
    return false;
  }
  char* Scratch(int slot, size_t) override {
    calls.push_back("scratch " + std::to_string(slot));
    return scratch_;
  }
  void Withdraw(const std::shared_ptr<Request>&) override { calls.push_back("withdraw"); }

  std::vector<std::string> calls;

 private:
  int rank_, size_;
  char scratch_[8] = {};
};

TEST(ReorderedPeersTest, NumbersRanksByTheirPlaceInTheOrder) {
  RecordingPeers base(/*rank=*/1, /*size=*/4);
  ReorderedPeers p(base, {0, 2, 1, 3});
  EXPECT_EQ(p.rank(), 2);  // rank 1 is third in the order
  EXPECT_EQ(p.size(), 4);
  char buf[4] = {};
  ASSERT_TRUE(p.Isend(buf, 4, 1).ok());   // place 1 is rank 2
  ASSERT_TRUE(p.Irecv(buf, 4, 3).ok());   // place 3 is rank 3
  EXPECT_TRUE(p.SendNow(buf, 4, 0));      // place 0 is rank 0
  EXPECT_FALSE(p.RecvNow(buf, 4, 2));     // place 2 is rank 1
  EXPECT_EQ(p.Scratch(3, 8), base.Scratch(3, 8));
  p.Withdraw(nullptr);
  EXPECT_EQ(base.calls, (std::vector<std::string>{"isend 2", "irecv 3", "sendnow 0", "recvnow 1",
                                                  "scratch 3", "scratch 3", "withdraw"}));
}

}  // namespace
}  // namespace hcomm
