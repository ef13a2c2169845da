// This rank's membership in a job: the rendezvous store (rank 0 serves it),
// the job's identity, and the waits of init, which end at once when another
// rank's init failed.
//
//   HCOMM_ASSIGN_OR_RETURN(std::unique_ptr<Job> job, Job::Join(opts, deadline));
//   HCOMM_RETURN_IF_ERROR(job->Publish(card));            // this rank's RankCard
//   HCOMM_ASSIGN_OR_RETURN(std::vector<store::RankCard> all, job->Cards(deadline));
//   ...
//   if (!init_ok.ok()) job->TellInitFailure(init_ok);     // the others fail at once
//
// Store keys a job uses: "hcomm/job_id" (rank 0's "<id> <world size> <key>
// <check 0|1>"), "hcomm/claim/<rank>", "hcomm/card/<rank>" (a RankCard),
// "hcomm/init_failed" (who failed and why), and whatever the transports put
// through PutFor/GetFor ("hcomm/t/<transport>/<key>/<rank>").
//
// THREAD SAFETY: Join, Publish, Cards, Wait, PutFor and GetFor are init's,
// from one thread; store() may then be used from any thread (StoreClient
// serves one call at a time).
#ifndef HCOMM_CORE_BOOTSTRAP_JOB_H_
#define HCOMM_CORE_BOOTSTRAP_JOB_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/net.h"
#include "core/bootstrap/store.pb.h"
#include "core/bootstrap/store_client.h"
#include "core/bootstrap/store_server.h"

namespace hcomm {

class Job {
 public:
  // How often a rank waiting for the others in init looks whether one of
  // them failed.
  static constexpr absl::Duration kInitLook = absl::Milliseconds(200);

  // Joins the job of opts (rank 0 first serves its store), by `deadline`:
  // the store's job id, key and world size, and a claim on this rank.
  static absl::StatusOr<std::unique_ptr<Job>> Join(const Options& opts, MonoTime deadline);
  // Leaves the store: rank 0 stops serving it.
  ~Job();

  int rank() const { return rank_; }
  int size() const { return size_; }
  uint64_t id() const { return id_; }
  // Names the job's segments among this host's jobs.
  const std::string& key() const { return key_; }
  // HCOMM_CHECK_COLLECTIVES=1 as rank 0 read it: the job follows rank 0.
  bool check_collectives() const { return check_collectives_; }
  const net::HostPort& store_address() const { return store_hp_; }
  const std::string& token() const { return token_; }
  StoreClient& store() { return *client_; }
  // "rank 3 of 8", for messages.
  const std::string& where() const { return where_; }

  // Publishes this rank's card, then waits (Wait) for every rank's and
  // returns them by rank.
  absl::Status Publish(const store::RankCard& card, MonoTime deadline);
  absl::StatusOr<std::vector<store::RankCard>> Cards(MonoTime deadline);

  // A transport's values, under keys of its own.
  absl::Status PutFor(const std::string& transport, const std::string& key,
                      const std::string& value, MonoTime deadline);
  absl::StatusOr<std::string> GetFor(const std::string& transport, int peer,
                                     const std::string& key, MonoTime deadline);

  // Waits for `keys` until `deadline`, in slices between which it asks
  // whether another rank's init failed: PEER_FAILURE naming it if so.
  // `ranks_joining`: the keys are ranks' cards (key r is rank r's): every
  // kWaitNotice the wait says on stderr which ranks it still waits for.
  absl::Status Wait(const std::vector<std::string>& keys, MonoTime deadline,
                    bool ranks_joining = false);
  // How often a wait for ranks to join says whom it waits for.
  static constexpr absl::Duration kWaitNotice = absl::Seconds(5);
  // PEER_FAILURE naming the rank whose init failed and why, or OK.
  absl::Status FailedElsewhere();
  bool failed_elsewhere() const { return failed_elsewhere_.load(); }
  // Says in the store that this rank's init failed with `s` (unless it
  // failed because another's did, or one already said so); rank 0 keeps
  // the store up a few looks longer for the others to read why.
  void TellInitFailure(const absl::Status& s);

  // Remembers that this process ended the job: a store that still serves
  // it is a stale one to a later Join of this process.
  void MarkEnded();

 private:
  Job(const Options& opts, net::HostPort store_hp);
  absl::Status Connect(MonoTime deadline);
  absl::Status Identify(MonoTime deadline);
  // A store call's error: where the store was lost (UNAVAILABLE) after this
  // rank had joined it, says that rank 0, which serves it, is gone (that
  // and the error, without where_).
  absl::Status StoreError(const absl::Status& s) const;

  const int rank_;
  const int size_;
  const std::string token_;
  const net::HostPort store_hp_;
  const std::string where_;
  const absl::Duration timeout_;  // init's
  const MonoTime began_ = MonoNow();
  uint64_t id_ = 0;
  std::string key_;
  bool check_collectives_ = false;
  // The job as rank 0 published it (read by the other ranks in Connect).
  std::string published_;
  std::unique_ptr<StoreServer> server_;  // rank 0
  std::unique_ptr<StoreClient> client_;
  std::atomic<bool> failed_elsewhere_{false};
};

}  // namespace hcomm

#endif  // HCOMM_CORE_BOOTSTRAP_JOB_H_
