// Copies into shared memory that another CPU reads next: a shared-memory
// collective's slots, the shared-memory transport's rings.
//
//   SharedCopier copier;                    // one per writer, not shared
//   copier.Copy(slot, input, bytes);        // memcpy or non-temporal stores
//
// Where the writer's and the reader's CPUs sit behind one cache, memcpy is
// fastest: the reader finds the lines in that cache. Where they sit behind
// different caches (a virtual machine's two CPUs do, for seconds at a time,
// whenever the host places them so: tools/core_probe tells), every store to
// a line that the reader's cache still holds from the last round waits for
// that cache to drop it, and memcpy into a slot takes far longer than
// behind one cache. Non-temporal stores (StreamCopy) write whole lines to
// memory without asking for them first and take as long in both
// placements; the reader then takes the lines from memory, more slowly than
// from a shared cache (measured: docs/performance.md, "Non-temporal copies
// into shared slots").
//
// The placement changes while a job runs, so SharedCopier times its large
// copies and uses the method it measured faster (the median of each
// method's last three timings, so that one copy cut short by the scheduler
// does not switch it; a streamed copy's timing weighs kStreamBias more for
// the reader's part), and now and then times the other method once.
#ifndef HCOMM_ALGORITHMS_KERNELS_SHARED_COPY_H_
#define HCOMM_ALGORITHMS_KERNELS_SHARED_COPY_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hcomm {

// memcpy with non-temporal stores: the destination lines go to memory
// without being read first and without staying in this CPU's caches.
// 64-byte stores where the CPU has AVX-512F, else 32-byte ones where it
// has AVX2 (chosen at run time), else 16-byte ones: each width measured
// faster than the one below it, or level (docs/performance.md,
// "Non-temporal store width").
void StreamCopy(void* dst, const void* src, size_t n);

namespace shared_copy_internal {
// StreamCopy's three loops, for tests: 16-byte stores (SSE2; memcpy where
// the target has none), 32-byte ones, which only a CPU for which
// CpuHasAvx2() may run, and 64-byte ones (CpuHasAvx512f()).
void StreamCopy16(void* dst, const void* src, size_t n);
#if defined(__x86_64__)
void StreamCopy32(void* dst, const void* src, size_t n);
// 64-byte stores (AVX-512F), only for a CPU for which CpuHasAvx512f().
void StreamCopy64(void* dst, const void* src, size_t n);
#endif
bool CpuHasAvx2();
bool CpuHasAvx512f();
}  // namespace shared_copy_internal

// Which of two copy methods to use next, from their measured costs. The
// policy of SharedCopier, apart from the clock, so that tests can drive it;
// ShmCollective also chooses its large reductions' method with one, from
// the time of whole calls.
class CopyChooser {
 public:
  enum Method { kMemcpy = 0, kStream = 1 };

  // `stream_bias`: how much slower than it timed a streamed copy counts
  // (kStreamBias where the timings are of the writer's copies alone, 1
  // where they cover the readers' part too).
  explicit CopyChooser(double stream_bias = kStreamBias) : stream_bias_(stream_bias) {}

  // The method for the next copy: the one measured faster (memcpy first,
  // then stream once, so both are measured), or, every Interval() copies,
  // the other one.
  Method Next();
  // The cost of a copy that Next() chose, in nanoseconds per byte. The
  // first copy's is not kept: it pays for what is touched for the first
  // time (a fresh output's pages, the segment's), many times a warm copy's,
  // and would have memcpy lose tries until three warm ones outvote it
  // (measured: docs/performance.md, "Non-temporal copies into shared slots").
  void Record(Method m, double ns_per_byte);

  // Copies between two tries of the slower method: kMinInterval, doubled
  // (up to kMaxInterval) each time a try confirms the choice by
  // kClearMargin, back to kMinInterval when it does not.
  int Interval() const { return interval_; }
  static constexpr int kMinInterval = 8;
  static constexpr int kMaxInterval = 64;
  static constexpr double kClearMargin = 1.25;
  // A streamed copy counts as this much slower than it timed: its reader
  // takes the lines from memory, not from a cache, a cost the writer's
  // clock does not see (measured: docs/performance.md, "Non-temporal copies
  // into shared slots").
  static constexpr double kStreamBias = 2.0;

 private:
  double Cost(Method m, double ns_per_byte) const;
  // The cost of a method: its last three timings' median, weighed by Cost.
  double Estimate(Method m) const;
  Method Best() const;

  double stream_bias_;
  bool warm_ = false;  // the first copy has been made
  double samples_[2][3] = {};
  int filled_[2] = {};  // samples recorded per method, up to 3
  int next_[2] = {};    // where the next sample goes
  int interval_ = kMinInterval;
  int since_try_ = 0;  // copies since the slower method was last tried
};

// `n` bytes from src to dst with method `m`.
void CopyBy(CopyChooser::Method m, void* dst, const void* src, size_t n);

class SharedCopier {
 public:
  // Copies shorter than this are plain memcpy, untimed: the clock would
  // cost more than the choice saves.
  static constexpr size_t kTimedBytes = 32 * 1024;

  void Copy(void* dst, const void* src, size_t n) {
    if (forced_ < 0 && n < kTimedBytes) {
      memcpy(dst, src, n);  // inline: a ring's small records come here
      return;
    }
    CopyTimedOrForced(dst, src, n);
  }
  // From now on, every copy (of any size) uses `m`, untimed: for tests
  // that must take each path, and for measurements of either.
  void Force(CopyChooser::Method m) { forced_ = m; }
  // The method Force set, or -1 where the copier chooses.
  int forced() const { return forced_; }

 private:
  void CopyTimedOrForced(void* dst, const void* src, size_t n);

  CopyChooser chooser_;
  int forced_ = -1;  // a Method, or -1: choose
};

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_KERNELS_SHARED_COPY_H_
