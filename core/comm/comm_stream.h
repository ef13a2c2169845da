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
// THREAD SAFETY: Enqueue, EnqueueHost, Synchronize and Idle may be called
// from any thread; Destroy from one, with no other call in flight.
#ifndef HCOMM_CORE_COMM_COMM_STREAM_H_
#define HCOMM_CORE_COMM_COMM_STREAM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
  // Stream::Synchronize with the communicator's timeout as the stall.
  absl::Status Synchronize() { return stream_->Synchronize(comm_->timeout()); }
  bool Idle() const { return stream_->Idle(); }
  // Runs what is queued, then ends the stream's communicator. Returns the
  // first failure not yet returned by Synchronize, if any.
  absl::Status Destroy();

 private:
  CommStream(std::unique_ptr<Communicator> comm, Stream::Options options);
  absl::Status Run(const StreamOp& op);

  std::unique_ptr<Communicator> comm_;
  // Declared after comm_, so that it runs its queue out before comm_ goes.
  std::unique_ptr<Stream> stream_;
  std::atomic<uint64_t> ops_{0};  // operations queued so far, to name them
  bool destroyed_ = false;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_COMM_COMM_STREAM_H_
