// The runs and costs of the table's rows (table.cc), one set per algorithm
// file: ring.cc, tree.cc, direct.cc and segment.cc. Internal to
// algorithms/; see table.h for what a run and a cost are.
#ifndef HCOMM_ALGORITHMS_ENTRIES_H_
#define HCOMM_ALGORITHMS_ENTRIES_H_

#include "absl/status/status.h"
#include "algorithms/table.h"

namespace hcomm {
namespace entries {

#define HCOMM_ALGORITHM_ROW(name)                                                        \
  double name##Cost(double bytes, int nranks, const LinkModel& link);                    \
  absl::Status name##Run(Peers& peers, const CollectiveCall& call, const RunEnv& env)

HCOMM_ALGORITHM_ROW(RingAllReduce);
HCOMM_ALGORITHM_ROW(RingBroadcast);
HCOMM_ALGORITHM_ROW(RingReduce);
HCOMM_ALGORITHM_ROW(RingAllGather);
HCOMM_ALGORITHM_ROW(RingReduceScatter);

HCOMM_ALGORITHM_ROW(TreeAllReduce);
HCOMM_ALGORITHM_ROW(TreeBroadcast);
HCOMM_ALGORITHM_ROW(TreeReduce);
HCOMM_ALGORITHM_ROW(TreeAllGather);
HCOMM_ALGORITHM_ROW(TreeGather);
HCOMM_ALGORITHM_ROW(TreeScatter);
HCOMM_ALGORITHM_ROW(TreeBarrier);

HCOMM_ALGORITHM_ROW(DirectAllReduce);
HCOMM_ALGORITHM_ROW(DirectBroadcast);
HCOMM_ALGORITHM_ROW(DirectReduce);
HCOMM_ALGORITHM_ROW(DirectAllGather);
HCOMM_ALGORITHM_ROW(DirectReduceScatter);
HCOMM_ALGORITHM_ROW(DirectAllToAll);
HCOMM_ALGORITHM_ROW(DirectGather);
HCOMM_ALGORITHM_ROW(DirectScatter);

// The shared segment: one cost for every operation, a run per operation.
double SegmentCost(double bytes, int nranks, const LinkModel& link);
absl::Status SegmentAllReduceRun(Peers& peers, const CollectiveCall& call, const RunEnv& env);
absl::Status SegmentBroadcastRun(Peers& peers, const CollectiveCall& call, const RunEnv& env);
absl::Status SegmentReduceRun(Peers& peers, const CollectiveCall& call, const RunEnv& env);
absl::Status SegmentAllGatherRun(Peers& peers, const CollectiveCall& call, const RunEnv& env);
absl::Status SegmentReduceScatterRun(Peers& peers, const CollectiveCall& call, const RunEnv& env);
absl::Status SegmentAllToAllRun(Peers& peers, const CollectiveCall& call, const RunEnv& env);
absl::Status SegmentGatherRun(Peers& peers, const CollectiveCall& call, const RunEnv& env);
absl::Status SegmentScatterRun(Peers& peers, const CollectiveCall& call, const RunEnv& env);
absl::Status SegmentBarrierRun(Peers& peers, const CollectiveCall& call, const RunEnv& env);

#undef HCOMM_ALGORITHM_ROW

}  // namespace entries
}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_ENTRIES_H_
