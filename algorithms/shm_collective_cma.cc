// The shared segment's large allreduce by cross-memory attach
// (ShmCollective::EnableCma): each rank reads the others' parts of its
// slice, and then their reduced slices, straight from their buffers.
#include <sys/prctl.h>

#include <cstdlib>

#include "algorithms/shm_collective_layout.h"

namespace hcomm {

void ShmCollective::AllowCmaReadersIfAsked() {
  // Only where CMA is asked for: it lowers a protection for the whole
  // process (any process of this user may then ptrace it).
  const char* v = getenv("HCOMM_SHM_COLL_CMA");
  if (v == nullptr || strcmp(v, "1") != 0) return;
  static std::atomic<pid_t> done_for{0};
  const pid_t me = getpid();
  if (done_for.exchange(me, std::memory_order_relaxed) == me) return;
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);  // EINVAL without Yama: fine
}

absl::Status ShmCollective::AllReduceCma(const void* in, void* out, size_t count, DataType t,
                                         ReduceOp op, uint64_t seq, uint64_t fingerprint,
                                         ShmWaiter& waiter) {
  // One round in which every rank publishes its buffers.
  RankLine& me = lines_[rank_];
  me.in.store(reinterpret_cast<uintptr_t>(in), std::memory_order_relaxed);
  me.out.store(reinterpret_cast<uintptr_t>(out), std::memory_order_relaxed);
  const uint64_t gen0 = ++gen_;
  Arrive(gen0, fingerprint);  // publishes the stores above
  HCOMM_RETURN_IF_ERROR(WaitAll(0, gen0, seq, fingerprint, waiter));
  const size_t esize = DataTypeSize(t);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  // Rank j reduces slice j, [j * q, (j + 1) * q) of the vector (whole
  // cache lines; the last ones may be short or empty), in `pieces` pieces
  // of `step` elements. Every rank counts the same pieces, so their
  // generations line up.
  const size_t grain = std::max<size_t>(1, kLine / esize);
  const size_t q = RoundUp((count + n_ - 1) / n_, grain);
  const size_t peers = static_cast<size_t>(n_ - 1);
  const size_t per_peer = std::max(kCmaMinPieceBytes, kCmaPieceBytes / peers);
  const size_t step = std::max(grain, per_peer / esize / grain * grain);
  const size_t pieces = (q + step - 1) / step;
  auto slice = [&](int j) { return std::min(count, q * static_cast<size_t>(j)); };
  // The others' parts of a piece, in rank order without this rank; in
  // place, a rank past the first two reduces into the stage's last area
  // (ReduceParts writes over part 0 or 1 only) and copies it out.
  const bool aside = src == dst && rank_ > 1;
  char* stage = Stage((peers + (aside ? 1 : 0)) * step * esize);
  auto area = [&](int j) {
    return stage + static_cast<size_t>(j < rank_ ? j : j - 1) * step * esize;
  };
  const size_t s0 = slice(rank_), s1 = slice(rank_ + 1);
  for (size_t c = 0; c < pieces; ++c) {
    const size_t i = s0 + c * step;
    if (i < s1) {
      HCOMM_RETURN_IF_ERROR(waiter.Interrupted());
      const size_t k = std::min(step, s1 - i), o = i * esize;
      for (int j = 0; j < n_; ++j) {
        if (j == rank_) continue;
        HCOMM_RETURN_IF_ERROR(
            ReadFrom(j, lines_[j].in.load(std::memory_order_relaxed) + o, area(j), k * esize, seq));
      }
      auto part = [&](int j) -> const char* { return j == rank_ ? src + o : area(j); };
      char* to = aside ? stage + peers * step * esize : dst + o;
      ReduceParts(to, part, n_, k, t, op, n_);
      if (aside) memcpy(dst + o, to, k * esize);
    }
    Publish(1, gen0 + 1 + c);
  }
  // The others' slices, each piece once every rank has reduced it (and so
  // has read this rank's input there: in place, it may be overwritten).
  for (size_t c = 0; c < pieces; ++c) {
    HCOMM_RETURN_IF_ERROR(WaitCounters(1, gen0 + 1 + c, seq, fingerprint, waiter));
    for (int j = 0; j < n_; ++j) {
      if (j == rank_) continue;
      const size_t i = slice(j) + c * step, end = slice(j + 1);
      if (i >= end) continue;
      const size_t o = i * esize;
      HCOMM_RETURN_IF_ERROR(ReadFrom(j, lines_[j].out.load(std::memory_order_relaxed) + o,
                                     dst + o, std::min(step, end - i) * esize, seq));
    }
  }
  // No rank returns, and lets its buffers go, while another still reads them.
  gen_ = gen0 + pieces + 1;
  Arrive(gen_, fingerprint);
  return WaitAll(0, gen_, seq, fingerprint, waiter);
}

absl::Status ShmCollective::ReadFrom(int rank, uint64_t remote, char* local, size_t n,
                                     uint64_t seq) const {
  const pid_t pid = static_cast<pid_t>(lines_[rank].pid.load(std::memory_order_relaxed));
  size_t done = 0;
  while (done < n) {
    struct iovec l = {local + done, n - done};
    struct iovec r = {reinterpret_cast<void*>(remote + done), n - done};
    const ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (got > 0) {
      done += static_cast<size_t>(got);
      continue;
    }
    const int e = got < 0 ? errno : EFAULT;
    if (e == EINTR) continue;
    const std::string what =
        absl::StrCat("shared-memory allreduce seq ", seq, ": reading ", n, " bytes of rank ", rank,
                     "'s buffers (process ", pid, ") by cross-memory attach: ", strerror(e));
    // A process that is gone has failed; anything else (a buffer shorter
    // than the call's count at that rank) ends this call, not the job.
    return e == ESRCH ? PeerFailure(what) : Unavailable(what);
  }
  return absl::OkStatus();
}

}  // namespace hcomm
