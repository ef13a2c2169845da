// Collectives through one shared-memory segment per communicator, for
// communicators whose ranks all share a host.
//
// Instead of messages, every rank copies its input into its own slot of the
// segment and raises a counter; once all have arrived, the data is reduced
// straight from the slots. Small vectors: every rank reduces all slots (in
// rank order, so all get the same bits) into its output; one round of
// counters. Large ones go in segments of kSegmentBytes: rank r reduces
// slice r of every rank's segment into a shared result, raises a second
// counter, and every rank copies the whole result out (a rank copies into its
// slot only what the others reduce, and reads its own slice in place).
// Slots and results are double-buffered by the parity of a per-segment
// generation, and a rank arrives at generation g only after it has finished
// with generation g-1, so the counters alone make the reuse safe. The
// segment stays in cache; each rank reads its input and writes its output
// once.
//
//   HCOMM_ASSIGN_OR_RETURN(auto sc, ShmCollective::Create(name, rank, n));  // rank 0
//   ... every rank ... ShmCollective::Open(name, rank, n); then rank 0 Unlink().
//   sc->Enter(seq, fp);                                       // every collective
//   HCOMM_RETURN_IF_ERROR(sc->AllReduce(in, out, count, t, op, seq, fp, waiter));
//
// THREAD SAFETY: one collective at a time per communicator (the caller's
// ticket order guarantees it).
#ifndef HCOMM_CORE_SHM_COLLECTIVE_H_
#define HCOMM_CORE_SHM_COLLECTIVE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "algorithms/reduce.h"

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
};

class ShmCollective {
 public:
  // Bytes of one rank's input moved per round of the large path; also the
  // largest vector the small path takes.
  static constexpr size_t kSegmentBytes = 1024 * 1024;
  // Vectors up to this size take the small path (one round of counters).
  static constexpr size_t kSmallBytes = 8 * 1024;

  // Creates (exclusively) and maps the segment `name` for `nranks` ranks.
  static absl::StatusOr<std::unique_ptr<ShmCollective>> Create(const std::string& name, int rank,
                                                               int nranks);
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

 private:
  ShmCollective(std::string name, int rank, int nranks, void* base, size_t bytes);
  static size_t SegmentSize(int nranks);
  char* Slot(int rank, int buf) const;
  char* Result(int buf) const;
  // Waits until every rank's counter (`which`: 0 arrive, 1 reduce) is at
  // least `gen`; while arriving, also checks each rank's collective.
  absl::Status WaitAll(int which, uint64_t gen, uint64_t seq, uint64_t fingerprint,
                       ShmWaiter& waiter);
  void Publish(int which, uint64_t gen);

  const std::string name_;
  const int rank_;
  const int n_;
  void* base_;
  const size_t bytes_;
  Header* hdr_;
  RankLine* lines_;
  char* data_;
  uint64_t gen_ = 0;  // generations this rank has started
  bool unlinked_ = false;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_SHM_COLLECTIVE_H_
