// How the ranks of a stream agree on how many queued allreduces to fuse
// (core/comm/comm_stream.h), without a message of its own.
//
// Each rank may have queued a different number of allreduces by the time
// its stream runs the next one, and a fused batch must be the same on
// every rank. So every fusable allreduce carries, after its data, a few
// "lanes" of its own dtype: lane j says whether this rank has at least 2^j
// fusable allreduces queued right after the batch. Reduced with the
// batch's own op, lane j tells every rank whether all ranks have them; the
// next batch is then the largest 2^j that all have (or one operation when
// none). The lanes ride in the allreduce that runs anyway: a lone
// allreduce pays a few bytes, not a round trip.
//
//   std::vector<char> lanes(LaneBytes(dtype));
//   WriteLanes(lanes.data(), dtype, op, queued_after);
//   ... allreduce data + lanes with `op` ...
//   size_t next = AgreedBatch(lanes.data(), dtype, op, nranks);
#ifndef HCOMM_CORE_COMM_FUSION_H_
#define HCOMM_CORE_COMM_FUSION_H_

#include <cstddef>

#include "algorithms/kernels/reduce.h"

namespace hcomm {

// Lanes 2^0 .. 2^10: a batch is at most kMaxFusedOps operations.
inline constexpr int kFusionLanes = 11;
inline constexpr size_t kMaxFusedOps = size_t{1} << (kFusionLanes - 1);

inline size_t LaneBytes(DataType t) { return kFusionLanes * DataTypeSize(t); }

// Whether lanes of `t` reduced with `op` over `nranks` ranks come out
// exact (a sum of ones must not overflow or round: int8 holds 127,
// bfloat16's integers are exact to 256). Where not, nothing is fused.
bool LanesExact(DataType t, ReduceOp op, int nranks);

// Writes the kFusionLanes lanes saying that `queued` operations are ready.
void WriteLanes(void* lanes, DataType t, ReduceOp op, size_t queued);

// After the reduction: the size of the next batch every rank can run, a
// power of two up to kMaxFusedOps, or 0 when some rank has none queued.
size_t AgreedBatch(const void* lanes, DataType t, ReduceOp op, int nranks);

}  // namespace hcomm

#endif  // HCOMM_CORE_COMM_FUSION_H_
