// Ring algorithms: bandwidth-optimal for large messages. Each block moves in
// chunks so that the transfer of one chunk overlaps the reduction of the
// previous one.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "algorithms/collective.h"
#include "algorithms/cost_model.h"
#include "algorithms/entries.h"
#include "algorithms/kernels/reduce_parts.h"
#include "algorithms/table.h"
#include "core/base/priority.h"
#include "core/base/status.h"

namespace hcomm {
namespace {

// The cost model prices the same chunks (cost_model.h).

int Mod(int a, int n) { return ((a % n) + n) % n; }

// Receives in flight per reduce-scatter step: each lands in one of this
// many chunk-sized buffers, reused round robin, so the incoming data stays
// in cache until it is reduced.
constexpr int kWindow = 4;

// Data chunks in flight each way in the two-rank allreduce (AllReducePair).
constexpr size_t kPairWindow = 2;

// One reduce-scatter step: sends block `send_block` (read from `send_src`)
// to the right while receiving block `recv_block` from the left, and as
// each chunk arrives writes work = local op incoming for it, reading the
// local operand from `local` (work itself, or the caller's untouched input).
// The last step (`last`) completes each element: an average is divided by
// the rank count as soon as a chunk is reduced, while it is still in the
// cache, and with two ranks (the only step) float16/bfloat16 travel as
// they are and are combined in float32 here (ReduceParts).
absl::Status ReduceStep(Peers& p, const char* send_src, const char* local, char* work,
                        size_t count, size_t esize, DataType t, ReduceOp op, int send_block,
                        int recv_block, int parts, bool last, size_t chunk_bytes) {
  const int n = p.size(), right = Mod(p.rank() + 1, n), left = Mod(p.rank() - 1, n);
  const size_t s_off = BlockOffset(count, parts, send_block) * esize;
  const size_t s_len = BlockCount(count, parts, send_block) * esize;
  const size_t r_off = BlockOffset(count, parts, recv_block) * esize;
  const size_t r_len = BlockCount(count, parts, recv_block) * esize;
  const size_t chunk = std::max(esize, chunk_bytes / esize * esize);
  const size_t chunks = (r_len + chunk - 1) / chunk;
  char* in = p.Scratch(1, std::max<size_t>(std::min<size_t>(chunks, kWindow) * chunk, 1));
  InFlight f(p);
  Request* window[kWindow] = {};
  auto post = [&](size_t i) -> absl::Status {
    const size_t o = i * chunk;
    HCOMM_ASSIGN_OR_RETURN(window[i % kWindow],
                           f.RecvRequest(in + (i % kWindow) * chunk, std::min(chunk, r_len - o),
                                         left));
    return absl::OkStatus();
  };
  for (size_t i = 0; i < chunks && i < static_cast<size_t>(kWindow); ++i) {
    HCOMM_RETURN_IF_ERROR(post(i));
  }
  for (size_t o = 0; o < s_len; o += chunk) {
    HCOMM_RETURN_IF_ERROR(f.Send(send_src + s_off + o, std::min(chunk, s_len - o), right));
  }
  for (size_t i = 0; i < chunks; ++i) {
    YieldToHigherPriority();  // between chunks (core/base/priority.h)
    HCOMM_RETURN_IF_ERROR(f.Wait(window[i % kWindow]));
    const size_t o = i * chunk, len = std::min(chunk, r_len - o);
    const char* incoming = in + (i % kWindow) * chunk;
    if (last) {
      ReduceParts2(work + r_off + o, local + r_off + o, incoming, len / esize, t, op, n);
    } else {
      Reduce2(work + r_off + o, local + r_off + o, incoming, len / esize, t, op);
    }
    if (i + kWindow < chunks) HCOMM_RETURN_IF_ERROR(post(i + kWindow));
  }
  return f.WaitAll();
}

// One allgather step: forwards block `send_block` right, receives block
// `recv_block` from the left straight into place.
absl::Status CopyStep(Peers& p, char* work, size_t count, size_t esize, int send_block,
                      int recv_block, int parts) {
  const int n = p.size(), right = Mod(p.rank() + 1, n), left = Mod(p.rank() - 1, n);
  InFlight f(p);
  HCOMM_RETURN_IF_ERROR(f.Recv(work + BlockOffset(count, parts, recv_block) * esize,
                               BlockCount(count, parts, recv_block) * esize, left));
  HCOMM_RETURN_IF_ERROR(f.Send(work + BlockOffset(count, parts, send_block) * esize,
                               BlockCount(count, parts, send_block) * esize, right));
  return f.WaitAll();
}

// Two ranks: each reduces one half of the vector and returns it chunk by
// chunk, so a reduced chunk leaves while it is still in the cache and the
// halves' exchange overlaps the reduction. What each rank sends to the
// other, in order: data chunks 0..K-1 of the other's half, then for each
// chunk c its reduced chunk c and data chunk c+K; each rank posts its
// receives in the order the other sends.
absl::Status AllReducePair(Peers& p, const char* in, char* work, size_t count, size_t esize,
                           DataType t, ReduceOp op, size_t chunk_bytes) {
  const int r = p.rank(), peer = 1 - r;
  const size_t m_off = BlockOffset(count, 2, r) * esize, m_len = BlockCount(count, 2, r) * esize;
  const size_t t_off = BlockOffset(count, 2, peer) * esize;
  const size_t t_len = BlockCount(count, 2, peer) * esize;
  const size_t chunk = std::max(esize, chunk_bytes / esize * esize);
  const size_t cm = (m_len + chunk - 1) / chunk, ct = (t_len + chunk - 1) / chunk;
  const size_t k = kPairWindow;
  char* win = p.Scratch(1, std::max<size_t>(std::min(cm, k) * chunk, 1));
  // Data chunk c of this rank's half lands in window buffer c % k, posted
  // once chunk c - k is reduced; window[c % k] is its receive.
  auto buf = [&](size_t c) { return win + (c % k) * chunk; };
  auto len = [chunk](size_t c, size_t total) { return std::min(chunk, total - c * chunk); };
  InFlight f(p);
  Request* window[kPairWindow] = {};
  auto post = [&](size_t c) -> absl::Status {
    HCOMM_ASSIGN_OR_RETURN(window[c % k], f.RecvRequest(buf(c), len(c, m_len), peer));
    return absl::OkStatus();
  };
  for (size_t c = 0; c < k && c < cm; ++c) HCOMM_RETURN_IF_ERROR(post(c));
  for (size_t c = 0; c < k && c < ct; ++c) {
    HCOMM_RETURN_IF_ERROR(f.Send(in + t_off + c * chunk, len(c, t_len), peer));
  }
  for (size_t c = 0; c < std::max(cm, ct); ++c) {
    YieldToHigherPriority();  // between chunks (core/base/priority.h)
    if (c < cm) {
      HCOMM_RETURN_IF_ERROR(f.Wait(window[c % k]));
      const size_t n = len(c, m_len) / esize;
      char* dst = work + m_off + c * chunk;
      const char* mine = in + m_off + c * chunk;
      // Lower rank first, as halving-doubling combines: an element's bits
      // do not depend on which rank reduced it.
      ReduceParts2(dst, r == 0 ? mine : buf(c), r == 0 ? buf(c) : mine, n, t, op, 2);
      HCOMM_RETURN_IF_ERROR(f.Send(dst, n * esize, peer));
    }
    if (c < ct) HCOMM_RETURN_IF_ERROR(f.Recv(work + t_off + c * chunk, len(c, t_len), peer));
    if (c + k < cm) HCOMM_RETURN_IF_ERROR(post(c + k));
    if (c + k < ct) {
      HCOMM_RETURN_IF_ERROR(f.Send(in + t_off + (c + k) * chunk, len(c + k, t_len), peer));
    }
  }
  return f.WaitAll();
}

// Reduce-scatter: after n-1 steps rank r holds block r+1 fully reduced in
// `work` (an average divided by the rank that completes each block). The
// input is never copied: step 0 sends block r straight from it, and every
// block received is combined with the input's own copy (no rank receives a
// block twice), so each block of `work` is written once here, or by the
// allgather (block r).
absl::Status RingReduceScatter(Peers& p, const char* in, char* work, size_t count, size_t esize,
                               DataType t, ReduceOp op, size_t chunk_bytes) {
  const int n = p.size(), r = p.rank();
  for (int s = 0; s < n - 1; ++s) {
    HCOMM_RETURN_IF_ERROR(ReduceStep(p, s == 0 ? in : work, in, work, count, esize, t, op,
                                     Mod(r - s, n), Mod(r - s - 1, n), n, s == n - 2,
                                     chunk_bytes));
  }
  return absl::OkStatus();
}

// Allgather of the blocks RingReduceScatter completed, each rank starting
// with block r+1.
absl::Status RingAllGather(Peers& p, char* work, size_t count, size_t esize) {
  const int n = p.size(), r = p.rank();
  for (int s = 0; s < n - 1; ++s) {
    HCOMM_RETURN_IF_ERROR(CopyStep(p, work, count, esize, Mod(r + 1 - s, n), Mod(r - s, n), n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AllReduceRing(Peers& p, const void* send, void* recv, size_t count, DataType t,
                           ReduceOp op, size_t chunk_bytes) {
  const int n = p.size();
  const size_t esize = DataTypeSize(t);
  char* work = static_cast<char*>(recv);
  const char* in = static_cast<const char*>(send);
  if (n == 1 && send != recv && count > 0) memcpy(work, send, count * esize);
  if (n == 2) return AllReducePair(p, in, work, count, esize, t, op, chunk_bytes);
  if (n > 1) {
    HCOMM_RETURN_IF_ERROR(RingReduceScatter(p, in, work, count, esize, t, op, chunk_bytes));
    HCOMM_RETURN_IF_ERROR(RingAllGather(p, work, count, esize));
  }
  return absl::OkStatus();
}

absl::Status AllReduceRingNarrowGather(Peers& p, const float* wide_in, float* wide_work,
                                       void* recv, size_t count, DataType t, ReduceOp op,
                                       size_t chunk_bytes) {
  const int n = p.size(), r = p.rank();
  const char* in = reinterpret_cast<const char*>(wide_in);
  char* work = reinterpret_cast<char*>(wide_work);
  HCOMM_RETURN_IF_ERROR(
      RingReduceScatter(p, in, work, count, 4, DataType::kFloat32, op, chunk_bytes));
  const int done = Mod(r + 1, n);
  const size_t off = BlockOffset(count, n, done);
  char* out = static_cast<char*>(recv);
  NarrowFromFloat32(out + off * 2, wide_work + off, BlockCount(count, n, done), t);
  return RingAllGather(p, out, count, 2);
}

absl::Status ReduceScatterRing(Peers& p, const void* send, void* recv, size_t recvcount,
                               DataType t, ReduceOp op, size_t chunk_bytes) {
  const int n = p.size(), r = p.rank();
  const size_t esize = DataTypeSize(t);
  const size_t total = recvcount * n;
  // Accumulate in scratch: the input stays intact and in-place works.
  char* work = p.Scratch(0, std::max<size_t>(total * esize, 1));
  if (total > 0) memcpy(work, send, total * esize);
  for (int s = 0; s < n - 1; ++s) {
    // Step s: send block r-s-1, receive and reduce block r-s-2; the last
    // step leaves block r complete here.
    HCOMM_RETURN_IF_ERROR(ReduceStep(p, work, work, work, total, esize, t, op,
                                     Mod(r - s - 1, n), Mod(r - s - 2, n), n, s == n - 2,
                                     chunk_bytes));
  }
  if (recvcount > 0) memmove(recv, work + r * recvcount * esize, recvcount * esize);
  return absl::OkStatus();
}

absl::Status AllGatherRing(Peers& p, const void* send, void* recv, size_t bytes_per_rank) {
  const int n = p.size(), r = p.rank();
  char* out = static_cast<char*>(recv);
  if (bytes_per_rank > 0 && send != recv && out + r * bytes_per_rank != send) {
    memmove(out + r * bytes_per_rank, send, bytes_per_rank);
  }
  for (int s = 0; s < n - 1; ++s) {
    HCOMM_RETURN_IF_ERROR(CopyStep(p, out, bytes_per_rank * n, 1, Mod(r - s, n),
                                   Mod(r - s - 1, n), n));
  }
  return absl::OkStatus();
}

absl::Status BroadcastRing(Peers& p, void* buf, size_t bytes, int root, size_t chunk_bytes) {
  // A pipelined chain root -> root+1 -> ... : each chunk is forwarded as
  // soon as it arrives.
  const int n = p.size(), vr = Mod(p.rank() - root, n);
  if (n == 1 || bytes == 0) {
    if (n > 1) {
      // Still synchronise as the operation would: pass an empty message on.
      InFlight f(p);
      if (vr > 0) HCOMM_RETURN_IF_ERROR(f.Recv(buf, 0, Mod(p.rank() - 1, n)));
      if (vr < n - 1) HCOMM_RETURN_IF_ERROR(f.Send(buf, 0, Mod(p.rank() + 1, n)));
      return f.WaitAll();
    }
    return absl::OkStatus();
  }
  char* b = static_cast<char*>(buf);
  const int prev = Mod(p.rank() - 1, n), next = Mod(p.rank() + 1, n);
  InFlight f(p);
  std::vector<Request*> recvs;
  if (vr > 0) {
    for (size_t o = 0; o < bytes; o += chunk_bytes) {
      HCOMM_ASSIGN_OR_RETURN(Request * r,
                             f.RecvRequest(b + o, std::min(chunk_bytes, bytes - o), prev));
      recvs.push_back(r);
    }
  }
  size_t i = 0;
  for (size_t o = 0; o < bytes; o += chunk_bytes, ++i) {
    size_t len = std::min(chunk_bytes, bytes - o);
    if (vr > 0) HCOMM_RETURN_IF_ERROR(f.Wait(recvs[i]));
    if (vr < n - 1) HCOMM_RETURN_IF_ERROR(f.Send(b + o, len, next));
  }
  return f.WaitAll();
}

absl::Status ReduceRing(Peers& p, const void* send, void* recv, size_t count, DataType t,
                        ReduceOp op, int root, size_t chunk_bytes) {
  // Reduce-scatter around the ring (an average divided there, by the rank
  // that completes each block), then every rank hands its block to the root.
  const int n = p.size(), r = p.rank();
  const size_t esize = DataTypeSize(t);
  char* work = p.Scratch(0, std::max<size_t>(count * esize, 1));
  if (count > 0) memcpy(work, send, count * esize);
  for (int s = 0; s < n - 1; ++s) {
    HCOMM_RETURN_IF_ERROR(ReduceStep(p, work, work, work, count, esize, t, op,
                                     Mod(r - s - 1, n), Mod(r - s - 2, n), n, s == n - 2,
                                     chunk_bytes));
  }
  InFlight f(p);
  if (r == root) {
    char* out = static_cast<char*>(recv);
    for (int b = 0; b < n; ++b) {
      char* dst = out + BlockOffset(count, n, b) * esize;
      size_t len = BlockCount(count, n, b) * esize;
      if (b == r) {
        if (len > 0) memcpy(dst, work + BlockOffset(count, n, b) * esize, len);
      } else {
        HCOMM_RETURN_IF_ERROR(f.Recv(dst, len, b));
      }
    }
    return f.WaitAll();
  }
  HCOMM_RETURN_IF_ERROR(f.Send(work + BlockOffset(count, n, r) * esize,
                               BlockCount(count, n, r) * esize, root));
  return f.WaitAll();
}


// ---------------------------------------------------------------------------
// The table's rows (entries.h)

namespace entries {

namespace {
size_t Bytes(const CollectiveCall& c) { return c.count * DataTypeSize(c.dtype); }
// The communicator's chunk_bytes (the link the selector priced carries it).
size_t ChunkOf(const RunEnv& env) { return static_cast<size_t>(env.link->chunk_bytes); }
}  // namespace

double RingAllReduceCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  // Every chunk of a step is a message; the chunks of a step are in flight
  // together, so their rendezvous round trips overlap.
  const double chunks = std::max(1.0, std::ceil(t.S / t.n / link.chunk_bytes));
  return 2 * (t.n - 1) * (chunks * t.a + t.RendezvousUs(t.chunk) + t.slices) +
         2 * (t.n - 1) / t.n * t.S * t.b + t.Reduce((t.n - 1) / t.n * t.S, t.chunk);
}

absl::Status RingAllReduceRun(Peers& p, const CollectiveCall& c, const RunEnv& env) {
  if (env.switch_order != nullptr && !env.switch_order->empty()) {
    // Across switches: the ring crosses each switch boundary once (and
    // each host boundary within a switch once), whatever the size.
    ReorderedPeers by_switch(p, *env.switch_order);
    RunEnv rest = env;
    rest.switch_order = nullptr;
    rest.ring_order = nullptr;
    return RingAllReduceRun(by_switch, c, rest);
  }
  if (IsHalfFloat(c.dtype) && !HalfTravelsAsIs(Algorithm::kRing, p.size())) {
    // The reduce-scatter runs on float32; the allgather moves the rounded
    // 16-bit blocks.
    HCOMM_ASSIGN_OR_RETURN(WideBuffers w, Widen(p, c.send, c.count, c.count, c.dtype));
    if (RingByCpu(c.count * sizeof(float), env.ring_order)) {
      ReorderedPeers by_cpu(p, *env.ring_order);
      return AllReduceRingNarrowGather(by_cpu, w.in, w.out, c.recv, c.count, c.dtype, c.reduce,
                                       ChunkOf(env));
    }
    return AllReduceRingNarrowGather(p, w.in, w.out, c.recv, c.count, c.dtype, c.reduce,
                                     ChunkOf(env));
  }
  if (RingByCpu(Bytes(c), env.ring_order)) {
    ReorderedPeers by_cpu(p, *env.ring_order);
    return AllReduceRing(by_cpu, c.send, c.recv, c.count, c.dtype, c.reduce, ChunkOf(env));
  }
  return AllReduceRing(p, c.send, c.recv, c.count, c.dtype, c.reduce, ChunkOf(env));
}

double RingBroadcastCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  const double piece = std::min(t.S, link.chunk_bytes);
  const double pieces = std::max(1.0, std::ceil(t.S / piece));
  return (t.n - 2 + pieces) * (t.MessageUs(piece) + piece * t.b + t.slices);
}

absl::Status RingBroadcastRun(Peers& p, const CollectiveCall& c, const RunEnv& env) {
  return BroadcastRing(p, c.recv, Bytes(c), c.root, ChunkOf(env));
}

double RingReduceCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return 2 * (t.n - 1) * (t.MessageUs(t.S / t.n) + t.slices) + 2 * (t.n - 1) / t.n * t.S * t.b +
         t.Reduce((t.n - 1) / t.n * t.S, t.chunk);
}

absl::Status RingReduceRun(Peers& p, const CollectiveCall& c, const RunEnv& env) {
  auto run = [&](const void* in, void* out, DataType t) {
    return ReduceRing(p, in, out, c.count, t, c.reduce, c.root, ChunkOf(env));
  };
  if (IsHalfFloat(c.dtype) && !HalfTravelsAsIs(Algorithm::kRing, p.size())) {
    return OnFloat32(p, c.send, c.recv, c.count, c.count, c.dtype, p.rank() == c.root, run);
  }
  return run(c.send, c.recv, c.dtype);
}

double RingAllGatherCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return (t.n - 1) * (t.MessageUs(t.S / t.n) + t.S / t.n * t.b + t.slices);
}

absl::Status RingAllGatherRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return AllGatherRing(p, c.send, c.recv, Bytes(c));
}

double RingReduceScatterCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return (t.n - 1) * (t.MessageUs(t.S / t.n) + t.S / t.n * t.b + t.slices) +
         t.Reduce((t.n - 1) / t.n * t.S, t.chunk);
}

absl::Status RingReduceScatterRun(Peers& p, const CollectiveCall& c, const RunEnv& env) {
  auto run = [&](const void* in, void* out, DataType t) {
    return ReduceScatterRing(p, in, out, c.count, t, c.reduce, ChunkOf(env));
  };
  if (IsHalfFloat(c.dtype) && !HalfTravelsAsIs(Algorithm::kRing, p.size())) {
    return OnFloat32(p, c.send, c.recv, c.count * p.size(), c.count, c.dtype, true, run);
  }
  return run(c.send, c.recv, c.dtype);
}

}  // namespace entries

}  // namespace hcomm
