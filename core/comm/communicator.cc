// Communicators: init, point-to-point, their setup (the shared segment,
// the ring order), groups, abort and destroy. Collectives are in
// collectives.cc, hang reports in hang_report.cc, shrink in shrink.cc.
#include "core/comm/communicator.h"

#include <sys/mman.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/base/clock.h"
#include "core/base/shm_file.h"
#include "core/base/spin.h"
#include "core/comm/collective_peers.h"
#include "core/topology/host_topology.h"
#include "core/topology/placement.h"
#include "core/topology/switches.h"

namespace hcomm {

namespace {

// The link model with the configured chunk_bytes, if any (else the model's
// own, ChunkBytes).
LinkModel WithChunk(LinkModel link, int64_t chunk_bytes) {
  if (chunk_bytes > 0) link.chunk_bytes = static_cast<double>(chunk_bytes);
  return link;
}

}  // namespace

namespace {

// Whether the ranks on any of the members' hosts outnumber the CPUs they
// may use: the same answer on every member (it comes from every rank's
// published placement, not from this rank's host alone), so that every
// member prices the algorithms alike and picks the same one. (Where hosts
// differ, a rank that priced by its own host would pick another algorithm
// than its peers, and the collective would mix two protocols.)
bool MembersShareCpus(const Engine& engine, const std::vector<int>& members) {
  if (engine.size() < 2) return engine.oversubscribed();
  std::vector<Placement> all(engine.size());
  for (int w = 0; w < engine.size(); ++w) all[w] = engine.placement(w);
  std::set<std::string> hosts;
  for (int w : members) hosts.insert(all[w].host);
  for (const std::string& h : hosts) {
    if (CpusShared(all, h)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Init(const Options& opts) {
  HCOMM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Init(opts));
  std::vector<int> all(opts.world_size);
  std::iota(all.begin(), all.end(), 0);
  std::shared_ptr<Engine> shared(std::move(engine));
  std::unique_ptr<Communicator> world(
      new Communicator(std::move(shared), std::move(all), 0, opts));
  HCOMM_RETURN_IF_ERROR(Annotate(world->SetUpShmCollective(), "init"));
  HCOMM_RETURN_IF_ERROR(Annotate(world->SetUpRingOrder(), "init"));
  if (world->debug_info_) world->DescribeHost();
  return world;
}

Communicator::Communicator(std::shared_ptr<Engine> engine, std::vector<int> group_to_world,
                           uint32_t first_ctx, const Options& opts)
    : engine_(std::move(engine)),
      driver_(std::make_shared<RequestDriver>(engine_)),
      rank_(static_cast<int>(std::find(group_to_world.begin(), group_to_world.end(),
                                       engine_->rank()) -
                             group_to_world.begin())),
      size_(static_cast<int>(group_to_world.size())),
      group_to_world_(std::move(group_to_world)),
      p2p_ctx_(first_ctx),
      coll_ctx_(first_ctx + 1),
      timeout_ms_(opts.timeout_ms),
      forced_algo_(ParseAlgo(opts.algo)),
      fusion_bytes_(opts.fusion_bytes),
      compression_half_(static_cast<int>(opts.compression_half)),
      compression_delta_(opts.compression_delta),
      delta_cache_bytes_(opts.delta_cache_bytes),
      switch_link_mbit_(opts.switch_link_mbit),
      link_(WithChunk(LinkModelFor(engine_->TransportName(),
                                   MembersShareCpus(*engine_, group_to_world_)),
                      opts.chunk_bytes)),
      debug_info_(DebugInfo()),
      check_calls_(engine_->check_collectives()),
      fingerprints_(getenv("HCOMM_FINGERPRINTS") == nullptr ||
                    strcmp(getenv("HCOMM_FINGERPRINTS"), "0") != 0) {
  engine_->JoinCommunicator();
  if (opts.profile && first_ctx == 0) {  // the world's; groups share it (MakeChild)
    profile_ = std::make_shared<Recorder>(static_cast<size_t>(opts.profile_max_events));
    profile_file_ = opts.profile_file;
  }
  activity_ = engine_->ActivityFor(coll_ctx_);
  if (size_ > 1) engine_->WatchMembers(coll_ctx_, group_to_world_);
  auto w2g = std::make_shared<std::vector<int>>(engine_->size(), -1);
  for (int g = 0; g < size_; ++g) (*w2g)[group_to_world_[g]] = g;
  delta_ = std::make_shared<DeltaState>(engine_, coll_ctx_, size_, opts.delta_cache_bytes);
  delta_->set_timeout(absl::Milliseconds(opts.timeout_ms));
  half_peers_.resize(size_);
  for (int g = 0; g < size_; ++g) {
    const char* t = engine_->TransportTo(group_to_world_[g]);
    half_peers_[g] = strcmp(t, "shm") != 0 && strcmp(t, "self") != 0;
  }
  world_to_group_ = std::move(w2g);
  // The order the placements suggest (SetUpRingOrder keeps it where no
  // member talks to another over shared memory).
  if (size_ > 1) {
    std::vector<std::string> switches, hosts;
    std::vector<int> numa;
    for (int w : group_to_world_) {
      switches.push_back(engine_->placement(w).switch_id);
      hosts.push_back(engine_->placement(w).host);
      numa.push_back(engine_->placement(w).numa);
    }
    switch_order_ = RingOrderBySwitch(switches, hosts, numa);
    SetUpHierarchy(hosts, switches);
  }
  hierarchical_.store(opts.algo == "hierarchical", std::memory_order_relaxed);
  if (size_ > 2) {
    std::vector<std::string> placement;
    for (int w : group_to_world_) {
      const Placement& at = engine_->placement(w);
      placement.push_back(absl::StrCat(at.host, " ", at.cpus));
    }
    ring_order_ = RingOrderByPlacement(placement);
  }
}

Communicator::~Communicator() { Destroy().IgnoreError(); }

void Communicator::DescribeHost() const {
  // The first rank of each host says what hwloc found there and where its
  // host's ranks are: "hcomm INFO: host node-a: 1 package, 1 NUMA node, 2
  // cores, 2 PUs (flat: one NUMA node); ranks 0 1 on NUMA nodes 0 0".
  const std::string& host = engine_->placement(engine_->rank()).host;
  std::string ranks, nodes;
  for (int r = 0; r < engine_->size(); ++r) {
    const Placement& at = engine_->placement(r);
    if (at.host != host) continue;
    if (ranks.empty() && r != engine_->rank()) return;  // not this host's first
    absl::StrAppend(&ranks, ranks.empty() ? "" : " ", r);
    absl::StrAppend(&nodes, nodes.empty() ? "" : " ", at.numa < 0 ? "?" : absl::StrCat(at.numa));
  }
  fprintf(stderr, "hcomm INFO: host %s: %s; ranks %s on NUMA nodes %s\n", host.c_str(),
          ThisHost().Describe().c_str(), ranks.c_str(), nodes.c_str());
}

absl::Status Communicator::SetOption(absl::string_view key, absl::string_view value) {
  Options o;
  HCOMM_RETURN_IF_ERROR(ParseOption(key, value, &o));
  if (key == "timeout_ms") {
    timeout_ms_.store(o.timeout_ms, std::memory_order_relaxed);
    delta_->set_timeout(absl::Milliseconds(o.timeout_ms));
    return absl::OkStatus();
  }
  if (key == "algo") {
    // Applies to collectives called afterwards; every rank should change it
    // at the same point.
    forced_algo_.store(ParseAlgo(o.algo), std::memory_order_relaxed);
    hierarchical_.store(o.algo == "hierarchical", std::memory_order_relaxed);
    return absl::OkStatus();
  }
  if (key == "fusion_bytes") {
    // Applies to streams made afterwards.
    fusion_bytes_.store(o.fusion_bytes, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  if (key == "compression") {
    // Applies to operations called afterwards. Point-to-point receivers
    // decode whatever comes; a collective's ranks must agree (the setting
    // rides in its fingerprint: ranks that differ get Mismatch).
    compression_half_.store(static_cast<int>(o.compression_half), std::memory_order_relaxed);
    compression_delta_.store(o.compression_delta, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  if (key == "delta_cache_bytes") {
    // Bases kept from now on; every rank should set the same.
    delta_cache_bytes_.store(o.delta_cache_bytes, std::memory_order_relaxed);
    delta_->set_budget(o.delta_cache_bytes);
    return absl::OkStatus();
  }
  return InvalidArgument(absl::StrCat("config key '", key,
                                      "' is fixed at init; only timeout_ms, algo, fusion_bytes, "
                                      "compression and delta_cache_bytes can change on a live "
                                      "communicator"));
}

size_t Communicator::fusion_bytes() const {
  const int64_t v = fusion_bytes_.load(std::memory_order_relaxed);
  return v < 0 ? FusionBytes(link_) : static_cast<size_t>(v);
}

// ---------------------------------------------------------------------------
// Point-to-point

std::unique_ptr<uint16_t[]> Communicator::CodeForPeer(const void* buf, size_t bytes, DataType t,
                                                      int peer, uint64_t* fingerprint) const {
  HalfFormat f;
  if (t != DataType::kFloat32 || bytes < kMinCodedP2pBytes || !WireHalf(&f) ||
      !CompressesTo(peer)) {
    return nullptr;
  }
  std::unique_ptr<uint16_t[]> wire = EncodeForWire(f, buf, bytes);
  if (wire != nullptr) *fingerprint = CodedFingerprint(CodingOf(f), bytes);
  return wire;
}

absl::StatusOr<std::shared_ptr<Request>> Communicator::Isend(const void* buf, size_t bytes,
                                                            size_t elem_size, int peer, int tag,
                                                            DataType t) {
  const uint64_t fl = engine_->flight().Begin("isend", p2p_ctx_, -1, group_to_world_[peer], tag,
                                              bytes, FlightRecorder::State::kPosted);
  if (ABSL_PREDICT_FALSE(profile_ != nullptr)) {
    const int64_t start = Recorder::Now();
    absl::StatusOr<std::shared_ptr<Request>> r = PostSend(buf, bytes, elem_size, peer, tag, t);
    if (r.ok()) ProfileRequest(**r, "isend", start, bytes, elem_size, peer, tag);
    NoteFlight(fl, r);
    return r;
  }
  absl::StatusOr<std::shared_ptr<Request>> r = PostSend(buf, bytes, elem_size, peer, tag, t);
  NoteFlight(fl, r);
  return r;
}

void Communicator::NoteFlight(uint64_t fl, const absl::StatusOr<std::shared_ptr<Request>>& r) {
  if (r.ok()) {
    (*r)->flight = fl;
  } else {
    engine_->flight().End(fl, false);
  }
}

absl::StatusOr<std::shared_ptr<Request>> Communicator::PostSend(const void* buf, size_t bytes,
                                                               size_t elem_size, int peer,
                                                               int tag, DataType t) {
  uint64_t fp = 0;
  std::unique_ptr<uint16_t[]> wire = CodeForPeer(buf, bytes, t, peer, &fp);
  if (wire == nullptr) {
    if (ABSL_PREDICT_FALSE(DeltaTo(peer, bytes, tag))) {
      DeltaState::Send plan = delta_->Plan(group_to_world_[peer], tag, buf, bytes);
      if (plan.coded) {
        auto r = engine_->Isend(p2p_ctx_, plan.payload, plan.payload_bytes, elem_size,
                                group_to_world_[peer], tag, plan.fingerprint);
        // (The base is the message as posted: a send that fails later makes
        // the next frame on this key fail at the receiver, never misread.)
        delta_->Sent(plan, r.ok());
        if (r.ok()) {
          (*r)->keep = plan.frame;
          (*r)->finish = &FinishP2p;
        }
        return r;
      }
    }
    return engine_->Isend(p2p_ctx_, buf, bytes, elem_size, group_to_world_[peer], tag);
  }
  std::shared_ptr<uint16_t[]> keep(std::move(wire));
  HCOMM_ASSIGN_OR_RETURN(std::shared_ptr<Request> r,
                         engine_->Isend(p2p_ctx_, keep.get(), bytes / 2, elem_size,
                                        group_to_world_[peer], tag, fp));
  // The encoded copy lives as long as the send needs it.
  r->keep = std::move(keep);
  r->finish = &FinishP2p;
  return r;
}

absl::StatusOr<std::shared_ptr<Request>> Communicator::Irecv(void* buf, size_t bytes,
                                                            size_t elem_size, int peer, int tag) {
  int world = peer == kAnySource ? kAnySource : group_to_world_[peer];
  const int64_t start = ABSL_PREDICT_FALSE(profile_ != nullptr) ? Recorder::Now() : 0;
  const uint64_t fl = engine_->flight().Begin("irecv", p2p_ctx_, -1, world, tag, bytes,
                                              FlightRecorder::State::kPosted);
  absl::StatusOr<std::shared_ptr<Request>> posted =
      engine_->Irecv(p2p_ctx_, buf, bytes, elem_size, world, tag);
  NoteFlight(fl, posted);
  HCOMM_ASSIGN_OR_RETURN(std::shared_ptr<Request> r, std::move(posted));
  // Whatever the sender coded is decoded when the caller first sees it done.
  r->finish = &FinishP2p;
  r->keep = delta_;
  if (ABSL_PREDICT_FALSE(profile_ != nullptr)) {
    ProfileRequest(*r, "irecv", start, bytes, elem_size, peer, tag);
  }
  return r;
}

absl::Status Communicator::Send(const void* buf, size_t bytes, size_t elem_size, int peer,
                                int tag, DataType t) {
  auto hang = [this](MonoTime d) { return HangReport(p2p_ctx_, -1, 0, d); };
  const Engine::HangReporter report(hang);
  const int64_t start = ABSL_PREDICT_FALSE(profile_ != nullptr) ? Recorder::Now() : 0;
  const uint64_t fl = engine_->flight().Begin("send", p2p_ctx_, -1, group_to_world_[peer], tag,
                                              bytes, FlightRecorder::State::kInProgress);
  uint64_t fp = 0;
  std::unique_ptr<uint16_t[]> wire = CodeForPeer(buf, bytes, t, peer, &fp);
  absl::Status s;
  if (wire != nullptr) {
    s = engine_->Send(p2p_ctx_, wire.get(), bytes / 2, elem_size, group_to_world_[peer], tag,
                      timeout(), &report, fp);
  } else if (ABSL_PREDICT_FALSE(DeltaTo(peer, bytes, tag))) {
    DeltaState::Send plan = delta_->Plan(group_to_world_[peer], tag, buf, bytes);
    s = engine_->Send(p2p_ctx_, plan.coded ? plan.payload : buf,
                      plan.coded ? plan.payload_bytes : bytes, elem_size, group_to_world_[peer],
                      tag, timeout(), &report, plan.fingerprint);
    delta_->Sent(plan, s.ok());
  } else {
    s = engine_->Send(p2p_ctx_, buf, bytes, elem_size, group_to_world_[peer], tag, timeout(),
                      &report);
  }
  engine_->flight().End(fl, s.ok());
  // (A timeout's dump, with every rank's record, was written by its hang
  // report.)
  if (ABSL_PREDICT_FALSE(!s.ok()) && CodeOf(s) != ErrorCode::kTimeout) DumpFlight(s.message());
  if (ABSL_PREDICT_FALSE(profile_ != nullptr)) RecordP2p("send", start, bytes, elem_size, peer, tag, s);
  return s;
}

absl::Status Communicator::Recv(void* buf, size_t bytes, size_t elem_size, int peer, int tag) {
  int world = peer == kAnySource ? kAnySource : group_to_world_[peer];
  auto hang = [this](MonoTime d) { return HangReport(p2p_ctx_, -1, 0, d); };
  const Engine::HangReporter report(hang);
  const int64_t start = ABSL_PREDICT_FALSE(profile_ != nullptr) ? Recorder::Now() : 0;
  const uint64_t fl = engine_->flight().Begin("recv", p2p_ctx_, -1, world, tag, bytes,
                                              FlightRecorder::State::kInProgress);
  Engine::Arrival got;
  absl::Status s = engine_->Recv(p2p_ctx_, buf, bytes, elem_size, world, tag, timeout(), nullptr,
                                 &report, &got);
  if (ABSL_PREDICT_FALSE(got.fingerprint != 0) && s.ok()) {
    size_t decoded = 0;
    s = IsDelta(CodingOf(got.fingerprint))
            ? delta_->Receive(got.source, got.tag, got.fingerprint, buf, bytes, got.bytes, &decoded)
            : DecodeCoded(got.fingerprint, buf, bytes, got.bytes, got.source, got.tag, &decoded);
  }
  engine_->flight().End(fl, s.ok());
  if (ABSL_PREDICT_FALSE(!s.ok()) && CodeOf(s) != ErrorCode::kTimeout) DumpFlight(s.message());
  if (ABSL_PREDICT_FALSE(profile_ != nullptr)) RecordP2p("recv", start, bytes, elem_size, peer, tag, s);
  return s;
}

// ---------------------------------------------------------------------------
// Collectives

char* Communicator::ScratchSlot(int slot, size_t bytes) {
  Scratch& s = scratch_[slot];
  if (s.capacity >= bytes) return s.data;
  if (s.data != nullptr) ::munmap(s.data, s.capacity);
  // Whole 2 MiB units, huge pages where the kernel allows, touched now: a
  // first touch of a 4 KiB page costs far more than copying it (measured:
  // docs/performance.md, "First touch of a page"), and this buffer is
  // reused by every later call.
  size_t cap = std::max<size_t>(bytes, 64 * 1024);
  cap = (cap + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
  void* p = ::mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    s = Scratch();
    return nullptr;
  }
  ::madvise(p, cap, MADV_HUGEPAGE);
  for (size_t o = 0; o < cap; o += 4096) static_cast<volatile char*>(p)[o] = 0;
  s.data = static_cast<char*>(p);
  s.capacity = cap;
  return s.data;
}

absl::StatusOr<int32_t> Communicator::SetupAgreeMin(int32_t v, int round) {
  CallInfo info{CollectiveOp::kAllReduce, 0,      1, DataType::kInt32, ReduceOp::kMin, -1,
                Algorithm::kDirect,       size_};
  CollectivePeers peers(this, kSetupTag + round, 0, timeout(), info);
  int32_t out = 0;
  HCOMM_RETURN_IF_ERROR(AllReduceDirect(peers, &v, &out, 1, DataType::kInt32, ReduceOp::kMin));
  return out;
}

absl::Status Communicator::SetUpRingOrder() {
  // Every member computed the same candidate from the same placements, so
  // all of them agree, or none asks.
  if (ring_order_.empty()) return absl::OkStatus();
  // Only where every member talks to every other over TCP: over
  // shared-memory messages the order measured no faster (docs/performance.md,
  // "Ring order by CPU").
  int32_t no_shm = 1;
  for (int g = 0; g < size_; ++g) {
    if (g != rank_ && strcmp(TransportTo(g), "shm") == 0) no_shm = 0;
  }
  HCOMM_ASSIGN_OR_RETURN(int32_t all, SetupAgreeMin(no_shm, 3));
  if (all == 0) ring_order_.clear();
  return absl::OkStatus();
}

absl::Status Communicator::SetUpShmCollective() {
  if (size_ < 2) return absl::OkStatus();
  const char* env = getenv("HCOMM_SHM_COLL");
  int32_t ok = (env == nullptr || strcmp(env, "0") != 0) && !engine_->job_key().empty();
  for (int g = 0; g < size_ && ok; ++g) {
    if (g != rank_ && strcmp(TransportTo(g), "shm") != 0) ok = 0;
  }
  // Groups of one split share their context ids but no member, so the
  // world rank of each one's rank 0 tells their segments apart.
  const std::string name = absl::StrCat("/hcomm-", engine_->job_key(), "-c", coll_ctx_, "-",
                                        group_to_world_[0]);
  std::unique_ptr<ShmCollective> seg;
  absl::Status failed;  // why this rank could not make or map the segment
  if (ok && rank_ == 0) {
    auto created = ShmCollective::Create(name, rank_, size_);
    if (created.ok()) {
      seg = std::move(created).value();
    } else {
      failed = created.status();
    }
    ok = seg != nullptr;
  }
  absl::StatusOr<int32_t> first = SetupAgreeMin(ok, 0);
  if (!first.ok()) {
    if (seg) seg->Unlink();  // a member failed: nobody maps it any more
    return first.status();
  }
  const int32_t all = *first;
  if (all != 0 && rank_ != 0) {
    auto opened = ShmCollective::Open(name, rank_, size_);
    if (opened.ok()) {
      seg = std::move(opened).value();
    } else {
      failed = opened.status();
    }
    ok = seg != nullptr;
  }
  absl::StatusOr<int32_t> agreed = all != 0 ? SetupAgreeMin(ok, 1) : absl::StatusOr<int32_t>(0);
  if (rank_ == 0 && seg) seg->Unlink();  // everyone has it mapped, or gave up
  HCOMM_RETURN_IF_ERROR(agreed.status());
  if (*agreed != 0) {
    // HCOMM_SHM_COLL_CMA=1 on every rank: large allreduces read the
    // others' buffers by cross-memory attach, where every rank can.
    const char* cma_env = getenv("HCOMM_SHM_COLL_CMA");
    const int32_t cma = cma_env != nullptr && strcmp(cma_env, "1") == 0 && seg->ProbeCma();
    HCOMM_ASSIGN_OR_RETURN(int32_t all_cma, SetupAgreeMin(cma, 2));
    seg->EnableCma(all_cma != 0);
    shm_coll_ = std::move(seg);
  }
  // Not errors (the collectives still work), but slower paths the user can
  // fix, so said whatever HCOMM_DEBUG is, by the rank (its rank in the job,
  // and the communicator's size) that made or failed to map the segment.
  const int world = group_to_world_[rank_];
  if (shm_coll_ != nullptr && rank_ == 0 && shm_coll_->slot_bytes() < ShmCollective::kSlotBytes) {
    fprintf(stderr,
            "hcomm WARN: rank %d, communicator of %d: the collectives' shared segment has slots "
            "of %s instead of %s: /dev/shm is short of room %s\n",
            world, size_, Bytes(shm_coll_->slot_bytes()).c_str(),
            Bytes(ShmCollective::kSlotBytes).c_str(), kLargerDevShm);
  }
  if (!failed.ok()) {
    const bool full = CodeOf(failed) == ErrorCode::kOutOfMem;
    fprintf(stderr,
            "hcomm WARN: rank %d, communicator of %d: collectives go by messages instead of a "
            "shared segment: %s%s%s\n",
            world, size_, std::string(failed.message()).c_str(), full ? " " : "",
            full ? kLargerDevShm : "");
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Groups

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::MakeChild(
    std::vector<int> members_world, uint32_t ctx, absl::Status* setup_failure) {
  Options o;
  o.timeout_ms = timeout_ms_.load();
  o.algo = hierarchical_.load() ? "hierarchical" : AlgorithmName(forced_algo_.load());
  o.switch_link_mbit = switch_link_mbit_;
  o.fusion_bytes = fusion_bytes_.load();
  o.compression_half = static_cast<Options::Half>(compression_half_.load());
  o.compression_delta = compression_delta_.load();
  o.delta_cache_bytes = delta_cache_bytes_.load();
  std::unique_ptr<Communicator> child(
      new Communicator(engine_, std::move(members_world), ctx, o));
  child->profile_ = profile_;
  absl::Status set_up = child->SetUpShmCollective();
  if (set_up.ok()) set_up = child->SetUpRingOrder();
  if (set_up.ok()) return child;
  if (setup_failure != nullptr && CodeOf(set_up) == ErrorCode::kPeerFailure) {
    // Whatever part of the setup other members got through, every member
    // now finds the child broken (Engine::WatchMembers).
    child->shm_coll_.reset();
    child->ring_order_.clear();
    *setup_failure = set_up;
    return child;
  }
  return set_up;
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  // Everyone learns everyone's (color, key) and lowest free context id.
  struct Entry {
    int64_t color, key, ctx;
  };
  Entry mine{color, key, engine_->NextFreeContext()};
  std::vector<Entry> all(size_);
  HCOMM_RETURN_IF_ERROR(Annotate(
      AllGather(&mine, all.data(), sizeof(Entry), DataType::kUint8), "split"));
  int64_t ctx = 0;
  for (const Entry& e : all) ctx = std::max(ctx, e.ctx);
  engine_->ReserveContexts(static_cast<uint32_t>(ctx), 2);
  if (color < 0) return std::unique_ptr<Communicator>();
  std::vector<int> members;
  for (int r = 0; r < size_; ++r) {
    if (all[r].color == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[a].key != all[b].key ? all[a].key < all[b].key : a < b;
  });
  std::vector<int> world;
  for (int r : members) world.push_back(group_to_world_[r]);
  return MakeChild(std::move(world), static_cast<uint32_t>(ctx));
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::CreateGroup(
    const std::vector<int>& ranks) {
  std::vector<bool> seen(size_, false);
  for (size_t i = 0; i < ranks.size(); ++i) {
    int r = ranks[i];
    if (r < 0 || r >= size_) {
      RejectCollective(CollectiveOp::kAllGather);  // what create_group runs
      return InvalidArgument(absl::StrCat("create_group on rank ", rank_, ": ranks[", i, "] = ", r,
                                          " is out of range for a communicator of ", size_,
                                          " ranks"));
    }
    if (seen[r]) {
      RejectCollective(CollectiveOp::kAllGather);
      return InvalidArgument(absl::StrCat("create_group on rank ", rank_, ": rank ", r,
                                          " is listed twice"));
    }
    seen[r] = true;
  }
  // Agree on a context and check that every rank passed the same list.
  uint64_t h = 1469598103934665603ull;
  for (int r : ranks) h = (h ^ static_cast<uint64_t>(r)) * 1099511628211ull;
  struct Entry {
    uint64_t hash;
    int64_t ctx;
  };
  Entry mine{h, engine_->NextFreeContext()};
  std::vector<Entry> all(size_);
  HCOMM_RETURN_IF_ERROR(Annotate(
      AllGather(&mine, all.data(), sizeof(Entry), DataType::kUint8), "create_group"));
  int64_t ctx = 0;
  std::vector<int> differ;
  for (int r = 0; r < size_; ++r) {
    ctx = std::max(ctx, all[r].ctx);
    if (all[r].hash != h) differ.push_back(r);
  }
  engine_->ReserveContexts(static_cast<uint32_t>(ctx), 2);
  if (!differ.empty()) {
    return Mismatch(absl::StrCat("create_group on rank ", rank_, ": ranks ",
                                 absl::StrJoin(differ, ","),
                                 " passed a different rank list than this rank"));
  }
  if (!seen[rank_]) return std::unique_ptr<Communicator>();
  std::vector<int> world;
  for (int r : ranks) world.push_back(group_to_world_[r]);
  return MakeChild(std::move(world), static_cast<uint32_t>(ctx));
}

void Communicator::Abort() {
  if (p2p_ctx_ == 0) {  // the world's contexts are 0 and 1
    engine_->Abort();
  } else {
    engine_->AbortCommunicator(p2p_ctx_, coll_ctx_, group_to_world_);
  }
}

absl::Status Communicator::Destroy() {
  if (destroyed_) return absl::OkStatus();
  destroyed_ = true;
  bool pending;
  {
    absl::MutexLock l(&work_mu_);
    work_stop_ = true;
    pending = iallreduces_pending_ > 0;
  }
  if (pending) {
    // An iallreduce is still running or queued. Like every request pending
    // at a destroy, its request fails with ABORTED (API.md) now, rather than
    // holding the destroy until its timeout or its end; the members are
    // told as of an abort (the collective cannot end without this rank).
    engine_->AbortCommunicator(
        p2p_ctx_, coll_ctx_, group_to_world_,
        Aborted(absl::StrCat("rank ", rank_, ": the communicator was destroyed while an "
                             "iallreduce on it was pending")));
  }
  if (worker_.joinable()) worker_.join();
  if (p2p_ctx_ == 0) DumpFlight("hcomm_comm_destroy");
  if (profile_ != nullptr && p2p_ctx_ == 0) {
    // Not this communicator's failure: said, and the destroy goes on.
    absl::Status written = WriteProfile();
    if (!written.ok()) {
      fprintf(stderr, "hcomm WARN: rank %d: the profile was not written whole: %s\n", rank_,
              std::string(written.message()).c_str());
    }
  }
  shm_coll_.reset();
  absl::Status s;
  // The hierarchy's groups go first (they share this one's engine).
  if (hier_within_ != nullptr) s.Update(hier_within_->Destroy());
  if (hier_across_ != nullptr) s.Update(hier_across_->Destroy());
  hier_within_.reset();
  hier_across_.reset();
  // The connections are shared by the world and every group made from it:
  // the last of them to go closes them, whichever it is.
  if (engine_->LeaveCommunicator()) {
    s.Update(engine_->Destroy());
  } else {
    engine_->CloseContexts(p2p_ctx_, 2, Deadline());
    // What a shrink's agreement left there (a decision sent to a rank
    // that had decided already).
    if (shrinks_.load() > 0) engine_->CloseContexts(kShrinkContextBit | coll_ctx_, 1, Deadline());
  }
  for (Scratch& sc : scratch_) {
    if (sc.data != nullptr) ::munmap(sc.data, sc.capacity);
    sc = Scratch();
  }
  return s;
}

}  // namespace hcomm
