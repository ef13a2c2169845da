#include "core/comm/comm_stream.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/priority.h"
#include "core/base/status.h"
#include "core/comm/fusion.h"

namespace hcomm {

namespace {

// A stream thread's nice value (Stream::Options::nice): HCOMM_STREAM_NICE
// where set (0-19), else 10 where this host's ranks fill its CPUs (the
// scheduler then gives the thread about a tenth of a CPU against a thread
// of nice 0 and lets no wake of it preempt one), else 0.
int StreamNice(const Engine& engine) {
  int nice = 0;
  const char* env = std::getenv("HCOMM_STREAM_NICE");
  if (env != nullptr && *env != '\0' && absl::SimpleAtoi(env, &nice)) {
    return std::clamp(nice, 0, 19);
  }
  return engine.cpus_filled() ? 10 : 0;
}

}  // namespace
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
  // Whether an allreduce is fused must be the same on every rank: the
  // stream fuses up to the smallest of the ranks' fusion_bytes.
  uint64_t fusion_bytes = comm.fusion_bytes();
  absl::Status agreed =
      (*own)->AllReduce(&fusion_bytes, &fusion_bytes, 1, DataType::kUint64, ReduceOp::kMin);
  if (!agreed.ok()) {
    (*own)->Destroy().IgnoreError();
    return Annotate(agreed, absl::StrCat("stream_create (stream ", index, " of rank ",
                                         comm.rank(), "), agreeing on fusion_bytes"));
  }
  (*own)->ProfileAsStream(index, priority);  // from here on, the stream's own operations
  Stream::Options o;
  o.name = absl::StrCat("stream ", index, " of rank ", comm.rank());
  o.priority = priority;
  o.timeout = comm.timeout();
  o.nice = StreamNice(*comm.engine());
  return std::unique_ptr<CommStream>(
      new CommStream(*std::move(own), std::move(o), static_cast<size_t>(fusion_bytes)));
}

CommStream::CommStream(std::unique_ptr<Communicator> comm, Stream::Options options,
                       size_t fusion_bytes)
    : comm_(std::move(comm)),
      stream_(std::make_unique<Stream>(std::move(options))),
      fusion_bytes_(fusion_bytes) {}

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
  if (IsFusable(op)) {
    auto f = std::make_shared<Fusable>();
    f->op = op;
    absl::MutexLock l(&fmu_);
    // Queued while fmu_ is held, so that the item finds itself in fusable_.
    f->seq = stream_->Enqueue(
        std::move(what), [this, f] { return RunBatch(f); },
        [this, f] {
          {
            absl::MutexLock l(&fmu_);
            if (f->taken) return;  // its batch ran (and failed) in an earlier item
            fusable_.erase(std::find(fusable_.begin(), fusable_.end(), f));
          }
          agreed_next_ = 0;
          comm_->RejectCollective(CollectiveOp::kAllReduce);
        });
    fusable_.push_back(std::move(f));
    return;
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
  stream_->Enqueue("host callback", [this, fn, arg] {
    if (ABSL_PREDICT_FALSE(comm_->profiler() != nullptr)) {
      const int64_t start = Recorder::Now();
      fn(arg);
      comm_->RecordStreamSpan("host_callback", start);
    } else {
      fn(arg);
    }
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

bool CommStream::IsFusable(const StreamOp& op) const {
  return op.kind == StreamOpKind::kAllReduce && fusion_bytes_ > 0 && comm_->size() > 1 &&
         op.count > 0 && op.count * DataTypeSize(op.dtype) <= fusion_bytes_ &&
         LanesExact(op.dtype, op.op, comm_->size());
}

size_t CommStream::QueuedAfter(uint64_t seq) const {
  size_t n = 0, bytes = 0;
  const Fusable* first = nullptr;
  uint64_t prev = seq;
  for (const std::shared_ptr<Fusable>& f : fusable_) {
    if (f->taken || f->seq <= seq) continue;
    // Right after the previous one, or after event marks alone (a mark
    // reached once the batch has run still says what it said): anything
    // else between (a host callback, a wait, another operation) ends it.
    if (f->seq != prev + 1 && !stream_->OnlyMarksBetween(prev, f->seq)) break;
    prev = f->seq;
    if (first == nullptr) first = f.get();
    if (f->op.dtype != first->op.dtype || f->op.op != first->op.op) break;
    bytes += f->op.count * DataTypeSize(f->op.dtype);
    if (bytes > fusion_bytes_ || n == kMaxFusedOps) break;
    ++n;
  }
  return n;
}

absl::Status CommStream::RunBatch(const std::shared_ptr<Fusable>& head) {
  std::vector<std::shared_ptr<Fusable>> batch;
  size_t queued_after;
  {
    absl::MutexLock l(&fmu_);
    if (head->taken) return absl::OkStatus();  // it ran in an earlier item's batch
    if (fusable_.empty() || fusable_.front() != head) {
      return Internal("stream fusion: an allreduce runs before an earlier one");
    }
    // The batch agreed on: each rank counted these as queued, so all are.
    const size_t want = std::max<size_t>(agreed_next_, 1);
    const size_t have = 1 + QueuedAfter(head->seq);
    if (have < want) {
      return Internal(absl::StrCat("stream fusion: ", want, " allreduces agreed, ", have,
                                   " queued"));
    }
    for (size_t i = 0; i < want; ++i) {
      fusable_.front()->taken = true;
      batch.push_back(std::move(fusable_.front()));
      fusable_.pop_front();
    }
    queued_after = QueuedAfter(batch.back()->seq);
  }
  agreed_next_ = 0;  // unless this batch's lanes say otherwise
  PriorityScope scope(stream_->priority());
  const StreamOp& first = head->op;
  const size_t es = DataTypeSize(first.dtype);
  size_t total = 0;
  for (const auto& f : batch) total += f->op.count;
  batch_buf_.resize(total * es + LaneBytes(first.dtype));
  char* data = batch_buf_.data();
  for (size_t i = 0, at = 0; i < batch.size(); at += batch[i]->op.count * es, ++i) {
    std::memcpy(data + at, batch[i]->op.send, batch[i]->op.count * es);
  }
  char* lanes = data + total * es;
  WriteLanes(lanes, first.dtype, first.op, queued_after);
  HCOMM_RETURN_IF_ERROR(
      comm_->AllReduce(data, data, total + kFusionLanes, first.dtype, first.op));
  for (size_t i = 0, at = 0; i < batch.size(); at += batch[i]->op.count * es, ++i) {
    std::memcpy(batch[i]->op.recv, data + at, batch[i]->op.count * es);
  }
  agreed_next_ = AgreedBatch(lanes, first.dtype, first.op, comm_->size());
  if (batch.size() > 1) {
    fused_ops_.fetch_add(batch.size(), std::memory_order_relaxed);
    fused_batches_.fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

absl::Status CommStream::Run(const StreamOp& op) {
  PriorityScope scope(stream_->priority());  // lower priorities step aside meanwhile
  Communicator& c = *comm_;
  const size_t es = DataTypeSize(op.dtype);
  switch (op.kind) {
    case StreamOpKind::kSend:
      return c.Send(op.send, op.count * es, es, op.peer_or_root, op.tag, op.dtype);
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
