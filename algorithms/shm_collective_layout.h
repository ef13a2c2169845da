// The shared segment's layout (algorithms/ internal), shared by
// shm_collective.cc and shm_collective_cma.cc: its header, one line set per
// rank, and the sizes its rounds are cut by. See shm_collective.h.
#ifndef HCOMM_ALGORITHMS_SHM_COLLECTIVE_LAYOUT_H_
#define HCOMM_ALGORITHMS_SHM_COLLECTIVE_LAYOUT_H_

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "algorithms/kernels/reduce_parts.h"
#include "core/base/fence.h"
#include "algorithms/kernels/shared_copy.h"
#include "core/base/shm_file.h"
#include "core/base/spin.h"
#include "core/base/status.h"
#include "algorithms/shm_collective.h"

namespace hcomm {

constexpr uint64_t kMagic = 0x68636f6d6d534334ULL;  // "hcommSC4": RankLine::pid
constexpr size_t kLine = 64;
constexpr size_t kInlineBytes = 20;
// Outputs are written around the caches (StreamCopy) once all ranks'
// inputs and outputs together pass this (a server's last-level cache):
// more than the caches would keep anyway.
constexpr size_t kStreamTotalBytes = 32 << 20;
// Pieces reduced in private memory before they are copied out: well
// within a CPU's own cache.
constexpr size_t kStageBytes = 64 << 10;
// Rounds of this many bytes and more, up to a quarter slot, move through
// their buffers (Offset). A store into a line that another CPU's cache
// still holds waits for that cache to drop it, and a round kept in one
// place finds every line of it in the readers' caches, read there two
// rounds before. Moved on each round, an area comes back only after both
// of the rank's slots (2 MiB) have passed through those caches, which have
// let its lines go by then. Below 16 KiB moving measured slower (a moved
// round's lines are in no cache near the writer), and so did the large
// allreduce's 512 KiB rounds behind two caches: they stay put
// (docs/performance.md, "Segment rounds in moving places").
constexpr size_t kRotateMinBytes = 16 << 10;
// An allreduce by cross-memory attach reads the others' parts of a slice
// in pieces of about this many bytes in all (per peer at least
// kCmaMinPieceBytes), which stay in the cache while they are reduced.
constexpr size_t kCmaPieceBytes = 256 << 10;
constexpr size_t kCmaMinPieceBytes = 64 << 10;

inline size_t RoundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }


struct ShmCollective::Header {
  uint64_t magic;
  uint64_t nranks;
  uint64_t slot_bytes;
  std::atomic<uint32_t> sleepers;  // ranks asleep on `bell`
  std::atomic<uint32_t> bell;      // futex word: bumped when a counter moves
  // Non-zero once a rank that cannot use asymmetric fences (core/base/fence.h)
  // mapped the segment: every rank then fences fully on both sides.
  std::atomic<uint32_t> fenced;
};

// One per rank, written only by that rank: which collective the rank is in
// (a seqlock: `version` is odd while it changes), how far it has arrived
// (and in which collective each of the two latest rounds was), how far it
// has reduced.
//
// Each counter has a line of its own: the others poll it, and a write to a
// line they hold costs a transfer between cores, so nothing else the owner
// writes may share it.
struct ShmCollective::RankLine {
  alignas(kLine) std::atomic<uint64_t> version;
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> fingerprint;
  alignas(kLine) std::atomic<uint64_t> arrived;
  // Vectors of up to kInlineBytes travel in the counter's own line (one
  // transfer between cores instead of two), double-buffered like the slots.
  unsigned char inline_data[2][kInlineBytes];
  // The fingerprint of the collective that wrote round buffer b, so that
  // ranks in different collectives with the same shape of rounds find out
  // (the line travels anyway).
  std::atomic<uint64_t> round_fp[2];
  alignas(kLine) std::atomic<uint64_t> reduced;
  // Cross-memory attach: the rank's process, where it mapped this segment
  // and a word of its own line for ProbeCma (all three set at mapping),
  // and, for each allreduce by CMA, the call's buffers.
  alignas(kLine) std::atomic<int64_t> pid;
  std::atomic<uint64_t> base;
  std::atomic<uint64_t> probe;
  std::atomic<uint64_t> in;
  std::atomic<uint64_t> out;
};
static_assert(sizeof(ShmCollective::RankLine) == 4 * kLine, "four cache lines per rank");
static_assert(offsetof(ShmCollective::RankLine, round_fp) + 2 * sizeof(uint64_t) <=
                  offsetof(ShmCollective::RankLine, reduced),
              "a round's fingerprints share the counter's line");

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_SHM_COLLECTIVE_LAYOUT_H_
