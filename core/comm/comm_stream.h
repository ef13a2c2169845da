// A stream of a communicator (API.md, "Streams, priorities and fusion"):
// operations queued on it run in order on a thread of the library, in a
// copy of the communicator that is the stream's own, with its own matching
// contexts and shared segment, so that the operations of different streams
// never match each other and need no agreement on their interleaving.
//
//   HCOMM_ASSIGN_OR_RETURN(std::unique_ptr<CommStream> s, CommStream::Create(comm, 1));
//   StreamOp op;
//   op.kind = StreamOpKind::kAllReduce;
//   op.send = in; op.recv = out; op.count = n; op.dtype = DataType::kFloat32;
//   s->Enqueue(op);                     // returns at once
//   HCOMM_RETURN_IF_ERROR(s->Synchronize());
//   HCOMM_RETURN_IF_ERROR(s->Destroy());
//
// Fusion: allreduces queued back to back with the same dtype and op run as
// one allreduce of up to fusion_bytes (the smallest of the ranks' settings
// when the stream was made). Only what is queued when the stream gets to
// an allreduce is fused, and the ranks agree on the batch inside the
// allreduce itself (core/comm/fusion.h), so nothing waits for more work.
//
// THREAD SAFETY: Enqueue, EnqueueHost, Synchronize and Idle may be called
// from any thread; Destroy from one, with no other call in flight.
#ifndef HCOMM_CORE_COMM_COMM_STREAM_H_
#define HCOMM_CORE_COMM_COMM_STREAM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "algorithms/kernels/reduce.h"
#include "core/comm/communicator.h"
#include "core/sched/stream.h"

namespace hcomm {

// The operations a stream runs; the values are hcomm_op_kind_t's.
enum class StreamOpKind : int {
  kSend = 0,
  kRecv = 1,
  kAllReduce = 2,
  kBroadcast = 3,
  kReduce = 4,
  kAllGather = 5,
  kReduceScatter = 6,
  kAllToAll = 7,
  kGather = 8,
  kScatter = 9,
  kBarrier = 10,
};

const char* StreamOpKindName(StreamOpKind kind);

// One operation, with the arguments the blocking call of its kind takes
// (counts in elements; ranks are the communicator's).
struct StreamOp {
  StreamOpKind kind = StreamOpKind::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kUint8;
  ReduceOp op = ReduceOp::kSum;
  int peer_or_root = 0;  // peer of kSend/kRecv, root of rooted collectives
  int tag = 0;           // kSend/kRecv only
};

class CommStream {
 public:
  // Collective over `comm`: every rank makes its streams of `comm` in the
  // same order (the k-th stream of each rank meets the k-th of the others).
  // `priority`: a higher number is served first where streams compete.
  static absl::StatusOr<std::unique_ptr<CommStream>> Create(Communicator& comm, int priority);
  ~CommStream();

  // The stream's own communicator (same ranks as the one it was made from).
  Communicator& comm() { return *comm_; }
  Stream& stream() { return *stream_; }

  // Queues `op`; returns at once. The caller checked its arguments and
  // keeps its buffers until the operation has run.
  void Enqueue(const StreamOp& op);
  // Queues fn(arg), run on the stream's thread in order with its operations.
  void EnqueueHost(void (*fn)(void*), void* arg);
  // A collective of kind `kind` that this rank refused for its arguments:
  // it still takes its turn on the stream, and the other ranks' calls of it
  // fail at once (Communicator::RejectCollective).
  void EnqueueRejection(StreamOpKind kind);
  // Marks `e` after what is queued now (Event::Record); makes later work
  // wait for `e`'s latest mark (Stream::WaitEvent). Events (hcomm::Event,
  // core/sched/stream.h) come with this header for the layers above.
  void RecordEvent(Event& e) { e.Record(*stream_); }
  void WaitEvent(const Event& e) { stream_->WaitEvent(e); }
  // Stream::Synchronize with the communicator's timeout as the stall.
  absl::Status Synchronize() { return stream_->Synchronize(comm_->timeout()); }
  bool Idle() const { return stream_->Idle(); }
  // Runs what is queued, then ends the stream's communicator. Returns the
  // first failure not yet returned by Synchronize, if any.
  absl::Status Destroy();

  // The most bytes of allreduces run as one (0: no fusion).
  size_t fusion_bytes() const { return fusion_bytes_; }
  // How many allreduces ran fused with others, and how many batches they
  // made, so far (for tests and benchmarks).
  uint64_t fused_ops() const { return fused_ops_.load(std::memory_order_relaxed); }
  uint64_t fused_batches() const { return fused_batches_.load(std::memory_order_relaxed); }

 private:
  // An allreduce that may run in a batch with the ones queued after it.
  struct Fusable {
    StreamOp op;
    uint64_t seq = 0;    // its place in the stream
    bool taken = false;  // ran in the batch of an earlier one
  };

  CommStream(std::unique_ptr<Communicator> comm, Stream::Options options, size_t fusion_bytes);
  absl::Status Run(const StreamOp& op);
  bool IsFusable(const StreamOp& op) const;
  // Runs `head` with the batch the ranks agreed on after it.
  absl::Status RunBatch(const std::shared_ptr<Fusable>& head);
  // How many fusable allreduces are queued right after place `seq`, as
  // the next batch would take them.
  size_t QueuedAfter(uint64_t seq) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(fmu_);

  std::unique_ptr<Communicator> comm_;
  // Declared after comm_, so that it runs its queue out before comm_ goes.
  std::unique_ptr<Stream> stream_;
  std::atomic<uint64_t> ops_{0};  // operations queued so far, to name them
  const size_t fusion_bytes_;
  mutable absl::Mutex fmu_;
  // The fusable allreduces queued and not yet run, in stream order.
  std::deque<std::shared_ptr<Fusable>> fusable_ ABSL_GUARDED_BY(fmu_);
  // The stream's thread only: the batch the ranks agreed on for the next
  // fusable allreduce (0: it runs alone), and the batch's buffer.
  size_t agreed_next_ = 0;
  std::vector<char> batch_buf_;
  std::atomic<uint64_t> fused_ops_{0};
  std::atomic<uint64_t> fused_batches_{0};
  bool destroyed_ = false;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_COMM_COMM_STREAM_H_
