// Collectives through one shared-memory segment per communicator, for
// communicators whose ranks all share a host.
//
// Instead of messages, every rank copies its input into its own slot of the
// segment and raises a counter; once all have arrived, each takes what it
// needs straight from the others' slots. Data moves in rounds of at most
// a slot (1 MiB) per rank; slots are double-buffered by the parity of a
// per-round generation, and a rank arrives at generation g only after it
// has finished with generation g-1, so the counters alone make the reuse
// safe.
//
// Reductions: small vectors are reduced by every rank from every slot (in
// rank order, so all get the same bits), one round of counters. Large ones:
// rank r reduces slice r of every rank's segment in pieces in private
// memory, copies them into a shared result (and its output), raises a
// second counter, and every rank (reduce: the root) copies the others'
// slices out; a rank copies into its slot only what the others reduce,
// and reads its own slice in place. The segment stays in cache; each rank
// reads its input and writes its output once. Where the ranks may read
// each other's memory, large allreduces can skip the slots: each rank
// reads the others' parts of its slice, and then their reduced slices,
// straight from their buffers by cross-memory attach (EnableCma).
//
// The rest (broadcast, allgather, reduce-scatter, alltoall, gather,
// scatter, barrier) take one round of counters per round of data: every
// rank writes what the others need from it, and reads what it needs.
// Payloads of up to 24 bytes travel in the counter's own cache line.
//
//   HCOMM_ASSIGN_OR_RETURN(auto sc, ShmCollective::Create(name, rank, n));  // rank 0
//   ... every rank ... ShmCollective::Open(name, rank, n); then rank 0 Unlink().
//   sc->Enter(seq, fp);                                       // every collective
//   HCOMM_RETURN_IF_ERROR(sc->AllReduce(in, out, count, t, op, seq, fp, waiter));
//
// Buffers, counts and in-place rules are those of API.md's collectives
// (counts in elements of t, per rank as in NCCL; a root-only buffer is not
// touched elsewhere and may be NULL). Every rank must make the same call
// (Enter's fingerprint tells a clash from a delay).
//
// THREAD SAFETY: one collective at a time per communicator (the caller's
// ticket order guarantees it).
#ifndef HCOMM_ALGORITHMS_SHM_COLLECTIVE_H_
#define HCOMM_ALGORITHMS_SHM_COLLECTIVE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "algorithms/kernels/reduce.h"
#include "algorithms/kernels/shared_copy.h"

namespace hcomm {

// What a rank does while it waits for the others.
class ShmWaiter {
 public:
  virtual ~ShmWaiter() = default;
  // Called every millisecond or so while the communicator ranks in
  // `missing` have not yet reached `phase` ("arrive" or "reduce"). A non-OK
  // status (timeout, dead peer, abort) ends the collective with it.
  virtual absl::Status StillWaiting(const std::vector<int>& missing, const char* phase) = 0;
  // Rank `rank` entered this collective's sequence number with fingerprint
  // `their_fp`, not ours: the status to fail with.
  virtual absl::Status Clash(int rank, uint64_t their_fp) = 0;
  // Whether to give the CPU away between looks (ranks outnumber CPUs).
  virtual bool ShareCpu() const = 0;
  // Called before every round's wait, so that a collective moving much data
  // stops within a round of an abort, or of a member's failure, instead of
  // running to its end: non-OK ends the collective with it. Cheap.
  virtual absl::Status Interrupted() = 0;
};

class ShmCollective {
 public:
  // Bytes of one rank's slot: what a round of the large path moves per
  // rank. Where /dev/shm has no room for slots of kSlotBytes, Create takes
  // the largest power of two down to kMinSlotBytes that fits (slot_bytes()).
  static constexpr size_t kSlotBytes = 1024 * 1024;
  static constexpr size_t kMinSlotBytes = 64 * 1024;
  // Vectors up to this size take the small path (one round of counters).
  static constexpr size_t kSmallBytes = 8 * 1024;

  // Creates (exclusively) and maps the segment `name` for `nranks` ranks,
  // its pages reserved in /dev/shm, with slots of `most_slot_bytes` (a
  // power of two from kMinSlotBytes to kSlotBytes; tests take less) or the
  // largest smaller ones that fit; OUT_OF_MEM where not even kMinSlotBytes
  // fit.
  static absl::StatusOr<std::unique_ptr<ShmCollective>> Create(
      const std::string& name, int rank, int nranks, size_t most_slot_bytes = kSlotBytes);
  // Maps the segment another rank created, checking its layout.
  static absl::StatusOr<std::unique_ptr<ShmCollective>> Open(const std::string& name, int rank,
                                                             int nranks);
  ~ShmCollective();

  struct Header;
  struct RankLine;

  // Removes the name (the mappings stay).
  void Unlink();

  // Says which collective this rank is in (every collective, whatever path
  // it takes), so that a rank waiting here can tell a clash from a delay.
  void Enter(uint64_t seq, uint64_t fingerprint);

  // out = op over all ranks' `in` (count elements of t; in == out allowed).
  absl::Status AllReduce(const void* in, void* out, size_t count, DataType t, ReduceOp op,
                         uint64_t seq, uint64_t fingerprint, ShmWaiter& waiter);
  // The same into the root's `out` only.
  absl::Status Reduce(const void* in, void* out, size_t count, DataType t, ReduceOp op, int root,
                      uint64_t seq, uint64_t fingerprint, ShmWaiter& waiter);
  // The root's `bytes` bytes of `buf` into every rank's `buf`.
  absl::Status Broadcast(void* buf, size_t bytes, int root, uint64_t seq, uint64_t fingerprint,
                         ShmWaiter& waiter);
  // Rank j's `bytes` bytes of `in` to out + j * bytes on every rank (in ==
  // out: this rank's block is already at out + rank * bytes).
  absl::Status AllGather(const void* in, void* out, size_t bytes, uint64_t seq,
                         uint64_t fingerprint, ShmWaiter& waiter);
  // out (count elements) = op over all ranks of block `rank` of `in` (n
  // blocks of count elements); in == out allowed.
  absl::Status ReduceScatter(const void* in, void* out, size_t count, DataType t, ReduceOp op,
                             uint64_t seq, uint64_t fingerprint, ShmWaiter& waiter);
  // Block j of `in` (`bytes` bytes each) to block `rank` of rank j's `out`;
  // in == out allowed.
  absl::Status AllToAll(const void* in, void* out, size_t bytes, uint64_t seq,
                        uint64_t fingerprint, ShmWaiter& waiter);
  // Every rank's `bytes` bytes of `in` to the root's out + rank * bytes
  // (in == out at the root: its block is already there).
  absl::Status Gather(const void* in, void* out, size_t bytes, int root, uint64_t seq,
                      uint64_t fingerprint, ShmWaiter& waiter);
  // Block j of the root's `in` to rank j's `out` (in == out at the root:
  // its block stays where it is).
  absl::Status Scatter(const void* in, void* out, size_t bytes, int root, uint64_t seq,
                       uint64_t fingerprint, ShmWaiter& waiter);
  // Returns once every rank has called it.
  absl::Status Barrier(uint64_t seq, uint64_t fingerprint, ShmWaiter& waiter);

  // Cross-memory attach for large allreduces: each rank reads the others'
  // parts of its slice straight from their inputs with process_vm_readv,
  // reduces them into its output, and then reads the others' reduced
  // slices straight from their outputs: three passes over the data instead
  // of the slots' five (copy in, reduce, copy into the result, copy out of
  // it twice). It needs every rank to be allowed to read every other's
  // memory (one user, no ptrace restriction, one pid namespace): once all
  // ranks have mapped the segment, each calls ProbeCma(), and all pass the
  // value they agree on (true only if every probe passed) to EnableCma.
  // Every rank must have the same setting at each allreduce.
  bool ProbeCma() const;
  void EnableCma(bool on) { cma_ = on; }
  bool cma() const { return cma_; }
  // Allreduces of at least this many bytes go by cross-memory attach once
  // it is enabled.
  static constexpr size_t kCmaMinBytes = 256 * 1024;

  // This rank writes into the segment with `m` only (SharedCopier::Force),
  // instead of the method measured faster: for tests and measurements.
  void ForceCopyMethod(CopyChooser::Method m);
  // How long a waiter asleep on the bell naps before it looks around on its
  // own (at the clock, a peer's health, its waiter); 1 ms. Tests lengthen it
  // to see that an arrival wakes the sleepers.
  void SetNap(absl::Duration nap) { nap_ns_ = absl::ToInt64Nanoseconds(nap); }
  // Whether arrivals are published with light fences (core/base/fence.h): every
  // rank that mapped the segment registered for them.
  bool light_fences() const;
  // How many ranks are asleep on the bell now.
  int Sleepers() const;
  // Bytes of each slot of this segment (kSlotBytes unless /dev/shm was short).
  size_t slot_bytes() const { return slot_bytes_; }

 private:
  // Where HCOMM_SHM_COLL_CMA=1 asks for cross-memory attach, lets the other
  // ranks read this process where Yama restricts ptrace (PR_SET_PTRACER_ANY,
  // once per process); otherwise changes nothing. Called at mapping, so
  // before any rank's ProbeCma.
  static void AllowCmaReadersIfAsked();
  ShmCollective(std::string name, int rank, int nranks, void* base, size_t bytes,
                size_t slot_bytes);
  static size_t SegmentSize(int nranks, size_t slot_bytes);
  // Bytes of one rank's input reduced per round of the large allreduce and
  // reduce: half a slot, so that a round's slots and result stay nearer the
  // cores, which measured faster than whole slots; broadcast, allgather and
  // the rest were no faster in half slots (docs/performance.md, "Half-slot
  // rounds in the segment").
  size_t ReduceRoundBytes() const { return slot_bytes_ / 2; }
  char* Slot(int rank, int buf) const;
  char* Result(int buf) const;
  // Waits until every rank's counter (`which`: 0 arrive, 1 reduce) is at
  // least `gen`; while arriving, also checks each rank's collective.
  // Arriving, also checks that every rank wrote this round in the
  // collective `fingerprint`.
  absl::Status WaitAll(int which, uint64_t gen, uint64_t seq, uint64_t fingerprint,
                       ShmWaiter& waiter);
  absl::Status WaitCounters(int which, uint64_t gen, uint64_t seq, uint64_t fingerprint,
                            ShmWaiter& waiter);
  // Publishes this rank's arrival at round `gen` of collective `fingerprint`.
  void Arrive(uint64_t gen, uint64_t fingerprint);
  void Publish(int which, uint64_t gen);
  // Registers this process for the wake-up handshake's asymmetric fences
  // (core/base/fence.h), or marks the segment for full fences where it cannot.
  void JoinFences();
  // The reductions; root < 0: every rank gets the result.
  absl::Status ReduceTo(const void* in, void* out, size_t count, DataType t, ReduceOp op,
                        int root, uint64_t seq, uint64_t fingerprint, ShmWaiter& waiter);
  // Their calls of up to kSmallBytes, in one round: a function of its own,
  // so that such a call runs none of the large path's setup.
  absl::Status ReduceSmall(const void* in, void* out, size_t count, DataType t, ReduceOp op,
                           int root, uint64_t seq, uint64_t fingerprint, ShmWaiter& waiter);
  // Larger calls, in rounds of slices, each rank reducing its slice.
  absl::Status ReduceLarge(const void* in, void* out, size_t count, DataType t, ReduceOp op,
                           int root, uint64_t seq, uint64_t fingerprint, ShmWaiter& waiter);
  // An allreduce of at least kCmaMinBytes where CMA is enabled.
  absl::Status AllReduceCma(const void* in, void* out, size_t count, DataType t, ReduceOp op,
                            uint64_t seq, uint64_t fingerprint, ShmWaiter& waiter);
  // `n` bytes at `remote` in rank `rank`'s memory into `local`; the error
  // names the rank, the bytes and the collective.
  absl::Status ReadFrom(int rank, uint64_t remote, char* local, size_t n, uint64_t seq) const;
  // allgather (root < 0) and gather: only the ranks that get the blocks
  // read them, and the root writes none.
  absl::Status GatherTo(const void* in, void* out, size_t bytes, int root, uint64_t seq,
                        uint64_t fingerprint, ShmWaiter& waiter);
  // Where rank `rank` puts round data of `bytes` bytes in buffer `buf`: its
  // counter's line when it fits, else its slot at Offset(bytes).
  char* Area(int rank, int buf, size_t bytes) const;
  // Where in each slot and result buffer the current round's `bytes` bytes
  // go: 0, or for rounds of kRotateMinBytes to a quarter slot, the next of
  // the places of that size in the buffer, round after round.
  size_t Offset(size_t bytes) const;
  // One round of the exchange pattern: `write(area)` fills this rank's
  // area (of `bytes` bytes, the most any rank writes in this round), every
  // rank waits for all, then `read(buf)` takes from the areas of parity buf.
  // (Defined, and only used, in shm_collective.cc: `write` and `read` are
  // inlined, a collective of a few bytes costing little more than its calls.)
  template <typename Write, typename Read>  // void write(char* area), void read(int buf)
  absl::Status Round(size_t bytes, Write write, Read read, uint64_t seq, uint64_t fingerprint,
                     ShmWaiter& waiter);
  // memcpy, or around the caches when the call moves more than they hold;
  // `moved` is the bytes one rank reads and writes in the whole call.
  void CopyOut(void* dst, const void* src, size_t n, size_t moved) const;
  // Whether a call that moves `moved` bytes per rank writes its outputs
  // around the caches.
  bool Streams(size_t moved) const;
  // A rank's own block from its input to its output: CopyOut where the two
  // do not overlap, memmove where they do.
  void CopyOwn(void* dst, const void* src, size_t n, size_t moved) const;
  // This rank's private buffer of at least `bytes` bytes.
  char* Stage(size_t bytes);

  const std::string name_;
  const int rank_;
  const int n_;
  void* base_;
  const size_t bytes_;
  const size_t slot_bytes_;
  Header* hdr_;
  RankLine* lines_;
  char* data_;
  bool light_ = false;  // this process uses asymmetric fences (JoinFences)
  uint64_t gen_ = 0;  // generations this rank has started
  int64_t nap_ns_ = 1'000'000;  // see SetNap
  SharedCopier copier_;  // this rank's copies into its slot
  // The large reductions' method where ranks have CPUs of their own, one
  // chooser per class of sizes (a call's time per byte depends on its size
  // as much as on the method): timed over whole calls, which cover the
  // readers' part, so streams count as timed.
  static constexpr int kReduceClasses = 8;
  static int ReduceClass(size_t bytes);  // up to 16 KiB, 64 KiB, ... , more
  std::vector<CopyChooser> reduce_methods_;
  bool cma_ = false;  // EnableCma
  std::vector<char> stage_;  // see Stage
  bool unlinked_ = false;
};

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_SHM_COLLECTIVE_H_
