// The alpha-beta cost model the selector prices algorithms with:
//   time = messages * alpha (+ rendezvous messages * their extra cost)
//          + bytes on the critical path / bandwidth
//          (+ bytes reduced / reduction bandwidth)
// over the message size, the rank count and the link in use (shm or TCP,
// whose parameters are in LinkModelFor). Each algorithm's cost function
// (algorithms/table.h) is written in these terms.
//
//   const LinkModel tcp = LinkModelFor("tcp");
//   CostTerms t(64 << 20, 8, tcp);
//   double ring_us = 2 * (t.n - 1) / t.n * t.S * t.b;   // the bytes' part
#ifndef HCOMM_ALGORITHMS_COST_MODEL_H_
#define HCOMM_ALGORITHMS_COST_MODEL_H_

#include <cstddef>
#include <string>

namespace hcomm {

struct LinkModel {
  double alpha_us;     // cost of one message
  double gbps;         // bandwidth of one link, GB/s
  // Reduction kernel throughput, GB/s of output, for vectors of
  // `reduce_uncached_bytes` and more; up to `reduce_cached_bytes` operands
  // and result stay in the caches and the kernel runs at
  // `reduce_cached_gbps`, and in between at a rate interpolated on a log
  // scale of the size.
  double reduce_gbps;
  // A message above `eager_bytes` goes by rendezvous (core/p2p/engine.h): it
  // costs `rendezvous_us` more (the request-to-send's round trip, and on
  // loopback TCP a frame of more than one segment).
  double rendezvous_us = 0;
  double eager_bytes = 64 * 1024;
  // The pieces large operations move in (the ring's chunks, each one
  // message and one reduction): the config key chunk_bytes, else
  // ChunkBytes(*this).
  double chunk_bytes = 0;
  // Ranks of a host outnumber its CPUs: messages posted to several peers at
  // once no longer overlap (every one costs its sender CPU time that no
  // other rank can use meanwhile).
  bool cpus_shared = false;
  // The reduction's rate by size: see reduce_gbps.
  double reduce_cached_gbps = 10.0;
  double reduce_cached_bytes = 1 << 20;
  double reduce_uncached_bytes = 8 << 20;
};

// Parameters for "tcp" or "shm" (anything else: tcp's).
LinkModel LinkModelFor(const std::string& transport, bool cpus_shared = false);

// The size up to which a stream fuses allreduces queued back to back
// (core/comm/comm_stream.h): where one message's fixed cost is
// kFusionLatencyShare of its time. Fusing more saves less than that share
// and only adds copying and waiting for the whole batch.
inline constexpr double kFusionLatencyShare = 0.05;
size_t FusionBytes(const LinkModel& link);

// The model's time to reduce `total` bytes of output in pieces of `piece`
// bytes (one kernel call each), in microseconds.
double ReduceUs(double total, double piece, const LinkModel& link);

// The default piece of large operations (LinkModel::chunk_bytes): the
// largest power of two whose bytes take at most kChunkUs on the link. A
// more urgent operation waits for up to one chunk (core/base/priority.h),
// so this is what priority costs it; and at that size a chunk's fixed cost
// (alpha and its rendezvous) is under a third of its time on either link,
// less still as the chunks of a step are in flight together.
// Loopback TCP: 512 KiB; shared memory: 1 MiB, the shared segment's slot.
inline constexpr double kChunkUs = 200;
size_t ChunkBytes(const LinkModel& link);

// The terms every algorithm's cost is written in, for `bytes` over
// `nranks` ranks on `link`.
struct CostTerms {
  CostTerms(double bytes, int nranks, const LinkModel& link);
  // One message of `bytes`: its fixed cost, more if it goes by rendezvous.
  double MessageUs(double bytes) const;
  // What a message of `bytes` costs beyond alpha (its rendezvous, if any).
  double RendezvousUs(double bytes) const { return MessageUs(bytes) - a; }
  // Recursive doubling over blocks of S/n: messages of S/n, 2S/n, ...
  double DoublingRendezvousUs() const;
  double Reduce(double total, double piece) const { return ReduceUs(total, piece, link); }

  const LinkModel& link;
  double n, S;
  double a;   // alpha, us
  double b;   // us per byte
  double lg;  // ceil(log2 n)
  bool pow2;
  // Posting to n-1 peers at once costs a fraction of a full message each,
  // while CPUs are free to overlap them; where ranks share CPUs nothing
  // overlaps, and each costs a full one (measured: docs/performance.md,
  // "Cost model where ranks share CPUs"). So do their rendezvous round trips.
  double fan, fanned;
  // A ring step passes through every rank in turn; where ranks share CPUs
  // each waits for the others' time slices, a message's cost per other rank,
  // and halving-doubling, with fewer steps, measured faster up to 1 MiB
  // (docs/performance.md, "Cost model where ranks share CPUs").
  double slices;
  // The ring's pieces of each rank's share S/n.
  double chunk;
};

// The tree allreduce's two forms: whole vectors doubling, or halving and
// doubling (Rabenseifner's).
struct TreeAllReduceCosts {
  double doubling, halving;
};
TreeAllReduceCosts TreeAllReduceCost(size_t bytes, int nranks, const LinkModel& link);

// Whether the tree allreduce of `bytes` over `nranks` should halve and
// double (Rabenseifner) rather than double with whole vectors: the model's
// cost of each.
bool TreeAllReduceHalves(size_t bytes, int nranks, const LinkModel& link);

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_COST_MODEL_H_
