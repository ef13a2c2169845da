#include "algorithms/cost_model.h"

#include <algorithm>
#include <cmath>

namespace hcomm {

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

CostTerms::CostTerms(double bytes, int nranks, const LinkModel& l)
    : link(l),
      n(nranks),
      S(bytes),
      a(l.alpha_us),
      b(1e-3 / l.gbps),
      lg(nranks > 1 ? std::ceil(std::log2(static_cast<double>(nranks))) : 0),
      pow2((nranks & (nranks - 1)) == 0),
      fan(l.cpus_shared ? (n - 1) * a : a + (n - 1) * 0.25 * a),
      fanned(l.cpus_shared ? n - 1 : 1),
      slices(l.cpus_shared ? (n - 1) * a : 0),
      chunk(std::min(S / n, kRingChunkBytes)) {}

double CostTerms::MessageUs(double bytes) const {
  return a + (bytes > link.eager_bytes ? link.rendezvous_us : 0.0);
}

double CostTerms::DoublingRendezvousUs() const {
  double sum = 0;
  for (double blk = S / n; blk < S; blk *= 2) sum += RendezvousUs(blk);
  return sum;
}

TreeAllReduceCosts TreeAllReduceCost(size_t bytes, int nranks, const LinkModel& link) {
  const CostTerms t(static_cast<double>(bytes), nranks, link);
  const double S = t.S, b = t.b;
  int pow2 = 1;
  while (pow2 * 2 <= nranks) pow2 *= 2;
  const double lg = std::log2(static_cast<double>(pow2));
  // Ranks beyond a power of two: one whole vector in, and the result out.
  const double fold =
      pow2 == nranks ? 0 : 2 * (t.MessageUs(S) + S * b) + ReduceUs(S, S, link);
  const double part = (pow2 - 1.0) / pow2;
  // Halving sends S/2, S/4, ... and doubling the same back.
  double halving_messages = 0;
  for (int k = 2; k <= pow2; k *= 2) halving_messages += 2 * t.MessageUs(S / k);
  return {fold + lg * (t.MessageUs(S) + S * b) + ReduceUs(lg * S, S, link),
          fold + halving_messages + 2 * part * S * b + ReduceUs(part * S, S / 2, link)};
}

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

}  // namespace hcomm
