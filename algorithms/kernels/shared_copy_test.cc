#include "algorithms/kernels/shared_copy.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace hcomm {
namespace {

using Method = CopyChooser::Method;

// Feeds the chooser `copies` copies whose cost per method is given, and
// returns how many of them used each method.
struct Counts {
  int memcpy = 0, stream = 0;
};
Counts Drive(CopyChooser& c, int copies, double memcpy_cost, double stream_cost) {
  Counts n;
  for (int i = 0; i < copies; ++i) {
    const Method m = c.Next();
    (m == CopyChooser::kMemcpy ? n.memcpy : n.stream)++;
    c.Record(m, m == CopyChooser::kMemcpy ? memcpy_cost : stream_cost);
  }
  return n;
}

// Every byte of src to dst, none around it, at every alignment of either
// and lengths around each loop's step.
void CheckCopies(void (*copy)(void*, const void*, size_t)) {
  std::vector<unsigned char> src(4096 + 64), dst(4096 + 128);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  for (size_t so : {0, 1, 15, 16, 33}) {
    for (size_t d : {0, 3, 16, 31, 32, 63}) {
      for (size_t n : {0, 1, 15, 16, 31, 32, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511,
                       1000, 4096}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        copy(dst.data() + d, src.data() + so, n);
        ASSERT_EQ(0, memcmp(dst.data() + d, src.data() + so, n)) << so << " " << d << " " << n;
        for (size_t i = 0; i < d; ++i) ASSERT_EQ(0xEE, dst[i]);
        for (size_t i = d + n; i < dst.size(); ++i) ASSERT_EQ(0xEE, dst[i]) << i;
      }
    }
  }
}

TEST(StreamCopyTest, CopiesEveryByteAtAnyAlignmentAndLength) { CheckCopies(StreamCopy); }

TEST(StreamCopyTest, SixteenByteStoresCopyEveryByte) {
  CheckCopies(shared_copy_internal::StreamCopy16);
}

#if defined(__x86_64__)
TEST(StreamCopyTest, ThirtyTwoByteStoresCopyEveryByte) {
  if (!shared_copy_internal::CpuHasAvx2()) GTEST_SKIP() << "this CPU has no AVX2";
  CheckCopies(shared_copy_internal::StreamCopy32);
}

TEST(StreamCopyTest, SixtyFourByteStoresCopyEveryByte) {
  if (!shared_copy_internal::CpuHasAvx512f()) GTEST_SKIP() << "this CPU has no AVX-512F";
  CheckCopies(shared_copy_internal::StreamCopy64);
}
#endif

TEST(SharedCopierTest, CopiesSmallAndLargeBuffersWhicheverMethodItPicks) {
  SharedCopier copier;
  std::vector<char> src(SharedCopier::kTimedBytes * 3 + 5), dst(src.size() + 1);
  for (int round = 0; round < 40; ++round) {
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 31 + round);
    for (size_t n : {size_t{100}, SharedCopier::kTimedBytes, src.size()}) {
      dst[n] = 'x';
      copier.Copy(dst.data(), src.data(), n);
      ASSERT_EQ(0, memcmp(dst.data(), src.data(), n)) << round << " " << n;
      ASSERT_EQ('x', dst[n]);
    }
  }
}

// Forced, every copy of any size takes the method, and copies every byte.
TEST(SharedCopierTest, ForcedCopiesCopyEveryByte) {
  for (auto m : {CopyChooser::kStream, CopyChooser::kMemcpy}) {
    SharedCopier copier;
    EXPECT_EQ(-1, copier.forced());
    copier.Force(m);
    EXPECT_EQ(m, copier.forced());
    std::vector<char> src(SharedCopier::kTimedBytes + 3), dst(src.size() + 1, 'x');
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 13 + m);
    for (size_t n : {size_t{100}, src.size()}) {
      copier.Copy(dst.data(), src.data(), n);
      ASSERT_EQ(0, memcmp(dst.data(), src.data(), n)) << m << " " << n;
    }
    EXPECT_EQ('x', dst[src.size()]);
  }
}

// With a stream bias of 1 (timings that cover the readers' part), a
// faster stream wins; with the default bias, the same timings keep memcpy.
TEST(CopyChooserTest, StreamBiasDecidesCloseCalls) {
  CopyChooser whole(1.0), writer_only;
  const Counts a = Drive(whole, 200, 0.06, 0.04);
  const Counts b = Drive(writer_only, 200, 0.06, 0.04);
  EXPECT_GT(a.stream, 150);
  EXPECT_GT(b.memcpy, 150);
}

TEST(CopyChooserTest, StartsWithMemcpyAndKeepsItWhileItIsFaster) {
  CopyChooser c;
  // The first copy warms up, and its time is not kept.
  EXPECT_EQ(CopyChooser::kMemcpy, c.Next());
  c.Record(CopyChooser::kMemcpy, 0.03);
  EXPECT_EQ(CopyChooser::kMemcpy, c.Next());
  c.Record(CopyChooser::kMemcpy, 0.03);
  // Stream is timed next, whatever memcpy took.
  EXPECT_EQ(CopyChooser::kStream, c.Next());
  c.Record(CopyChooser::kStream, 0.05);
  EXPECT_EQ(CopyChooser::kMemcpy, c.Next());
  c.Record(CopyChooser::kMemcpy, 0.03);
  // Then one copy in kMinInterval tries the other method; the tries back off as
  // they keep losing clearly.
  const Counts n = Drive(c, 1000, 0.03, 0.05);
  EXPECT_GT(n.memcpy, 960);
  EXPECT_GE(n.stream, 1000 / CopyChooser::kMaxInterval);
  EXPECT_EQ(CopyChooser::kMaxInterval, c.Interval());
}

// The first copy pays for pages touched for the first time: however long
// it took, memcpy keeps winning from the second copy on.
TEST(CopyChooserTest, AColdFirstCopyDoesNotDecide) {
  CopyChooser c(1.0);
  EXPECT_EQ(CopyChooser::kMemcpy, c.Next());
  c.Record(CopyChooser::kMemcpy, 3.0);
  // Stream is only tried: once at once, once after kMinInterval copies.
  const Counts n = Drive(c, 20, 0.03, 0.05);
  EXPECT_EQ(2, n.stream);
  EXPECT_EQ(18, n.memcpy);
}

TEST(CopyChooserTest, SwitchesWithinTwoCopiesWhenMemcpyTurnsSlow) {
  CopyChooser c;
  Drive(c, 200, 0.03, 0.05);
  // The CPUs now sit behind different caches: memcpy 6x slower.
  const Counts n = Drive(c, 3, 0.2, 0.05);
  EXPECT_LE(n.memcpy, 2);
  const Counts later = Drive(c, 500, 0.2, 0.05);
  EXPECT_GT(later.stream, 480);
}

TEST(CopyChooserTest, ComesBackToMemcpyOnceItIsFasterAgain) {
  CopyChooser c;
  Drive(c, 200, 0.03, 0.05);
  Drive(c, 1000, 0.2, 0.05);
  // Back behind one cache: memcpy wins the next tries, within at most two
  // longest intervals, and is kept.
  Drive(c, 2 * CopyChooser::kMaxInterval + CopyChooser::kMinInterval, 0.03, 0.05);
  const Counts n = Drive(c, 500, 0.03, 0.05);
  EXPECT_GT(n.memcpy, 480);
}

TEST(CopyChooserTest, OneSlowCopyDoesNotSwitch) {
  CopyChooser c;
  Drive(c, 200, 0.03, 0.05);
  // A copy cut short by the scheduler (1000x) is one sample of three.
  EXPECT_EQ(CopyChooser::kMemcpy, c.Next());
  c.Record(CopyChooser::kMemcpy, 30.0);
  int memcpys = 0;
  for (int i = 0; i < 5; ++i) {
    const Method m = c.Next();
    memcpys += m == CopyChooser::kMemcpy;
    c.Record(m, m == CopyChooser::kMemcpy ? 0.03 : 0.05);
  }
  EXPECT_GE(memcpys, 4);
}

}  // namespace
}  // namespace hcomm
