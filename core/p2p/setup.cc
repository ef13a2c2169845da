// Init: joining the job, the transports' cards, a route to every peer, and
// connecting. The transports come from the registry (built in or plugins)
// and are driven through their tables; nothing here names one.
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/base/interrupt.h"
#include "core/base/net.h"
#include "core/base/status.h"
#include "core/bootstrap/handshake.h"
#include "core/p2p/engine.h"
#include "core/topology/host_topology.h"
#include "core/topology/switches.h"
#include "transports/registry.h"

namespace hcomm {

namespace {

// What the engine lends the transports during init: the job's store (under
// keys of each transport's own), its token, init's deadline, and whether
// another rank's init failed. Refuses everything once init is over.
class Setup final : public ProviderSetup {
 public:
  Setup(Job* job, MonoTime deadline) : job_(job), deadline_(deadline) {}

  void End() {
    absl::MutexLock l(&mu_);
    ended_ = true;
  }

  absl::Status Put(const std::string& transport, const std::string& key,
                   const std::string& value) override {
    HCOMM_RETURN_IF_ERROR(Open());
    return job_->PutFor(transport, key, value, deadline_);
  }
  absl::StatusOr<std::string> Get(const std::string& transport, int peer,
                                  const std::string& key) override {
    HCOMM_RETURN_IF_ERROR(Open());
    if (peer < 0 || peer >= job_->size()) {
      return InvalidArgument(absl::StrCat("rank ", peer, " is not in the job"));
    }
    return job_->GetFor(transport, peer, key, deadline_);
  }
  absl::Status Check() override {
    HCOMM_RETURN_IF_ERROR(Open());
    if (Interrupted()) return Aborted(absl::StrCat("init ", TimedOutOrInterrupted()));
    if (MonoNow() >= deadline_) {
      return Unavailable(absl::StrCat("init timed out after ", Seconds(MonoNow() - began_)));
    }
    return job_->FailedElsewhere();
  }
  MonoTime Deadline() const override { return deadline_; }
  absl::Status Authenticate(int fd, bool as_server) override {
    HCOMM_RETURN_IF_ERROR(Open());
    // An accepting rank gives a stranger a few seconds at most.
    return as_server ? HandshakeAsServer(fd, job_->token(),
                                         std::min(deadline_, MonoNow() + absl::Seconds(5)))
                     : HandshakeAsClient(fd, job_->token(), deadline_);
  }

 private:
  absl::Status Open() {
    absl::MutexLock l(&mu_);
    if (ended_) return Internal("a transport asked for init's services after init");
    return absl::OkStatus();
  }

  Job* const job_;
  const MonoTime deadline_;
  const MonoTime began_ = MonoNow();
  absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

const store::TransportCard* CardOf(const store::RankCard& c, const std::string& name) {
  for (const store::TransportCard& t : c.transports()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
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
  std::unique_ptr<Engine> engine(new Engine(opts));
  engine->flight_ = std::make_unique<FlightRecorder>(static_cast<size_t>(opts.flight_recorder));
  engine->flight_file_ = opts.flight_recorder_file;
  if (absl::Status s = engine->Bootstrap(opts); !s.ok()) {
    if (engine->job_ != nullptr) engine->job_->TellInitFailure(s);
    return s;
  }
  if (engine->setup_ != nullptr) static_cast<Setup*>(engine->setup_.get())->End();
  engine->StartProgressThread();
  return engine;
}

absl::Status Engine::Bootstrap(const Options& opts) {
  const std::string where = absl::StrCat("rank ", rank_, " of ", size_);
  // Plugins first, so that a bad one is an error whatever the job's size.
  Registry& registry = Registry::Global();
  for (const std::string& path : opts.plugins) {
    HCOMM_RETURN_IF_ERROR(Annotate(registry.LoadPlugin(path), where));
  }
  const std::vector<std::string> allowed =
      opts.transports.empty() ? registry.DefaultOrder() : opts.transports;
  for (const std::string& t : allowed) {
    if (registry.Find(t) == nullptr) {
      return NoDevice(absl::StrCat(where, ": transports=", absl::StrJoin(allowed, ","),
                                   ": no transport is named '", t, "' (there are ",
                                   registry.Describe(), "; the plugins key, HCOMM_PLUGINS, "
                                   "loads more)"));
    }
  }
  // (A bad topology file fails here, before this rank joins the others.)
  absl::StatusOr<std::string> switch_id = SwitchOf(opts.switch_id, opts.topology, host_id_);
  if (!switch_id.ok()) return Annotate(switch_id.status(), where);
  if (size_ == 1) return absl::OkStatus();
  const MonoTime deadline = MonoNow() + absl::Milliseconds(opts.timeout_ms);
  HCOMM_ASSIGN_OR_RETURN(job_, Job::Join(opts, deadline));
  setup_ = std::make_unique<Setup>(job_.get(), deadline);

  // Every allowed transport opened and asked for its card: what the other
  // ranks need to reach this one through it, or why it cannot be used here.
  ProviderJob pj;
  pj.rank = rank_;
  pj.world_size = size_;
  pj.job_key = job_->key();
  pj.host_id = host_id_;
  pj.advertise_address = "127.0.0.1";
  if (auto local = net::LocalAddressToward(job_->store_address()); local.ok()) {
    pj.advertise_address = *local;
  }
  store::RankCard mine;
  mine.set_host(host_id_);
  mine.set_pid(getpid());
  mine.set_cpus(OwnCpus());
  mine.set_switch_id(*switch_id);
  mine.set_numa_plus_one(NumaNodeOf(mine.cpus(), ThisHost()) + 1);
  mine.set_unexpected_bytes(opts.unexpected_bytes);
  std::vector<std::unique_ptr<Provider>> opened(allowed.size());
  std::vector<std::string> unusable(allowed.size());
  for (size_t i = 0; i < allowed.size(); ++i) {
    store::TransportCard* card = mine.add_transports();
    card->set_name(allowed[i]);
    auto p = Provider::Open(registry.Find(allowed[i]), pj, setup_.get(), this);
    absl::StatusOr<std::string> published =
        p.ok() ? (*p)->Publish() : absl::StatusOr<std::string>(p.status());
    if (!published.ok()) {
      unusable[i] = std::string(published.status().message());
      card->set_unusable(unusable[i]);
      continue;
    }
    card->set_card(*published);
    opened[i] = std::move(p).value();
  }
  HCOMM_RETURN_IF_ERROR(Annotate(job_->Publish(mine, deadline), where));
  HCOMM_ASSIGN_OR_RETURN(std::vector<store::RankCard> cards, job_->Cards(deadline));
  placement_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    placement_[r] = Placement{cards[r].host(), cards[r].cpus(), cards[r].switch_id(),
                              cards[r].numa_plus_one() - 1};
  }

  // Flow control, before any connection can bring a frame: each peer's
  // window is what it published.
  std::vector<int64_t> windows(size_);
  for (int r = 0; r < size_; ++r) {
    windows[r] = cards[r].unexpected_bytes() > 0 ? cards[r].unexpected_bytes() : opts.unexpected_bytes;
  }
  flow_ = std::make_unique<FlowControl>(size_, rank_, windows, opts.unexpected_bytes);
  {
    absl::MutexLock l(&mu_);
    rts_out_.assign(size_, 0);
  }

  // Ranks of this host outnumbering their CPUs change how waits behave.
  oversubscribed_ = CpusShared(placement_, host_id_);
  cpus_filled_ = CpusFilled(placement_, host_id_);
  if (oversubscribed_ && !spin_set_) {
    // A waiter gives its CPU away between looks, so looking longer costs the
    // other ranks little, while sleeping costs a wakeup behind their time
    // slices on every message (measured: docs/performance.md, "Looking
    // before sleeping where ranks share CPUs").
    spin_ = kSharedCpuSpin;
  }
  direct_spin_ns_ = absl::ToInt64Nanoseconds(
      oversubscribed_ ? std::min(spin_, kSharedCpuDirectSpin) : spin_);

  HCOMM_ASSIGN_OR_RETURN(std::vector<int> via, ChooseRoutes(cards, allowed, opened, unusable));

  // Connect, transport by transport in the order of their names, which
  // every rank shares (a rank that took them in another order could wait
  // in one while its peer waits in another).
  std::vector<size_t> order;
  for (size_t i = 0; i < allowed.size(); ++i) order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return allowed[a] < allowed[b]; });
  route_.assign(size_, nullptr);
  std::vector<std::unique_ptr<Provider>> connected(allowed.size());
  for (size_t i : order) {
    std::vector<int> peers;
    for (int r = 0; r < size_; ++r) {
      if (via[r] == static_cast<int>(i)) peers.push_back(r);
    }
    if (peers.empty() || opened[i] == nullptr) continue;
    opened[i]->SetCpusShared(oversubscribed_);
    absl::Status c = opened[i]->Connect(peers);
    if (!c.ok()) {
      if (job_->failed_elsewhere()) return job_->FailedElsewhere();
      return Annotate(c, where);
    }
    for (int r : peers) route_[r] = opened[i]->transport();
    connected[i] = std::move(opened[i]);
  }
  opened.clear();  // the rest reach nobody: closed now
  for (auto& p : connected) {
    if (p == nullptr) continue;
    transports_.push_back(p->transport());
    providers_.push_back(std::move(p));
  }
  transport_spins_ = transports_.size() == 1 && transports_[0]->SpinsBeforeSleep();
  if (transports_.size() == 2) {
    // Shared memory and TCP, say: a waiter blocks in one transport's wait
    // (epoll), which also watches the other's bell (PollAll). Whichever
    // has a bell goes first.
    int fd = transports_.front()->OpenWakeFd();
    if (fd < 0 && (fd = transports_.back()->OpenWakeFd()) >= 0) {
      std::swap(transports_.front(), transports_.back());
    }
    one_wait_ = fd >= 0 && transports_.back()->WatchFd(fd);
  }
  // Where ranks share CPUs a rendezvous waits for its peer to be scheduled
  // twice (to answer the RTS, then to take the data), which costs more than
  // whatever a transport saves below the protocol's limit (measured:
  // docs/performance.md, "Eager limit where ranks share CPUs").
  eager_bytes_.assign(size_, kEagerBytes);
  for (int r = 0; r < size_; ++r) {
    if (route_[r] != nullptr && !oversubscribed_) {
      eager_bytes_[r] = std::min(kEagerBytes, route_[r]->EagerBytes());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> Engine::ChooseRoutes(
    const std::vector<store::RankCard>& cards, const std::vector<std::string>& allowed,
    const std::vector<std::unique_ptr<Provider>>& opened,
    const std::vector<std::string>& unusable) {
  auto mine = [&](const std::string& name) -> int {
    auto at = std::find(allowed.begin(), allowed.end(), name);
    return at == allowed.end() ? -1 : static_cast<int>(at - allowed.begin());
  };
  // Whether transport i of ours reaches rank r, as rank r decides too.
  auto reaches = [&](int i, int r) {
    const store::TransportCard* theirs = CardOf(cards[r], allowed[i]);
    return opened[i] != nullptr && theirs != nullptr && theirs->unusable().empty() &&
           opened[i]->CanReach(r, cards[r].host(), theirs->card());
  };
  std::vector<int> via(size_, -1);
  std::vector<int> unreachable;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    // The lower rank's order decides, so that both ends choose alike.
    const store::RankCard& lower = cards[std::min(r, rank_)];
    for (const store::TransportCard& t : lower.transports()) {
      const int i = mine(t.name());
      if (i >= 0 && CardOf(cards[std::max(r, rank_)], t.name()) != nullptr && reaches(i, r)) {
        via[r] = i;
        break;
      }
    }
    if (via[r] < 0) unreachable.push_back(r);
  }
  if (!unreachable.empty()) {
    // Why, transport by transport, for the first rank out of reach.
    const int u = unreachable[0];
    std::vector<std::string> why;
    for (size_t i = 0; i < allowed.size(); ++i) {
      const store::TransportCard* theirs = CardOf(cards[u], allowed[i]);
      if (!unusable[i].empty()) {
        why.push_back(absl::StrCat(allowed[i], ": ", unusable[i]));
      } else if (theirs == nullptr) {
        why.push_back(absl::StrCat(allowed[i], " is not in rank ", u, "'s transports"));
      } else if (!theirs->unusable().empty()) {
        why.push_back(absl::StrCat("rank ", u, " cannot use ", allowed[i],
                                   " (its own log says why)"));
      } else {
        why.push_back(absl::StrCat(allowed[i], " does not reach rank ", u, " on host ",
                                   cards[u].host()));
      }
    }
    for (const store::TransportCard& t : cards[u].transports()) {
      if (mine(t.name()) < 0 && t.unusable().empty()) {
        why.push_back(absl::StrCat(t.name(), " is not in this rank's transports"));
      }
    }
    return NoDevice(absl::StrCat("rank ", rank_, " of ", size_, ": transports=",
                                 absl::StrJoin(allowed, ","), " cannot reach ranks ",
                                 absl::StrJoin(unreachable, ","), " (host ", cards[u].host(),
                                 ", we are on host ", host_id_, "): ", absl::StrJoin(why, "; ")));
  }
  // A transport this rank cannot use that would have come first for a rank
  // of its host: not an error (the job runs), but slower than it could,
  // said whatever HCOMM_DEBUG is, by the rank that cannot.
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (unusable[i].empty()) continue;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || cards[r].host() != host_id_ || via[r] <= static_cast<int>(i)) continue;
      fprintf(stderr, "hcomm WARN: rank %d: ranks of this host talk over %s: %s\n", rank_,
              allowed[via[r]].c_str(), unusable[i].c_str());
      break;
    }
  }
  return via;
}

const std::string& Engine::job_key() const {
  static const std::string kNone;
  return job_ != nullptr ? job_->key() : kNone;
}

bool Engine::check_collectives() const { return job_ != nullptr && job_->check_collectives(); }

std::string Engine::TransportName() const {
  if (transports_.empty()) return "self";
  std::string out;
  for (Transport* t : transports_) out += out.empty() ? t->name() : std::string("+") + t->name();
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
