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
#include <vector>

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

// The cheapest flat algorithm's cost for `op` (bytes as above), in us.
double FlatCostUs(CollectiveOp op, size_t bytes, int nranks, const LinkModel& link);

// Hierarchical collectives (core/comm/hierarchical.cc) over levels of
// groups: ranks of a host, hosts of a switch, switches. Level i's groups
// each hold `members` groups of level i-1 (ranks at level 0) that talk to
// each other over `link`; the last level is the top, its members the
// top groups. Two hosts of 4 ranks on one switch:
//
//   {{4, LinkModelFor("shm")}, {2, LinkModelFor("tcp")}}
struct HierarchyLevel {
  int members;
  LinkModel link;
};

// A hierarchical allreduce, broadcast or reduce of `bytes` from level
// `level` up: within each group of that level a reduce_scatter (or
// scatter), then the operation on one slice of 1/members among the groups'
// counterparts, the cheaper of flat and hierarchical again, then an
// allgather (or gather) within the group. The groups of a level run at
// once, so each shares the links above it with its siblings.
struct HierarchyCost {
  double us = -1;         // the whole, hierarchical (< 0: no level to split)
  double within_us = 0;   // the steps within this level's groups
  double across_us = 0;   // the slice's operation among the groups
  bool across_hierarchical = false;  // which the slice's operation is
  double flat_us = 0;     // the same operation flat over all ranks
};
HierarchyCost PriceHierarchy(CollectiveOp op, size_t bytes,
                             const std::vector<HierarchyLevel>& levels, size_t level = 0,
                             double share = 1);

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_SELECTOR_H_
