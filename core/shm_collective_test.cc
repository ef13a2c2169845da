#include "core/shm_collective.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

std::string UniqueName() {
  static std::atomic<int> n{0};
  return absl::StrCat("/hcomm-test-", getpid(), "-", n.fetch_add(1));
}

bool NameExists(const std::string& name) {
  struct stat st;
  return stat(absl::StrCat("/dev/shm", name).c_str(), &st) == 0;
}

// Records what the collective asked of its waiter; fails the wait after
// `give_up_after` calls of StillWaiting (0: never).
class TestWaiter : public ShmWaiter {
 public:
  explicit TestWaiter(int give_up_after = 0) : give_up_after_(give_up_after) {}
  absl::Status StillWaiting(const std::vector<int>& missing, const char* phase) override {
    last_missing = missing;
    last_phase = phase;
    if (give_up_after_ > 0 && ++calls_ >= give_up_after_) return Timeout("gave up");
    return absl::OkStatus();
  }
  absl::Status Clash(int rank, uint64_t their_fp) override {
    clash_rank = rank;
    clash_fp = their_fp;
    return Mismatch("clash");
  }
  bool ShareCpu() const override { return true; }  // the test's ranks share 2 cores

  std::vector<int> last_missing;
  std::string last_phase;
  int clash_rank = -1;
  uint64_t clash_fp = 0;

 private:
  int give_up_after_;
  int calls_ = 0;
};

// Maps one segment for `n` thread ranks (rank 0 creates, the rest open,
// then the name goes).
std::vector<std::unique_ptr<ShmCollective>> MapAll(int n) {
  const std::string name = UniqueName();
  std::vector<std::unique_ptr<ShmCollective>> all;
  auto created = ShmCollective::Create(name, 0, n);
  EXPECT_TRUE(created.ok()) << created.status();
  all.push_back(std::move(created).value());
  for (int r = 1; r < n; ++r) {
    auto opened = ShmCollective::Open(name, r, n);
    EXPECT_TRUE(opened.ok()) << opened.status();
    all.push_back(std::move(opened).value());
  }
  all[0]->Unlink();
  EXPECT_FALSE(NameExists(name));
  return all;
}

// Every count class: inline (<= 24 bytes), small slots, several rounds of
// the large path with slices that do not divide evenly.
TEST(ShmCollectiveTest, AllReduceEveryPathAndOp) {
  for (int n : {2, 3, 5}) {
    auto segs = MapAll(n);
    const std::vector<size_t> counts = {1, 5, 7, 1000, 2048, 300001};
    std::vector<std::thread> threads;
    std::vector<std::string> errors(n);
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        TestWaiter w;
        uint64_t seq = 0;
        for (size_t count : counts) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
            for (bool in_place : {false, true}) {
              std::vector<float> in(count), out(count, -1.0f);
              for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i % 97) + r);
              float* dst = in_place ? in.data() : out.data();
              segs[r]->Enter(seq, 42);
              absl::Status s = segs[r]->AllReduce(in.data(), dst, count, DataType::kFloat32, op,
                                                  seq, 42, w);
              ++seq;
              if (!s.ok()) {
                errors[r] = s.ToString();
                return;
              }
              for (size_t i = 0; i < count; ++i) {
                const float base = static_cast<float>(i % 97);
                float want = op == ReduceOp::kMax ? base + (n - 1)
                                                  : base * n + n * (n - 1) / 2.0f;
                if (op == ReduceOp::kAvg) want /= n;
                if (dst[i] != want) {
                  errors[r] = absl::StrCat("n=", n, " count=", count, " op=", ReduceOpName(op),
                                           " in_place=", in_place, " [", i, "] = ", dst[i],
                                           ", want ", want);
                  return;
                }
              }
            }
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

TEST(ShmCollectiveTest, AnotherCollectiveUnderTheSameSequenceIsAClash) {
  auto segs = MapAll(2);
  // Rank 1 is in another collective (fingerprint 7) at sequence 3 and never
  // arrives; rank 0 must notice instead of waiting out its timeout.
  segs[1]->Enter(3, 7);
  segs[0]->Enter(3, 42);
  TestWaiter w(/*give_up_after=*/5000);
  float v = 1;
  absl::Status s = segs[0]->AllReduce(&v, &v, 1, DataType::kFloat32, ReduceOp::kSum, 3, 42, w);
  EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << s;
  EXPECT_EQ(w.clash_rank, 1);
  EXPECT_EQ(w.clash_fp, 7u);
}

TEST(ShmCollectiveTest, AWaitEndsWhenTheWaiterSaysSoAndNamesWhoIsMissing) {
  auto segs = MapAll(3);
  segs[0]->Enter(0, 42);
  segs[2]->Enter(0, 42);
  TestWaiter w(/*give_up_after=*/3);
  std::vector<double> v(5000, 1.0), v2(5000, 1.0);  // large path: arrive, then reduce
  std::thread other([&] {
    TestWaiter patient(/*give_up_after=*/3);
    segs[2]
        ->AllReduce(v2.data(), v2.data(), v2.size(), DataType::kFloat64, ReduceOp::kSum, 0, 42,
                    patient)
        .IgnoreError();
  });
  absl::Status s =
      segs[0]->AllReduce(v.data(), v.data(), v.size(), DataType::kFloat64, ReduceOp::kSum, 0, 42,
                         w);
  other.join();
  EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
  EXPECT_EQ(w.last_missing, std::vector<int>{1});
  EXPECT_EQ(w.last_phase, "arrive");
}

TEST(ShmCollectiveTest, OpenRefusesAMissingOrDifferentSegment) {
  EXPECT_FALSE(ShmCollective::Open(UniqueName(), 1, 2).ok());
  const std::string name = UniqueName();
  auto created = ShmCollective::Create(name, 0, 4);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE(ShmCollective::Open(name, 1, 2).ok());  // sized for 4 ranks
  EXPECT_FALSE(ShmCollective::Create(name, 0, 4).ok());  // exists
  (*created)->Unlink();
  EXPECT_FALSE(NameExists(name));
}

}  // namespace
}  // namespace hcomm
