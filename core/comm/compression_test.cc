// Compression on the wire (core/comm/wire_codec.h): float32 collectives and
// point-to-point messages as fp16 / bf16 over TCP stay within the bound of
// algorithms/kernels/half.h, values that do not fit travel exactly, other
// types and shared-memory links are never touched, and ranks whose settings
// differ fail with Mismatch instead of reading each other's pieces wrongly.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "algorithms/kernels/reduce.h"
#include "core/base/status.h"
#include "core/comm/communicator.h"
#include "gtest/gtest.h"
#include "testing/multirank.h"

namespace hcomm {
namespace {

// Rank r's value i: spread over several binades, both signs.
float Value(int r, size_t i) {
  const uint32_t h = static_cast<uint32_t>(i * 2654435761u + r * 40503u);
  return (static_cast<float>(h % 20001) - 10000.0f) / 64.0f * (1 + (h >> 20) % 4);
}

// |got - want| within the bound of half.h for a sum over n ranks with h
// roundings on the way and u the format's unit (no subnormals here).
void ExpectWithin(const std::vector<float>& got, const std::vector<double>& want,
                  const std::vector<double>& abs_sum, double u, int h, int n,
                  const std::string& label) {
  const double g = std::pow(1 + u, h) * std::pow(1 + std::ldexp(1.0, -24), n - 1) - 1;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - want[i]), g * abs_sum[i] + 1e-30)
        << label << " element " << i << " got " << got[i] << " want " << want[i];
  }
}

using Case = std::tuple<const char*, Algorithm>;

class CompressedCollectivesTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { testing::SetTransportMode(testing::TransportMode::kTcp); }
  void TearDown() override { testing::SetTransportMode(testing::TransportMode::kDefault); }
};

TEST_P(CompressedCollectivesTest, WithinTheBound) {
  const std::string format = std::get<0>(GetParam());
  const Algorithm algo = std::get<1>(GetParam());
  const double u = format == "fp16" ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  constexpr int n = 3;
  testing::RunRanks(n, [&](int rank, const Options& o) {
    auto made = Communicator::Init(o);
    ASSERT_TRUE(made.ok()) << made.status();
    Communicator& c = **made;
    ASSERT_TRUE(c.SetOption("compression", format).ok());
    ASSERT_TRUE(c.SetOption("algo", AlgorithmName(algo)).ok());
    const std::string label = absl::StrCat(format, " ", AlgorithmName(algo), " rank ", rank);
    // Sizes below, at and above a ring chunk, and an odd count.
    for (size_t count : {size_t{1}, size_t{1001}, size_t{300000}}) {
      std::vector<float> mine(count), got(count);
      std::vector<double> sum(count, 0), abs_sum(count, 0);
      for (size_t i = 0; i < count; ++i) mine[i] = Value(rank, i);
      for (int q = 0; q < n; ++q) {
        for (size_t i = 0; i < count; ++i) {
          sum[i] += Value(q, i);
          abs_sum[i] += std::fabs(Value(q, i));
        }
      }
      absl::Status s = c.AllReduce(mine.data(), got.data(), count, DataType::kFloat32,
                                   ReduceOp::kSum);
      ASSERT_TRUE(s.ok()) << label << ": " << s;
      // Each contribution is rounded at most once per hop plus once for the
      // result's trip back: n roundings.
      ExpectWithin(got, sum, abs_sum, u, n, n, absl::StrCat(label, " allreduce ", count));
      if (algo == Algorithm::kRing) {
        // Every rank ends with the same bits (a result piece is rounded in
        // place as its receivers see it). (Not so for tree and direct:
        // docs/compression.md.)
        uint64_t h = 1469598103934665603ull;
        for (float v : got) {
          uint32_t b;
          memcpy(&b, &v, 4);
          h = (h ^ b) * 1099511628211ull;
        }
        std::vector<uint64_t> all(n);
        ASSERT_TRUE(c.AllGather(&h, all.data(), 1, DataType::kUint64).ok());
        for (int q = 0; q < n; ++q) EXPECT_EQ(all[q], h) << label << " rank " << q << " differs";
      }
      if (count == 300000) {
        // It did travel compressed: errors larger than float32 alone makes.
        size_t rounded = 0;
        for (size_t i = 0; i < count; ++i) {
          rounded += std::fabs(got[i] - sum[i]) > std::ldexp(abs_sum[i], -20);
        }
        EXPECT_GT(rounded, count / 10) << label;
      }

      std::fill(got.begin(), got.end(), 0.0f);
      s = c.Reduce(mine.data(), got.data(), count, DataType::kFloat32, ReduceOp::kSum, 1);
      ASSERT_TRUE(s.ok()) << label << ": " << s;
      if (rank == 1) ExpectWithin(got, sum, abs_sum, u, n, n, absl::StrCat(label, " reduce"));

      // One rounding for what others send, none for the root's own.
      std::vector<float> b = mine;
      s = c.Broadcast(b.data(), count, DataType::kFloat32, 2);
      ASSERT_TRUE(s.ok()) << label << ": " << s;
      std::vector<double> want(count), mag(count);
      for (size_t i = 0; i < count; ++i) {
        want[i] = Value(2, i);
        mag[i] = std::fabs(want[i]);
      }
      ExpectWithin(b, want, mag, u, 1, 1, absl::StrCat(label, " broadcast"));

      std::vector<float> all(count * n);
      s = c.AllGather(mine.data(), all.data(), count, DataType::kFloat32);
      ASSERT_TRUE(s.ok()) << label << ": " << s;
      for (int q = 0; q < n; ++q) {
        std::vector<float> part(all.begin() + q * count, all.begin() + (q + 1) * count);
        for (size_t i = 0; i < count; ++i) {
          want[i] = Value(q, i);
          mag[i] = std::fabs(want[i]);
        }
        // Forwarded unchanged after its one rounding: re-encoding is exact.
        ExpectWithin(part, want, mag, u, q == rank ? 0 : 1, 1, absl::StrCat(label, " allgather"));
      }

      std::vector<float> in(count * n), out(count);
      std::vector<double> rs(count, 0), rs_abs(count, 0);
      for (int q = 0; q < n * static_cast<int>(count); ++q) in[q] = Value(rank + 7, q);
      for (int q = 0; q < n; ++q) {
        for (size_t i = 0; i < count; ++i) {
          const double v = Value(q + 7, rank * count + i);
          rs[i] += v;
          rs_abs[i] += std::fabs(v);
        }
      }
      s = c.ReduceScatter(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
      ASSERT_TRUE(s.ok()) << label << ": " << s;
      ExpectWithin(out, rs, rs_abs, u, n, n, absl::StrCat(label, " reduce_scatter"));
    }
    EXPECT_TRUE(c.Destroy().ok());
  }, /*timeout_ms=*/120000);
}

INSTANTIATE_TEST_SUITE_P(
    Tcp, CompressedCollectivesTest,
    ::testing::Combine(::testing::Values("fp16", "bf16"),
                       ::testing::Values(Algorithm::kRing, Algorithm::kTree, Algorithm::kDirect)),
    [](const ::testing::TestParamInfo<Case>& info) {
      return absl::StrCat(std::get<0>(info.param), "_", AlgorithmName(std::get<1>(info.param)));
    });

class CompressionTest : public ::testing::Test {
 protected:
  void TearDown() override { testing::SetTransportMode(testing::TransportMode::kDefault); }
};

// Values fp16 cannot hold travel as float32: the sums of integers stay
// exact; other types are never compressed; everything stays exact.
TEST_F(CompressionTest, WhatDoesNotFitOrIsNotFloat32TravelsExactly) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto made = Communicator::Init(o);
    ASSERT_TRUE(made.ok()) << made.status();
    Communicator& c = **made;
    ASSERT_TRUE(c.SetOption("compression", "fp16").ok());
    constexpr size_t kCount = 70000;
    std::vector<float> big(kCount), got(kCount);
    for (size_t i = 0; i < kCount; ++i) big[i] = 100000.0f + static_cast<float>(i);  // > 65504
    ASSERT_TRUE(c.AllReduce(big.data(), got.data(), kCount, DataType::kFloat32, ReduceOp::kSum)
                    .ok());
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(got[i], 2 * big[i]) << i;
    std::vector<int32_t> ints(kCount), isum(kCount);
    for (size_t i = 0; i < kCount; ++i) ints[i] = static_cast<int32_t>(i * 7 + rank);
    ASSERT_TRUE(c.AllReduce(ints.data(), isum.data(), kCount, DataType::kInt32, ReduceOp::kSum)
                    .ok());
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(isum[i], static_cast<int32_t>(i * 14 + 1)) << i;
    // Point to point: too large for fp16, and int32 (same size as float32).
    if (rank == 0) {
      ASSERT_TRUE(c.Send(big.data(), kCount * 4, 4, 1, 5, DataType::kFloat32).ok());
      ASSERT_TRUE(c.Send(ints.data(), kCount * 4, 4, 1, 6, DataType::kInt32).ok());
    } else {
      std::vector<float> f(kCount);
      ASSERT_TRUE(c.Recv(f.data(), kCount * 4, 4, 0, 5).ok());
      ASSERT_EQ(memcmp(f.data(), big.data(), kCount * 4), 0);
      std::vector<int32_t> i32(kCount);
      ASSERT_TRUE(c.Recv(i32.data(), kCount * 4, 4, 0, 6).ok());
      for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(i32[i], static_cast<int32_t>(i * 7)) << i;
    }
    EXPECT_TRUE(c.Destroy().ok());
  });
}

// Point to point over TCP: blocking and nonblocking receives decode, the
// request reports the sender's count, small messages go as they are, and a
// receive buffer too small for the sender's size fails with Mismatch.
TEST_F(CompressionTest, PointToPoint) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto made = Communicator::Init(o);
    ASSERT_TRUE(made.ok()) << made.status();
    Communicator& c = **made;
    ASSERT_TRUE(c.SetOption("compression", rank == 0 ? "bf16" : "none").ok());
    constexpr size_t kCount = 262144;  // 1 MiB of float32
    std::vector<float> x(kCount);
    for (size_t i = 0; i < kCount; ++i) x[i] = Value(3, i);
    const double u = std::ldexp(1.0, -8);
    auto check = [&](const std::vector<float>& got, size_t n, const char* what) {
      for (size_t i = 0; i < n; ++i) {
        ASSERT_LE(std::fabs(got[i] - x[i]), u * std::fabs(x[i])) << what << " element " << i;
      }
    };
    if (rank == 0) {
      ASSERT_TRUE(c.Send(x.data(), kCount * 4, 4, 1, 1, DataType::kFloat32).ok());
      auto r = c.Isend(x.data(), kCount * 4, 4, 1, 2, DataType::kFloat32);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(c.Wait(r->get(), c.Deadline()).ok());
      ASSERT_TRUE(c.Send(x.data(), 200 * 4, 4, 1, 3, DataType::kFloat32).ok());  // small
      ASSERT_TRUE(c.Send(x.data(), kCount * 4, 4, 1, 4, DataType::kFloat32).ok());
      ASSERT_TRUE(c.Send(x.data(), kCount * 4, 4, 1, 5, DataType::kFloat32).ok());
    } else {
      std::vector<float> got(kCount, 0.0f);
      ASSERT_TRUE(c.Recv(got.data(), kCount * 4, 4, 0, 1).ok());
      check(got, kCount, "blocking");
      EXPECT_NE(memcmp(got.data(), x.data(), kCount * 4), 0) << "nothing was rounded";
      std::fill(got.begin(), got.end(), 0.0f);
      auto r = c.Irecv(got.data(), kCount * 4, 4, kAnySource, kAnyTag);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_TRUE(c.Wait(r->get(), c.Deadline()).ok());
      EXPECT_EQ((*r)->out_bytes, kCount * 4);
      EXPECT_EQ((*r)->out_tag, 2);
      check(got, kCount, "nonblocking");
      std::vector<float> small(200);
      ASSERT_TRUE(c.Recv(small.data(), 200 * 4, 4, 0, 3).ok());
      EXPECT_EQ(memcmp(small.data(), x.data(), 200 * 4), 0);
      // Half the buffer: the coded payload would fit, the message does not.
      absl::Status s = c.Recv(got.data(), kCount * 2, 4, 0, 4);
      EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << s;
      EXPECT_NE(std::string(s.message()).find("exceeds the receive buffer"), std::string::npos)
          << s;
      // The communicator goes on.
      ASSERT_TRUE(c.Recv(got.data(), kCount * 4, 4, 0, 5).ok());
      check(got, kCount, "after the error");
    }
    EXPECT_TRUE(c.Destroy().ok());
  });
}

// Over shared memory nothing is compressed: results are exact.
TEST_F(CompressionTest, SharedMemoryStaysExact) {
  testing::SetTransportMode(testing::TransportMode::kShm);
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto made = Communicator::Init(o);
    ASSERT_TRUE(made.ok()) << made.status();
    Communicator& c = **made;
    ASSERT_TRUE(c.SetOption("compression", "fp16").ok());
    ASSERT_TRUE(c.SetOption("algo", "ring").ok());
    EXPECT_FALSE(c.CompressesTo(1 - rank));
    constexpr size_t kCount = 100000;
    std::vector<float> mine(kCount), got(kCount);
    for (size_t i = 0; i < kCount; ++i) mine[i] = Value(rank, i);
    ASSERT_TRUE(c.AllReduce(mine.data(), got.data(), kCount, DataType::kFloat32, ReduceOp::kSum)
                    .ok());
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(got[i], Value(0, i) + Value(1, i)) << i;
    if (rank == 0) {
      ASSERT_TRUE(c.Send(mine.data(), kCount * 4, 4, 1, 1, DataType::kFloat32).ok());
    } else {
      ASSERT_TRUE(c.Recv(got.data(), kCount * 4, 4, 0, 1).ok());
      for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(got[i], Value(0, i)) << i;
    }
    EXPECT_TRUE(c.Destroy().ok());
  });
}

// Ranks with different settings fail the collective with Mismatch naming
// the wire format, and do not hang.
TEST_F(CompressionTest, RanksThatDisagreeGetMismatch) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  testing::RunRanks(3, [](int rank, const Options& o) {
    auto made = Communicator::Init(o);
    ASSERT_TRUE(made.ok()) << made.status();
    Communicator& c = **made;
    ASSERT_TRUE(c.SetOption("compression", rank == 1 ? "fp16" : "none").ok());
    ASSERT_TRUE(c.SetOption("timeout_ms", "20000").ok());
    std::vector<float> v(5000, 1.0f), got(5000);
    absl::Status s = c.AllReduce(v.data(), got.data(), v.size(), DataType::kFloat32,
                                 ReduceOp::kSum);
    EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << "rank " << rank << ": " << s;
    EXPECT_NE(std::string(s.message()).find("fp16 on the wire"), std::string::npos) << s;
    // Agreeing again, the next collective works.
    ASSERT_TRUE(c.SetOption("compression", "none").ok());
    s = c.AllReduce(v.data(), got.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    EXPECT_TRUE(s.ok()) << s;
    if (s.ok()) EXPECT_EQ(got[0], 3.0f);
    EXPECT_TRUE(c.Destroy().ok());
  });
}

// Changes `pct` percent of v's bytes at places that depend on `round`.
void Mutate(std::vector<uint8_t>& v, int round, int pct) {
  std::mt19937 rng(round);
  const size_t changes = v.size() * pct / 100;
  for (size_t k = 0; k < changes; ++k) v[rng() % v.size()] ^= 1 + rng() % 255;
}

// Repeated sends of similar messages: bit-identical on arrival, as delta
// frames after the first, through blocking and nonblocking calls alike.
TEST_F(CompressionTest, DeltaRepeatedMessagesArriveWhole) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto made = Communicator::Init(o);
    ASSERT_TRUE(made.ok()) << made.status();
    Communicator& c = **made;
    ASSERT_TRUE(c.SetOption("compression", "delta").ok());
    constexpr size_t kBytes = 1 << 20;
    std::vector<uint8_t> msg(kBytes);
    for (size_t i = 0; i < kBytes; ++i) msg[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
    for (int round = 0; round < 12; ++round) {
      Mutate(msg, round, 1);
      if (rank == 0) {
        if (round % 2 == 0) {
          ASSERT_TRUE(c.Send(msg.data(), kBytes, 1, 1, 7).ok());
        } else {
          auto r = c.Isend(msg.data(), kBytes, 1, 1, 7);
          ASSERT_TRUE(r.ok()) << r.status();
          ASSERT_TRUE(c.Wait(r->get(), c.Deadline()).ok());
        }
      } else {
        std::vector<uint8_t> got(kBytes + 100, 0xee);
        if (round % 3 == 0) {
          ASSERT_TRUE(c.Recv(got.data(), got.size(), 1, 0, 7).ok());
        } else {
          auto r = c.Irecv(got.data(), got.size(), 1, kAnySource, 7);
          ASSERT_TRUE(r.ok()) << r.status();
          ASSERT_TRUE(c.Wait(r->get(), c.Deadline()).ok()) << round;
          EXPECT_EQ((*r)->out_bytes, kBytes);
          EXPECT_EQ(CodingOf((*r)->out_fingerprint),
                    round == 0 ? WireCoding::kDeltaFull : WireCoding::kDeltaFrame)
              << round;
        }
        ASSERT_EQ(memcmp(got.data(), msg.data(), kBytes), 0) << "round " << round;
      }
    }
    if (rank == 0) {
      EXPECT_EQ(c.delta_state().kept_for_sending(), kBytes);
    } else {
      EXPECT_EQ(c.delta_state().kept_received(), kBytes);
    }
    EXPECT_TRUE(c.Destroy().ok());
  });
}

// More keys than delta_cache_bytes holds: the sender drops its least
// recently used bases and tells the receiver; every message still arrives
// whole, and neither side keeps more than its bound.
TEST_F(CompressionTest, DeltaStaysWithinItsMemory) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto made = Communicator::Init(o);
    ASSERT_TRUE(made.ok()) << made.status();
    Communicator& c = **made;
    ASSERT_TRUE(c.SetOption("compression", "delta").ok());
    constexpr size_t kBytes = 256 * 1024;
    ASSERT_TRUE(c.SetOption("delta_cache_bytes", std::to_string(2 * kBytes + 1000)).ok());
    std::vector<std::vector<uint8_t>> msgs(5, std::vector<uint8_t>(kBytes));
    for (int k = 0; k < 5; ++k) {
      for (size_t i = 0; i < kBytes; ++i) msgs[k][i] = static_cast<uint8_t>(i * (k + 3));
    }
    for (int round = 0; round < 4; ++round) {
      for (int k = 0; k < 5; ++k) {
        // Tags 0 and 1 come every time (they stay), 2..4 take turns.
        if (k >= 2 && k != 2 + round % 3) continue;
        Mutate(msgs[k], round * 10 + k, 1);
        if (rank == 0) {
          ASSERT_TRUE(c.Send(msgs[k].data(), kBytes, 1, 1, k).ok());
          EXPECT_LE(c.delta_state().kept_for_sending(), 2 * kBytes + 1000);
        } else {
          std::vector<uint8_t> got(kBytes);
          ASSERT_TRUE(c.Recv(got.data(), kBytes, 1, 0, k).ok());
          ASSERT_EQ(memcmp(got.data(), msgs[k].data(), kBytes), 0) << round << " " << k;
          EXPECT_LE(c.delta_state().kept_received(), 2 * (2 * kBytes + 1000));
        }
      }
    }
    // A message of another size on a kept key, then the old size again.
    std::vector<uint8_t> other(kBytes / 2, 9);
    if (rank == 0) {
      ASSERT_TRUE(c.Send(other.data(), other.size(), 1, 1, 0).ok());
      ASSERT_TRUE(c.Send(msgs[0].data(), kBytes, 1, 1, 0).ok());
    } else {
      std::vector<uint8_t> got(kBytes);
      ASSERT_TRUE(c.Recv(got.data(), kBytes, 1, 0, 0).ok());
      ASSERT_EQ(memcmp(got.data(), other.data(), other.size()), 0);
      ASSERT_TRUE(c.Recv(got.data(), kBytes, 1, 0, 0).ok());
      ASSERT_EQ(memcmp(got.data(), msgs[0].data(), kBytes), 0);
    }
    EXPECT_TRUE(c.Destroy().ok());
  });
}

// A receive too small for a delta-coded message fails with Mismatch; the
// receiver tells the sender, whose next message on the key goes whole.
TEST_F(CompressionTest, DeltaRecoversFromALostBase) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  testing::RunRanks(2, [](int rank, const Options& o) {
    auto made = Communicator::Init(o);
    ASSERT_TRUE(made.ok()) << made.status();
    Communicator& c = **made;
    ASSERT_TRUE(c.SetOption("compression", "delta").ok());
    constexpr size_t kBytes = 512 * 1024;
    std::vector<uint8_t> msg(kBytes, 3);
    char go = 1;
    for (int round = 0; round < 4; ++round) {
      Mutate(msg, round, 1);
      if (rank == 0) {
        ASSERT_TRUE(c.Send(msg.data(), kBytes, 1, 1, 2).ok());
        ASSERT_TRUE(c.Recv(&go, 1, 1, 1, 99).ok());
      } else {
        std::vector<uint8_t> got(kBytes);
        // Round 1's receive is too small: that message is lost to it.
        absl::Status s = c.Recv(got.data(), round == 1 ? kBytes / 4 : kBytes, 1, 0, 2);
        if (round == 1) {
          EXPECT_EQ(CodeOf(s), ErrorCode::kMismatch) << s;
        } else {
          ASSERT_TRUE(s.ok()) << "round " << round << ": " << s;
          ASSERT_EQ(memcmp(got.data(), msg.data(), kBytes), 0) << round;
        }
        ASSERT_TRUE(c.Send(&go, 1, 1, 0, 99).ok());
      }
    }
    EXPECT_TRUE(c.Destroy().ok());
  });
}

// Broadcasts of similar messages go as deltas and arrive whole, also when
// one rank keeps no bases (the others notice and the root sends it whole).
TEST_F(CompressionTest, DeltaBroadcast) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  testing::RunRanks(3, [](int rank, const Options& o) {
    auto made = Communicator::Init(o);
    ASSERT_TRUE(made.ok()) << made.status();
    Communicator& c = **made;
    ASSERT_TRUE(c.SetOption("compression", "delta").ok());
    constexpr size_t kBytes = 1 << 20;
    std::vector<std::vector<uint8_t>> msgs(2, std::vector<uint8_t>(kBytes));
    for (int k = 0; k < 2; ++k) {
      for (size_t i = 0; i < kBytes; ++i) msgs[k][i] = static_cast<uint8_t>(i * (7 + k));
    }
    for (int round = 0; round < 8; ++round) {
      if (round == 5 && rank == 2) ASSERT_TRUE(c.SetOption("delta_cache_bytes", "0").ok());
      const int root = round % 2;
      Mutate(msgs[root], round, 1);
      std::vector<uint8_t> buf = rank == root ? msgs[root] : std::vector<uint8_t>(kBytes, 0);
      absl::Status s = c.Broadcast(buf.data(), kBytes, DataType::kUint8, root);
      ASSERT_TRUE(s.ok()) << "round " << round << ": " << s;
      ASSERT_EQ(memcmp(buf.data(), msgs[root].data(), kBytes), 0) << "round " << round;
      // Float32 data broadcasts as deltas too when fp16 is off.
      std::vector<float> f(70000, static_cast<float>(round));
      ASSERT_TRUE(c.Broadcast(f.data(), f.size(), DataType::kFloat32, 2).ok());
      ASSERT_EQ(f[69999], static_cast<float>(round));
    }
    EXPECT_TRUE(c.Destroy().ok());
  });
}

}  // namespace
}  // namespace hcomm
