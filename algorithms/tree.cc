// Latency-optimal algorithms: recursive doubling, binomial trees and the
// dissemination barrier, each O(log n) rounds.
#include <algorithm>
#include <cstring>

#include "algorithms/collective.h"
#include "algorithms/cost_model.h"
#include "algorithms/entries.h"
#include "algorithms/kernels/reduce_parts.h"
#include "algorithms/table.h"
#include "core/base/status.h"

namespace hcomm {
namespace {

int Mod(int a, int n) { return ((a % n) + n) % n; }

// dst = a op b, in that order. `complete` > 0 where this combine
// completes every element it writes, of that many ranks' contributions: an
// average is divided here, and with two ranks, where a and b are the
// contributions themselves, float16/bfloat16 combine in float32
// (ReduceParts2).
void LastCombine(char* dst, const char* a, const char* b, size_t count, DataType t, ReduceOp op,
                 int complete) {
  if (complete > 0) {
    ReduceParts2(dst, a, b, count, t, op, complete);
  } else {
    Reduce2(dst, a, b, count, t, op);
  }
}

int FloorPow2(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// Ranks beyond the largest power of two fold into a neighbour around an
// allreduce among a power of two: of each of the first `rem` pairs, the even
// rank hands its vector to the odd one and later receives the result.
struct Fold {
  int rem = 0;
  int pow2 = 1;
  int vr = -1;  // this rank's place among the power of two; -1: folded out
  char* work = nullptr;  // the vector being reduced: the caller's `recv`
  char* in = nullptr;    // scratch for one incoming vector
  // This rank's own vector so far: `work`, or, where the caller let it stay
  // there, the caller's `send`.
  const char* mine = nullptr;
  // The rank at place v.
  int Real(int v) const { return v < rem ? v * 2 + 1 : v + rem; }
};

// Starts an allreduce of `send` into `recv` (in place allowed): copies the
// input into the working vector and reduces a folded-out neighbour's vector
// into it. A folded-out rank sends its vector, receives the result into
// `recv` and is done (vr == -1). With `copy_input` false, a rank that
// neither folds nor is folded leaves its input where it is (`mine`), for a
// caller whose first step reads it once anyway.
absl::StatusOr<Fold> FoldIn(Peers& p, const void* send, void* recv, size_t count, DataType t,
                            ReduceOp op, bool copy_input = true) {
  const int n = p.size(), r = p.rank();
  const size_t bytes = count * DataTypeSize(t);
  Fold f;
  f.work = static_cast<char*>(recv);
  f.mine = f.work;
  f.in = p.Scratch(1, std::max<size_t>(bytes, 1));
  char* work = f.work;
  char* in = f.in;
  f.pow2 = FloorPow2(n);
  f.rem = n - f.pow2;
  if (r >= 2 * f.rem) {
    f.vr = r - f.rem;
    if (send != recv && bytes > 0) {
      if (copy_input) {
        memcpy(work, send, bytes);
      } else {
        f.mine = static_cast<const char*>(send);
      }
    }
    return f;
  }
  if (send != recv && bytes > 0) memcpy(work, send, bytes);
  InFlight fl(p);
  if (r % 2 == 0) {
    HCOMM_RETURN_IF_ERROR(fl.Send(work, bytes, r + 1));
    HCOMM_RETURN_IF_ERROR(fl.WaitAll());
    HCOMM_RETURN_IF_ERROR(fl.Recv(work, bytes, r + 1));  // the final result
    HCOMM_RETURN_IF_ERROR(fl.WaitAll());
    return f;
  }
  HCOMM_RETURN_IF_ERROR(fl.Recv(in, bytes, r - 1));
  HCOMM_RETURN_IF_ERROR(fl.WaitAll());
  // Lower rank first, so that every rank reduces in the same order.
  Reduce2(work, in, work, count, t, op);
  f.vr = r / 2;
  return f;
}

// Hands the result back to the folded-out neighbour, if this rank has one.
absl::Status FoldOut(Peers& p, const Fold& f, const char* work, size_t bytes) {
  const int r = p.rank();
  if (r >= 2 * f.rem) return absl::OkStatus();
  InFlight fl(p);
  HCOMM_RETURN_IF_ERROR(fl.Send(work, bytes, r - 1));
  return fl.WaitAll();
}

}  // namespace

absl::Status AllReduceRecursiveDoubling(Peers& p, const void* send, void* recv, size_t count,
                                        DataType t, ReduceOp op) {
  const int n = p.size();
  const size_t esize = DataTypeSize(t), bytes = count * esize;
  HCOMM_ASSIGN_OR_RETURN(const Fold fold, FoldIn(p, send, recv, count, t, op));
  if (fold.vr < 0) return absl::OkStatus();
  const int vr = fold.vr;
  char* work = fold.work;
  char* in = fold.in;
  for (int mask = 1; mask < fold.pow2; mask <<= 1) {
    const int vpartner = vr ^ mask;
    InFlight f(p);
    HCOMM_RETURN_IF_ERROR(f.Exchange(work, in, bytes, fold.Real(vpartner)));
    // Combine in rank order so both partners compute the same bits; the
    // last round completes every element (LastCombine).
    LastCombine(work, vpartner < vr ? in : work, vpartner < vr ? work : in, count, t, op,
                (mask << 1) >= fold.pow2 ? n : 0);
  }
  return FoldOut(p, fold, work, bytes);
}

absl::Status AllReduceHalvingDoubling(Peers& p, const void* send, void* recv, size_t count,
                                      DataType t, ReduceOp op) {
  const int n = p.size();
  const size_t esize = DataTypeSize(t), bytes = count * esize;
  // The first round sends half of the input and reduces the other half
  // into `work`, so the input is not copied there first.
  HCOMM_ASSIGN_OR_RETURN(const Fold fold,
                         FoldIn(p, send, recv, count, t, op, /*copy_input=*/false));
  if (fold.vr < 0) return absl::OkStatus();
  const int vr = fold.vr;
  char* work = fold.work;
  char* in = fold.in;
  const char* mine = fold.mine;  // after the first round: `work`
  // Reduce-scatter: each round halves the range of elements this rank
  // keeps, exchanging the other half with a partner that keeps it. Both
  // partners hold the same range at the same round, so they split it alike.
  struct Round {
    size_t lo, mid, hi;
    int partner;
    bool keep_low;
  };
  Round rounds[32];
  int nrounds = 0;
  size_t lo = 0, hi = count;
  for (int mask = fold.pow2 / 2; mask >= 1; mask /= 2) {
    const int vpartner = vr ^ mask;
    const size_t mid = lo + (hi - lo) / 2;
    const bool keep_low = (vr & mask) == 0;
    const size_t klo = keep_low ? lo : mid, khi = keep_low ? mid : hi;
    const size_t slo = keep_low ? mid : lo, shi = keep_low ? hi : mid;
    InFlight f(p);
    HCOMM_RETURN_IF_ERROR(f.Recv(in, (khi - klo) * esize, fold.Real(vpartner)));
    HCOMM_RETURN_IF_ERROR(f.Send(mine + slo * esize, (shi - slo) * esize, fold.Real(vpartner)));
    HCOMM_RETURN_IF_ERROR(f.WaitAll());
    // Lower rank first, so that a block's bits do not depend on who holds it.
    char* kept = work + klo * esize;
    const char* own = mine + klo * esize;
    LastCombine(kept, vpartner < vr ? in : own, vpartner < vr ? own : in, khi - klo, t, op,
                mask == 1 ? n : 0);
    mine = work;
    rounds[nrounds++] = {lo, mid, hi, fold.Real(vpartner), keep_low};
    lo = klo;
    hi = khi;
  }
  if (mine != work) memcpy(work, mine, bytes);  // no rounds: one rank
  // Allgather: undo the rounds in reverse, each partner sending the half it
  // finished and receiving the other straight into place.
  for (int i = nrounds - 1; i >= 0; --i) {
    const Round& rd = rounds[i];
    const size_t glo = rd.keep_low ? rd.mid : rd.lo, ghi = rd.keep_low ? rd.hi : rd.mid;
    InFlight f(p);
    HCOMM_RETURN_IF_ERROR(f.Recv(work + glo * esize, (ghi - glo) * esize, rd.partner));
    HCOMM_RETURN_IF_ERROR(f.Send(work + lo * esize, (hi - lo) * esize, rd.partner));
    HCOMM_RETURN_IF_ERROR(f.WaitAll());
    lo = rd.lo;
    hi = rd.hi;
  }
  return FoldOut(p, fold, work, bytes);
}

absl::Status AllReduceTree(Peers& p, const void* send, void* recv, size_t count, DataType t,
                           ReduceOp op, bool halving) {
  if (halving && count >= static_cast<size_t>(FloorPow2(p.size()))) {
    return AllReduceHalvingDoubling(p, send, recv, count, t, op);
  }
  return AllReduceRecursiveDoubling(p, send, recv, count, t, op);
}

absl::Status BroadcastBinomial(Peers& p, void* buf, size_t bytes, int root) {
  const int n = p.size(), vr = Mod(p.rank() - root, n);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      InFlight f(p);
      HCOMM_RETURN_IF_ERROR(f.Recv(buf, bytes, Mod(p.rank() - mask, n)));
      HCOMM_RETURN_IF_ERROR(f.WaitAll());
      break;
    }
    mask <<= 1;
  }
  InFlight f(p);
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n) HCOMM_RETURN_IF_ERROR(f.Send(buf, bytes, Mod(p.rank() + mask, n)));
  }
  return f.WaitAll();
}

absl::Status ReduceBinomial(Peers& p, const void* send, void* recv, size_t count, DataType t,
                            ReduceOp op, int root) {
  const int n = p.size(), r = p.rank(), vr = Mod(r - root, n);
  const size_t esize = DataTypeSize(t), bytes = count * esize;
  char* acc = r == root ? static_cast<char*>(recv) : p.Scratch(0, std::max<size_t>(bytes, 1));
  if (acc != send && bytes > 0) memcpy(acc, send, bytes);
  char* in = p.Scratch(1, std::max<size_t>(bytes, 1));
  for (int mask = 1; mask < n; mask <<= 1) {
    InFlight f(p);
    if ((vr & mask) == 0) {
      int vsrc = vr | mask;
      if (vsrc < n) {
        HCOMM_RETURN_IF_ERROR(f.Recv(in, bytes, Mod(vsrc + root, n)));
        HCOMM_RETURN_IF_ERROR(f.WaitAll());
        LastCombine(acc, acc, in, count, t, op, vr == 0 && (mask << 1) >= n ? n : 0);
      }
    } else {
      HCOMM_RETURN_IF_ERROR(f.Send(acc, bytes, Mod((vr & ~mask) + root, n)));
      return f.WaitAll();
    }
  }
  return absl::OkStatus();
}

absl::Status AllGatherRecursiveDoubling(Peers& p, const void* send, void* recv,
                                        size_t bytes_per_rank) {
  const int n = p.size(), r = p.rank();
  if ((n & (n - 1)) != 0) return AllGatherRing(p, send, recv, bytes_per_rank);
  char* out = static_cast<char*>(recv);
  if (bytes_per_rank > 0 && send != recv && out + r * bytes_per_rank != send) {
    memmove(out + r * bytes_per_rank, send, bytes_per_rank);
  }
  // After the round with `mask`, each rank holds the aligned group of 2*mask
  // blocks around its own.
  for (int mask = 1; mask < n; mask <<= 1) {
    int partner = r ^ mask;
    int mine = r & ~(mask - 1), theirs = partner & ~(mask - 1);
    InFlight f(p);
    HCOMM_RETURN_IF_ERROR(f.Recv(out + theirs * bytes_per_rank, mask * bytes_per_rank, partner));
    HCOMM_RETURN_IF_ERROR(f.Send(out + mine * bytes_per_rank, mask * bytes_per_rank, partner));
    HCOMM_RETURN_IF_ERROR(f.WaitAll());
  }
  return absl::OkStatus();
}

absl::Status GatherBinomial(Peers& p, const void* send, void* recv, size_t bytes_per_rank,
                            int root) {
  // Each subtree's blocks travel up as one message, in virtual-rank order.
  const int n = p.size(), r = p.rank(), vr = Mod(r - root, n);
  char* tmp = p.Scratch(0, std::max<size_t>(bytes_per_rank * n, 1));
  const char* mine = static_cast<const char*>(send);
  if (vr == 0 && send == recv) mine += r * bytes_per_rank;  // in place at the root
  if (bytes_per_rank > 0) memcpy(tmp, mine, bytes_per_rank);
  int have = 1;  // blocks vr .. vr+have-1 are in tmp
  for (int mask = 1; mask < n; mask <<= 1) {
    InFlight f(p);
    if ((vr & mask) == 0) {
      int vsrc = vr | mask;
      if (vsrc < n) {
        int blocks = std::min(mask, n - vsrc);
        HCOMM_RETURN_IF_ERROR(
            f.Recv(tmp + have * bytes_per_rank, blocks * bytes_per_rank, Mod(vsrc + root, n)));
        HCOMM_RETURN_IF_ERROR(f.WaitAll());
        have += blocks;
      }
    } else {
      HCOMM_RETURN_IF_ERROR(f.Send(tmp, have * bytes_per_rank, Mod((vr & ~mask) + root, n)));
      return f.WaitAll();
    }
  }
  // Root: tmp holds blocks of virtual ranks 0..n-1; rotate into rank order.
  char* out = static_cast<char*>(recv);
  for (int v = 0; v < n && bytes_per_rank > 0; ++v) {
    memcpy(out + Mod(v + root, n) * bytes_per_rank, tmp + v * bytes_per_rank, bytes_per_rank);
  }
  return absl::OkStatus();
}

absl::Status ScatterBinomial(Peers& p, const void* send, void* recv, size_t bytes_per_rank,
                             int root) {
  const int n = p.size(), r = p.rank(), vr = Mod(r - root, n);
  char* tmp = p.Scratch(0, std::max<size_t>(bytes_per_rank * n, 1));
  int have = 0;  // blocks of virtual ranks vr .. vr+have-1 are in tmp
  int mask = 1;
  if (vr == 0) {
    const char* in = static_cast<const char*>(send);
    for (int v = 0; v < n && bytes_per_rank > 0; ++v) {
      memcpy(tmp + v * bytes_per_rank, in + Mod(v + root, n) * bytes_per_rank, bytes_per_rank);
    }
    have = n;
    while (mask < n) mask <<= 1;
  } else {
    while (mask < n) {
      if (vr & mask) {
        int blocks = std::min(mask, n - vr);
        InFlight f(p);
        HCOMM_RETURN_IF_ERROR(
            f.Recv(tmp, blocks * bytes_per_rank, Mod(vr - mask + root, n)));
        HCOMM_RETURN_IF_ERROR(f.WaitAll());
        have = blocks;
        break;
      }
      mask <<= 1;
    }
  }
  InFlight f(p);
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n && mask < have) {
      int blocks = std::min(have - mask, n - vr - mask);
      HCOMM_RETURN_IF_ERROR(f.Send(tmp + mask * bytes_per_rank, blocks * bytes_per_rank,
                                   Mod(vr + mask + root, n)));
    }
    have = std::min(have, mask);  // what stays is our own half
  }
  HCOMM_RETURN_IF_ERROR(f.WaitAll());
  const bool root_in_place = vr == 0 && recv == send;
  if (bytes_per_rank > 0 && recv != nullptr && !root_in_place) memcpy(recv, tmp, bytes_per_rank);
  return absl::OkStatus();
}

absl::Status BarrierDissemination(Peers& p) {
  const int n = p.size(), r = p.rank();
  for (int k = 1; k < n; k <<= 1) {
    InFlight f(p);
    HCOMM_RETURN_IF_ERROR(f.Recv(nullptr, 0, Mod(r - k, n)));
    HCOMM_RETURN_IF_ERROR(f.Send(nullptr, 0, Mod(r + k, n)));
    HCOMM_RETURN_IF_ERROR(f.WaitAll());
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// The table's rows (entries.h)

namespace entries {

namespace {
size_t Bytes(const CollectiveCall& c) { return c.count * DataTypeSize(c.dtype); }
}  // namespace

double TreeAllReduceCost(double bytes, int nranks, const LinkModel& link) {
  const size_t b = static_cast<size_t>(bytes);
  const TreeAllReduceCosts t = ::hcomm::TreeAllReduceCost(b, nranks, link);
  return TreeAllReduceHalves(b, nranks, link) ? t.halving : t.doubling;
}

absl::Status TreeAllReduceRun(Peers& p, const CollectiveCall& c, const RunEnv& env) {
  auto run = [&](const void* in, void* out, DataType t) {
    return AllReduceTree(p, in, out, c.count, t, c.reduce,
                         TreeAllReduceHalves(c.count * DataTypeSize(t), p.size(), *env.link));
  };
  if (IsHalfFloat(c.dtype) && !HalfTravelsAsIs(Algorithm::kTree, p.size())) {
    return OnFloat32(p, c.send, c.recv, c.count, c.count, c.dtype, true, run);
  }
  return run(c.send, c.recv, c.dtype);
}

double TreeBroadcastCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return t.lg * (t.MessageUs(t.S) + t.S * t.b);
}

absl::Status TreeBroadcastRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return BroadcastBinomial(p, c.recv, Bytes(c), c.root);
}

double TreeReduceCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return t.lg * (t.MessageUs(t.S) + t.S * t.b) + t.Reduce(t.lg * t.S, t.S);
}

absl::Status TreeReduceRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  auto run = [&](const void* in, void* out, DataType t) {
    return ReduceBinomial(p, in, out, c.count, t, c.reduce, c.root);
  };
  if (IsHalfFloat(c.dtype) && !HalfTravelsAsIs(Algorithm::kTree, p.size())) {
    return OnFloat32(p, c.send, c.recv, c.count, c.count, c.dtype, p.rank() == c.root, run);
  }
  return run(c.send, c.recv, c.dtype);
}

// Recursive doubling needs a power of two of ranks: elsewhere not a choice
// (a cost below zero).
double TreeAllGatherCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return t.pow2 ? t.lg * t.a + t.DoublingRendezvousUs() + (t.n - 1) / t.n * t.S * t.b : -1;
}

absl::Status TreeAllGatherRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return AllGatherRecursiveDoubling(p, c.send, c.recv, Bytes(c));
}

double TreeGatherCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return t.lg * t.a + t.DoublingRendezvousUs() + (t.n - 1) / t.n * t.S * t.b * (1 + 0.1 * t.lg);
}

absl::Status TreeGatherRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return GatherBinomial(p, c.send, c.recv, Bytes(c), c.root);
}

double TreeScatterCost(double bytes, int nranks, const LinkModel& link) {
  return TreeGatherCost(bytes, nranks, link);
}

absl::Status TreeScatterRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return ScatterBinomial(p, c.send, c.recv, Bytes(c), c.root);
}

double TreeBarrierCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return t.lg * t.a;
}

absl::Status TreeBarrierRun(Peers& p, const CollectiveCall&, const RunEnv&) {
  return BarrierDissemination(p);
}

}  // namespace entries

}  // namespace hcomm
