#include "algorithms/selector.h"

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

}  // namespace

Choice ChooseAlgorithm(CollectiveOp op, size_t bytes, int nranks, const LinkModel& link,
                       Algorithm forced, bool segment) {
  Choice c = Choose(op, bytes, nranks, link, forced, segment);
  c.entry = FindAlgorithm(op, c.algo);
  return c;
}

}  // namespace hcomm
