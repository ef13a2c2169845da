// Tests for delta coding (delta.h): round trips over sizes and amounts of
// change, in place and not; the size of a frame for a 1% change; and frames
// that were truncated, corrupted, crafted or sent for another base or size,
// all of which must be refused without reading or writing out of bounds
// (run under --config=asan to have that checked).
#include "algorithms/kernels/delta.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"

namespace hcomm {
namespace {

using Bytes = std::vector<unsigned char>;

Bytes RandomBytes(size_t n, std::mt19937_64* rng) {
  Bytes v(n);
  for (auto& b : v) b = static_cast<unsigned char>((*rng)());
  return v;
}

// `base` with round(fraction * n) bytes, at distinct random places, changed
// to another value.
Bytes Changed(const Bytes& base, double fraction, std::mt19937_64* rng) {
  Bytes msg = base;
  const size_t n = base.size();
  const size_t want = static_cast<size_t>(fraction * static_cast<double>(n) + 0.5);
  if (want >= n) {
    for (auto& b : msg) b = static_cast<unsigned char>(b ^ (1 + (*rng)() % 255));
    return msg;
  }
  size_t changed = 0;
  while (changed < want) {
    const size_t i = (*rng)() % n;
    if (msg[i] != base[i]) continue;
    msg[i] = static_cast<unsigned char>(base[i] ^ (1 + (*rng)() % 255));
    ++changed;
  }
  return msg;
}

Bytes EncodeOrDie(DeltaCodec* codec, const Bytes& base, const Bytes& msg, int level = 1) {
  Bytes frame(DeltaBound(msg.size()));
  absl::StatusOr<size_t> len =
      codec->Encode(base.data(), msg.data(), msg.size(), frame.data(), frame.size(), level);
  EXPECT_TRUE(len.ok()) << len.status();
  frame.resize(len.ok() ? *len : 0);
  return frame;
}

// Decodes `frame` against `base` into a buffer of exactly base.size() bytes
// of its own (so that ASan sees any write past it).
absl::Status DecodeInto(DeltaCodec* codec, const Bytes& base, const Bytes& frame, Bytes* out) {
  out->assign(base.size(), 0xa5);
  // A copy of exactly frame.size() bytes, for the same reason.
  std::unique_ptr<unsigned char[]> f(new unsigned char[frame.size()]);
  if (!frame.empty()) std::memcpy(f.get(), frame.data(), frame.size());
  return codec->Decode(base.data(), f.get(), frame.size(), out->data(), out->size());
}

bool IsRefusal(const absl::Status& s) { return absl::IsDataLoss(s) || absl::IsInvalidArgument(s); }

class DeltaRoundTrip : public ::testing::TestWithParam<std::tuple<size_t, double>> {};

TEST_P(DeltaRoundTrip, DecodesToTheMessageInPlaceAndNot) {
  const size_t n = std::get<0>(GetParam());
  const double fraction = std::get<1>(GetParam());
  std::mt19937_64 rng(n * 131 + static_cast<size_t>(fraction * 1000));
  const Bytes base = RandomBytes(n, &rng);
  const Bytes msg = Changed(base, fraction, &rng);
  DeltaCodec codec;
  const Bytes frame = EncodeOrDie(&codec, base, msg);
  ASSERT_GE(frame.size(), kDeltaHeaderBytes);
  ASSERT_LE(frame.size(), DeltaBound(n));
  Bytes out;
  ASSERT_TRUE(DecodeInto(&codec, base, frame, &out).ok());
  EXPECT_TRUE(out == msg);
  // In place: the cached base becomes the message.
  Bytes cached = base;
  ASSERT_TRUE(codec.Decode(cached.data(), frame.data(), frame.size(), cached.data(), n).ok());
  EXPECT_TRUE(cached == msg);
  // The free functions (the thread's own codec) read the same frames.
  Bytes frame2(DeltaBound(n));
  absl::StatusOr<size_t> len =
      EncodeDelta(base.data(), msg.data(), n, frame2.data(), frame2.size());
  ASSERT_TRUE(len.ok()) << len.status();
  frame2.resize(*len);
  EXPECT_TRUE(frame2 == frame);
  ASSERT_TRUE(DecodeDelta(base.data(), frame2.data(), frame2.size(), out.data(), n).ok());
  EXPECT_TRUE(out == msg);
  if (fraction == 0 && n >= 4096) {
    EXPECT_LT(frame.size(), n / 100 + 64) << "an unchanged message should cost almost nothing";
  }
}

INSTANTIATE_TEST_SUITE_P(
    SizesAndChanges, DeltaRoundTrip,
    ::testing::Combine(::testing::Values(size_t{0}, size_t{1}, size_t{7}, size_t{64} << 10,
                                         (size_t{64} << 10) + 3, size_t{1} << 20),
                       ::testing::Values(0.0, 0.01, 1.0)),
    [](const auto& info) {
      return "n" + std::to_string(std::get<0>(info.param)) + "_changed" +
             std::to_string(static_cast<int>(std::get<1>(info.param) * 100)) + "pct";
    });

TEST(DeltaTest, OnePercentOf16MiBIsSmall) {
  constexpr size_t n = size_t{16} << 20;
  std::mt19937_64 rng(1);
  const Bytes base = RandomBytes(n, &rng);
  DeltaCodec codec;
  // 1% of the bytes, each at a random place: the hardest kind of 1% change
  // (positions carry the most information).
  const Bytes msg = Changed(base, 0.01, &rng);
  const Bytes frame = EncodeOrDie(&codec, base, msg);
  const double ratio = static_cast<double>(frame.size()) / static_cast<double>(n);
  // 1% of the float32 elements changed in their two low bytes (a small
  // change to a value): sparse updates of a parameter block.
  Bytes msg32 = base;
  for (size_t k = 0; k < n / 4 / 100; ++k) {
    const size_t i = (rng() % (n / 4)) * 4;
    msg32[i] ^= 1;
    msg32[i + 1] ^= static_cast<unsigned char>(rng());
  }
  const Bytes frame32 = EncodeOrDie(&codec, base, msg32);
  const double ratio32 = static_cast<double>(frame32.size()) / static_cast<double>(n);
  std::printf("delta 16 MiB, 1%% of bytes changed at random places: %zu bytes, %.2f%% of n\n",
              frame.size(), 100 * ratio);
  std::printf("delta 16 MiB, 1%% of float32 elements changed: %zu bytes, %.2f%% of n\n",
              frame32.size(), 100 * ratio32);
  ::testing::Test::RecordProperty("ratio_bytes_pct", std::to_string(100 * ratio));
  ::testing::Test::RecordProperty("ratio_floats_pct", std::to_string(100 * ratio32));
  EXPECT_LE(ratio, 0.03);
  EXPECT_LE(ratio32, 0.03);
  Bytes out;
  ASSERT_TRUE(DecodeInto(&codec, base, frame, &out).ok());
  EXPECT_TRUE(out == msg);
  ASSERT_TRUE(DecodeInto(&codec, base, frame32, &out).ok());
  EXPECT_TRUE(out == msg32);
}

TEST(DeltaTest, IncompressibleInputFitsTheBound) {
  DeltaCodec codec;
  std::mt19937_64 rng(2);
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{128} << 10, (size_t{64} << 10) + 3,
                   (size_t{1} << 20) + 17}) {
    const Bytes base(n, 0);
    const Bytes msg = RandomBytes(n, &rng);
    Bytes frame(DeltaBound(n));
    absl::StatusOr<size_t> len =
        codec.Encode(base.data(), msg.data(), n, frame.data(), frame.size());
    ASSERT_TRUE(len.ok()) << n << ": " << len.status();
    frame.resize(*len);
    Bytes out;
    ASSERT_TRUE(DecodeInto(&codec, base, frame, &out).ok());
    EXPECT_TRUE(out == msg);
    // A smaller out_cap: ResourceExhausted, and the codec still works after.
    if (n > 0) {
      Bytes small(n / 2 + kDeltaHeaderBytes);
      absl::StatusOr<size_t> r =
          codec.Encode(base.data(), msg.data(), n, small.data(), small.size());
      EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
    }
  }
  Bytes tiny(kDeltaHeaderBytes - 1);
  const unsigned char one = 1;
  EXPECT_TRUE(
      absl::IsResourceExhausted(codec.Encode(&one, &one, 1, tiny.data(), tiny.size()).status()));
}

// Messages whose XOR with the base makes the most records, or records with
// the longest varints: each still fits DeltaBound at every level and
// decodes exactly.
TEST(DeltaTest, RecordHeavyPatternsFitTheBound) {
  std::mt19937_64 rng(9);
  auto nonzero = [&rng] { return static_cast<unsigned char>(1 + rng() % 255); };
  std::vector<Bytes> xors;
  for (const size_t n : {size_t{5}, size_t{64} << 10, (size_t{200} << 10) + 1}) {
    Bytes a(n), b(n), c(n), d(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = i % 4 == 0 ? nonzero() : 0;           // x 0 0 0: a record each
      b[i] = i % (16384 + 3) < 3 ? 0 : nonzero();  // long literal runs
      c[i] = i % 3 == 0 ? nonzero() : 0;           // x 0 0: no record
      d[i] = (i / 200) % 2 ? nonzero() : 0;        // alternating halves
    }
    xors.insert(xors.end(), {a, b, c, d});
  }
  DeltaCodec codec;
  for (const Bytes& x : xors) {
    const Bytes base = RandomBytes(x.size(), &rng);
    Bytes msg = base;
    for (size_t i = 0; i < x.size(); ++i) msg[i] ^= x[i];
    for (int level : {kDeltaMinLevel, 1, 9}) {
      Bytes frame(DeltaBound(x.size()));
      absl::StatusOr<size_t> len =
          codec.Encode(base.data(), msg.data(), msg.size(), frame.data(), frame.size(), level);
      ASSERT_TRUE(len.ok()) << x.size() << ": " << len.status();
      frame.resize(*len);
      Bytes out;
      ASSERT_TRUE(DecodeInto(&codec, base, frame, &out).ok());
      EXPECT_TRUE(out == msg);
    }
  }
}

TEST(DeltaTest, EveryLevelRoundTrips) {
  std::mt19937_64 rng(3);
  const Bytes base = RandomBytes(200000, &rng);
  const Bytes msg = Changed(base, 0.05, &rng);
  DeltaCodec codec;
  for (int level = kDeltaMinLevel; level <= kDeltaMaxLevel; level += 3) {
    const Bytes frame = EncodeOrDie(&codec, base, msg, level);
    Bytes out;
    ASSERT_TRUE(DecodeInto(&codec, base, frame, &out).ok()) << level;
    EXPECT_TRUE(out == msg) << level;
  }
  Bytes frame(DeltaBound(msg.size()));
  for (int level : {kDeltaMinLevel - 1, kDeltaMaxLevel + 1}) {
    EXPECT_TRUE(absl::IsInvalidArgument(
        codec.Encode(base.data(), msg.data(), msg.size(), frame.data(), frame.size(), level)
            .status()));
  }
}

TEST(DeltaTest, EveryTruncationIsRefused) {
  std::mt19937_64 rng(4);
  DeltaCodec codec;
  for (size_t n : {size_t{0}, size_t{7}, size_t{300000}}) {
    const Bytes base = RandomBytes(n, &rng);
    const Bytes msg = Changed(base, 0.01, &rng);
    const Bytes frame = EncodeOrDie(&codec, base, msg);
    for (size_t len = 0; len < frame.size(); ++len) {
      Bytes cut(frame.begin(), frame.begin() + static_cast<ptrdiff_t>(len));
      Bytes out;
      const absl::Status s = DecodeInto(&codec, base, cut, &out);
      ASSERT_TRUE(absl::IsDataLoss(s)) << "n=" << n << " len=" << len << ": " << s;
    }
    // After all those failures the codec still decodes a whole frame.
    Bytes out;
    ASSERT_TRUE(DecodeInto(&codec, base, frame, &out).ok());
    EXPECT_TRUE(out == msg);
  }
}

TEST(DeltaTest, CorruptedFramesAreRefusedOrDecodeExactly) {
  std::mt19937_64 rng(5);
  DeltaCodec codec;
  int refused = 0, exact = 0;
  for (size_t n : {size_t{7}, size_t{5000}, size_t{200000}}) {
    const Bytes base = RandomBytes(n, &rng);
    for (double fraction : {0.0, 0.01, 1.0}) {
      const Bytes msg = Changed(base, fraction, &rng);
      const Bytes frame = EncodeOrDie(&codec, base, msg);
      for (int trial = 0; trial < 400; ++trial) {
        Bytes bad = frame;
        const int flips = 1 + static_cast<int>(rng() % 3);
        for (int k = 0; k < flips; ++k) {
          bad[rng() % bad.size()] ^= static_cast<unsigned char>(1 + rng() % 255);
        }
        Bytes out;
        const absl::Status s = DecodeInto(&codec, base, bad, &out);
        // A change zstd ignores may still decode to the right message; a
        // wrong message must never be accepted.
        if (s.ok()) {
          ASSERT_TRUE(out == msg) << "n=" << n << " trial " << trial;
          ++exact;
        } else {
          ASSERT_TRUE(absl::IsDataLoss(s)) << s;
          ++refused;
        }
      }
    }
  }
  EXPECT_GT(refused, 3000);
  std::printf("corruptions: %d refused, %d decoded to the right message\n", refused, exact);
}

TEST(DeltaTest, WrongBaseSizeOrHeaderIsRefusedWithAReason) {
  std::mt19937_64 rng(6);
  DeltaCodec codec;
  const Bytes base = RandomBytes(10000, &rng);
  const Bytes msg = Changed(base, 0.01, &rng);
  const Bytes frame = EncodeOrDie(&codec, base, msg);
  Bytes out;

  Bytes other_base = base;
  other_base[1234] ^= 0x10;
  absl::Status s = DecodeInto(&codec, other_base, frame, &out);
  EXPECT_TRUE(absl::IsDataLoss(s));
  EXPECT_TRUE(absl::StrContains(s.message(), "checksum")) << s;

  const Bytes shorter(base.begin(), base.end() - 1);
  s = DecodeInto(&codec, shorter, frame, &out);
  EXPECT_TRUE(absl::IsDataLoss(s));
  EXPECT_TRUE(absl::StrContains(s.message(), "10000")) << s;

  struct Damage {
    size_t at;
    unsigned char value;
    const char* says;
  };
  for (const Damage& d :
       {Damage{0, 'X', "magic"}, Damage{4, 2, "version"}, Damage{6, 1, "reserved"},
        Damage{17, 0, "checksum"}, Damage{kDeltaHeaderBytes, 0, "zstd"}}) {
    Bytes bad = frame;
    bad[d.at] = d.value == bad[d.at] ? static_cast<unsigned char>(d.value + 1) : d.value;
    s = DecodeInto(&codec, base, bad, &out);
    EXPECT_TRUE(absl::IsDataLoss(s)) << d.says << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), d.says)) << s;
  }

  // Bytes after the zstd frame, and a second frame after it.
  Bytes longer = frame;
  longer.push_back(0);
  s = DecodeInto(&codec, base, longer, &out);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  Bytes twice = frame;
  twice.insert(twice.end(), frame.begin() + kDeltaHeaderBytes, frame.end());
  s = DecodeInto(&codec, base, twice, &out);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "after its zstd frame")) << s;
}

// A delta frame made here, not by DeltaCodec: one record per 64 KiB block
// holding the whole block as literals (a valid frame that Encode would not
// write), compressed by a zstd context of its own with the given window.
// What another implementation, or a hostile peer, could send.
Bytes ForeignFrame(const Bytes& xored, int window_log, const Bytes& header_from) {
  Bytes records;
  auto varint = [&records](uint32_t v) {
    for (; v >= 0x80; v >>= 7) records.push_back(static_cast<unsigned char>(v | 0x80));
    records.push_back(static_cast<unsigned char>(v));
  };
  for (size_t at = 0; at < xored.size(); at += 65536) {
    const size_t len = std::min<size_t>(65536, xored.size() - at);
    varint(0);
    varint(static_cast<uint32_t>(len));
    records.insert(records.end(), xored.begin() + static_cast<ptrdiff_t>(at),
                   xored.begin() + static_cast<ptrdiff_t>(at + len));
  }
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, window_log);
  ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 19);
  Bytes z(ZSTD_compressBound(records.size()));
  const size_t len = ZSTD_compress2(c, z.data(), z.size(), records.data(), records.size());
  ZSTD_freeCCtx(c);
  EXPECT_FALSE(ZSTD_isError(len));
  Bytes frame(header_from.begin(), header_from.begin() + kDeltaHeaderBytes);
  frame.insert(frame.end(), z.begin(), z.begin() + static_cast<ptrdiff_t>(len));
  return frame;
}

TEST(DeltaTest, AFrameThatAsksForABigWindowIsRefused) {
  // 4 MiB of data that only a window of 4 MiB compresses well: two copies
  // of 2 MiB of noise.
  constexpr size_t n = size_t{4} << 20;
  std::mt19937_64 rng(7);
  Bytes xored = RandomBytes(n / 2, &rng);
  xored.insert(xored.end(), xored.begin(), xored.end());
  const Bytes base(n, 0);
  DeltaCodec codec;
  const Bytes honest = EncodeOrDie(&codec, base, xored);
  Bytes out;
  ASSERT_TRUE(DecodeInto(&codec, base, honest, &out).ok());
  // The same message compressed with a 2^23 window: a valid zstd frame that
  // the capped decoder must refuse before allocating for it.
  const Bytes big = ForeignFrame(xored, 23, honest);
  absl::Status s = DecodeInto(&codec, base, big, &out);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_LT(big.size(), honest.size());  // the window was used
  // Within the cap, a foreign encoder's frame is fine.
  const Bytes within = ForeignFrame(xored, kDeltaWindowLog, honest);
  EXPECT_TRUE(DecodeInto(&codec, base, within, &out).ok());
  EXPECT_TRUE(out == xored);

  // A hand-made zstd header: window 2^30, content size n, nothing after.
  Bytes crafted(honest.begin(), honest.begin() + kDeltaHeaderBytes);
  // zstd magic; a descriptor byte saying "8-byte content size, a window
  // descriptor follows"; the window descriptor for 2^30.
  const unsigned char zhead[] = {0x28, 0xb5, 0x2f, 0xfd, 0xc0, (30 - 10) << 3};
  crafted.insert(crafted.end(), zhead, zhead + sizeof zhead);
  for (int i = 0; i < 8; ++i) crafted.push_back(static_cast<unsigned char>(n >> (8 * i)));
  crafted.insert(crafted.end(), 64, 0);
  s = DecodeInto(&codec, base, crafted, &out);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
}

TEST(DeltaTest, BadArgumentsAreInvalid) {
  DeltaCodec codec;
  unsigned char a[16] = {}, b[16] = {}, frame[256];
  EXPECT_TRUE(absl::IsInvalidArgument(codec.Encode(nullptr, b, 16, frame, sizeof frame).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(codec.Encode(a, nullptr, 16, frame, sizeof frame).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(codec.Encode(a, b, 16, nullptr, 100).status()));
  // n == 0 needs no base or message.
  absl::StatusOr<size_t> len = codec.Encode(nullptr, nullptr, 0, frame, sizeof frame);
  ASSERT_TRUE(len.ok()) << len.status();
  EXPECT_TRUE(codec.Decode(nullptr, frame, *len, nullptr, 0).ok());

  len = codec.Encode(a, b, 16, frame, sizeof frame);
  ASSERT_TRUE(len.ok());
  unsigned char big[40] = {};
  EXPECT_TRUE(absl::IsInvalidArgument(codec.Decode(nullptr, frame, *len, a, 16)));
  EXPECT_TRUE(absl::IsInvalidArgument(codec.Decode(a, nullptr, *len, a, 16)));
  EXPECT_TRUE(absl::IsInvalidArgument(codec.Decode(a, frame, *len, nullptr, 16)));
  // out overlapping base without being it, or overlapping the frame.
  std::memcpy(big, a, 16);
  EXPECT_TRUE(absl::IsInvalidArgument(codec.Decode(big, frame, *len, big + 4, 16)));
  EXPECT_TRUE(absl::IsInvalidArgument(codec.Decode(a, frame, *len, frame + 2, 16)));
  EXPECT_TRUE(IsRefusal(codec.Decode(a, frame, 0, b, 16)));
  EXPECT_TRUE(codec.Decode(a, frame, *len, b, 16).ok());
}

TEST(DeltaTest, OneCodecServesManySizesAndThreadsHaveTheirOwn) {
  std::mt19937_64 rng(8);
  DeltaCodec codec;
  for (size_t n : {size_t{1} << 20, size_t{3}, size_t{70000}, size_t{0}, size_t{1} << 20}) {
    const Bytes base = RandomBytes(n, &rng);
    const Bytes msg = Changed(base, 0.1, &rng);
    const Bytes frame = EncodeOrDie(&codec, base, msg);
    Bytes out;
    ASSERT_TRUE(DecodeInto(&codec, base, frame, &out).ok());
    EXPECT_TRUE(out == msg);
  }
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &ok] {
      std::mt19937_64 r(100 + t);
      int good = 0;
      for (int round = 0; round < 20; ++round) {
        const Bytes base = RandomBytes(20000 + 1000 * t, &r);
        const Bytes msg = Changed(base, 0.02, &r);
        Bytes frame(DeltaBound(msg.size()));
        absl::StatusOr<size_t> len =
            EncodeDelta(base.data(), msg.data(), msg.size(), frame.data(), frame.size());
        if (!len.ok()) continue;
        Bytes cached = base;
        if (DecodeDelta(cached.data(), frame.data(), *len, cached.data(), cached.size()).ok() &&
            cached == msg) {
          ++good;
        }
      }
      ok[t] = good;
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 20) << "thread " << t;
}

}  // namespace
// EncodeAdvancing leaves the message in the base; DecodeCopying rebuilds
// into the base and hands the same bytes out; both agree with the plain
// calls, also across the 64 KiB blocks and a short last block.
TEST(DeltaTest, AdvancingAndCopyingMatchThePlainCalls) {
  std::mt19937 rng(11);
  for (size_t n : {size_t{65536}, size_t{200000}, size_t{1} << 20}) {
    std::vector<unsigned char> base(n), msg(n);
    for (auto& b : base) b = static_cast<unsigned char>(rng());
    msg = base;
    for (size_t k = 0; k < n / 100; ++k) msg[rng() % n] ^= 1 + rng() % 255;
    std::vector<unsigned char> frame(DeltaBound(n)), frame2(DeltaBound(n));
    absl::StatusOr<size_t> plain = EncodeDelta(base.data(), msg.data(), n, frame.data(),
                                               frame.size());
    ASSERT_TRUE(plain.ok()) << plain.status();
    std::vector<unsigned char> advancing = base;
    absl::StatusOr<size_t> len = EncodeDeltaAdvancing(advancing.data(), msg.data(), n,
                                                      frame2.data(), frame2.size());
    ASSERT_TRUE(len.ok()) << len.status();
    ASSERT_EQ(*len, *plain);
    EXPECT_EQ(memcmp(frame.data(), frame2.data(), *len), 0);
    EXPECT_EQ(advancing, msg) << n;
    std::vector<unsigned char> kept = base, copy(n, 0);
    ASSERT_TRUE(DecodeDeltaCopying(kept.data(), frame.data(), *len, copy.data(), n).ok());
    EXPECT_EQ(kept, msg) << n;
    EXPECT_EQ(copy, msg) << n;
    // A copy overlapping the base or the frame is refused.
    EXPECT_EQ(DecodeDeltaCopying(kept.data(), frame.data(), *len, kept.data() + 1, n).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(DecodeDeltaCopying(kept.data(), frame.data(), *len, frame.data(), n).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace hcomm
