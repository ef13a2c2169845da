#include "core/comm/comm_stream.h"

#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status.h"

namespace hcomm {
namespace {

// The collective of a stream operation's kind (kSend and kRecv have none).
CollectiveOp CollectiveOf(StreamOpKind kind) {
  return static_cast<CollectiveOp>(static_cast<int>(kind) - static_cast<int>(StreamOpKind::kAllReduce));
}

bool IsCollective(StreamOpKind kind) {
  return kind != StreamOpKind::kSend && kind != StreamOpKind::kRecv;
}

}  // namespace

const char* StreamOpKindName(StreamOpKind kind) {
  switch (kind) {
    case StreamOpKind::kSend: return "send";
    case StreamOpKind::kRecv: return "recv";
    default: return CollectiveOpName(CollectiveOf(kind));
  }
}

absl::StatusOr<std::unique_ptr<CommStream>> CommStream::Create(Communicator& comm, int priority) {
  const int index = comm.TakeStreamIndex();
  std::vector<int> all(comm.size());
  std::iota(all.begin(), all.end(), 0);
  absl::StatusOr<std::unique_ptr<Communicator>> own = comm.CreateGroup(all);
  if (!own.ok()) {
    return Annotate(own.status(), absl::StrCat("stream_create (stream ", index, " of rank ",
                                               comm.rank(), ")"));
  }
  Stream::Options o;
  o.name = absl::StrCat("stream ", index, " of rank ", comm.rank());
  o.priority = priority;
  o.timeout = comm.timeout();
  return std::unique_ptr<CommStream>(new CommStream(*std::move(own), std::move(o)));
}

CommStream::CommStream(std::unique_ptr<Communicator> comm, Stream::Options options)
    : comm_(std::move(comm)), stream_(std::make_unique<Stream>(std::move(options))) {}

CommStream::~CommStream() { Destroy().IgnoreError(); }

void CommStream::Enqueue(const StreamOp& op) {
  const uint64_t n = ops_.fetch_add(1, std::memory_order_relaxed);
  std::string what = absl::StrCat(StreamOpKindName(op.kind), " #", n);
  if (op.kind == StreamOpKind::kSend || op.kind == StreamOpKind::kRecv) {
    absl::StrAppend(&what, op.kind == StreamOpKind::kSend ? " to" : " from", " rank ",
                    op.peer_or_root, " tag ", op.tag);
  }
  if (op.kind != StreamOpKind::kBarrier) {
    absl::StrAppend(&what, " (", op.count, " x ", DataTypeName(op.dtype), ")");
  }
  Stream::Skipped skipped;
  if (IsCollective(op.kind)) {
    // The stream failed before this collective: the other ranks' streams
    // may not have, and would wait for it; refusing it fails theirs at once.
    skipped = [this, op = CollectiveOf(op.kind)] { comm_->RejectCollective(op); };
  }
  stream_->Enqueue(std::move(what), [this, op] { return Run(op); }, std::move(skipped));
}

void CommStream::EnqueueHost(void (*fn)(void*), void* arg) {
  stream_->Enqueue("host callback", [fn, arg] {
    fn(arg);
    return absl::OkStatus();
  });
}

void CommStream::EnqueueRejection(StreamOpKind kind) {
  if (!IsCollective(kind)) return;  // a point-to-point call has no turn to keep
  const uint64_t n = ops_.fetch_add(1, std::memory_order_relaxed);
  const CollectiveOp op = CollectiveOf(kind);
  // Runs after a failure as well: the other ranks wait for this turn.
  stream_->Enqueue(
      absl::StrCat(StreamOpKindName(kind), " #", n, " (refused here)"),
      [this, op] {
        comm_->RejectCollective(op);
        return absl::OkStatus();  // the caller had its INVALID_ARGUMENT already
      },
      [this, op] { comm_->RejectCollective(op); });
}

absl::Status CommStream::Run(const StreamOp& op) {
  Communicator& c = *comm_;
  const size_t es = DataTypeSize(op.dtype);
  switch (op.kind) {
    case StreamOpKind::kSend:
      return c.Send(op.send, op.count * es, es, op.peer_or_root, op.tag);
    case StreamOpKind::kRecv:
      return c.Recv(op.recv, op.count * es, es, op.peer_or_root, op.tag);
    case StreamOpKind::kAllReduce:
      return c.AllReduce(op.send, op.recv, op.count, op.dtype, op.op);
    case StreamOpKind::kBroadcast:
      return c.Broadcast(op.recv, op.count, op.dtype, op.peer_or_root);
    case StreamOpKind::kReduce:
      return c.Reduce(op.send, op.recv, op.count, op.dtype, op.op, op.peer_or_root);
    case StreamOpKind::kAllGather:
      return c.AllGather(op.send, op.recv, op.count, op.dtype);
    case StreamOpKind::kReduceScatter:
      return c.ReduceScatter(op.send, op.recv, op.count, op.dtype, op.op);
    case StreamOpKind::kAllToAll:
      return c.AllToAll(op.send, op.recv, op.count, op.dtype);
    case StreamOpKind::kGather:
      return c.Gather(op.send, op.recv, op.count, op.dtype, op.peer_or_root);
    case StreamOpKind::kScatter:
      return c.Scatter(op.send, op.recv, op.count, op.dtype, op.peer_or_root);
    case StreamOpKind::kBarrier:
      return c.Barrier();
  }
  return Internal(absl::StrCat("stream operation of unknown kind ", static_cast<int>(op.kind)));
}

absl::Status CommStream::Destroy() {
  if (destroyed_) return absl::OkStatus();
  destroyed_ = true;
  absl::Status first = stream_->Synchronize(comm_->timeout());
  stream_.reset();  // runs out whatever a timed-out wait left queued
  absl::Status ended = comm_->Destroy();
  return first.ok() ? ended : first;
}

}  // namespace hcomm
