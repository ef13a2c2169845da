// A communicator's profiling (API.md, "Profiling"; core/profile): the
// spans of its collectives and point-to-point calls, and at the world's
// destroy the merged trace file that rank 0 writes.
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/spin.h"
#include "core/base/status.h"
#include "core/comm/collective_peers.h"
#include "core/comm/communicator.h"
#include "core/profile/trace.h"

namespace hcomm {
namespace {

// The setup-tag rounds of the profile's exchanges (the communicator's own
// setup uses kSetupTag + 0..3).
constexpr int kClockRound = 8;
constexpr int kSpansRound = 9;
// Ping-pongs per rank for its clock's offset; the one of least round trip
// counts.
constexpr int kClockPings = 16;
// How long the gather may take at most, whatever timeout_ms says: a rank
// that does not come is named in the file.
constexpr absl::Duration kMostGather = absl::Seconds(30);
// A rank's trace text: more is refused as malformed.
constexpr uint64_t kMostBody = uint64_t{1} << 32;

bool HasRoot(CollectiveOp op) {
  return op == CollectiveOp::kBroadcast || op == CollectiveOp::kReduce ||
         op == CollectiveOp::kGather || op == CollectiveOp::kScatter;
}

// What each rank sends rank 0 before its trace text.
struct BodyHeader {
  uint64_t bytes;
  uint64_t dropped;
};

// What rank 0 sends each rank: its clock's offset and the common epoch.
struct ClockNote {
  int64_t offset_ns;
  int64_t epoch_ns;
};

}  // namespace

void Communicator::ProfileAsStream(int index, int priority) {
  if (profile_ == nullptr) return;
  profile_stream_ = index;
  profile_priority_ = priority;
  profile_track_ =
      profile_->NamedTrack(absl::StrCat("stream ", index, " (priority ", priority, ")"));
}

void Communicator::RecordCollective(const CollectiveCall& call, uint64_t ticket,
                                    int64_t start_ns, Algorithm algo, const absl::Status& s) {
  const int64_t end = Recorder::Now();
  // Written in place, every field (the place may hold an older span).
  Span* sp = profile_->Slot();
  if (sp == nullptr) return;
  const bool barrier = call.op == CollectiveOp::kBarrier;
  sp->start_ns = start_ns;
  sp->end_ns = end;
  sp->name = CollectiveOpName(call.op);
  sp->dtype = barrier ? nullptr : DataTypeName(call.dtype);
  sp->redop = Reduces(call.op) ? ReduceOpName(call.reduce) : nullptr;
  sp->algo = algo != Algorithm::kAuto ? AlgorithmName(algo) : nullptr;
  sp->status = s.ok() ? nullptr : ErrorCodeName(CodeOf(s));
  sp->count = barrier ? 0 : call.count;
  sp->bytes = barrier ? 0 : call.count * DataTypeSize(call.dtype);
  sp->seq = static_cast<int64_t>(ticket);
  sp->comm = coll_ctx_;
  sp->peer = -1;
  sp->tag = -1;
  sp->root = HasRoot(call.op) ? call.root : -1;
  sp->stream = profile_stream_;
  sp->task = -1;
  sp->priority = profile_priority_;
  sp->cat = profile_stream_ >= 0 ? SpanCat::kStream : SpanCat::kCollective;
  if (profile_stream_ >= 0) sp->track = profile_track_;
}

namespace {

// A point-to-point call's span, ending now.
void RecordP2pSpan(Recorder& rec, const char* name, int64_t start_ns, size_t bytes,
                   size_t elem_size, uint32_t comm, int peer, int tag, int stream, int priority,
                   int track, const absl::Status& s) {
  const int64_t end = Recorder::Now();
  Span* sp = rec.Slot();
  if (sp == nullptr) return;
  sp->start_ns = start_ns;
  sp->end_ns = end;
  sp->name = name;
  sp->dtype = sp->redop = sp->algo = nullptr;
  sp->status = s.ok() ? nullptr : ErrorCodeName(CodeOf(s));
  sp->bytes = bytes;
  sp->count = elem_size > 0 ? bytes / elem_size : bytes;
  sp->seq = -1;
  sp->comm = comm;
  sp->peer = peer;
  sp->tag = tag;
  sp->root = -1;
  sp->stream = stream;
  sp->task = -1;
  sp->priority = priority;
  sp->cat = stream >= 0 ? SpanCat::kStream : SpanCat::kP2p;
  if (track != 0) sp->track = track;
}

// What a nonblocking point-to-point request holds (Request::keep) while
// profiling: its call as posted, and what it kept before.
struct ProfiledRequest {
  std::shared_ptr<Recorder> recorder;
  std::shared_ptr<void> keep;
  absl::Status (*finish)(Request&) = nullptr;
  std::shared_ptr<const std::vector<int>> world_to_group;
  const char* name;
  int64_t start_ns;
  size_t bytes;
  size_t elem_size;
  uint32_t comm;
  int peer;
  int tag;
};

// Request::finish of a profiled request: its own finish step, then its span
// from the post until now (the first wait or test that saw it end).
absl::Status FinishProfiled(Request& r) {
  std::shared_ptr<ProfiledRequest> p = std::static_pointer_cast<ProfiledRequest>(r.keep);
  r.keep = std::move(p->keep);
  absl::Status s = p->finish != nullptr ? p->finish(r) : absl::OkStatus();
  int peer = p->peer;
  size_t bytes = p->bytes;
  if (r.kind == Request::Kind::kRecv) {
    bytes = r.out_bytes;
    const std::vector<int>& w2g = *p->world_to_group;
    if (r.out_source >= 0 && static_cast<size_t>(r.out_source) < w2g.size()) {
      peer = w2g[r.out_source];
    }
  }
  RecordP2pSpan(*p->recorder, p->name, p->start_ns, bytes, p->elem_size, p->comm, peer,
                r.kind == Request::Kind::kRecv ? r.out_tag : p->tag, -1, 0, kRequestTrack,
                s.ok() ? r.status : s);
  return s;
}

}  // namespace

void Communicator::RecordP2p(const char* name, int64_t start_ns, size_t bytes, size_t elem_size,
                             int peer, int tag, const absl::Status& s) {
  RecordP2pSpan(*profile_, name, start_ns, bytes, elem_size, coll_ctx_, peer, tag,
                profile_stream_, profile_priority_, profile_stream_ >= 0 ? profile_track_ : 0, s);
}

void Communicator::RecordStreamSpan(const char* name, int64_t start_ns) {
  if (profile_ == nullptr) return;
  RecordP2pSpan(*profile_, name, start_ns, 0, 1, coll_ctx_, -1, -1, profile_stream_,
                profile_priority_, profile_stream_ >= 0 ? profile_track_ : 0, absl::OkStatus());
}

void Communicator::ProfileRequest(Request& r, const char* name, int64_t start_ns, size_t bytes,
                                  size_t elem_size, int peer, int tag) {
  auto p = std::make_shared<ProfiledRequest>();
  p->recorder = profile_;
  p->keep = std::move(r.keep);
  p->finish = r.finish;
  p->world_to_group = world_to_group_;
  p->name = name;
  p->start_ns = start_ns;
  p->bytes = bytes;
  p->elem_size = elem_size;
  p->comm = coll_ctx_;
  p->peer = peer;
  p->tag = tag;
  r.keep = std::move(p);
  r.finish = &FinishProfiled;
}

// Rank 0 measures each rank's clock against its own (the ping-pong of
// least round trip: offset = the midpoint of rank 0's send and receive
// less the other's reading, off by at most half that round trip) and tells
// it; then every rank sends its spans as trace text, on rank 0's clock,
// and rank 0 writes them one rank at a time, so that it holds one rank's
// text at once.
absl::Status Communicator::WriteProfile() {
  Recorder::Contents mine = profile_->Take();
  const absl::Duration limit = std::min(timeout(), kMostGather);
  CallInfo info{CollectiveOp::kGather, 0, 0, DataType::kUint8, ReduceOp::kSum, 0,
                Algorithm::kDirect, size_};
  ClockNote note{0, profile_->created_ns()};
  std::vector<double> error_us(size_, 0.0);
  {
    CollectivePeers peers(this, kSetupTag + kClockRound, 0, limit, info);
    InFlight io(peers);
    if (rank_ == 0) {
      for (int k = 1; k < size_; ++k) {
        int64_t best_rtt = INT64_MAX;
        ClockNote theirs{0, note.epoch_ns};
        for (int i = 0; i < kClockPings; ++i) {
          const int64_t t0 = MonoNs();
          int64_t reading = 0;
          HCOMM_RETURN_IF_ERROR(Annotate(io.Exchange(&t0, &reading, sizeof t0, k),
                                         absl::StrCat("profile: the clock of rank ", k)));
          const int64_t t1 = MonoNs();
          if (t1 - t0 < best_rtt) {
            best_rtt = t1 - t0;
            theirs.offset_ns = t0 + (t1 - t0) / 2 - reading;
          }
        }
        error_us[k] = static_cast<double>(best_rtt) / 2e3;
        HCOMM_RETURN_IF_ERROR(io.Send(&theirs, sizeof theirs, k));
        HCOMM_RETURN_IF_ERROR(io.WaitAll());
      }
    } else {
      for (int i = 0; i < kClockPings; ++i) {
        int64_t ping = 0;
        HCOMM_RETURN_IF_ERROR(io.Recv(&ping, sizeof ping, 0));
        HCOMM_RETURN_IF_ERROR(io.WaitAll());
        const int64_t reading = MonoNs();
        // Rank 0 sends and receives at once (Exchange): its receive of
        // this is posted already.
        HCOMM_RETURN_IF_ERROR(io.Send(&reading, sizeof reading, 0));
        HCOMM_RETURN_IF_ERROR(io.WaitAll());
      }
      HCOMM_RETURN_IF_ERROR(io.Recv(&note, sizeof note, 0));
      HCOMM_RETURN_IF_ERROR(io.WaitAll());
    }
  }
  const int world = group_to_world_[rank_];
  std::string body = TraceEvents(mine, world, note.offset_ns, note.epoch_ns);
  const size_t nspans = mine.spans.size();
  const uint64_t dropped = mine.dropped;
  mine = Recorder::Contents();
  CollectivePeers peers(this, kSetupTag + kSpansRound, 0, limit, info);
  InFlight io(peers);
  if (rank_ != 0) {
    BodyHeader h{body.size(), dropped};
    HCOMM_RETURN_IF_ERROR(io.Send(&h, sizeof h, 0));
    HCOMM_RETURN_IF_ERROR(io.Send(body.data(), body.size(), 0));
    return io.WaitAll();
  }
  // Written beside the target and renamed over it when whole: a reader
  // never sees half a file.
  const std::string tmp = absl::StrCat(profile_file_, ".tmp.", getpid());
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return Unavailable(absl::StrCat("profile: cannot write ", tmp, ": ", strerror(errno)));
  }
  TraceInfo t;
  t.nranks = size_;
  t.clock_error_us = error_us;
  t.dropped.assign(size_, 0);
  t.dropped[0] = dropped;
  size_t total = nspans;
  fputs(TraceBegin().c_str(), f);
  fwrite(body.data(), 1, body.size(), f);
  std::string().swap(body);
  absl::Status failed;
  for (int k = 1; k < size_; ++k) {
    BodyHeader h{0, 0};
    absl::Status s = io.Recv(&h, sizeof h, k);
    if (s.ok()) s = io.WaitAll();
    if (s.ok() && h.bytes > kMostBody) {
      s = Internal(absl::StrCat("profile: rank ", k, " sends ", h.bytes, " bytes of trace"));
    }
    std::string theirs;
    if (s.ok()) {
      theirs.resize(h.bytes);
      s = io.Recv(theirs.data(), theirs.size(), k);
      if (s.ok()) s = io.WaitAll();
    }
    if (!s.ok()) {
      // The rest of the ranks wait on sends that rank 0 no longer takes:
      // their own limit ends them.
      t.missing.push_back(k);
      if (failed.ok()) failed = s;
      for (int j = k + 1; j < size_; ++j) t.missing.push_back(j);
      break;
    }
    t.dropped[k] = h.dropped;
    fputs(",\n", f);
    fwrite(theirs.data(), 1, theirs.size(), f);
  }
  fputs(TraceEnd(t).c_str(), f);
  const bool written = ferror(f) == 0;
  if (fclose(f) != 0 || !written || rename(tmp.c_str(), profile_file_.c_str()) != 0) {
    const std::string why = strerror(errno);
    remove(tmp.c_str());
    return Unavailable(absl::StrCat("profile: cannot write ", profile_file_, ": ", why));
  }
  double worst = 0;
  for (double e : error_us) worst = std::max(worst, e);
  uint64_t lost = 0;
  for (uint64_t d : t.dropped) lost += d;
  fprintf(stderr,
          "hcomm: profile of %d ranks written to %s (rank 0: %zu spans; %llu dropped in all; "
          "clocks aligned to within %.1f us)%s\n",
          size_ - static_cast<int>(t.missing.size()), profile_file_.c_str(), total,
          static_cast<unsigned long long>(lost), worst,
          t.missing.empty() ? "" : "; some ranks' spans are missing");
  return failed;
}

}  // namespace hcomm
