#include "core/p2p/engine.h"

#include <string.h>
#include <sched.h>
#include <time.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/bootstrap/handshake.h"
#include "core/base/interrupt.h"
#include "core/base/net.h"
#include "core/base/shm_file.h"
#include "core/base/spin.h"
#include "core/base/status.h"
#include "core/bootstrap/store_client.h"
#include "core/bootstrap/store_server.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"

namespace hcomm {

// Every eager payload is staged in one of the pool's size classes.
static_assert(Engine::kEagerBytes <= PayloadPool::kMaxPooled);

namespace {

// Frame kinds of the point-to-point protocol.
enum Kind : uint8_t {
  kEager = 1,      // header + payload
  kRts = 2,        // request-to-send: id = send id, size = bytes
  kCts = 3,        // clear-to-send: id = send id, id2 = receive id
  kReject = 4,     // receiver's buffer too small: id = send id
  kData = 5,       // payload of a rendezvous: id = receive id
  kCancelRts = 6,  // sender withdrew an RTS: id = send id
  kDataAbort = 7,  // sender cannot honour a CTS: id = receive id
  kGoodbye = 8,    // the sender is destroying its communicator
  kNotice = 9,     // a collective clash: id = culprit fp, id2 = reporter fp,
                   // size = culprit rank; fails (ctx, tag) everywhere
  kAbandon = 11,   // the sender aborted the communicator whose contexts are
                   // comm_id (point-to-point) and id (collectives)
};

struct Meta {
  uint8_t kind;
  uint8_t flags;
  uint16_t reserved;
  uint32_t comm_id;
  int32_t tag;
  int32_t src;
  uint64_t size;
  uint64_t id;
  uint64_t id2;
};
static_assert(sizeof(Meta) == kFrameMetaBytes, "Meta must fill FrameMeta exactly");

FrameMeta Pack(const Meta& m) {
  FrameMeta f;
  memcpy(f.bytes, &m, sizeof m);
  return f;
}

Meta Unpack(const FrameMeta& f) {
  Meta m;
  memcpy(&m, f.bytes, sizeof m);
  return m;
}

Meta MakeMeta(Kind kind, uint32_t ctx, int src, int tag, uint64_t size, uint64_t id,
              uint64_t id2 = 0) {
  Meta m;
  memset(&m, 0, sizeof m);
  m.kind = kind;
  m.comm_id = ctx;
  m.tag = tag;
  m.src = src;
  m.size = size;
  m.id = id;
  m.id2 = id2;
  return m;
}

std::string PeerName(int peer) {
  return peer == kAnySource ? std::string("any rank") : absl::StrCat("rank ", peer);
}

std::string TagName(int tag) {
  return tag == kAnyTag ? std::string("any tag") : absl::StrCat("tag ", tag);
}

// Peer-connection hello, sent by the connecting side after the handshake.
struct Hello {
  uint64_t job_id;
  int32_t rank;
  int32_t world_size;
};

absl::StatusOr<uint64_t> RandomU64() {
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != sizeof v) return Internal("getrandom failed");
  return v;
}

// The key that names the job's segments in /dev/shm, made by rank 0 from
// the job's id: "<16 hex digits of the id>", or, where hcomm_run set
// HCOMM_JOB_KEY, "<that key>-<the id's>", so that the launcher can remove
// what a job stopped before its ranks unlinked it left there (each init in
// the job still gets names of its own).
absl::StatusOr<std::string> NewJobKey(uint64_t job_id) {
  const std::string id = absl::StrFormat("%016x", job_id);
  const char* key = getenv("HCOMM_JOB_KEY");
  if (key == nullptr || *key == '\0') return id;
  uint64_t v = 0;
  if (strlen(key) != 16 || !absl::SimpleHexAtoi(key, &v)) {
    return InvalidArgument(absl::StrCat("HCOMM_JOB_KEY=", key,
                                        " is not 16 hex digits (hcomm_run sets it; leave it "
                                        "unset elsewhere)"));
  }
  return absl::StrCat(absl::AsciiStrToLower(key), "-", id);
}



}  // namespace

const char kClashUrl[] = "hcomm.dev/clash";

namespace {

}  // namespace

Engine::Engine(const Options& opts)
    : rank_(opts.rank),
      size_(opts.world_size),
      host_id_(opts.host_id),
      timeout_ms_(opts.timeout_ms),
      spin_(absl::Microseconds(50)) {
  peers_.reserve(size_);
  for (int i = 0; i < size_; ++i) peers_.push_back(std::make_unique<PeerInfo>());
  if (const char* s = getenv("HCOMM_SPIN_US")) {
    int us = 0;
    if (absl::SimpleAtoi(s, &us) && us >= 0) {
      spin_ = absl::Microseconds(us);
      spin_set_ = true;
    }
  }
}

Engine::~Engine() { Destroy().IgnoreError(); }

namespace {
// Set by a rank whose init failed after it reached the store; its value
// says which rank and why.
constexpr char kInitFailedKey[] = "hcomm/init_failed";
// How often a rank waiting for the others in init looks for that key.
constexpr absl::Duration kInitLook = absl::Milliseconds(200);

// The jobs whose engine this process has destroyed: a store that still
// serves one of them is a stale one to a new init.
struct EndedJobs {
  absl::Mutex mu;
  absl::flat_hash_set<uint64_t> ids ABSL_GUARDED_BY(mu);
};
EndedJobs& Ended() {
  static EndedJobs* ended = new EndedJobs();
  return *ended;
}
bool JobEndedHere(uint64_t id) {
  EndedJobs& e = Ended();
  absl::MutexLock l(&e.mu);
  return e.ids.contains(id);
}
}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Init(const Options& opts) {
  // Debian's Abseil is built with lock-order (deadlock) detection on, which
  // costs thousands of instructions per lock: far more than a message. It
  // stays available for debugging (HCOMM_DEBUG_LOCKS=1) and the C++ tests.
  static const bool locks_configured = [] {
    const char* v = getenv("HCOMM_DEBUG_LOCKS");
    absl::SetMutexDeadlockDetectionMode(v != nullptr && v[0] == '1'
                                            ? absl::OnDeadlockCycle::kAbort
                                            : absl::OnDeadlockCycle::kIgnore);
    return true;
  }();
  (void)locks_configured;
  if (opts.rank < 0 || opts.world_size < 1 || opts.rank >= opts.world_size) {
    return InvalidArgument(
        absl::StrCat("rank ", opts.rank, " is out of range for world_size ", opts.world_size));
  }
  std::unique_ptr<Engine> comm(new Engine(opts));
  if (absl::Status s = comm->Bootstrap(opts); !s.ok()) {
    comm->TellInitFailure(s);
    // The store goes with rank 0's engine: kept a few looks longer, it lets
    // the ranks still waiting read which rank failed and why.
    if (comm->store_server_ != nullptr) absl::SleepFor(3 * kInitLook);
    return s;
  }
  comm->StartProgressThread();
  return comm;
}

absl::Status Engine::FailedElsewhere() {
  const absl::Time soon = absl::Now() + absl::Seconds(1);
  auto have = store_client_->Check({kInitFailedKey}, soon);
  if (!have.ok() || !(*have)[0]) return absl::OkStatus();  // a lost store shows in the wait
  auto why = store_client_->Get(kInitFailedKey, soon);
  failed_elsewhere_ = true;
  return PeerFailure(absl::StrCat(
      "rank ", rank_, " of ", size_, ": another rank's init failed: ",
      why.ok() ? *why : std::string("(the store went away before saying which)")));
}

absl::Status Engine::InitWait(const std::vector<std::string>& keys, absl::Time deadline) {
  const absl::Time start = absl::Now();
  for (;;) {
    const absl::Time slice = std::min(deadline, absl::Now() + kInitLook);
    absl::Status s = store_client_->Wait(keys, slice);
    if (s.ok() || CodeOf(s) != ErrorCode::kTimeout) return s;
    if (slice < deadline && !Interrupted()) {
      HCOMM_RETURN_IF_ERROR(FailedElsewhere());
      continue;
    }
    // The store's message names the last slice's wait alone: say what the
    // whole wait was, as init's own failure (UNAVAILABLE, like a rank that
    // never joined).
    std::vector<std::string> missing;
    auto have = store_client_->Check(keys, absl::Now() + absl::Seconds(1));
    for (size_t i = 0; have.ok() && i < keys.size(); ++i) {
      if (!(*have)[i]) missing.push_back(absl::StrCat("'", keys[i], "'"));
    }
    return Unavailable(absl::StrCat("init ", TimedOutOrInterrupted(), " after ",
                                    Seconds(absl::Now() - start),
                                    ": the store never got ",
                                    missing.empty() ? "what it waited for"
                                                    : absl::StrJoin(missing, ", ")));
  }
}

void Engine::TellInitFailure(const absl::Status& s) {
  if (store_client_ == nullptr || failed_elsewhere_) return;
  const absl::Time soon = absl::Now() + absl::Seconds(1);
  auto have = store_client_->Check({kInitFailedKey}, soon);
  if (!have.ok() || (*have)[0]) return;  // the store is gone, or the first word is said
  store_client_->Set(kInitFailedKey, std::string(s.message()), soon).IgnoreError();
}

absl::Status Engine::Bootstrap(const Options& opts) {
  if (size_ == 1) return absl::OkStatus();
  const absl::Time began = absl::Now();
  const absl::Time deadline = began + absl::Milliseconds(opts.timeout_ms);
  HCOMM_ASSIGN_OR_RETURN(net::HostPort store_hp, net::ParseHostPort(opts.store_addr, "store_addr"));
  const std::string where = absl::StrCat("rank ", rank_, " of ", size_);

  if (rank_ == 0) {
    auto server = StoreServer::Start(store_hp.host, store_hp.port, opts.job_token);
    if (!server.ok()) {
      // store_addr may name this host by an address it cannot bind (behind
      // NAT, say): the store then listens on every address.
      auto any = StoreServer::Start("0.0.0.0", store_hp.port, opts.job_token);
      if (!any.ok()) {
        return Annotate(server.status(),
                        absl::StrCat(where, ": cannot serve the store at ", store_hp.ToString(),
                                     " (nor on 0.0.0.0: ", any.status().message(), ")"));
      }
      server = std::move(any);
    }
    store_server_ = std::move(server).value();
  }
  // The job as rank 0 published it: "<id> <world size> <key>
  // <HCOMM_CHECK_COLLECTIVES 0|1>" (read by the other ranks below).
  absl::StatusOr<std::string> published;
  for (;;) {
    auto client = StoreClient::Connect(store_hp, opts.job_token, deadline);
    if (!client.ok() && CodeOf(client.status()) == ErrorCode::kUnavailable &&
        absl::Now() < deadline && !Interrupted()) {
      // Reset in the handshake: a store closing as we came (see below).
      absl::SleepFor(absl::Milliseconds(50));
      continue;
    }
    if (!client.ok()) {
      return Annotate(client.status(),
                      absl::StrCat(where, ": cannot join the store at ", store_hp.ToString()));
    }
    store_client_ = std::move(client).value();
    if (rank_ == 0) break;
    // The store may still be the one of a job this process has ended (a
    // destroy and a new init in quick succession: its rank 0 has not
    // closed it yet), or be closing under us: wait for the new one.
    published = store_client_->Get("hcomm/job_id", deadline);
    absl::Status stale = published.status();
    if (published.ok()) {
      uint64_t id = 0;
      std::vector<std::string> f = absl::StrSplit(*published, ' ');
      if (!absl::SimpleAtoi(f[0], &id) || !JobEndedHere(id)) break;
      stale = Unavailable(absl::StrCat("the store still serves job ", id, ", which this process "
                                       "has ended (an earlier init's), and no new job came up "
                                       "there in time"));
    }
    if (CodeOf(stale) != ErrorCode::kUnavailable || absl::Now() >= deadline || Interrupted()) {
      return Unavailable(absl::StrCat(where, ": rank 0 did not publish the job at ",
                                      store_hp.ToString(), ": ", stale.message()));
    }
    store_client_.reset();
    absl::SleepFor(absl::Milliseconds(50));
  }

  // Job identity, so that connections from another job are refused, and
  // the job's size: ranks started with different sizes, or two processes
  // given one rank, fail at once saying so (else the job waits for ranks
  // that never come and times out with a misleading message).
  uint64_t job_id = 0;
  const char* check_env = getenv("HCOMM_CHECK_COLLECTIVES");
  const bool check_here = check_env != nullptr && strcmp(check_env, "1") == 0;
  if (rank_ == 0) {
    HCOMM_ASSIGN_OR_RETURN(job_id, RandomU64());
    HCOMM_ASSIGN_OR_RETURN(job_key_, NewJobKey(job_id));
    check_collectives_ = check_here;
    HCOMM_RETURN_IF_ERROR(store_client_->Set(
        "hcomm/job_id",
        absl::StrCat(job_id, " ", size_, " ", job_key_, " ", check_here ? 1 : 0), deadline));
  } else {
    const std::string& v = *published;
    std::vector<std::string> parts = absl::StrSplit(v, ' ');
    int job_size = 0;
    if (parts.size() != 4 || !absl::SimpleAtoi(parts[0], &job_id) ||
        !absl::SimpleAtoi(parts[1], &job_size) || (parts[3] != "0" && parts[3] != "1")) {
      return Internal(absl::StrCat("store holds a malformed job id: ", v));
    }
    check_collectives_ = parts[3] == "1";
    if (check_collectives_ != check_here) {
      fprintf(stderr,
              "hcomm WARN: rank %d: HCOMM_CHECK_COLLECTIVES is %s here but %s on rank 0, "
              "whose setting the job follows\n",
              rank_, check_here ? "1" : "unset (or not 1)", check_collectives_ ? "1" : "not 1");
    }
    job_key_ = parts[2];
    if (job_key_.empty() || job_key_.size() > 40 ||
        job_key_.find_first_not_of("0123456789abcdef-") != std::string::npos) {
      return Internal(absl::StrCat("store holds a malformed job key: ", v));
    }
    if (job_size != size_) {
      return InvalidArgument(absl::StrCat(
          where, ": world_size is ", size_, " here but rank 0 at ", store_hp.ToString(),
          " runs a job of ", job_size, " ranks: every rank must be given the same world_size"));
    }
  }
  job_id_ = job_id;
  {
    auto claims = store_client_->Add(absl::StrCat("hcomm/claim/", rank_), 1, deadline);
    if (!claims.ok()) return Annotate(claims.status(), where);
    if (*claims > 1) {
      return InvalidArgument(absl::StrCat(where, ": another process joined the store at ",
                                          store_hp.ToString(), " as rank ", rank_,
                                          " first: every rank must be given a rank of its own"));
    }
  }

  // Listen for higher ranks on the address that routes towards the store.
  std::string my_ip = "127.0.0.1";
  {
    auto local = net::LocalAddressToward(store_hp);
    if (local.ok()) my_ip = *local;
  }
  int my_port = 0;
  HCOMM_ASSIGN_OR_RETURN(net::Fd listener, net::Listen(my_ip, 0, &my_port));
  // The CPUs we may run on, so that ranks of one host can tell whether
  // they outnumber the CPUs they share.
  std::vector<int> my_cpus;
  {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) {
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &cpus)) my_cpus.push_back(c);
      }
    }
  }
  // Whether we can make segments in /dev/shm at all (a container started
  // with --ipc=none has none): where one side cannot, ranks of one host
  // talk over the next transport allowed instead of failing later.
  const std::vector<std::string> allowed =
      opts.transports.empty() ? std::vector<std::string>{"shm", "tcp"} : opts.transports;
  const bool shm_allowed = std::find(allowed.begin(), allowed.end(), "shm") != allowed.end();
  const absl::Status shm_probe =
      shm_allowed ? ShmTransport::Probe(job_key_, rank_) : absl::OkStatus();
  // Which /dev/shm we see ("-": none we can use; "off": shm is not in our
  // transports): ranks of one host_id share segments only where it is the
  // same one.
  const std::string my_shm =
      !shm_allowed ? "off" : shm_probe.ok() ? ShmTransport::Domain() : "-";
  HCOMM_RETURN_IF_ERROR(store_client_->Set(
      absl::StrCat("hcomm/addr/", rank_),
      absl::StrCat(net::HostPort{my_ip, my_port}.ToString(), " ", host_id_, " ", getpid(), " ",
                   my_cpus.empty() ? "-" : absl::StrJoin(my_cpus, ","), " ", my_shm),
      deadline));

  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(absl::StrCat("hcomm/addr/", r));
  absl::Status joined = InitWait(keys, deadline);
  if (!joined.ok() && failed_elsewhere_) return joined;
  if (!joined.ok()) {
    auto have = store_client_->Check(keys, absl::Now() + absl::Seconds(2));
    std::vector<int> missing;
    if (have.ok()) {
      for (int r = 0; r < size_; ++r) {
        if (!(*have)[r]) missing.push_back(r);
      }
    }
    if (!missing.empty()) {
      return Unavailable(absl::StrCat(
          where, ": init ", TimedOutOrInterrupted(), " after ",
          Seconds(Interrupted() ? absl::Now() - began : absl::Milliseconds(opts.timeout_ms)),
          ": ",
          size_ - static_cast<int>(missing.size()), " of ", size_, " ranks joined the store at ",
          store_hp.ToString(), "; missing: ",
          missing.empty() ? std::string("unknown") : absl::StrJoin(missing, ", ")));
    }
    return Annotate(joined, where);
  }

  // Routes: shared memory to ranks on our host, TCP to the others, as the
  // `transports` key allows (in its order of preference).
  placement_.assign(size_, Placement{});
  for (int r = 0; r < size_; ++r) {
    auto entry = store_client_->Get(absl::StrCat("hcomm/addr/", r), deadline);
    if (!entry.ok()) return Annotate(entry.status(), where);
    std::vector<std::string> parts = absl::StrSplit(*entry, ' ');
    placement_[r] = Placement{parts.size() > 1 ? parts[1] : "", parts.size() > 3 ? parts[3] : "",
                              parts.size() > 4 ? parts[4] : "-"};
  }
  enum class Route { kNone, kShm, kTcp };
  std::vector<Route> route(size_, Route::kNone);
  std::vector<int> local_peers, unreachable;
  int tcp_higher = 0;
  bool any_tcp = false;
  bool shm_refused = false;  // a rank of this host went another way: one cannot use shm
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const bool same_host = placement_[r].host == host_id_;
    for (const std::string& t : allowed) {
      if (t == "shm" && same_host) {
        if (my_shm == "-" || placement_[r].shm == "-" || placement_[r].shm == "off") {
          shm_refused = true;
          continue;
        }
        if (placement_[r].shm != my_shm) continue;  // another machine or container of this name
        route[r] = Route::kShm;
        break;
      }
      if (t == "tcp") {
        route[r] = Route::kTcp;
        break;
      }
    }
    if (route[r] == Route::kShm) local_peers.push_back(r);
    if (route[r] == Route::kTcp) {
      any_tcp = true;
      if (r > rank_) ++tcp_higher;
    }
    if (route[r] == Route::kNone) unreachable.push_back(r);
  }
  // Why shared memory does not reach rank u of our host_id (a usable
  // /dev/shm that the peer lacks is the peer's to report).
  auto no_shm = [&](int u) {
    if (!shm_allowed) return std::string("shm is not in this rank's transports");
    if (placement_[u].shm == "off") return absl::StrCat("shm is not in rank ", u, "'s transports");
    if (!shm_probe.ok()) {
      return absl::StrCat("this rank cannot use shared memory: ", shm_probe.message());
    }
    if (placement_[u].shm == "-") {
      return absl::StrCat("rank ", u, " cannot use shared memory (its own log says why)");
    }
    return absl::StrCat("rank ", u, " sees another /dev/shm (another machine or container named ",
                        host_id_, ")");
  };
  if (!unreachable.empty()) {
    const bool local = placement_[unreachable[0]].host == host_id_;
    return NoDevice(absl::StrCat(
        where, ": transports=", absl::StrJoin(allowed, ","), " cannot reach ranks ",
        absl::StrJoin(unreachable, ","), " (host ", placement_[unreachable[0]].host,
        ", we are on host ", host_id_, "); ",
        local ? absl::StrCat(no_shm(unreachable[0]), "; allow tcp")
              : "allow tcp to reach other hosts",
        std::find(allowed.begin(), allowed.end(), "ibverbs") != allowed.end()
            ? " (ibverbs is not available in this build)"
            : ""));
  }
  if (shm_refused && !shm_probe.ok()) {
    // Not an error (the job runs), but slower than it could: said whatever
    // HCOMM_DEBUG is, by the rank that cannot.
    fprintf(stderr, "hcomm WARN: rank %d: ranks of this host talk over TCP: %s\n", rank_,
            no_shm(rank_).c_str());
  }

  // Ranks of this host outnumber the CPUs they may run on together (each
  // rank pinned to its own CPU is not oversubscribed).
  int local_ranks = 0;
  std::set<int> host_cpus;
  for (int r = 0; r < size_; ++r) {
    if (placement_[r].host != host_id_) continue;
    ++local_ranks;
    for (absl::string_view c : absl::StrSplit(placement_[r].cpus, ',', absl::SkipEmpty())) {
      int cpu = 0;
      if (absl::SimpleAtoi(c, &cpu)) host_cpus.insert(cpu);
    }
  }
  oversubscribed_ = local_ranks > std::max<int>(1, static_cast<int>(host_cpus.size()));
  if (oversubscribed_ && !spin_set_) {
    // A waiter gives its CPU away between looks, so looking longer costs the
    // other ranks little, while sleeping costs a wakeup behind their time
    // slices on every message. 4 ranks on 2 CPUs over TCP, allreduce
    // 256 KiB-4 MiB: 1.0-1.5 ms with 50 us of looking, 0.85-1.0 ms with 2 ms.
    spin_ = kSharedCpuSpin;
  }
  direct_spin_ns_ = absl::ToInt64Nanoseconds(
      oversubscribed_ ? std::min(spin_, kSharedCpuDirectSpin) : spin_);

  // Shared memory first: create our segment, publish it, attach to every
  // local peer's, and unlink ours once all have attached to it.
  std::unique_ptr<ShmTransport> shm;
  if (!local_peers.empty()) {
    auto created = ShmTransport::Create(rank_, size_, local_peers, job_key_, this);
    if (!created.ok()) return Annotate(created.status(), absl::StrCat(where, ": shared memory"));
    shm = std::move(created).value();
    shm->SetCpusShared(oversubscribed_);
    if (shm->ring_bytes() < shm->planned_ring_bytes()) {
      // Not an error, but slower for large messages: said whatever
      // HCOMM_DEBUG is, by each rank whose rings are smaller (those that
      // made theirs last found the least room).
      fprintf(stderr,
              "hcomm WARN: rank %d: shared-memory rings of %zu KiB instead of %zu KiB: /dev/shm "
              "is short of room %s\n",
              rank_, shm->ring_bytes() >> 10, shm->planned_ring_bytes() >> 10, kLargerDevShm);
    }
    HCOMM_RETURN_IF_ERROR(
        store_client_->Set(absl::StrCat("hcomm/shm/", rank_), shm->Address(), deadline));
    for (int p : local_peers) {
      const std::string key = absl::StrCat("hcomm/shm/", p);
      absl::Status published = InitWait({key}, deadline);
      if (failed_elsewhere_) return published;
      auto addr = published.ok() ? store_client_->Get(key, deadline)
                                 : absl::StatusOr<std::string>(published);
      if (!addr.ok()) return Annotate(addr.status(), absl::StrCat(where, ": shm address of rank ", p));
      HCOMM_RETURN_IF_ERROR(Annotate(shm->Connect(p, *addr, deadline),
                                     absl::StrCat(where, ": attaching to rank ", p, "'s segment")));
    }
    HCOMM_RETURN_IF_ERROR(store_client_->Set(absl::StrCat("hcomm/shm_ok/", rank_), "1", deadline));
    std::vector<std::string> ok_keys;
    for (int p : local_peers) ok_keys.push_back(absl::StrCat("hcomm/shm_ok/", p));
    absl::Status attached = InitWait(ok_keys, deadline);
    if (failed_elsewhere_) return attached;
    HCOMM_RETURN_IF_ERROR(
        Annotate(attached, absl::StrCat(where, ": waiting for local ranks to attach")));
    HCOMM_RETURN_IF_ERROR(shm->FinishSetup());
  }

  // TCP: every rank dials the lower ranks and accepts the higher.
  std::vector<net::Fd> fds(size_);
  absl::Mutex accept_mu;
  absl::Status accept_status;
  std::thread acceptor([&] {
    int expected = tcp_higher;
    while (expected > 0) {
      const absl::Time slice = std::min(deadline, absl::Now() + kInitLook);
      auto c = net::Accept(listener.get(), slice);
      if (!c.ok()) {
        absl::Status why = c.status();
        if (CodeOf(why) == ErrorCode::kTimeout && slice < deadline) {
          why = FailedElsewhere();
          if (why.ok()) continue;
        }
        absl::MutexLock l(&accept_mu);
        accept_status = why;
        return;
      }
      absl::Time hs_deadline = std::min(deadline, absl::Now() + absl::Seconds(5));
      absl::Status hs = HandshakeAsServer(c->get(), opts.job_token, hs_deadline);
      if (!hs.ok()) continue;  // a stranger or a wrong token: drop it
      auto frame = net::ReadFrame(c->get(), sizeof(Hello), hs_deadline);
      if (!frame.ok() || frame->size() != sizeof(Hello)) continue;
      Hello h;
      memcpy(&h, frame->data(), sizeof h);
      absl::MutexLock l(&accept_mu);
      if (h.job_id != job_id || h.world_size != size_ || h.rank <= rank_ || h.rank >= size_ ||
          route[h.rank] != Route::kTcp || fds[h.rank].valid()) {
        continue;
      }
      fds[h.rank] = std::move(*c);
      --expected;
    }
  });
  absl::Status dial_status;
  for (int r = 0; r < rank_ && dial_status.ok(); ++r) {
    if (route[r] != Route::kTcp) continue;
    auto addr = store_client_->Get(absl::StrCat("hcomm/addr/", r), deadline);
    if (!addr.ok()) {
      dial_status = addr.status();
      break;
    }
    std::vector<std::string> parts = absl::StrSplit(*addr, ' ');
    auto hp = net::ParseHostPort(parts[0], "peer address");
    if (!hp.ok()) {
      dial_status = hp.status();
      break;
    }
    absl::StatusOr<net::Fd> fd;
    for (;;) {
      const absl::Time slice = std::min(deadline, absl::Now() + kInitLook);
      fd = net::ConnectWithRetry(*hp, slice);
      if (fd.ok() || slice >= deadline) break;
      if (absl::Status e = FailedElsewhere(); !e.ok()) {
        fd = e;
        break;
      }
    }
    if (!fd.ok() && failed_elsewhere_) {
      dial_status = fd.status();
      break;
    }
    if (!fd.ok()) {
      dial_status = Annotate(fd.status(), absl::StrCat("connecting to rank ", r, " at ",
                                                       hp->ToString()));
      break;
    }
    absl::Status hs = HandshakeAsClient(fd->get(), opts.job_token, deadline);
    if (!hs.ok()) {
      dial_status = Annotate(hs, absl::StrCat("handshake with rank ", r));
      break;
    }
    Hello h{job_id, rank_, size_};
    absl::Status w = net::WriteFrame(
        fd->get(), absl::string_view(reinterpret_cast<const char*>(&h), sizeof h), deadline);
    if (!w.ok()) {
      dial_status = Annotate(w, absl::StrCat("hello to rank ", r));
      break;
    }
    absl::MutexLock l(&accept_mu);
    fds[r] = std::move(*fd);
  }
  if (!dial_status.ok()) {
    ::shutdown(listener.get(), SHUT_RDWR);  // ends the acceptor's wait at once
  }
  acceptor.join();
  if (!dial_status.ok() && !failed_elsewhere_) {
    // A rank whose own init failed drops its connections a moment before
    // it says why in the store: a reset met here is most often that. Give
    // it that moment, and report its reason rather than the reset.
    const absl::Time grace = std::min(deadline, absl::Now() + absl::Seconds(1));
    for (;;) {
      if (absl::Status e = FailedElsewhere(); !e.ok()) return e;
      if (absl::Now() >= grace) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  if (failed_elsewhere_) return dial_status.ok() ? accept_status : dial_status;
  if (!dial_status.ok()) return Annotate(dial_status, where);
  {
    absl::MutexLock l(&accept_mu);
    if (!accept_status.ok()) {
      std::vector<int> missing;
      for (int r = rank_ + 1; r < size_; ++r) {
        if (route[r] == Route::kTcp && !fds[r].valid()) missing.push_back(r);
      }
      return Unavailable(absl::StrCat(where, ": ranks ", absl::StrJoin(missing, ", "),
                                      " did not connect: ", accept_status.message()));
    }
  }

  route_.assign(size_, nullptr);
  if (shm) {
    for (int p : local_peers) route_[p] = shm.get();
    transports_.push_back(std::move(shm));
  }
  if (any_tcp) {
    auto tcp = std::make_unique<TcpTransport>(rank_, size_, this);
    for (int r = 0; r < size_; ++r) {
      if (route[r] != Route::kTcp) continue;
      HCOMM_RETURN_IF_ERROR(tcp->AddConnection(r, std::move(fds[r])));
      route_[r] = tcp.get();
    }
    transports_.push_back(std::move(tcp));
  }
  transport_spins_ = transports_.size() == 1 && transports_[0]->SpinsBeforeSleep();
  if (transports_.size() == 2) {
    // Shared memory and TCP: a waiter blocks in TCP's epoll, which also
    // watches the shared-memory transport's bell (PollAll).
    const int fd = transports_.front()->OpenWakeFd();
    one_wait_ = fd >= 0 && transports_.back()->WatchFd(fd);
  }
  // Where ranks share CPUs a rendezvous waits for its peer to be scheduled
  // twice (to answer the RTS, then to take the data), which costs more than
  // whatever a transport saves below the protocol's limit (4 ranks on 2
  // CPUs over TCP, tree allreduce of 128 KiB, 64 KiB halves: 472 us eager
  // against 594 us by rendezvous).
  eager_bytes_.assign(size_, kEagerBytes);
  for (int r = 0; r < size_; ++r) {
    if (route_[r] != nullptr && !oversubscribed_) {
      eager_bytes_[r] = std::min(kEagerBytes, route_[r]->EagerBytes());
    }
  }
  return absl::OkStatus();
}

std::string Engine::TransportName() const {
  if (transports_.empty()) return "self";
  std::string out;
  for (auto& t : transports_) out += out.empty() ? t->name() : std::string("+") + t->name();
  return out;
}

absl::Status Engine::SetOption(absl::string_view key, absl::string_view value) {
  if (key != "timeout_ms") {
    Options probe;
    HCOMM_RETURN_IF_ERROR(ParseOption(key, value, &probe));
    return InvalidArgument(absl::StrCat("config key '", key,
                                        "' is fixed at init; only timeout_ms can change on a "
                                        "live communicator"));
  }
  Options o;
  HCOMM_RETURN_IF_ERROR(ParseOption(key, value, &o));
  timeout_ms_.store(o.timeout_ms, std::memory_order_relaxed);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Progress

void Engine::StartProgressThread() {
  if (transports_.empty()) return;
  progress_thread_ = std::thread([this] { ProgressLoop(); });
  if (const char* f = getenv("HCOMM_HANG_REPORT")) hang_report_file_ = f;
  if (store_client_) hang_thread_ = std::thread([this] { HangResponderLoop(); });
}

// ---------------------------------------------------------------------------
// Hang reports

Engine::Activity* Engine::ActivityFor(uint32_t ctx) {
  absl::MutexLock l(&activity_mu_);
  std::unique_ptr<Activity>& a = activity_[ctx];
  if (!a) a = std::make_unique<Activity>();
  return a.get();
}

void Engine::NoteSegmentWait(uint32_t ctx, const std::vector<int>& peers, size_t bytes) {
  Activity* a = ActivityFor(ctx);
  absl::MutexLock l(&activity_mu_);
  a->segment_waits = peers;
  a->segment_seq = a->seq.load(std::memory_order_relaxed);
  a->segment_bytes = bytes;
}

std::string Engine::PendingState() {
  std::string out;
  {
    absl::MutexLock l(&activity_mu_);
    for (const auto& [ctx, a] : activity_) {
      uint64_t seq = 0, fp = 0;
      bool in_progress = false;
      for (int tries = 0; tries < 100; ++tries) {
        const uint64_t v1 = a->version.load(std::memory_order_acquire);
        seq = a->seq.load(std::memory_order_relaxed);
        fp = a->fingerprint.load(std::memory_order_relaxed);
        in_progress = a->in_progress.load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if ((v1 & 1) == 0 && a->version.load(std::memory_order_relaxed) == v1) break;
      }
      absl::StrAppend(&out, "C ", ctx, " ", seq, " ", fp, " ", in_progress ? 1 : 0, "\n");
      if (!in_progress || a->segment_seq != seq) continue;
      for (int p : a->segment_waits) {
        absl::StrAppend(&out, "M ", ctx, " ", p, " ", seq, " ", a->segment_bytes, "\n");
      }
    }
  }
  absl::MutexLock l(&mu_);
  for (const auto& [ctx, matcher] : contexts_) {
    for (const auto& r : matcher->posted()) {
      absl::StrAppend(&out, "R ", ctx, " ", r->peer, " ", r->tag, " ", r->bytes, "\n");
    }
  }
  for (const auto& [id, r] : awaiting_data_) {
    absl::StrAppend(&out, "X ", r->ctx, " ", r->out_source, " ", r->out_tag, " ", r->out_bytes,
                    "\n");
  }
  for (const auto& [id, r] : awaiting_cts_) {
    absl::StrAppend(&out, "S ", r->ctx, " ", r->peer, " ", r->tag, " ", r->bytes, " w\n");
  }
  for (const auto& [id, r] : sending_) {
    absl::StrAppend(&out, "S ", r->ctx, " ", r->peer, " ", r->tag, " ", r->bytes, " q\n");
  }
  return out;
}

void Engine::AnswerHangRequests() {
  auto n = store_client_->Add("hcomm/hang/req", 0, absl::Now() + absl::Milliseconds(100));
  if (!n.ok()) return;
  absl::MutexLock l(&hang_mu_);
  if (hang_answered_ < 0) hang_answered_ = *n;  // requests before we started are old
  if (*n <= hang_answered_) return;
  // Several ranks may time out at once, each with its own request: answer
  // every one since the last.
  std::string state = PendingState();
  for (int64_t q = std::max<int64_t>(hang_answered_ + 1, *n - 64); q <= *n; ++q) {
    store_client_
        ->Set(absl::StrCat("hcomm/hang/", q, "/", rank_), state,
              absl::Now() + absl::Milliseconds(500))
        .IgnoreError();
  }
  if (!hang_report_file_.empty()) {
    std::string path = absl::StrCat(hang_report_file_, ".", rank_);
    if (FILE* f = fopen(path.c_str(), "w")) {
      fprintf(f, "rank %d pending state (hang report %lld):\n%s", rank_,
              static_cast<long long>(*n), state.c_str());
      fclose(f);
    }
  }
  hang_answered_ = *n;
}

void Engine::HangResponderLoop() {
  absl::Mutex m;
  absl::MutexLock l(&m);
  while (!stop_.load(std::memory_order_acquire)) {
    AnswerHangRequests();
    // Look again in 50 ms (a timing-out rank waits for our answer), waking
    // at once when the engine stops.
    m.AwaitWithTimeout(absl::Condition(
                           +[](std::atomic<bool>* stop) { return stop->load(); }, &stop_),
                       absl::Milliseconds(50));
  }
}

std::map<int, std::string> Engine::CollectHangReport(absl::Time deadline) {
  std::map<int, std::string> out;
  if (!store_client_) return out;
  auto n = store_client_->Add("hcomm/hang/req", 1, deadline);
  if (!n.ok()) return out;
  out[rank_] = PendingState();
  store_client_->Set(absl::StrCat("hcomm/hang/", *n, "/", rank_), out[rank_], deadline)
      .IgnoreError();
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(absl::StrCat("hcomm/hang/", *n, "/", r));
  // Wait for the answers until just before the deadline, then read whoever
  // answered (a few local round trips). Ranks timing out at the same moment
  // wait for our answer as we wait for theirs: answer between looks.
  const absl::Duration left = deadline - absl::Now();
  const absl::Time wait_until = deadline - std::min(absl::Milliseconds(20), left / 4);
  for (;;) {
    const absl::Time look = std::min(wait_until, absl::Now() + absl::Milliseconds(50));
    if (store_client_->Wait(keys, look).ok() || look >= wait_until) break;
    AnswerHangRequests();
  }
  const absl::Time read_by = std::max(deadline, absl::Now() + absl::Milliseconds(20));
  auto have = store_client_->Check(keys, read_by);
  if (!have.ok()) return out;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !(*have)[r]) continue;
    auto v = store_client_->Get(keys[r], read_by);
    if (v.ok()) out[r] = *v;
  }
  return out;
}

void Engine::ProgressLoop() {
  // Polls only while no caller is waiting (a waiting caller polls itself),
  // and stays out of the way for a moment after each wait so that a
  // ping-pong loop does not wake this thread on every message.
  // A wait ended since the last look (the count moved) or one is going on:
  // stay out for another 2 ms.
  uint64_t seen = waits_ended_.load(std::memory_order_relaxed);
  while (!stop_.load(std::memory_order_acquire)) {
    const uint64_t ended = waits_ended_.load(std::memory_order_relaxed);
    if (active_waiters_.load(std::memory_order_acquire) > 0 || ended != seen) {
      seen = ended;
      absl::MutexLock l(&bg_mu_);
      bg_cv_.WaitWithTimeout(&bg_mu_, absl::Milliseconds(2));
      continue;
    }
    if (progress_mu_.TryLock()) {
      PollAll(absl::Milliseconds(10), /*quiet=*/true);
      progress_mu_.Unlock();
    } else {
      absl::MutexLock l(&bg_mu_);
      bg_cv_.WaitWithTimeout(&bg_mu_, absl::Milliseconds(1));
    }
  }
}

int Engine::PollAll(absl::Duration block, bool quiet) {
  if (torn_down_.load(std::memory_order_acquire)) return 0;  // Destroy shut them
  if (transports_.size() == 1) {
    return quiet ? transports_[0]->PollQuiet(block) : transports_[0]->Poll(block);
  }
  int events = 0;
  for (auto& t : transports_) events += t->Poll(absl::ZeroDuration());
  if (events > 0 || block <= absl::ZeroDuration() || transports_.empty()) return events;
  Transport* last = transports_.back().get();
  if (one_wait_) {
    Transport* first = transports_.front().get();
    // The last transport's wait also ends when the first one's bell rings.
    if (!first->ArmWake()) return first->Poll(absl::ZeroDuration());  // work came meanwhile
    events = quiet ? last->PollQuiet(block) : last->Poll(block);
    first->DisarmWake();
    return events + first->Poll(absl::ZeroDuration());
  }
  // Each transport sleeps in its own way (epoll, futex): take short naps on
  // the last one and look at the others between them.
  const absl::Duration nap = std::min(block, absl::Milliseconds(1));
  return quiet ? last->PollQuiet(nap) : last->Poll(nap);
}

size_t Engine::PendingSendsAll() const {
  size_t n = 0;
  for (auto& t : transports_) n += t->PendingSends();
  return n;
}

void Engine::PollOnce(absl::Duration block) {
  PollAll(block);
}

absl::Status Engine::Wait(Request* r, absl::Time deadline, absl::Time since) {
  // A receive from one peer over a transport that does not spin by itself
  // looks at that peer's connection alone while it spins (a socket read
  // instead of a readiness call and then the read), and at everything every
  // few looks.
  const int direct_peer = r->kind == Request::Kind::kRecv && !transport_spins_ &&
                                  r->peer >= 0 && r->peer < size_ && r->peer != rank_ &&
                                  !route_.empty() && route_[r->peer] != nullptr
                              ? r->peer
                              : -1;
  unsigned looks = 0;
  auto poll_spinning = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (direct_peer >= 0 && ++looks % 8 != 0 && !torn_down_.load(std::memory_order_acquire)) {
      return route_[direct_peer]->PollPeer(direct_peer);
    }
    return PollAll(absl::ZeroDuration());
  };
  if (!r->done.load(std::memory_order_acquire) && !transports_.empty() &&
      progress_mu_.TryLock()) {
    // What we wait for has often arrived already: look before reading the
    // clock.
    poll_spinning();
    progress_mu_.Unlock();
  }
  if (!r->done.load(std::memory_order_acquire)) {
    active_waiters_.fetch_add(1, std::memory_order_acq_rel);
    absl::Time now = absl::Now();
    absl::Time spin_until = now + spin_;
    for (bool first = true; !r->done.load(std::memory_order_acquire); first = false) {
      if (!first) now = absl::Now();
      if (now >= deadline || InterruptNow(now)) break;
      if (!transports_.empty() && progress_mu_.TryLock()) {
        absl::Duration block = now < spin_until && !transport_spins_
                                   ? absl::ZeroDuration()
                                   : std::min(deadline - now, absl::Milliseconds(50));
        int events = block == absl::ZeroDuration() ? poll_spinning() : PollAll(block);
        progress_mu_.Unlock();
        // Keep spinning while data flows (a large transfer is a stream of
        // events); sleep in the kernel only after spin_ of silence.
        if (events > 0) {
          if (!transport_spins_) spin_until = absl::Now() + spin_;
        } else if (block == absl::ZeroDuration()) {
          // Nothing yet. With ranks outnumbering the CPUs, the peer we wait
          // for may need ours; otherwise a yield is only a wasted syscall.
          if (oversubscribed_) {
            sched_yield();
          } else {
            for (int i = 0; i < 8; ++i) CpuRelax();
          }
        }
        continue;
      }
      // Someone else is polling (or there is no transport): sleep until a
      // completion or a short while, then try to become the poller.
      absl::MutexLock l(&mu_);
      if (r->done.load(std::memory_order_acquire)) break;
      ++sleepers_;
      cv_.WaitWithDeadline(&mu_, std::min(deadline, absl::Now() + absl::Milliseconds(2)));
      --sleepers_;
    }
    // Counted, not timed: a clock read here would sit on every message's
    // critical path.
    waits_ended_.fetch_add(1, std::memory_order_relaxed);
    active_waiters_.fetch_sub(1, std::memory_order_acq_rel);
  }
  // Once done, a request's outcome no longer changes (see Complete).
  if (r->done.load(std::memory_order_acquire)) return r->status;
  absl::MutexLock l(&mu_);
  if (!r->done.load(std::memory_order_acquire)) {
    return TimeoutStatus(*r, absl::Now() - std::min(since, r->started));
  }
  return r->status;
}

bool Engine::Test(Request* r) {
  if (r->done.load(std::memory_order_acquire)) return true;
  if (!transports_.empty() && progress_mu_.TryLock()) {
    PollAll(absl::ZeroDuration());
    progress_mu_.Unlock();
  }
  return r->done.load(std::memory_order_acquire);
}

void Engine::Complete(const std::shared_ptr<Request>& r, absl::Status s) {
  if (r->done.load(std::memory_order_relaxed)) return;
  r->status = std::move(s);
  r->phase = Request::Phase::kDone;
  if (r->kind == Request::Kind::kSend) {
    r->out_source = r->peer;
    r->out_tag = r->tag;
    r->out_bytes = r->bytes;
  }
  r->done.store(true, std::memory_order_release);
  if (sleepers_ > 0) cv_.SignalAll();
}

void Engine::FailTruncated(const std::shared_ptr<Request>& r, int source, int tag,
                           uint64_t bytes) {
  r->out_source = source;
  r->out_tag = tag;
  r->out_bytes = 0;  // nothing of it arrived
  Complete(r, Mismatch(absl::StrCat("rank ", rank_, ": message of ", bytes, " bytes from rank ",
                                    source, " ", TagName(tag), " exceeds the receive buffer of ",
                                    r->bytes, " bytes")));
}

bool Engine::Clash(const std::shared_ptr<Request>& r, uint64_t fingerprint, int source) {
  if (r->fingerprint == 0 || fingerprint == r->fingerprint) return false;
  absl::Status why = Mismatch(absl::StrCat("rank ", rank_, ": rank ", source,
                                           " is in another collective (tag ", r->tag, ")"));
  why.SetPayload(kClashUrl, absl::Cord(absl::StrCat(fingerprint, " ", source, " ",
                                                    r->fingerprint)));
  r->out_source = source;
  Complete(r, why);
  return true;
}

void Engine::CheckArrivalAgainstPosted(Matcher& matcher, int source, int tag,
                                       uint64_t fingerprint) {
  if (fingerprint == 0) return;
  for (auto it = matcher.posted().begin(); it != matcher.posted().end(); ++it) {
    const Request& r = **it;
    if (r.tag == tag && r.fingerprint != 0 && r.fingerprint != fingerprint) {
      std::shared_ptr<Request> hit = *it;
      matcher.posted().erase(it);
      Clash(hit, fingerprint, source);
      return;
    }
  }
}

void Engine::PoisonLocked(uint32_t ctx, int tag, const absl::Status& why) {
  for (const auto& [key, st] : poisoned_) {
    if (key.first == ctx && key.second == tag) return;
  }
  poisoned_.push_back({{ctx, tag}, why});
  any_poisoned_.store(true, std::memory_order_release);
  if (poisoned_.size() > 64) poisoned_.pop_front();
  FailWaitingLocked(ctx, [tag](const Request& r) { return r.tag == tag; }, why,
                    /*describe=*/false);
}

void Engine::FailWaitingLocked(uint32_t ctx, absl::FunctionRef<bool(const Request&)> pick,
                               const absl::Status& why, bool describe) {
  auto fail = [&](const std::shared_ptr<Request>& r) {
    Complete(r, describe ? Annotate(why, Describe(*r)) : why);
  };
  if (auto m = contexts_.find(ctx); m != contexts_.end()) {
    auto& posted = m->second->posted();
    for (auto it = posted.begin(); it != posted.end();) {
      if (pick(**it)) {
        std::shared_ptr<Request> r = *it;
        it = posted.erase(it);
        fail(r);
      } else {
        ++it;
      }
    }
  }
  // Sends waiting for a receive: nothing of them has left (a late CTS is
  // answered with DATA_ABORT). Those already moving are left to finish.
  for (auto it = awaiting_cts_.begin(); it != awaiting_cts_.end();) {
    std::shared_ptr<Request> r = it->second;
    if (r->ctx == ctx && pick(*r)) {
      awaiting_cts_.erase(it++);
      fail(r);
    } else {
      ++it;
    }
  }
}

absl::Status Engine::RefusedLocked(uint32_t ctx, int tag) {
  for (const auto& [key, why] : poisoned_) {
    if (key.first == ctx && key.second == tag) return why;
  }
  if (!broken_.empty()) {
    auto it = broken_.find(ctx);
    if (it != broken_.end()) return it->second;
  }
  return absl::OkStatus();
}

void Engine::WatchMembers(uint32_t ctx, const std::vector<int>& members) {
  absl::MutexLock l(&mu_);
  members_[ctx] = members;
}

void Engine::BreakCollectivesOfLocked(int peer, const absl::Status& why) {
  for (const auto& [ctx, members] : members_) {
    if (broken_.contains(ctx) || std::find(members.begin(), members.end(), peer) == members.end()) {
      continue;
    }
    BreakContextLocked(ctx, PeerFailure(absl::StrCat("a rank of this communicator failed: ",
                                                     why.message())));
  }
}

void Engine::BreakContextLocked(uint32_t ctx, const absl::Status& broken) {
  broken_[ctx] = broken;
  any_poisoned_.store(true, std::memory_order_release);
  FailWaitingLocked(ctx, [](const Request&) { return true; }, broken, /*describe=*/true);
}

void Engine::PeerAbandonedLocked(int peer, uint32_t p2p_ctx, uint32_t coll_ctx) {
  // Named by its rank in the communicator where this rank knows it (the
  // members, in group order, of a communicator it has made).
  std::string who = absl::StrCat("world rank ", peer);
  if (auto m = members_.find(coll_ctx); m != members_.end()) {
    auto at = std::find(m->second.begin(), m->second.end(), peer);
    if (at != m->second.end()) {
      who = absl::StrCat("rank ", at - m->second.begin(), " (world rank ", peer, ")");
    }
  }
  const absl::Status why =
      PeerFailure(absl::StrCat(who, " aborted the communicator (hcomm_comm_abort)"));
  // No collective of it can complete any more, whatever it waits for.
  if (!broken_.contains(coll_ctx)) BreakContextLocked(coll_ctx, why);
  // Point-to-point with the others goes on; with `peer`, nothing will.
  abandoned_[{p2p_ctx, peer}] = why;
  any_poisoned_.store(true, std::memory_order_release);
  // Receives that answered its request-to-send: their data will not come
  // (unless it is landing already, or comes anyway and is then dropped).
  for (auto it = awaiting_data_.begin(); it != awaiting_data_.end();) {
    std::shared_ptr<Request> r = it->second;
    if ((r->ctx == p2p_ctx || r->ctx == coll_ctx) && r->out_source == peer &&
        peers_[peer]->rx_req != r) {
      awaiting_data_.erase(it++);
      Complete(r, Annotate(why, Describe(*r)));
    } else {
      ++it;
    }
  }
  // Receives from it fail, and so do receives from any rank, as when a peer
  // fails: it may be the one they wait for. Those posted later wait for
  // the others.
  FailWaitingLocked(
      p2p_ctx, [peer](const Request& r) { return r.peer == peer || r.peer == kAnySource; }, why,
      /*describe=*/true);
}

void Engine::Poison(uint32_t ctx, int tag, const std::vector<int>& members, uint64_t culprit_fp,
                    int culprit, uint64_t reporter_fp) {
  std::vector<Outgoing> out;
  {
    absl::MutexLock l(&mu_);
    absl::Status why = Mismatch(absl::StrCat("rank ", rank_, " found ranks disagreeing"));
    why.SetPayload(kClashUrl, absl::Cord(absl::StrCat(culprit_fp, " ", culprit, " ", reporter_fp,
                                                      " ", rank_)));
    PoisonLocked(ctx, tag, why);
    for (int p : members) {
      if (p == rank_ || peers_[p]->state != PeerState::kUp) continue;
      out.push_back({p, Pack(MakeMeta(kNotice, ctx, rank_, tag, static_cast<uint64_t>(culprit),
                                      culprit_fp, reporter_fp))});
    }
  }
  Flush(&out);
}

void Engine::CompleteExternal(const std::shared_ptr<Request>& r, absl::Status s) {
  absl::MutexLock l(&mu_);
  Complete(r, std::move(s));
}

uint32_t Engine::NextFreeContext() {
  absl::MutexLock l(&mu_);
  return next_free_ctx_;
}

void Engine::ReserveContexts(uint32_t first, uint32_t count) {
  absl::MutexLock l(&mu_);
  next_free_ctx_ = std::max(next_free_ctx_, first + count);
}

// ---------------------------------------------------------------------------
// Posting

void Engine::EraseMatcherLocked(
    absl::flat_hash_map<uint32_t, std::unique_ptr<Matcher>>::iterator it) {
  if (last_ctx_ == it->first) {
    last_ctx_ = UINT32_MAX;
    last_matcher_ = nullptr;
  }
  contexts_.erase(it);
}

Matcher& Engine::MatcherFor(uint32_t ctx) {
  if (ctx == last_ctx_) return *last_matcher_;
  std::unique_ptr<Matcher>& m = contexts_[ctx];
  if (!m) m = std::make_unique<Matcher>();
  last_ctx_ = ctx;
  last_matcher_ = m.get();
  return *m;
}

absl::Status Engine::Destroyed() const {
  return Aborted(absl::StrCat("rank ", rank_, ": the communicator was destroyed"));
}

absl::Status Engine::CheckUsable(int peer) {
  if (aborted_) return Aborted(absl::StrCat("rank ", rank_, ": the communicator was aborted"));
  if (destroyed_) return Destroyed();
  if (peer != kAnySource && peer != rank_ && peers_[peer]->state != PeerState::kUp) {
    return peers_[peer]->failure;
  }
  return absl::OkStatus();
}

std::string Engine::Describe(const Request& r) const {
  if (r.kind == Request::Kind::kSend) {
    return absl::StrCat("send to rank ", r.peer, " ", TagName(r.tag), " (", r.bytes, " bytes)");
  }
  return absl::StrCat("recv from ", PeerName(r.peer), " ", TagName(r.tag), " (capacity ", r.bytes,
                      " bytes)");
}

absl::StatusOr<std::shared_ptr<Request>> Engine::Isend(uint32_t ctx, const void* buf,
                                                       size_t bytes, size_t elem_size, int peer,
                                                       int tag, uint64_t fingerprint) {
  std::shared_ptr<Request> r = NewRequest();
  r->kind = Request::Kind::kSend;
  r->ctx = ctx;
  r->fingerprint = fingerprint;
  r->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  r->peer = peer;
  r->tag = tag;
  r->send_buf = static_cast<const char*>(buf);
  r->bytes = bytes;
  r->elem_size = elem_size;
  r->started = absl::Now();
  {
    absl::MutexLock l(&mu_);
    if (absl::Status usable = CheckUsable(peer); !usable.ok()) {
      return Annotate(usable, Describe(*r));  // described only on failure
    }
    if (any_poisoned_.load(std::memory_order_relaxed)) {
      HCOMM_RETURN_IF_ERROR(RefusedLocked(ctx, tag));
      if (absl::Status a = AbandonedLocked(ctx, peer); !a.ok()) return Annotate(a, Describe(*r));
    }
    if (peer == rank_) {
      SelfSend(r);
      return r;
    }
    if (bytes <= eager_bytes_[peer]) {
      sending_[r->id] = r;
    } else {
      r->rendezvous = true;
      awaiting_cts_[r->id] = r;
    }
  }
  if (r->rendezvous) {
    Meta m = MakeMeta(kRts, r->ctx, rank_, tag, bytes, r->id, r->fingerprint);
    route_[peer]->Send(peer, Pack(m), nullptr, 0, [this, r](absl::Status s) {
      if (s.ok()) return;
      absl::MutexLock l(&mu_);
      awaiting_cts_.erase(r->id);
      Complete(r, Annotate(s, Describe(*r)));
    });
  } else {
    Meta m = MakeMeta(kEager, r->ctx, rank_, tag, bytes, r->id, r->fingerprint);
    uint64_t h = route_[peer]->Send(peer, Pack(m), buf, bytes, [this, r](absl::Status s) {
      absl::MutexLock l(&mu_);
      sending_.erase(r->id);
      Complete(r, s.ok() ? s : Annotate(s, Describe(*r)));
    });
    absl::MutexLock l(&mu_);
    r->frame = h;
  }
  return r;
}

void Engine::SelfSend(const std::shared_ptr<Request>& r) {
  Matcher& matcher = MatcherFor(r->ctx);
  std::shared_ptr<Request> recv = matcher.TakePosted(rank_, r->tag);
  if (recv && Clash(recv, r->fingerprint, rank_)) {
    Complete(r, absl::OkStatus());
    return;
  }
  if (recv) {
    recv->out_source = rank_;
    recv->out_tag = r->tag;
    if (r->bytes > recv->bytes) {
      FailTruncated(recv, rank_, r->tag, r->bytes);
    } else {
      if (r->bytes > 0) memcpy(recv->recv_buf, r->send_buf, r->bytes);
      recv->out_bytes = r->bytes;
      Complete(recv, absl::OkStatus());
    }
    Complete(r, absl::OkStatus());
    return;
  }
  Unexpected u;
  u.source = rank_;
  u.tag = r->tag;
  u.bytes = r->bytes;
  u.fingerprint = r->fingerprint;
  if (r->bytes <= kEagerBytes) {
    u.kind = Unexpected::Kind::kEager;
    u.data = payloads_.Take(r->bytes);
    if (r->bytes > 0) memcpy(u.data.get(), r->send_buf, r->bytes);
    u.complete = true;
    matcher.AddUnexpected(std::move(u));
    Complete(r, absl::OkStatus());
  } else {
    u.kind = Unexpected::Kind::kSelf;
    u.sender = r;
    matcher.AddUnexpected(std::move(u));
  }
}

std::shared_ptr<Request> Engine::NewRequest() {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer does not model std::atomic_thread_fence, so it cannot
  // see the hand-over below and reports the reused request's last writes on
  // another thread as a race: under it, every request is new.
  return std::make_shared<Request>();
#endif
  // A request held only by this pool can gain a new reference only from
  // this thread; the fence pairs with the release by whoever dropped the
  // last other one.
  constexpr int kPool = 8;
  thread_local std::shared_ptr<Request> pool[kPool];
  thread_local unsigned next = 0;
  for (int i = 0; i < kPool; ++i) {
    std::shared_ptr<Request>& r = pool[(next + i) % kPool];
    if (r && r.use_count() == 1) {
      std::atomic_thread_fence(std::memory_order_acquire);
      r->Reset();
      next = (next + i + 1) % kPool;
      return r;
    }
  }
  std::shared_ptr<Request>& slot = pool[next];
  next = (next + 1) % kPool;
  slot = std::make_shared<Request>();
  return slot;
}

bool Engine::SendNow(uint32_t ctx, const void* buf, size_t bytes, int peer, int tag,
                     uint64_t fingerprint) {
  if (peer == rank_ || peer < 0 || peer >= size_ || route_.empty() || route_[peer] == nullptr ||
      bytes > eager_bytes_[peer]) {
    return false;
  }
  if (aborted_flag_.load(std::memory_order_acquire) || closing_.load(std::memory_order_acquire) ||
      any_poisoned_.load(std::memory_order_acquire) ||
      !peers_[peer]->fast_send.load(std::memory_order_acquire)) {
    return false;
  }
  Meta m = MakeMeta(kEager, ctx, rank_, tag, bytes, next_id_.fetch_add(1, std::memory_order_relaxed),
                    fingerprint);
  return route_[peer]->TrySendNow(peer, Pack(m), buf, bytes);
}

absl::StatusOr<std::shared_ptr<Request>> Engine::Irecv(uint32_t ctx, void* buf, size_t bytes,
                                                       size_t elem_size, int peer, int tag,
                                                       uint64_t fingerprint) {
  std::shared_ptr<Request> r = NewRequest();
  r->kind = Request::Kind::kRecv;
  r->ctx = ctx;
  r->fingerprint = fingerprint;
  r->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  r->peer = peer;
  r->tag = tag;
  r->recv_buf = static_cast<char*>(buf);
  r->bytes = bytes;
  r->elem_size = elem_size;
  r->started = absl::Now();
  std::vector<Outgoing> out;
  {
    absl::MutexLock l(&mu_);
    if (aborted_ || destroyed_) return Annotate(CheckUsable(kAnySource), Describe(*r));
    if (any_poisoned_.load(std::memory_order_relaxed)) {
      HCOMM_RETURN_IF_ERROR(RefusedLocked(ctx, tag));
    }
    Matcher& matcher = MatcherFor(ctx);
    auto it = matcher.FindUnexpected(peer, tag);
    if (it == matcher.unexpected().end() && any_poisoned_.load(std::memory_order_relaxed)) {
      // What it sent before aborting the communicator is still delivered.
      if (absl::Status a = AbandonedLocked(ctx, peer); !a.ok()) return Annotate(a, Describe(*r));
    }
    if (it != matcher.unexpected().end()) {
      DeliverUnexpected(matcher, it, r, &out);
    } else {
      // Nothing has arrived: a dead peer can no longer send it, nor can
      // any rank once every other has failed or left.
      absl::Status usable = CheckUsable(peer);
      if (!usable.ok()) return Annotate(usable, Describe(*r));
      if (peer == kAnySource && size_ > 1) {
        int up = -1;
        for (int p = 0; p < size_ && up < 0; ++p) {
          if (p != rank_ && peers_[p]->state == PeerState::kUp) up = p;
        }
        if (up < 0) {
          const int other = rank_ == 0 ? 1 : 0;
          return Annotate(PeerFailure(absl::StrCat("rank ", rank_,
                                                   ": every other rank has failed or left (",
                                                   peers_[other]->failure.message(), ")")),
                          Describe(*r));
        }
      }
      if (fingerprint != 0) {
        // A message of another collective under the same tag, from anyone:
        // the ranks disagree, whoever it was meant for.
        for (const Unexpected& u : matcher.unexpected()) {
          if (u.tag == tag && u.fingerprint != 0 && u.fingerprint != fingerprint) {
            Clash(r, u.fingerprint, u.source);
            return r;
          }
        }
      }
      if (peer == kAnySource) {
        bool any_up = false;
        for (int p = 0; p < size_; ++p) {
          if (p == rank_ || peers_[p]->state == PeerState::kUp) any_up = true;
        }
        if (!any_up) {
          return PeerFailure(absl::StrCat(Describe(*r), ": every other rank has failed or left"));
        }
      }
      matcher.Post(r);
    }
  }
  Flush(&out);
  return r;
}

void Engine::DeliverUnexpected(Matcher& matcher, Matcher::UnexpectedList::iterator it,
                                     const std::shared_ptr<Request>& r,
                                     std::vector<Outgoing>* out) {
  Unexpected& u = *it;
  r->out_source = u.source;
  r->out_tag = u.tag;
  if (u.kind != Unexpected::Kind::kRts && Clash(r, u.fingerprint, u.source)) {
    if (u.kind == Unexpected::Kind::kSelf) {
      Complete(u.sender, absl::OkStatus());
      matcher.EraseUnexpected(it);
    } else if (u.complete) {
      matcher.EraseUnexpected(it);
    } else {
      u.claimed = r;  // let it finish arriving, then drop it
    }
    return;
  }
  switch (u.kind) {
    case Unexpected::Kind::kEager: {
      if (u.bytes > r->bytes) {
        FailTruncated(r, u.source, u.tag, u.bytes);
        if (u.complete) {
          matcher.EraseUnexpected(it);
        } else {
          // Still arriving: let it finish into the staging buffer, then drop it.
          u.claimed = r;
        }
        return;
      }
      if (!u.complete) {
        r->phase = Request::Phase::kMatched;
        u.claimed = r;
        return;
      }
      if (u.bytes > 0) memcpy(r->recv_buf, u.data.get(), u.bytes);
      r->out_bytes = u.bytes;
      Complete(r, absl::OkStatus());
      matcher.EraseUnexpected(it);
      return;
    }
    case Unexpected::Kind::kRts: {
      int source = u.source, tag = u.tag;
      uint64_t bytes = u.bytes, send_id = u.send_id, fingerprint = u.fingerprint;
      matcher.EraseUnexpected(it);
      MatchRts(source, tag, bytes, send_id, fingerprint, r, out);
      return;
    }
    case Unexpected::Kind::kSelf: {
      std::shared_ptr<Request> sender = u.sender;
      matcher.EraseUnexpected(it);
      if (sender->bytes > r->bytes) {
        FailTruncated(r, rank_, sender->tag, sender->bytes);
      } else {
        memcpy(r->recv_buf, sender->send_buf, sender->bytes);
        r->out_bytes = sender->bytes;
        Complete(r, absl::OkStatus());
      }
      Complete(sender, absl::OkStatus());
      return;
    }
  }
}

void Engine::MatchRts(int peer, int tag, uint64_t bytes, uint64_t send_id, uint64_t fingerprint,
                      const std::shared_ptr<Request>& r, std::vector<Outgoing>* out) {
  r->out_source = peer;
  r->out_tag = tag;
  if (Clash(r, fingerprint, peer)) {
    out->push_back({peer, Pack(MakeMeta(kReject, r->ctx, rank_, tag, bytes, send_id))});
    return;
  }
  if (bytes > r->bytes) {
    out->push_back({peer, Pack(MakeMeta(kReject, r->ctx, rank_, tag, bytes, send_id))});
    FailTruncated(r, peer, tag, bytes);
    return;
  }
  r->phase = Request::Phase::kMatched;
  r->out_bytes = bytes;
  awaiting_data_[r->id] = r;
  out->push_back({peer, Pack(MakeMeta(kCts, r->ctx, rank_, tag, bytes, send_id, r->id))});
}

void Engine::Flush(std::vector<Outgoing>* out) {
  for (Outgoing& o : *out) {
    std::shared_ptr<Request> r = std::move(o.complete_on_sent);
    uint64_t h = route_[o.peer]->Send(o.peer, o.meta, o.payload, o.len, [this, r](absl::Status s) {
      if (!r) return;
      absl::MutexLock l(&mu_);
      sending_.erase(r->id);
      Complete(r, s.ok() ? s : Annotate(s, Describe(*r)));
    });
    if (r) {
      absl::MutexLock l(&mu_);
      r->frame = h;
    }
  }
  out->clear();
}

// ---------------------------------------------------------------------------
// Blocking forms, timeouts

std::string Engine::PendingReason(const Request& r) {
  std::string heard;
  if (r.peer != kAnySource && r.peer != rank_) {
    int64_t last = peers_[r.peer]->last_rx_ns.load(std::memory_order_relaxed);
    heard = last == 0 ? absl::StrCat("; nothing has arrived from rank ", r.peer, " yet")
                      : absl::StrCat("; last frame from rank ", r.peer, " arrived ",
                                     Seconds(absl::Nanoseconds(CoarseNs() - last)), " ago");
  }
  if (r.kind == Request::Kind::kRecv) {
    if (r.phase == Request::Phase::kMatched) {
      return absl::StrCat("the message (", r.out_bytes, " bytes from rank ", r.out_source,
                          ") was still arriving", heard);
    }
    return absl::StrCat("no matching message arrived", heard);
  }
  if (r.rendezvous && awaiting_cts_.contains(r.id)) {
    return absl::StrCat("rank ", r.peer, " has not posted a matching receive", heard);
  }
  return absl::StrCat("the connection to rank ", r.peer,
                      " did not take the data (rank ", r.peer, " is not reading)", heard);
}

absl::Status Engine::TimeoutStatus(const Request& r, absl::Duration waited) {
  return Timeout(absl::StrCat("rank ", rank_, ": ", Describe(r), " ", TimedOutOrInterrupted(),
                              " after ", Seconds(waited), ": ", PendingReason(r)));
}

absl::Status Engine::WaitWithReport(Request* r, absl::Time end, const HangReporter* reporter,
                                    std::string* report) {
  if (reporter != nullptr) {
    absl::Status s = Wait(r, end - ReportReserve(end - r->started));
    if (CodeOf(s) != ErrorCode::kTimeout || r->done.load() || Interrupted()) return s;
    *report = (*reporter)(end);
  }
  return Wait(r, end);
}

absl::Status Engine::Send(uint32_t ctx, const void* buf, size_t bytes, size_t elem_size,
                          int peer, int tag, absl::Duration timeout,
                          const HangReporter* reporter) {
  if (SendNow(ctx, buf, bytes, peer, tag, 0)) return absl::OkStatus();
  HCOMM_ASSIGN_OR_RETURN(std::shared_ptr<Request> r,
                         Isend(ctx, buf, bytes, elem_size, peer, tag));
  std::string report;
  absl::Status s = WaitWithReport(r.get(), r->started + timeout, reporter, &report);
  if (CodeOf(s) != ErrorCode::kTimeout || r->done.load()) return s;
  // Withdraw the send so that the caller may reuse its buffer at once.
  absl::Status why;
  {
    absl::MutexLock l(&mu_);
    if (r->done.load()) return r->status;
    why = TimeoutStatus(*r, absl::Now() - r->started);
  }
  absl::Status result = Withdraw(r, why);
  if (report.empty() || CodeOf(result) != ErrorCode::kTimeout) return result;
  return Timeout(absl::StrCat(result.message(), "\n", report));
}

absl::Status Engine::Withdraw(const std::shared_ptr<Request>& r, const absl::Status& why) {
  std::vector<Outgoing> out;
  absl::Status result = why;
  {
    absl::MutexLock l(&mu_);
    if (r->done.load()) return r->status;
    if (r->kind == Request::Kind::kRecv) {
      if (!MatcherFor(r->ctx).RemovePosted(r.get())) return why;  // data is arriving
      Complete(r, why);
      return why;
    }
    if (r->peer == rank_) {
      // A send to ourselves waiting in our own unexpected queue.
      Matcher& m = MatcherFor(r->ctx);
      for (auto it = m.unexpected().begin(); it != m.unexpected().end(); ++it) {
        if (it->sender == r) {
          m.EraseUnexpected(it);
          break;
        }
      }
    } else if (awaiting_cts_.erase(r->id) > 0) {
      out.push_back({r->peer, Pack(MakeMeta(kCancelRts, r->ctx, rank_, r->tag, r->bytes, r->id))});
    } else if (route_[r->peer] != nullptr && !route_[r->peer]->Cancel(r->peer, r->frame)) {
      result = MakeError(CodeOf(why), absl::StrCat(why.message(), " (part of it had left; the "
                                                                  "rest will still be delivered)"));
    }
    sending_.erase(r->id);
    Complete(r, result);
  }
  Flush(&out);
  return result;
}

bool Engine::RecvDirect(uint32_t ctx, void* buf, size_t bytes, int peer, int tag,
                        uint64_t fingerprint, bool exact) {
  if (peer < 0 || peer >= size_ || peer == rank_ || route_.empty() || route_[peer] == nullptr ||
      aborted_flag_.load(std::memory_order_acquire) ||
      closing_.load(std::memory_order_acquire) || any_poisoned_.load(std::memory_order_acquire) ||
      !peers_[peer]->fast_send.load(std::memory_order_acquire)) {
    return false;
  }
  const Matcher* matcher;
  uint64_t arrivals;
  {
    // Only if no receive is posted here (it would come first) and nothing
    // from `peer` that we accept is waiting already (order).
    absl::MutexLock l(&mu_);
    Matcher& m = MatcherFor(ctx);
    if (!m.posted().empty() || m.FindUnexpected(peer, tag) != m.unexpected().end()) {
      return false;
    }
    matcher = &m;
    arrivals = m.arrivals();
  }
  Transport* t = route_[peer];
  // Runs under the transport's receive lock for `peer`, which every
  // delivery from `peer` into the queue also held: if the count has not
  // moved, nothing of `peer`'s that we might accept was queued since the
  // look above.
  auto take = [&](const FrameMeta& fm, const void* payload, uint64_t len) {
    const Meta m = Unpack(fm);
    if (m.kind != kEager || len > kEagerBytes || m.comm_id != ctx || m.id2 != fingerprint ||
        (exact ? len != bytes : len > bytes) ||
        (tag != kAnyTag && m.tag != tag) || matcher->arrivals() != arrivals) {
      return false;  // the full path deals with it
    }
    if (len > 0) memcpy(buf, payload, len);
    return true;
  };
  // Counts as a wait, so that the background thread stays out of the way
  // (it would take the frame from under us, and sleep where every send
  // has to wake it).
  waits_ended_.fetch_add(1, std::memory_order_relaxed);
  // For as long as a wait spins before it sleeps, at most: then the full
  // path, which also watches the clock, the peer's health and the other
  // connections. (A look costs a few nanoseconds on shared memory and a
  // system call on a socket.) Where ranks share CPUs, each look that finds
  // nothing yields (the peer may need this CPU to send), and the full path
  // takes over after kSharedCpuDirectSpin.
  const int64_t end_ns = MonoNs() + direct_spin_ns_;
  for (int i = 1;; ++i) {
    const int got = t->TakeWhole(peer, bytes, take);
    if (got == 1) {
      peers_[peer]->last_rx_ns.store(CoarseNs(), std::memory_order_relaxed);
      return true;
    }
    if (got < 0) return false;
    if (oversubscribed_) {
      // A yield may hand the CPU over for a while: read the clock each time.
      if (MonoNs() >= end_ns) return false;
      sched_yield();
    } else {
      if (i % 16 == 0 && MonoNs() >= end_ns) return false;
      CpuRelax();
    }
  }
}

absl::Status Engine::Recv(uint32_t ctx, void* buf, size_t bytes, size_t elem_size, int peer,
                          int tag, absl::Duration timeout, std::shared_ptr<Request>* out,
                          const HangReporter* reporter) {
  if (out == nullptr && RecvDirect(ctx, buf, bytes, peer, tag)) return absl::OkStatus();
  HCOMM_ASSIGN_OR_RETURN(std::shared_ptr<Request> r,
                         Irecv(ctx, buf, bytes, elem_size, peer, tag));
  if (out != nullptr) *out = r;
  std::string report;
  absl::Status s = WaitWithReport(r.get(), r->started + timeout, reporter, &report);
  if (CodeOf(s) != ErrorCode::kTimeout || r->done.load()) return s;
  {
    absl::MutexLock l(&mu_);
    if (MatcherFor(r->ctx).RemovePosted(r.get())) {
      absl::Status t = TimeoutStatus(*r, absl::Now() - r->started);
      if (!report.empty()) t = Timeout(absl::StrCat(t.message(), "\n", report));
      Complete(r, t);
      return t;
    }
  }
  // The message is arriving into the buffer, which must not be written once
  // this returns, and the deadline has passed. A stream stopped
  // mid-message cannot resume: the connection to its sender is closed
  // (operations with that rank fail from now on), and the receive fails.
  int src;
  absl::Status t;
  std::string cut;
  {
    absl::MutexLock l(&mu_);
    if (r->done.load()) return r->status;  // it ended meanwhile
    t = TimeoutStatus(*r, absl::Now() - r->started);
    src = r->out_source;
    if (src >= 0 && src != rank_ && route_[src] != nullptr) {
      cut = absl::StrCat("rank ", rank_, " closed its connection to rank ", src, ": a message from ",
                         "it was still arriving when a receive's deadline (", Seconds(timeout),
                         ") passed, and a stream stopped mid-message cannot resume");
      peers_[src]->cut = cut;
    }
  }
  if (!cut.empty()) route_[src]->FailPeer(src, PeerFailure(cut));
  s = Wait(r.get(), absl::Now() + absl::Seconds(1));
  // Landed whole meanwhile, or ended otherwise than by the cut.
  if (s.ok() || (r->done.load() && CodeOf(s) != ErrorCode::kPeerFailure)) return s;
  return Timeout(absl::StrCat(t.message(), "; ", cut.empty() ? std::string(s.message()) : cut,
                              report.empty() ? "" : "\n", report));
}

void Engine::Release(const std::shared_ptr<Request>& r) {
  if (r->kind != Request::Kind::kRecv || r->done.load()) return;
  absl::MutexLock l(&mu_);
  if (ClosedLocked(r->ctx)) return;  // (landing: it finishes by itself)
  if (MatcherFor(r->ctx).RemovePosted(r.get())) {
    Complete(r, Aborted("receive was freed before a message arrived"));
  }
}

// ---------------------------------------------------------------------------
// Inbound frames (on the polling thread, under the transport's receive lock
// for `peer`).

void* Engine::OnFrame(int peer, const FrameMeta& fm, uint64_t payload_len) {
  Meta m = Unpack(fm);
  PeerInfo& p = *peers_[peer];
  p.last_rx_ns.store(CoarseNs(), std::memory_order_relaxed);
  if (payload_len == 0) return nullptr;
  absl::MutexLock l(&mu_);
  p.rx_req.reset();
  p.rx_unexpected = nullptr;
  p.rx_truncated = false;
  if (aborted_) return nullptr;
  if (m.kind == kEager) {
    if (payload_len > kEagerBytes) {
      FailOversizedEager(peer, payload_len);
      return nullptr;
    }
    if (ClosedLocked(m.comm_id)) return nullptr;  // discard the payload
    std::shared_ptr<Request> r = MatcherFor(m.comm_id).TakePosted(peer, m.tag);
    if (r && Clash(r, m.id2, peer)) return nullptr;  // discard the payload
    if (r) {
      r->out_source = peer;
      r->out_tag = m.tag;
      r->out_bytes = payload_len;
      p.rx_req = r;
      if (payload_len > r->bytes) {
        p.rx_truncated = true;
        return nullptr;
      }
      r->phase = Request::Phase::kMatched;
      return r->recv_buf;
    }
    p.rx_unexpected = QueueEager(MatcherFor(m.comm_id), peer, m.tag, m.id2, payload_len);
    return p.rx_unexpected->data.get();
  }
  if (m.kind == kData) {
    auto it = awaiting_data_.find(m.id);
    if (it == awaiting_data_.end()) return nullptr;
    std::shared_ptr<Request> r = it->second;
    if (payload_len != r->out_bytes || payload_len > r->bytes) {
      awaiting_data_.erase(it);
      Complete(r, PeerFailure(absl::StrCat("rank ", peer, " sent ", payload_len,
                                           " bytes where ", r->out_bytes, " were announced")));
      return nullptr;
    }
    p.rx_req = r;
    return r->recv_buf;
  }
  return nullptr;  // a payload on a frame kind that has none: discard it
}

void Engine::FailOversizedEager(int peer, uint64_t payload_len) {
  // No rank sends more than kEagerBytes eagerly (larger messages go by
  // RTS/CTS): the header is corrupt or the peer does not follow the
  // protocol. Never allocate what such a header claims.
  FailPeerLocked(peer,
                 PeerFailure(absl::StrCat("rank ", rank_, ": rank ", peer,
                                          " sent an eager message of ", payload_len,
                                          " bytes, above the protocol's limit of ", kEagerBytes,
                                          "; its connection is unusable")),
                 /*any_source=*/true);
}

void Engine::OnWholeFrame(int peer, const FrameMeta& fm, const void* payload,
                          uint64_t payload_len) {
  Meta m = Unpack(fm);
  if (m.kind != kEager || payload_len == 0 || payload_len > kEagerBytes) {
    // (OnFrame fails the peer of an eager frame above kEagerBytes.)
    FrameSink::OnWholeFrame(peer, fm, payload, payload_len);
    return;
  }
  peers_[peer]->last_rx_ns.store(CoarseNs(), std::memory_order_relaxed);
  absl::MutexLock l(&mu_);
  if (aborted_ || ClosedLocked(m.comm_id)) return;
  Matcher& matcher = MatcherFor(m.comm_id);
  std::shared_ptr<Request> r = matcher.TakePosted(peer, m.tag);
  if (r && Clash(r, m.id2, peer)) return;
  if (r) {
    r->out_source = peer;
    r->out_tag = m.tag;
    r->out_bytes = payload_len;
    if (payload_len > r->bytes) {
      FailTruncated(r, peer, m.tag, payload_len);
      return;
    }
    memcpy(r->recv_buf, payload, payload_len);
    Complete(r, absl::OkStatus());
    return;
  }
  Unexpected* u = QueueEager(matcher, peer, m.tag, m.id2, payload_len);
  memcpy(u->data.get(), payload, payload_len);
  u->complete = true;
}

Unexpected* Engine::QueueEager(Matcher& matcher, int peer, int tag, uint64_t fingerprint,
                               uint64_t payload_len) {
  Unexpected u;
  u.kind = Unexpected::Kind::kEager;
  u.source = peer;
  u.tag = tag;
  u.bytes = payload_len;
  u.fingerprint = fingerprint;
  u.data = payloads_.Take(payload_len);
  CheckArrivalAgainstPosted(matcher, peer, tag, fingerprint);
  return matcher.AddUnexpected(std::move(u));
}

void Engine::OnPayload(int peer, const FrameMeta& fm, uint64_t payload_len) {
  Meta m = Unpack(fm);
  PeerInfo& p = *peers_[peer];
  std::vector<Outgoing> out;
  {
    absl::MutexLock l(&mu_);
    if (ClosedLocked(m.comm_id) && DropClosedLocked(peer, fm, &out)) {
      // A communicator this rank destroyed (CloseContexts).
    } else {
      Matcher& matcher = MatcherFor(m.comm_id);
      switch (m.kind) {
        case kEager: {
          if (payload_len == 0) {
            // Zero-byte message: match it now.
            std::shared_ptr<Request> r = matcher.TakePosted(peer, m.tag);
            if (r && Clash(r, m.id2, peer)) break;
            if (r) {
              r->out_source = peer;
              r->out_tag = m.tag;
              r->out_bytes = 0;
              Complete(r, absl::OkStatus());
            } else {
              Unexpected u;
              u.kind = Unexpected::Kind::kEager;
              u.source = peer;
              u.tag = m.tag;
              u.bytes = 0;
              u.fingerprint = m.id2;
              u.complete = true;
              CheckArrivalAgainstPosted(matcher, peer, m.tag, m.id2);
              matcher.AddUnexpected(std::move(u));
            }
            break;
          }
          if (p.rx_req) {
            std::shared_ptr<Request> r = std::move(p.rx_req);
            if (p.rx_truncated) {
              FailTruncated(r, peer, m.tag, payload_len);
            } else {
              Complete(r, absl::OkStatus());
            }
          } else if (p.rx_unexpected != nullptr) {
            Unexpected* u = p.rx_unexpected;
            u->complete = true;
            if (u->claimed) {
              std::shared_ptr<Request> r = std::move(u->claimed);
              if (!r->done.load()) {
                memcpy(r->recv_buf, u->data.get(), u->bytes);
                r->out_bytes = u->bytes;
                Complete(r, absl::OkStatus());
              }
              matcher.EraseUnexpected(u);
            }
          }
          p.rx_unexpected = nullptr;
          p.rx_truncated = false;
          break;
        }
        case kData: {
          if (p.rx_req) {
            std::shared_ptr<Request> r = std::move(p.rx_req);
            awaiting_data_.erase(r->id);
            Complete(r, absl::OkStatus());
          }
          break;
        }
        case kRts: {
          std::shared_ptr<Request> r = matcher.TakePosted(peer, m.tag);
          if (r) {
            MatchRts(peer, m.tag, m.size, m.id, m.id2, r, &out);
          } else {
            Unexpected u;
            u.kind = Unexpected::Kind::kRts;
            u.source = peer;
            u.tag = m.tag;
            u.bytes = m.size;
            u.send_id = m.id;
            u.fingerprint = m.id2;
            CheckArrivalAgainstPosted(matcher, peer, m.tag, m.id2);
            matcher.AddUnexpected(std::move(u));
          }
          break;
        }
        case kCts: {
          auto it = awaiting_cts_.find(m.id);
          if (it == awaiting_cts_.end()) {
            // We withdrew this send (timeout): tell the receiver.
            out.push_back({peer, Pack(MakeMeta(kDataAbort, m.comm_id, rank_, m.tag, 0, m.id2))});
            break;
          }
          std::shared_ptr<Request> r = it->second;
          awaiting_cts_.erase(it);
          r->phase = Request::Phase::kMatched;
          sending_[r->id] = r;
          Outgoing o{peer, Pack(MakeMeta(kData, r->ctx, rank_, r->tag, r->bytes, m.id2))};
          o.payload = r->send_buf;
          o.len = r->bytes;
          o.complete_on_sent = r;
          out.push_back(std::move(o));
          break;
        }
        case kReject: {
          auto it = awaiting_cts_.find(m.id);
          if (it != awaiting_cts_.end()) {
            std::shared_ptr<Request> r = it->second;
            awaiting_cts_.erase(it);
            Complete(r, absl::OkStatus());  // as in MPI, the receiver is the one told
          }
          break;
        }
        case kCancelRts: {
          for (auto it = matcher.unexpected().begin(); it != matcher.unexpected().end(); ++it) {
            if (it->kind == Unexpected::Kind::kRts && it->source == peer && it->send_id == m.id) {
              matcher.EraseUnexpected(it);
              break;
            }
          }
          break;
        }
        case kDataAbort: {
          auto it = awaiting_data_.find(m.id);
          if (it != awaiting_data_.end()) {
            std::shared_ptr<Request> r = it->second;
            awaiting_data_.erase(it);
            Complete(r, PeerFailure(absl::StrCat("rank ", peer, " withdrew the message (",
                                                 r->out_bytes, " bytes, tag ", r->out_tag,
                                                 ") it had announced: its send timed out, "
                                                 "failed or was aborted")));
          }
          break;
        }
        case kNotice: {
          absl::Status why = Mismatch(absl::StrCat("rank ", m.src, " found ranks disagreeing"));
          why.SetPayload(kClashUrl, absl::Cord(absl::StrCat(m.id, " ", m.size, " ", m.id2, " ",
                                                            m.src)));
          PoisonLocked(m.comm_id, m.tag, why);
          break;
        }
        case kAbandon: {
          if (m.id <= UINT32_MAX && m.id != m.comm_id) {
            PeerAbandonedLocked(peer, m.comm_id, static_cast<uint32_t>(m.id));
          }
          break;
        }
        case kGoodbye: {
          p.got_goodbye = true;
          if (p.state == PeerState::kUp) {
            // Sends whose payload is already with the transport are left to
            // it: they complete once the data is out (or fail if it cannot
            // be), whatever the peer does next.
            FailPeerLocked(peer,
                           PeerFailure(absl::StrCat("rank ", peer,
                                                    " destroyed its communicator while this was "
                                                    "pending")),
                           /*any_source=*/false, /*keep_queued_sends=*/true);
            p.fast_send.store(false, std::memory_order_release);
            p.state = PeerState::kClosed;
          }
          break;
        }
        default:
          break;
      }
    }
  }
  if (m.kind == kGoodbye) {
    route_[peer]->CloseWrite(peer);
  }
  Flush(&out);
}

void Engine::FailPeerLocked(int peer, const absl::Status& why, bool any_source,
                            bool keep_queued_sends) {
  PeerInfo& p = *peers_[peer];
  p.fast_send.store(false, std::memory_order_release);
  p.state = PeerState::kFailed;
  p.failure = why;
  auto fails = [&](const Request& r) { return r.peer == peer || (any_source && r.peer == kAnySource); };
  for (auto& [ctx, matcher] : contexts_) {
    for (auto it = matcher->posted().begin(); it != matcher->posted().end();) {
      if (fails(**it)) {
        std::shared_ptr<Request> r = *it;
        it = matcher->posted().erase(it);
        Complete(r, Annotate(why, Describe(*r)));
      } else {
        ++it;
      }
    }
  }
  for (auto* table : {&awaiting_cts_, &awaiting_data_, &sending_}) {
    if (keep_queued_sends && table == &sending_) continue;
    for (auto it = table->begin(); it != table->end();) {
      std::shared_ptr<Request> r = it->second;
      bool hit = r->kind == Request::Kind::kSend ? r->peer == peer : r->out_source == peer;
      if (hit) {
        table->erase(it++);
        Complete(r, Annotate(why, Describe(*r)));
      } else {
        ++it;
      }
    }
  }
  // Arrivals still incomplete can never complete; complete ones stay deliverable.
  for (auto& [ctx, matcher] : contexts_) {
    auto& unexpected = matcher->unexpected();
    for (auto it = unexpected.begin(); it != unexpected.end();) {
      bool drop = it->source == peer && (it->kind == Unexpected::Kind::kRts ||
                                         (it->kind == Unexpected::Kind::kEager && !it->complete));
      if (drop) {
        if (it->claimed) Complete(it->claimed, Annotate(why, Describe(*it->claimed)));
        it = unexpected.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (p.rx_req) {
    Complete(p.rx_req, Annotate(why, Describe(*p.rx_req)));
    p.rx_req.reset();
  }
  p.rx_unexpected = nullptr;
  // A member that left in order (its goodbye) did its part of every
  // collective it entered; one that failed may not have.
  if (!keep_queued_sends) BreakCollectivesOfLocked(peer, why);
}

void Engine::OnConnectionLost(int peer, const absl::Status& status) {
  absl::MutexLock l(&mu_);
  PeerInfo& p = *peers_[peer];
  if (aborted_ || p.state != PeerState::kUp) return;
  if (p.said_goodbye || p.got_goodbye || destroyed_) {
    // An orderly close: either side's goodbye came first.
    p.fast_send.store(false, std::memory_order_release);
    p.state = PeerState::kClosed;
    p.failure = PeerFailure(absl::StrCat("rank ", peer, " has closed its connection"));
    return;
  }
  FailPeerLocked(peer,
                 PeerFailure(!p.cut.empty()
                                 ? p.cut
                                 : absl::StrCat("rank ", rank_, ": connection to rank ", peer,
                                                " lost (", status.message(),
                                                "); the peer process died or the network broke")),
                 /*any_source=*/true);
}

// ---------------------------------------------------------------------------
// Abort and destroy

bool Engine::InFlightLocked(uint32_t first, uint32_t count) {
  auto ours = [&](uint32_t ctx) { return ctx - first < count; };
  for (const auto* table : {&awaiting_cts_, &awaiting_data_, &sending_}) {
    for (const auto& [id, r] : *table) {
      if (ours(r->ctx)) return true;
    }
  }
  for (const auto& p : peers_) {
    if (p->rx_req && ours(p->rx_req->ctx)) return true;
  }
  for (uint32_t c = first; ours(c); ++c) {
    auto it = contexts_.find(c);
    if (it == contexts_.end()) continue;
    for (const Unexpected& u : it->second->unexpected()) {
      if (u.kind == Unexpected::Kind::kEager && !u.complete) return true;
    }
  }
  return false;
}

void Engine::CloseContexts(uint32_t first, uint32_t count, absl::Time deadline) {
  auto ours = [&](uint32_t ctx) { return ctx - first < count; };
  // 1. As Destroy does for the whole job: our sends reach their peers, and
  //    messages already landing land (not after an abort of them).
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (aborted_ || destroyed_ || ClosedLocked(first) || !InFlightLocked(first, count)) break;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline || InterruptNow(now)) break;
    if (!transports_.empty() && progress_mu_.TryLock()) {
      PollAll(absl::Milliseconds(5));
      progress_mu_.Unlock();
    } else {
      absl::SleepFor(absl::Milliseconds(1));  // another thread drives progress
    }
  }
  // 2. Fail what is pending, drop what arrived unreceived.
  const absl::Status why = Destroyed();
  std::vector<std::shared_ptr<Request>> sends;
  std::vector<Outgoing> out;
  {
    absl::MutexLock l(&mu_);
    for (uint32_t c = first; ours(c); ++c) {
      closed_contexts_.insert(c);
      members_.erase(c);
      broken_.erase(c);
    }
    for (auto it = abandoned_.begin(); it != abandoned_.end();) {
      if (ours(it->first.first)) {
        abandoned_.erase(it++);
      } else {
        ++it;
      }
    }
    poisoned_.erase(std::remove_if(poisoned_.begin(), poisoned_.end(),
                                   [&](const auto& p) { return ours(p.first.first); }),
                    poisoned_.end());
    // With nothing refused any more, operations take their fast paths again
    // (also after this group was aborted or broken by a member's failure).
    any_poisoned_.store(!poisoned_.empty() || !broken_.empty() || !abandoned_.empty(),
                        std::memory_order_release);
    EndContextsLocked(first, count, why, &sends, &out);
  }
  // (Each ends ABORTED, or ABORTED saying the rest of it is still on its
  // way: nobody waits for it any more.)
  for (const auto& r : sends) Withdraw(r, why).IgnoreError();
  Flush(&out);
}

void Engine::AbortCommunicator(uint32_t p2p_ctx, uint32_t coll_ctx,
                               const std::vector<int>& members, absl::Status why) {
  const uint32_t first = std::min(p2p_ctx, coll_ctx);
  const uint32_t count = std::max(p2p_ctx, coll_ctx) - first + 1;
  std::vector<std::shared_ptr<Request>> sends;
  std::vector<Outgoing> out;
  if (why.ok()) why = Aborted(absl::StrCat("rank ", rank_, ": the communicator was aborted"));
  {
    absl::MutexLock l(&mu_);
    if (aborted_ || destroyed_ || ClosedLocked(p2p_ctx)) return;
    for (uint32_t c : {p2p_ctx, coll_ctx}) {
      closed_contexts_.insert(c);
      broken_[c] = why;  // later operations there fail at once
    }
    any_poisoned_.store(true, std::memory_order_release);
    // The members hear of the abort before anything else of it: a sender
    // whose request-to-send is refused below then fails with the abort's
    // reason first, rather than completing as if a receive had been too
    // small.
    for (int p : members) {
      if (p == rank_ || peers_[p]->state != PeerState::kUp) continue;
      out.push_back({p, Pack(MakeMeta(kAbandon, p2p_ctx, rank_, 0, 0, coll_ctx))});
    }
    EndContextsLocked(first, count, why, &sends, &out);
  }
  Flush(&out);
  for (const auto& r : sends) Withdraw(r, why).IgnoreError();
}

void Engine::EndContextsLocked(uint32_t first, uint32_t count, const absl::Status& why,
                               std::vector<std::shared_ptr<Request>>* sends,
                               std::vector<Outgoing>* out) {
  auto ours = [&](uint32_t ctx) { return ctx - first < count; };
  for (const auto* table : {&awaiting_cts_, &sending_}) {
    for (const auto& [id, r] : *table) {
      if (ours(r->ctx)) sends->push_back(r);
    }
  }
  auto landing = [&](const std::shared_ptr<Request>& r) {
    for (const auto& p : peers_) {
      if (p->rx_req == r) return true;
    }
    return false;
  };
  // A receive whose payload is landing finishes with it (its buffer is
  // being written); one whose payload has not begun gives it up (the DATA
  // frame then finds no receive and is discarded).
  for (auto it = awaiting_data_.begin(); it != awaiting_data_.end();) {
    std::shared_ptr<Request> r = it->second;
    if (ours(r->ctx) && !landing(r)) {
      awaiting_data_.erase(it++);
      Complete(r, why);
    } else {
      ++it;
    }
  }
  for (uint32_t c = first; ours(c); ++c) {
    auto it = contexts_.find(c);
    if (it == contexts_.end()) continue;
    Matcher& m = *it->second;
    for (auto& r : m.posted()) Complete(r, why);
    m.posted().clear();
    bool keep = false;  // an arrival still landing: its end drops it
    for (auto u = m.unexpected().begin(); u != m.unexpected().end();) {
      if (u->claimed) Complete(u->claimed, why);
      u->claimed.reset();
      if (u->kind == Unexpected::Kind::kEager && !u->complete) {
        keep = true;
        ++u;
        continue;
      }
      if (u->sender) Complete(u->sender, why);
      if (u->kind == Unexpected::Kind::kRts) {
        out->push_back({u->source, Pack(MakeMeta(kReject, c, rank_, u->tag, u->bytes,
                                                 u->send_id))});
      }
      u = m.unexpected().erase(u);
    }
    if (!keep) EraseMatcherLocked(it);
  }
}

bool Engine::DropClosedLocked(int peer, const FrameMeta& fm, std::vector<Outgoing>* out) {
  const Meta m = Unpack(fm);
  PeerInfo& p = *peers_[peer];
  switch (m.kind) {
    case kEager: {
      // OnFrame discarded the payload, unless it began landing before the
      // close: into a receive (left to finish), or into the queue.
      if (p.rx_req) {
        std::shared_ptr<Request> r = std::move(p.rx_req);
        Complete(r, p.rx_truncated ? Destroyed() : absl::OkStatus());
      }
      if (p.rx_unexpected != nullptr) {
        auto it = contexts_.find(m.comm_id);
        if (it != contexts_.end()) {
          it->second->EraseUnexpected(p.rx_unexpected);
          if (it->second->unexpected().empty() && it->second->posted().empty()) {
            EraseMatcherLocked(it);
          }
        }
      }
      p.rx_unexpected = nullptr;
      p.rx_truncated = false;
      return true;
    }
    case kRts:  // nobody will receive it: the sender's send completes
      out->push_back({peer, Pack(MakeMeta(kReject, m.comm_id, rank_, m.tag, m.size, m.id))});
      return true;
    case kCancelRts:
    case kNotice:
    case kAbandon:
      return true;
    default:
      return false;
  }
}

void Engine::FailAllPendingLocked(const absl::Status& why) {
  for (auto& [ctx, matcher] : contexts_) {
    for (auto& r : matcher->posted()) Complete(r, why);
    matcher->posted().clear();
  }
  for (auto* table : {&awaiting_cts_, &awaiting_data_, &sending_}) {
    for (auto& [id, r] : *table) Complete(r, why);
    table->clear();
  }
  for (auto& [ctx, matcher] : contexts_) {
    for (auto& u : matcher->unexpected()) {
      if (u.claimed) Complete(u.claimed, why);
      if (u.sender) Complete(u.sender, why);
    }
  }
  for (auto& p : peers_) {
    if (p->rx_req) Complete(p->rx_req, why);
  }
}

void Engine::Abort() {
  {
    absl::MutexLock l(&mu_);
    if (aborted_) return;
    aborted_ = true;
    aborted_flag_ = true;
    FailAllPendingLocked(
        Aborted(absl::StrCat("rank ", rank_, ": the communicator was aborted")));
  }
  for (auto& t : transports_) t->ShutdownAll();
}

absl::Status Engine::Destroy() {
  {
    absl::MutexLock l(&mu_);
    if (destroyed_) return absl::OkStatus();
  }
  if (job_id_ != 0) {
    EndedJobs& e = Ended();
    absl::MutexLock l(&e.mu);
    e.ids.insert(job_id_);
  }
  closing_.store(true, std::memory_order_release);
  absl::Status result;
  if (!transports_.empty() && !aborted_flag_.load()) {
    // 1. Let our own sends reach their peers.
    const absl::Time deadline = Deadline();
    for (;;) {
      bool pending;
      {
        absl::MutexLock l(&mu_);
        pending = !awaiting_cts_.empty() || !sending_.empty() || PendingSendsAll() > 0;
      }
      if (!pending) break;
      const absl::Time now = absl::Now();
      if (now >= deadline || InterruptNow(now)) break;
      PollOnce(absl::Milliseconds(5));
    }
    // 2. Goodbye to every peer still up, then close our side.
    std::vector<int> up;
    {
      absl::MutexLock l(&mu_);
      for (int p = 0; p < size_; ++p) {
        if (p != rank_ && peers_[p]->state == PeerState::kUp) {
          peers_[p]->fast_send.store(false, std::memory_order_release);
          peers_[p]->said_goodbye = true;
          up.push_back(p);
        }
      }
    }
    for (int p : up) {
      route_[p]->Send(p, Pack(MakeMeta(kGoodbye, 0, rank_, 0, 0, 0)), nullptr, 0, nullptr);
      route_[p]->CloseWrite(p);
    }
    // 3. Wait (briefly) for each peer to close its side, which it does as
    //    soon as it reads our goodbye: everything we sent has been read.
    const absl::Time close_deadline = std::min(deadline, absl::Now() + absl::Seconds(10));
    for (;;) {
      bool open = false;
      {
        absl::MutexLock l(&mu_);
        for (int p : up) {
          if (peers_[p]->state == PeerState::kUp && !peers_[p]->got_goodbye) open = true;
        }
        destroyed_ = !open;  // EOFs after the goodbyes are not failures
      }
      if (!open || absl::Now() >= close_deadline) break;
      PollOnce(absl::Milliseconds(5));
    }
  }
  stop_ = true;
  {
    absl::MutexLock l(&bg_mu_);
    bg_cv_.SignalAll();
  }
  if (progress_thread_.joinable()) progress_thread_.join();
  if (hang_thread_.joinable()) hang_thread_.join();
  {
    absl::MutexLock l(&mu_);
    destroyed_ = true;
    FailAllPendingLocked(Destroyed());
    for (auto& [ctx, matcher] : contexts_) matcher->unexpected().clear();
    // A receive whose message was still arriving is failed above: after
    // our goodbye the peer's close counts as orderly and fails nothing.
    for (auto& p : peers_) p->rx_req.reset();
  }
  {
    // Requests outlive their communicator (hcomm.h), and a thread may still
    // be waiting on one, polling the transports: none polls once this lock
    // is ours, nor after (PollAll). The transports are shut now and freed
    // with the Engine, when the last request lets go of it.
    absl::MutexLock p(&progress_mu_);
    torn_down_.store(true, std::memory_order_release);
    for (auto& t : transports_) t->ShutdownAll();
  }
  store_client_.reset();
  store_server_.reset();
  return result;
}

}  // namespace hcomm
