#include "algorithms/selector.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace hcomm {

bool Supports(CollectiveOp op, Algorithm algo) { return FindAlgorithm(op, algo) != nullptr; }

std::string Choice::Explain() const {
  std::string out;
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kDirect}) {
    double c = cost_us[static_cast<int>(a)];
    if (c < 0) continue;
    if (!out.empty()) out += ", ";
    out += c >= 1000 ? absl::StrFormat("%s %.2f ms", AlgorithmName(a), c / 1000)
                     : absl::StrFormat("%s %.1f us", AlgorithmName(a), c);
  }
  return out;
}

namespace {

Choice Choose(CollectiveOp op, size_t bytes, int nranks, const LinkModel& link, Algorithm forced,
              bool segment) {
  Choice c;
  // A communicator within one host runs its collectives in its shared
  // segment unless an algorithm is forced: there the messages' small calls
  // are mostly overhead, and the model is not asked.
  if (segment && forced == Algorithm::kAuto && Supports(op, Algorithm::kSegment)) {
    c.algo = Algorithm::kSegment;
    return c;
  }
  const double b = static_cast<double>(bytes);
  for (const AlgorithmEntry& e : AlgorithmTable()) {
    if (e.op == op && e.algo != Algorithm::kSegment) {
      c.cost_us[static_cast<int>(e.algo)] = e.cost(b, nranks, link);
    }
  }
  if (forced != Algorithm::kAuto && forced != Algorithm::kSegment &&
      c.cost_us[static_cast<int>(forced)] >= 0) {
    c.algo = forced;
    c.forced = true;
    return c;
  }
  // On a tie, or within 1% (below what the model can tell), the tree goes
  // first: on two ranks the ring and halving-doubling cost the same in the
  // model, and halving-doubling measured faster (docs/performance.md, "Ties
  // between the ring and the tree").
  double best = -1;
  for (Algorithm alg : {Algorithm::kTree, Algorithm::kRing, Algorithm::kDirect}) {
    double cost = c.cost_us[static_cast<int>(alg)];
    const bool first = best < 0 || c.algo != Algorithm::kTree;
    if (cost >= 0 && (best < 0 || cost < (first ? best : 0.99 * best))) {
      best = cost;
      c.algo = alg;
    }
  }
  return c;
}

// `link` with `share` flows on it at once.
LinkModel Shared(LinkModel link, double share) {
  link.gbps /= share;
  return link;
}

}  // namespace

Choice ChooseAlgorithm(CollectiveOp op, size_t bytes, int nranks, const LinkModel& link,
                       Algorithm forced, bool segment) {
  Choice c = Choose(op, bytes, nranks, link, forced, segment);
  c.entry = FindAlgorithm(op, c.algo);
  return c;
}

double FlatCostUs(CollectiveOp op, size_t bytes, int nranks, const LinkModel& link) {
  const Choice c = Choose(op, bytes, nranks, link, Algorithm::kAuto, false);
  return c.cost_us[static_cast<int>(c.algo)];
}

HierarchyCost PriceHierarchy(CollectiveOp op, size_t bytes,
                             const std::vector<HierarchyLevel>& levels, size_t level,
                             double share) {
  HierarchyCost h;
  // Flat over every rank from `level` up: as slow as the slowest link it
  // crosses (a ring ordered by switch and host crosses each boundary once
  // each way, so every boundary carries what any link of the ring does).
  int ranks = 1;
  LinkModel slowest = levels[level].link;
  for (size_t i = level; i < levels.size(); ++i) {
    ranks *= levels[i].members;
    if (levels[i].link.gbps < slowest.gbps) slowest = levels[i].link;
  }
  for (size_t i = level; i < levels.size(); ++i) {
    slowest.alpha_us = std::max(slowest.alpha_us, levels[i].link.alpha_us);
  }
  h.flat_us = FlatCostUs(op, bytes, ranks, Shared(slowest, share));
  const int members = levels[level].members;
  if (level + 1 >= levels.size() || members < 2 || bytes == 0) return h;
  // Within the group: split the vector among its members, and join the
  // slices at the end.
  const LinkModel within = Shared(levels[level].link, share);
  const CollectiveOp split =
      op == CollectiveOp::kBroadcast ? CollectiveOp::kScatter : CollectiveOp::kReduceScatter;
  const CollectiveOp join =
      op == CollectiveOp::kReduce ? CollectiveOp::kGather : CollectiveOp::kAllGather;
  h.within_us = FlatCostUs(split, bytes, members, within) + FlatCostUs(join, bytes, members, within);
  const size_t slice = (bytes + members - 1) / members;
  const HierarchyCost above = PriceHierarchy(op, slice, levels, level + 1, share * members);
  h.across_hierarchical = above.us >= 0 && above.us < above.flat_us;
  h.across_us = h.across_hierarchical ? above.us : above.flat_us;
  h.us = h.within_us + h.across_us;
  return h;
}

}  // namespace hcomm
