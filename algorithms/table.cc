#include "algorithms/table.h"

#include "algorithms/entries.h"

namespace hcomm {

namespace {

using A = Algorithm;
using Op = CollectiveOp;
namespace e = entries;

// Grouped by operation; within one, the order the selector breaks ties in
// does not depend on it (selector.cc).
constexpr AlgorithmEntry kTable[] = {
    {Op::kAllReduce, A::kRing, &e::RingAllReduceCost, &e::RingAllReduceRun},
    {Op::kAllReduce, A::kTree, &e::TreeAllReduceCost, &e::TreeAllReduceRun},
    {Op::kAllReduce, A::kDirect, &e::DirectAllReduceCost, &e::DirectAllReduceRun},
    {Op::kAllReduce, A::kSegment, &e::SegmentCost, &e::SegmentAllReduceRun},

    {Op::kBroadcast, A::kRing, &e::RingBroadcastCost, &e::RingBroadcastRun},
    {Op::kBroadcast, A::kTree, &e::TreeBroadcastCost, &e::TreeBroadcastRun},
    {Op::kBroadcast, A::kDirect, &e::DirectBroadcastCost, &e::DirectBroadcastRun},
    {Op::kBroadcast, A::kSegment, &e::SegmentCost, &e::SegmentBroadcastRun},

    {Op::kReduce, A::kRing, &e::RingReduceCost, &e::RingReduceRun},
    {Op::kReduce, A::kTree, &e::TreeReduceCost, &e::TreeReduceRun},
    {Op::kReduce, A::kDirect, &e::DirectReduceCost, &e::DirectReduceRun},
    {Op::kReduce, A::kSegment, &e::SegmentCost, &e::SegmentReduceRun},

    {Op::kAllGather, A::kRing, &e::RingAllGatherCost, &e::RingAllGatherRun},
    {Op::kAllGather, A::kTree, &e::TreeAllGatherCost, &e::TreeAllGatherRun},
    {Op::kAllGather, A::kDirect, &e::DirectAllGatherCost, &e::DirectAllGatherRun},
    {Op::kAllGather, A::kSegment, &e::SegmentCost, &e::SegmentAllGatherRun},

    {Op::kReduceScatter, A::kRing, &e::RingReduceScatterCost, &e::RingReduceScatterRun},
    {Op::kReduceScatter, A::kDirect, &e::DirectReduceScatterCost, &e::DirectReduceScatterRun},
    {Op::kReduceScatter, A::kSegment, &e::SegmentCost, &e::SegmentReduceScatterRun},

    {Op::kAllToAll, A::kDirect, &e::DirectAllToAllCost, &e::DirectAllToAllRun},
    {Op::kAllToAll, A::kSegment, &e::SegmentCost, &e::SegmentAllToAllRun},

    {Op::kGather, A::kTree, &e::TreeGatherCost, &e::TreeGatherRun},
    {Op::kGather, A::kDirect, &e::DirectGatherCost, &e::DirectGatherRun},
    {Op::kGather, A::kSegment, &e::SegmentCost, &e::SegmentGatherRun},

    {Op::kScatter, A::kTree, &e::TreeScatterCost, &e::TreeScatterRun},
    {Op::kScatter, A::kDirect, &e::DirectScatterCost, &e::DirectScatterRun},
    {Op::kScatter, A::kSegment, &e::SegmentCost, &e::SegmentScatterRun},

    {Op::kBarrier, A::kTree, &e::TreeBarrierCost, &e::TreeBarrierRun},
    {Op::kBarrier, A::kSegment, &e::SegmentCost, &e::SegmentBarrierRun},
};

}  // namespace

const char* CollectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "allreduce";
    case CollectiveOp::kBroadcast: return "broadcast";
    case CollectiveOp::kReduce: return "reduce";
    case CollectiveOp::kAllGather: return "allgather";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kAllToAll: return "alltoall";
    case CollectiveOp::kGather: return "gather";
    case CollectiveOp::kScatter: return "scatter";
    case CollectiveOp::kBarrier: return "barrier";
  }
  return "unknown";
}

absl::Span<const AlgorithmEntry> AlgorithmTable() { return kTable; }

const AlgorithmEntry* FindAlgorithm(CollectiveOp op, Algorithm algo) {
  for (const AlgorithmEntry& e : kTable) {
    if (e.op == op && e.algo == algo) return &e;
  }
  return nullptr;
}

bool RingByCpu(size_t bytes, const std::vector<int>* order) {
  // Where ranks share CPUs (hcomm_run pins 4 ranks round robin to 2 CPUs),
  // a ring in rank order crosses between CPUs on every hop; in this order
  // half the hops stay on one CPU. Measured faster up to 4 MiB behind two
  // caches and no faster (or slower) beyond it and behind one cache
  // (docs/performance.md, "Ring order by CPU"). The condition depends only
  // on what every member knows alike (the order, the size), so all take one.
  constexpr size_t kMaxBytes = 4 << 20;
  return order != nullptr && !order->empty() && bytes <= kMaxBytes;
}

}  // namespace hcomm
