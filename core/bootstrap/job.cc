#include "core/bootstrap/job.h"

#include <string.h>
#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/base/interrupt.h"
#include "core/base/status.h"

namespace hcomm {

namespace {

// Set by a rank whose init failed after it reached the store; its value
// says which rank and why.
constexpr char kInitFailedKey[] = "hcomm/init_failed";

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

// The jobs this process has ended: a store that still serves one of them is
// a stale one to a new Join.
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

std::string CardKey(int rank) { return absl::StrCat("hcomm/card/", rank); }

// Prints `line` on stderr the first time `said` is asked, in this process.
void WarnOnce(std::atomic<bool>* said, const std::string& line) {
  if (said->exchange(true)) return;
  fprintf(stderr, "%s\n", line.c_str());
}
std::atomic<bool> g_said_no_token{false};
std::atomic<bool> g_said_every_address{false};

}  // namespace

Job::Job(const Options& opts, net::HostPort store_hp)
    : rank_(opts.rank),
      size_(opts.world_size),
      token_(opts.job_token),
      store_hp_(std::move(store_hp)),
      where_(absl::StrCat("rank ", opts.rank, " of ", opts.world_size)),
      timeout_(absl::Milliseconds(opts.timeout_ms)) {}

Job::~Job() {
  client_.reset();
  server_.reset();
}

absl::StatusOr<std::unique_ptr<Job>> Job::Join(const Options& opts, MonoTime deadline) {
  HCOMM_ASSIGN_OR_RETURN(net::HostPort store_hp, net::ParseHostPort(opts.store_addr, "store_addr"));
  std::unique_ptr<Job> job(new Job(opts, std::move(store_hp)));
  absl::Status s = job->Connect(deadline);
  if (s.ok()) s = job->Identify(deadline);
  if (!s.ok()) {
    job->TellInitFailure(s);
    return s;
  }
  return job;
}

absl::Status Job::Connect(MonoTime deadline) {
  if (rank_ == 0) {
    auto server = StoreServer::Start(store_hp_.host, store_hp_.port, token_);
    std::string reach = store_hp_.ToString();  // where the store can be reached
    if (!server.ok()) {
      // store_addr may name this host by an address it cannot bind (behind
      // NAT, say): the store then listens on every address.
      auto any = StoreServer::Start("0.0.0.0", store_hp_.port, token_);
      if (!any.ok()) {
        return Annotate(server.status(),
                        absl::StrCat(where_, ": cannot serve the store at ", store_hp_.ToString(),
                                     " (nor on 0.0.0.0: ", any.status().message(), ")"));
      }
      // Said once per process, as every job of it would say the same.
      WarnOnce(&g_said_every_address,
               absl::StrCat("hcomm WARN: ", where_, ": cannot serve the store at ",
                            store_hp_.ToString(), " (", server.status().message(),
                            "), so it listens on every address of this host instead (0.0.0.0:",
                            store_hp_.port, "): whoever reaches this host on port ",
                            store_hp_.port, " reaches the store; give store_addr an address "
                            "this host can bind to keep it to that one"));
      reach = absl::StrCat("port ", store_hp_.port, " on any address of this host");
      server = std::move(any);
    }
    server_ = std::move(server).value();
    // A job without a token lets in whoever reaches its store (one rank
    // starts no store: Setup does not join a job then).
    if (token_.empty() && size_ > 1) {
      WarnOnce(&g_said_no_token,
               absl::StrCat("hcomm WARN: ", where_, ": no job token (HCOMM_JOB_TOKEN, or the "
                            "job_token key): any process that reaches ", reach,
                            " can join this job; hcomm_run sets one, or export the same "
                            "HCOMM_JOB_TOKEN to every rank (said once per process)"));
    }
  }
  for (;;) {
    auto client = StoreClient::Connect(store_hp_, token_, deadline);
    if (!client.ok() && CodeOf(client.status()) == ErrorCode::kUnavailable &&
        MonoNow() < deadline && !Interrupted()) {
      // Reset in the handshake: a store closing as we came (see below).
      absl::SleepFor(absl::Milliseconds(50));
      continue;
    }
    if (!client.ok()) {
      return Annotate(client.status(),
                      absl::StrCat(where_, ": cannot join the store at ", store_hp_.ToString()));
    }
    client_ = std::move(client).value();
    if (rank_ == 0) return absl::OkStatus();
    // The store may still be the one of a job this process has ended (a
    // destroy and a new init in quick succession: its rank 0 has not
    // closed it yet), or be closing under us: wait for the new one.
    absl::StatusOr<std::string> published = client_->Get("hcomm/job_id", deadline);
    absl::Status stale = published.status();
    if (published.ok()) {
      uint64_t id = 0;
      std::vector<std::string> f = absl::StrSplit(*published, ' ');
      if (!absl::SimpleAtoi(f[0], &id) || !JobEndedHere(id)) {
        published_ = *published;
        return absl::OkStatus();
      }
      stale = Unavailable(absl::StrCat("the store still serves job ", id, ", which this process "
                                       "has ended (an earlier init's), and no new job came up "
                                       "there in time"));
    }
    if (CodeOf(stale) != ErrorCode::kUnavailable || MonoNow() >= deadline || Interrupted()) {
      return Unavailable(absl::StrCat(where_, ": rank 0 did not publish the job at ",
                                      store_hp_.ToString(), ": ", stale.message()));
    }
    client_.reset();
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::Status Job::Identify(MonoTime deadline) {
  // Job identity, so that connections from another job are refused, and
  // the job's size: ranks started with different sizes, or two processes
  // given one rank, fail at once saying so (else the job waits for ranks
  // that never come and times out with a misleading message).
  const char* check_env = getenv("HCOMM_CHECK_COLLECTIVES");
  const bool check_here = check_env != nullptr && strcmp(check_env, "1") == 0;
  if (rank_ == 0) {
    HCOMM_ASSIGN_OR_RETURN(id_, RandomU64());
    HCOMM_ASSIGN_OR_RETURN(key_, NewJobKey(id_));
    check_collectives_ = check_here;
    HCOMM_RETURN_IF_ERROR(client_->Set(
        "hcomm/job_id", absl::StrCat(id_, " ", size_, " ", key_, " ", check_here ? 1 : 0),
        deadline));
  } else {
    const std::string& v = published_;
    std::vector<std::string> parts = absl::StrSplit(v, ' ');
    int job_size = 0;
    if (parts.size() != 4 || !absl::SimpleAtoi(parts[0], &id_) ||
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
    key_ = parts[2];
    if (key_.empty() || key_.size() > 40 ||
        key_.find_first_not_of("0123456789abcdef-") != std::string::npos) {
      return Internal(absl::StrCat("store holds a malformed job key: ", v));
    }
    if (job_size != size_) {
      return InvalidArgument(absl::StrCat(
          where_, ": world_size is ", size_, " here but rank 0 at ", store_hp_.ToString(),
          " runs a job of ", job_size, " ranks: every rank must be given the same world_size"));
    }
  }
  auto claims = client_->Add(absl::StrCat("hcomm/claim/", rank_), 1, deadline);
  if (!claims.ok()) return Annotate(StoreError(claims.status()), where_);
  if (*claims > 1) {
    return InvalidArgument(absl::StrCat(where_, ": another process joined the store at ",
                                        store_hp_.ToString(), " as rank ", rank_,
                                        " first: every rank must be given a rank of its own"));
  }
  return absl::OkStatus();
}

absl::Status Job::StoreError(const absl::Status& s) const {
  if (s.ok() || rank_ == 0 || CodeOf(s) != ErrorCode::kUnavailable) return s;
  // Its process serves the store: the store cannot go while it lives.
  return Unavailable(absl::StrCat("rank 0, which serves the store at ",
                                  store_hp_.ToString(), ", is gone (its process died or ended "
                                  "its init): ", s.message()));
}

absl::Status Job::Publish(const store::RankCard& card, MonoTime deadline) {
  return StoreError(client_->Set(CardKey(rank_), card.SerializeAsString(), deadline));
}

absl::StatusOr<std::vector<store::RankCard>> Job::Cards(MonoTime deadline) {
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(CardKey(r));
  absl::Status joined = Wait(keys, deadline, /*ranks_joining=*/true);
  if (!joined.ok() && failed_elsewhere_) return joined;
  if (!joined.ok()) {
    auto have = client_->Check(keys, MonoNow() + absl::Seconds(2));
    std::vector<int> missing;
    if (have.ok()) {
      for (int r = 0; r < size_; ++r) {
        if (!(*have)[r]) missing.push_back(r);
      }
    }
    if (!missing.empty()) {
      return Unavailable(absl::StrCat(
          where_, ": init ", TimedOutOrInterrupted(), " after ",
          Seconds(Interrupted() ? MonoNow() - began_ : timeout_),
          ": ", size_ - static_cast<int>(missing.size()), " of ", size_,
          " ranks joined the store at ", store_hp_.ToString(), "; missing: ",
          absl::StrJoin(missing, ", ")));
    }
    return Annotate(joined, where_);
  }
  std::vector<store::RankCard> cards(size_);
  for (int r = 0; r < size_; ++r) {
    auto v = client_->Get(keys[r], deadline);
    if (!v.ok()) return Annotate(StoreError(v.status()), where_);
    if (!cards[r].ParseFromString(*v)) {
      return Internal(absl::StrCat(where_, ": the store holds a malformed card for rank ", r));
    }
  }
  return cards;
}

absl::Status Job::PutFor(const std::string& transport, const std::string& key,
                         const std::string& value, MonoTime deadline) {
  return client_->Set(absl::StrCat("hcomm/t/", transport, "/", key, "/", rank_), value,
                      deadline);
}

absl::StatusOr<std::string> Job::GetFor(const std::string& transport, int peer,
                                        const std::string& key, MonoTime deadline) {
  const std::string k = absl::StrCat("hcomm/t/", transport, "/", key, "/", peer);
  absl::Status published = Wait({k}, deadline);
  if (!published.ok()) {
    if (failed_elsewhere_) return published;
    return Annotate(published, absl::StrCat(transport, "'s '", key, "' of rank ", peer));
  }
  absl::StatusOr<std::string> v = client_->Get(k, deadline);
  if (!v.ok()) return StoreError(v.status());
  return v;
}

absl::Status Job::FailedElsewhere() {
  const MonoTime soon = MonoNow() + absl::Seconds(1);
  auto have = client_->Check({kInitFailedKey}, soon);
  if (!have.ok() || !(*have)[0]) return absl::OkStatus();  // a lost store shows in the wait
  auto why = client_->Get(kInitFailedKey, soon);
  failed_elsewhere_ = true;
  return PeerFailure(absl::StrCat(
      where_, ": another rank's init failed: ",
      why.ok() ? *why : std::string("(the store went away before saying which)")));
}

absl::Status Job::Wait(const std::vector<std::string>& keys, MonoTime deadline,
                       bool ranks_joining) {
  const MonoTime start = MonoNow();
  MonoTime notice = start + kWaitNotice;
  for (;;) {
    const MonoTime slice = std::min(deadline, MonoNow() + kInitLook);
    absl::Status s = client_->Wait(keys, slice);
    if (s.ok() || CodeOf(s) != ErrorCode::kTimeout) return StoreError(s);
    if (slice < deadline && !Interrupted()) {
      HCOMM_RETURN_IF_ERROR(FailedElsewhere());
      if (ranks_joining && MonoNow() >= notice) {
        notice = MonoNow() + kWaitNotice;
        auto have = client_->Check(keys, MonoNow() + absl::Seconds(1));
        std::vector<int> missing;
        for (size_t r = 0; have.ok() && r < keys.size(); ++r) {
          if (!(*have)[r]) missing.push_back(static_cast<int>(r));
        }
        if (!missing.empty()) {
          fprintf(stderr,
                  "hcomm: rank %d: init has waited %s for rank%s %s to join the store at %s "
                  "(%d of %d joined; it gives up at timeout_ms, %s)\n",
                  rank_, Seconds(MonoNow() - start).c_str(), missing.size() == 1 ? "" : "s",
                  absl::StrJoin(missing, ", ").c_str(), store_hp_.ToString().c_str(),
                  size_ - static_cast<int>(missing.size()), size_,
                  Seconds(timeout_).c_str());
        }
      }
      continue;
    }
    // The store's message names the last slice's wait alone: say what the
    // whole wait was, as init's own failure (UNAVAILABLE, like a rank that
    // never joined).
    std::vector<std::string> missing;
    auto have = client_->Check(keys, MonoNow() + absl::Seconds(1));
    for (size_t i = 0; have.ok() && i < keys.size(); ++i) {
      if (!(*have)[i]) missing.push_back(absl::StrCat("'", keys[i], "'"));
    }
    return Unavailable(absl::StrCat("init ", TimedOutOrInterrupted(), " after ",
                                    Seconds(MonoNow() - start), ": the store never got ",
                                    missing.empty() ? "what it waited for"
                                                    : absl::StrJoin(missing, ", ")));
  }
}

void Job::TellInitFailure(const absl::Status& s) {
  if (client_ != nullptr && !failed_elsewhere_) {
    const MonoTime soon = MonoNow() + absl::Seconds(1);
    auto have = client_->Check({kInitFailedKey}, soon);
    // Unless the store is gone, or the first word is said.
    if (have.ok() && !(*have)[0]) {
      client_->Set(kInitFailedKey, std::string(s.message()), soon).IgnoreError();
    }
  }
  // The store goes with rank 0: kept a few looks longer, it lets the ranks
  // still waiting read which rank failed and why.
  if (server_ != nullptr) absl::SleepFor(3 * kInitLook);
}

void Job::MarkEnded() {
  if (id_ == 0) return;
  EndedJobs& e = Ended();
  absl::MutexLock l(&e.mu);
  e.ids.insert(id_);
}

}  // namespace hcomm
