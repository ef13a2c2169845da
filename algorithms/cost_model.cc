#include "algorithms/cost_model.h"

#include <algorithm>
#include <cmath>

namespace hcomm {

LinkModel LinkModelFor(const std::string& transport, bool cpus_shared) {
  // Each link's message cost and bandwidth as measured on the 2-core test
  // machines: loopback TCP, and a copy through a shared-memory bounce
  // buffer. A rendezvous costs more than its bytes explain (its round trip,
  // and over TCP a frame of more than one loopback segment); the eager
  // limits are the transports' (Transport::EagerBytes). (Measured:
  // docs/performance.md, "Cost model: messages and rendezvous".)
  // Where CPUs are shared, every transport sends up to the protocol's
  // 64 KiB eagerly (Engine::kEagerBytes).
  LinkModel m = transport == "shm" ? LinkModel{0.5, 10.0, 10.0, 2.5, 64 * 1024}
                                   : LinkModel{10.0, 3.0, 10.0, 45.0, 64 * 1024 - 128};
  // The float32 sum kernel makes more output per second on vectors that
  // stay in the cache, and a vector received over TCP is reduced while
  // still there. Over TCP the model counts 20 GB/s up to 1 MiB, 10 from
  // 8 MiB and a rate between the two in between, so that it picks what two
  // ranks measured fastest (docs/performance.md, "Cost model: reduction rate
  // over TCP").
  // Shared memory's choices were measured with one rate and keep it.
  if (transport != "shm") m.reduce_cached_gbps = 20.0;
  m.cpus_shared = cpus_shared;
  if (cpus_shared) m.eager_bytes = 64 * 1024;
  m.chunk_bytes = static_cast<double>(ChunkBytes(m));
  return m;
}

namespace {

// ceil(log2 n) for n >= 1, without the floating-point log2 that costs more
// than the rest of a small collective's pricing (TreeAllReduceHalves runs
// on every tree allreduce below 32 KiB; docs/performance.md, "Transports
// through their tables").
int CeilLog2(int n) {
  int lg = 0;
  while ((1 << lg) < n) ++lg;
  return lg;
}

}  // namespace

size_t FusionBytes(const LinkModel& link) {
  const double bytes_per_us = link.gbps * 1e3;
  // alpha / (alpha + S / rate) = share  <=>  S = alpha * rate * (1 / share - 1)
  return static_cast<size_t>(link.alpha_us * bytes_per_us * (1.0 / kFusionLatencyShare - 1.0));
}

size_t ChunkBytes(const LinkModel& link) {
  const double most = kChunkUs * link.gbps * 1e3;  // bytes per kChunkUs
  size_t s = 4096;
  while (static_cast<double>(2 * s) <= most) s *= 2;
  return s;
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
      lg(CeilLog2(nranks)),
      pow2((nranks & (nranks - 1)) == 0),
      fan(l.cpus_shared ? (n - 1) * a : a + (n - 1) * 0.25 * a),
      fanned(l.cpus_shared ? n - 1 : 1),
      slices(l.cpus_shared ? (n - 1) * a : 0),
      chunk(std::min(S / n, l.chunk_bytes)) {}

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
  int pow2 = 1, steps = 0;
  for (; pow2 * 2 <= nranks; pow2 *= 2) ++steps;
  const double lg = steps;  // log2(pow2)
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
  // the ring streams cache-sized chunks: the ring measured faster beyond
  // 4 MiB, and beyond 1 MiB where ranks share CPUs. From 32 KiB on, halving
  // beat whole-vector doubling wherever measured, which the model's message
  // cost does not capture (docs/performance.md, "Halving-doubling up to
  // 4 MiB").
  const size_t max_bytes = link.cpus_shared ? size_t{1} << 20 : size_t{4} << 20;
  constexpr size_t kMinBytes = 32u << 10;
  if (bytes > max_bytes) return false;
  if (bytes >= kMinBytes) return true;
  const TreeAllReduceCosts c = TreeAllReduceCost(bytes, nranks, link);
  return c.halving < c.doubling;
}

}  // namespace hcomm
