// Collectives: each call a CollectiveCall, run in call order, every rank in
// the same order, by the table's algorithm the selector picks.
#include "core/comm/communicator.h"

#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "algorithms/table.h"
#include "core/base/clock.h"
#include "core/base/spin.h"
#include "core/comm/collective_peers.h"

namespace hcomm {

// ---------------------------------------------------------------------------
// The collective calls: each one a CollectiveCall, run in call order by the
// algorithm the selector picks from the table (algorithms/table.h).

void Communicator::RejectCollective(CollectiveOp op) {
  const uint64_t ticket = TakeTicket();
  if (now_serving_.load(std::memory_order_acquire) != ticket) {
    // Nonblocking collectives ahead of it still run on the worker: the
    // rejection takes its turn after them there, and the call returns now.
    absl::MutexLock l(&work_mu_);
    if (!work_stop_ && worker_.joinable()) {
      work_.push_back([this, ticket, op] { RunRejection(ticket, op); });
      return;
    }
  }
  RunRejection(ticket, op);
}

void Communicator::RunRejection(uint64_t ticket, CollectiveOp op) {
  WaitTurn(ticket);
  if (size_ > 1 && engine_->Usable().ok()) {
    const int tag = static_cast<int>(ticket & kCollectiveTagMask);
    if (shm_coll_ != nullptr) {
      shm_coll_->Enter(tag, kRejectedFingerprint);
      // Where the call runs in the shared segment, the others' runs there
      // fail and leave it (RunServing): so does this rank.
      if (ChooseCached(op, 0, forced_algo_.load()).algo == Algorithm::kSegment) shm_coll_.reset();
    }
    const int me = group_to_world_[rank_];
    engine_->Poison(coll_ctx_, tag, group_to_world_, kRejectedFingerprint, me,
                    kRejectedFingerprint);
    if (check_calls_ && fingerprints_) {  // the others may wait in CheckCall
      engine_->Poison(coll_ctx_, kCheckTag | (tag & kCheckTagMask), group_to_world_,
                      kRejectedFingerprint, me, kRejectedFingerprint);
    }
  }
  FinishTurn();
}

absl::Status Communicator::CheckRoot(CollectiveOp op, int root) {
  if (root < 0 || root >= size_) {
    RejectCollective(op);
    return InvalidArgument(absl::StrCat(CollectiveOpName(op), " on rank ", rank_, ": root ", root,
                                        " is out of range for a communicator of ", size_,
                                        " ranks"));
  }
  return absl::OkStatus();
}

uint64_t Communicator::TakeTicket() {
  return next_ticket_.fetch_add(1, std::memory_order_relaxed);
}

absl::Status Communicator::RunCollective(const CollectiveCall& call) {
  if (ABSL_PREDICT_FALSE(profile_ != nullptr)) {
    const int64_t start = Recorder::Now();
    const uint64_t ticket = TakeTicket();
    WaitTurn(ticket);
    Algorithm algo = Algorithm::kAuto;
    absl::Status s = RunServing(ticket, call, &algo);
    RecordCollective(call, ticket, start, algo, s);
    return s;
  }
  const uint64_t ticket = TakeTicket();
  WaitTurn(ticket);
  return RunServing(ticket, call);
}

void Communicator::WaitTurn(uint64_t ticket) {
  // Acquire: what the collective before us did happens before ours.
  if (now_serving_.load(std::memory_order_acquire) == ticket) return;
  absl::MutexLock l(&turn_mu_);
  // Dekker with FinishTurn, whose side is the light one (core/base/fence.h):
  // either it sees us counted and signals, or we see its turn ended.
  turn_waiters_.fetch_add(1, std::memory_order_seq_cst);
  HeavyFence(light_fences_);
  // (Naps, not an endless wait: a turn's end is never missed for longer.)
  while (now_serving_.load(std::memory_order_acquire) != ticket) {
    turn_cv_.WaitFor(&turn_mu_, absl::Milliseconds(10));
  }
  turn_waiters_.fetch_sub(1, std::memory_order_relaxed);
}

void Communicator::FinishTurn() {
  // Only the turn's owner moves it on: a plain store. (A locked add here
  // waited, after every collective, for the stores it had published to
  // reach the other ranks' CPUs; measured: docs/performance.md, "The end of
  // a collective's turn".)
  now_serving_.store(now_serving_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  LightFence(light_fences_);
  if (turn_waiters_.load(std::memory_order_relaxed) > 0) {
    absl::MutexLock l(&turn_mu_);
    turn_cv_.SignalAll();
  }
}

const Choice& Communicator::ChooseCached(CollectiveOp op, size_t bytes, Algorithm forced) {
  auto& c = choice_cache_;
  const bool segment = shm_coll_ != nullptr;
  if (!c.valid || c.op != op || c.bytes != bytes || c.forced != forced || c.segment != segment) {
    c.choice = ChooseAlgorithm(op, bytes, size_, link_, forced, segment);
    c.op = op;
    c.bytes = bytes;
    c.forced = forced;
    c.segment = segment;
    c.valid = true;
  }
  return c.choice;
}

absl::Status Communicator::RunServing(uint64_t ticket, const CollectiveCall& call,
                                      Algorithm* chosen) {
  absl::Status usable = engine_->Usable();
  if (!usable.ok()) {
    FinishTurn();
    engine_->flight().End(
        engine_->flight().Begin(CollectiveOpName(call.op), coll_ctx_, static_cast<int64_t>(ticket),
                                call.root >= 0 ? group_to_world_[call.root] : -1, -1, 0,
                                FlightRecorder::State::kInProgress),
        false);
    return Annotate(usable, CollectiveOpName(call.op));
  }
  // The size the cost model prices: one rank's vector, or the whole input
  // or output (selector.h). float16/bfloat16 reductions among more than two
  // ranks travel as float32 in the ring and the trees (OnFloat32): every
  // algorithm is priced as for float32, the direct exchange too, which then
  // carries half that (docs/performance.md, "16-bit reductions").
  const bool per_rank = call.op == CollectiveOp::kAllReduce ||
                        call.op == CollectiveOp::kBroadcast || call.op == CollectiveOp::kReduce;
  const size_t bytes = call.count * DataTypeSize(call.dtype) * (per_rank ? 1 : size_);
  const int widen = Reduces(call.op) && IsHalfFloat(call.dtype) &&
                            !HalfTravelsAsIs(Algorithm::kRing, size_)
                        ? 2
                        : 1;
  const Choice& choice = ChooseCached(call.op, bytes * widen, forced_algo_.load());
  const AlgorithmEntry* entry = choice.entry;
  const bool in_segment = choice.algo == Algorithm::kSegment && !call.hierarchical;
  if (chosen != nullptr) *chosen = call.hierarchical ? Algorithm::kHierarchical : choice.algo;
  // Described only if something goes wrong: a collective's hot path
  // formats nothing.
  CallInfo info{call.op, ticket, call.count, call.dtype, call.reduce, call.root, choice.algo,
                size_};
  if (debug_info_ && rank_ == 0 && !call.hierarchical) DebugChoice(call, bytes, choice);
  absl::Status s;
  // Compression (core/comm/wire_codec.h): float32 pieces of these
  // collectives travel as 16-bit floats where the link pays for it; every
  // rank must have the same setting, which the fingerprint carries.
  HalfFormat half;
  const bool compress = call.dtype == DataType::kFloat32 && size_ > 1 && !in_segment &&
                        !call.hierarchical &&
                        (call.op == CollectiveOp::kAllReduce || call.op == CollectiveOp::kReduce ||
                         call.op == CollectiveOp::kReduceScatter ||
                         call.op == CollectiveOp::kAllGather ||
                         call.op == CollectiveOp::kBroadcast) &&
                        WireHalf(&half);
  uint64_t fp = Fingerprint(call.op, call.count, call.dtype, call.reduce, call.root);
  if (compress) fp = CompressedFingerprint(fp, half);
  engine_->NoteCollective(activity_, ticket, fp, /*in_progress=*/true);
  const uint64_t fl = engine_->flight().Begin(
      CollectiveOpName(call.op), coll_ctx_, static_cast<int64_t>(ticket),
      call.root >= 0 ? group_to_world_[call.root] : -1, -1, bytes,
      FlightRecorder::State::kInProgress);
  const int tag = static_cast<int>(ticket & kCollectiveTagMask);
  if (shm_coll_ != nullptr) shm_coll_->Enter(tag, fp);
  {
    // HCOMM_FINGERPRINTS=0 sends none (to measure what the check costs).
    CollectivePeers peers(this, tag, fingerprints_ ? fp : 0, timeout(), info);
    if (compress) {
      if (call.op == CollectiveOp::kAllReduce) {
        peers.CompressFloats(half, call.recv, call.count * 4);
      } else {
        peers.CompressFloats(half);
      }
    }
    // Aborted, broken by a member's failure, or found clashing by another
    // rank already: even a collective that would send nothing (one rank)
    // fails.
    if (!engine_->Calm()) s = peers.Interrupted();
    // (The shared segment compares every call already.)
    if (s.ok() && !in_segment && check_calls_ && fingerprints_ && size_ > 1) {
      s = CheckCall(peers, tag);
    }
    if (s.ok() && call.hierarchical) {
      s = RunHierarchical(call);
    } else if (s.ok()) {
      if (entry == nullptr) {
        s = Internal(absl::StrCat("no ", AlgorithmName(choice.algo), " ",
                                  CollectiveOpName(call.op), " in the algorithm table"));
      } else {
        RunEnv env;
        env.link = &link_;
        env.ring_order = &ring_order_;
        env.switch_order = &switch_order_;
        env.segment = shm_coll_.get();
        env.waiter = &peers;
        env.seq = static_cast<uint64_t>(tag);
        env.fingerprint = fp;
        s = entry->run(peers, call, env);
      }
    }
    // Its counters are out of step now (as the others', which failed too).
    if (in_segment && !s.ok()) shm_coll_.reset();
  }
  engine_->NoteCollective(activity_, ticket, fp, /*in_progress=*/false);
  engine_->flight().End(fl, s.ok());
  FinishTurn();
  // (A timeout's dump, with every rank's record, was written by its hang
  // report.)
  if (ABSL_PREDICT_FALSE(!s.ok()) && CodeOf(s) != ErrorCode::kTimeout) DumpFlight(s.message());
  return s;
}

void Communicator::DebugChoice(const CollectiveCall& call, size_t bytes, const Choice& choice) {
  const char* dtype = call.op == CollectiveOp::kBarrier ? "" : DataTypeName(call.dtype);
  if (choice.algo == Algorithm::kSegment) {
    fprintf(stderr, "hcomm INFO: %s %s %s %d ranks -> shared memory (all ranks on this host)\n",
            CollectiveOpName(call.op), Bytes(bytes).c_str(), dtype, size_);
    return;
  }
  // The ring allreduce's order, where it is not the rank order.
  std::string order;
  if (call.op == CollectiveOp::kAllReduce && choice.algo == Algorithm::kRing &&
      !switch_order_.empty()) {
    // "ranks by switch 0 2 | 1 3 (s1 | s2)": where the ring crosses switches.
    std::string ranks, names;
    for (size_t i = 0; i < switch_order_.size(); ++i) {
      const Placement& at = engine_->placement(group_to_world_[switch_order_[i]]);
      const bool next_switch =
          i > 0 && at.switch_id !=
                       engine_->placement(group_to_world_[switch_order_[i - 1]]).switch_id;
      absl::StrAppend(&ranks, i == 0 ? "" : (next_switch ? " | " : " "), switch_order_[i]);
      if (i == 0 || next_switch) {
        absl::StrAppend(&names, i == 0 ? "" : " | ", at.switch_id.empty() ? "?" : at.switch_id);
      }
    }
    order = absl::StrCat(", ranks by switch ", ranks, " (", names, ")");
  } else if (call.op == CollectiveOp::kAllReduce && choice.algo == Algorithm::kRing &&
             size_ > 2 && RingByCpu(bytes * (IsHalfFloat(call.dtype) ? 2 : 1), &ring_order_)) {
    order = absl::StrCat(", ranks by CPU ", absl::StrJoin(ring_order_, " "));
  }
  fprintf(stderr, "hcomm INFO: %s %s %s %d ranks -> %s%s (%s)%s\n", CollectiveOpName(call.op),
          Bytes(bytes).c_str(), dtype, size_, AlgorithmName(choice.algo),
          choice.forced ? " [forced]" : "", choice.Explain().c_str(), order.c_str());
}

absl::Status Communicator::CheckCall(CollectivePeers& peers, int tag) {
  // Empty messages carrying the call's fingerprint, to and from every
  // member: a rank whose call differs from any other's finds it in one of
  // its receives (the engine compares fingerprints), and so does every
  // rank, since each has some member whose call differs from its own.
  peers.set_wire_tag(kCheckTag | (tag & kCheckTagMask));
  absl::Status s;
  {
    InFlight f(peers);
    char none = 0;
    for (int p = 0; p < size_ && s.ok(); ++p) {
      if (p != rank_) s = f.Recv(&none, 0, p);
    }
    for (int p = 0; p < size_ && s.ok(); ++p) {
      if (p != rank_) s = f.Send(&none, 0, p);
    }
    if (s.ok()) s = f.WaitAll();
  }
  peers.set_wire_tag(tag);
  return s;
}

absl::Status Communicator::AllReduce(const void* send, void* recv, size_t count, DataType t,
                                     ReduceOp op) {
  if (ABSL_PREDICT_FALSE(HierarchyFits()) && op != ReduceOp::kAvg &&
      UsesHierarchy(CollectiveOp::kAllReduce, count * DataTypeSize(t))) {
    HCOMM_RETURN_IF_ERROR(MakeHierarchyGroups());
    return RunCollective({CollectiveOp::kAllReduce, send, recv, count, t, op, -1, true});
  }
  return RunCollective({CollectiveOp::kAllReduce, send, recv, count, t, op, -1});
}

absl::Status Communicator::Broadcast(void* buf, size_t count, DataType t, int root) {
  HCOMM_RETURN_IF_ERROR(CheckRoot(CollectiveOp::kBroadcast, root));
  HalfFormat half;
  const size_t bytes = count * DataTypeSize(t);
  if (ABSL_PREDICT_FALSE(compression_delta_.load(std::memory_order_relaxed)) &&
      bytes >= kMinDeltaBytes && size_ > 1 && !(t == DataType::kFloat32 && WireHalf(&half)) &&
      std::any_of(half_peers_.begin(), half_peers_.end(), [](char c) { return c != 0; })) {
    return BroadcastDelta(buf, bytes, root);
  }
  if (ABSL_PREDICT_FALSE(HierarchyFits()) && UsesHierarchy(CollectiveOp::kBroadcast, bytes)) {
    HCOMM_RETURN_IF_ERROR(MakeHierarchyGroups());
    return RunCollective(
        {CollectiveOp::kBroadcast, buf, buf, count, t, ReduceOp::kSum, root, true});
  }
  return RunCollective({CollectiveOp::kBroadcast, buf, buf, count, t, ReduceOp::kSum, root});
}

absl::Status Communicator::Reduce(const void* send, void* recv, size_t count, DataType t,
                                  ReduceOp op, int root) {
  HCOMM_RETURN_IF_ERROR(CheckRoot(CollectiveOp::kReduce, root));
  if (ABSL_PREDICT_FALSE(HierarchyFits()) && op != ReduceOp::kAvg &&
      UsesHierarchy(CollectiveOp::kReduce, count * DataTypeSize(t))) {
    HCOMM_RETURN_IF_ERROR(MakeHierarchyGroups());
    return RunCollective({CollectiveOp::kReduce, send, recv, count, t, op, root, true});
  }
  return RunCollective({CollectiveOp::kReduce, send, recv, count, t, op, root});
}

absl::Status Communicator::AllGather(const void* send, void* recv, size_t sendcount,
                                     DataType t) {
  return RunCollective({CollectiveOp::kAllGather, send, recv, sendcount, t, ReduceOp::kSum, -1});
}

absl::Status Communicator::ReduceScatter(const void* send, void* recv, size_t recvcount,
                                         DataType t, ReduceOp op) {
  return RunCollective({CollectiveOp::kReduceScatter, send, recv, recvcount, t, op, -1});
}

absl::Status Communicator::AllToAll(const void* send, void* recv, size_t count, DataType t) {
  return RunCollective({CollectiveOp::kAllToAll, send, recv, count, t, ReduceOp::kSum, -1});
}

absl::Status Communicator::Gather(const void* send, void* recv, size_t sendcount, DataType t,
                                  int root) {
  HCOMM_RETURN_IF_ERROR(CheckRoot(CollectiveOp::kGather, root));
  return RunCollective({CollectiveOp::kGather, send, recv, sendcount, t, ReduceOp::kSum, root});
}

absl::Status Communicator::Scatter(const void* send, void* recv, size_t recvcount, DataType t,
                                   int root) {
  HCOMM_RETURN_IF_ERROR(CheckRoot(CollectiveOp::kScatter, root));
  return RunCollective({CollectiveOp::kScatter, send, recv, recvcount, t, ReduceOp::kSum, root});
}

absl::Status Communicator::Barrier() {
  return RunCollective(
      {CollectiveOp::kBarrier, nullptr, nullptr, 0, DataType::kUint8, ReduceOp::kSum, -1});
}

absl::StatusOr<std::shared_ptr<Request>> Communicator::IAllReduce(const void* send, void* recv,
                                                                  size_t count, DataType t,
                                                                  ReduceOp op) {
  auto r = std::make_shared<Request>();
  r->kind = Request::Kind::kCollective;
  r->started = MonoNow();
  r->bytes = count * DataTypeSize(t);
  r->elem_size = DataTypeSize(t);
  r->out_source = engine_->rank();
  // The ticket is taken now, so the order of collectives is the call order
  // even though this one runs on the worker thread.
  uint64_t ticket = TakeTicket();
  const CollectiveCall call{CollectiveOp::kAllReduce, send, recv, count, t, op, -1};
  absl::MutexLock l(&work_mu_);
  if (work_stop_) return Aborted("iallreduce: the communicator is being destroyed");
  if (!worker_.joinable()) {
    worker_ = std::thread([this] {
      for (;;) {
        std::function<void()> job;
        {
          absl::MutexLock l(&work_mu_);
          auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(work_mu_) {
            return work_stop_ || !work_.empty();
          };
          work_mu_.Await(absl::Condition(&ready));
          if (work_.empty()) return;
          job = std::move(work_.front());
          work_.pop_front();
        }
        job();
      }
    });
  }
  ++iallreduces_pending_;
  work_.push_back([this, r, ticket, call] {
    const int64_t start = profile_ != nullptr ? Recorder::Now() : 0;
    WaitTurn(ticket);
    Algorithm algo = Algorithm::kAuto;
    absl::Status s = RunServing(ticket, call, &algo);
    if (profile_ != nullptr) RecordCollective(call, ticket, start, algo, s);
    r->out_bytes = r->bytes;
    {
      absl::MutexLock l(&work_mu_);
      --iallreduces_pending_;  // before its waiter can see it done
    }
    engine_->CompleteExternal(r, s);
  });
  return r;
}

}  // namespace hcomm
