// Chooses a collective algorithm with an alpha-beta cost model:
//   time = messages * alpha (+ rendezvous messages * their extra cost)
//          + bytes on the critical path / bandwidth
//          (+ bytes reduced / reduction bandwidth)
// over the message size, the rank count and the link in use (shm or TCP,
// whose parameters are in LinkModelFor). A forced algorithm (the `algo`
// key) wins when the operation has it.
//
//   Choice c = ChooseAlgorithm(CollectiveOp::kAllReduce, 64 << 20, 8,
//                              LinkModelFor("tcp"), Algorithm::kAuto);
//   // c.algo == Algorithm::kRing; c.Explain() == "ring 47.89 ms, tree ..."
#ifndef HCOMM_ALGORITHMS_SELECTOR_H_
#define HCOMM_ALGORITHMS_SELECTOR_H_

#include <cstddef>
#include <string>

#include "algorithms/collective.h"

namespace hcomm {

enum class CollectiveOp {
  kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kGather, kScatter,
  kBarrier,
};
const char* CollectiveOpName(CollectiveOp op);

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
  // Ranks of a host outnumber its CPUs: messages posted to several peers at
  // once no longer overlap (every one costs its sender CPU time that no
  // other rank can use meanwhile).
  bool cpus_shared = false;
  // The reduction's rate by size: see reduce_gbps.
  double reduce_cached_gbps = 10.0;
  double reduce_cached_bytes = 1 << 20;
  double reduce_uncached_bytes = 8 << 20;
};
// The model's time to reduce `total` bytes of output in pieces of `piece`
// bytes (one kernel call each), in microseconds.
double ReduceUs(double total, double piece, const LinkModel& link);

// Parameters for "tcp" or "shm" (anything else: tcp's).
LinkModel LinkModelFor(const std::string& transport, bool cpus_shared = false);

// Whether `op` has an implementation for `algo`.
bool Supports(CollectiveOp op, Algorithm algo);

struct Choice {
  Algorithm algo = Algorithm::kRing;
  bool forced = false;
  double cost_us[4] = {-1, -1, -1, -1};  // by Algorithm value; < 0: not available
  // "ring 1.20 ms, tree 3.40 ms, direct 9.10 ms"
  std::string Explain() const;
};

// Whether the tree allreduce of `bytes` over `nranks` should halve and
// double (Rabenseifner) rather than double with whole vectors: the model's
// cost of each.
bool TreeAllReduceHalves(size_t bytes, int nranks, const LinkModel& link);

// `bytes` is the size of one rank's input vector (allreduce, broadcast,
// reduce) or of the whole output/input (allgather/alltoall/gather: the
// total over ranks; reduce_scatter: the total input).
Choice ChooseAlgorithm(CollectiveOp op, size_t bytes, int nranks, const LinkModel& link,
                       Algorithm forced);

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_SELECTOR_H_
