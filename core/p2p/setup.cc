// Init: joining the store, routes to every peer, and the transports' setup.
#include "core/p2p/engine.h"

#include <sched.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/base/interrupt.h"
#include "core/base/net.h"
#include "core/base/shm_file.h"
#include "core/base/status.h"
#include "core/bootstrap/handshake.h"
#include "core/bootstrap/store_client.h"
#include "core/bootstrap/store_server.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"

namespace hcomm {

namespace {

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

void Engine::MarkJobEnded(uint64_t id) {
  EndedJobs& e = Ended();
  absl::MutexLock l(&e.mu);
  e.ids.insert(id);
}

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

}  // namespace hcomm
