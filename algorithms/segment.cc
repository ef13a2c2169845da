// The shared-segment collectives (shm_collective.h) as rows of the table:
// each runs the call in the communicator's segment instead of by messages.
// A call of count 0 still synchronises as the operation would (hcomm.h): a
// round that moves nothing, carrying the call's fingerprint, so that a rank
// called with another count is caught there too.
#include <algorithm>
#include <cmath>

#include "algorithms/cost_model.h"
#include "algorithms/entries.h"
#include "algorithms/shm_collective.h"
#include "algorithms/table.h"

namespace hcomm {
namespace entries {

namespace {
size_t Bytes(const CollectiveCall& c) { return c.count * DataTypeSize(c.dtype); }
}  // namespace

// Each rank copies what the others need into its slot and takes what it
// needs from theirs, a slot's worth per round of counters: every byte is
// copied twice, with no message.
double SegmentCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  const double rounds =
      std::max(1.0, std::ceil(t.S / static_cast<double>(ShmCollective::kSlotBytes)));
  return rounds * t.a + 2 * t.S * t.b;
}

absl::Status SegmentAllReduceRun(Peers&, const CollectiveCall& c, const RunEnv& e) {
  if (c.count == 0) return e.segment->Barrier(e.seq, e.fingerprint, *e.waiter);
  return e.segment->AllReduce(c.send, c.recv, c.count, c.dtype, c.reduce, e.seq, e.fingerprint,
                              *e.waiter);
}

absl::Status SegmentBroadcastRun(Peers&, const CollectiveCall& c, const RunEnv& e) {
  if (c.count == 0) return e.segment->Barrier(e.seq, e.fingerprint, *e.waiter);
  return e.segment->Broadcast(c.recv, Bytes(c), c.root, e.seq, e.fingerprint, *e.waiter);
}

absl::Status SegmentReduceRun(Peers&, const CollectiveCall& c, const RunEnv& e) {
  if (c.count == 0) return e.segment->Barrier(e.seq, e.fingerprint, *e.waiter);
  return e.segment->Reduce(c.send, c.recv, c.count, c.dtype, c.reduce, c.root, e.seq,
                           e.fingerprint, *e.waiter);
}

absl::Status SegmentAllGatherRun(Peers&, const CollectiveCall& c, const RunEnv& e) {
  if (c.count == 0) return e.segment->Barrier(e.seq, e.fingerprint, *e.waiter);
  return e.segment->AllGather(c.send, c.recv, Bytes(c), e.seq, e.fingerprint, *e.waiter);
}

absl::Status SegmentReduceScatterRun(Peers&, const CollectiveCall& c, const RunEnv& e) {
  if (c.count == 0) return e.segment->Barrier(e.seq, e.fingerprint, *e.waiter);
  return e.segment->ReduceScatter(c.send, c.recv, c.count, c.dtype, c.reduce, e.seq,
                                  e.fingerprint, *e.waiter);
}

absl::Status SegmentAllToAllRun(Peers&, const CollectiveCall& c, const RunEnv& e) {
  if (c.count == 0) return e.segment->Barrier(e.seq, e.fingerprint, *e.waiter);
  return e.segment->AllToAll(c.send, c.recv, Bytes(c), e.seq, e.fingerprint, *e.waiter);
}

absl::Status SegmentGatherRun(Peers&, const CollectiveCall& c, const RunEnv& e) {
  if (c.count == 0) return e.segment->Barrier(e.seq, e.fingerprint, *e.waiter);
  return e.segment->Gather(c.send, c.recv, Bytes(c), c.root, e.seq, e.fingerprint, *e.waiter);
}

absl::Status SegmentScatterRun(Peers&, const CollectiveCall& c, const RunEnv& e) {
  if (c.count == 0) return e.segment->Barrier(e.seq, e.fingerprint, *e.waiter);
  return e.segment->Scatter(c.send, c.recv, Bytes(c), c.root, e.seq, e.fingerprint, *e.waiter);
}

absl::Status SegmentBarrierRun(Peers&, const CollectiveCall&, const RunEnv& e) {
  return e.segment->Barrier(e.seq, e.fingerprint, *e.waiter);
}

}  // namespace entries
}  // namespace hcomm
