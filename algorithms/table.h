// The collective algorithms, in one table: for every operation and every
// algorithm that implements it, what it costs (in the terms of
// algorithms/cost_model.h) and how it runs. The selector reads it
// (algorithms/selector.h); the communicator runs the entry chosen and
// knows no algorithm by name.
//
//   const AlgorithmEntry* e = FindAlgorithm(CollectiveOp::kAllReduce, Algorithm::kRing);
//   double us = e->cost(64 << 20, 8, LinkModelFor("tcp"));
//   CollectiveCall call{CollectiveOp::kAllReduce, in, out, count, DataType::kFloat32,
//                       ReduceOp::kSum, -1};
//   HCOMM_RETURN_IF_ERROR(e->run(peers, call, env));
//
// Adding an algorithm is a file of its runs and costs and a row per
// operation in table.cc. The shared-segment collectives
// (algorithms/shm_collective.h) are rows too, of Algorithm::kSegment: they
// run where the communicator has a segment (RunEnv::segment) and are then
// chosen unless an algorithm is forced.
#ifndef HCOMM_ALGORITHMS_TABLE_H_
#define HCOMM_ALGORITHMS_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "algorithms/collective.h"
#include "algorithms/cost_model.h"
#include "algorithms/kernels/reduce.h"

namespace hcomm {

class ShmCollective;
class ShmWaiter;

enum class CollectiveOp {
  kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kGather, kScatter,
  kBarrier,
};
const char* CollectiveOpName(CollectiveOp op);

// Whether `op` combines values (allreduce, reduce, reduce_scatter).
inline bool Reduces(CollectiveOp op) {
  return op == CollectiveOp::kAllReduce || op == CollectiveOp::kReduce ||
         op == CollectiveOp::kReduceScatter;
}

// One collective call, as hcomm.h's call of `op` has it: `count` is the
// call's own (per rank for allreduce, broadcast and reduce; each rank's
// block for allgather, reduce_scatter, alltoall, gather and scatter);
// send == recv is in place; broadcast's buffer is recv.
struct CollectiveCall {
  CollectiveOp op;
  const void* send;
  void* recv;
  size_t count;
  DataType dtype;
  ReduceOp reduce;
  int root;
  // Run in steps over the communicator's groups (core/comm/hierarchical.cc)
  // rather than by a row of the table.
  bool hierarchical = false;
};

// What a run may use besides its peers.
struct RunEnv {
  // The link the selector priced (the tree allreduce's halving follows it).
  const LinkModel* link = nullptr;
  // Ranks by the CPUs they share (RingOrderByPlacement), for the ring
  // allreduce where RingByCpu says so; empty: rank order.
  const std::vector<int>* ring_order = nullptr;
  // Ranks grouped by switch, then host (core/topology/switches.h), for the
  // ring allreduce at every size (before ring_order); empty: not used.
  const std::vector<int>* switch_order = nullptr;
  // The communicator's shared segment and what waits in it, with the call's
  // sequence number and fingerprint (Algorithm::kSegment only).
  ShmCollective* segment = nullptr;
  ShmWaiter* waiter = nullptr;
  uint64_t seq = 0;
  uint64_t fingerprint = 0;
};

struct AlgorithmEntry {
  CollectiveOp op;
  Algorithm algo;
  // Microseconds for `bytes` (the selector's size: one rank's vector for
  // allreduce, broadcast and reduce; the whole input or output for the
  // others) over `nranks` ranks on `link`.
  double (*cost)(double bytes, int nranks, const LinkModel& link);
  absl::Status (*run)(Peers& peers, const CollectiveCall& call, const RunEnv& env);
};

// Every row, grouped by operation.
absl::Span<const AlgorithmEntry> AlgorithmTable();
// The row of (op, algo), or nullptr where that algorithm does not do op.
const AlgorithmEntry* FindAlgorithm(CollectiveOp op, Algorithm algo);

// Whether the ring allreduce of `bytes` per rank goes in `order` (ranks by
// the CPUs they share) rather than rank order: for vectors up to 4 MiB
// where an order is given.
bool RingByCpu(size_t bytes, const std::vector<int>* order);

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_TABLE_H_
