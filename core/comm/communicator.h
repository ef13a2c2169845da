// A communicator: a group of ranks over a shared Engine, with point-to-point
// messages in its own matching context and collectives in another.
//
//   HCOMM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world,
//                          Communicator::Init(options));
//   HCOMM_RETURN_IF_ERROR(world->AllReduce(in, out, n, DataType::kFloat32, ReduceOp::kSum));
//   HCOMM_ASSIGN_OR_RETURN(auto half, world->Split(world->rank() % 2, 0));
//
// The world communicator owns the job's connections (core/p2p/engine.h);
// communicators made by Split/CreateGroup share them, each with its own two
// contexts, so their messages never match each other's.
//
// Collectives run in the order they were called (also a nonblocking
// allreduce, which runs on a worker thread), and every rank must call them in
// the same order. Each call chooses its algorithm with the cost model of
// algorithms/selector.h unless the `algo` key forces one.
//
// THREAD SAFETY: point-to-point calls may come from several threads at
// once; collectives from one thread at a time; Destroy from none other.
#ifndef HCOMM_CORE_COMM_COMMUNICATOR_H_
#define HCOMM_CORE_COMM_COMMUNICATOR_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "algorithms/collective.h"
#include "algorithms/kernels/reduce.h"
#include "algorithms/selector.h"
#include "algorithms/table.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/comm/delta_state.h"
#include "core/comm/request_driver.h"
#include "core/comm/wire_codec.h"
#include "core/profile/recorder.h"
#include "core/p2p/engine.h"
#include "core/base/fence.h"
#include "core/p2p/request.h"
#include "algorithms/shm_collective.h"

namespace hcomm {

class Communicator {
 public:
  // Joins the job (see Engine::Init) and returns its world communicator.
  static absl::StatusOr<std::unique_ptr<Communicator>> Init(const Options& opts);
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The ring allreduce's order of this communicator's ranks for vectors of
  // up to 4 MiB where ranks share CPUs and all talk over TCP
  // (RingByPlacement); empty: rank order.
  const std::vector<int>& ring_order() const { return ring_order_; }
  // The ring allreduce's order where the members hang off more than one
  // switch: grouped by switch, then host (core/topology/switches.h); empty
  // otherwise.
  const std::vector<int>& switch_order() const { return switch_order_; }
  absl::Duration timeout() const {
    return absl::Milliseconds(timeout_ms_.load(std::memory_order_relaxed));
  }
  MonoTime Deadline() const { return MonoNow() + timeout(); }
  // For each world rank, its rank here (-1: not a member). Shared with
  // requests so they can report sources after this communicator is gone.
  const std::shared_ptr<const std::vector<int>>& world_to_group() const { return world_to_group_; }
  const std::shared_ptr<Engine>& engine() const { return engine_; }
  // What its requests need once it is gone (core/comm/request_driver.h).
  const std::shared_ptr<RequestDriver>& request_driver() const { return driver_; }

  // Whether collectives run in a segment shared by all ranks
  // (algorithms/shm_collective.h) rather than by messages.
  bool has_shm_collective() const { return shm_coll_ != nullptr; }
  // Whether its large allreduces go by cross-memory attach
  // (HCOMM_SHM_COLL_CMA=1 on every rank, and every rank may read the others).
  bool shm_collective_cma() const { return shm_coll_ != nullptr && shm_coll_->cma(); }

  // The transport to rank `peer` of this communicator.
  const char* TransportTo(int peer) const { return engine_->TransportTo(group_to_world_[peer]); }

  // Local: 0, 1, 2, ... for the streams made over this communicator
  // (core/comm/comm_stream.h), to name them.
  int TakeStreamIndex() { return streams_made_.fetch_add(1, std::memory_order_relaxed); }

  // The most bytes of allreduces a stream made from here fuses (config key
  // fusion_bytes; "auto": FusionBytes of this communicator's link model).
  size_t fusion_bytes() const;

  // Whether FLOAT32 data to or from rank `peer` travels as 16-bit floats
  // when the `compression` key asks for it: not over shared memory, which
  // moves float32 faster than the conversion (core/comm/wire_codec.h).
  bool CompressesTo(int peer) const { return half_peers_[peer] != 0; }
  // The 16-bit format FLOAT32 data travels in; false: none.
  bool WireHalf(HalfFormat* f) const {
    return HalfOf(static_cast<Options::Half>(compression_half_.load(std::memory_order_relaxed)), f);
  }

  // Whether hierarchical collectives can run on this communicator: its
  // members fall into groups of the same size >= 2, by host, or (one
  // member per host) by switch; and the levels the cost model prices
  // them over (hierarchical.cc).
  bool hierarchy_fits() const { return HierarchyFits(); }
  const std::vector<HierarchyLevel>& hierarchy_levels() const { return hier_levels_; }
  // Whether an allreduce, broadcast or reduce of `bytes` per rank runs
  // hierarchically: algo=hierarchical, or under auto the cost model's
  // choice (the same on every member).
  bool UsesHierarchy(CollectiveOp op, size_t bytes);

  // What `delta` keeps now (core/comm/delta_state.h).
  const DeltaState& delta_state() const { return *delta_; }

  // Only timeout_ms, algo, fusion_bytes, compression and delta_cache_bytes
  // can change after init.
  absl::Status SetOption(absl::string_view key, absl::string_view value);

  // Point-to-point; ranks are this communicator's. A send's `t` says
  // whether its data may travel compressed (FLOAT32 with the `compression`
  // key's fp16 or bf16: core/comm/wire_codec.h); a receive decodes whatever
  // the sender coded.
  absl::StatusOr<std::shared_ptr<Request>> Isend(const void* buf, size_t bytes, size_t elem_size,
                                                 int peer, int tag,
                                                 DataType t = DataType::kUint8);
  absl::StatusOr<std::shared_ptr<Request>> Irecv(void* buf, size_t bytes, size_t elem_size,
                                                 int peer, int tag);
  absl::Status Send(const void* buf, size_t bytes, size_t elem_size, int peer, int tag,
                    DataType t = DataType::kUint8);
  absl::Status Recv(void* buf, size_t bytes, size_t elem_size, int peer, int tag);
  absl::Status Wait(Request* r, MonoTime deadline) { return driver_->Wait(r, deadline); }
  bool Test(Request* r) { return driver_->Test(r); }
  void Release(const std::shared_ptr<Request>& r) { engine_->Release(r); }

  // Collectives (counts in elements; send == recv is in place; see
  // c_api/include/hcomm/hcomm.h for each one's contract).
  absl::Status AllReduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op);
  absl::Status Broadcast(void* buf, size_t count, DataType t, int root);
  absl::Status Reduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op,
                      int root);
  absl::Status AllGather(const void* send, void* recv, size_t sendcount, DataType t);
  absl::Status ReduceScatter(const void* send, void* recv, size_t recvcount, DataType t,
                             ReduceOp op);
  absl::Status AllToAll(const void* send, void* recv, size_t count, DataType t);
  absl::Status Gather(const void* send, void* recv, size_t sendcount, DataType t, int root);
  absl::Status Scatter(const void* send, void* recv, size_t recvcount, DataType t, int root);
  absl::Status Barrier();
  // Starts an allreduce that completes through Wait/Test.
  absl::StatusOr<std::shared_ptr<Request>> IAllReduce(const void* send, void* recv, size_t count,
                                                      DataType t, ReduceOp op);

  // A collective call `op` that this rank refuses for its arguments before
  // it starts (the caller returns INVALID_ARGUMENT): it still uses up the
  // call's sequence number, as the other ranks' calls of it do, and fails
  // theirs at once with MISMATCH naming this rank, so that every later
  // collective still meets the same call on every rank (without this, each
  // rank's next call would pair with another rank's call after it).
  void RejectCollective(CollectiveOp op);

  // Collective over this communicator. Members with the same color form a
  // new communicator ordered by (key, rank); color < 0 yields nullptr.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key);
  // Collective over this communicator: `ranks` (the same list everywhere)
  // become ranks 0..k-1 of a new communicator; non-members get nullptr.
  absl::StatusOr<std::unique_ptr<Communicator>> CreateGroup(const std::vector<int>& ranks);
  // After a member's failure (PEER_FAILURE): the surviving members agree on
  // which members are gone and become ranks 0..k-1 of a new communicator,
  // in their order here (shrink.cc). Collective over the survivors; without
  // a failure, a communicator of every member. Never null on success.
  // The agreement runs in a context of its own (kShrinkContextBit), which
  // no member's failure breaks; it ends by this communicator's timeout.
  absl::StatusOr<std::unique_ptr<Communicator>> Shrink();

  // Fails every pending and later operation with Aborted. The world's
  // abort tears the job's connections down (Engine::Abort), so every group
  // made from it fails too; a group's ends that group alone
  // (Engine::AbortCommunicator: its members' operations with this rank
  // there fail with PEER_FAILURE).
  void Abort();
  // Local. The last communicator of the engine (the world, or a group made
  // from it) shuts it down in order (see Engine::Destroy); others end their
  // two contexts (Engine::CloseContexts), so that groups outlive the world.
  absl::Status Destroy();

  // Profiling (core/profile; API.md, "Profiling"): null when off. One
  // recorder for the world and every communicator made from it.
  Recorder* profiler() const { return profile_.get(); }
  // This communicator carries stream `index`'s operations
  // (core/comm/comm_stream.h): its spans go on that stream's track.
  void ProfileAsStream(int index, int priority);
  // Profiling: a span named `name` from `start_ns` (Recorder::Now) until
  // now on this communicator's stream track (a stream's host callback).
  void RecordStreamSpan(const char* name, int64_t start_ns);

 private:
  class CollectivePeers;
  struct CallInfo;
  struct Scratch {
    char* data = nullptr;
    size_t capacity = 0;
  };

  Communicator(std::shared_ptr<Engine> engine, std::vector<int> group_to_world,
               uint32_t first_ctx, const Options& opts);

  // Isend's work: posts the send, coded as `compression` says.
  absl::StatusOr<std::shared_ptr<Request>> PostSend(const void* buf, size_t bytes,
                                                    size_t elem_size, int peer, int tag,
                                                    DataType t);
  // A point-to-point send's data in the 16-bit form it travels in, with
  // its fingerprint in *fingerprint; null: it travels as it is.
  std::unique_ptr<uint16_t[]> CodeForPeer(const void* buf, size_t bytes, DataType t, int peer,
                                          uint64_t* fingerprint) const;
  // Whether a point-to-point send of `bytes` to `peer` under `tag` may go
  // delta-coded (compression `delta`; core/comm/delta_state.h).
  bool DeltaTo(int peer, size_t bytes, int tag) const {
    return compression_delta_.load(std::memory_order_relaxed) && bytes >= kMinDeltaBytes &&
           tag >= 0 && half_peers_[peer] != 0;
  }
  // Hierarchical collectives (hierarchical.cc): the shape from the
  // members' hosts and switches, the groups (made on first use), and the
  // operations in three steps over them.
  // HCOMM_DEBUG=INFO at init: the host's layout (hwloc) and its ranks'
  // NUMA nodes, from the host's first rank.
  void DescribeHost() const;
  void SetUpHierarchy(const std::vector<std::string>& hosts,
                      const std::vector<std::string>& switches);
  bool HierarchyFits() const { return hier_groups_ >= 2; }
  absl::Status MakeHierarchyGroups();
  // The rank, in the group of members with place `index` in their group,
  // of group `group`'s member with that place.
  int AcrossRank(int group, int index) const;
  absl::Status RunHierarchical(const CollectiveCall& call);
  absl::Status HierarchicalAllReduce(const void* send, void* recv, size_t count, DataType t,
                                     ReduceOp op);
  absl::Status HierarchicalBroadcast(void* buf, size_t count, DataType t, int root);
  absl::Status HierarchicalReduce(const void* send, void* recv, size_t count, DataType t,
                                  ReduceOp op, int root);
  // Broadcast of `bytes` bytes as a delta against the previous broadcast
  // of that size from `root` (delta_broadcast.cc), or whole where a rank
  // lacks the base.
  absl::Status BroadcastDelta(void* buf, size_t bytes, int root);
  // RejectCollective's part in turn: marks `ticket` rejected here and at
  // every member.
  void RunRejection(uint64_t ticket, CollectiveOp op);
  uint64_t TakeTicket();
  // Runs `call` with the next sequence number, once all earlier
  // collectives of this communicator have finished.
  absl::Status RunCollective(const CollectiveCall& call);
  // Exchanges the call's fingerprint with every member (empty messages
  // under the check tag of sequence number `tag`): Mismatch on every rank
  // if any two members' calls differ. (The shared segment compares every
  // call already.)
  absl::Status CheckCall(CollectivePeers& peers, int tag);
  // Collective over the members: maps the communicator's shared-memory
  // segment when every member shares this host (and HCOMM_SHM_COLL is not
  // 0), agreeing with the others on whether all could.
  absl::Status SetUpShmCollective();
  // Collective over the members: keeps ring_order_ where no member talks
  // to another over shared memory, else drops it.
  absl::Status SetUpRingOrder();
  // min over the members of `v`, with the setup tags (no sequence number).
  absl::StatusOr<int32_t> SetupAgreeMin(int32_t v, int round);
  // Waits until it is collective `ticket`'s turn; FinishTurn ends the turn
  // and serves the next ticket.
  void WaitTurn(uint64_t ticket);
  void FinishTurn();
  // Runs collective `ticket`, whose turn it is, with the algorithm the
  // selector picks from the table, and serves the next.
  // `chosen` (if not null) gets the algorithm it ran.
  absl::Status RunServing(uint64_t ticket, const CollectiveCall& call,
                          Algorithm* chosen = nullptr);
  // The algorithm for a call: the selector's choice, remembered for the
  // last (op, bytes, forced, segment) asked (only the serving collective
  // calls it).
  const Choice& ChooseCached(CollectiveOp op, size_t bytes, Algorithm forced);
  // HCOMM_DEBUG=INFO: the choice and its costs, on stderr.
  void DebugChoice(const CollectiveCall& call, size_t bytes, const Choice& choice);
  // Profiling (profiling.cc): a span for collective `ticket` begun at
  // `start_ns`; a point-to-point call's; and, at the world's destroy, the
  // clocks' offsets and every rank's spans gathered into rank 0's file.
  void RecordCollective(const CollectiveCall& call, uint64_t ticket, int64_t start_ns,
                        Algorithm algo, const absl::Status& s);
  void RecordP2p(const char* name, int64_t start_ns, size_t bytes, size_t elem_size, int peer,
                 int tag, const absl::Status& s);
  absl::Status WriteProfile();
  // A nonblocking point-to-point request posted at `start_ns`: its span is
  // recorded (on a requests lane) when its first wait or test sees it end.
  void ProfileRequest(Request& r, const char* name, int64_t start_ns, size_t bytes,
                      size_t elem_size, int peer, int tag);
  // INVALID_ARGUMENT for a root out of range, the call rejected as a
  // collective (RejectCollective).
  absl::Status CheckRoot(CollectiveOp op, int root);
  char* ScratchSlot(int slot, size_t bytes);
  // Asks every rank what it waits on and describes the wavefront: for
  // collective `seq` (fingerprint fp) of context ctx, who never entered it
  // and who waits on whom; seq < 0 for point-to-point.
  // Ends by `deadline`; ranks that have not answered by then are named.
  std::string HangReport(uint32_t ctx, int seq, uint64_t fp, MonoTime deadline);
  // Flight recorder (core/p2p/flight_recorder.h; hang_report.cc): a
  // nonblocking request posted as entry `fl` carries it to its end (or the
  // entry fails with the post); the dump to flight_recorder_file, of this
  // rank's record or of `ranks` (every rank's, asked by a hang report).
  void NoteFlight(uint64_t fl, const absl::StatusOr<std::shared_ptr<Request>>& r);
  void DumpFlight(absl::string_view reason,
                  const std::map<int, std::vector<FlightRecorder::Entry>>* ranks = nullptr);
  // A communicator of `members_world` with contexts ctx, ctx + 1, set up
  // over its members. `setup_failure` (Shrink's): where the setup fails
  // for a member's failure, the child is returned all the same (its
  // collectives fail with PEER_FAILURE on every member) and why is there.
  absl::StatusOr<std::unique_ptr<Communicator>> MakeChild(std::vector<int> members_world,
                                                          uint32_t ctx,
                                                          absl::Status* setup_failure = nullptr);
  // Shrink's agreement (shrink.cc): sets *dead (by rank here) to the
  // members every survivor agreed are gone, and *ctx to the first of the
  // two context ids the new communicator takes.
  struct ShrinkView;
  absl::Status AgreeOnFailures(int epoch, MonoTime deadline, std::vector<uint8_t>* dead,
                               uint32_t* ctx);

  std::shared_ptr<Engine> engine_;
  const std::shared_ptr<RequestDriver> driver_;
  const int rank_;
  const int size_;
  const std::vector<int> group_to_world_;
  std::shared_ptr<const std::vector<int>> world_to_group_;
  const uint32_t p2p_ctx_;
  const uint32_t coll_ctx_;
  std::atomic<int64_t> timeout_ms_;
  std::atomic<Algorithm> forced_algo_;
  std::atomic<int64_t> fusion_bytes_;  // -1: auto
  std::atomic<int> compression_half_;  // Options::Half
  std::atomic<bool> compression_delta_;
  std::atomic<int64_t> delta_cache_bytes_;
  const int64_t switch_link_mbit_;
  // Per rank of this communicator: whether compression applies to it
  // (CompressesTo).
  std::vector<char> half_peers_;
  // What `delta` keeps of messages sent and received (core/comm/delta_state.h).
  std::shared_ptr<DeltaState> delta_;
  // Broadcasts' bases, per (root, bytes): every rank keeps the same ones
  // (collectives run in the same order everywhere), least recently used
  // first to go beyond delta_cache_bytes.
  struct BroadcastBase {
    std::unique_ptr<char[]> data;
    uint64_t used = 0;
  };
  absl::Mutex bcast_mu_;
  std::map<std::pair<int, size_t>, BroadcastBase> bcast_bases_ ABSL_GUARDED_BY(bcast_mu_);
  size_t bcast_bytes_ ABSL_GUARDED_BY(bcast_mu_) = 0;
  uint64_t bcast_clock_ ABSL_GUARDED_BY(bcast_mu_) = 0;
  std::atomic<int> streams_made_{0};
  const LinkModel link_;
  // The ring allreduce's order of the members where ranks share CPUs and
  // all talk over TCP (RingOrderByPlacement; empty: rank order), the same
  // on every member.
  std::vector<int> ring_order_;
  std::vector<int> switch_order_;
  // algo=hierarchical: set by SetOption. The hierarchy's first level:
  // hier_groups_ groups (hosts, or switches) of hier_local_ members each
  // (0: no such shape); each member's group and place in it; the groups'
  // members by place; the levels priced; how many sibling groups run at
  // once beside this communicator (a parent's across-group: its members
  // per group); the last choice priced; the groups, once made.
  std::atomic<bool> hierarchical_{false};
  int hier_groups_ = 0;
  int hier_local_ = 0;
  const char* hier_level_ = "host";
  std::vector<int> hier_group_of_, hier_index_of_;
  std::vector<std::vector<int>> hier_members_;
  std::vector<HierarchyLevel> hier_levels_;
  double hier_share_ = 1;
  absl::Mutex hier_mu_;
  struct {
    bool valid = false;
    CollectiveOp op;
    size_t bytes = 0;
    bool hierarchical = false;
  } hier_choice_ ABSL_GUARDED_BY(hier_mu_);
  std::unique_ptr<Communicator> hier_within_;
  std::unique_ptr<Communicator> hier_across_;
  Engine::Activity* activity_;  // of coll_ctx_, for hang reports
  struct {
    bool valid = false;
    CollectiveOp op;
    size_t bytes = 0;
    Algorithm forced = Algorithm::kAuto;
    bool segment = false;
    Choice choice;
  } choice_cache_;
  const bool debug_info_;
  // HCOMM_CHECK_COLLECTIVES=1 on rank 0 (Engine::check_collectives):
  // collectives that go by messages first check that every member makes
  // the same call (CheckCall).
  const bool check_calls_;
  const bool fingerprints_;  // collectives carry fingerprints (always, unless
                             // HCOMM_FINGERPRINTS=0 for measurement)

  // Collectives run one at a time in call order: a call takes a ticket and
  // waits for its turn. A turn that comes at once costs two atomic
  // operations; only a thread that has to wait takes turn_mu_ and sleeps
  // on turn_cv_ (counted in turn_waiters_, so that FinishTurn wakes only
  // where someone sleeps).
  std::atomic<uint64_t> next_ticket_{0};
  std::atomic<uint64_t> now_serving_{0};
  std::atomic<int> turn_waiters_{0};
  // The process uses asymmetric fences (core/base/fence.h) for that handshake.
  const bool light_fences_ = RegisterAsymmetricFences();
  absl::Mutex turn_mu_;
  CondVar turn_cv_;
  Scratch scratch_[4];  // used only by the collective being served
  // The shared-memory segment for allreduce (null: messages only); dropped
  // after a failure in it, whose counters are then out of step.
  std::unique_ptr<ShmCollective> shm_coll_;

  // Worker for nonblocking collectives.
  absl::Mutex work_mu_;
  std::deque<std::function<void()>> work_ ABSL_GUARDED_BY(work_mu_);
  bool work_stop_ ABSL_GUARDED_BY(work_mu_) = false;
  // iallreduces queued or running whose request has not completed yet.
  int iallreduces_pending_ ABSL_GUARDED_BY(work_mu_) = 0;
  std::thread worker_;
  bool destroyed_ = false;
  // Shrink calls made on this communicator (each agreement's tags carry
  // its number, so that a late message of one never matches the next).
  std::atomic<int> shrinks_{0};
  // Shrink's context is this bit over the collective context's id: far
  // above the ids NextFreeContext hands out, and watched by no
  // WatchMembers, so a member's failure breaks it nowhere.
  static constexpr uint32_t kShrinkContextBit = 0x80000000u;

  std::shared_ptr<Recorder> profile_;  // null: profiling is off
  std::string profile_file_;           // the world's: where rank 0 writes
  int profile_stream_ = -1;            // ProfileAsStream's
  int profile_priority_ = 0;
  int profile_track_ = 0;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_COMM_COMMUNICATOR_H_
