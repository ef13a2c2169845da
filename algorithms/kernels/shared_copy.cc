#include "algorithms/kernels/shared_copy.h"

#include <string.h>
#include <time.h>

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace hcomm {

namespace shared_copy_internal {
namespace {

#if defined(__SSE2__)
// The aligned middle of a streamed copy: `body` streams the whole steps of
// n bytes from src to dst (`align`-aligned) and returns how many it did.
using StreamBody = size_t (*)(char* dst, const char* src, size_t n);

// memcpy up to dst's next `align` boundary, `body` from there, memcpy of
// the rest, then the fence: the stores are weakly ordered, and must be
// visible before whatever the caller publishes next (a counter, a ring's
// head).
void StreamAligned(void* dst_v, const void* src_v, size_t n, size_t align, StreamBody body) {
  char* dst = static_cast<char*>(dst_v);
  const char* src = static_cast<const char*>(src_v);
  const size_t head = std::min(n, (align - reinterpret_cast<uintptr_t>(dst) % align) % align);
  memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  const size_t done = body(dst, src, n);
  memcpy(dst + done, src + done, n - done);
  _mm_sfence();
}

size_t Stream16(char* dst, const char* src, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  return i;
}
#endif

#if defined(__x86_64__)
__attribute__((target("avx2"))) size_t Stream32(char* dst, const char* src, size_t n) {
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  return i;
}

__attribute__((target("avx512f"))) size_t Stream64(char* dst, const char* src, size_t n) {
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    __m512i a = _mm512_loadu_si512(src + i);
    __m512i b = _mm512_loadu_si512(src + i + 64);
    __m512i c = _mm512_loadu_si512(src + i + 128);
    __m512i d = _mm512_loadu_si512(src + i + 192);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), a);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 64), b);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 128), c);
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i + 192), d);
  }
  return i;
}
#endif

}  // namespace

void StreamCopy16(void* dst, const void* src, size_t n) {
#if defined(__SSE2__)
  StreamAligned(dst, src, n, 16, Stream16);
#else
  memcpy(dst, src, n);
#endif
}

#if defined(__x86_64__)
void StreamCopy32(void* dst, const void* src, size_t n) {
  StreamAligned(dst, src, n, 32, Stream32);
}

void StreamCopy64(void* dst, const void* src, size_t n) {
  StreamAligned(dst, src, n, 64, Stream64);
}

bool CpuHasAvx2() {
  // libgcc's check includes the OS's support for the YMM state (XGETBV).
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

bool CpuHasAvx512f() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
#else
bool CpuHasAvx2() { return false; }
bool CpuHasAvx512f() { return false; }
#endif

}  // namespace shared_copy_internal

void StreamCopy(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  static void (*const copy)(void*, const void*, size_t) =
      shared_copy_internal::CpuHasAvx512f() ? shared_copy_internal::StreamCopy64
      : shared_copy_internal::CpuHasAvx2()  ? shared_copy_internal::StreamCopy32
                                            : shared_copy_internal::StreamCopy16;
  copy(dst, src, n);
#else
  shared_copy_internal::StreamCopy16(dst, src, n);
#endif
}

double CopyChooser::Cost(Method m, double ns_per_byte) const {
  return m == kStream ? stream_bias_ * ns_per_byte : ns_per_byte;
}

double CopyChooser::Estimate(Method m) const {
  const double* s = samples_[m];
  double median;
  switch (filled_[m]) {
    case 1:
      median = s[0];
      break;
    case 2:
      median = (s[0] + s[1]) / 2;
      break;
    default:
      median = std::max(std::min(s[0], s[1]), std::min(std::max(s[0], s[1]), s[2]));
  }
  return Cost(m, median);
}

CopyChooser::Method CopyChooser::Best() const {
  if (filled_[kMemcpy] == 0 || filled_[kStream] == 0) return kMemcpy;
  return Estimate(kStream) < Estimate(kMemcpy) ? kStream : kMemcpy;
}

CopyChooser::Method CopyChooser::Next() {
  const Method best = Best();
  // Stream is first tried right after the first memcpy is timed: a
  // chooser of whole calls may see only a few of them.
  const bool untried = filled_[kMemcpy] > 0 && filled_[kStream] == 0;
  if (!untried && ++since_try_ < interval_) return best;
  since_try_ = 0;
  return best == kMemcpy ? kStream : kMemcpy;
}

void CopyChooser::Record(Method m, double ns_per_byte) {
  if (!warm_) {
    warm_ = true;
    return;
  }
  const Method best = Best();
  if (m != best && filled_[best] > 0) {
    // A try of the slower method: if it lost clearly, try it less often.
    const bool confirmed = Cost(m, ns_per_byte) > kClearMargin * Estimate(best);
    interval_ = confirmed ? std::min(kMaxInterval, 2 * interval_) : kMinInterval;
  }
  samples_[m][next_[m]] = ns_per_byte;
  next_[m] = (next_[m] + 1) % 3;
  filled_[m] = std::min(3, filled_[m] + 1);
}

void CopyBy(CopyChooser::Method m, void* dst, const void* src, size_t n) {
  if (m == CopyChooser::kStream) {
    StreamCopy(dst, src, n);
  } else {
    memcpy(dst, src, n);
  }
}

namespace {
// CLOCK_MONOTONIC in nanoseconds (kernels include nothing else of hcomm).
int64_t NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace

void SharedCopier::CopyTimedOrForced(void* dst, const void* src, size_t n) {
  if (forced_ >= 0) {
    CopyBy(static_cast<CopyChooser::Method>(forced_), dst, src, n);
    return;
  }
  const CopyChooser::Method m = chooser_.Next();
  const int64_t start = NowNs();
  CopyBy(m, dst, src, n);
  chooser_.Record(m, static_cast<double>(NowNs() - start) / static_cast<double>(n));
}

}  // namespace hcomm
