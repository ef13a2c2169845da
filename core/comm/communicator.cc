#include "core/comm/communicator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/interrupt.h"
#include "core/base/shm_file.h"
#include "core/base/status.h"

namespace hcomm {
namespace {

// Collective tags: the call's sequence number, below kSetupTag; the
// communicator's own setup exchanges use kSetupTag and up.
constexpr int kCollectiveTagMask = 0x3fffffff;
constexpr int kSetupTag = 0x40000000;
// The exchange of HCOMM_CHECK_COLLECTIVES before a collective: kCheckTag and
// the low bits of its sequence number (clear of the setup tags' few rounds).
constexpr int kCheckTag = 0x60000000;
constexpr int kCheckTagMask = 0x1fffffff;

Algorithm ParseAlgo(const std::string& s) {
  if (s == "ring") return Algorithm::kRing;
  if (s == "tree") return Algorithm::kTree;
  if (s == "direct") return Algorithm::kDirect;
  return Algorithm::kAuto;
}

bool DebugInfo() {
  const char* d = getenv("HCOMM_DEBUG");
  return d != nullptr && (strcmp(d, "INFO") == 0 || strcmp(d, "info") == 0 ||
                          strcmp(d, "TRACE") == 0 || strcmp(d, "trace") == 0);
}

std::string Bytes(size_t b) {
  if (b >= (size_t{1} << 30) && b % (size_t{1} << 30) == 0) return absl::StrCat(b >> 30, " GiB");
  if (b >= (size_t{1} << 20) && b % (size_t{1} << 20) == 0) return absl::StrCat(b >> 20, " MiB");
  if (b >= 1024 && b % 1024 == 0) return absl::StrCat(b >> 10, " KiB");
  return absl::StrCat(b, " B");
}

// A collective's fingerprint: what this rank is doing, sent with every
// message of the call. Bit 63 marks it; then bits 32-34 of the count (3),
// op (4 bits), dtype (4), reduce op (3), root + 1 (17) and the low 32 bits
// of the count: counts below 2^35 are told apart exactly.
uint64_t Fingerprint(CollectiveOp op, size_t count, DataType t, ReduceOp rop, int root) {
  return (uint64_t{1} << 63) | (static_cast<uint64_t>(count >> 32) & 0x7) << 60 |
         (static_cast<uint64_t>(op) & 0xf) << 56 | (static_cast<uint64_t>(t) & 0xf) << 52 |
         (static_cast<uint64_t>(rop) & 0x7) << 49 |
         (static_cast<uint64_t>(root + 1) & 0x1ffff) << 32 | (count & 0xffffffffu);
}

// The fingerprint of a call that its rank rejected for its arguments
// (RejectCollective): an op no collective has.
constexpr uint64_t kRejectedFingerprint = uint64_t{1} << 63 | uint64_t{0xf} << 56;

// "allreduce(count 10 float32 sum)", "broadcast(count 10 int32 root 1)".
std::string DescribeFingerprint(uint64_t fp) {
  auto op = static_cast<CollectiveOp>((fp >> 56) & 0xf);
  auto t = static_cast<DataType>((fp >> 52) & 0xf);
  auto rop = static_cast<ReduceOp>((fp >> 49) & 0x7);
  int root = static_cast<int>((fp >> 32) & 0x1ffff) - 1;
  const uint64_t count = ((fp >> 60) & 0x7) << 32 | (fp & 0xffffffffu);
  std::string out = absl::StrCat(CollectiveOpName(op), "(count ", count);
  if (op != CollectiveOp::kBarrier) absl::StrAppend(&out, " ", DataTypeName(t));
  if (op == CollectiveOp::kAllReduce || op == CollectiveOp::kReduce ||
      op == CollectiveOp::kReduceScatter) {
    absl::StrAppend(&out, " ", ReduceOpName(rop));
  }
  if (root >= 0) absl::StrAppend(&out, " root ", root);
  return out + ")";
}

}  // namespace

// What one collective call is, for its error messages:
// "allreduce seq 17 (count 1024 float32 sum, ring, 8 ranks)".
struct Communicator::CallInfo {
  CollectiveOp op;
  uint64_t seq;
  size_t count;
  DataType t;
  ReduceOp rop;
  int root;
  Algorithm algo;
  int nranks;
  bool shm = false;  // ran in the shared-memory segment (algorithms/shm_collective.h)
  std::string Describe() const {
    std::string what = absl::StrCat(CollectiveOpName(op), " seq ", seq, " (count ", count);
    if (op != CollectiveOp::kBarrier) absl::StrAppend(&what, " ", DataTypeName(t));
    if (op == CollectiveOp::kAllReduce || op == CollectiveOp::kReduce ||
        op == CollectiveOp::kReduceScatter) {
      absl::StrAppend(&what, " ", ReduceOpName(rop));
    }
    if (root >= 0) absl::StrAppend(&what, " root ", root);
    absl::StrAppend(&what, ", ", shm ? "shared memory" : AlgorithmName(algo), ", ", nranks,
                    " ranks)");
    return what;
  }
};

// The point-to-point view one collective call has of its communicator.
class Communicator::CollectivePeers : public Peers, public ShmWaiter {
 public:
  // Waits end `timeout` after the first of them begins, minus the
  // hang-report reserve; the report (if one is needed) ends by then. (The
  // clock is read only when something has to wait: a collective whose data
  // is all there already reads none.)
  CollectivePeers(Communicator* c, int tag, uint64_t fingerprint, absl::Duration timeout,
                  CallInfo info)
      : c_(c), tag_(tag), wire_tag_(tag), fp_(fingerprint), timeout_(timeout), info_(info) {}
  // The tag its messages travel under: the collective's, or that of the
  // check before it (CheckCall).
  void set_wire_tag(int tag) { wire_tag_ = tag; }
  // When the collective began to wait (StartClock).
  absl::Time Began() const { return final_deadline_ - timeout_; }
  void StartClock() {
    if (clock_started_) return;
    clock_started_ = true;
    final_deadline_ = absl::Now() + timeout_;
    deadline_ = final_deadline_ - Engine::ReportReserve(timeout_);
  }
  int rank() const override { return c_->rank_; }
  int size() const override { return c_->size_; }
  absl::StatusOr<std::shared_ptr<Request>> Isend(const void* buf, size_t bytes,
                                                 int peer) override {
    auto r = c_->engine_->Isend(c_->coll_ctx_, buf, bytes, 1, c_->group_to_world_[peer], wire_tag_,
                                  fp_);
    if (!r.ok()) return Explain(r.status());
    return r;
  }
  bool SendNow(const void* buf, size_t bytes, int peer) override {
    return c_->engine_->SendNow(c_->coll_ctx_, buf, bytes, c_->group_to_world_[peer], wire_tag_,
                                fp_);
  }
  bool RecvNow(void* buf, size_t bytes, int peer) override {
    return c_->engine_->RecvNow(c_->coll_ctx_, buf, bytes, c_->group_to_world_[peer], wire_tag_,
                                fp_);
  }
  absl::StatusOr<std::shared_ptr<Request>> Irecv(void* buf, size_t bytes, int peer) override {
    auto r = c_->engine_->Irecv(c_->coll_ctx_, buf, bytes, 1, c_->group_to_world_[peer], wire_tag_,
                                  fp_);
    if (!r.ok()) return Explain(r.status());
    return r;
  }
  absl::Status Wait(Request* r) override {
    StartClock();
    // A timeout counts from the first wait of the collective, not from when
    // this request was posted.
    absl::Status s = c_->engine_->Wait(r, reported_ ? final_deadline_ : deadline_, Began());
    if (CodeOf(s) == ErrorCode::kTimeout && !reported_ && !hcomm::Interrupted()) {
      // The last part of the timeout: ask everyone what they wait on, and
      // keep waiting meanwhile (the message may still come).
      reported_ = true;
      report_ = c_->HangReport(c_->coll_ctx_, tag_, fp_, final_deadline_);
      s = c_->engine_->Wait(r, final_deadline_, Began());
    }
    if (!s.ok()) return Explain(s);
    if (r->kind == Request::Kind::kRecv && r->out_bytes != r->bytes) {
      int src = r->out_source >= 0 ? (*c_->world_to_group_)[r->out_source] : -1;
      return Mismatch(absl::StrCat(What(), ": rank ", c_->rank_, " expected ", r->bytes,
                                   " bytes from rank ", src, " but got ", r->out_bytes,
                                   "; the ranks disagree on the collective's arguments"));
    }
    return absl::OkStatus();
  }
  char* Scratch(int slot, size_t bytes) override { return c_->ScratchSlot(slot, bytes); }

  // ShmWaiter: the same deadlines, hang report and failure checks as a
  // message-based collective.
  absl::Status StillWaiting(const std::vector<int>& missing, const char* phase) override {
    if (absl::Status p = c_->engine_->PoisonedStatus(c_->coll_ctx_, tag_); !p.ok()) {
      return Explain(p);
    }
    std::vector<int> world;
    for (int g : missing) {
      absl::Status h = c_->engine_->PeerHealth(c_->group_to_world_[g]);
      if (!h.ok()) return Explain(h);
      world.push_back(c_->group_to_world_[g]);
    }
    StartClock();
    const absl::Time now = absl::Now();
    if (world.size() != noted_) {
      // For hang reports: whom this rank waits for.
      noted_ = world.size();
      c_->engine_->NoteSegmentWait(c_->coll_ctx_, world, info_.count * DataTypeSize(info_.t));
    }
    // A Python Ctrl-C (core/base/interrupt.h) ends the wait as the deadline would.
    const bool interrupted = now < final_deadline_ && InterruptNow(now);
    if (!reported_ && now >= deadline_ && !interrupted) {
      reported_ = true;
      report_ = c_->HangReport(c_->coll_ctx_, tag_, fp_, final_deadline_);
    }
    if (now < final_deadline_ && !interrupted) return absl::OkStatus();
    const absl::Duration waited = interrupted ? now - Began() : timeout_;
    const char* what = strcmp(phase, "arrive") == 0 ? "arrive" : "finish reducing";
    return Explain(Timeout(absl::StrCat(
        "rank ", c_->rank_,
        interrupted ? absl::StrCat(" was ", TimedOutOrInterrupted(), " after ") : " waited ",
        Seconds(waited),
        " in the shared-memory segment for ",
        missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "), " to ", what,
        " (", info_.count * DataTypeSize(info_.t), " bytes per rank)")));
  }
  absl::Status Clash(int rank, uint64_t their_fp) override {
    absl::Status s = Mismatch("another collective under this sequence number");
    s.SetPayload(kClashUrl, absl::Cord(absl::StrCat(their_fp, " ", c_->group_to_world_[rank], " ",
                                                    fp_)));
    return Explain(s);
  }
  bool ShareCpu() const override { return c_->engine_->oversubscribed(); }
  absl::Status Interrupted() override {
    if (c_->engine_->Calm()) return absl::OkStatus();
    absl::Status s = c_->engine_->Usable();  // aborted (the world) or destroyed
    if (s.ok()) s = c_->engine_->PoisonedStatus(c_->coll_ctx_, tag_);  // aborted, broken
    return s.ok() ? s : Explain(s);
  }
  absl::Status Explain(const absl::Status& s) {
    if (CodeOf(s) == ErrorCode::kMismatch && s.GetPayload(kClashUrl)) return Clash(s);
    if (CodeOf(s) == ErrorCode::kTimeout && !report_.empty()) {
      return Timeout(absl::StrCat(What(), ": ", s.message(), "\n", report_));
    }
    return Annotate(s, What());
  }

  // Ranks disagree on the collective: say who called what. If this rank
  // found it, tell every member so that all fail at once.
  absl::Status Clash(const absl::Status& s) {
    std::vector<std::string> f = absl::StrSplit(std::string(*s.GetPayload(kClashUrl)), ' ');
    uint64_t culprit_fp = 0, reporter_fp = fp_;
    int culprit = -1, reporter = c_->engine_->rank();
    if (f.size() >= 3) {
      (void)absl::SimpleAtoi(f[0], &culprit_fp);
      (void)absl::SimpleAtoi(f[1], &culprit);
      (void)absl::SimpleAtoi(f[2], &reporter_fp);
    }
    if (f.size() >= 4) {
      (void)absl::SimpleAtoi(f[3], &reporter);
    } else {
      c_->engine_->Poison(c_->coll_ctx_, wire_tag_, c_->group_to_world_, culprit_fp, culprit,
                          reporter_fp);
    }
    auto g = [this](int world) {
      return world >= 0 && world < static_cast<int>(c_->world_to_group_->size())
                 ? (*c_->world_to_group_)[world]
                 : world;
    };
    if (culprit_fp == kRejectedFingerprint) {
      return Mismatch(absl::StrCat(
          "seq ", tag_, ": rank ", g(culprit), " rejected its call of this collective for its ",
          "arguments (INVALID_ARGUMENT there, whose error says why); this rank (", c_->rank_,
          ") called ", DescribeFingerprint(fp_), ". Later collectives still pair up"));
    }
    std::string msg = absl::StrCat("seq ", tag_, ": rank ", g(culprit), " called ",
                                   DescribeFingerprint(culprit_fp), ", rank ", g(reporter),
                                   " called ", DescribeFingerprint(reporter_fp));
    if (fp_ != culprit_fp && fp_ != reporter_fp) {
      absl::StrAppend(&msg, ", this rank (", c_->rank_, ") called ", DescribeFingerprint(fp_));
    }
    return Mismatch(absl::StrCat(msg, "; every rank must call the same collectives in the same "
                                      "order (on rank ", c_->rank_, ")"));
  }

  void Withdraw(const std::shared_ptr<Request>& r) override {
    c_->engine_->Withdraw(r, Aborted(absl::StrCat(What(), ": withdrawn after an error")))
        .IgnoreError();
  }

 private:
  Communicator* c_;
  int tag_;  // the sequence number's
  int wire_tag_;
  uint64_t fp_;
  bool reported_ = false;
  size_t noted_ = SIZE_MAX;  // ranks last given to NoteSegmentWait
  std::string report_;
  absl::Duration timeout_;
  bool clock_started_ = false;
  absl::Time final_deadline_;
  absl::Time deadline_;
  CallInfo info_;
  std::string What() const { return info_.Describe(); }
};

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Init(const Options& opts) {
  HCOMM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Init(opts));
  std::vector<int> all(opts.world_size);
  std::iota(all.begin(), all.end(), 0);
  std::shared_ptr<Engine> shared(std::move(engine));
  std::unique_ptr<Communicator> world(
      new Communicator(std::move(shared), std::move(all), 0, opts));
  HCOMM_RETURN_IF_ERROR(Annotate(world->SetUpShmCollective(), "init"));
  HCOMM_RETURN_IF_ERROR(Annotate(world->SetUpRingOrder(), "init"));
  return world;
}

Communicator::Communicator(std::shared_ptr<Engine> engine, std::vector<int> group_to_world,
                           uint32_t first_ctx, const Options& opts)
    : engine_(std::move(engine)),
      rank_(static_cast<int>(std::find(group_to_world.begin(), group_to_world.end(),
                                       engine_->rank()) -
                             group_to_world.begin())),
      size_(static_cast<int>(group_to_world.size())),
      group_to_world_(std::move(group_to_world)),
      p2p_ctx_(first_ctx),
      coll_ctx_(first_ctx + 1),
      timeout_ms_(opts.timeout_ms),
      forced_algo_(ParseAlgo(opts.algo)),
      link_(LinkModelFor(engine_->TransportName(), engine_->oversubscribed())),
      debug_info_(DebugInfo()),
      check_calls_(engine_->check_collectives()),
      fingerprints_(getenv("HCOMM_FINGERPRINTS") == nullptr ||
                    strcmp(getenv("HCOMM_FINGERPRINTS"), "0") != 0) {
  engine_->JoinCommunicator();
  activity_ = engine_->ActivityFor(coll_ctx_);
  if (size_ > 1) engine_->WatchMembers(coll_ctx_, group_to_world_);
  auto w2g = std::make_shared<std::vector<int>>(engine_->size(), -1);
  for (int g = 0; g < size_; ++g) (*w2g)[group_to_world_[g]] = g;
  world_to_group_ = std::move(w2g);
  // The order the placements suggest (SetUpRingOrder keeps it where no
  // member talks to another over shared memory).
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

absl::Status Communicator::SetOption(absl::string_view key, absl::string_view value) {
  Options o;
  HCOMM_RETURN_IF_ERROR(ParseOption(key, value, &o));
  if (key == "timeout_ms") {
    timeout_ms_.store(o.timeout_ms, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  if (key == "algo") {
    // Applies to collectives called afterwards; every rank should change it
    // at the same point.
    forced_algo_.store(ParseAlgo(o.algo), std::memory_order_relaxed);
    return absl::OkStatus();
  }
  return InvalidArgument(absl::StrCat("config key '", key,
                                      "' is fixed at init; only timeout_ms and algo can change "
                                      "on a live communicator"));
}

// ---------------------------------------------------------------------------
// Point-to-point

absl::StatusOr<std::shared_ptr<Request>> Communicator::Isend(const void* buf, size_t bytes,
                                                            size_t elem_size, int peer, int tag) {
  return engine_->Isend(p2p_ctx_, buf, bytes, elem_size, group_to_world_[peer], tag);
}

absl::StatusOr<std::shared_ptr<Request>> Communicator::Irecv(void* buf, size_t bytes,
                                                            size_t elem_size, int peer, int tag) {
  int world = peer == kAnySource ? kAnySource : group_to_world_[peer];
  return engine_->Irecv(p2p_ctx_, buf, bytes, elem_size, world, tag);
}

absl::Status Communicator::Send(const void* buf, size_t bytes, size_t elem_size, int peer,
                                int tag) {
  auto hang = [this](absl::Time d) { return HangReport(p2p_ctx_, -1, 0, d); };
  const Engine::HangReporter report(hang);
  return engine_->Send(p2p_ctx_, buf, bytes, elem_size, group_to_world_[peer], tag, timeout(),
                       &report);
}

absl::Status Communicator::Recv(void* buf, size_t bytes, size_t elem_size, int peer, int tag) {
  int world = peer == kAnySource ? kAnySource : group_to_world_[peer];
  auto hang = [this](absl::Time d) { return HangReport(p2p_ctx_, -1, 0, d); };
  const Engine::HangReporter report(hang);
  return engine_->Recv(p2p_ctx_, buf, bytes, elem_size, world, tag, timeout(), nullptr, &report);
}

std::string Communicator::HangReport(uint32_t ctx, int seq, uint64_t fp, absl::Time deadline) {
  std::map<int, std::string> states = engine_->CollectHangReport(deadline);
  auto g = [this](int world) {
    if (world < 0) return std::string("any rank");
    int r = world < static_cast<int>(world_to_group_->size()) ? (*world_to_group_)[world] : -1;
    return r >= 0 ? absl::StrCat("rank ", r) : absl::StrCat("world rank ", world);
  };
  const bool coll = seq >= 0;
  bool disagree = false;  // some rank is in another call under this seq
  std::vector<std::string> lines;
  for (int r = 0; r < size_; ++r) {
    const int w = group_to_world_[r];
    auto it = states.find(w);
    if (it == states.end()) {
      lines.push_back(absl::StrCat("rank ", r, " did not answer (stuck outside hcomm, or gone)"));
      continue;
    }
    int64_t cseq = -1, in_progress = 0;
    uint64_t cfp = 0;
    // What the rank waits in, each kind once with how many of it (a large
    // collective has a request pending per chunk).
    std::vector<std::pair<std::string, int>> pending;
    auto wait_in = [&pending](std::string what) {
      for (auto& [w, n] : pending) {
        if (w == what) {
          ++n;
          return;
        }
      }
      pending.push_back({std::move(what), 1});
    };
    for (absl::string_view line : absl::StrSplit(it->second, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      uint32_t lctx = 0;
      if (f.size() < 5 || !absl::SimpleAtoi(f[1], &lctx) || lctx != ctx) continue;
      if (f[0] == "C") {
        (void)absl::SimpleAtoi(f[2], &cseq);
        (void)absl::SimpleAtoi(f[3], &cfp);
        (void)absl::SimpleAtoi(f[4], &in_progress);
        continue;
      }
      int peer = -1, tag = -1;
      (void)absl::SimpleAtoi(f[2], &peer);
      (void)absl::SimpleAtoi(f[3], &tag);
      // A collective's own messages, or those of the check before it.
      const bool check = coll && tag == (kCheckTag | (seq & kCheckTagMask));
      if (coll && tag != seq && !check) continue;
      std::string tagtxt =
          check ? " for the call check (HCOMM_CHECK_COLLECTIVES)"
                : coll ? "" : absl::StrCat(tag < 0 ? " any tag" : absl::StrCat(" tag ", tag));
      if (f[0] == "R") {
        wait_in(absl::StrCat("recv from ", g(peer), tagtxt, " (", f[4], " bytes)"));
      } else if (f[0] == "X") {
        wait_in(absl::StrCat("recv from ", g(peer), tagtxt, " (", f[4], " bytes, arriving)"));
      } else if (f[0] == "M") {
        wait_in(absl::StrCat("the shared-memory ",
                             CollectiveOpName(static_cast<CollectiveOp>((fp >> 56) & 0xf)),
                             " for ", g(peer), " (", f[4], " bytes)"));
      } else if (f[0] == "S") {
        bool w_ = f.size() > 5 && f[5] == "w";
        wait_in(absl::StrCat("send to ", g(peer), tagtxt, " (", f[4], " bytes",
                             w_ ? ", no matching receive yet)" : ", in transfer)"));
      }
    }
    std::vector<std::string> waits;
    for (const auto& [w, n] : pending) {
      waits.push_back(n == 1 ? w : absl::StrCat(n, " x ", w));
    }
    std::string who = absl::StrCat("rank ", r, r == rank_ ? " (this rank)" : "");
    if (cfp == 0) cseq = -1;  // no collective yet (every call's fingerprint is non-zero)
    if (coll) {
      if (cseq < seq) {
        lines.push_back(absl::StrCat(who, " never entered ", DescribeFingerprint(fp), " seq ",
                                     seq, cseq >= 0 ? absl::StrCat(" (last: ",
                                                                   DescribeFingerprint(cfp),
                                                                   " seq ", cseq, ")")
                                                    : std::string(" (no collective yet)")));
      } else if (cseq > seq) {
        lines.push_back(absl::StrCat(who, " is past seq ", seq, " (at seq ", cseq, ")"));
      } else if (fp != 0 && cfp != fp) {  // (cfp is not 0 here: cseq would be -1)
        // Over TCP nothing may have carried the other call's fingerprint
        // to a rank that waits (ranks that disagree only on a root).
        disagree = true;
        lines.push_back(absl::StrCat(
            who, " called ", DescribeFingerprint(cfp), " as seq ", seq,
            !in_progress ? std::string(" and finished it")
                         : waits.empty() ? std::string()
                                         : absl::StrCat(" and waits in ",
                                                        absl::StrJoin(waits, ", "))));
      } else if (!in_progress) {
        lines.push_back(absl::StrCat(who, " finished seq ", seq));
      } else if (waits.empty()) {
        lines.push_back(absl::StrCat(who, " is in seq ", seq, " and waits on nothing"));
      } else {
        lines.push_back(absl::StrCat(who, " waits in ", absl::StrJoin(waits, ", ")));
      }
    } else if (!waits.empty()) {
      lines.push_back(absl::StrCat(who, " waits in ", absl::StrJoin(waits, ", ")));
    } else {
      lines.push_back(absl::StrCat(who, " has no pending point-to-point operation"));
    }
  }
  std::string report = absl::StrCat(
      "hang report: ",
      disagree ? absl::StrCat("the ranks disagree on collective seq ", seq, " (this rank called ",
                              DescribeFingerprint(fp), "; every rank must make the same call): ")
               : std::string(),
      absl::StrJoin(lines, "; "));
  if (const char* file = getenv("HCOMM_HANG_REPORT")) {
    std::string path = absl::StrCat(file, ".", engine_->rank());
    if (FILE* f = fopen(path.c_str(), "w")) {
      fprintf(f, "%s\n", report.c_str());
      for (const auto& [w, st] : states) fprintf(f, "--- world rank %d\n%s", w, st.c_str());
      fclose(f);
    }
  }
  return report;
}

// ---------------------------------------------------------------------------
// Collectives

char* Communicator::ScratchSlot(int slot, size_t bytes) {
  Scratch& s = scratch_[slot];
  if (s.capacity >= bytes) return s.data;
  if (s.data != nullptr) ::munmap(s.data, s.capacity);
  // Whole 2 MiB units, huge pages where the kernel allows, touched now: a
  // first touch costs ~11 us per 4 KiB page on these machines, and this
  // buffer is reused by every later call.
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
      if (!ChooseCached(op, 0, forced_algo_.load()).forced) shm_coll_.reset();
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

absl::Status Communicator::RunCollective(CollectiveOp op, size_t bytes, DataType t, ReduceOp rop,
                                         int root, size_t count, Body body,
                                         const ShmArgs* shm) {
  const uint64_t ticket = TakeTicket();
  WaitTurn(ticket);
  return RunServing(ticket, op, bytes, t, rop, root, count, body, shm);
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
    turn_cv_.WaitWithTimeout(&turn_mu_, absl::Milliseconds(10));
  }
  turn_waiters_.fetch_sub(1, std::memory_order_relaxed);
}

void Communicator::FinishTurn() {
  // Only the turn's owner moves it on: a plain store. (A locked add here
  // waited, after every collective, for the stores it had published to
  // reach the other ranks' CPUs: 2 ranks, 8 B allreduce, CPUs behind
  // different caches, 0.46 us against 0.44 without, medians of 30 pairs.)
  now_serving_.store(now_serving_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  LightFence(light_fences_);
  if (turn_waiters_.load(std::memory_order_relaxed) > 0) {
    absl::MutexLock l(&turn_mu_);
    turn_cv_.SignalAll();
  }
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
  // shared-memory messages the order measured no faster (RingByPlacement).
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
  HCOMM_ASSIGN_OR_RETURN(int32_t all, SetupAgreeMin(ok, 0));
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

const Choice& Communicator::ChooseCached(CollectiveOp op, size_t bytes, Algorithm forced) {
  auto& c = choice_cache_;
  if (!c.valid || c.op != op || c.bytes != bytes || c.forced != forced) {
    c.choice = ChooseAlgorithm(op, bytes, size_, link_, forced);
    c.op = op;
    c.bytes = bytes;
    c.forced = forced;
    c.valid = true;
  }
  return c.choice;
}

absl::Status Communicator::RunTicket(uint64_t ticket, CollectiveOp op, size_t bytes, DataType t,
                                     ReduceOp rop, int root, size_t count, Body body,
                                     const ShmArgs* shm) {
  WaitTurn(ticket);
  return RunServing(ticket, op, bytes, t, rop, root, count, body, shm);
}

absl::Status Communicator::RunServing(uint64_t ticket, CollectiveOp op, size_t bytes, DataType t,
                                      ReduceOp rop, int root, size_t count, Body body,
                                      const ShmArgs* shm) {
  absl::Status usable = engine_->Usable();
  if (!usable.ok()) {
    FinishTurn();
    return Annotate(usable, CollectiveOpName(op));
  }
  // float16/bfloat16 reductions among more than two ranks travel as
  // float32 in the ring and the trees (HalfFloat): every algorithm is priced
  // as for float32, the direct exchange too, which then carries half that.
  // (Priced at the 16-bit bytes it was chosen over the ring where it is
  // slower: 4 ranks on 2 CPUs over TCP, float16 of 1 MiB, 3.7-4.9 ms against
  // the ring's 2.4-2.8.)
  const bool reduces = op == CollectiveOp::kAllReduce || op == CollectiveOp::kReduce ||
                       op == CollectiveOp::kReduceScatter;
  // A collective of a communicator within one host runs in its shared
  // segment, unless an algorithm is forced: with none forced, the cost
  // model is not asked (the segment's small calls are mostly overhead).
  const bool segment = shm != nullptr && shm_coll_ != nullptr;
  const Algorithm forced = forced_algo_.load();
  const Choice* choice = nullptr;
  if (!segment || forced != Algorithm::kAuto) {
    const int widen = reduces && IsHalfFloat(t) && !HalfTravelsAsIs(Algorithm::kRing) ? 2 : 1;
    choice = &ChooseCached(op, bytes * widen, forced);
  }
  const bool use_shm = segment && (choice == nullptr || !choice->forced);
  // Described only if something goes wrong: a collective's hot path
  // formats nothing.
  const Algorithm algo = use_shm ? Algorithm::kAuto : choice->algo;
  CallInfo info{op, ticket, count, t, rop, root, algo, size_, use_shm};
  if (debug_info_ && rank_ == 0) {
    if (use_shm) {
      fprintf(stderr, "hcomm INFO: %s %s %s %d ranks -> shared memory (all ranks on this host)\n",
              CollectiveOpName(op), Bytes(bytes).c_str(), DataTypeName(t), size_);
    } else {
      // The ring allreduce's order, where it is not the rank order.
      std::string order;
      if (op == CollectiveOp::kAllReduce && choice->algo == Algorithm::kRing && size_ > 2 &&
          RingByPlacement(bytes * (IsHalfFloat(t) ? 2 : 1))) {
        order = absl::StrCat(", ranks by CPU ", absl::StrJoin(ring_order_, " "));
      }
      fprintf(stderr, "hcomm INFO: %s %s %s %d ranks -> %s%s (%s)%s\n", CollectiveOpName(op),
              Bytes(bytes).c_str(), op == CollectiveOp::kBarrier ? "" : DataTypeName(t), size_,
              AlgorithmName(choice->algo), choice->forced ? " [forced]" : "",
              choice->Explain().c_str(), order.c_str());
    }
  }
  absl::Status s;
  const uint64_t fp = Fingerprint(op, count, t, rop, root);
  engine_->NoteCollective(activity_, ticket, fp, /*in_progress=*/true);
  const int tag = static_cast<int>(ticket & kCollectiveTagMask);
  if (shm_coll_ != nullptr) shm_coll_->Enter(tag, fp);
  {
    // HCOMM_FINGERPRINTS=0 sends none (to measure what the check costs).
    CollectivePeers peers(this, tag, fingerprints_ ? fp : 0, timeout(), info);
    // Aborted, broken by a member's failure, or found clashing by another
    // rank already: even a collective that would send nothing (one rank)
    // fails.
    if (!engine_->Calm()) s = peers.Interrupted();
    if (use_shm) {
      if (s.ok()) s = RunInSegment(op, *shm, count, t, rop, root, tag, fp, peers);
      // Its counters are out of step now (as the others', which failed too).
      if (!s.ok()) shm_coll_.reset();
    } else {
      if (s.ok() && check_calls_ && fingerprints_ && size_ > 1) s = CheckCall(peers, tag);
      if (s.ok()) s = body(peers, algo);
    }
  }
  engine_->NoteCollective(activity_, ticket, fp, /*in_progress=*/false);
  FinishTurn();
  return s;
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

absl::Status Communicator::RunInSegment(CollectiveOp op, const ShmArgs& a, size_t count,
                                        DataType t, ReduceOp rop, int root, uint64_t seq,
                                        uint64_t fingerprint, ShmWaiter& waiter) {
  ShmCollective& sc = *shm_coll_;
  const size_t es = DataTypeSize(t);
  // Count 0 still synchronises as the operation would (hcomm.h): a round
  // that moves nothing, carrying the call's fingerprint, so that a rank
  // called with another count is caught there too.
  if (count == 0) return sc.Barrier(seq, fingerprint, waiter);
  switch (op) {
    case CollectiveOp::kAllReduce:
      return sc.AllReduce(a.send, a.recv, count, t, rop, seq, fingerprint, waiter);
    case CollectiveOp::kReduce:
      return sc.Reduce(a.send, a.recv, count, t, rop, root, seq, fingerprint, waiter);
    case CollectiveOp::kBroadcast:
      return sc.Broadcast(a.recv, count * es, root, seq, fingerprint, waiter);
    case CollectiveOp::kAllGather:
      return sc.AllGather(a.send, a.recv, count * es, seq, fingerprint, waiter);
    case CollectiveOp::kReduceScatter:
      return sc.ReduceScatter(a.send, a.recv, count, t, rop, seq, fingerprint, waiter);
    case CollectiveOp::kAllToAll:
      return sc.AllToAll(a.send, a.recv, count * es, seq, fingerprint, waiter);
    case CollectiveOp::kGather:
      return sc.Gather(a.send, a.recv, count * es, root, seq, fingerprint, waiter);
    case CollectiveOp::kScatter:
      return sc.Scatter(a.send, a.recv, count * es, root, seq, fingerprint, waiter);
    case CollectiveOp::kBarrier:
      return sc.Barrier(seq, fingerprint, waiter);
  }
  return Internal(absl::StrCat("no shared-memory form of ", CollectiveOpName(op)));
}

// float16/bfloat16 reductions accumulate in float32 and are rounded once.
// Where one combine of every rank's own value completes each element
// (ReduceParts: the direct algorithms, and every algorithm between two
// ranks) the 16-bit vectors travel as they are, half the bytes. Elsewhere
// partial results travel, and they must not be rounded: the vectors are
// widened to float32 first and rounded once at the end.
std::function<absl::Status(Peers&, Algorithm)> Communicator::HalfFloat(
    const void* send, void* recv, size_t in_count, size_t out_count, DataType t, bool has_output,
    const std::function<absl::Status(Peers&, Algorithm, const void*, void*, DataType)>& body) {
  return [=](Peers& p, Algorithm a) -> absl::Status {
    if (HalfTravelsAsIs(a)) return body(p, a, send, recv, t);
    HCOMM_ASSIGN_OR_RETURN(WideBuffers w, Widen(send, in_count, out_count, t));
    HCOMM_RETURN_IF_ERROR(body(p, a, w.in, w.out, DataType::kFloat32));
    if (has_output) NarrowFromFloat32(recv, w.out, out_count, t);
    return absl::OkStatus();
  };
}

absl::StatusOr<Communicator::WideBuffers> Communicator::Widen(const void* send,
                                                              size_t in_count,
                                                              size_t out_count, DataType t) {
  float* in = reinterpret_cast<float*>(ScratchSlot(2, std::max<size_t>(in_count, 1) * 4));
  float* out = reinterpret_cast<float*>(ScratchSlot(3, std::max<size_t>(out_count, 1) * 4));
  if (in == nullptr || out == nullptr) {
    return OutOfMem("cannot allocate the float32 staging buffers");
  }
  WidenToFloat32(in, send, in_count, t);
  return WideBuffers{in, out};
}

absl::Status Communicator::RunAllReduce(Peers& p, Algorithm a, const void* send, void* recv,
                                        size_t count, DataType t, ReduceOp op) const {
  switch (a) {
    case Algorithm::kTree:
      return AllReduceTree(p, send, recv, count, t, op,
                           TreeAllReduceHalves(count * DataTypeSize(t), size_, link_));
    case Algorithm::kDirect: return AllReduceDirect(p, send, recv, count, t, op);
    default:
      if (RingByPlacement(count * DataTypeSize(t))) {
        ReorderedPeers by_cpu(p, ring_order_);
        return AllReduceRing(by_cpu, send, recv, count, t, op);
      }
      return AllReduceRing(p, send, recv, count, t, op);
  }
}

bool Communicator::RingByPlacement(size_t bytes) const {
  // Where ranks share CPUs (hcomm_run pins 4 ranks round robin to 2 CPUs),
  // a ring in rank order crosses between CPUs on every hop; in
  // ring_order_ half the hops stay on one CPU. 4 ranks on the 2 CPUs here
  // over TCP, CPUs behind different caches, 6 alternations of
  // `hcomm_bench allreduce` (medians): 2 MiB 2.53 -> 2.02 ms, 4 MiB 4.16 ->
  // 3.51, 8 MiB 7.55 -> 6.44, 16 MiB 15.9 -> 15.1; 8 ranks, 4 alternations:
  // 4 MiB 15.0 -> 13.2, 8 MiB 22.1 -> 20.3. Behind one cache 4 MiB was
  // level and 16 MiB slower (medians of 12: 19.4 -> 27.4 ms), so larger
  // vectors keep the rank order. Over shared-memory messages (a forced
  // ring, HCOMM_SHM_COLL=0), 8 alternations: level behind two caches, 5-8%
  // slower behind one (4 MiB 2.84 -> 2.99 ms), so ring_order_ is only
  // made where all members talk over TCP. The condition depends only on
  // what every member knows alike (the placements, the size), so all take
  // one order.
  constexpr size_t kMaxBytes = 4 << 20;
  return !ring_order_.empty() && bytes <= kMaxBytes;
}

std::function<absl::Status(Peers&, Algorithm)> Communicator::AllReduceBody(
    const void* send, void* recv, size_t count, DataType t, ReduceOp op) {
  if (IsHalfFloat(t)) {
    auto body = HalfFloat(send, recv, count, count, t, true,
                          [=](Peers& p, Algorithm a, const void* in, void* out, DataType dt) {
                            return RunAllReduce(p, a, in, out, count, dt, op);
                          });
    return [=](Peers& p, Algorithm a) -> absl::Status {
      if (a != Algorithm::kRing || HalfTravelsAsIs(a)) return body(p, a);
      // The ring's allgather moves the rounded 16-bit blocks.
      HCOMM_ASSIGN_OR_RETURN(WideBuffers w, Widen(send, count, count, t));
      if (RingByPlacement(count * sizeof(float))) {
        ReorderedPeers by_cpu(p, ring_order_);
        return AllReduceRingNarrowGather(by_cpu, w.in, w.out, recv, count, t, op);
      }
      return AllReduceRingNarrowGather(p, w.in, w.out, recv, count, t, op);
    };
  }
  return [=](Peers& p, Algorithm a) { return RunAllReduce(p, a, send, recv, count, t, op); };
}

absl::Status Communicator::AllReduce(const void* send, void* recv, size_t count, DataType t,
                                     ReduceOp op) {
  const ShmArgs shm{send, recv};
  if (IsHalfFloat(t)) {
    return RunCollective(CollectiveOp::kAllReduce, count * DataTypeSize(t), t, op, -1, count,
                         AllReduceBody(send, recv, count, t, op), &shm);
  }
  // Not through a std::function: a small allreduce allocates nothing.
  return RunCollective(
      CollectiveOp::kAllReduce, count * DataTypeSize(t), t, op, -1, count,
      [&](Peers& p, Algorithm a) { return RunAllReduce(p, a, send, recv, count, t, op); }, &shm);
}

absl::Status Communicator::Broadcast(void* buf, size_t count, DataType t, int root) {
  HCOMM_RETURN_IF_ERROR(CheckRoot(CollectiveOp::kBroadcast, root));
  size_t bytes = count * DataTypeSize(t);
  const ShmArgs shm{buf, buf};
  return RunCollective(CollectiveOp::kBroadcast, bytes, t, ReduceOp::kSum, root, count,
                       [&](Peers& p, Algorithm a) {
                         switch (a) {
                           case Algorithm::kTree: return BroadcastBinomial(p, buf, bytes, root);
                           case Algorithm::kDirect: return BroadcastDirect(p, buf, bytes, root);
                           default: return BroadcastRing(p, buf, bytes, root);
                         }
                       },
                       &shm);
}

absl::Status Communicator::Reduce(const void* send, void* recv, size_t count, DataType t,
                                  ReduceOp op, int root) {
  HCOMM_RETURN_IF_ERROR(CheckRoot(CollectiveOp::kReduce, root));
  size_t bytes = count * DataTypeSize(t);
  const ShmArgs shm{send, recv};
  auto run = [=](Peers& p, Algorithm a, const void* in, void* out, DataType dt) {
    switch (a) {
      case Algorithm::kTree: return ReduceBinomial(p, in, out, count, dt, op, root);
      case Algorithm::kDirect: return ReduceDirect(p, in, out, count, dt, op, root);
      default: return ReduceRing(p, in, out, count, dt, op, root);
    }
  };
  if (IsHalfFloat(t)) {
    return RunCollective(CollectiveOp::kReduce, bytes, t, op, root, count,
                         HalfFloat(send, recv, count, count, t, rank_ == root, run), &shm);
  }
  return RunCollective(
      CollectiveOp::kReduce, bytes, t, op, root, count,
      [&](Peers& p, Algorithm a) { return run(p, a, send, recv, t); }, &shm);
}

absl::Status Communicator::AllGather(const void* send, void* recv, size_t sendcount,
                                     DataType t) {
  size_t per = sendcount * DataTypeSize(t);
  const ShmArgs shm{send, recv};
  return RunCollective(CollectiveOp::kAllGather, per * size_, t, ReduceOp::kSum, -1, sendcount,
                       [&](Peers& p, Algorithm a) {
                         switch (a) {
                           case Algorithm::kTree:
                             return AllGatherRecursiveDoubling(p, send, recv, per);
                           case Algorithm::kDirect: return AllGatherDirect(p, send, recv, per);
                           default: return AllGatherRing(p, send, recv, per);
                         }
                       },
                       &shm);
}

absl::Status Communicator::ReduceScatter(const void* send, void* recv, size_t recvcount,
                                         DataType t, ReduceOp op) {
  size_t per = recvcount * DataTypeSize(t);
  const ShmArgs shm{send, recv};
  auto run = [=](Peers& p, Algorithm a, const void* in, void* out, DataType dt) {
    if (a == Algorithm::kDirect) return ReduceScatterDirect(p, in, out, recvcount, dt, op);
    return ReduceScatterRing(p, in, out, recvcount, dt, op);
  };
  if (IsHalfFloat(t)) {
    return RunCollective(CollectiveOp::kReduceScatter, per * size_, t, op, -1, recvcount,
                         HalfFloat(send, recv, recvcount * size_, recvcount, t, true, run),
                         &shm);
  }
  return RunCollective(
      CollectiveOp::kReduceScatter, per * size_, t, op, -1, recvcount,
      [&](Peers& p, Algorithm a) { return run(p, a, send, recv, t); }, &shm);
}

absl::Status Communicator::AllToAll(const void* send, void* recv, size_t count, DataType t) {
  size_t per = count * DataTypeSize(t);
  const ShmArgs shm{send, recv};
  return RunCollective(CollectiveOp::kAllToAll, per * size_, t, ReduceOp::kSum, -1, count,
                       [&](Peers& p, Algorithm) { return AllToAllDirect(p, send, recv, per); },
                       &shm);
}

absl::Status Communicator::Gather(const void* send, void* recv, size_t sendcount, DataType t,
                                  int root) {
  HCOMM_RETURN_IF_ERROR(CheckRoot(CollectiveOp::kGather, root));
  size_t per = sendcount * DataTypeSize(t);
  const ShmArgs shm{send, recv};
  return RunCollective(CollectiveOp::kGather, per * size_, t, ReduceOp::kSum, root, sendcount,
                       [&](Peers& p, Algorithm a) {
                         if (a == Algorithm::kTree) return GatherBinomial(p, send, recv, per, root);
                         return GatherDirect(p, send, recv, per, root);
                       },
                       &shm);
}

absl::Status Communicator::Scatter(const void* send, void* recv, size_t recvcount, DataType t,
                                   int root) {
  HCOMM_RETURN_IF_ERROR(CheckRoot(CollectiveOp::kScatter, root));
  size_t per = recvcount * DataTypeSize(t);
  const ShmArgs shm{send, recv};
  return RunCollective(CollectiveOp::kScatter, per * size_, t, ReduceOp::kSum, root, recvcount,
                       [&](Peers& p, Algorithm a) {
                         if (a == Algorithm::kTree) {
                           return ScatterBinomial(p, send, recv, per, root);
                         }
                         return ScatterDirect(p, send, recv, per, root);
                       },
                       &shm);
}

absl::Status Communicator::Barrier() {
  const ShmArgs shm{nullptr, nullptr};
  return RunCollective(CollectiveOp::kBarrier, 0, DataType::kUint8, ReduceOp::kSum, -1, 0,
                       [&](Peers& p, Algorithm) { return BarrierDissemination(p); }, &shm);
}

absl::StatusOr<std::shared_ptr<Request>> Communicator::IAllReduce(const void* send, void* recv,
                                                                  size_t count, DataType t,
                                                                  ReduceOp op) {
  auto r = std::make_shared<Request>();
  r->kind = Request::Kind::kCollective;
  r->started = absl::Now();
  r->bytes = count * DataTypeSize(t);
  r->elem_size = DataTypeSize(t);
  r->out_source = engine_->rank();
  // The ticket is taken now, so the order of collectives is the call order
  // even though this one runs on the worker thread.
  uint64_t ticket = TakeTicket();
  auto body = AllReduceBody(send, recv, count, t, op);
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
  work_.push_back([this, r, ticket, body, count, t, op, send, recv] {
    const ShmArgs shm{send, recv};
    absl::Status s = RunTicket(ticket, CollectiveOp::kAllReduce, count * DataTypeSize(t), t, op,
                               -1, count, body, &shm);
    r->out_bytes = r->bytes;
    {
      absl::MutexLock l(&work_mu_);
      --iallreduces_pending_;  // before its waiter can see it done
    }
    engine_->CompleteExternal(r, s);
  });
  return r;
}

// ---------------------------------------------------------------------------
// Groups

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::MakeChild(
    std::vector<int> members_world, uint32_t ctx) {
  Options o;
  o.timeout_ms = timeout_ms_.load();
  o.algo = AlgorithmName(forced_algo_.load());
  std::unique_ptr<Communicator> child(
      new Communicator(engine_, std::move(members_world), ctx, o));
  HCOMM_RETURN_IF_ERROR(child->SetUpShmCollective());
  HCOMM_RETURN_IF_ERROR(child->SetUpRingOrder());
  return child;
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
  shm_coll_.reset();
  absl::Status s;
  // The connections are shared by the world and every group made from it:
  // the last of them to go closes them, whichever it is.
  if (engine_->LeaveCommunicator()) {
    s = engine_->Destroy();
  } else {
    engine_->CloseContexts(p2p_ctx_, 2, Deadline());
  }
  for (Scratch& sc : scratch_) {
    if (sc.data != nullptr) ::munmap(sc.data, sc.capacity);
    sc = Scratch();
  }
  return s;
}

}  // namespace hcomm
