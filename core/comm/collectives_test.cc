// Every collective x algorithm x dtype x op over 1..8 ranks (threads of this
// process; shared memory, and some rank counts over TCP and a mix), in place and out of place, every root, counts
// {0, 1, 7, 1023} and 1M+3 for float32 (and 2.5 MiB of every type where two
// ranks take the ring); results checked against a reference.
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "algorithms/kernels/reduce.h"
#include "core/base/clock.h"
#include "core/comm/communicator.h"
#include "core/base/interrupt.h"
#include "core/base/priority.h"
#include "core/base/status.h"
#include "gtest/gtest.h"
#include "testing/multirank.h"

namespace hcomm {
namespace {

const DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                              DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                              DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                              DataType::kFloat64};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kAvg};
const size_t kSmallCounts[] = {0, 1, 7, 1023};
constexpr size_t kLargeCount = (size_t{1} << 20) + 3;

bool IsSigned(DataType t) {
  return t != DataType::kUint8 && t != DataType::kUint32 && t != DataType::kUint64;
}
bool IsFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

double Get(const void* buf, DataType t, size_t i) {
  switch (t) {
    case DataType::kInt8: return static_cast<const int8_t*>(buf)[i];
    case DataType::kUint8: return static_cast<const uint8_t*>(buf)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kUint32: return static_cast<const uint32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kUint64: return static_cast<double>(static_cast<const uint64_t*>(buf)[i]);
    case DataType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16: return BFloat16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
  }
  return 0;
}

void Put(void* buf, DataType t, size_t i, double v) {
  switch (t) {
    case DataType::kInt8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case DataType::kUint8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kUint32: static_cast<uint32_t*>(buf)[i] = static_cast<uint32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::kUint64: static_cast<uint64_t*>(buf)[i] = static_cast<uint64_t>(v); break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(buf)[i] = FloatToBFloat16(static_cast<float>(v));
      break;
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
  }
}

// Rank r's value at element i: small integers, exact in every dtype; powers
// of two for products so they stay exact too.
double Value(int r, size_t i, DataType t, ReduceOp op) {
  if (op == ReduceOp::kProd) return 1 + static_cast<double>((i + r) % 2);
  double v = static_cast<double>((i * 7 + r * 3) % 5);
  return IsSigned(t) ? v - 2 : v;
}

double Expected(int n, size_t i, DataType t, ReduceOp op) {
  double acc = Value(0, i, t, op);
  for (int r = 1; r < n; ++r) {
    double v = Value(r, i, t, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  if (op == ReduceOp::kAvg) acc = IsFloat(t) ? acc / n : std::trunc(acc / n);
  return acc;
}

std::vector<char> Fill(int r, size_t count, DataType t, ReduceOp op) {
  std::vector<char> v(std::max<size_t>(count * DataTypeSize(t), 1));
  for (size_t i = 0; i < count; ++i) Put(v.data(), t, i, Value(r, i, t, op));
  return v;
}

bool Close(double got, double want, DataType t) {
  if (!IsFloat(t)) return got == want;
  double tol = (t == DataType::kFloat16 || t == DataType::kBFloat16) ? 1e-2 : 1e-6;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

// Checks `count` reduced elements of `buf` (element offset `first` of the
// full vector); returns a description of the first difference.
std::string CheckReduced(const void* buf, size_t first, size_t count, int n, DataType t,
                         ReduceOp op) {
  for (size_t i = 0; i < count; ++i) {
    double got = Get(buf, t, i), want = Expected(n, first + i, t, op);
    if (!Close(got, want, t)) {
      return absl::StrCat("element ", first + i, ": got ", got, " want ", want);
    }
  }
  return "";
}

std::string Label(const char* what, int n, Algorithm a, DataType t, ReduceOp op, size_t count,
                  bool in_place, int root = -1) {
  return absl::StrCat(what, " n=", n, " algo=", AlgorithmName(a), " ", DataTypeName(t), " ",
                      ReduceOpName(op), " count=", count, in_place ? " in-place" : "",
                      root >= 0 ? absl::StrCat(" root=", root) : "");
}

class CollectivesTest
    : public ::testing::TestWithParam<std::tuple<int, Algorithm, testing::TransportMode>> {
 protected:
  void SetUp() override { testing::SetTransportMode(std::get<2>(GetParam())); }
  void TearDown() override { testing::SetTransportMode(testing::TransportMode::kDefault); }
};

void RunMatrix(Communicator& c, Algorithm algo) {
  const int n = c.size(), r = c.rank();
  // --- allreduce: every dtype x op x small count, in and out of place.
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      std::vector<size_t> counts(std::begin(kSmallCounts), std::end(kSmallCounts));
      if (t == DataType::kFloat32 && op == ReduceOp::kSum) counts.push_back(kLargeCount);
      // The tree halves and doubles from 32 KiB on: every type and op there.
      if (algo == Algorithm::kTree) counts.push_back(20000);
      // Two ranks on the ring return each 512 KiB chunk as they reduce it
      // (and divide it there for kAvg): every type over several chunks.
      if (algo == Algorithm::kRing && n == 2 && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
        counts.push_back((size_t{5} << 19) / DataTypeSize(t) + 3);
      }
      for (size_t count : counts) {
        for (bool in_place : {false, true}) {
          std::vector<char> in = Fill(r, count, t, op), out(in.size());
          void* dst = in_place ? in.data() : out.data();
          absl::Status s = c.AllReduce(in.data(), dst, count, t, op);
          std::string label = Label("allreduce", n, algo, t, op, count, in_place);
          ASSERT_TRUE(s.ok()) << label << ": " << s;
          std::string diff = CheckReduced(dst, 0, count, n, t, op);
          ASSERT_EQ(diff, "") << label;
        }
      }
    }
  }
  // --- reduce: every dtype x op at root n-1; float32 sum at every root.
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (size_t count : {size_t{1}, size_t{1023}}) {
        int root = n - 1;
        std::vector<char> in = Fill(r, count, t, op), out(in.size());
        absl::Status s = c.Reduce(in.data(), r == root ? out.data() : nullptr, count, t, op, root);
        std::string label = Label("reduce", n, algo, t, op, count, false, root);
        ASSERT_TRUE(s.ok()) << label << ": " << s;
        if (r == root) {
          ASSERT_EQ(CheckReduced(out.data(), 0, count, n, t, op), "") << label;
        }
      }
    }
  }
  for (int root = 0; root < n; ++root) {
    for (size_t count : {size_t{0}, size_t{7}, kLargeCount}) {
      for (bool in_place : {false, true}) {
        DataType t = DataType::kFloat32;
        ReduceOp op = ReduceOp::kSum;
        std::vector<char> in = Fill(r, count, t, op), out(in.size());
        void* dst = r == root ? (in_place ? in.data() : out.data()) : nullptr;
        absl::Status s = c.Reduce(in.data(), dst, count, t, op, root);
        std::string label = Label("reduce", n, algo, t, op, count, in_place, root);
        ASSERT_TRUE(s.ok()) << label << ": " << s;
        if (r == root) {
          ASSERT_EQ(CheckReduced(dst, 0, count, n, t, op), "") << label;
        }
      }
    }
  }
  // --- reduce_scatter: every dtype x op; float32 sum large; in place.
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      std::vector<size_t> counts = {0, 1, 7};
      if (t == DataType::kFloat32 && op == ReduceOp::kSum) counts.push_back(kLargeCount / n + 1);
      for (size_t count : counts) {
        for (bool in_place : {false, true}) {
          std::vector<char> in = Fill(r, count * n, t, op);
          std::vector<char> out(std::max<size_t>(count * DataTypeSize(t), 1));
          void* dst = in_place ? in.data() : out.data();
          absl::Status s = c.ReduceScatter(in.data(), dst, count, t, op);
          std::string label = Label("reduce_scatter", n, algo, t, op, count, in_place);
          ASSERT_TRUE(s.ok()) << label << ": " << s;
          ASSERT_EQ(CheckReduced(dst, r * count, count, n, t, op), "") << label;
        }
      }
    }
  }
  // Byte-moving collectives: one dtype is enough (they move bytes), with
  // element-size 1, 2, 8 for alignment.
  for (DataType t : {DataType::kUint8, DataType::kFloat16, DataType::kFloat64}) {
    const size_t es = DataTypeSize(t);
    std::vector<size_t> counts(std::begin(kSmallCounts), std::end(kSmallCounts));
    if (t == DataType::kUint8) counts.push_back(kLargeCount);
    auto pattern = [](int rank, size_t i) { return static_cast<char>((rank * 31 + i * 7) & 0x7f); };
    for (size_t count : counts) {
      const size_t bytes = count * es;
      // broadcast, every root
      for (int root = 0; root < n; ++root) {
        std::vector<char> buf(std::max<size_t>(bytes, 1));
        for (size_t i = 0; i < bytes; ++i) buf[i] = r == root ? pattern(root, i) : 0;
        absl::Status s = c.Broadcast(buf.data(), count, t, root);
        std::string label = Label("broadcast", n, algo, t, ReduceOp::kSum, count, false, root);
        ASSERT_TRUE(s.ok()) << label << ": " << s;
        for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(buf[i], pattern(root, i)) << label << " byte " << i;
      }
      // allgather, in and out of place
      for (bool in_place : {false, true}) {
        std::vector<char> out(std::max<size_t>(bytes * n, 1), 0), in(std::max<size_t>(bytes, 1));
        for (size_t i = 0; i < bytes; ++i) in[i] = pattern(r, i);
        const void* src = in.data();
        if (in_place) {
          memcpy(out.data() + r * bytes, in.data(), bytes);
          src = out.data();
        }
        absl::Status s = c.AllGather(src, out.data(), count, t);
        std::string label = Label("allgather", n, algo, t, ReduceOp::kSum, count, in_place);
        ASSERT_TRUE(s.ok()) << label << ": " << s;
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < bytes; ++i) {
            ASSERT_EQ(out[q * bytes + i], pattern(q, i)) << label << " block " << q << " byte " << i;
          }
        }
      }
      // alltoall, in and out of place
      for (bool in_place : {false, true}) {
        std::vector<char> in(std::max<size_t>(bytes * n, 1)), out(in.size(), 0);
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < bytes; ++i) in[q * bytes + i] = pattern(r * n + q, i);
        }
        void* dst = in_place ? in.data() : out.data();
        absl::Status s = c.AllToAll(in.data(), dst, count, t);
        std::string label = Label("alltoall", n, algo, t, ReduceOp::kSum, count, in_place);
        ASSERT_TRUE(s.ok()) << label << ": " << s;
        const char* got = static_cast<const char*>(dst);
        for (int q = 0; q < n; ++q) {
          for (size_t i = 0; i < bytes; ++i) {
            ASSERT_EQ(got[q * bytes + i], pattern(q * n + r, i)) << label << " block " << q;
          }
        }
      }
      if (count == kLargeCount) continue;  // rooted gathers: small counts, every root
      for (int root = 0; root < n; ++root) {
        // gather
        std::vector<char> in(std::max<size_t>(bytes, 1)), out(std::max<size_t>(bytes * n, 1), 0);
        for (size_t i = 0; i < bytes; ++i) in[i] = pattern(r, i);
        absl::Status s = c.Gather(in.data(), r == root ? out.data() : nullptr, count, t, root);
        std::string label = Label("gather", n, algo, t, ReduceOp::kSum, count, false, root);
        ASSERT_TRUE(s.ok()) << label << ": " << s;
        if (r == root) {
          for (int q = 0; q < n; ++q) {
            for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(out[q * bytes + i], pattern(q, i)) << label;
          }
        }
        // scatter
        std::vector<char> all(std::max<size_t>(bytes * n, 1)), mine(std::max<size_t>(bytes, 1), 0);
        if (r == root) {
          for (int q = 0; q < n; ++q) {
            for (size_t i = 0; i < bytes; ++i) all[q * bytes + i] = pattern(q + 100, i);
          }
        }
        s = c.Scatter(r == root ? all.data() : nullptr, mine.data(), count, t, root);
        label = Label("scatter", n, algo, t, ReduceOp::kSum, count, false, root);
        ASSERT_TRUE(s.ok()) << label << ": " << s;
        for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(mine[i], pattern(r + 100, i)) << label;
      }
    }
  }
  ASSERT_TRUE(c.Barrier().ok());
}

TEST_P(CollectivesTest, EveryOperation) {
  const int n = std::get<0>(GetParam());
  const Algorithm algo = std::get<1>(GetParam());
  testing::RunRanks(n, [&](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE((*c)->SetOption("algo", AlgorithmName(algo)).ok());
    RunMatrix(**c, algo);
    EXPECT_TRUE((*c)->Destroy().ok());
  }, /*timeout_ms=*/120000);
}

std::string CaseName(
    const ::testing::TestParamInfo<std::tuple<int, Algorithm, testing::TransportMode>>& info) {
  return absl::StrCat(std::get<0>(info.param), "ranks_", AlgorithmName(std::get<1>(info.param)),
                      "_", testing::TransportModeName(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(
    Shm, CollectivesTest,
    ::testing::Combine(::testing::Range(1, 9),
                       // auto: allreduce runs in the shared segment
                       // (algorithms/shm_collective.h), the others by choice.
                       ::testing::Values(Algorithm::kRing, Algorithm::kTree, Algorithm::kDirect,
                                         Algorithm::kAuto),
                       ::testing::Values(testing::TransportMode::kShm)),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    Tcp, CollectivesTest,
    ::testing::Combine(::testing::Values(2, 5, 7),
                       ::testing::Values(Algorithm::kRing, Algorithm::kTree, Algorithm::kDirect),
                       ::testing::Values(testing::TransportMode::kTcp)),
    CaseName);

// Every algorithm through the plugin example (examples/plugin), as over TCP.
INSTANTIATE_TEST_SUITE_P(
    Uds, CollectivesTest,
    ::testing::Combine(::testing::Values(2, 5, 7),
                       ::testing::Values(Algorithm::kRing, Algorithm::kTree, Algorithm::kDirect),
                       ::testing::Values(testing::TransportMode::kUds)),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    Mixed, CollectivesTest,
    ::testing::Combine(::testing::Values(4),
                       ::testing::Values(Algorithm::kRing, Algorithm::kTree, Algorithm::kDirect),
                       ::testing::Values(testing::TransportMode::kMixed)),
    CaseName);

}  // namespace
}  // namespace hcomm

namespace hcomm {
namespace {

TEST(GroupsTest, SplitAndCreateGroupHaveTheirOwnMessageSpace) {
  testing::RunRanks(5, [](int rank, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    Communicator& w = **world;
    // Split by parity, rank 4 opts out; keys reverse the order.
    auto half = w.Split(rank == 4 ? -1 : rank % 2, -rank);
    ASSERT_TRUE(half.ok()) << half.status();
    if (rank == 4) {
      EXPECT_EQ(*half, nullptr);
    } else {
      Communicator& h = **half;
      ASSERT_EQ(h.size(), 2);
      // Keys -rank: the higher parent rank comes first.
      EXPECT_EQ(h.rank(), rank >= 2 ? 0 : 1);
      int v = rank, sum = 0;
      ASSERT_TRUE(h.AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum).ok());
      EXPECT_EQ(sum, rank % 2 == 0 ? 0 + 2 : 1 + 3);
    }
    // A group of {0, 2, 4}; the others get nullptr.
    auto g = w.CreateGroup({4, 0, 2});
    ASSERT_TRUE(g.ok()) << g.status();
    if (rank % 2 == 1) {
      EXPECT_EQ(*g, nullptr);
    } else {
      Communicator& c = **g;
      EXPECT_EQ(c.size(), 3);
      EXPECT_EQ(c.rank(), rank == 4 ? 0 : rank == 0 ? 1 : 2);
      // Same tag on the parent and the child: each lands in its own space.
      if (c.rank() == 0) {
        int a = 111, b = 222;
        ASSERT_TRUE(w.Send(&a, sizeof a, 4, 0, 7).ok());  // parent: to world rank 0
        ASSERT_TRUE(c.Send(&b, sizeof b, 4, 1, 7).ok());  // child: to group rank 1 = world 0
      } else if (c.rank() == 1) {
        int got = 0;
        ASSERT_TRUE(c.Recv(&got, sizeof got, 4, 0, 7).ok());
        EXPECT_EQ(got, 222);
        ASSERT_TRUE(w.Recv(&got, sizeof got, 4, 4, 7).ok());
        EXPECT_EQ(got, 111);
      }
      ASSERT_TRUE(c.Barrier().ok());
    }
    ASSERT_TRUE(w.Barrier().ok());
  });
}

// Tests run once per transport mode (set before each).
class ByTransport : public ::testing::TestWithParam<testing::TransportMode> {
 protected:
  void SetUp() override { testing::SetTransportMode(GetParam()); }
};

std::string ModeName(const ::testing::TestParamInfo<testing::TransportMode>& info) {
  return testing::TransportModeName(info.param);
}

// Groups of one split get context ids alike: each still gets a shared
// segment of its own (their names once clashed, and all but one group fell
// back to messages).
TEST(GroupsTest, EveryGroupOfASplitHasItsOwnSegment) {
  testing::SetTransportMode(testing::TransportMode::kShm);
  testing::RunRanks(4, [](int rank, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    EXPECT_TRUE((*world)->has_shm_collective());
    auto half = (*world)->Split(rank % 2, rank);
    ASSERT_TRUE(half.ok()) << half.status();
    EXPECT_TRUE((*half)->has_shm_collective()) << "rank " << rank;
    int v = rank, sum = 0;
    ASSERT_TRUE((*half)->AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum).ok());
    EXPECT_EQ(sum, rank % 2 == 0 ? 2 : 4);
  });
}

// HCOMM_SHM_COLL_CMA=1: the ranks probe each other and agree, and large
// allreduces of the world and of a group read the others' buffers by
// cross-memory attach, in and out of place, exactly; without it they keep
// the slots.
TEST(GroupsTest, CrossMemoryAttachAllReducesOfTheWorldAndAGroup) {
  testing::SetTransportMode(testing::TransportMode::kShm);
  testing::RunRanks(2, [](int, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    EXPECT_FALSE((*world)->shm_collective_cma());
  });
  ASSERT_EQ(setenv("HCOMM_SHM_COLL_CMA", "1", 1), 0);
  testing::RunRanks(3, [](int rank, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    auto pair = (*world)->Split(rank == 2 ? 1 : 0, rank);
    ASSERT_TRUE(pair.ok()) << pair.status();
    for (Communicator* c : {world->get(), pair->get()}) {
      EXPECT_EQ(c->shm_collective_cma(), c->size() > 1) << "rank " << rank;
      const int n = c->size();
      const size_t count = (size_t{1} << 20) + 3;
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        for (bool in_place : {false, true}) {
          std::vector<float> in(count), out(count, -1.0f);
          for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 61 + c->rank());
          float* dst = in_place ? in.data() : out.data();
          ASSERT_TRUE(c->AllReduce(in.data(), dst, count, DataType::kFloat32, op).ok());
          for (size_t i = 0; i < count; ++i) {
            float want = static_cast<float>(i % 61) * n + n * (n - 1) / 2.0f;
            if (op == ReduceOp::kAvg) want /= n;
            ASSERT_EQ(dst[i], want) << "rank " << rank << " of " << n << " [" << i << "]";
          }
        }
      }
    }
  });
  unsetenv("HCOMM_SHM_COLL_CMA");
}

// The world and its groups share connections; destroying the world first
// leaves its groups working, and the last to go closes them.
TEST(GroupsTest, GroupsOutliveTheWorld) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  testing::RunRanks(3, [](int rank, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    auto split = (*world)->Split(0, -rank);
    ASSERT_TRUE(split.ok()) << split.status();
    std::unique_ptr<Communicator> g = std::move(*split);
    ASSERT_TRUE((*world)->Destroy().ok());
    world->reset();
    int v = rank, sum = 0;
    ASSERT_TRUE(g->AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum).ok());
    EXPECT_EQ(sum, 3);
    int token = g->rank(), got = -1;
    const int next = (g->rank() + 1) % 3, prev = (g->rank() + 2) % 3;
    auto r = g->Irecv(&got, sizeof got, 4, prev, 1);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(g->Send(&token, sizeof token, 4, next, 1).ok());
    EXPECT_TRUE(g->Wait(r->get(), MonoNow() + absl::Seconds(20)).ok());
    EXPECT_EQ(got, prev);
    g->Release(*r);
    EXPECT_TRUE(g->Destroy().ok());
  });
}

// Destroying a group (local) fails what is pending on it at once, and
// nothing sent to it afterwards, or left unreceived in it, reaches a buffer
// or keeps a sender waiting; the parent's pending operations carry on.
class GroupDestroyTest : public ByTransport {};

// The world, and a group of all its ranks split from it.
struct WorldAndGroup {
  std::unique_ptr<Communicator> world, group;
  bool ok() const { return world && group; }
};
WorldAndGroup InitWorldAndGroup(int rank, const Options& o) {
  WorldAndGroup wg;
  auto world = Communicator::Init(o);
  if (!world.ok()) {
    ADD_FAILURE() << "rank " << rank << ": " << world.status();
    return wg;
  }
  auto split = (*world)->Split(0, rank);
  if (!split.ok()) {
    ADD_FAILURE() << "rank " << rank << ": " << split.status();
    return wg;
  }
  wg.world = std::move(*world);
  wg.group = std::move(*split);
  return wg;
}

TEST_P(GroupDestroyTest, FailsPendingAndDropsLaterArrivals) {
  testing::RunRanks(2, [](int rank, const Options& o) {
    WorldAndGroup wg = InitWorldAndGroup(rank, o);
    ASSERT_TRUE(wg.ok());
    Communicator& w = *wg.world;
    std::unique_ptr<Communicator> g = std::move(wg.group);
    const MonoTime deadline = MonoNow() + absl::Seconds(20);
    constexpr size_t kBig = 1 << 20;  // goes by rendezvous
    std::vector<char> big(kBig, 'b');
    int token = 0;
    if (rank == 1) {
      // Left unreceived in the group: an eager message and a rendezvous.
      char small[16] = "unreceived";
      ASSERT_TRUE(g->Send(small, sizeof small, 1, 0, 9).ok());
      auto rts = g->Isend(big.data(), kBig, 1, 0, 10);
      ASSERT_TRUE(rts.ok()) << rts.status();
      ASSERT_TRUE(w.Send(&token, sizeof token, 4, 0, 1).ok());
      ASSERT_TRUE(w.Recv(&token, sizeof token, 4, 0, 2).ok());  // rank 0 destroyed g
      // The rendezvous nobody will receive completes (as for a receive too
      // small: the receiver is the one told) instead of waiting it out.
      EXPECT_TRUE(g->Wait(rts->get(), deadline).ok());
      g->Release(*rts);
      // Sent after the destroy: dropped there, complete here.
      int late = 77;
      EXPECT_TRUE(g->Send(&late, sizeof late, 4, 0, 5).ok());
      auto late_big = g->Isend(big.data(), kBig, 1, 0, 11);
      ASSERT_TRUE(late_big.ok()) << late_big.status();
      EXPECT_TRUE(g->Wait(late_big->get(), deadline).ok());
      g->Release(*late_big);
      ASSERT_TRUE(w.Send(&token, sizeof token, 4, 0, 3).ok());
      token = 4444;
      ASSERT_TRUE(w.Send(&token, sizeof token, 4, 0, 4).ok());
      g.reset();
      ASSERT_TRUE(w.Barrier().ok());
      return;
    }
    int small_buf = -1;
    std::vector<char> big_buf(kBig, 'x');
    auto r5 = g->Irecv(&small_buf, sizeof small_buf, 4, 1, 5);
    auto r11 = g->Irecv(big_buf.data(), kBig, 1, 1, 11);
    int world_buf = 0;
    auto pending_world = w.Irecv(&world_buf, sizeof world_buf, 4, 1, 4);
    ASSERT_TRUE(r5.ok() && r11.ok() && pending_world.ok());
    ASSERT_TRUE(w.Recv(&token, sizeof token, 4, 1, 1).ok());  // the unreceived ones are here
    const MonoTime start = MonoNow();
    ASSERT_TRUE(g->Destroy().ok());
    // Not the 20 s timeout: nothing of ours was in flight.
    EXPECT_LT(MonoNow() - start, absl::Seconds(10));
    for (auto* r : {&*r5, &*r11}) {
      absl::Status s = w.Wait(r->get(), deadline);
      EXPECT_EQ(CodeOf(s), ErrorCode::kAborted) << s;
      EXPECT_NE(s.message().find("destroyed"), std::string::npos) << s;
      w.Release(*r);
    }
    ASSERT_TRUE(w.Send(&token, sizeof token, 4, 1, 2).ok());
    ASSERT_TRUE(w.Recv(&token, sizeof token, 4, 1, 3).ok());  // its late sends completed
    EXPECT_EQ(small_buf, -1);
    EXPECT_EQ(big_buf, std::vector<char>(kBig, 'x'));
    EXPECT_TRUE(w.Wait(pending_world->get(), deadline).ok());
    EXPECT_EQ(world_buf, 4444);
    w.Release(*pending_world);
    ASSERT_TRUE(w.Barrier().ok());
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, GroupDestroyTest,
                         ::testing::Values(testing::TransportMode::kShm,
                                           testing::TransportMode::kTcp,
                                           testing::TransportMode::kUds),
                         ModeName);

// Aborting a group ends that group alone: on the aborting rank its pending
// and later operations fail with ABORTED; its members' operations with that
// rank, and the group's collectives, fail with PEER_FAILURE at once rather
// than at their timeout; the world and point-to-point among the others go on.
class GroupAbortTest : public ByTransport {};

TEST_P(GroupAbortTest, EndsThatGroupAloneAndTellsItsMembers) {
  testing::RunRanks(3, [](int rank, const Options& o) {
    WorldAndGroup wg = InitWorldAndGroup(rank, o);
    ASSERT_TRUE(wg.ok());
    Communicator& w = *wg.world;
    std::unique_ptr<Communicator> g = std::move(wg.group);
    // A rendezvous to rank 1 that it will never receive: its sender must
    // not be told it was delivered.
    std::vector<char> big(1 << 20, 'b');
    std::shared_ptr<Request> unreceived;
    if (rank == 0) {
      auto r = g->Isend(big.data(), big.size(), 1, 1, 12);
      ASSERT_TRUE(r.ok()) << r.status();
      unreceived = *r;
    }
    // A receive from any rank of the group, which nobody sends: it fails
    // when a member aborts, as when a peer fails.
    int from_any = -1;
    std::shared_ptr<Request> any_source;
    if (rank == 2) {
      auto r = g->Irecv(&from_any, sizeof from_any, 4, kAnySource, 9);
      ASSERT_TRUE(r.ok()) << r.status();
      any_source = *r;
    }
    ASSERT_TRUE(w.Barrier().ok());  // every rank's split has returned
    const MonoTime deadline = MonoNow() + absl::Seconds(20);
    const absl::Duration prompt = absl::Seconds(10);  // the timeout is 20 s
    int token = 0;
    if (rank == 1) {
      int from_0 = -1, from_2 = -1;
      auto pending = g->Irecv(&from_0, sizeof from_0, 4, 0, 1);
      auto pending_world = w.Irecv(&from_2, sizeof from_2, 4, 2, 8);
      ASSERT_TRUE(pending.ok() && pending_world.ok());
      absl::Status in_collective;
      std::thread collective([&] {
        int v = 1, sum = 0;
        in_collective = g->AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum);
      });
      absl::SleepFor(absl::Milliseconds(200));  // both are waiting
      const MonoTime start = MonoNow();
      g->Abort();
      collective.join();
      EXPECT_LT(MonoNow() - start, prompt);
      EXPECT_EQ(CodeOf(in_collective), ErrorCode::kAborted) << in_collective;
      absl::Status s = g->Wait(pending->get(), deadline);
      EXPECT_EQ(CodeOf(s), ErrorCode::kAborted) << s;
      g->Release(*pending);
      int v = 5;
      EXPECT_EQ(CodeOf(g->Send(&v, sizeof v, 4, 2, 1)), ErrorCode::kAborted);
      EXPECT_EQ(CodeOf(g->Send(&v, sizeof v, 4, 1, 1)), ErrorCode::kAborted);  // to itself
      EXPECT_EQ(CodeOf(g->Barrier()), ErrorCode::kAborted);
      g->Abort();  // again: nothing more happens
      // The world is untouched: its pending receive still completes.
      for (int peer : {0, 2}) ASSERT_TRUE(w.Send(&token, sizeof token, 4, peer, 7).ok());
      EXPECT_TRUE(w.Wait(pending_world->get(), deadline).ok());
      EXPECT_EQ(from_2, 22);
      w.Release(*pending_world);
    } else {
      // The token follows the group's abort on the same connection.
      ASSERT_TRUE(w.Recv(&token, sizeof token, 4, 1, 7).ok());
      const MonoTime start = MonoNow();
      int v = rank, got = -1;
      if (rank == 0) {
        absl::Status u = g->Wait(unreceived.get(), deadline);
        EXPECT_EQ(CodeOf(u), ErrorCode::kPeerFailure) << u;
        g->Release(unreceived);
        absl::Status s = g->Recv(&got, sizeof got, 4, 1, 3);
        EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;
        EXPECT_NE(s.message().find("rank 1 (world rank 1) aborted the communicator"),
                  std::string::npos)
            << s;
        s = g->Send(&v, sizeof v, 4, 1, 3);
        EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;
        ASSERT_TRUE(g->Send(&v, sizeof v, 4, 2, 4).ok());
      } else {
        absl::Status a = g->Wait(any_source.get(), deadline);
        EXPECT_EQ(CodeOf(a), ErrorCode::kPeerFailure) << a;
        EXPECT_NE(a.message().find("aborted the communicator"), std::string::npos) << a;
        EXPECT_EQ(from_any, -1);
        g->Release(any_source);
        ASSERT_TRUE(g->Recv(&got, sizeof got, 4, 0, 4).ok());
        EXPECT_EQ(got, 0);
        int mine = 22;
        ASSERT_TRUE(w.Send(&mine, sizeof mine, 4, 1, 8).ok());
      }
      absl::Status s = g->AllReduce(&v, &got, 1, DataType::kInt32, ReduceOp::kSum);
      EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << "rank " << rank << ": " << s;
      EXPECT_LT(MonoNow() - start, prompt);
    }
    int v = rank, sum = 0;
    ASSERT_TRUE(w.AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum).ok());
    EXPECT_EQ(sum, 3);
    const MonoTime start = MonoNow();
    EXPECT_TRUE(g->Destroy().ok());
    EXPECT_LT(MonoNow() - start, prompt);
    // The way back: a new group from the world.
    auto again = w.Split(0, rank);
    ASSERT_TRUE(again.ok()) << again.status();
    sum = 0;
    ASSERT_TRUE((*again)->AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum).ok());
    EXPECT_EQ(sum, 3);
    ASSERT_TRUE(w.Barrier().ok());
  }, /*timeout_ms=*/20000);
}

// Members already waiting in the group's collective for the aborting rank
// (by messages, or in the shared segment) are freed at once too.
TEST_P(GroupAbortTest, FreesMembersWaitingInACollective) {
  testing::RunRanks(3, [](int rank, const Options& o) {
    WorldAndGroup wg = InitWorldAndGroup(rank, o);
    ASSERT_TRUE(wg.ok());
    ASSERT_TRUE(wg.world->Barrier().ok());
    std::vector<float> v(1 << 20, 1.0f);  // 4 MiB: the large path
    if (rank == 1) {
      absl::SleepFor(absl::Milliseconds(300));  // the others are waiting for it
      wg.group->Abort();
    } else {
      const MonoTime start = MonoNow();
      absl::Status s = wg.group->AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32,
                                           ReduceOp::kSum);
      EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << "rank " << rank << ": " << s;
      EXPECT_LT(MonoNow() - start, absl::Seconds(10)) << s;  // the timeout is 20 s
    }
    int one = 1, sum = 0;
    ASSERT_TRUE(wg.world->AllReduce(&one, &sum, 1, DataType::kInt32, ReduceOp::kSum).ok());
    EXPECT_EQ(sum, 3);
  }, /*timeout_ms=*/20000);
}

// Destroying a communicator whose iallreduce is still pending (here nobody
// else calls it) fails its request with ABORTED at once, as API.md says of
// every request pending at a destroy, instead of holding the destroy until
// the collective's timeout; the members are told, as of an abort.
TEST_P(GroupAbortTest, DestroyFailsAPendingIAllReduceAtOnce) {
  testing::RunRanks(3, [](int rank, const Options& o) {
    WorldAndGroup wg = InitWorldAndGroup(rank, o);
    ASSERT_TRUE(wg.ok());
    std::unique_ptr<Communicator> g = std::move(wg.group);
    if (rank == 0) {
      int32_t a = 1;
      auto req = g->IAllReduce(&a, &a, 1, DataType::kInt32, ReduceOp::kSum);
      ASSERT_TRUE(req.ok()) << req.status();
      absl::SleepFor(absl::Milliseconds(200));  // it waits for the others
      const MonoTime start = MonoNow();
      EXPECT_TRUE(g->Destroy().ok());
      EXPECT_LT(MonoNow() - start, absl::Seconds(10));  // the timeout is 20 s
      absl::Status s = wg.world->Wait(req->get(), wg.world->Deadline());
      EXPECT_EQ(CodeOf(s), ErrorCode::kAborted) << s;
      EXPECT_NE(s.message().find("destroyed while an iallreduce"), std::string::npos) << s;
    }
    ASSERT_TRUE(wg.world->Barrier().ok());  // the world goes on
    if (rank != 0) {
      int32_t v = 1;
      absl::Status s = g->AllReduce(&v, &v, 1, DataType::kInt32, ReduceOp::kSum);
      EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << s;
    }
  }, /*timeout_ms=*/20000);
}

INSTANTIATE_TEST_SUITE_P(Transports, GroupAbortTest,
                         ::testing::Values(testing::TransportMode::kShm,
                                           testing::TransportMode::kTcp,
                                           testing::TransportMode::kUds),
                         ModeName);

// A language binding's Ctrl-C (core/base/interrupt.h): the check, run from
// inside the waits of the thread it names, ends a blocked collective and a
// blocked receive as their deadlines would, long before them; the
// communicator goes on (the withdrawn receive takes nothing).
std::atomic<bool> interrupt_armed{false};
std::thread::id interrupt_thread;
int InterruptRank0() {
  return interrupt_armed.load() && std::this_thread::get_id() == interrupt_thread ? 1 : 0;
}

class InterruptTest : public ::testing::TestWithParam<testing::TransportMode> {
 protected:
  void SetUp() override { testing::SetTransportMode(GetParam()); }
  void TearDown() override {
    SetInterruptCheck(nullptr);
    testing::SetTransportMode(testing::TransportMode::kDefault);
  }
};

TEST_P(InterruptTest, EndsABlockedCollectiveAndReceiveAsTheirDeadlinesWould) {
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    Communicator& comm = **c;
    ASSERT_TRUE(comm.SetOption("timeout_ms", "30000").ok());
    int x = 0;
    if (rank == 0) {
      interrupt_thread = std::this_thread::get_id();
      SetInterruptCheck(&InterruptRank0);
      interrupt_armed = true;
      std::vector<float> v(1 << 16, 1.0f);  // rank 1 never calls it
      MonoTime t0 = MonoNow();
      absl::Status s = comm.AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32,
                                      ReduceOp::kSum);
      EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
      EXPECT_NE(s.message().find("interrupted"), std::string::npos) << s;
      EXPECT_LT(MonoNow() - t0, absl::Seconds(5));
      ClearInterrupt();  // what each C API call does
      t0 = MonoNow();
      s = comm.Recv(&x, sizeof x, 4, 1, 7);  // not sent until rank 1 is released
      EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
      EXPECT_NE(s.message().find("recv from rank 1 tag 7"), std::string::npos) << s;
      EXPECT_NE(s.message().find("interrupted"), std::string::npos) << s;
      EXPECT_LT(MonoNow() - t0, absl::Seconds(5));
      interrupt_armed = false;
      ClearInterrupt();
      ASSERT_TRUE(comm.Send(&x, sizeof x, 4, 1, 99).ok());  // release rank 1
      ASSERT_TRUE(comm.Recv(&x, sizeof x, 4, 1, 7).ok());
      EXPECT_EQ(x, 5);
    } else {
      ASSERT_TRUE(comm.Recv(&x, sizeof x, 4, 0, 99).ok());
      x = 5;
      ASSERT_TRUE(comm.Send(&x, sizeof x, 4, 0, 7).ok());
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, InterruptTest,
                         ::testing::Values(testing::TransportMode::kShm,
                                           testing::TransportMode::kTcp),
                         ModeName);

TEST(GroupsTest, CreateGroupWithDifferentListsIsMismatch) {
  testing::RunRanks(3, [](int rank, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok());
    std::vector<int> list = rank == 2 ? std::vector<int>{0, 2} : std::vector<int>{0, 1};
    auto g = (*world)->CreateGroup(list);
    EXPECT_EQ(CodeOf(g.status()), ErrorCode::kMismatch) << g.status();
    ASSERT_TRUE((*world)->Barrier().ok());  // still usable
  });
}

TEST(CollectiveErrorsTest, DifferentCountsAreMismatchAndTimeoutsNameTheCollective) {
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->SetOption("algo", "ring").ok());
    std::vector<float> v(rank == 0 ? 100 : 200, 1.0f);
    absl::Status s = (*c)->AllReduce(v.data(), v.data(), v.size(), DataType::kFloat32,
                                     ReduceOp::kSum);
    EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << s;
    EXPECT_NE(s.message().find("seq 0: rank"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("allreduce(count 100 float32 sum)"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("allreduce(count 200 float32 sum)"), absl::string_view::npos) << s;
    ASSERT_TRUE((*c)->Barrier().ok());
    // Rank 1 never calls the broadcast: rank 0 times out naming it.
    ASSERT_TRUE((*c)->SetOption("timeout_ms", "300").ok());
    if (rank == 0) {
      int x = 0;
      absl::Status b = (*c)->Broadcast(&x, 1, DataType::kInt32, 1);
      EXPECT_EQ(CodeOf(b), ErrorCode::kTimeout) << b;
      EXPECT_NE(b.message().find("broadcast seq 2"), absl::string_view::npos) << b;
      ASSERT_TRUE((*c)->SetOption("timeout_ms", "30000").ok());
      ASSERT_TRUE((*c)->Send(&x, sizeof x, 4, 1, 99).ok());  // release rank 1
    } else {
      ASSERT_TRUE((*c)->SetOption("timeout_ms", "30000").ok());
      int x = 0;
      ASSERT_TRUE((*c)->Recv(&x, sizeof x, 4, 0, 99).ok());  // stay until rank 0 timed out
    }
  });
}

// Count 0 is a no-op that still synchronises, in the shared segment too:
// no rank leaves before the last has entered. And a rank called with count
// 0 where the others have 10 is a mismatch on every rank, naming both calls,
// after which the communicator works on.
TEST(CollectiveErrorsTest, CountZeroSynchronisesAndMismatchesInTheSegment) {
  testing::SetTransportMode(testing::TransportMode::kShm);
  std::atomic<int> late_entered{0};
  testing::RunRanks(3, [&](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    Communicator& comm = **c;
    ASSERT_TRUE(comm.has_shm_collective());
    int buf[30] = {};
    using Call = std::function<absl::Status()>;
    const std::vector<std::pair<const char*, Call>> calls = {
        {"allreduce", [&] { return comm.AllReduce(buf, buf, 0, DataType::kInt32,
                                                  ReduceOp::kSum); }},
        {"broadcast", [&] { return comm.Broadcast(buf, 0, DataType::kInt32, 1); }},
        {"reduce", [&] { return comm.Reduce(buf, buf, 0, DataType::kInt32, ReduceOp::kSum, 2); }},
        {"allgather", [&] { return comm.AllGather(buf, buf + 10, 0, DataType::kInt32); }},
        {"reduce_scatter", [&] { return comm.ReduceScatter(buf, buf + 10, 0, DataType::kInt32,
                                                           ReduceOp::kSum); }},
        {"alltoall", [&] { return comm.AllToAll(buf, buf + 10, 0, DataType::kInt32); }},
        {"gather", [&] { return comm.Gather(buf, buf + 10, 0, DataType::kInt32, 0); }},
        {"scatter", [&] { return comm.Scatter(buf, buf + 10, 0, DataType::kInt32, 0); }},
    };
    for (size_t i = 0; i < calls.size(); ++i) {
      if (rank == 2) {
        absl::SleepFor(absl::Milliseconds(50));
        late_entered = static_cast<int>(i) + 1;
      }
      ASSERT_TRUE(calls[i].second().ok()) << calls[i].first;
      EXPECT_GE(late_entered.load(), static_cast<int>(i) + 1)
          << calls[i].first << " returned on rank " << rank << " before rank 2 entered it";
    }
    absl::Status s = comm.AllReduce(buf, buf, rank == 2 ? 0 : 10, DataType::kInt32,
                                    ReduceOp::kSum);
    EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << s;
    EXPECT_NE(s.message().find("allreduce(count 0 int32 sum)"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find("allreduce(count 10 int32 sum)"), absl::string_view::npos) << s;
    int v = rank, sum = 0;
    ASSERT_TRUE(comm.AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum).ok());
    EXPECT_EQ(sum, 3);
  });
}

// A rank that dies (here: aborts, which closes its connections) fails the
// collectives of every member within moments, also of a member that waits
// on another live one; later collectives on it fail at once, while
// point-to-point between the survivors still works.
TEST(CollectiveErrorsTest, AMemberThatDiesFailsEveryMembersCollective) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  // Where each survivor stands when the death is noticed varies: a few
  // rounds see more of the cases.
  for (int round = 0; round < 4; ++round) {
    testing::RunRanks(4, [](int rank, const Options& o) {
      auto c = Communicator::Init(o);
      ASSERT_TRUE(c.ok()) << c.status();
      Communicator& comm = **c;
      ASSERT_TRUE(comm.SetOption("algo", "tree").ok());
      float v[4] = {1, 2, 3, 4};
      if (rank == 3) {
        for (int i = 0; i < 300; ++i) {
          ASSERT_TRUE(comm.AllReduce(v, v, 4, DataType::kFloat32, ReduceOp::kMax).ok());
        }
        comm.Abort();
        return;
      }
      const MonoTime start = MonoNow();
      absl::Status s;
      while (s.ok()) s = comm.AllReduce(v, v, 4, DataType::kFloat32, ReduceOp::kMax);
      EXPECT_EQ(CodeOf(s), ErrorCode::kPeerFailure) << "rank " << rank << ": " << s;
      EXPECT_LT(MonoNow() - start, absl::Seconds(15)) << "rank " << rank << ": " << s;
      absl::Status later = comm.Barrier();
      EXPECT_EQ(CodeOf(later), ErrorCode::kPeerFailure) << later;
      if (rank < 2) {
        int mine = rank, theirs = -1;
        auto r = comm.Irecv(&theirs, sizeof theirs, 4, 1 - rank, 5);
        ASSERT_TRUE(r.ok()) << r.status();
        ASSERT_TRUE(comm.Send(&mine, sizeof mine, 4, 1 - rank, 5).ok());
        EXPECT_TRUE(comm.Wait(r->get(), MonoNow() + absl::Seconds(20)).ok());
        EXPECT_EQ(theirs, 1 - rank);
        comm.Release(*r);
      }
    }, /*timeout_ms=*/20000);
  }
}

// HCOMM_CHECK_COLLECTIVES=1: ranks that disagree only on a root, which
// over TCP may exchange no message of the other's call at all (two ranks
// that each take themselves for the broadcast's root only send), all fail
// with MISMATCH naming both calls; the communicator stays usable.
TEST(CollectiveErrorsTest, CheckedCallsCatchEveryDisagreementOverTcp) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  ASSERT_EQ(setenv("HCOMM_CHECK_COLLECTIVES", "1", 1), 0);
  for (int n : {2, 3}) {
    testing::RunRanks(n, [n](int rank, const Options& o) {
      auto c = Communicator::Init(o);
      ASSERT_TRUE(c.ok()) << c.status();
      Communicator& comm = **c;
      int v[4] = {rank, rank, rank, rank};
      // Two ranks: each its own root. Three: rank 0 says 0, the others 1.
      const int root = n == 2 ? rank : (rank == 0 ? 0 : 1);
      absl::Status s = comm.Broadcast(v, 4, DataType::kInt32, root);
      EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << n << " ranks, rank " << rank << ": " << s;
      EXPECT_NE(s.message().find("broadcast(count 4 int32 root 0)"), std::string::npos) << s;
      EXPECT_NE(s.message().find("broadcast(count 4 int32 root 1)"), std::string::npos) << s;
      s = comm.Reduce(v, v, 4, DataType::kInt32, ReduceOp::kSum, rank == 0 ? 0 : n - 1);
      EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << n << " ranks, rank " << rank << ": " << s;
      int one = 1, sum = 0;
      ASSERT_TRUE(comm.AllReduce(&one, &sum, 1, DataType::kInt32, ReduceOp::kSum).ok());
      EXPECT_EQ(sum, n);
      int b[2] = {rank, 7};
      ASSERT_TRUE(comm.Broadcast(b, 2, DataType::kInt32, n - 1).ok());
      EXPECT_EQ(b[0], n - 1);
    }, /*timeout_ms=*/20000);
  }
  // Counts that differ by 2^32 (a rank's buffer mapped, never touched: the
  // check fails first).
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    const size_t count = rank == 0 ? 16 : (size_t{1} << 32) + 16;
    void* buf = mmap(nullptr, count, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ASSERT_NE(buf, MAP_FAILED);
    absl::Status s = (*c)->Broadcast(buf, count, DataType::kInt8, 0);
    EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << "rank " << rank << ": " << s;
    EXPECT_NE(s.message().find("broadcast(count 4294967312 int8 root 0)"), std::string::npos)
        << s;
    munmap(buf, count);
  }, /*timeout_ms=*/20000);
  unsetenv("HCOMM_CHECK_COLLECTIVES");
}

// A rank that waits in the check (here: its peer never calls) says so.
TEST(CollectiveErrorsTest, CheckedCallsSayWhatTheyWaitFor) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  ASSERT_EQ(setenv("HCOMM_CHECK_COLLECTIVES", "1", 1), 0);
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    int token = 0;
    if (rank == 1) {
      ASSERT_TRUE((*c)->SetOption("timeout_ms", "30000").ok());
      ASSERT_TRUE((*c)->Recv(&token, sizeof token, 4, 0, 5).ok());
      return;
    }
    int v = 1;
    absl::Status s = (*c)->AllReduce(&v, &v, 1, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
    EXPECT_NE(s.message().find("waits in recv from rank 1 for the call check "
                               "(HCOMM_CHECK_COLLECTIVES)"),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find("rank 1 never entered allreduce"), std::string::npos) << s;
    ASSERT_TRUE((*c)->Send(&token, sizeof token, 4, 1, 5).ok());
  }, /*timeout_ms=*/2000);
  unsetenv("HCOMM_CHECK_COLLECTIVES");
}

TEST(CollectiveErrorsTest, IAllReduceKeepsCallOrder) {
  testing::RunRanks(3, [](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok());
    std::vector<int> a(1000, rank + 1), b(10, rank + 10);
    auto req = (*c)->IAllReduce(a.data(), a.data(), a.size(), DataType::kInt32, ReduceOp::kSum);
    ASSERT_TRUE(req.ok());
    ASSERT_TRUE((*c)->AllReduce(b.data(), b.data(), b.size(), DataType::kInt32,
                                ReduceOp::kMax).ok());
    ASSERT_TRUE((*c)->Wait(req->get(), (*c)->Deadline()).ok());
    EXPECT_EQ(a[999], 6);
    EXPECT_EQ(b[0], 12);
  });
}

// Turns handed over many times between the worker that runs iallreduces
// and the caller waiting behind them: a turn's end that missed its waiter
// (the handshake of WaitTurn and FinishTurn, core/base/fence.h) would leave the
// caller asleep until the test's timeout.
TEST(CollectiveErrorsTest, TurnsPassBetweenTheWorkerAndTheCaller) {
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok());
    for (int i = 0; i < 300; ++i) {
      int a = rank + i, b = rank * i;
      auto req = (*c)->IAllReduce(&a, &a, 1, DataType::kInt32, ReduceOp::kSum);
      ASSERT_TRUE(req.ok());
      ASSERT_TRUE((*c)->AllReduce(&b, &b, 1, DataType::kInt32, ReduceOp::kSum).ok());
      ASSERT_TRUE((*c)->Wait(req->get(), (*c)->Deadline()).ok());
      ASSERT_EQ(a, 1 + 2 * i) << "call " << i;
      ASSERT_EQ(b, i) << "call " << i;
    }
  });
}

// A call refused behind a nonblocking collective still running takes its
// turn after it, without waiting for it: rank 1 joins the iallreduce only
// once rank 0's refused broadcast has returned.
// The CPUs this process may run on.
std::vector<int> AllowedCpus() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  }
  return cpus;
}

// Pins the calling thread (a rank of RunRanks) to `cpu`, as hcomm_run pins
// a process; the rank publishes it at init (Engine::Placement).
bool PinThisThread(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
}

// Ranks pinned round robin to two CPUs (as hcomm_run pins them) run the
// ring allreduce of up to 4 MiB with the ranks of each CPU side by side
// (Communicator::RingByPlacement), and above it in rank order; either way
// every rank gets the same, correct result.
TEST(RingOrderTest, RanksPinnedRoundRobinReduceCorrectlyInEitherOrder) {
  const std::vector<int> cpus = AllowedCpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs to pin ranks to";
  testing::SetTransportMode(testing::TransportMode::kTcp);
  const int n = 5;
  testing::RunRanks(n, [&](int rank, const Options& o) {
    ASSERT_TRUE(PinThisThread(cpus[rank % 2]));
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*c)->ring_order(), (std::vector<int>{0, 2, 4, 1, 3}));
    ASSERT_TRUE((*c)->SetOption("algo", "ring").ok());
    // Past 4 MiB (float32: 1M + 3 elements) the ring keeps the rank order.
    for (size_t count : {size_t{1}, size_t{7}, size_t{1023}, size_t{262147}, size_t{1048579}}) {
      for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          for (bool in_place : {false, true}) {
            const std::string label =
                Label("allreduce", n, Algorithm::kRing, t, op, count, in_place);
            std::vector<char> in = Fill(rank, count, t, op);
            std::vector<char> out(in.size());
            absl::Status s = (*c)->AllReduce(in.data(), in_place ? in.data() : out.data(), count,
                                             t, op);
            ASSERT_TRUE(s.ok()) << label << ": " << s;
            const std::string bad =
                CheckReduced(in_place ? in.data() : out.data(), 0, count, n, t, op);
            ASSERT_EQ(bad, "") << label;
          }
        }
      }
    }
    // A group has an order of its own: world ranks 1-4 sit on CPUs 1, 0,
    // 1, 0; the even world ranks all on one CPU, in rank order already.
    auto tail = (*c)->Split(rank == 0 ? 0 : 1, rank);
    ASSERT_TRUE(tail.ok()) << tail.status();
    if (rank == 0) {
      EXPECT_TRUE((*tail)->ring_order().empty());
    } else {
      EXPECT_EQ((*tail)->ring_order(), (std::vector<int>{0, 2, 1, 3}));
      ASSERT_TRUE((*tail)->SetOption("algo", "ring").ok());
      std::vector<char> v = Fill((*tail)->rank(), 1023, DataType::kInt32, ReduceOp::kSum);
      ASSERT_TRUE(
          (*tail)->AllReduce(v.data(), v.data(), 1023, DataType::kInt32, ReduceOp::kSum).ok());
      EXPECT_EQ(CheckReduced(v.data(), 0, 1023, 4, DataType::kInt32, ReduceOp::kSum), "");
    }
    auto parity = (*c)->Split(rank % 2, rank);
    ASSERT_TRUE(parity.ok()) << parity.status();
    EXPECT_TRUE((*parity)->ring_order().empty());
    EXPECT_TRUE((*parity)->Destroy().ok());
    EXPECT_TRUE((*tail)->Destroy().ok());
    EXPECT_TRUE((*c)->Destroy().ok());
  }, /*timeout_ms=*/120000);
  testing::SetTransportMode(testing::TransportMode::kDefault);
}

// Over shared memory the ring keeps the rank order, pinned or not.
TEST(RingOrderTest, RanksThatCanTalkOverSharedMemoryKeepTheRankOrder) {
  const std::vector<int> cpus = AllowedCpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs to pin ranks to";
  testing::SetTransportMode(testing::TransportMode::kShm);
  testing::RunRanks(4, [&](int rank, const Options& o) {
    ASSERT_TRUE(PinThisThread(cpus[rank % 2]));
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE((*c)->ring_order().empty());
    EXPECT_TRUE((*c)->Destroy().ok());
  });
  testing::SetTransportMode(testing::TransportMode::kDefault);
}

TEST(CollectiveErrorsTest, ARejectedCallDoesNotWaitForAnIAllReduceAhead) {
  absl::Notification refused;
  testing::RunRanks(2, [&](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    int32_t a = rank + 1, v = 5, b = rank + 10;
    if (rank == 0) {
      auto req = (*c)->IAllReduce(&a, &a, 1, DataType::kInt32, ReduceOp::kSum);
      ASSERT_TRUE(req.ok()) << req.status();
      absl::Status s = (*c)->Broadcast(&v, 1, DataType::kInt32, 7);
      EXPECT_EQ(CodeOf(s), ErrorCode::kInvalidArgument) << s;
      EXPECT_FALSE((*c)->Test(req->get()));
      refused.Notify();
      ASSERT_TRUE((*c)->Wait(req->get(), (*c)->Deadline()).ok());
    } else {
      refused.WaitForNotification();
      ASSERT_TRUE((*c)->AllReduce(&a, &a, 1, DataType::kInt32, ReduceOp::kSum).ok());
      absl::Status s = (*c)->Broadcast(&v, 1, DataType::kInt32, 0);
      EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << s;
    }
    EXPECT_EQ(a, 3);
    ASSERT_TRUE((*c)->AllReduce(&b, &b, 1, DataType::kInt32, ReduceOp::kSum).ok());
    EXPECT_EQ(b, 21);
  });
}

}  // namespace
}  // namespace hcomm

namespace hcomm {
namespace {

TEST(CollectiveErrorsTest, DifferentCollectivesFailEveryRankWithBothCallsNamed) {
  for (auto mode : {testing::TransportMode::kShm, testing::TransportMode::kTcp}) {
    testing::SetTransportMode(mode);
    testing::RunRanks(4, [](int rank, const Options& o) {
      auto c = Communicator::Init(o);
      ASSERT_TRUE(c.ok()) << c.status();
      ASSERT_TRUE((*c)->Barrier().ok());
      std::vector<int32_t> v(10, rank);
      MonoTime t0 = MonoNow();
      absl::Status s = rank == 2 ? (*c)->Broadcast(v.data(), 10, DataType::kInt32, 1)
                                 : (*c)->AllReduce(v.data(), v.data(), 10, DataType::kInt32,
                                                   ReduceOp::kSum);
      EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << "rank " << rank << ": " << s;
      EXPECT_LT(MonoNow() - t0, absl::Seconds(10)) << "rank " << rank;
      EXPECT_NE(s.message().find("broadcast(count 10 int32 root 1)"), absl::string_view::npos)
          << "rank " << rank << ": " << s;
      EXPECT_NE(s.message().find("allreduce(count 10 int32 sum)"), absl::string_view::npos)
          << "rank " << rank << ": " << s;
      EXPECT_NE(s.message().find("seq 1"), absl::string_view::npos) << s;
      // Stay until every rank has seen it (the next collective still works).
      EXPECT_TRUE((*c)->Barrier().ok());
    });
  }
  testing::SetTransportMode(testing::TransportMode::kDefault);
}

// A call that one rank refuses for its arguments still uses up its
// sequence number there: the others' call fails at once naming that rank,
// and every later call meets the same call on every rank. (It used to
// pair with the next call of the others, and equal calls returned each
// other's data with SUCCESS from then on.) In the shared segment and by
// messages (an algorithm forced, or TCP), also where the ranks check
// every call first (HCOMM_CHECK_COLLECTIVES), and for create_group, which
// runs an allgather.
TEST(CollectiveErrorsTest, ARanksRejectedCallKeepsTheCallsPaired) {
  auto run = [](testing::TransportMode mode, const char* algo) {
    testing::SetTransportMode(mode);
    {
      testing::RunRanks(3, [&](int rank, const Options& o) {
        auto c = Communicator::Init(o);
        ASSERT_TRUE(c.ok()) << c.status();
        ASSERT_TRUE((*c)->SetOption("algo", algo).ok());
        // Ranks whose part of the call is done (a broadcast's root, and a
        // rank the root sends to directly; a reduce's senders) may return
        // before they hear of the rejection; the others fail at once.
        auto check = [&](const absl::Status& s, bool may_succeed, MonoTime t0) {
          if (rank == 1) {
            EXPECT_EQ(CodeOf(s), ErrorCode::kInvalidArgument) << s;
          } else if (!(may_succeed && s.ok())) {
            EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << "rank " << rank << ": " << s;
            EXPECT_NE(s.message().find("rank 1 rejected its call"), absl::string_view::npos)
                << s;
            EXPECT_LT(MonoNow() - t0, absl::Seconds(10)) << "rank " << rank;
          }
        };
        int32_t v = 10 + rank;
        MonoTime t0 = MonoNow();
        absl::Status s = (*c)->Broadcast(&v, 1, DataType::kInt32, rank == 1 ? 3 : 0);
        check(s, true, t0);
        if (rank != 1 && s.ok()) {
          EXPECT_EQ(v, 10);
        }
        t0 = MonoNow();
        s = (*c)->Reduce(&v, &v, 1, DataType::kInt32, ReduceOp::kSum, rank == 1 ? 3 : 0);
        check(s, rank != 0, t0);  // the root needs rank 1's part
        for (int k = 0; k < 3; ++k) {
          int32_t x = 100 * k + rank;
          ASSERT_TRUE((*c)->AllReduce(&x, &x, 1, DataType::kInt32, ReduceOp::kSum).ok());
          EXPECT_EQ(x, 300 * k + 3) << "rank " << rank << ", " << algo << ", call " << k;
        }
        auto g = (*c)->CreateGroup(rank == 2 ? std::vector<int>{0, 0} : std::vector<int>{0, 1});
        EXPECT_EQ(CodeOf(g.status()),
                  rank == 2 ? ErrorCode::kInvalidArgument : ErrorCode::kMismatch)
            << "rank " << rank << ": " << g.status();
        int32_t y = rank;
        ASSERT_TRUE((*c)->AllReduce(&y, &y, 1, DataType::kInt32, ReduceOp::kSum).ok());
        EXPECT_EQ(y, 3) << "rank " << rank << ", " << algo;
      });
    }
    testing::SetTransportMode(testing::TransportMode::kDefault);
  };
  for (auto mode : {testing::TransportMode::kShm, testing::TransportMode::kTcp}) {
    for (const char* algo : {"auto", "ring"}) run(mode, algo);
  }
  ASSERT_EQ(setenv("HCOMM_CHECK_COLLECTIVES", "1", 1), 0);
  run(testing::TransportMode::kTcp, "auto");
  unsetenv("HCOMM_CHECK_COLLECTIVES");
}

}  // namespace
}  // namespace hcomm

namespace hcomm {
namespace {

TEST(HalfPrecisionTest, AccumulatesInFloat32) {
  testing::RunRanks(4, [](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    const float in[4] = {2048, 1, 1, 0};  // fp16 has 11 bits: 2048+1 rounds back to 2048
    for (const char* algo : {"ring", "tree", "direct"}) {
      ASSERT_TRUE((*c)->SetOption("algo", algo).ok());
      for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
        std::vector<uint16_t> v(3);
        for (auto& x : v) x = t == DataType::kFloat16 ? FloatToHalf(in[rank]) : FloatToBFloat16(in[rank]);
        ASSERT_TRUE((*c)->AllReduce(v.data(), v.data(), 3, t, ReduceOp::kSum).ok());
        float got = t == DataType::kFloat16 ? HalfToFloat(v[2]) : BFloat16ToFloat(v[2]);
        // 2050 is exact in fp16; in bf16 (8 bits) it rounds to 2048.
        EXPECT_EQ(got, t == DataType::kFloat16 ? 2050.0f : 2048.0f) << algo << " " << DataTypeName(t);
        uint16_t r = 0;
        uint16_t mine = t == DataType::kFloat16 ? FloatToHalf(in[rank]) : FloatToBFloat16(in[rank]);
        ASSERT_TRUE((*c)->Reduce(&mine, rank == 0 ? &r : nullptr, 1, t, ReduceOp::kSum, 0).ok());
        if (rank == 0 && t == DataType::kFloat16) {
          EXPECT_EQ(HalfToFloat(r), 2050.0f) << algo;
        }
      }
    }
  });
}

// Two ranks, and the direct algorithms at any count, reduce the 16-bit
// vectors as they travel, without float32 copies; the result must still be
// the float32 one, rounded once: 60000 is a float16, the sum of two is not
// (it rounds to infinity), their average is again.
TEST(HalfPrecisionTest, AverageRoundsOnceOnEveryAlgorithm) {
  for (int n : {2, 3}) {
    testing::RunRanks(n, [n](int rank, const Options& o) {
      auto c = Communicator::Init(o);
      ASSERT_TRUE(c.ok()) << c.status();
      const uint16_t big = FloatToHalf(60000.0f);
      for (const char* algo : {"ring", "tree", "direct"}) {
        ASSERT_TRUE((*c)->SetOption("algo", algo).ok());
        SCOPED_TRACE(::testing::Message() << n << " ranks, " << algo);
        std::vector<uint16_t> v(5, big);
        ASSERT_TRUE((*c)->AllReduce(v.data(), v.data(), v.size(), DataType::kFloat16,
                                    ReduceOp::kAvg)
                        .ok());
        for (uint16_t x : v) EXPECT_EQ(HalfToFloat(x), 60000.0f) << "allreduce";
        std::vector<uint16_t> in(2 * n, big);
        std::vector<uint16_t> out(2, 0);
        ASSERT_TRUE((*c)->ReduceScatter(in.data(), out.data(), 2, DataType::kFloat16,
                                        ReduceOp::kAvg)
                        .ok());
        for (uint16_t x : out) EXPECT_EQ(HalfToFloat(x), 60000.0f) << "reduce_scatter";
        uint16_t r = 0;
        ASSERT_TRUE((*c)->Reduce(&big, rank == 1 ? &r : nullptr, 1, DataType::kFloat16,
                                 ReduceOp::kAvg, 1)
                        .ok());
        if (rank == 1) {
          EXPECT_EQ(HalfToFloat(r), 60000.0f) << "reduce";
        }
      }
    });
  }
}

}  // namespace
}  // namespace hcomm

namespace hcomm {
namespace {

// Every rank that times out collects a report at the same moment; each
// must still answer the others' (a rank once answered none while it waited
// for its own report's answers, and showed as "did not answer").
class HangReportTest : public ByTransport {};

TEST_P(HangReportTest, TimeoutNamesWhoNeverEnteredAndWhoWaitsOnWhom) {
  testing::RunRanks(4, [](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE((*c)->Barrier().ok());  // seq 0
    if (rank == 3) {
      // Never enters seq 1; waits until the others have timed out, then
      // lets them go (none leaves before all have timed out: a rank's
      // goodbye would fail another's wait with PEER_FAILURE instead).
      for (int from = 0; from < 3; ++from) {
        int go = 0;
        ASSERT_TRUE((*c)->Recv(&go, sizeof go, 4, from, 5).ok());
      }
      for (int to = 0; to < 3; ++to) {
        int done = 1;
        ASSERT_TRUE((*c)->Send(&done, sizeof done, 4, to, 6).ok());
      }
      return;
    }
    // 5 s: the last fifth is kept for collecting the hang report.
    ASSERT_TRUE((*c)->SetOption("timeout_ms", "5000").ok());
    std::vector<int32_t> v(4, 1);
    absl::Status s = (*c)->AllReduce(v.data(), v.data(), 4, DataType::kInt32, ReduceOp::kSum);
    EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
    EXPECT_NE(s.message().find("rank 3 never entered allreduce(count 4 int32 sum) seq 1"),
              absl::string_view::npos)
        << "rank " << rank << ": " << s;
    // By messages or in the shared-memory segment, whichever the call used.
    EXPECT_TRUE(s.message().find("waits in recv from rank") != absl::string_view::npos ||
                s.message().find("waits in the shared-memory allreduce for rank 3") !=
                    absl::string_view::npos)
        << "rank " << rank << ": " << s;
    for (int other = 0; other < 3; ++other) {
      EXPECT_EQ(s.message().find(absl::StrCat("rank ", other, " did not answer")),
                absl::string_view::npos)
          << "rank " << rank << ": " << s;
    }
    // The time counts from the collective's first wait, whenever the
    // request pending at the end was posted.
    EXPECT_EQ(s.message().find("after 0."), absl::string_view::npos) << s;
    ASSERT_TRUE((*c)->SetOption("timeout_ms", "30000").ok());
    int go = 1;
    ASSERT_TRUE((*c)->Send(&go, sizeof go, 4, 3, 5).ok());
    ASSERT_TRUE((*c)->Recv(&go, sizeof go, 4, 3, 6).ok());
  });
}

// Ranks that disagree only on a root may wait on each other with nothing
// that tells them (over TCP, no message of the other call reaches either):
// the hang report names each rank's call.
TEST(HangReportTest, NamesTheCallsOfRanksThatDisagree) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE((*c)->SetOption("algo", "tree").ok());
    // Each its own root: each waits for the other's part.
    int v[4] = {1, 2, 3, 4};
    absl::Status s = (*c)->Reduce(v, v, 4, DataType::kInt32, ReduceOp::kSum, rank);
    EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
    EXPECT_NE(s.message().find(absl::StrCat(
                  "the ranks disagree on collective seq 0 (this rank called reduce(count 4 "
                  "int32 sum root ", rank, ")")),
              absl::string_view::npos)
        << "rank " << rank << ": " << s;
    EXPECT_NE(s.message().find(absl::StrCat("rank ", 1 - rank, " called reduce(count 4 int32 sum "
                                            "root ", 1 - rank, ") as seq 0 and waits in recv "
                                            "from rank ", rank)),
              absl::string_view::npos)
        << "rank " << rank << ": " << s;
    // Neither leaves while the other still waits (its goodbye would fail
    // that wait with PEER_FAILURE).
    ASSERT_TRUE((*c)->SetOption("timeout_ms", "30000").ok());
    int token = rank;
    ASSERT_TRUE((*c)->Send(&token, sizeof token, 4, 1 - rank, 5).ok());
    ASSERT_TRUE((*c)->Recv(&token, sizeof token, 4, 1 - rank, 5).ok());
  }, /*timeout_ms=*/2000);
}

// A large collective has a receive pending per chunk: the report counts
// them rather than listing each (it once ran to tens of kilobytes).
TEST(HangReportTest, CountsTheChunksALargeCollectiveWaitsFor) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  testing::RunRanks(3, [](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    int token = 0;
    if (rank == 2) {  // the root never comes; it lets the others go at the end
      ASSERT_TRUE((*c)->SetOption("timeout_ms", "30000").ok());
      for (int from : {0, 1}) ASSERT_TRUE((*c)->Recv(&token, sizeof token, 4, from, 5).ok());
      for (int to : {0, 1}) ASSERT_TRUE((*c)->Send(&token, sizeof token, 4, to, 6).ok());
      return;
    }
    std::vector<char> v(16 << 20);
    absl::Status s = (*c)->Broadcast(v.data(), v.size(), DataType::kInt8, 2);
    EXPECT_EQ(CodeOf(s), ErrorCode::kTimeout) << s;
    EXPECT_NE(s.message().find(" x recv from rank "), std::string::npos) << s;
    EXPECT_LT(s.message().size(), 2000u) << s;
    ASSERT_TRUE((*c)->SetOption("timeout_ms", "30000").ok());
    ASSERT_TRUE((*c)->Send(&token, sizeof token, 4, 2, 5).ok());
    ASSERT_TRUE((*c)->Recv(&token, sizeof token, 4, 2, 6).ok());
  }, /*timeout_ms=*/2000);
}

INSTANTIATE_TEST_SUITE_P(Transports, HangReportTest,
                         ::testing::Values(testing::TransportMode::kShm,
                                           testing::TransportMode::kTcp),
                         ModeName);

}  // namespace
}  // namespace hcomm

namespace hcomm {
namespace {

TEST(AbortTest, CollectivesFailAfterAbortEvenOnOneRank) {
  Options o;
  o.rank = 0;
  o.world_size = 1;
  auto c = Communicator::Init(o);
  ASSERT_TRUE(c.ok());
  int v = 1;
  ASSERT_TRUE((*c)->AllReduce(&v, &v, 1, DataType::kInt32, ReduceOp::kSum).ok());
  (*c)->Abort();
  EXPECT_EQ(CodeOf((*c)->AllReduce(&v, &v, 1, DataType::kInt32, ReduceOp::kSum)),
            ErrorCode::kAborted);
  EXPECT_EQ(CodeOf((*c)->Barrier()), ErrorCode::kAborted);
}

}  // namespace
}  // namespace hcomm

namespace hcomm {
namespace {

// chunk_bytes sets the pieces the ring moves large operations in: with a
// small one, and sizes that end mid-chunk, every ring collective still
// gives the right answer on two ranks (the pair pipeline) and three.
TEST(ChunkBytesTest, RingCollectivesInSmallChunks) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  for (int n : {2, 3}) {
    testing::RunRanks(n, [n](int rank, const Options& base) {
      Options o = base;
      o.chunk_bytes = 4096;
      o.algo = "ring";
      auto c = Communicator::Init(o);
      ASSERT_TRUE(c.ok()) << c.status();
      const size_t count = 3 * 1024 * n + 7;  // 12 KiB per rank and a bit: chunks and a tail
      std::vector<float> in(count), out(count, -1.0f);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i % 97) + rank);
      const float ranks_sum = static_cast<float>(n * (n - 1) / 2);
      ASSERT_TRUE((*c)->AllReduce(in.data(), out.data(), count, DataType::kFloat32,
                                  ReduceOp::kSum).ok());
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], n * static_cast<float>(i % 97) + ranks_sum) << "allreduce at " << i;
      }
      std::vector<float> b(count, rank == 1 ? 5.0f : 0.0f);
      ASSERT_TRUE((*c)->Broadcast(b.data(), count, DataType::kFloat32, 1).ok());
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(b[i], 5.0f) << "broadcast at " << i;
      std::fill(out.begin(), out.end(), -1.0f);
      ASSERT_TRUE((*c)->Reduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum,
                               0).ok());
      if (rank == 0) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[i], n * static_cast<float>(i % 97) + ranks_sum) << "reduce at " << i;
        }
      }
      const size_t per = count / n;
      std::vector<float> part(per, -1.0f);
      ASSERT_TRUE((*c)->ReduceScatter(in.data(), part.data(), per, DataType::kFloat32,
                                      ReduceOp::kSum).ok());
      for (size_t i = 0; i < per; ++i) {
        const size_t at = rank * per + i;
        ASSERT_EQ(part[i], n * static_cast<float>(at % 97) + ranks_sum) << "reduce_scatter at " << i;
      }
      EXPECT_TRUE((*c)->Destroy().ok());
    });
  }
  testing::SetTransportMode(testing::TransportMode::kDefault);
}

}  // namespace
}  // namespace hcomm

namespace hcomm {
namespace {

// Over TCP a message of a higher priority passes a large one between two
// of its pieces, so frames arrive interleaved: a large message's pieces
// with whole eager messages and other large messages' pieces between them.
// Every message still lands whole, in its own receive.
TEST(PriorityOnTheWireTest, InterleavedFramesLandInTheirOwnReceives) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto c = Communicator::Init(o);
    ASSERT_TRUE(c.ok()) << c.status();
    Communicator& comm = **c;
    const size_t kBulk = 24 << 20, kMid = 600 << 10, kSmall = 1000;
    constexpr int kUrgent = 20;
    auto fill = [](std::string* s, size_t n, int seed) {
      s->resize(n);
      for (size_t i = 0; i < n; ++i) (*s)[i] = static_cast<char>((i * 131 + seed * 7) >> 3);
    };
    std::string bulk, small[kUrgent], mid[kUrgent];
    fill(&bulk, kBulk, 1);
    for (int i = 0; i < kUrgent; ++i) {
      fill(&small[i], kSmall, 100 + i);
      fill(&mid[i], kMid, 200 + i);
    }
    if (rank == 0) {
      auto big = comm.Isend(bulk.data(), kBulk, 1, 1, /*tag=*/1);
      ASSERT_TRUE(big.ok()) << big.status();
      std::thread urgent([&] {
        PriorityScope scope(10);
        for (int i = 0; i < kUrgent; ++i) {
          ASSERT_TRUE(comm.Send(small[i].data(), kSmall, 1, 1, /*tag=*/2).ok());
          ASSERT_TRUE(comm.Send(mid[i].data(), kMid, 1, 1, /*tag=*/3).ok());
        }
      });
      urgent.join();
      EXPECT_TRUE(comm.Wait(big->get(), MonoNow() + absl::Seconds(60)).ok());
    } else {
      std::string got_bulk(kBulk, '\0');
      auto big = comm.Irecv(got_bulk.data(), kBulk, 1, 0, /*tag=*/1);
      ASSERT_TRUE(big.ok()) << big.status();
      for (int i = 0; i < kUrgent; ++i) {
        std::string s(kSmall, '\0'), m(kMid, '\0');
        ASSERT_TRUE(comm.Recv(s.data(), kSmall, 1, 0, 2).ok());
        ASSERT_TRUE(comm.Recv(m.data(), kMid, 1, 0, 3).ok());
        EXPECT_EQ(s, small[i]) << "small message " << i;
        EXPECT_EQ(m, mid[i]) << "medium message " << i;
      }
      EXPECT_TRUE(comm.Wait(big->get(), MonoNow() + absl::Seconds(60)).ok());
      EXPECT_TRUE(got_bulk == bulk) << "the large message arrived damaged";
    }
    EXPECT_TRUE(comm.Destroy().ok());
  }, /*timeout_ms=*/120000);
  testing::SetTransportMode(testing::TransportMode::kDefault);
}

}  // namespace
}  // namespace hcomm
