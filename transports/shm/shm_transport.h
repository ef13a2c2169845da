// Shared-memory transport between processes on one host.
//
//   // Every local rank (the store is the core's rendezvous store):
//   HCOMM_ASSIGN_OR_RETURN(auto shm, ShmTransport::Create(rank, size, local, job_key, sink));
//   store.Set("shm/" + rank, shm->Address());
//   for (int p : local) HCOMM_RETURN_IF_ERROR(shm->Connect(p, store.Get("shm/" + p), deadline));
//   store.Barrier();                            // every local peer has attached to us
//   HCOMM_RETURN_IF_ERROR(shm->FinishSetup());  // nothing is left in /dev/shm from here on
//   shm->Send(peer, meta, buf, len, done);
//   shm->Poll(absl::Milliseconds(10));
//
// Each rank owns one inbound segment in /dev/shm ("/hcomm-<job_key>-<rank>",
// mode 0600) holding one single-producer/single-consumer ring per local peer
// (the writer is that peer). A frame is a 56-byte record header (seal,
// kind, length, FrameMeta) followed inline by its payload, padded to 64
// bytes. The reader waits on the seal word where the next record starts,
// which the writer stores last: an 8-byte frame arrives in the one cache
// line the reader was watching. The ring is a byte stream, so a frame
// larger than the free space (or than the whole ring) streams through it in
// pieces, sealed with the first, the rest following the ring's tail index,
// while the reader copies each piece out: that is the pipelined two-copy
// path. Payloads above
// kCmaMinBytes move with one copy instead: the sender puts only the record
// header into the ring and the buffer's address into a per-ring slot table;
// the receiver reads the payload with process_vm_readv straight into the
// destination the sink chose, then bumps an acknowledgement counter in the
// shared ring control block, upon which the sender's Poll runs the frame's
// SendCallback. No syscall is made on the small-frame path unless the other
// side sleeps.
//
// Waiting: Poll(timeout > 0) spins for an adaptive 2-50 us, then sleeps on
// a futex word in this rank's segment ("doorbell"); writers ring it only
// when a sleeper has announced itself. Sleeps are cut into slices of at
// most kLivenessIntervalMs so that a dead peer is noticed even then.
//
// Failure: each peer's death is watched through a pidfd (checked from Poll
// every kLivenessIntervalMs) and through flags in the shared segments
// (ShutdownAll, FailPeer, a peer's destruction). Everything that fully
// arrived from a failed peer is delivered before OnConnectionLost.
//
// THREAD SAFETY: Create, Connect and FinishSetup are setup calls: run them
// from one thread, before the first Send/Poll towards the peers concerned.
// All Transport methods may then be called from any number of threads.
// Lock order: a ring's receive lock (held while the sink runs) may be
// followed by any connection's send lock, never the other way round; the
// liveness lock and the per-connection loss lock come last. The transport
// holds no lock while SendCallbacks or OnConnectionLost run (unless the
// sink itself calls Send/FailPeer from OnFrame/OnPayload). Cross-process:
// a CMA slot's spinlock is held only around one process_vm_readv or one
// copy, and a waiter gives up when the holder's process is gone.
#ifndef HCOMM_TRANSPORTS_SHM_SHM_TRANSPORT_H_
#define HCOMM_TRANSPORTS_SHM_SHM_TRANSPORT_H_

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "algorithms/kernels/shared_copy.h"
#include "core/base/clock.h"
#include "transports/transport.h"

namespace hcomm {

namespace shm_internal {
struct SegHeader;  // the shared layout, defined in shm_transport.cc
struct RingCtl;
}  // namespace shm_internal

class ShmTransport final : public Transport {
 public:
  // Payloads longer than this move by cross-memory attach where it works;
  // up to it (the core's eager limit) they are copied through the ring.
  static constexpr size_t kCmaMinBytes = 64 * 1024;
  // process_vm_readv moves a CMA payload in pieces of this size; one ring
  // visit by Poll moves at most kCmaBudgetBytes of it.
  static constexpr size_t kCmaPieceBytes = 4 * 1024 * 1024;
  static constexpr size_t kCmaBudgetBytes = 16 * 1024 * 1024;
  // CMA frames in flight (sent, not yet acknowledged) per peer; more wait.
  static constexpr uint32_t kCmaSlots = 64;
  // Ring data area per peer: kMaxRingBytes, halved while a segment would
  // hold more than kSegmentBudgetBytes of rings, but not below
  // kMinRingBytes. 8 local ranks: 8 segments x 7 rings x 1 MiB = 56 MiB.
  static constexpr size_t kMaxRingBytes = 1024 * 1024;
  static constexpr size_t kMinRingBytes = 128 * 1024;
  static constexpr size_t kSegmentBudgetBytes = 8 * 1024 * 1024;
  // The writer publishes (and the reader releases) ring space in steps of
  // at most this many bytes, so that a streamed payload is copied in and
  // out at the same time.
  static constexpr size_t kPipeChunkBytes = 64 * 1024;
  // Peers' liveness (pidfd) is checked at most this often from Poll, and
  // no futex sleep lasts longer.
  static constexpr int kLivenessIntervalMs = 50;
  // Poll(timeout > 0) spins (pause) for an adaptive while before sleeping
  // on the futex: the spin grows (up to kMaxSpinNs) each time spinning
  // found work and halves (down to kMinSpinNs) each time it did not. So two
  // ranks with a core each keep answering without a wakeup (costly on a
  // virtual machine, whose idle CPUs halt), while ranks that outnumber the
  // cores soon stop spinning and leave the CPU to the peer they wait for.
  // There is no sched_yield phase: yielding to a thread that never yields
  // back (a build, a spinning process) costs a whole scheduler tick
  // (measured: docs/performance.md, "shm: spinning instead of yielding").
  // With a CPU per local rank the spin never drops below kDedicatedMinSpinNs:
  // one slow answer must not turn every later one into a futex wakeup.
  static constexpr int64_t kMinSpinNs = 2'000;
  static constexpr int64_t kDedicatedMinSpinNs = 25'000;
  static constexpr int64_t kInitialSpinNs = 10'000;
  static constexpr int64_t kMaxSpinNs = 50'000;
  // Largest number of local peers one segment serves.
  static constexpr int kMaxLocalPeers = 255;

  // Whether local ranks outnumber the CPUs they may run on (the default):
  // only then may the spin before sleeping shrink below
  // kDedicatedMinSpinNs.
  void SetCpusShared(bool shared) {
    min_spin_ns_.store(shared ? kMinSpinNs : kDedicatedMinSpinNs, std::memory_order_relaxed);
  }

  // Creates this rank's inbound segment ("/hcomm-<job_key>-<self>", with
  // characters outside [A-Za-z0-9_.-] of job_key replaced), sized for
  // `local_peers` (world ranks on this host, excluding self), pre-faulted.
  // Its rings are kMaxRingBytes, halved (down to kMinRingBytes) while n
  // of them pass kSegmentBudgetBytes, and further while the segment passes
  // this rank's share of the room free in /dev/shm (1/(n+1) for n local
  // peers) or cannot be reserved. `sink` must outlive the transport. Fails
  // (leaving nothing in /dev/shm) with InvalidArgument for bad ranks or an
  // empty job_key, Unavailable if the name exists already (another job
  // with the same key, or a crash before FinishSetup), OutOfMem if not even
  // rings of kMinRingBytes fit.
  static absl::StatusOr<std::unique_ptr<ShmTransport>> Create(int self, int world_size,
                                                              const std::vector<int>& local_peers,
                                                              const std::string& job_key,
                                                              FrameSink* sink);
  // Whether this process can make segments in /dev/shm at all: creates,
  // reserves, maps and removes one page under Create's name plus
  // "-probe". A missing or read-only /dev/shm (a container started with
  // --ipc=none) is Unavailable, a full one OutOfMem, each naming the call
  // that failed. Leaves nothing in /dev/shm.
  static absl::Status Probe(const std::string& job_key, int self);
  // Which /dev/shm this process sees: the boot's id and the device of the
  // file system mounted there ("<boot_id>.<dev>", no spaces). Two ranks can
  // share segments only if theirs match: two machines with one host name
  // differ in the boot's id, two containers of one machine with a /dev/shm
  // each in the device.
  static std::string Domain();

  // Peers see every connection fail at once (as after ShutdownAll); the
  // callbacks of frames still queued do not run. Unmaps everything and
  // removes the segment name if FinishSetup has not.
  ~ShmTransport() override;

  // What peers need to attach to us: "shm1:<pid>:<rank>:<segment address
  // in our process, hex>:<segment name>". Opaque to the core.
  std::string Address() const;

  // Attaches to local peer `peer`'s segment given its Address(): maps its
  // ring for us, opens a pidfd on it, and checks whether we may read its
  // memory with process_vm_readv (the result, published in our segment,
  // decides whether the peer sends to us by CMA). Retries a segment that
  // does not exist yet until `deadline`. Fails with InvalidArgument (bad
  // address, unknown peer), Unavailable (segment missing/invalid, peer gone)
  // or Timeout.
  absl::Status Connect(int peer, const std::string& peer_address, MonoTime deadline);

  // Call once every local peer has Connect()ed to us: unlinks our segment
  // name, so that nothing is left in /dev/shm even if we are killed. Fails
  // with Unavailable (after unlinking) if some local peer never attached.
  absl::Status FinishSetup();

  // Whether frames above kCmaMinBytes to `peer` go by single-copy CMA
  // (false: pipelined copy through the ring). Known once the peer has
  // Connect()ed to us (i.e. after the setup barrier); false before, and
  // false for everyone unless HCOMM_SHM_CMA=1 here and at the peer (CMA is
  // opt-in: the ring copy is faster on the VMs measured; docs/performance.md,
  // "shm: CMA opt-in").
  bool UsesCma(int peer) const;

  // Whether this process has lowered its ptrace protection (Yama's
  // PR_SET_PTRACER_ANY: any process of this user may then ptrace it, and
  // read its memory by CMA). Create does so only where HCOMM_SHM_CMA=1, as
  // the peers' process_vm_readv needs it; a forked child starts with false.
  // For tests: Yama's setting cannot be read back.
  static bool LoweredPtraceProtection();

  // Bytes of each ring into this rank's segment, and what the budget alone
  // would have given (more where /dev/shm was short of room).
  size_t ring_bytes() const;
  size_t planned_ring_bytes() const { return planned_ring_bytes_; }

  // Transport. Notes on this implementation:
  // - Send's callback runs once all of the frame is in the ring, or, for a
  //   CMA frame, once the peer has read the payload (until then the buffer
  //   is in use); Cancel of a CMA frame in flight copies the payload and
  //   points the peer at the copy.
  // - A process_vm_readv that fails after Connect found CMA working (the
  //   peer died, or passed a bad buffer) ends that connection.
  // - ShutdownAll stops peers from reading our buffers before it returns;
  //   the failed callbacks and OnConnectionLost run from the next Poll.
  //   FailPeer runs them before it returns.
  const char* name() const override { return "shm"; }
  // The wake fd is an abstract Unix datagram socket named after this
  // rank's segment (bound by Create); a peer that rings our doorbell while
  // ArmWake is in effect also sends it a byte. OpenWakeFd gives -1 unless
  // every local peer is attached and its own bell was reachable from here.
  int OpenWakeFd() override;
  bool ArmWake() override;
  void DisarmWake() override;
  bool SpinsBeforeSleep() const override { return true; }
  int PollQuiet(absl::Duration timeout) override;
  int TakeWhole(int peer, uint64_t max_payload, hcomm_transport_take_fn take,
                void* take_arg) override;
  bool TrySendNow(int peer, const FrameMeta& meta, const void* payload, size_t len) override;
  FrameHandle Send(int peer, const FrameMeta& meta, const void* payload, size_t len,
                   SendCallback done) override;
  bool Cancel(int peer, FrameHandle handle) override;
  int Poll(absl::Duration timeout) override;
  size_t PendingSends() const override { return pending_.load(std::memory_order_relaxed); }
  void CloseWrite(int peer) override;
  void ShutdownAll() override;
  void FailPeer(int peer, const absl::Status& why) override;

 private:
  // std::mutex with the annotations clang's thread-safety analysis needs.
  // Not absl::Mutex: Debian's Abseil is built without NDEBUG, so every
  // absl::Mutex operation runs deadlock detection (a graph-cycle lookup),
  // which cost more than the rest of a small Send here.
  class ABSL_LOCKABLE Lock {
   public:
    void Acquire() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
    bool TryAcquire() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
    void Release() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

   private:
    std::mutex mu_;
  };
  class ABSL_SCOPED_LOCKABLE Locked {
   public:
    explicit Locked(Lock* l) ABSL_EXCLUSIVE_LOCK_FUNCTION(l) : l_(l) { l_->Acquire(); }
    ~Locked() ABSL_UNLOCK_FUNCTION() { l_->Release(); }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    Lock* const l_;
  };

  struct Segment;
  using Completions = std::vector<std::pair<SendCallback, absl::Status>>;

  // A frame queued for, or in flight to, one peer.
  struct OutFrame {
    FrameHandle handle = 0;
    FrameMeta meta;
    uint64_t len = 0;
    const char* payload = nullptr;
    uint64_t written = 0;  // record bytes in the ring
    bool cma = false;
    uint32_t slot = 0;  // CMA, once described
    bool slot_cancelled = false;
    std::unique_ptr<char[]> owned;  // set when Cancel had to keep the payload
    SendCallback done;
  };

  // One local peer: our ring in its segment (we write), its ring in ours
  // (we read), and what connects the two.
  struct Conn {
    int peer = -1;
    std::atomic<bool> connected{false};

    // Set by Connect before `connected` (release); constant afterwards.
    pid_t pid = 0;
    int pidfd = -1;
    void* peer_base = nullptr;
    size_t peer_size = 0;
    shm_internal::SegHeader* peer_hdr = nullptr;
    shm_internal::RingCtl* out_ctl = nullptr;  // our ring in the peer's segment
    char* out_data = nullptr;
    uint64_t out_size = 0;
    uint64_t out_seal_key = 0;  // the peer's segment's (record seals)
    // The peer's bell socket; peer_bell_len 0: none, or not reachable from
    // here at Connect.
    sockaddr_un peer_bell{};
    socklen_t peer_bell_len = 0;
    // Set by Create.
    shm_internal::RingCtl* in_ctl = nullptr;  // the peer's ring in our segment
    char* in_data = nullptr;
    uint64_t in_size = 0;
    uint64_t in_seal_key = 0;

    // Producer side.
    Lock send_mu;
    std::deque<OutFrame> queue ABSL_GUARDED_BY(send_mu);
    std::deque<OutFrame> inflight ABSL_GUARDED_BY(send_mu);  // CMA, not yet acknowledged
    uint64_t tail ABSL_GUARDED_BY(send_mu) = 0;
    uint64_t tail_published ABSL_GUARDED_BY(send_mu) = 0;
    uint64_t head_cached ABSL_GUARDED_BY(send_mu) = 0;
    SharedCopier copier ABSL_GUARDED_BY(send_mu);  // payloads into the ring
    uint64_t cma_sent ABSL_GUARDED_BY(send_mu) = 0;
    uint64_t cma_acked ABSL_GUARDED_BY(send_mu) = 0;
    bool close_write ABSL_GUARDED_BY(send_mu) = false;
    bool close_written ABSL_GUARDED_BY(send_mu) = false;
    bool blocked_space ABSL_GUARDED_BY(send_mu) = false;
    bool dead ABSL_GUARDED_BY(send_mu) = false;
    absl::Status death ABSL_GUARDED_BY(send_mu);
    std::atomic<uint32_t> out_state{0};   // what Poll should look at (see .cc)
    std::atomic<uint64_t> acked_seen{0};  // == cma_acked, readable without the lock

    // Consumer side.
    Lock recv_mu;
    int rx_state ABSL_GUARDED_BY(recv_mu) = 0;
    FrameMeta rx_meta ABSL_GUARDED_BY(recv_mu);
    uint64_t rx_len ABSL_GUARDED_BY(recv_mu) = 0;
    uint32_t rx_slot ABSL_GUARDED_BY(recv_mu) = 0;
    char* rx_dst ABSL_GUARDED_BY(recv_mu) = nullptr;
    uint64_t rx_rec_start ABSL_GUARDED_BY(recv_mu) = 0;
    uint64_t rx_off ABSL_GUARDED_BY(recv_mu) = 0;  // CMA: payload bytes read
    uint64_t rx_head ABSL_GUARDED_BY(recv_mu) = 0;
    uint64_t rx_head_published ABSL_GUARDED_BY(recv_mu) = 0;
    uint64_t rx_tail_cached ABSL_GUARDED_BY(recv_mu) = 0;
    uint64_t rx_cma_seen ABSL_GUARDED_BY(recv_mu) = 0;
    std::atomic<bool> rx_more{false};  // a visit stopped on its budget
    // A visit stopped inside a record whose rest follows the tail.
    std::atomic<bool> rx_partial{false};

    // Why the connection ended, before it is reported.
    Lock loss_mu;
    absl::Status loss_why ABSL_GUARDED_BY(loss_mu);
    bool loss_drain ABSL_GUARDED_BY(loss_mu) = false;
    bool loss_closed ABSL_GUARDED_BY(loss_mu) = false;
    std::atomic<bool> loss_flag{false};
    std::atomic<bool> lost_reported{false};

    absl::Status Died() const;
  };

  ShmTransport(int self, int world_size, FrameSink* sink);

  Conn* ConnFor(int peer) const;
  // One pass over every connection: liveness, inbound rings, outbound
  // queues and acknowledgements. Returns the number of events.
  int PollOnce();
  // Whether PollOnce would find something to do (checked before sleeping).
  bool AnythingReady();
  // Rings the owner of segment `h`: its futex if a thread sleeps there, its
  // bell socket if one waits on that (ArmWake). RingPeer: `c`'s owner.
  void Ring(shm_internal::SegHeader* h, const sockaddr_un& bell, socklen_t bell_len);
  void RingPeer(Conn* c);
  void DrainBell();
  // Sleeps on the doorbell until something is ready (then polls) or
  // `deadline` (MonoNs) passes.
  int SleepUntilReady(int64_t deadline);
  // AnythingReady without the clock: data, space, acks or a flag waiting.
  bool WorkReady();
  // Whether c's inbound ring may hold something to read, without its lock:
  // a sealed record at the head, or (inside a streamed record) a tail that
  // moved. A hint: the lock holder decides.
  bool InboundReady(Conn* c);

  // Receiving (c->recv_mu held). ReadRing reads what is available on c's
  // inbound ring; `drain`: the writer is gone, read every complete record
  // regardless of budgets. Returns the number of events.
  int ReadRing(Conn* c, bool drain) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->recv_mu);
  int ReadCmaLocked(Conn* c, uint64_t budget) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->recv_mu);
  void PublishHeadLocked(Conn* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->recv_mu);

  // Sending (c->send_mu held). FlushLocked writes what fits of c's queue;
  // completed frames' callbacks go to *done for the caller to run unlocked.
  void FlushLocked(Conn* c, Completions* done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->send_mu);
  // Writes a frame as one inline record and publishes it, if nothing is
  // queued ahead and the ring has room; false (nothing written) otherwise.
  bool WriteWholeLocked(Conn* c, const FrameMeta& meta, const void* payload, size_t len)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->send_mu);
  void PublishLocked(Conn* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->send_mu);
  int ReapAcksLocked(Conn* c, Completions* done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->send_mu);
  void UpdateOutStateLocked(Conn* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->send_mu);
  bool OutReady(Conn* c, uint32_t state);
  // Fails the queue and the in-flight CMA frames (after taking the peer's
  // access to their payloads away).
  void AbortSendsLocked(Conn* c, Completions* done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->send_mu);
  void CancelSlotLocked(Conn* c, OutFrame* f) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->send_mu);
  // Takes a CMA slot's cross-process spinlock; false if the peer died.
  bool LockSlot(Conn* c, void* slot, uint32_t who);

  // Failure. NoteLoss records why c's connection ended (first reason wins,
  // except that a close record read while draining explains a remote loss
  // better); `drain`: deliver what fully arrived first. HandleLoss then
  // drains and calls MarkDead, which fails c for good and reports it once
  // (no lock may be held). SignalPeerGone tells the peer through the
  // shared segments and wakes it.
  void NoteLoss(Conn* c, const absl::Status& why, bool drain, bool closed)
      ABSL_LOCKS_EXCLUDED(c->loss_mu);
  int HandleLoss(Conn* c);
  void MarkDead(Conn* c, const absl::Status& why) ABSL_LOCKS_EXCLUDED(c->send_mu, c->recv_mu);
  void SignalPeerGone(Conn* c);
  void CheckLiveness();
  bool PeerAlive(Conn* c);

  const int self_;
  const int world_size_;
  FrameSink* const sink_;
  bool cma_enabled_ = true;
  size_t planned_ring_bytes_ = 0;  // see planned_ring_bytes()
  std::unique_ptr<Segment> seg_;
  int bell_tx_ = -1;  // sends peers' bells
  int bell_rx_ = -1;  // our bell, or -1
  sockaddr_un bell_{};  // its address (bell_len_ 0: none)
  socklen_t bell_len_ = 0;
  bool wake_open_ = false;  // OpenWakeFd handed bell_rx_ out
  std::vector<std::unique_ptr<Conn>> conns_;  // by world rank; null if not local
  std::vector<Conn*> local_;                  // the non-null entries of conns_
  std::atomic<uint64_t> next_handle_{1};
  std::atomic<size_t> pending_{0};
  std::atomic<bool> shutdown_{false};
  std::atomic<int64_t> next_liveness_ns_{0};
  std::atomic<uint32_t> attention_seen_{0};
  std::atomic<int64_t> spin_ns_{kInitialSpinNs};
  std::atomic<int64_t> min_spin_ns_{kMinSpinNs};
  Lock liveness_mu_;
};

}  // namespace hcomm

#endif  // HCOMM_TRANSPORTS_SHM_SHM_TRANSPORT_H_
