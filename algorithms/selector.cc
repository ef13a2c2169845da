#include "algorithms/selector.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hcomm {

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

LinkModel LinkModelFor(const std::string& transport, bool cpus_shared) {
  // Measured on the 2-core test machines (see ../shared/peers/BASELINES.md):
  // loopback TCP ~8 us per message and ~3 GB/s; shared memory ~0.5 us and
  // ~10 GB/s for a copy through a bounce buffer. A rendezvous costs TCP
  // ~45 us more (2-rank allreduce by one exchange: 32 KiB 28 us eagerly,
  // 64 KiB 85 us by rendezvous) and shared memory ~2.5 us (64 KiB ping-pong
  // 5.2 us eagerly, 7.7 us by rendezvous); the eager limits are the
  // transports' (Transport::EagerBytes).
  // Where CPUs are shared, every transport sends up to the protocol's
  // 64 KiB eagerly (Engine::kEagerBytes).
  LinkModel m = transport == "shm" ? LinkModel{0.5, 10.0, 10.0, 2.5, 64 * 1024}
                                   : LinkModel{10.0, 3.0, 10.0, 45.0, 64 * 1024 - 128};
  // The float32 sum kernel (//algorithms:reduce_bench, c = a + b) makes
  // 31-33 GB/s of output at 256 KiB, 20-22 at 4 MiB and 6-8 at 64 MiB; a
  // vector received over TCP is reduced while still in the cache. Two
  // ranks fit 20 GB/s up to 1 MiB, 10 from 8 MiB and a rate between the
  // two in between (interleaved medians, 14 runs each: direct exchange
  // against halving-doubling 199 against 229 us at 1 MiB, 431 against 402
  // at 2 MiB; 6 runs: halving-doubling against the ring 1.31 against 1.56
  // ms at 4 MiB). Shared memory's choices were measured with one rate and
  // keep it.
  if (transport != "shm") m.reduce_cached_gbps = 20.0;
  m.cpus_shared = cpus_shared;
  if (cpus_shared) m.eager_bytes = 64 * 1024;
  return m;
}

bool Supports(CollectiveOp op, Algorithm algo) {
  switch (op) {
    case CollectiveOp::kAllToAll: return algo == Algorithm::kDirect;
    case CollectiveOp::kBarrier: return algo == Algorithm::kTree;
    case CollectiveOp::kGather:
    case CollectiveOp::kScatter: return algo == Algorithm::kDirect || algo == Algorithm::kTree;
    default: return algo != Algorithm::kAuto;
  }
}

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

double ReduceUs(double total, double piece, const LinkModel& link) {
  double gbps = link.reduce_gbps;
  if (piece <= link.reduce_cached_bytes) {
    gbps = link.reduce_cached_gbps;
  } else if (piece < link.reduce_uncached_bytes) {
    const double f = std::log(piece / link.reduce_cached_bytes) /
                     std::log(link.reduce_uncached_bytes / link.reduce_cached_bytes);
    gbps = link.reduce_cached_gbps * std::pow(link.reduce_gbps / link.reduce_cached_gbps, f);
  }
  return total * 1e-3 / gbps;
}

namespace {

// The ring's chunk (ring.cc): each is one message and one reduction.
constexpr double kRingChunkBytes = 512 * 1024;

struct TreeAllReduceCosts {
  double doubling, halving;
};

// One message of `bytes`: its fixed cost, more if it goes by rendezvous.
double MessageUs(double bytes, const LinkModel& link) {
  return link.alpha_us + (bytes > link.eager_bytes ? link.rendezvous_us : 0.0);
}

TreeAllReduceCosts TreeAllReduceCost(size_t bytes, int nranks, const LinkModel& link) {
  const double S = static_cast<double>(bytes);
  const double b = 1e-3 / link.gbps;
  int pow2 = 1;
  while (pow2 * 2 <= nranks) pow2 *= 2;
  const double lg = std::log2(static_cast<double>(pow2));
  // Ranks beyond a power of two: one whole vector in, and the result out.
  const double fold =
      pow2 == nranks ? 0 : 2 * (MessageUs(S, link) + S * b) + ReduceUs(S, S, link);
  const double part = (pow2 - 1.0) / pow2;
  // Halving sends S/2, S/4, ... and doubling the same back.
  double halving_messages = 0;
  for (int k = 2; k <= pow2; k *= 2) halving_messages += 2 * MessageUs(S / k, link);
  return {fold + lg * (MessageUs(S, link) + S * b) + ReduceUs(lg * S, S, link),
          fold + halving_messages + 2 * part * S * b + ReduceUs(part * S, S / 2, link)};
}

}  // namespace

bool TreeAllReduceHalves(size_t bytes, int nranks, const LinkModel& link) {
  // Large halves are sent and reduced in one piece, out of the cache, where
  // the ring streams cache-sized chunks. Medians of interleaved runs over
  // TCP: 2 ranks, 4 MiB halving 2.0 ms against ring 2.6, 8 MiB 5.2 against
  // 4.7; 4 ranks on 2 CPUs, 1 MiB 3.0 against 3.8, 2 MiB 6.1 against 5.3.
  // From 32 KiB on, halving beat whole-vector doubling wherever measured
  // (TCP, 64 KiB on 2 ranks: 45 against 86 us), which the model's message
  // cost does not capture.
  const size_t max_bytes = link.cpus_shared ? size_t{1} << 20 : size_t{4} << 20;
  constexpr size_t kMinBytes = 32u << 10;
  if (bytes > max_bytes) return false;
  if (bytes >= kMinBytes) return true;
  const TreeAllReduceCosts c = TreeAllReduceCost(bytes, nranks, link);
  return c.halving < c.doubling;
}

Choice ChooseAlgorithm(CollectiveOp op, size_t bytes, int nranks, const LinkModel& link,
                       Algorithm forced) {
  Choice c;
  const double n = nranks, S = static_cast<double>(bytes);
  const double a = link.alpha_us;
  const double b = 1e-3 / link.gbps;  // us per byte
  const double lg = nranks > 1 ? std::ceil(std::log2(n)) : 0;
  const bool pow2 = (nranks & (nranks - 1)) == 0;
  // Posting to n-1 peers at once costs a fraction of a full message each,
  // while CPUs are free to overlap them. (4 ranks on 2 CPUs over TCP, 8 B:
  // direct 74-110 us, recursive doubling 50-64 us.) So do their rendezvous
  // round trips.
  const double fan = link.cpus_shared ? (n - 1) * a : a + (n - 1) * 0.25 * a;
  const double fanned = link.cpus_shared ? n - 1 : 1;
  auto rdv = [&](double bytes) { return MessageUs(bytes, link) - a; };
  // Recursive doubling over blocks of S/n: messages of S/n, 2S/n, ...
  auto doubling_rdv = [&] {
    double sum = 0;
    for (double blk = S / n; blk < S; blk *= 2) sum += rdv(blk);
    return sum;
  };
  // A ring step passes through every rank in turn; where ranks share CPUs
  // each waits for the others' time slices, a message's cost per other rank
  // (4 ranks on 2 CPUs over TCP: halving-doubling beat the ring at 256 KiB-
  // 1 MiB, 735 against 919 us and 2572 against 3244 us, with fewer steps).
  const double slices = link.cpus_shared ? (n - 1) * a : 0;
  // The ring's pieces of each rank's share S/n.
  const double chunk = std::min(S / n, kRingChunkBytes);
  double ring = -1, tree = -1, direct = -1;
  switch (op) {
    case CollectiveOp::kAllReduce:
      {
        // Every chunk of a step is a message; the chunks of a step are in
        // flight together, so their rendezvous round trips overlap.
        const double chunks = std::max(1.0, std::ceil(S / n / kRingChunkBytes));
        ring = 2 * (n - 1) * (chunks * a + rdv(chunk) + slices) + 2 * (n - 1) / n * S * b +
               ReduceUs((n - 1) / n * S, chunk, link);
        const TreeAllReduceCosts t = TreeAllReduceCost(bytes, nranks, link);
        tree = TreeAllReduceHalves(bytes, nranks, link) ? t.halving : t.doubling;
      }
      direct = fan + fanned * rdv(S) + (n - 1) * S * b + ReduceUs((n - 1) * S, S, link);
      break;
    case CollectiveOp::kBroadcast: {
      const double piece = std::min(S, kRingChunkBytes);
      double pieces = std::max(1.0, std::ceil(S / piece));
      ring = (n - 2 + pieces) * (MessageUs(piece, link) + piece * b + slices);
      tree = lg * (MessageUs(S, link) + S * b);
      direct = fan + fanned * rdv(S) + (n - 1) * S * b;
      break;
    }
    case CollectiveOp::kReduce:
      ring = 2 * (n - 1) * (MessageUs(S / n, link) + slices) + 2 * (n - 1) / n * S * b +
             ReduceUs((n - 1) / n * S, chunk, link);
      tree = lg * (MessageUs(S, link) + S * b) + ReduceUs(lg * S, S, link);
      direct = fan + fanned * rdv(S) + (n - 1) * S * b + ReduceUs((n - 1) * S, S, link);
      break;
    case CollectiveOp::kAllGather:
      ring = (n - 1) * (MessageUs(S / n, link) + S / n * b + slices);
      tree = pow2 ? lg * a + doubling_rdv() + (n - 1) / n * S * b : -1;
      direct = fan + fanned * rdv(S / n) + (n - 1) / n * S * b * 1.1;
      break;
    case CollectiveOp::kReduceScatter:
      ring = (n - 1) * (MessageUs(S / n, link) + S / n * b + slices) +
             ReduceUs((n - 1) / n * S, chunk, link);
      direct = fan + fanned * rdv(S / n) + (n - 1) / n * S * b * 1.1 +
               ReduceUs((n - 1) / n * S, S / n, link);
      break;
    case CollectiveOp::kAllToAll:
      direct = fan + fanned * rdv(S / n) + (n - 1) / n * S * b;
      break;
    case CollectiveOp::kGather:
    case CollectiveOp::kScatter:
      tree = lg * a + doubling_rdv() + (n - 1) / n * S * b * (1 + 0.1 * lg);
      direct = fan + fanned * rdv(S / n) + (n - 1) / n * S * b;
      break;
    case CollectiveOp::kBarrier:
      tree = lg * a;
      break;
  }
  c.cost_us[static_cast<int>(Algorithm::kRing)] = ring;
  c.cost_us[static_cast<int>(Algorithm::kTree)] = tree;
  c.cost_us[static_cast<int>(Algorithm::kDirect)] = direct;
  if (forced != Algorithm::kAuto && Supports(op, forced) &&
      c.cost_us[static_cast<int>(forced)] >= 0) {
    c.algo = forced;
    c.forced = true;
    return c;
  }
  // On a tie, or within 1% (below what the model can tell), the tree goes
  // first: on two ranks the ring and halving-doubling cost the same in the
  // model, and halving-doubling measured faster (TCP, 1 MiB: 337 against
  // 410 us).
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

}  // namespace hcomm
