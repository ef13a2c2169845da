#include "algorithms/shm_collective.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/fence.h"
#include "core/base/status.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

std::string UniqueName() {
  static std::atomic<int> n{0};
  // Bazel's sandbox gives each test (and shard) its own pid namespace, so
  // shards run side by side may share a pid but never this random word.
  static const uint32_t word = std::random_device{}();
  return absl::StrCat("/hcomm-test-", getpid(), "x", absl::Hex(word), "-", n.fetch_add(1));
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
  // The test's ranks share 2 cores; false takes the paths of ranks with
  // CPUs of their own.
  bool ShareCpu() const override { return share_cpu; }
  // Aborted from the `interrupt_at`-th call on (0: never).
  absl::Status Interrupted() override {
    ++interrupted_calls;
    if (interrupt_at > 0 && interrupted_calls >= interrupt_at) return Aborted("interrupted");
    return absl::OkStatus();
  }

  bool share_cpu = true;
  int interrupt_at = 0;
  int interrupted_calls = 0;
  std::vector<int> last_missing;
  std::string last_phase;
  int clash_rank = -1;
  uint64_t clash_fp = 0;

 private:
  int give_up_after_;
  int calls_ = 0;
};

// The slots' size MapAll asks for: the data-path tests run with whole
// slots and with the smallest that a short /dev/shm leaves (every round,
// piece and place computed from the segment's own size).
size_t g_slot_bytes = ShmCollective::kSlotBytes;

class ShmCollectiveSlotTest : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override { g_slot_bytes = GetParam(); }
  void TearDown() override { g_slot_bytes = ShmCollective::kSlotBytes; }
};

// Maps one segment for `n` thread ranks (rank 0 creates, the rest open,
// then the name goes).
std::vector<std::unique_ptr<ShmCollective>> MapAll(int n) {
  const std::string name = UniqueName();
  std::vector<std::unique_ptr<ShmCollective>> all;
  auto created = ShmCollective::Create(name, 0, n, g_slot_bytes);
  EXPECT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)->slot_bytes(), g_slot_bytes);
  all.push_back(std::move(created).value());
  for (int r = 1; r < n; ++r) {
    auto opened = ShmCollective::Open(name, r, n);
    EXPECT_TRUE(opened.ok()) << opened.status();
    EXPECT_EQ((*opened)->slot_bytes(), g_slot_bytes);  // read from the segment
    all.push_back(std::move(opened).value());
  }
  all[0]->Unlink();
  EXPECT_FALSE(NameExists(name));
  return all;
}

// Every count class: inline (<= 24 bytes), small slots, several rounds of
// the large path with slices that do not divide evenly; `share`: as ranks
// that share CPUs, or as ranks with CPUs of their own; every write into the
// segment with `method`.
void CheckAllReduce(int n, bool share, CopyChooser::Method method) {
  auto segs = MapAll(n);
  const std::vector<size_t> counts = {1, 5, 7, 1000, 2048, 300001};
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      TestWaiter w;
      w.share_cpu = share;
      segs[r]->ForceCopyMethod(method);
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
                errors[r] = absl::StrCat("n=", n, " share=", share, " method=", method,
                                         " count=", count,
                                         " op=", ReduceOpName(op), " in_place=", in_place,
                                         " [", i, "] = ", dst[i], ", want ", want);
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

TEST_P(ShmCollectiveSlotTest, AllReduceEveryPathAndOp) {
  for (int n : {2, 3, 5}) {
    for (bool share : {true, false}) {
      for (auto m : {CopyChooser::kMemcpy, CopyChooser::kStream}) CheckAllReduce(n, share, m);
    }
  }
}

// Unforced, each rank picks its method per call (and tries the other one
// every few calls, on its own): the results stay exact over enough calls
// of one size for both methods, mixed between ranks, and with ranks that
// share CPUs or not. Declared here, defined after OnRanks.
void CheckChosenMethods(int n, bool share);

TEST_P(ShmCollectiveSlotTest, AllReduceExactWhileEachRankChoosesItsMethod) {
  for (int n : {2, 3}) {
    for (bool share : {true, false}) CheckChosenMethods(n, share);
  }
}

// Runs `body(rank, segment, waiter)` on n thread ranks over one segment;
// the first error of each rank (a non-empty string) fails the test.
void OnRanks(int n, const std::function<std::string(int, ShmCollective&, ShmWaiter&)>& body,
             bool share_cpu = true) {
  auto segs = MapAll(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      TestWaiter w;
      w.share_cpu = share_cpu;
      errors[r] = body(r, *segs[r], w);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "n=" << n << " rank " << r;
}

void CheckChosenMethods(int n, bool share) {
  OnRanks(
      n,
      [n](int r, ShmCollective& sc, ShmWaiter& w) -> std::string {
        const size_t count = 200001;  // several rounds
        std::vector<float> in(count), out(count);
        for (uint64_t seq = 0; seq < 3 * CopyChooser::kMinInterval; ++seq) {
          for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i + seq) % 89 + r);
          sc.Enter(seq, 7);
          absl::Status s = sc.AllReduce(in.data(), out.data(), count, DataType::kFloat32,
                                        ReduceOp::kSum, seq, 7, w);
          if (!s.ok()) return s.ToString();
          for (size_t i = 0; i < count; ++i) {
            const float want = static_cast<float>((i + seq) % 89) * n + n * (n - 1) / 2.0f;
            if (out[i] != want) {
              return absl::StrCat("call ", seq, " [", i, "] = ", out[i], ", want ", want);
            }
          }
        }
        return "";
      },
      share);
}

// Byte i of rank r's block j.
unsigned char Pattern(int r, int j, size_t i) {
  return static_cast<unsigned char>(i * 7 + static_cast<size_t>(r) * 31 + j * 101 + 1);
}

// First index where `got` differs from want(i), or "".
std::string FirstWrong(const char* what, const unsigned char* got, size_t len,
                       const std::function<unsigned char(size_t)>& want) {
  for (size_t i = 0; i < len; ++i) {
    if (got[i] != want(i)) {
      return absl::StrCat(what, ": [", i, "] = ", got[i], ", want ", want(i));
    }
  }
  return "";
}

// Block sizes: inline (<= 20 bytes), slot, and several rounds with a
// remainder (for alltoall and scatter, rounds of 1 MiB / n per block).
const size_t kBlockBytes[] = {1, 20, 21, 1000, 300001, (1u << 20) + 3};

// Rank r's allgather of `bytes` (its block holds Pattern(r, 0, i) + salt),
// in or out of place, under sequence number seq++ and fingerprint fp,
// checked on every block: "" or what went wrong (suffixed with `at`).
std::string CheckAllGather(int r, int n, ShmCollective& sc, ShmWaiter& w, size_t bytes,
                           bool in_place, uint64_t& seq, uint64_t fp, const std::string& at,
                           unsigned char salt = 0) {
  std::vector<unsigned char> mine(bytes), all(n * bytes, 0xee);
  for (size_t i = 0; i < bytes; ++i) mine[i] = Pattern(r, 0, i) + salt;
  const void* in = mine.data();
  if (in_place) {
    memcpy(all.data() + r * bytes, mine.data(), bytes);
    in = all.data();
  }
  sc.Enter(seq, fp);
  absl::Status s = sc.AllGather(in, all.data(), bytes, seq++, fp, w);
  if (!s.ok()) return s.ToString() + at;
  for (int j = 0; j < n; ++j) {
    std::string e = FirstWrong(absl::StrCat("allgather block ", j, at).c_str(),
                               all.data() + j * bytes, bytes,
                               [&](size_t i) -> unsigned char { return Pattern(j, 0, i) + salt; });
    if (!e.empty()) return e;
  }
  return "";
}

// The same for alltoall of `bytes` per block: block j of rank r's input
// goes to block r of rank j's output.
std::string CheckAllToAll(int r, int n, ShmCollective& sc, ShmWaiter& w, size_t bytes,
                          bool in_place, uint64_t& seq, uint64_t fp, const std::string& at,
                          unsigned char salt = 0) {
  std::vector<unsigned char> send(n * bytes), recv(n * bytes, 0xee);
  for (size_t k = 0; k < send.size(); ++k) send[k] = Pattern(r, k / bytes, k % bytes) + salt;
  unsigned char* out = in_place ? send.data() : recv.data();
  sc.Enter(seq, fp);
  absl::Status s = sc.AllToAll(send.data(), out, bytes, seq++, fp, w);
  if (!s.ok()) return s.ToString() + at;
  for (int j = 0; j < n; ++j) {
    std::string e = FirstWrong(absl::StrCat("alltoall block ", j, at).c_str(), out + j * bytes,
                               bytes,
                               [&](size_t i) -> unsigned char { return Pattern(j, r, i) + salt; });
    if (!e.empty()) return e;
  }
  return "";
}

TEST_P(ShmCollectiveSlotTest, BroadcastGatherAndScatterFromEveryRoot) {
  for (int n : {2, 3, 5}) {
    for (auto m : {CopyChooser::kMemcpy, CopyChooser::kStream}) {
    OnRanks(n, [n, m](int r, ShmCollective& sc, ShmWaiter& w) -> std::string {
      sc.ForceCopyMethod(m);
      uint64_t seq = 0;
      for (size_t bytes : kBlockBytes) {
        for (int root : {0, n - 1}) {
          const std::string at = absl::StrCat(" bytes=", bytes, " root=", root, " method=", m);
          // Broadcast.
          std::vector<unsigned char> buf(bytes, 0xee);
          if (r == root) {
            for (size_t i = 0; i < bytes; ++i) buf[i] = Pattern(root, 0, i);
          }
          sc.Enter(seq, 11);
          absl::Status s = sc.Broadcast(buf.data(), bytes, root, seq++, 11, w);
          if (!s.ok()) return s.ToString() + at;
          std::string e = FirstWrong(("broadcast" + at).c_str(), buf.data(), bytes,
                                     [&](size_t i) { return Pattern(root, 0, i); });
          if (!e.empty()) return e;
          // Gather, in place at the root on every other size; NULL output
          // elsewhere.
          for (bool in_place : {false, true}) {
            std::vector<unsigned char> mine(bytes), all(r == root ? n * bytes : 0, 0xee);
            for (size_t i = 0; i < bytes; ++i) mine[i] = Pattern(r, 0, i);
            const void* in = mine.data();
            if (r == root && in_place) {
              memcpy(all.data() + r * bytes, mine.data(), bytes);
              in = all.data();
            }
            sc.Enter(seq, 12);
            s = sc.Gather(in, r == root ? all.data() : nullptr, bytes, root, seq++, 12, w);
            if (!s.ok()) return s.ToString() + at;
            if (r == root) {
              for (int j = 0; j < n; ++j) {
                e = FirstWrong(absl::StrCat("gather block ", j, " in_place ", in_place, at).c_str(),
                               all.data() + j * bytes, bytes,
                               [&](size_t i) { return Pattern(j, 0, i); });
                if (!e.empty()) return e;
              }
            }
          }
          // Scatter, in place at the root on the second pass; NULL input
          // elsewhere.
          for (bool in_place : {false, true}) {
            std::vector<unsigned char> blocks(r == root ? n * bytes : 0), got(bytes, 0xee);
            for (size_t k = 0; k < blocks.size(); ++k) {
              blocks[k] = Pattern(root, static_cast<int>(k / bytes), k % bytes);
            }
            void* out = r == root && in_place ? blocks.data() : got.data();
            sc.Enter(seq, 13);
            s = sc.Scatter(r == root ? blocks.data() : nullptr, out, bytes, root, seq++, 13, w);
            if (!s.ok()) return s.ToString() + at;
            const unsigned char* mine =
                r == root && in_place ? blocks.data() + r * bytes : got.data();
            e = FirstWrong(absl::StrCat("scatter in_place ", in_place, at).c_str(), mine, bytes,
                           [&](size_t i) { return Pattern(root, r, i); });
            if (!e.empty()) return e;
          }
        }
      }
      return "";
    });
    }
  }
}

TEST_P(ShmCollectiveSlotTest, AllGatherAndAllToAllInAndOutOfPlace) {
  for (int n : {2, 3, 5}) {
    for (auto m : {CopyChooser::kMemcpy, CopyChooser::kStream}) {
    OnRanks(n, [n, m](int r, ShmCollective& sc, ShmWaiter& w) -> std::string {
      sc.ForceCopyMethod(m);
      uint64_t seq = 0;
      for (size_t bytes : kBlockBytes) {
        for (bool in_place : {false, true}) {
          const std::string at =
              absl::StrCat(" bytes=", bytes, " in_place=", in_place, " method=", m);
          std::string e = CheckAllGather(r, n, sc, w, bytes, in_place, seq, 21, at);
          if (e.empty()) e = CheckAllToAll(r, n, sc, w, bytes, in_place, seq, 22, at);
          if (!e.empty()) return e;
        }
      }
      return "";
    });
    }
  }
}

TEST_P(ShmCollectiveSlotTest, ReduceAndReduceScatterEveryPath) {
  for (int n : {2, 3, 5}) {
    for (bool share : {true, false}) {
      for (auto m : {CopyChooser::kMemcpy, CopyChooser::kStream}) {
      OnRanks(n, [n, share, m](int r, ShmCollective& sc, ShmWaiter& w) -> std::string {
        sc.ForceCopyMethod(m);
        uint64_t seq = 0;
        // Inline, slot, and large path (several rounds) counts of float32.
        for (size_t count : {size_t{1}, size_t{5}, size_t{7}, size_t{2048}, size_t{300001}}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
            auto want = [&](size_t i, int block) {
              const float base = static_cast<float>((i % 97) + block);
              float v = op == ReduceOp::kMax ? base + (n - 1) : base * n + n * (n - 1) / 2.0f;
              return op == ReduceOp::kAvg ? v / n : v;
            };
            const std::string at = absl::StrCat(" share=", share, " method=", m, " count=", count,
                                                " op=", ReduceOpName(op));
            // Reduce to the last rank, NULL output elsewhere.
            const int root = n - 1;
            std::vector<float> in(count), out(r == root ? count : 0, -1.0f);
            for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i % 97) + r);
            sc.Enter(seq, 31);
            absl::Status s = sc.Reduce(in.data(), r == root ? out.data() : nullptr, count,
                                       DataType::kFloat32, op, root, seq++, 31, w);
            if (!s.ok()) return s.ToString() + at;
            for (size_t i = 0; r == root && i < count; ++i) {
              if (out[i] != want(i, 0)) {
                return absl::StrCat("reduce", at, " [", i, "] = ", out[i], ", want ", want(i, 0));
              }
            }
            // Reduce-scatter: block j of rank q's input holds (i % 97) + q + j.
            for (bool in_place : {false, true}) {
              std::vector<float> all(n * count), mine(count, -1.0f);
              for (size_t k = 0; k < all.size(); ++k) {
                all[k] = static_cast<float>((k % count) % 97 + r + k / count);
              }
              float* dst = in_place ? all.data() : mine.data();
              sc.Enter(seq, 32);
              s = sc.ReduceScatter(all.data(), dst, count, DataType::kFloat32, op, seq++, 32, w);
              if (!s.ok()) return s.ToString() + at;
              for (size_t i = 0; i < count; ++i) {
                // Every rank adds its rank to block r: the sum over q of
                // (i % 97) + q + r.
                const float base = static_cast<float>(i % 97 + r);
                float v = op == ReduceOp::kMax ? base + (n - 1) : base * n + n * (n - 1) / 2.0f;
                if (op == ReduceOp::kAvg) v /= n;
                if (dst[i] != v) {
                  return absl::StrCat("reduce_scatter", at, " in_place=", in_place, " [", i,
                                      "] = ", dst[i], ", want ", v);
                }
              }
            }
          }
        }
        return "";
      }, share);
      }
    }
  }
}

// Outputs large enough to be written around the caches: with streamed
// writes into the segment, the slice is reduced in scratch memory.
TEST_P(ShmCollectiveSlotTest, LargeReductionsWithEitherCopyMethod) {
  constexpr size_t kCount = (9u << 20) / sizeof(float) + 3;  // 9 MiB + 12 B per rank
  for (int n : {2, 3}) {
    for (auto m : {CopyChooser::kMemcpy, CopyChooser::kStream}) {
      OnRanks(n, [n, m](int r, ShmCollective& sc, ShmWaiter& w) -> std::string {
        sc.ForceCopyMethod(m);
        const std::string at = absl::StrCat(" n=", n, " method=", m);
        const float sum = static_cast<float>(n * (n - 1) / 2);
        uint64_t seq = 0;
        for (bool in_place : {false, true}) {
          std::vector<float> in(kCount), out(kCount, -1.0f);
          for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>((i % 1001) + r);
          float* dst = in_place ? in.data() : out.data();
          sc.Enter(seq, 61);
          absl::Status s = sc.AllReduce(in.data(), dst, kCount, DataType::kFloat32,
                                        ReduceOp::kSum, seq++, 61, w);
          if (!s.ok()) return s.ToString() + at;
          for (size_t i = 0; i < kCount; ++i) {
            const float want = static_cast<float>(i % 1001) * n + sum;
            if (dst[i] != want) {
              return absl::StrCat("allreduce", at, " in_place=", in_place, " [", i,
                                  "] = ", dst[i], ", want ", want);
            }
          }
        }
        const int root = n - 1;
        std::vector<float> in(kCount), out(r == root ? kCount : 0, -1.0f);
        for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>((i % 1001) + r);
        sc.Enter(seq, 62);
        absl::Status s = sc.Reduce(in.data(), r == root ? out.data() : nullptr, kCount,
                                   DataType::kFloat32, ReduceOp::kSum, root, seq++, 62, w);
        if (!s.ok()) return s.ToString() + at;
        for (size_t i = 0; r == root && i < kCount; ++i) {
          const float want = static_cast<float>(i % 1001) * n + sum;
          if (out[i] != want) return absl::StrCat("reduce", at, " [", i, "] = ", out[i]);
        }
        return "";
      });
    }
  }
}

// Calls that move more than the caches hold (n times the bytes a rank
// reads and writes past 32 MiB): outputs are streamed around the caches,
// a rank's own block too, and reduce-scatter reduces each piece in private
// memory first. Block sizes end in a part of a cache line.
TEST_P(ShmCollectiveSlotTest, LargeGathersAndReduceScatterStreamTheirOutputs) {
  constexpr size_t kPast = 40u << 20;
  for (int n : {2, 3}) {
    for (auto m : {CopyChooser::kMemcpy, CopyChooser::kStream}) {
      OnRanks(n, [n, m](int r, ShmCollective& sc, ShmWaiter& w) -> std::string {
        sc.ForceCopyMethod(m);
        uint64_t seq = 0;
        for (bool in_place : {false, true}) {
          const std::string at = absl::StrCat(" n=", n, " method=", m, " in_place=", in_place);
          // Allgather: a rank reads its block and writes n of them;
          // alltoall: n blocks in, n out.
          std::string e =
              CheckAllGather(r, n, sc, w, kPast / (n * (n + 1)) + 4099, in_place, seq, 71, at);
          if (e.empty()) {
            e = CheckAllToAll(r, n, sc, w, kPast / (2 * n * n) + 4099, in_place, seq, 72, at);
          }
          if (!e.empty()) return e;
          // Reduce-scatter: n blocks in, one out; block j of rank q's
          // input holds (i % 1001) + q + j.
          const size_t count = kPast / (n * (n + 1)) / sizeof(float) + 3;
          std::vector<float> blocks(n * count), block(count, -1.0f);
          for (size_t k = 0; k < blocks.size(); ++k) {
            blocks[k] = static_cast<float>((k % count) % 1001 + r + k / count);
          }
          float* dst = in_place ? blocks.data() : block.data();
          sc.Enter(seq, 73);
          absl::Status s = sc.ReduceScatter(blocks.data(), dst, count, DataType::kFloat32,
                                            ReduceOp::kSum, seq++, 73, w);
          if (!s.ok()) return s.ToString() + at;
          for (size_t i = 0; i < count; ++i) {
            const float want = static_cast<float>((i % 1001 + r) * n + n * (n - 1) / 2);
            if (dst[i] != want) {
              return absl::StrCat("reduce_scatter", at, " [", i, "] = ", dst[i], ", want ",
                                  want);
            }
          }
        }
        return "";
      });
    }
  }
}

// Rounds of 16 KiB to a quarter slot take a new place in their buffers
// each time (ShmCollective::Offset), places of one size cycling and places
// of different sizes overlapping those of earlier calls (and the fixed
// place of 512 KiB rounds). Calls of the sizes in turn, each call's data
// its own (so that what an earlier call left in some place cannot pass
// for it), for more rounds than the smallest size has places: every rank
// must read each round where it was written, and only once every rank is
// done with what was there before.
TEST_P(ShmCollectiveSlotTest, RoundsMovingThroughTheSlotsKeepEachCallsData) {
  const size_t kSizes[] = {16 << 10, (100 << 10) + 12, 200000, 256 << 10, 512 << 10};
  for (int n : {2, 3}) {
    OnRanks(n, [n, &kSizes](int r, ShmCollective& sc, ShmWaiter& w) -> std::string {
      uint64_t seq = 0;
      for (int c = 0; c < 140; ++c) {
        const size_t bytes = kSizes[c % 5], count = bytes / sizeof(float);
        const std::string at = absl::StrCat(" n=", n, " call=", c, " bytes=", bytes);
        const auto salt = static_cast<unsigned char>(c);
        std::string e = CheckAllGather(r, n, sc, w, bytes, false, seq, 81, at, salt);
        if (e.empty()) {
          e = CheckAllToAll(r, n, sc, w, count / n * sizeof(float), false, seq, 83, at, salt);
        }
        if (!e.empty()) return e;
        // Allreduce, in place: rank q's vector holds (i % 97) + q + c.
        std::vector<float> v(count);
        for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(i % 97 + r + c);
        sc.Enter(seq, 82);
        absl::Status s = sc.AllReduce(v.data(), v.data(), count, DataType::kFloat32,
                                      ReduceOp::kSum, seq++, 82, w);
        if (!s.ok()) return s.ToString() + at;
        for (size_t i = 0; i < count; ++i) {
          const float want = static_cast<float>((i % 97 + c) * n + n * (n - 1) / 2);
          if (v[i] != want) {
            return absl::StrCat("allreduce", at, " [", i, "] = ", v[i], ", want ", want);
          }
        }
      }
      return "";
    });
  }
}

// 16-bit floats accumulate in float32 and round once: 1024 + 0.5 + 0.5 is
// 1025 in float16 (each partial sum rounded would stay 1024), 1024 + 4 + 4
// is 1032 in bfloat16; kAvg divides before rounding.
TEST_P(ShmCollectiveSlotTest, HalfTypesAccumulateInFloat32) {
  constexpr int kN = 3;
  for (auto m : {CopyChooser::kMemcpy, CopyChooser::kStream}) {
  OnRanks(kN, [m](int r, ShmCollective& sc, ShmWaiter& w) -> std::string {
    sc.ForceCopyMethod(m);
    uint64_t seq = 0;
    for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
      const float small = t == DataType::kFloat16 ? 0.5f : 4.0f;
      auto enc = [t](float f) {
        return t == DataType::kFloat16 ? FloatToHalf(f) : FloatToBFloat16(f);
      };
      const uint16_t mine = enc(r == 0 ? 1024.0f : small);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        const float total = 1024.0f + 2 * small;
        const uint16_t want = enc(op == ReduceOp::kAvg ? total / kN : total);
        // Inline, slot, and the large path over several rounds.
        for (size_t count : {size_t{5}, size_t{1000}, size_t{700001}}) {
          const std::string at = absl::StrCat(" ", DataTypeName(t), " ", ReduceOpName(op),
                                              " count=", count, " method=", m);
          std::vector<uint16_t> in(count, mine), out(count, 0);
          sc.Enter(seq, 51);
          absl::Status s = sc.AllReduce(in.data(), out.data(), count, t, op, seq++, 51, w);
          if (!s.ok()) return s.ToString() + at;
          for (size_t i = 0; i < count; ++i) {
            if (out[i] != want) return absl::StrCat("allreduce", at, " [", i, "] = ", out[i]);
          }
          // In place (every rank's slice is reduced into its own input).
          std::vector<uint16_t> inout(count, mine);
          sc.Enter(seq, 54);
          s = sc.AllReduce(inout.data(), inout.data(), count, t, op, seq++, 54, w);
          if (!s.ok()) return s.ToString() + at;
          for (size_t i = 0; i < count; ++i) {
            if (inout[i] != want) {
              return absl::StrCat("allreduce in place", at, " [", i, "] = ", inout[i]);
            }
          }
          std::fill(out.begin(), out.end(), 0);
          sc.Enter(seq, 52);
          s = sc.Reduce(in.data(), r == 1 ? out.data() : nullptr, count, t, op, 1, seq++, 52, w);
          if (!s.ok()) return s.ToString() + at;
          for (size_t i = 0; r == 1 && i < count; ++i) {
            if (out[i] != want) return absl::StrCat("reduce", at, " [", i, "] = ", out[i]);
          }
          std::vector<uint16_t> all(kN * count, mine);
          sc.Enter(seq, 53);
          s = sc.ReduceScatter(all.data(), out.data(), count, t, op, seq++, 53, w);
          if (!s.ok()) return s.ToString() + at;
          for (size_t i = 0; i < count; ++i) {
            if (out[i] != want) return absl::StrCat("reduce_scatter", at, " [", i, "] = ", out[i]);
          }
        }
      }
    }
    return "";
  });
  }
}

// Element i of rank r's input for an allreduce of type t: values every
// operation keeps finite (16-bit floats in [1, 2)), different per rank.
void FillFor(DataType t, int r, void* buf, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t v = static_cast<uint32_t>(i * 7 + static_cast<size_t>(r) * 13);
    switch (t) {
      case DataType::kFloat32:
        static_cast<float*>(buf)[i] = static_cast<float>(v % 97 + 1);
        break;
      case DataType::kFloat64:
        static_cast<double*>(buf)[i] = (v % 89) * 0.25 + 1;
        break;
      case DataType::kFloat16:
        static_cast<uint16_t*>(buf)[i] = 0x3C00 | (v & 0x3FF);
        break;
      case DataType::kBFloat16:
        static_cast<uint16_t*>(buf)[i] = 0x3F80 | (v & 0x7F);
        break;
      case DataType::kInt32:
        static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v * 2654435761u);
        break;
      case DataType::kInt8:
        static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v * 37);
        break;
      default:
        memset(static_cast<char*>(buf) + i * DataTypeSize(t), static_cast<int>(v),
               DataTypeSize(t));
    }
  }
}

// Rank r's allreduce of `count` elements of t, by cross-memory attach or
// through the slots, in or out of place, under sequence number seq++: its
// output, or the error in `err`.
std::vector<char> AllReduceBy(ShmCollective& sc, ShmWaiter& w, int r, bool cma, DataType t,
                              ReduceOp op, size_t count, bool in_place, uint64_t& seq,
                              std::string& err) {
  const size_t bytes = count * DataTypeSize(t);
  std::vector<char> in(bytes), out(bytes, 0x5a);
  FillFor(t, r, in.data(), count);
  sc.EnableCma(cma);
  sc.Enter(seq, 61);
  absl::Status s = sc.AllReduce(in.data(), in_place ? in.data() : out.data(), count, t, op, seq++,
                                61, w);
  if (!s.ok()) err = s.ToString();
  return in_place ? in : out;
}

// Every type and operation by cross-memory attach, in and out of place,
// gives the bits of the slots' path (both reduce each element in rank
// order), with slices that do not divide evenly, on 2, 3 and 4 ranks, with
// the slots' calls in between.
TEST(ShmCollectiveTest, AllReduceByCrossMemoryAttachMatchesTheSlotsBitForBit) {
  for (int n : {2, 3, 4}) {
    OnRanks(n, [n](int r, ShmCollective& sc, ShmWaiter& w) -> std::string {
      if (!sc.ProbeCma()) return "ProbeCma failed between threads of one process";
      uint64_t seq = 0;
      for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                         DataType::kFloat64, DataType::kInt32, DataType::kInt8}) {
        const size_t least = ShmCollective::kCmaMinBytes / DataTypeSize(t);
        for (size_t count : {least, least * 3 + 5}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                              ReduceOp::kAvg}) {
            for (bool in_place : {false, true}) {
              const std::string at = absl::StrCat(" n=", n, " ", DataTypeName(t), " ",
                                                  ReduceOpName(op), " count=", count,
                                                  " in_place=", in_place);
              std::string err;
              const std::vector<char> want =
                  AllReduceBy(sc, w, r, false, t, op, count, in_place, seq, err);
              if (!err.empty()) return err + at;
              const std::vector<char> got =
                  AllReduceBy(sc, w, r, true, t, op, count, in_place, seq, err);
              if (!err.empty()) return err + at;
              for (size_t i = 0; i < got.size(); ++i) {
                if (got[i] != want[i]) return absl::StrCat("byte ", i, " differs", at);
              }
            }
          }
        }
      }
      return "";
    }, /*share_cpu=*/false);
  }
}

// A read of another rank's buffer that fails ends the call on the reader
// with an error naming that rank and the bytes (here rank 1's input is
// cut short where rank 0 reads it); rank 1, whose pieces never come, is
// let go by its waiter.
TEST(ShmCollectiveTest, AFailedReadOfAnotherRanksBufferNamesThatRank) {
  const size_t count = ShmCollective::kCmaMinBytes / sizeof(float) * 2;
  const size_t bytes = count * sizeof(float);
  const long page = sysconf(_SC_PAGESIZE);
  // Rank 1's input: its second half (its own slice) readable, the first
  // half (rank 0's slice, which rank 0 reads) not.
  char* region = static_cast<char*>(
      mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(region, MAP_FAILED);
  ASSERT_EQ(mprotect(region, bytes / 2, PROT_NONE), 0);
  auto segs = MapAll(2);
  std::string errors[2];
  // Kept until both ranks are done: rank 1 still reads rank 0's input
  // after rank 0 has failed.
  std::vector<float> input0(count, 1.0f), out[2] = {std::vector<float>(count),
                                                     std::vector<float>(count)};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      TestWaiter w(r == 1 ? 20 : 0);
      w.share_cpu = false;
      segs[r]->EnableCma(segs[r]->ProbeCma());
      const float* in = r == 0 ? input0.data() : reinterpret_cast<float*>(region);
      segs[r]->Enter(0, 9);
      errors[r] = segs[r]->AllReduce(in, out[r].data(), count, DataType::kFloat32,
                                     ReduceOp::kSum, 0, 9, w).ToString();
    });
  }
  for (auto& t : threads) t.join();
  munmap(region, bytes + page);
  EXPECT_NE(errors[0].find("UNAVAILABLE"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find(absl::StrCat("reading 262144 bytes of rank 1's buffers")),
            std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("seq 0"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("gave up"), std::string::npos) << errors[1];
}

INSTANTIATE_TEST_SUITE_P(Slots, ShmCollectiveSlotTest,
                         ::testing::Values(ShmCollective::kSlotBytes,
                                           ShmCollective::kMinSlotBytes),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return absl::StrCat(info.param >> 10, "KiB");
                         });

TEST(ShmCollectiveTest, BarrierWaitsForTheLastRank) {
  std::atomic<bool> late_arrived{false};
  OnRanks(3, [&](int r, ShmCollective& sc, ShmWaiter& w) -> std::string {
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      late_arrived = true;
    }
    sc.Enter(0, 41);
    absl::Status s = sc.Barrier(0, 41, w);
    if (!s.ok()) return s.ToString();
    if (!late_arrived) return "left the barrier before rank 2 entered it";
    return "";
  });
}

// The last rank to arrive wakes the ranks asleep on the bell. Their naps
// are made a minute long, so that only the wake can end their wait in time.
TEST(ShmCollectiveTest, TheLastArrivalWakesTheSleepers) {
  auto segs = MapAll(3);
  for (auto& seg : segs) seg->SetNap(absl::Seconds(60));
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      TestWaiter w;
      w.share_cpu = false;
      if (r == 2) {
        const MonoTime give_up = MonoNow() + absl::Seconds(30);
        while (segs[2]->Sleepers() < 2) {
          if (MonoNow() > give_up) {
            errors[r] = "ranks 0 and 1 did not fall asleep in 30 s";
            break;
          }
          absl::SleepFor(absl::Milliseconds(1));
        }
      }
      segs[r]->Enter(0, 41);
      const MonoTime start = MonoNow();
      absl::Status s = segs[r]->Barrier(0, 41, w);
      if (!s.ok()) {
        errors[r] = s.ToString();
      } else if (r < 2 && MonoNow() - start > absl::Seconds(30)) {
        errors[r] = "slept through rank 2's arrival";
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// A rank that declines asymmetric fences (HCOMM_MEMBARRIER=0, as a kernel
// without membarrier would) marks the segment, and every rank publishes
// with full fences again, the registered ones too: their wakes still reach
// it. Here rank 1, a forked process that declines, falls asleep in each
// barrier before rank 0 (this process) arrives; its naps are a minute
// long, so only the wakes end its waits in time.
TEST(ShmCollectiveTest, ARankWithoutAsymmetricFencesMakesEveryRankFenceFully) {
  const std::string name = UniqueName();
  auto created = ShmCollective::Create(name, 0, 2, g_slot_bytes);
  ASSERT_TRUE(created.ok()) << created.status();
  ShmCollective& seg = **created;
  EXPECT_EQ(seg.light_fences(), RegisterAsymmetricFences());
  constexpr int kBarriers = 20;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setenv("HCOMM_MEMBARRIER", "0", 1);
    auto opened = ShmCollective::Open(name, 1, 2);
    if (!opened.ok() || (*opened)->light_fences()) _exit(2);
    (*opened)->SetNap(absl::Seconds(60));
    TestWaiter w;
    w.share_cpu = false;
    for (int i = 0; i < kBarriers; ++i) {
      (*opened)->Enter(i, 7);
      const MonoTime start = MonoNow();
      if (!(*opened)->Barrier(i, 7, w).ok()) _exit(3);
      if (MonoNow() - start > absl::Seconds(30)) _exit(4);  // slept through a wake
    }
    _exit(0);
  }
  TestWaiter w;
  w.share_cpu = false;
  for (int i = 0; i < kBarriers; ++i) {
    // Arrive once rank 1 has fallen asleep (it spins 100 us first).
    const MonoTime give_up = MonoNow() + absl::Seconds(30);
    while (seg.Sleepers() < 1 && MonoNow() < give_up) absl::SleepFor(absl::Microseconds(200));
    EXPECT_EQ(seg.Sleepers(), 1) << "rank 1 did not fall asleep before barrier " << i;
    EXPECT_FALSE(seg.light_fences()) << "the segment is not marked";
    seg.Enter(i, 7);
    absl::Status s = seg.Barrier(i, 7, w);
    ASSERT_TRUE(s.ok()) << "barrier " << i << ": " << s;
  }
  seg.Unlink();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

// Two collectives with the same shape of rounds (one round of 20 bytes):
// both ranks see the other's fingerprint instead of mixing their data.
TEST(ShmCollectiveTest, DifferentCollectivesOfTheSameShapeClash) {
  auto segs = MapAll(2);
  float a[5] = {1, 2, 3, 4, 5}, b[5] = {6, 7, 8, 9, 10};
  TestWaiter w0, w1;
  segs[0]->Enter(0, 42);
  segs[1]->Enter(0, 7);
  absl::Status s1;
  std::thread other([&] { s1 = segs[1]->Broadcast(b, sizeof(b), 1, 0, 7, w1); });
  absl::Status s0 = segs[0]->AllReduce(a, a, 5, DataType::kFloat32, ReduceOp::kSum, 0, 42, w0);
  other.join();
  EXPECT_EQ(CodeOf(s0), ErrorCode::kMismatch) << s0;
  EXPECT_EQ(CodeOf(s1), ErrorCode::kMismatch) << s1;
  EXPECT_EQ(w0.clash_rank, 1);
  EXPECT_EQ(w0.clash_fp, 7u);
  EXPECT_EQ(w1.clash_rank, 0);
  EXPECT_EQ(w1.clash_fp, 42u);
  EXPECT_EQ(a[0], 1.0f);  // nothing was reduced
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

// A collective of many rounds asks its waiter before each round's wait
// whether to stop (an abort): it stops there, not at its end. The other
// rank, left waiting for it, ends when its own waiter gives up.
TEST(ShmCollectiveTest, ALargeCollectiveStopsWithinARoundOfAnInterruption) {
  auto segs = MapAll(2);
  segs[0]->Enter(0, 42);
  segs[1]->Enter(0, 42);
  // 64 rounds at least, whatever the slots' size.
  std::vector<float> v(64 * segs[0]->slot_bytes() / sizeof(float), 1.0f), v2 = v;
  TestWaiter w(/*give_up_after=*/5000);  // (no test waits forever)
  w.interrupt_at = 3;
  absl::Status s1;
  std::thread other([&] {
    TestWaiter patient(/*give_up_after=*/1000);
    s1 = segs[1]->AllReduce(v2.data(), v2.data(), v2.size(), DataType::kFloat32,
                            ReduceOp::kSum, 0, 42, patient);
  });
  absl::Status s = segs[0]->AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32,
                                      ReduceOp::kSum, 0, 42, w);
  other.join();
  EXPECT_EQ(CodeOf(s), ErrorCode::kAborted) << s;
  EXPECT_EQ(w.interrupted_calls, 3);
  EXPECT_EQ(CodeOf(s1), ErrorCode::kTimeout) << s1;
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

TEST(ShmCollectiveTest, CreateRefusesSlotsItCannotUse) {
  for (size_t slot : {size_t{0}, ShmCollective::kMinSlotBytes / 2, ShmCollective::kSlotBytes * 2,
                      size_t{96} << 10}) {
    const std::string name = UniqueName();
    auto created = ShmCollective::Create(name, 0, 2, slot);
    EXPECT_EQ(CodeOf(created.status()), ErrorCode::kInvalidArgument) << slot;
    EXPECT_FALSE(NameExists(name)) << slot;
  }
}

}  // namespace
}  // namespace hcomm
