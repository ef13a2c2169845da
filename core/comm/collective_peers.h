// What a collective call is to its communicator (core/comm/ internal): its
// tags, its fingerprint, its description, and the point-to-point view its
// algorithm runs on (CollectivePeers), shared by communicator.cc,
// collectives.cc and hang_report.cc.
#ifndef HCOMM_CORE_COMM_COLLECTIVE_PEERS_H_
#define HCOMM_CORE_COMM_COLLECTIVE_PEERS_H_

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/clock.h"
#include "core/base/interrupt.h"
#include "core/base/status.h"
#include "algorithms/kernels/half.h"
#include "core/comm/communicator.h"
#include "core/comm/wire_codec.h"
#include "core/p2p/engine.h"

namespace hcomm {
// Collective tags: the call's sequence number, below kSetupTag; the
// communicator's own setup exchanges use kSetupTag and up.
constexpr int kCollectiveTagMask = 0x3fffffff;
constexpr int kSetupTag = 0x40000000;
// The exchange of HCOMM_CHECK_COLLECTIVES before a collective: kCheckTag and
// the low bits of its sequence number (clear of the setup tags' few rounds).
constexpr int kCheckTag = 0x60000000;
constexpr int kCheckTagMask = 0x1fffffff;

inline Algorithm ParseAlgo(const std::string& s) {
  if (s == "ring") return Algorithm::kRing;
  if (s == "tree") return Algorithm::kTree;
  if (s == "direct") return Algorithm::kDirect;
  return Algorithm::kAuto;
}

inline bool DebugInfo() {
  const char* d = getenv("HCOMM_DEBUG");
  return d != nullptr && (strcmp(d, "INFO") == 0 || strcmp(d, "info") == 0 ||
                          strcmp(d, "TRACE") == 0 || strcmp(d, "trace") == 0);
}

inline std::string Bytes(size_t b) {
  if (b >= (size_t{1} << 30) && b % (size_t{1} << 30) == 0) return absl::StrCat(b >> 30, " GiB");
  if (b >= (size_t{1} << 20) && b % (size_t{1} << 20) == 0) return absl::StrCat(b >> 20, " MiB");
  if (b >= 1024 && b % 1024 == 0) return absl::StrCat(b >> 10, " KiB");
  return absl::StrCat(b, " B");
}

// A collective's fingerprint: what this rank is doing, sent with every
// message of the call. Bit 63 marks it; then bits 32-34 of the count (3),
// op (4 bits), dtype (4), reduce op (3), root + 1 (17) and the low 32 bits
// of the count: counts below 2^35 are told apart exactly.
inline uint64_t Fingerprint(CollectiveOp op, size_t count, DataType t, ReduceOp rop, int root) {
  return (uint64_t{1} << 63) | (static_cast<uint64_t>(count >> 32) & 0x7) << 60 |
         (static_cast<uint64_t>(op) & 0xf) << 56 | (static_cast<uint64_t>(t) & 0xf) << 52 |
         (static_cast<uint64_t>(rop) & 0x7) << 49 |
         (static_cast<uint64_t>(root + 1) & 0x1ffff) << 32 | (count & 0xffffffffu);
}

// In a fingerprint's dtype field: float32 that travels as fp16 / bf16
// (compression), so that ranks whose settings differ fail with Mismatch
// rather than read each other's pieces wrongly.
constexpr uint64_t kFloat32AsFp16 = 14;
constexpr uint64_t kFloat32AsBf16 = 15;
inline uint64_t CompressedFingerprint(uint64_t fp, HalfFormat f) {
  return (fp & ~(uint64_t{0xf} << 52)) |
         (f == HalfFormat::kFp16 ? kFloat32AsFp16 : kFloat32AsBf16) << 52;
}
inline std::string FingerprintTypeName(uint64_t fp) {
  const uint64_t t = (fp >> 52) & 0xf;
  if (t == kFloat32AsFp16) return "float32 (fp16 on the wire)";
  if (t == kFloat32AsBf16) return "float32 (bf16 on the wire)";
  return DataTypeName(static_cast<DataType>(t));
}

// The fingerprint of a call that its rank rejected for its arguments
// (RejectCollective): an op no collective has.
constexpr uint64_t kRejectedFingerprint = uint64_t{1} << 63 | uint64_t{0xf} << 56;

// "allreduce(count 10 float32 sum)", "broadcast(count 10 int32 root 1)".
inline std::string DescribeFingerprint(uint64_t fp) {
  auto op = static_cast<CollectiveOp>((fp >> 56) & 0xf);
  auto rop = static_cast<ReduceOp>((fp >> 49) & 0x7);
  int root = static_cast<int>((fp >> 32) & 0x1ffff) - 1;
  const uint64_t count = ((fp >> 60) & 0x7) << 32 | (fp & 0xffffffffu);
  std::string out = absl::StrCat(CollectiveOpName(op), "(count ", count);
  if (op != CollectiveOp::kBarrier) absl::StrAppend(&out, " ", FingerprintTypeName(fp));
  if (op == CollectiveOp::kAllReduce || op == CollectiveOp::kReduce ||
      op == CollectiveOp::kReduceScatter) {
    absl::StrAppend(&out, " ", ReduceOpName(rop));
  }
  if (root >= 0) absl::StrAppend(&out, " root ", root);
  return out + ")";
}


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
  std::string Describe() const {
    std::string what = absl::StrCat(CollectiveOpName(op), " seq ", seq, " (count ", count);
    if (op != CollectiveOp::kBarrier) absl::StrAppend(&what, " ", DataTypeName(t));
    if (op == CollectiveOp::kAllReduce || op == CollectiveOp::kReduce ||
        op == CollectiveOp::kReduceScatter) {
      absl::StrAppend(&what, " ", ReduceOpName(rop));
    }
    if (root >= 0) absl::StrAppend(&what, " root ", root);
    absl::StrAppend(&what, ", ", AlgorithmName(algo), ", ", nranks, " ranks)");
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
  MonoTime Began() const { return final_deadline_ - timeout_; }
  void StartClock() {
    if (clock_started_) return;
    clock_started_ = true;
    final_deadline_ = MonoNow() + timeout_;
    deadline_ = final_deadline_ - Engine::ReportReserve(timeout_);
  }
  int rank() const override { return c_->rank_; }
  int size() const override { return c_->size_; }
  // From here on, pieces of float32 to and from ranks that CompressesTo
  // travel as `f` (core/comm/wire_codec.h): a receiver tells a 16-bit
  // piece by its half size and decodes it in place in Wait.
  // `out`/`out_bytes` (an allreduce's output, else null): a piece sent
  // from there is a (partial or final) result, rounded in place as its
  // receivers will see it, so that every rank ends with the same bits (a
  // partial sum sent on is not used again by its sender).
  void CompressFloats(HalfFormat f, void* out = nullptr, size_t out_bytes = 0) {
    half_ = true;
    half_format_ = f;
    round_lo_ = static_cast<char*>(out);
    round_hi_ = round_lo_ + out_bytes;
  }
  absl::StatusOr<std::shared_ptr<Request>> Isend(const void* buf, size_t bytes,
                                                 int peer) override {
    if (ABSL_PREDICT_FALSE(half_) && c_->CompressesTo(peer)) {
      if (std::unique_ptr<uint16_t[]> wire = EncodeForWire(half_format_, buf, bytes)) {
        RoundLikeWire(buf, bytes, wire.get());
        auto r = c_->engine_->Isend(c_->coll_ctx_, wire.get(), bytes / 2, 1,
                                    c_->group_to_world_[peer], wire_tag_, fp_);
        if (!r.ok()) return Explain(r.status());
        (*r)->keep = std::shared_ptr<uint16_t[]>(std::move(wire));
        return r;
      }
    }
    auto r = c_->engine_->Isend(c_->coll_ctx_, buf, bytes, 1, c_->group_to_world_[peer], wire_tag_,
                                  fp_);
    if (!r.ok()) return Explain(r.status());
    return r;
  }
  bool SendNow(const void* buf, size_t bytes, int peer) override {
    if (ABSL_PREDICT_FALSE(half_) && c_->CompressesTo(peer)) {
      if (std::unique_ptr<uint16_t[]> wire = EncodeForWire(half_format_, buf, bytes)) {
        const bool sent = c_->engine_->SendNow(c_->coll_ctx_, wire.get(), bytes / 2,
                                               c_->group_to_world_[peer], wire_tag_, fp_);
        if (sent) RoundLikeWire(buf, bytes, wire.get());
        return sent;
      }
    }
    return c_->engine_->SendNow(c_->coll_ctx_, buf, bytes, c_->group_to_world_[peer], wire_tag_,
                                fp_);
  }
  bool RecvNow(void* buf, size_t bytes, int peer) override {
    // (Takes exactly `bytes`: a piece that may come as 16-bit goes by Irecv.)
    if (ABSL_PREDICT_FALSE(half_) && c_->CompressesTo(peer)) return false;
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
    if (r->kind == Request::Kind::kSend) {
      r->keep.reset();  // the encoded copy, if any
      return absl::OkStatus();
    }
    if (ABSL_PREDICT_FALSE(half_) && r->out_bytes * 2 == r->bytes && r->bytes % 4 == 0 &&
        r->bytes > 0) {
      DecodeHalfInPlace(half_format_, r->recv_buf, r->bytes / 4);
      r->out_bytes = r->bytes;
    }
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
      if (!h.ok()) return Explain(c_->engine_->Told(h));  // the caller is told
      world.push_back(c_->group_to_world_[g]);
    }
    StartClock();
    const MonoTime now = MonoNow();
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
  MonoTime final_deadline_;
  MonoTime deadline_;
  CallInfo info_;
  // A piece of the allreduce's output that travels compressed takes the
  // value its receivers decode (CompressFloats).
  void RoundLikeWire(const void* buf, size_t bytes, const uint16_t* wire) {
    const char* p = static_cast<const char*>(buf);
    if (p >= round_lo_ && p + bytes <= round_hi_ && round_lo_ != nullptr) {
      DecodeHalf(half_format_, wire, bytes / 4, reinterpret_cast<float*>(const_cast<char*>(p)));
    }
  }
  bool half_ = false;
  HalfFormat half_format_ = HalfFormat::kFp16;
  char* round_lo_ = nullptr;
  char* round_hi_ = nullptr;
  std::string What() const { return info_.Describe(); }
};

}  // namespace hcomm

#endif  // HCOMM_CORE_COMM_COLLECTIVE_PEERS_H_
