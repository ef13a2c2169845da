#include "algorithms/shm_collective.h"

#include "algorithms/shm_collective_layout.h"
#include "core/base/clock.h"
#include "core/base/priority.h"

namespace hcomm {

size_t ShmCollective::SegmentSize(int nranks, size_t slot_bytes) {
  const size_t n = static_cast<size_t>(nranks);
  return RoundUp(sizeof(Header), kLine) + n * sizeof(RankLine) +
         (2 * n + 2) * slot_bytes;  // two slots per rank, two results
}

ShmCollective::ShmCollective(std::string name, int rank, int nranks, void* base, size_t bytes,
                             size_t slot_bytes)
    : name_(std::move(name)),
      rank_(rank),
      n_(nranks),
      base_(base),
      bytes_(bytes),
      slot_bytes_(slot_bytes),
      reduce_methods_(kReduceClasses, CopyChooser(1.0)) {
  char* p = static_cast<char*>(base);
  hdr_ = reinterpret_cast<Header*>(p);
  lines_ = reinterpret_cast<RankLine*>(p + RoundUp(sizeof(Header), kLine));
  data_ = p + RoundUp(sizeof(Header), kLine) + static_cast<size_t>(nranks) * sizeof(RankLine);
  RankLine& me = lines_[rank];
  me.pid.store(getpid(), std::memory_order_relaxed);
  me.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_relaxed);
  // Any word that the segment's fresh zeros are not: the probe reads it
  // through this process and compares it with the segment's.
  me.probe.store(static_cast<uint64_t>(MonoNs()) ^ reinterpret_cast<uintptr_t>(base) ^
                     (static_cast<uint64_t>(getpid()) << 32) ^ 0x9e3779b97f4a7c15ULL,
                 std::memory_order_release);
  AllowCmaReadersIfAsked();
}

bool ShmCollective::ProbeCma() const {
  for (int j = 0; j < n_; ++j) {
    if (j == rank_) continue;
    const RankLine& l = lines_[j];
    const uint64_t want = l.probe.load(std::memory_order_acquire);
    // The same word through rank j's own mapping of the segment.
    const uint64_t at = l.base.load(std::memory_order_relaxed) +
                        static_cast<uint64_t>(reinterpret_cast<const char*>(&l.probe) -
                                              static_cast<const char*>(base_));
    uint64_t got = 0;
    if (!ReadFrom(j, at, reinterpret_cast<char*>(&got), sizeof got, 0).ok() || got != want ||
        want == 0) {
      return false;
    }
  }
  return true;
}

ShmCollective::~ShmCollective() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

absl::StatusOr<std::unique_ptr<ShmCollective>> ShmCollective::Create(const std::string& name,
                                                                     int rank, int nranks,
                                                                     size_t most_slot_bytes) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return InvalidArgument(absl::StrCat("shm collective: rank ", rank, " of ", nranks));
  }
  if (most_slot_bytes < kMinSlotBytes || most_slot_bytes > kSlotBytes ||
      (most_slot_bytes & (most_slot_bytes - 1)) != 0) {
    return InvalidArgument(absl::StrCat("shm collective: slots of ", most_slot_bytes, " bytes"));
  }
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Unavailable(absl::StrCat("shm_open(", name, "): ", strerror(errno)));
  }
  auto fail = [&](absl::Status s) {
    close(fd);
    shm_unlink(name.c_str());
    return s;
  };
  // Where whole slots do not fit, smaller ones still keep the collectives
  // off the message path.
  absl::StatusOr<size_t> reserved = ReserveHalving(
      fd, name, most_slot_bytes, kMinSlotBytes, [&](size_t s) { return SegmentSize(nranks, s); });
  if (!reserved.ok()) return fail(reserved.status());
  const size_t slot = *reserved;
  const size_t bytes = SegmentSize(nranks, slot);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) {
    return fail(OutOfMem(absl::StrCat("cannot map ", name, ": ", strerror(errno))));
  }
  close(fd);
  KeepFromForks(base, bytes);
  std::unique_ptr<ShmCollective> c(new ShmCollective(name, rank, nranks, base, bytes, slot));
  // A fresh mapping is zero: counters and seqlocks start at 0.
  c->hdr_->nranks = static_cast<uint64_t>(nranks);
  c->hdr_->slot_bytes = slot;
  c->JoinFences();
  std::atomic_thread_fence(std::memory_order_release);
  reinterpret_cast<std::atomic<uint64_t>*>(&c->hdr_->magic)->store(kMagic,
                                                                 std::memory_order_release);
  return c;
}

absl::StatusOr<std::unique_ptr<ShmCollective>> ShmCollective::Open(const std::string& name,
                                                                   int rank, int nranks) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return InvalidArgument(absl::StrCat("shm collective: rank ", rank, " of ", nranks));
  }
  // Checked on the descriptor that is mapped: another user's file, or one
  // others may write, is refused (core/base/shm_file.h).
  struct stat st;
  HCOMM_ASSIGN_OR_RETURN(const int fd, OpenExistingSegment(name, &st));
  // The creator chose the slots' size (and wrote it before the magic): a
  // size it could have chosen, and the file's size for it.
  size_t bytes = static_cast<size_t>(st.st_size), slot = 0;
  for (size_t s = kSlotBytes; s >= kMinSlotBytes; s /= 2) {
    if (SegmentSize(nranks, s) == bytes) slot = s;
  }
  if (slot == 0) {
    close(fd);
    return Unavailable(absl::StrCat(name, " is not a segment for ", nranks, " ranks"));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    return OutOfMem(absl::StrCat("cannot map ", name, ": ", strerror(errno)));
  }
  KeepFromForks(base, bytes);
  std::unique_ptr<ShmCollective> c(new ShmCollective(name, rank, nranks, base, bytes, slot));
  const uint64_t magic =
      reinterpret_cast<std::atomic<uint64_t>*>(&c->hdr_->magic)->load(std::memory_order_acquire);
  if (magic != kMagic || c->hdr_->nranks != static_cast<uint64_t>(nranks) ||
      c->hdr_->slot_bytes != slot) {
    return Unavailable(absl::StrCat(name, " has another layout"));
  }
  c->JoinFences();
  return c;
}

void ShmCollective::JoinFences() {
  light_ = RegisterAsymmetricFences();
  if (!light_) hdr_->fenced.store(1, std::memory_order_relaxed);
}

bool ShmCollective::light_fences() const {
  return light_ && hdr_->fenced.load(std::memory_order_relaxed) == 0;
}

void ShmCollective::Unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  shm_unlink(name_.c_str());
}

char* ShmCollective::Slot(int rank, int buf) const {
  return data_ + (static_cast<size_t>(rank) * 2 + buf) * slot_bytes_;
}

char* ShmCollective::Result(int buf) const {
  return data_ + (static_cast<size_t>(n_) * 2 + buf) * slot_bytes_;
}

void ShmCollective::Enter(uint64_t seq, uint64_t fingerprint) {
  RankLine& me = lines_[rank_];
  const uint64_t v = me.version.load(std::memory_order_relaxed);
  me.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  me.seq.store(seq + 1, std::memory_order_relaxed);  // 0: has entered none
  me.fingerprint.store(fingerprint, std::memory_order_relaxed);
  me.version.store(v + 2, std::memory_order_release);
}

void ShmCollective::Arrive(uint64_t gen, uint64_t fingerprint) {
  lines_[rank_].round_fp[gen & 1].store(fingerprint, std::memory_order_relaxed);
  Publish(0, gen);
}

int ShmCollective::Sleepers() const {
  return static_cast<int>(hdr_->sleepers.load(std::memory_order_relaxed));
}

void ShmCollective::Publish(int which, uint64_t gen) {
  RankLine& me = lines_[rank_];
  (which == 0 ? me.arrived : me.reduced).store(gen, std::memory_order_release);
  // Pairs with the sleeper's fence: either it sees the new counter before
  // it sleeps, or we see it counted and wake it.
  LightFence(light_fences());
  if (hdr_->sleepers.load(std::memory_order_relaxed) > 0) {
    hdr_->bell.fetch_add(1, std::memory_order_release);
    FutexWake(&hdr_->bell, INT_MAX, /*shared=*/true);
  }
}

absl::Status ShmCollective::WaitAll(int which, uint64_t gen, uint64_t seq, uint64_t fingerprint,
                                    ShmWaiter& waiter) {
  HCOMM_RETURN_IF_ERROR(WaitCounters(which, gen, seq, fingerprint, waiter));
  if (which != 0) return absl::OkStatus();
  // Everyone has written round gen, and none can write its buffer again
  // before we arrive at the next round: their fingerprints stay put.
  for (int j = 0; j < n_; ++j) {
    const uint64_t theirs = lines_[j].round_fp[gen & 1].load(std::memory_order_relaxed);
    if (theirs != fingerprint) return waiter.Clash(j, theirs);
  }
  return absl::OkStatus();
}

absl::Status ShmCollective::WaitCounters(int which, uint64_t gen, uint64_t seq,
                                         uint64_t fingerprint, ShmWaiter& waiter) {
  HCOMM_RETURN_IF_ERROR(waiter.Interrupted());
  auto counter = [&](int j) -> const std::atomic<uint64_t>& {
    return which == 0 ? lines_[j].arrived : lines_[j].reduced;
  };
  auto all_there = [&] {
    for (int j = 0; j < n_; ++j) {
      if (counter(j).load(std::memory_order_acquire) < gen) return false;
    }
    return true;
  };
  if (all_there()) return absl::OkStatus();
  // A stream's own thread yields and then sleeps at once: the program
  // computes meanwhile (core/base/priority.h).
  const bool background = OnBackgroundThread();
  const bool share = waiter.ShareCpu() || background;
  // Spin (or, sharing CPUs, yield) this long before sleeping on the bell;
  // the clock is first read at the first slow look.
  const int64_t spin_ns = background ? 0 : share ? 200'000 : 100'000;
  int64_t start = -1, next_check = 0;
  for (uint32_t i = 1;; ++i) {
    if (all_there()) return absl::OkStatus();
    if (share) {
      sched_yield();
    } else {
      CpuRelax();
    }
    if ((i & (share ? 15 : 1023)) != 0) continue;
    // Now and then: has someone entered another collective under our
    // sequence number? Is time up, or a peer gone?
    const int64_t now = MonoNs();
    if (start < 0) {
      start = now;
      next_check = now + 1'000'000;
    }
    std::vector<int> missing;
    for (int j = 0; j < n_; ++j) {
      if (counter(j).load(std::memory_order_acquire) >= gen) continue;
      missing.push_back(j);
      if (which != 0) continue;
      const RankLine& l = lines_[j];
      const uint64_t v1 = l.version.load(std::memory_order_acquire);
      const uint64_t their_seq = l.seq.load(std::memory_order_relaxed);
      const uint64_t their_fp = l.fingerprint.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      const uint64_t v2 = l.version.load(std::memory_order_relaxed);
      if (v1 == v2 && (v1 & 1) == 0 && their_seq == seq + 1 && their_fp != fingerprint) {
        return waiter.Clash(j, their_fp);
      }
    }
    if (missing.empty()) return absl::OkStatus();
    if (now >= next_check) {
      next_check = now + 1'000'000;
      HCOMM_RETURN_IF_ERROR(waiter.StillWaiting(missing, which == 0 ? "arrive" : "reduce"));
    }
    if (now - start < spin_ns) continue;
    // Sleep until a counter moves (or for a nap, to look around).
    hdr_->sleepers.fetch_add(1, std::memory_order_relaxed);
    const uint32_t bell = hdr_->bell.load(std::memory_order_acquire);
    HeavyFence(light_fences());
    if (!all_there()) {
      FutexWaitUntil(&hdr_->bell, bell, MonoNow() + absl::Nanoseconds(nap_ns_), /*shared=*/true);
    }
    hdr_->sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
}

inline char* ShmCollective::Area(int rank, int buf, size_t bytes) const {
  return bytes <= kInlineBytes ? reinterpret_cast<char*>(lines_[rank].inline_data[buf])
                               : Slot(rank, buf) + Offset(bytes);
}

size_t ShmCollective::Offset(size_t bytes) const {
  if (bytes < kRotateMinBytes || bytes > slot_bytes_ / 4) return 0;
  // Every rank's gen_ is the same in a round, and a buffer is written every
  // other round: its places in turn, each a whole number of pages.
  const size_t place = RoundUp(bytes, 4096);
  return (gen_ / 2) % (slot_bytes_ / place) * place;
}

bool ShmCollective::Streams(size_t moved) const {
  return static_cast<size_t>(n_) * moved >= kStreamTotalBytes;
}

void ShmCollective::CopyOut(void* dst, const void* src, size_t n, size_t moved) const {
  if (Streams(moved)) {
    StreamCopy(static_cast<char*>(dst), static_cast<const char*>(src), n);
  } else {
    memcpy(dst, src, n);
  }
}

void ShmCollective::CopyOwn(void* dst, const void* src, size_t n, size_t moved) const {
  const char* d = static_cast<const char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (d == s) return;
  if (d + n <= s || s + n <= d) {
    CopyOut(dst, src, n, moved);
  } else {
    memmove(dst, src, n);
  }
}

char* ShmCollective::Stage(size_t bytes) {
  if (stage_.size() < bytes) stage_.resize(bytes);
  return stage_.data();
}

template <typename Write, typename Read>
absl::Status ShmCollective::Round(size_t bytes, Write write, Read read, uint64_t seq,
                                  uint64_t fingerprint, ShmWaiter& waiter) {
  YieldToHigherPriority();  // between pieces (core/base/priority.h)
  const uint64_t gen = ++gen_;
  const int b = static_cast<int>(gen & 1);
  write(Area(rank_, b, bytes));
  Arrive(gen, fingerprint);
  HCOMM_RETURN_IF_ERROR(WaitAll(0, gen, seq, fingerprint, waiter));
  read(b);
  return absl::OkStatus();
}

absl::Status ShmCollective::AllReduce(const void* in, void* out, size_t count, DataType t,
                                      ReduceOp op, uint64_t seq, uint64_t fingerprint,
                                      ShmWaiter& waiter) {
  return ReduceTo(in, out, count, t, op, -1, seq, fingerprint, waiter);
}

absl::Status ShmCollective::Reduce(const void* in, void* out, size_t count, DataType t,
                                   ReduceOp op, int root, uint64_t seq, uint64_t fingerprint,
                                   ShmWaiter& waiter) {
  return ReduceTo(in, out, count, t, op, root, seq, fingerprint, waiter);
}

absl::Status ShmCollective::ReduceTo(const void* in, void* out, size_t count, DataType t,
                                     ReduceOp op, int root, uint64_t seq, uint64_t fingerprint,
                                     ShmWaiter& waiter) {
  const size_t bytes = count * DataTypeSize(t);
  if (count == 0) return absl::OkStatus();
  if (n_ == 1) {
    if (out != in) memmove(out, in, bytes);
    return absl::OkStatus();
  }
  if (bytes <= kSmallBytes) {
    return ReduceSmall(in, out, count, t, op, root, seq, fingerprint, waiter);
  }
  if (root < 0 && cma_ && bytes >= kCmaMinBytes) {
    return AllReduceCma(in, out, count, t, op, seq, fingerprint, waiter);
  }
  return ReduceLarge(in, out, count, t, op, root, seq, fingerprint, waiter);
}

absl::Status ShmCollective::ReduceSmall(const void* in, void* out, size_t count, DataType t,
                                        ReduceOp op, int root, uint64_t seq,
                                        uint64_t fingerprint, ShmWaiter& waiter) {
  const size_t bytes = count * DataTypeSize(t);
  // Every rank that gets the result reduces every slot, in rank order: one
  // round.
  return Round(
      bytes, [&](char* area) { memcpy(area, in, bytes); },
      [&](int b) {
        if (root >= 0 && root != rank_) return;
        ReduceParts(out, [&](int j) -> const char* { return Area(j, b, bytes); }, n_, count, t,
                    op, n_);
      },
      seq, fingerprint, waiter);
}

absl::Status ShmCollective::ReduceLarge(const void* in, void* out, size_t count, DataType t,
                                        ReduceOp op, int root, uint64_t seq,
                                        uint64_t fingerprint, ShmWaiter& waiter) {
  const size_t esize = DataTypeSize(t);
  const size_t bytes = count * esize;
  const bool gets = root < 0 || root == rank_;  // this rank gets the result
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const size_t per_round = ReduceRoundBytes() / esize;
  // Slices of a round, in whole cache lines.
  const size_t grain = std::max<size_t>(1, kLine / esize);
  struct Plan {
    size_t off, len;  // the round's elements
    size_t s0, s1;    // this rank reduces [s0, s1) of them
    uint64_t gen;
    int b;      // the round's buffers
    size_t at;  // its place in them
  };
  auto plan = [&](size_t off) {
    Plan p;
    p.off = off;
    p.len = std::min(per_round, count - off);
    p.gen = ++gen_;
    p.b = static_cast<int>(p.gen & 1);
    p.at = Offset(p.len * esize);
    const size_t q = RoundUp((p.len + n_ - 1) / n_, grain);
    p.s0 = std::min(p.len, q * rank_);
    p.s1 = std::min(p.len, p.s0 + q);
    return p;
  };
  // The call's method: how this rank writes its slot and its slice of the
  // result (below). Chosen by the time of whole calls of about this size,
  // which the copy's time alone misjudges: where CPUs sit behind two caches
  // the copies' own times favoured memcpy, and whole calls were slower with
  // it than streamed.
  // Ranks that share CPUs copy as the copier chooses: whole calls, timed
  // while ranks take turns on the CPUs, chose worse (measured:
  // docs/performance.md, "Copy method per call in the segment").
  const bool share = waiter.ShareCpu();
  const int forced = copier_.forced();
  CopyChooser* const chooser =
      share || forced >= 0 ? nullptr : &reduce_methods_[ReduceClass(bytes)];
  const auto m = chooser != nullptr ? chooser->Next()
                                    : static_cast<CopyChooser::Method>(std::max(forced, 0));
  const int64_t start = chooser != nullptr ? MonoNs() : 0;
  int64_t first_wait = 0;  // for the others to arrive: not the method's
  auto put = [&](char* to, const char* from, size_t n) {
    if (chooser != nullptr) {
      CopyBy(m, to, from, n);
    } else {
      copier_.Copy(to, from, n);
    }
  };
  // The others need the rest of this rank's input in its slot; it reads
  // its own slice straight from the input.
  auto copy_in = [&](const Plan& p) {
    char* slot = Slot(rank_, p.b) + p.at;
    const char* mine = src + p.off * esize;
    put(slot, mine, p.s0 * esize);
    put(slot + p.s1 * esize, mine + p.s1 * esize, (p.len - p.s1) * esize);
    Arrive(p.gen, fingerprint);
  };
  Plan cur = plan(0);
  copy_in(cur);
  for (;;) {
    YieldToHigherPriority();  // between rounds (core/base/priority.h)
    const bool first = chooser != nullptr && cur.off == 0;
    const int64_t wait_start = first ? MonoNs() : 0;
    HCOMM_RETURN_IF_ERROR(WaitAll(0, cur.gen, seq, fingerprint, waiter));
    if (first) first_wait = MonoNs() - wait_start;
    const size_t off = cur.off, len = cur.len, s0 = cur.s0, s1 = cur.s1;
    const char* mine = src + off * esize;
    auto slot = [&](int j) { return Slot(j, cur.b) + cur.at; };
    char* const result = Result(cur.b) + cur.at;
    char* const round_out = gets ? dst + off * esize : nullptr;
    if (s1 > s0) {
      // The slice is reduced in pieces that stay in this CPU's cache and
      // copied into the result from there, as the slot is written; a rank
      // that gets the result copies its own slice out from there too,
      // before the others have finished theirs. The others read the
      // result's lines two rounds ago, and the reduction kernel's stores
      // into lines that another CPU's cache holds wait for each line in
      // turn, where a memcpy of whole lines does not (measured:
      // docs/performance.md, "Segment slices reduced in private memory").
      const size_t step = std::max(grain, kStageBytes / esize / grain * grain);
      char* stage = Stage(std::min(step, s1 - s0) * esize);
      for (size_t i = s0; i < s1; i += step) {
        const size_t k = std::min(step, s1 - i), o = i * esize;
        auto part = [&](int j) { return j == rank_ ? mine + o : slot(j) + o; };
        ReduceParts(stage, part, n_, k, t, op, n_);
        put(result + o, stage, k * esize);
        if (gets) CopyOut(round_out + o, stage, k * esize, 2 * bytes);
      }
    }
    Publish(1, cur.gen);
    // The next round's input goes in while the others finish this one:
    // its buffers are the round before this one's, which every rank was
    // done with when it arrived at this round, and no rank writes this
    // round's result into them before everyone arrives at the next.
    // (The waits for each other had taken a good part of the time;
    // measured: docs/performance.md, "Next segment round copied in early".)
    const bool more = off + len < count;
    Plan next{};
    if (more) {
      next = plan(off + len);
      copy_in(next);
    }
    // A rank without the result goes on: it arrives at the next round
    // (after which the root may find this round's buffers rewritten two
    // rounds on) only once it is done with this one, as every rank does.
    if (gets) {
      HCOMM_RETURN_IF_ERROR(WaitAll(1, cur.gen, seq, fingerprint, waiter));
      CopyOut(round_out, result, s0 * esize, 2 * bytes);
      CopyOut(round_out + s1 * esize, result + s1 * esize, (len - s1) * esize, 2 * bytes);
    }
    if (!more) break;
    cur = next;
  }
  if (chooser != nullptr) {
    chooser->Record(m, static_cast<double>(MonoNs() - start - first_wait) /
                           static_cast<double>(bytes));
  }
  return absl::OkStatus();
}

absl::Status ShmCollective::Broadcast(void* buf, size_t bytes, int root, uint64_t seq,
                                      uint64_t fingerprint, ShmWaiter& waiter) {
  char* p = static_cast<char*>(buf);
  for (size_t off = 0; off < bytes; off += slot_bytes_) {
    const size_t len = std::min(slot_bytes_, bytes - off);
    HCOMM_RETURN_IF_ERROR(Round(
        len,
        [&](char* area) {
          if (rank_ == root) copier_.Copy(area, p + off, len);
        },
        [&](int b) {
          if (rank_ != root) CopyOut(p + off, Area(root, b, len), len, 2 * bytes);
        },
        seq, fingerprint, waiter));
  }
  return absl::OkStatus();
}

absl::Status ShmCollective::AllGather(const void* in, void* out, size_t bytes, uint64_t seq,
                                      uint64_t fingerprint, ShmWaiter& waiter) {
  return GatherTo(in, out, bytes, -1, seq, fingerprint, waiter);
}

absl::Status ShmCollective::Gather(const void* in, void* out, size_t bytes, int root,
                                   uint64_t seq, uint64_t fingerprint, ShmWaiter& waiter) {
  return GatherTo(in, out, bytes, root, seq, fingerprint, waiter);
}

absl::Status ShmCollective::GatherTo(const void* in, void* out, size_t bytes, int root,
                                     uint64_t seq, uint64_t fingerprint, ShmWaiter& waiter) {
  const bool gets = root < 0 || root == rank_;  // this rank gets every block
  char* dst = static_cast<char*>(out);
  const char* mine = gets && in == out ? dst + rank_ * bytes : static_cast<const char*>(in);
  const size_t moved = (static_cast<size_t>(n_) + 1) * bytes;
  for (size_t off = 0; off < bytes; off += slot_bytes_) {
    const size_t len = std::min(slot_bytes_, bytes - off);
    HCOMM_RETURN_IF_ERROR(Round(
        len,
        [&](char* area) {
          if (rank_ != root) copier_.Copy(area, mine + off, len);
        },
        [&](int b) {
          if (!gets) return;
          for (int j = 0; j < n_; ++j) {
            char* to = dst + j * bytes + off;
            if (j != rank_) {
              CopyOut(to, Area(j, b, len), len, moved);
            } else {
              CopyOwn(to, mine + off, len, moved);
            }
          }
        },
        seq, fingerprint, waiter));
  }
  return absl::OkStatus();
}

absl::Status ShmCollective::ReduceScatter(const void* in, void* out, size_t count, DataType t,
                                          ReduceOp op, uint64_t seq, uint64_t fingerprint,
                                          ShmWaiter& waiter) {
  const size_t esize = DataTypeSize(t);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  if (count == 0) return absl::OkStatus();
  if (n_ == 1) {
    if (out != in) memmove(out, in, count * esize);
    return absl::OkStatus();
  }
  // Per round, a piece of every block: block j's piece goes to region j of
  // the slot, in whole cache lines. In place, the output (block 0's place)
  // is written only where block 0's piece has gone to the slot already.
  const size_t grain = std::max<size_t>(1, kLine / esize);
  const size_t piece = std::max(grain, slot_bytes_ / esize / n_ / grain * grain);
  // Past the caches, each piece is reduced into a private buffer that stays
  // in this CPU's cache and streamed out from there: stores straight into
  // the output would read every line of it from memory first.
  const bool stream = Streams((static_cast<size_t>(n_) + 1) * count * esize);
  for (size_t off = 0; off < count; off += piece) {
    const size_t len = std::min(piece, count - off);
    const size_t region = len * esize;
    HCOMM_RETURN_IF_ERROR(Round(
        n_ * region,
        [&](char* area) {
          for (int j = 0; j < n_; ++j) {
            if (j == rank_) continue;
            copier_.Copy(area + j * region, src + (j * count + off) * esize, region);
          }
        },
        [&](int b) {
          auto part = [&](int j) -> const char* {
            return j == rank_ ? src + (rank_ * count + off) * esize
                              : Area(j, b, n_ * region) + rank_ * region;
          };
          if (!stream) {
            ReduceParts(dst + off * esize, part, n_, len, t, op, n_);
            return;
          }
          char* stage = Stage(region);
          ReduceParts(stage, part, n_, len, t, op, n_);
          StreamCopy(dst + off * esize, stage, region);
        },
        seq, fingerprint, waiter));
  }
  return absl::OkStatus();
}

absl::Status ShmCollective::AllToAll(const void* in, void* out, size_t bytes, uint64_t seq,
                                     uint64_t fingerprint, ShmWaiter& waiter) {
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const size_t piece = std::max(kLine, slot_bytes_ / n_ / kLine * kLine);
  const size_t moved = 2 * static_cast<size_t>(n_) * bytes;
  for (size_t off = 0; off < bytes; off += piece) {
    const size_t len = std::min(piece, bytes - off);
    HCOMM_RETURN_IF_ERROR(Round(
        n_ * len,
        [&](char* area) {
          for (int j = 0; j < n_; ++j) {
            if (j != rank_) copier_.Copy(area + j * len, src + j * bytes + off, len);
          }
        },
        [&](int b) {
          // In place, this round's pieces are all in the slot before any is
          // overwritten, and later rounds' are not touched.
          CopyOwn(dst + rank_ * bytes + off, src + rank_ * bytes + off, len, moved);
          for (int j = 0; j < n_; ++j) {
            if (j == rank_) continue;
            CopyOut(dst + j * bytes + off, Area(j, b, n_ * len) + rank_ * len, len, moved);
          }
        },
        seq, fingerprint, waiter));
  }
  return absl::OkStatus();
}

absl::Status ShmCollective::Scatter(const void* in, void* out, size_t bytes, int root,
                                    uint64_t seq, uint64_t fingerprint, ShmWaiter& waiter) {
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const size_t piece = std::max(kLine, slot_bytes_ / n_ / kLine * kLine);
  for (size_t off = 0; off < bytes; off += piece) {
    const size_t len = std::min(piece, bytes - off);
    HCOMM_RETURN_IF_ERROR(Round(
        n_ * len,
        [&](char* area) {
          if (rank_ != root) return;
          for (int j = 0; j < n_; ++j) {
            if (j != rank_) copier_.Copy(area + j * len, src + j * bytes + off, len);
          }
        },
        [&](int b) {
          if (rank_ != root) {
            CopyOut(dst + off, Area(root, b, n_ * len) + rank_ * len, len, 2 * bytes);
          } else if (in != out) {
            CopyOwn(dst + off, src + rank_ * bytes + off, len, 2 * bytes);
          }
        },
        seq, fingerprint, waiter));
  }
  return absl::OkStatus();
}

void ShmCollective::ForceCopyMethod(CopyChooser::Method m) {
  copier_.Force(m);
}

int ShmCollective::ReduceClass(size_t bytes) {
  int c = 0;
  for (size_t top = kSmallBytes * 2; top < bytes && c + 1 < kReduceClasses; top *= 4) ++c;
  return c;
}

absl::Status ShmCollective::Barrier(uint64_t seq, uint64_t fingerprint, ShmWaiter& waiter) {
  return Round(
      0, [](char*) {}, [](int) {}, seq, fingerprint, waiter);
}

}  // namespace hcomm
