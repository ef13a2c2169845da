// Chooses a collective algorithm: the cheapest row of the algorithm table
// (algorithms/table.h) for the operation, as the cost model prices it
// (algorithms/cost_model.h), over the message size, the rank count and the
// link in use. A forced algorithm (the `algo` key) wins where the
// operation has it; the shared segment, where the communicator has one,
// unless an algorithm is forced.
//
//   Choice c = ChooseAlgorithm(CollectiveOp::kAllReduce, 64 << 20, 8,
//                              LinkModelFor("tcp"), Algorithm::kAuto);
//   // c.algo == Algorithm::kRing; c.Explain() == "ring 47.89 ms, tree ..."
#ifndef HCOMM_ALGORITHMS_SELECTOR_H_
#define HCOMM_ALGORITHMS_SELECTOR_H_

#include <cstddef>
#include <string>

#include "algorithms/collective.h"
#include "algorithms/cost_model.h"
#include "algorithms/table.h"

namespace hcomm {

// Whether `op` has an implementation for `algo` (a row of the table).
bool Supports(CollectiveOp op, Algorithm algo);

struct Choice {
  Algorithm algo = Algorithm::kRing;
  // The table's row of (op, algo), looked up once with the choice: a
  // caller that keeps the Choice runs it without a lookup per call.
  const AlgorithmEntry* entry = nullptr;
  bool forced = false;
  double cost_us[5] = {-1, -1, -1, -1, -1};  // by Algorithm value; < 0: not available
  // "ring 1.20 ms, tree 3.40 ms, direct 9.10 ms"
  std::string Explain() const;
};

// `bytes` is the size of one rank's input vector (allreduce, broadcast,
// reduce) or of the whole output/input (allgather/alltoall/gather: the
// total over ranks; reduce_scatter: the total input). `segment`: the
// communicator runs collectives in a shared segment.
Choice ChooseAlgorithm(CollectiveOp op, size_t bytes, int nranks, const LinkModel& link,
                       Algorithm forced, bool segment = false);

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_SELECTOR_H_
