// What a collective algorithm sees of its communicator: a narrow
// point-to-point interface in a private tag space, and scratch buffers.
//
// Algorithms never see a transport. Every message of one collective call
// carries the same tag, so messages between a pair of ranks match in the
// order they were sent; an algorithm posts its receives from a peer in the
// order that peer sends to it.
//
//   absl::Status AllReduceRing(Peers& p, const void* send, void* recv, ...);
#ifndef HCOMM_ALGORITHMS_COLLECTIVE_H_
#define HCOMM_ALGORITHMS_COLLECTIVE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "algorithms/kernels/reduce.h"

namespace hcomm {

// A send or receive in flight, as the communicator's point-to-point engine
// keeps it: opaque here (algorithms see peers, never the engine), held by
// the shared pointer the engine made.
struct Request;

// kSegment: the shared-segment collectives (algorithms/shm_collective.h),
// named "shared memory".
// kHierarchical: steps over groups of the communicator (core/comm/hierarchical.cc),
// not a row of the table.
enum class Algorithm { kAuto = 0, kRing = 1, kTree = 2, kDirect = 3, kSegment = 4, kHierarchical = 5 };
const char* AlgorithmName(Algorithm a);

class Peers {
 public:
  virtual ~Peers() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Posts a send / receive of `bytes` bytes to / from rank `peer` of the
  // communicator. The buffer must stay valid (and a send's unchanged) until
  // the request completes.
  virtual absl::StatusOr<std::shared_ptr<Request>> Isend(const void* buf, size_t bytes,
                                                         int peer) = 0;
  virtual absl::StatusOr<std::shared_ptr<Request>> Irecv(void* buf, size_t bytes, int peer) = 0;
  // Waits for `r` by the collective's deadline; the error names the
  // collective.
  virtual absl::Status Wait(Request* r) = 0;
  // Sends at once, with nothing left to wait for, if the message is small
  // and can leave now; false: nothing was sent, use Isend.
  virtual bool SendNow(const void* buf, size_t bytes, int peer) = 0;
  // Receives exactly `bytes` bytes from `peer` at once if a small message
  // of this collective is there or comes within a short spin, with no
  // request; false: nothing was received (or it cannot be done that way),
  // use Irecv. Only while the algorithm has no receive posted.
  virtual bool RecvNow(void* buf, size_t bytes, int peer) = 0;
  // A persistent buffer of at least `bytes` bytes; slots 0..3 are
  // independent. Valid until the next call with the same slot.
  virtual char* Scratch(int slot, size_t bytes) = 0;
  // Withdraws a pending request on an error path: a receive that nothing
  // reached is dropped, a send stops using its buffer; one that has ended
  // is left as it is.
  virtual void Withdraw(const std::shared_ptr<Request>& r) = 0;
};

// The same peers under other numbers: rank v here is rank order[v] of
// `base`, so an algorithm run on it meets the ranks in that order (a ring
// passes data order[0] -> order[1] -> ... -> order[0]). `order` must be a
// permutation of 0..base.size()-1.
class ReorderedPeers : public Peers {
 public:
  ReorderedPeers(Peers& base, std::vector<int> order);
  int rank() const override { return rank_; }
  int size() const override { return base_.size(); }
  absl::StatusOr<std::shared_ptr<Request>> Isend(const void* buf, size_t bytes,
                                                 int peer) override {
    return base_.Isend(buf, bytes, order_[peer]);
  }
  absl::StatusOr<std::shared_ptr<Request>> Irecv(void* buf, size_t bytes, int peer) override {
    return base_.Irecv(buf, bytes, order_[peer]);
  }
  absl::Status Wait(Request* r) override { return base_.Wait(r); }
  bool SendNow(const void* buf, size_t bytes, int peer) override {
    return base_.SendNow(buf, bytes, order_[peer]);
  }
  bool RecvNow(void* buf, size_t bytes, int peer) override {
    return base_.RecvNow(buf, bytes, order_[peer]);
  }
  char* Scratch(int slot, size_t bytes) override { return base_.Scratch(slot, bytes); }
  void Withdraw(const std::shared_ptr<Request>& r) override { base_.Withdraw(r); }

 private:
  Peers& base_;
  std::vector<int> order_;
  int rank_ = 0;
};

// A ring order that keeps ranks sharing their CPUs side by side: ranks
// are grouped by `placement` (one string per rank, equal where they share
// CPUs: Engine::placement), the groups in the order of their lowest rank,
// each group's ranks ascending. Four ranks pinned round robin to two CPUs
// ("h 0", "h 1", "h 0", "h 1") give 0, 2, 1, 3. Empty where that order is
// 0, 1, ..., n-1 (every rank a CPU of its own, or all sharing the same).
std::vector<int> RingOrderByPlacement(const std::vector<std::string>& placement);

// Tracks the requests an algorithm has in flight. WaitAll waits for every
// one; if the set is destroyed with requests pending (an error path), they
// are withdrawn so that no buffer is touched after the algorithm returns.
class InFlight {
 public:
  explicit InFlight(Peers& peers) : peers_(peers) {}
  ~InFlight();
  absl::Status Send(const void* buf, size_t bytes, int peer);
  absl::Status Recv(void* buf, size_t bytes, int peer);
  // Sends `send` to `peer` and receives `bytes` bytes from it into `recv`,
  // then waits for everything in flight. With nothing else in flight and a
  // send that leaves at once, the receive is first tried without a request
  // (Peers::RecvNow).
  absl::Status Exchange(const void* send, void* recv, size_t bytes, int peer);
  // Posts and returns the request (also tracked).
  absl::StatusOr<Request*> RecvRequest(void* buf, size_t bytes, int peer);
  absl::Status Wait(Request* r);
  absl::Status WaitAll();

 private:
  Peers& peers_;
  absl::InlinedVector<std::shared_ptr<Request>, 8> reqs_;
};

// float16/bfloat16 reductions accumulate in float32 and are rounded once.
// Where one combine of every rank's own value completes each element (the
// direct algorithms, and any algorithm between two ranks) the 16-bit
// vectors travel as they are, half the bytes.
inline bool HalfTravelsAsIs(Algorithm a, int nranks) {
  return a == Algorithm::kDirect || nranks <= 2;
}
// `send` (in_count elements of t) widened into float32 scratch (slot 2),
// with float32 scratch for out_count results (slot 3).
struct WideBuffers {
  float* in;
  float* out;
};
absl::StatusOr<WideBuffers> Widen(Peers& p, const void* send, size_t in_count, size_t out_count,
                                  DataType t);
// Elsewhere partial results travel, and they must not be rounded: `body`
// runs on float32 copies (Widen), and its output is rounded into `recv` at
// the end where `has_output`.
absl::Status OnFloat32(Peers& p, const void* send, void* recv, size_t in_count,
                       size_t out_count, DataType t, bool has_output,
                       absl::FunctionRef<absl::Status(const void*, void*, DataType)> body);

// Splits `count` elements into `parts` nearly equal blocks; block b starts
// at BlockOffset(count, parts, b) and has BlockCount(count, parts, b) elements.
inline size_t BlockCount(size_t count, int parts, int b) {
  size_t base = count / parts, extra = count % parts;
  return base + (static_cast<size_t>(b) < extra ? 1 : 0);
}
inline size_t BlockOffset(size_t count, int parts, int b) {
  size_t base = count / parts, extra = count % parts;
  size_t bb = static_cast<size_t>(b);
  return bb * base + (bb < extra ? bb : extra);
}

// ---------------------------------------------------------------------------
// The algorithms. `send == recv` means in place. Counts are elements of `t`.
// kAvg divides by size() at the end.

// Ring: bandwidth-optimal for large messages (chunked, pipelined). Each
// moves its data in messages of at most `chunk_bytes` (the communicator's
// chunk_bytes, equal on every rank), between which lower priorities step
// aside for higher ones (core/base/priority.h).
absl::Status AllReduceRing(Peers& p, const void* send, void* recv, size_t count, DataType t,
                           ReduceOp op, size_t chunk_bytes);
// float16/bfloat16 among more than two ranks: the reduce-scatter runs on
// float32 (`wide_in`: the input widened; `wide_work`: scratch of `count`
// float32), each rank rounds the block it completes into `recv` (of type
// t), and the allgather moves the rounded 16-bit blocks: half the bytes of
// a float32 allgather.
absl::Status AllReduceRingNarrowGather(Peers& p, const float* wide_in, float* wide_work,
                                       void* recv, size_t count, DataType t, ReduceOp op,
                                       size_t chunk_bytes);
absl::Status ReduceScatterRing(Peers& p, const void* send, void* recv, size_t recvcount,
                               DataType t, ReduceOp op, size_t chunk_bytes);
absl::Status AllGatherRing(Peers& p, const void* send, void* recv, size_t bytes_per_rank);
absl::Status BroadcastRing(Peers& p, void* buf, size_t bytes, int root, size_t chunk_bytes);
absl::Status ReduceRing(Peers& p, const void* send, void* recv, size_t count, DataType t,
                        ReduceOp op, int root, size_t chunk_bytes);

// Tree: latency-optimal (recursive doubling, binomial trees, dissemination).
absl::Status AllReduceRecursiveDoubling(Peers& p, const void* send, void* recv, size_t count,
                                        DataType t, ReduceOp op);
// Rabenseifner's: reduce-scatter by recursive halving, then allgather by
// recursive doubling. Each rank moves and reduces (n-1)/n of the vector, as
// on the ring, in 2 log n rounds instead of 2 (n-1). Ranks beyond the
// largest power of two fold into a neighbour first, as in recursive
// doubling.
absl::Status AllReduceHalvingDoubling(Peers& p, const void* send, void* recv, size_t count,
                                      DataType t, ReduceOp op);
// The tree allreduce: halving-doubling when `halving` (the selector's
// TreeAllReduceHalves) and there is at least one element per block,
// recursive doubling otherwise.
absl::Status AllReduceTree(Peers& p, const void* send, void* recv, size_t count, DataType t,
                           ReduceOp op, bool halving);
absl::Status BroadcastBinomial(Peers& p, void* buf, size_t bytes, int root);
absl::Status ReduceBinomial(Peers& p, const void* send, void* recv, size_t count, DataType t,
                            ReduceOp op, int root);
absl::Status AllGatherRecursiveDoubling(Peers& p, const void* send, void* recv,
                                        size_t bytes_per_rank);
absl::Status GatherBinomial(Peers& p, const void* send, void* recv, size_t bytes_per_rank,
                            int root);
absl::Status ScatterBinomial(Peers& p, const void* send, void* recv, size_t bytes_per_rank,
                             int root);
absl::Status BarrierDissemination(Peers& p);

// Direct: every rank exchanges with every other at once (few ranks, tiny
// messages; and the natural algorithm for alltoall, gather, scatter).
absl::Status AllReduceDirect(Peers& p, const void* send, void* recv, size_t count, DataType t,
                             ReduceOp op);
absl::Status ReduceScatterDirect(Peers& p, const void* send, void* recv, size_t recvcount,
                                 DataType t, ReduceOp op);
absl::Status AllGatherDirect(Peers& p, const void* send, void* recv, size_t bytes_per_rank);
absl::Status BroadcastDirect(Peers& p, void* buf, size_t bytes, int root);
absl::Status ReduceDirect(Peers& p, const void* send, void* recv, size_t count, DataType t,
                          ReduceOp op, int root);
absl::Status AllToAllDirect(Peers& p, const void* send, void* recv, size_t bytes_per_rank);
absl::Status GatherDirect(Peers& p, const void* send, void* recv, size_t bytes_per_rank,
                          int root);
absl::Status ScatterDirect(Peers& p, const void* send, void* recv, size_t bytes_per_rank,
                           int root);

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_COLLECTIVE_H_
