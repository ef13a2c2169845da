// A communicator: this process's membership in a job, its connections to the
// other ranks, and the point-to-point engine over them.
//
//   HCOMM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> comm,
//                          Engine::Init(options));
//   HCOMM_ASSIGN_OR_RETURN(auto req, comm->Isend(buf, bytes, 4, /*peer=*/1, /*tag=*/7));
//   HCOMM_RETURN_IF_ERROR(comm->Wait(req.get(), comm->Deadline()));
//   comm->Destroy();
//
// Protocol (frames on a transport connection, see transports/transport.h):
// messages up to kEagerBytes (or the transport's lower EagerBytes) travel
// with their header (EAGER) and land in
// the matched receive buffer, or in a staging buffer if no receive is posted
// yet. Larger ones send a request-to-send (RTS); the receiver answers with a
// clear-to-send (CTS) once a receive matches, or a REJECT if the receive is
// too small; only then does the payload (DATA) move, straight from the
// sender's buffer into the receiver's. Staged eager data is bounded by
// flow control (core/p2p/flow.h): a sender whose receiver's window is spent
// sends by rendezvous until the receiver has taken what it holds.
//
// Progress: a thread that waits drives the transport itself (spinning
// briefly, then sleeping in the kernel until data arrives), so a message
// costs no thread handoff. A background thread keeps things moving while no
// caller waits (answering RTS, noticing dead peers).
//
// THREAD SAFETY: all methods may be called from several threads, except
// Destroy (no other call may be running or follow).
#ifndef HCOMM_CORE_P2P_ENGINE_H_
#define HCOMM_CORE_P2P_ENGINE_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/base/status.h"
#include "core/bootstrap/job.h"
#include "core/p2p/flight_recorder.h"
#include "core/p2p/flow.h"
#include "core/p2p/matcher.h"
#include "core/p2p/payload_pool.h"
#include "core/p2p/request.h"
#include "core/topology/placement.h"
#include "transports/provider.h"
#include "transports/transport.h"

namespace hcomm {

// Payload URL of a collective clash (see Engine::Irecv and Engine::Poison).
extern const char kClashUrl[];

class Engine : public FrameSink {
 public:
  // What the collective context of a communicator is doing, for hang
  // reports. One writer (the collective being served); readers retry while
  // `version` is odd or changes under them.
  struct Activity {
    std::atomic<uint64_t> version{0};
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> fingerprint{0};
    std::atomic<bool> in_progress{false};
    // Under activity_mu_: world ranks a collective in a shared segment
    // waits for (NoteSegmentWait), and for which sequence number.
    std::vector<int> segment_waits;
    uint64_t segment_seq = 0;
    size_t segment_bytes = 0;
  };

  // The protocol's limit: messages up to this size may go eagerly (each
  // transport may ask for less, Transport::EagerBytes); larger ones go by
  // rendezvous, and no eager frame above it is accepted.
  static constexpr size_t kEagerBytes = 64 * 1024;

  // Joins the job described by `opts` (see core/base/config.h): rank 0 serves the
  // rendezvous store, every rank connects to every other. Blocks until all
  // ranks joined or opts.timeout_ms passed.
  static absl::StatusOr<std::unique_ptr<Engine>> Init(const Options& opts);

  ~Engine() override;

  int rank() const { return rank_; }
  int size() const { return size_; }
  absl::Duration timeout() const {
    return absl::Milliseconds(timeout_ms_.load(std::memory_order_relaxed));
  }
  MonoTime Deadline() const { return MonoNow() + timeout(); }
  // The transport in use towards other ranks ("tcp"), or "self" alone.
  std::string TransportName() const;

  // The transport that reaches world rank `peer` ("shm", "tcp", "self").
  const char* TransportTo(int peer) const {
    if (peer == rank_ || route_.empty() || route_[peer] == nullptr) return "self";
    return route_[peer]->name();
  }

  // Identifies this job among others on the host (names of its segments);
  // empty for a job of one rank.
  const std::string& job_key() const;
  // More ranks on this host than CPUs they may use (waits then yield).
  bool oversubscribed() const { return oversubscribed_; }
  // At least as many ranks on this host as CPUs they may use (CpusFilled).
  bool cpus_filled() const { return cpus_filled_; }
  // Where a rank runs, as it published at init: every rank holds the same
  // Placement of every other.
  const Placement& placement(int r) const {
    static const Placement kUnknown;
    return r >= 0 && r < static_cast<int>(placement_.size()) ? placement_[r] : kUnknown;
  }
  // HCOMM_CHECK_COLLECTIVES=1 as rank 0 read it at init: the whole job
  // follows rank 0, so that its ranks agree on whether collectives are
  // checked first (Communicator::CheckCall).
  bool check_collectives() const;
  // The status collectives under (ctx, tag) fail with after Poison, or
  // after a member's failure broke ctx (WatchMembers); OK if neither.
  absl::Status PoisonedStatus(uint32_t ctx, int tag) {
    if (!any_poisoned_.load(std::memory_order_acquire)) return absl::OkStatus();
    absl::MutexLock l(&mu_);
    return RefusedLocked(ctx, tag);
  }
  // Returns `s`, noting that the application has been told of a peer's
  // failure where it is PEER_FAILURE: Destroy then no longer reports ranks
  // that failed (LostPeersStatus), which the application knows of.
  // (`ctx`: where the operation was; the hang reports' own, kHangCtx, tell
  // the application nothing.)
  absl::Status Told(absl::Status s, uint32_t ctx = 0) {
    if (ctx != kHangCtx && CodeOf(s) == ErrorCode::kPeerFailure) {
      failure_told_.store(true, std::memory_order_relaxed);
    }
    return s;
  }
  // OK while world rank `peer` is up and the engine usable; else why not.
  // (A look: it does not count as telling the caller of a failure, see
  // Told.)
  absl::Status PeerHealth(int peer) {
    absl::MutexLock l(&mu_);
    if (aborted_ || destroyed_ || peer == kAnySource || peer == rank_) return CheckUsable(peer);
    return peers_[peer]->state == PeerState::kUp ? absl::OkStatus() : peers_[peer]->failure;
  }

  // Changes a live setting (only timeout_ms).
  absl::Status SetOption(absl::string_view key, absl::string_view value);

  // Starts a send / receive of `bytes` bytes (`elem_size` only scales the
  // counts reported back). Fails at once (no request) for a peer known to be
  // dead or an aborted communicator.
  // `ctx` is the matching context: messages only match receives of the
  // same context (a communicator has one for point-to-point and one for
  // collectives). Ranks are world ranks.
  // `fingerprint` (collectives only) travels with the message; a receive
  // with a different non-zero fingerprint fails with Mismatch carrying a
  // "hcomm.dev/clash" payload: "<their fingerprint> <their rank> <ours>".
  absl::StatusOr<std::shared_ptr<Request>> Isend(uint32_t ctx, const void* buf, size_t bytes,
                                                 size_t elem_size, int peer, int tag,
                                                 uint64_t fingerprint = 0);
  absl::StatusOr<std::shared_ptr<Request>> Irecv(uint32_t ctx, void* buf, size_t bytes,
                                                 size_t elem_size, int peer, int tag,
                                                 uint64_t fingerprint = 0);

  // A small message that can leave at once, with nothing to track: written
  // straight to the transport without a request (the buffer is free again
  // on return). False: nothing was sent; use Isend, which reports any error.
  bool SendNow(uint32_t ctx, const void* buf, size_t bytes, int peer, int tag,
               uint64_t fingerprint = 0);
  // A collective's blocking receive of exactly `bytes` bytes carrying
  // `fingerprint`, taken straight off the connection to `peer` when it is
  // there or comes within the spin time (see RecvDirect). False: nothing
  // was received; use Irecv, which also reports any error.
  bool RecvNow(uint32_t ctx, void* buf, size_t bytes, int peer, int tag, uint64_t fingerprint) {
    return RecvDirect(ctx, buf, bytes, peer, tag, fingerprint, /*exact=*/true);
  }

  // Takes a small message from `peer` under (ctx, tag) that has already
  // arrived whole and no receive has claimed, into buf[0, bytes) (exactly
  // that size), without waiting or posting anything. False: none there (a
  // message of another size stays queued).
  bool TakeArrived(uint32_t ctx, void* buf, size_t bytes, int peer, int tag);

  // After a fingerprint clash in (ctx, tag): fails every pending and later
  // operation there, here and at `members` (world ranks), with Mismatch and a
  // "hcomm.dev/clash" payload "<culprit fp> <culprit rank> <reporter fp>
  // <reporter rank>".
  void Poison(uint32_t ctx, int tag, const std::vector<int>& members, uint64_t culprit_fp,
              int culprit, uint64_t reporter_fp);

  // Blocking forms. On timeout the operation is withdrawn where the protocol
  // allows it, and the message names what was pending.
  // `reporter`, if given, is asked for a hang report when the operation is
  // still pending with the last part of its timeout left (see
  // ReportReserve); the operation keeps its whole timeout, and a timeout's
  // message ends with the report.
  using HangReporter = absl::FunctionRef<std::string(MonoTime deadline)>;
  // `fingerprint`: as Isend's. `arrival` (if not null) gets what the
  // matched message carried where the receive went through a request (its
  // fingerprint is 0 otherwise: a plain message).
  struct Arrival {
    uint64_t fingerprint = 0;
    size_t bytes = 0;
    int source = -1;
    int tag = -1;
  };
  absl::Status Send(uint32_t ctx, const void* buf, size_t bytes, size_t elem_size, int peer,
                    int tag, absl::Duration timeout, const HangReporter* reporter = nullptr,
                    uint64_t fingerprint = 0);
  absl::Status Recv(uint32_t ctx, void* buf, size_t bytes, size_t elem_size, int peer, int tag,
                    absl::Duration timeout, std::shared_ptr<Request>* out = nullptr,
                    const HangReporter* reporter = nullptr, Arrival* arrival = nullptr);
  // Waits for `r` until `end`; with a reporter, first until the reserve
  // before `end`, then collects the report into *report and waits on.
  absl::Status WaitWithReport(Request* r, MonoTime end, const HangReporter* reporter,
                              std::string* report);
  // Of a call's timeout, the part kept for collecting a hang report.
  static absl::Duration ReportReserve(absl::Duration timeout) {
    return std::min(absl::Seconds(1), std::max(absl::Milliseconds(20), timeout / 5));
  }

  // Nothing has been aborted, closed or poisoned: Usable() and every
  // PoisonedStatus() are OK. (Three loads, for the collectives' hot path.)
  bool Calm() const {
    return !aborted_flag_.load(std::memory_order_acquire) &&
           !closing_.load(std::memory_order_acquire) &&
           !any_poisoned_.load(std::memory_order_acquire);
  }
  // Aborted if Abort was called or the engine was destroyed, else OK.
  absl::Status Usable() {
    if (!aborted_flag_.load(std::memory_order_acquire) &&
        !closing_.load(std::memory_order_acquire)) {
      return absl::OkStatus();
    }
    absl::MutexLock l(&mu_);
    return CheckUsable(kAnySource);
  }

  // Completes a request that the engine does not drive (a nonblocking
  // collective run elsewhere), waking its waiters.
  void CompleteExternal(const std::shared_ptr<Request>& r, absl::Status s);

  // Context ids: every communicator takes two (point-to-point and
  // collectives). NextFreeContext() is this process's lowest unused id; a
  // new communicator's members agree on the maximum of theirs and then
  // ReserveContexts(agreed, 2).
  uint32_t NextFreeContext();
  void ReserveContexts(uint32_t first, uint32_t count);

  // Waits for `r` until `deadline`. Returns the operation's status, or
  // Timeout (naming what is pending) with the request still pending.
  // `since`: when the caller began waiting for what `r` belongs to (a
  // collective), if before `r` was posted: a timeout says how long since.
  absl::Status Wait(Request* r, MonoTime deadline,
                    MonoTime since = MonoTime::InfiniteFuture());
  // Makes progress once without blocking; true if `r` is done.
  bool Test(Request* r);
  // The caller drops its handle: a receive that nothing has reached yet is
  // withdrawn; anything else completes in the background.
  void Release(const std::shared_ptr<Request>& r);
  // Withdraws a pending request on an error path and completes it with
  // `why`: a receive nothing has reached is dropped; a send is withdrawn if
  // none of it has left, else the transport keeps a copy of the rest; a
  // receive already being written into is left to finish. Returns the
  // request's final status if it completed anyway.
  absl::Status Withdraw(const std::shared_ptr<Request>& r, const absl::Status& why);

  // Fails every pending and later operation with Aborted and tears the
  // connections down. Any thread, any time.
  void Abort();
  // Aborts one communicator made by Split/CreateGroup, of contexts
  // `p2p_ctx` and `coll_ctx` and world ranks `members`: fails every pending
  // and later operation there with Aborted (a receive whose message is
  // already landing completes with it; a send partly on its way is
  // finished from a copy), drops what arrives there from now on, and tells
  // the members: there, collectives of the communicator fail with
  // PEER_FAILURE (pending and later), and so do point-to-point operations
  // with this rank. The connections, and every other communicator, stay.
  // Any thread, any time; a second call does nothing. `why` (an Aborted
  // status) replaces "the communicator was aborted" where given.
  void AbortCommunicator(uint32_t p2p_ctx, uint32_t coll_ctx, const std::vector<int>& members,
                         absl::Status why = absl::OkStatus());

  // Communicators over this engine: each joins once made and leaves when
  // destroyed; LeaveCommunicator is true for the last to leave, which then
  // calls Destroy.
  void JoinCommunicator() { communicators_.fetch_add(1, std::memory_order_relaxed); }
  bool LeaveCommunicator() { return communicators_.fetch_sub(1, std::memory_order_acq_rel) == 1; }

  // `ctx` is the collective context of a communicator of world ranks
  // `members`: once one of them fails (a lost connection, not a goodbye),
  // what is pending there fails at once with PEER_FAILURE, and so does
  // every later operation there, since no collective can complete without
  // it (else a rank waiting on a live member that gave up would wait out
  // its timeout).
  void WatchMembers(uint32_t ctx, const std::vector<int>& members);

  // Ends contexts [first, first + count), those of a communicator made by
  // Split/CreateGroup (Communicator::Destroy): waits until `deadline` for
  // this rank's sends there to be delivered and for messages landing in
  // receives there, then fails what is still pending there with Aborted.
  // What arrived there unreceived is dropped (a rendezvous sender is
  // answered as by a receive too small: its send completes), and so is
  // whatever arrives there later: nothing of the communicator stays.
  void CloseContexts(uint32_t first, uint32_t count, MonoTime deadline);

  // Orderly shutdown: waits (up to timeout) for this rank's sends to be
  // delivered, says goodbye to every peer, fails what is still pending with
  // Aborted. Called by the destructor if not called before.
  // Returns PEER_FAILURE where a rank this one sent messages to failed
  // before confirming it had read them all (its goodbye), naming it;
  // TIMEOUT where sends were still not delivered at the deadline, naming
  // them; else OK.
  absl::Status Destroy();

  // Tests only: sends world rank `peer` a raw protocol frame (core/p2p/
  // protocol.h) with a copy of payload[0, len), as a peer that does not
  // follow the protocol would, and waits until the transport has written it
  // or `deadline` passed. Returns the send's status (Timeout at the
  // deadline). Bypasses every check of the engine's own.
  absl::Status SendRawFrameForTesting(int peer, const FrameMeta& meta, const void* payload,
                                      size_t len, MonoTime deadline);
  // Tests only: what world rank `peer`'s unreceived messages hold here now
  // (FlowControl::held), and this rank's window.
  int64_t HeldFromForTesting(int peer) {
    absl::MutexLock l(&mu_);
    return flow_ ? flow_->held(peer) : 0;
  }
  int64_t FlowWindowForTesting() const { return flow_ ? flow_->window() : 0; }

  // --- Hang reports -------------------------------------------------------
  // A communicator tells the engine which collective it is in, so that a
  // hang report can say who never entered it.
  // (Lock-free: a communicator notes through the Activity of its
  // collective context, which stays valid as long as the engine.)
  struct Activity;
  Activity* ActivityFor(uint32_t ctx);
  // (Inline: every collective calls it twice, on its critical path.)
  static void NoteCollective(Activity* a, uint64_t seq, uint64_t fingerprint, bool in_progress) {
    const uint64_t v = a->version.load(std::memory_order_relaxed);
    a->version.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    a->seq.store(seq, std::memory_order_relaxed);
    a->fingerprint.store(fingerprint, std::memory_order_relaxed);
    a->in_progress.store(in_progress, std::memory_order_relaxed);
    a->version.store(v + 2, std::memory_order_release);
  }
  // The collective in progress in `ctx` waits in a shared-memory segment
  // for world ranks `peers` (`bytes` per rank); cleared when it ends.
  void NoteSegmentWait(uint32_t ctx, const std::vector<int>& peers, size_t bytes);
  // This rank's pending work, one item per line:
  //   C <ctx> <seq> <fingerprint> <in progress 0|1>
  //   R <ctx> <world peer|-1> <tag|-1> <capacity>     posted receive
  //   X <ctx> <world source> <tag> <bytes>            receive being written
  //   S <ctx> <world peer> <tag> <bytes> <w|q>        send: w = no matching
  //                                                   receive yet, q = queued
  //   M <ctx> <world peer> <seq> <bytes>              collective waits for the
  //                                                   peer in a shared segment
  std::string PendingState();
  // Asks every rank (through the store, beside the data path) for its
  // PendingState and collects the answers until `deadline`. Ranks that did
  // not answer are missing from the map. Empty without a store.
  // Goes through the store while it serves; once rank 0 (which serves it)
  // is gone or the store fails, over the connections instead: each rank's
  // responder keeps a receive posted in kHangCtx and answers there.
  std::map<int, std::string> CollectHangReport(MonoTime deadline);
  // The context of the hang reports' messages (no communicator's: theirs
  // count up from 0), and the longest answer (an eager message).
  static constexpr uint32_t kHangCtx = 0xFFFFFFF0u;
  static constexpr size_t kHangAnswerBytes = 60 * 1024;

  // This rank's last operations (flight_recorder key; core/p2p/
  // flight_recorder.h), shared by every communicator over this engine, and
  // where they are dumped (flight_recorder_file, "%r" not yet replaced;
  // empty: never). Fixed after Init.
  FlightRecorder& flight() { return *flight_; }
  const std::string& flight_file() const { return flight_file_; }

  // FrameSink (called by the transport on a polling thread).
  void* OnFrame(int peer, const FrameMeta& meta, uint64_t payload_len) override;
  void OnPayload(int peer, const FrameMeta& meta, uint64_t payload_len) override;
  // An eager message that arrived whole: matched and copied under one lock.
  void OnWholeFrame(int peer, const FrameMeta& meta, const void* payload,
                    uint64_t payload_len) override;
  void OnConnectionLost(int peer, const absl::Status& status) override;

 private:
  enum class PeerState { kUp, kClosed, kFailed };
  struct PeerInfo {
    PeerState state = PeerState::kUp;
    absl::Status failure;       // why, when not kUp
    bool said_goodbye = false;  // we sent ours
    bool got_goodbye = false;   // theirs arrived
    // Why this rank closed the connection itself (a receive's deadline
    // passed while a message was landing), if it did.
    std::string cut;
    std::atomic<int64_t> last_rx_ns{0};  // CoarseNs() of the last frame
    // Cleared (before anything else changes) once the peer is no longer up
    // or we said goodbye: eager sends then take the full path.
    std::atomic<bool> fast_send{true};
    // This rank has sent it a message: if it fails before it confirmed
    // reading everything (a goodbye), Destroy says so.
    std::atomic<bool> sent{false};
    // The eager frame whose payload is arriving now (touched only by the
    // thread holding the transport's receive lock for this peer, under mu_).
    std::shared_ptr<Request> rx_req;
    Unexpected* rx_unexpected = nullptr;
    bool rx_truncated = false;
    // Receives whose rendezvous data is arriving from this peer (same
    // rules). A large frame may arrive in pieces with other frames between
    // them (transports/tcp/tcp_transport.h), so each DATA frame is found
    // again by its receive id when it ends; the transport bounds how many
    // are open at once.
    std::vector<std::shared_ptr<Request>> rx_data;
    // Whether `r`'s payload is arriving from this peer now.
    bool Landing(const Request* r) const {
      if (rx_req.get() == r) return true;
      for (const auto& d : rx_data) {
        if (d.get() == r) return true;
      }
      return false;
    }
  };
  // A frame to send once mu_ is released.
  struct Outgoing {
    int peer;
    FrameMeta meta;
    const void* payload = nullptr;
    size_t len = 0;
    std::shared_ptr<Request> complete_on_sent;  // completes with the send's status
  };

  Engine(const Options& opts);
  // Init's work (setup.cc): joins the job, opens the transports the
  // `transports` key allows (from the registry), publishes this rank's
  // card, chooses a transport for every peer and connects.
  absl::Status Bootstrap(const Options& opts);
  // The route to every peer from everyone's cards: for each pair, the
  // first transport in the lower rank's order that both may use and that
  // reaches; NoDevice, saying why for each transport, where none does.
  // `opened`: this rank's transports, in its order (null: unusable here,
  // and why in `unusable`).
  absl::StatusOr<std::vector<int>> ChooseRoutes(
      const std::vector<store::RankCard>& cards, const std::vector<std::string>& allowed,
      const std::vector<std::unique_ptr<Provider>>& opened,
      const std::vector<std::string>& unusable);
  void StartProgressThread();
  void ProgressLoop();
  // One round of progress; blocks in the kernel for up to `block`.
  void PollOnce(absl::Duration block);
  // `quiet`: for the background thread, sleep without spinning first.
  int PollAll(absl::Duration block, bool quiet = false);
  size_t PendingSendsAll() const;

  void Complete(const std::shared_ptr<Request>& r, absl::Status s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailPeerLocked(int peer, const absl::Status& why, bool any_source,
                      bool keep_queued_sends = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Delivers an unexpected arrival to a matching receive.
  Matcher& MatcherFor(uint32_t ctx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets a context's matching state (CloseContexts), and the cache of
  // the last one used if it was that.
  void EraseMatcherLocked(absl::flat_hash_map<uint32_t, std::unique_ptr<Matcher>>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ABORTED: "the communicator was destroyed", for what it leaves pending.
  absl::Status Destroyed() const;
  // Fails with `why` every request of this rank still pending (Abort,
  // Destroy): posted receives, sends awaiting a clear-to-send, data or
  // their last bytes, receives and senders of unexpected messages, and
  // receives whose message is arriving.
  void FailAllPendingLocked(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeliverUnexpected(Matcher& matcher, Matcher::UnexpectedList::iterator it, const std::shared_ptr<Request>& r,
                         std::vector<Outgoing>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MatchRts(int peer, int tag, uint64_t bytes, uint64_t send_id, uint64_t fingerprint,
                const std::shared_ptr<Request>& r, std::vector<Outgoing>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SelfSend(const std::shared_ptr<Request>& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A blocking receive from one peer that nothing else competes for: spins
  // briefly on that peer's connection and copies a matching eager frame
  // straight into `buf`, with no request. False: nothing was received (or
  // it cannot be done this way); use the full path.
  // `fingerprint`: what the message must carry (a collective's); `exact`:
  // only a message of exactly `bytes` bytes.
  bool RecvDirect(uint32_t ctx, void* buf, size_t bytes, int peer, int tag,
                  uint64_t fingerprint = 0, bool exact = false);
  // Fails receive `r`, too small for the message of `bytes` bytes from
  // world rank `source` under `tag`, with Mismatch; nothing was written, and
  // its info names the sender and the tag with a count of 0.
  void FailTruncated(const std::shared_ptr<Request>& r, int source, int tag, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True (and `r` completed with Mismatch) if `r` expects another
  // collective than the arriving message's fingerprint says.
  bool Clash(const std::shared_ptr<Request>& r, uint64_t fingerprint, int source)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An unmatched arrival of another collective under a tag that a posted
  // receive waits on: fail that receive with a clash.
  void CheckArrivalAgainstPosted(Matcher& matcher, int source, int tag, uint64_t fingerprint)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues an eager arrival of `payload_len` bytes (its buffer allocated,
  // not yet filled) after checking it against posted receives of another
  // collective.
  Unexpected* QueueEager(Matcher& matcher, int peer, int tag, uint64_t fingerprint,
                         uint64_t payload_len) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OnWholeFrame's work: an eager message of `payload_len` bytes that
  // arrived whole goes to its receive or the unexpected queue.
  void WholeEagerLocked(int peer, const FrameMeta& fm, const void* payload, uint64_t payload_len)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For Destroy: this rank's sends not yet delivered, described; and
  // PEER_FAILURE naming the failed ranks it sent messages to, or OK.
  std::string UndeliveredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LostPeersStatus();
  // Marks that this rank sent world rank `peer` a message (PeerInfo::sent).
  void NoteSentTo(int peer) {
    std::atomic<bool>& sent = peers_[peer]->sent;
    if (!sent.load(std::memory_order_relaxed)) sent.store(true, std::memory_order_relaxed);
  }
  // Sends the CREDIT frames that are due (FlowControl::TakeDue). Without mu_.
  void SendDueCredits();
  // `peer` sent more than this rank's flow window allows (`what`: the
  // frames): it does not follow the protocol; its connection is unusable.
  void FailFloodLocked(int peer, const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An eager frame above kEagerBytes from `peer`: its connection is unusable.
  void FailOversizedEager(int peer, uint64_t payload_len) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether rendezvous request `r` (a send awaiting its CTS, or a receive
  // awaiting its DATA) belongs to world rank `peer` and context `ctx`, the
  // connection and context a CTS/REJECT or DATA/DATA_ABORT naming its id
  // came on. If not, the frame is forged or corrupt: fails `peer` as for a
  // corrupt frame (PEER_FAILURE naming it and the frame `kind`) and returns
  // false; `r` is left alone.
  bool FromOwnerLocked(int peer, uint8_t kind, uint32_t ctx, const Request& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PoisonLocked(uint32_t ctx, int tag, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails with `why` (`describe`: annotated with each request) the receives
  // posted in `ctx` and this rank's sends there waiting for a receive that
  // `pick` selects.
  void FailWaitingLocked(uint32_t ctx, absl::FunctionRef<bool(const Request&)> pick,
                         const absl::Status& why, bool describe)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // World rank `peer` failed: breaks every watched context it belongs to.
  void BreakCollectivesOfLocked(int peer, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails what is pending in `ctx`, and everything posted there later, with
  // `broken` (FailWaitingLocked: a send already moving is left to finish).
  void BreakContextLocked(uint32_t ctx, const absl::Status& broken)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // World rank `peer` aborted the communicator of contexts `p2p_ctx` and
  // `coll_ctx` (a kAbandon frame): breaks its collectives, and fails its
  // point-to-point operations with `peer`, pending and later.
  void PeerAbandonedLocked(int peer, uint32_t p2p_ctx, uint32_t coll_ctx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why an operation with world rank `peer` in `ctx` fails at once because
  // the peer aborted the communicator there, or OK.
  absl::Status AbandonedLocked(uint32_t ctx, int peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (abandoned_.empty()) return absl::OkStatus();
    auto it = abandoned_.find({ctx, peer});
    return it == abandoned_.end() ? absl::OkStatus() : it->second;
  }
  // Contexts [first, first + count) end (destroyed or aborted) with `why`:
  // fails what is pending there, except receives whose message is landing,
  // drops what arrived there unreceived (answering rendezvous senders as
  // by a receive too small), and collects into `sends` this rank's sends
  // there that are queued or moving, for the caller to Withdraw once mu_ is
  // released.
  void EndContextsLocked(uint32_t first, uint32_t count, const absl::Status& why,
                         std::vector<std::shared_ptr<Request>>* sends,
                         std::vector<Outgoing>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why operations in `ctx` fail at once (poisoned for `tag`, or broken),
  // or OK.
  absl::Status RefusedLocked(uint32_t ctx, int tag) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ClosedLocked(uint32_t ctx) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !closed_contexts_.empty() && closed_contexts_.contains(ctx);
  }
  // Whether anything of contexts [first, first + count) is in flight: a
  // send of ours not yet delivered, or a message landing in a receive or
  // in the unexpected queue there.
  bool InFlightLocked(uint32_t first, uint32_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A frame from `peer` whose end (OnPayload) concerns the matching state of
  // a closed context: drops it (answering an RTS with a reject) and returns
  // true; false for frames of other kinds.
  bool DropClosedLocked(int peer, const FrameMeta& fm, std::vector<Outgoing>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Flush(std::vector<Outgoing>* out);
  absl::Status CheckUsable(int peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string Describe(const Request& r) const;
  std::string PendingReason(const Request& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status TimeoutStatus(const Request& r, absl::Duration waited)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int rank_;
  const int size_;
  const std::string host_id_;
  std::atomic<int64_t> timeout_ms_;
  absl::Duration spin_;
  bool spin_set_ = false;  // by HCOMM_SPIN_US
  // How long a waiter looks (yielding between looks) before it sleeps when
  // ranks outnumber the CPUs.
  static constexpr absl::Duration kSharedCpuSpin = absl::Milliseconds(2);
  // How long a direct receive (RecvDirect) looks at its peer's connection,
  // yielding between looks, when ranks outnumber the CPUs; the full path's
  // wait follows. It looks at no other connection, so it is kept short
  // (measured: docs/performance.md, "Direct receives where ranks share CPUs").
  static constexpr absl::Duration kSharedCpuDirectSpin = absl::Microseconds(50);
  // A direct receive's look, in nanoseconds (set in Bootstrap, before any
  // route exists for RecvDirect to use): spin_, or kSharedCpuDirectSpin
  // where that is shorter and ranks share CPUs.
  int64_t direct_spin_ns_ = 0;
  // Fixed after Bootstrap: more ranks on this host than CPUs we may run on
  // (a waiter then yields its CPU instead of spinning on it), and whether
  // the only transport spins in Poll by itself (shm), so Wait need not.
  bool oversubscribed_ = false;
  bool cpus_filled_ = false;
  std::vector<Placement> placement_;  // by world rank
  bool transport_spins_ = false;
  // Two transports (shm and TCP) that block in one wait (PollAll): the
  // first one's wake fd is watched by the last one's Poll.
  bool one_wait_ = false;

  // The job and its store (null for a job of one rank), and the services
  // it lends the transports' setup (the store, the token, init's deadline;
  // refused once init is over).
  std::unique_ptr<Job> job_;
  std::unique_ptr<ProviderSetup> setup_;
  // The transports in use (from the registry, each through its table), the
  // Transport of each, and the one that reaches each peer (null for
  // ourselves). Fixed after Bootstrap; declared in the order they go.
  std::vector<std::unique_ptr<Provider>> providers_;
  std::vector<Transport*> transports_;
  std::vector<Transport*> route_;
  // By peer: the largest message sent to it eagerly (its transport's
  // EagerBytes, at most kEagerBytes).
  std::vector<size_t> eager_bytes_;

  mutable absl::Mutex mu_;
  CondVar cv_;  // signalled when a request completes and sleepers_ > 0
  int sleepers_ ABSL_GUARDED_BY(mu_) = 0;
  // Eager payloads that arrived before their receive are staged here;
  // declared before contexts_, whose queues hold its buffers.
  PayloadPool payloads_;
  // Flow control of eager messages (set in Bootstrap, before any
  // connection; declared before contexts_, whose entries release into it).
  std::unique_ptr<FlowControl> flow_;
  // By peer: this rank's rendezvous sends whose RTS may still wait at the
  // peer (counted until the send completes; Request::rts_counted).
  std::vector<int64_t> rts_out_ ABSL_GUARDED_BY(mu_);
  // An operation has returned PEER_FAILURE to the application (Told).
  std::atomic<bool> failure_told_{false};
  // Matching state per context, created on first use (a peer may send on a
  // context before this rank has set up the communicator it belongs to).
  absl::flat_hash_map<uint32_t, std::unique_ptr<Matcher>> contexts_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<PeerInfo>> peers_;  // fixed size; fields under mu_
  absl::flat_hash_map<uint64_t, std::shared_ptr<Request>> awaiting_cts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<Request>> awaiting_data_ ABSL_GUARDED_BY(mu_);
  // Sends whose payload is queued on the transport (eager or DATA).
  absl::flat_hash_map<uint64_t, std::shared_ptr<Request>> sending_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool destroyed_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> aborted_flag_{false};
  std::atomic<bool> closing_{false};        // Destroy has begun
  std::atomic<int> communicators_{0};       // see JoinCommunicator
  // poisoned_, broken_ or abandoned_ is not empty (operations check them).
  std::atomic<bool> any_poisoned_{false};
  // The matcher of the context used last (only CloseContexts removes one).
  uint32_t last_ctx_ ABSL_GUARDED_BY(mu_) = UINT32_MAX;
  Matcher* last_matcher_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::atomic<uint64_t> next_id_{1};
  uint32_t next_free_ctx_ ABSL_GUARDED_BY(mu_) = 2;  // the world uses 0 and 1
  // Members of collective contexts (WatchMembers), and those contexts
  // broken by a member's failure, with why.
  absl::flat_hash_map<uint32_t, std::vector<int>> members_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint32_t, absl::Status> broken_ ABSL_GUARDED_BY(mu_);
  // Contexts ended by CloseContexts or AbortCommunicator: whatever arrives
  // in them is dropped.
  absl::flat_hash_set<uint32_t> closed_contexts_ ABSL_GUARDED_BY(mu_);
  // (context, world rank) pairs whose peer aborted the communicator there
  // (PeerAbandonedLocked), with the status operations with it fail with.
  absl::flat_hash_map<std::pair<uint32_t, int>, absl::Status> abandoned_ ABSL_GUARDED_BY(mu_);
  // (ctx, tag) pairs failed by Poison, newest last (bounded).
  std::deque<std::pair<std::pair<uint32_t, int>, absl::Status>> poisoned_ ABSL_GUARDED_BY(mu_);

  // Progress: whoever holds progress_mu_ polls the transport.
  absl::Mutex progress_mu_;
  // Set by Destroy (under progress_mu_) once it has shut the transports:
  // nobody polls them after.
  std::atomic<bool> torn_down_{false};
  std::atomic<int> active_waiters_{0};
  std::atomic<uint64_t> waits_ended_{0};  // for the background thread
  std::atomic<bool> stop_{false};
  absl::Mutex bg_mu_;
  CondVar bg_cv_;
  std::thread progress_thread_;

  // Hang-report responder: watches the store's request counter and answers
  // with PendingState.
  void HangResponderLoop();
  // Answers the hang-report requests made since the last answer with this
  // rank's PendingState (the responder, every 50 ms; and a rank collecting
  // a report of its own, between its looks: the store client serves one
  // call at a time, so its responder could not answer meanwhile).
  void AnswerHangRequests();
  absl::Mutex hang_mu_;
  int64_t hang_answered_ ABSL_GUARDED_BY(hang_mu_) = -1;
  absl::Mutex activity_mu_;
  std::map<uint32_t, std::unique_ptr<Activity>> activity_ ABSL_GUARDED_BY(activity_mu_);
  std::thread hang_thread_;
  std::string hang_report_file_;
  // Hang reports over the connections (hang_responder.cc): the store is no
  // longer asked once it failed; the responder's posted receive of asks
  // (its thread only); the tag the next report's answers come under.
  std::atomic<bool> store_lost_{false};
  std::shared_ptr<Request> hang_ask_;
  int32_t hang_ask_buf_[2] = {0, 0};
  std::atomic<int32_t> hang_next_tag_{1};
  // Answers the ask that hang_ask_ received, if it did, and posts it anew.
  void AnswerHangAsks();
  std::map<int, std::string> CollectHangReportDirect(MonoTime deadline);
  // PendingState and the flight record, as one answer.
  std::string HangAnswer();
  std::unique_ptr<FlightRecorder> flight_ = std::make_unique<FlightRecorder>(0);
  std::string flight_file_;
};

}  // namespace hcomm

#endif  // HCOMM_CORE_P2P_ENGINE_H_
