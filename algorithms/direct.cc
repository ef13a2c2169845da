// Direct algorithms: every rank exchanges with every other at once. Few
// rounds, n-1 messages per rank: best for tiny messages and few ranks, and
// the natural shape of alltoall, gather and scatter.
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

}  // namespace

absl::Status AllReduceDirect(Peers& p, const void* send, void* recv, size_t count, DataType t,
                             ReduceOp op) {
  const int n = p.size(), r = p.rank();
  const size_t bytes = count * DataTypeSize(t);
  // The others' vectors land in their slots of the scratch; this rank's
  // leaves from, and is reduced from, where the caller put it. Every rank
  // then reduces in rank order, so all get the same bits. Reducing in place
  // overwrites the input with the sum of vectors 0 and 1 first, so a rank
  // past those keeps a copy of its own.
  char* all = p.Scratch(0, std::max<size_t>(bytes * n, 1));
  char* out = static_cast<char*>(recv);
  const char* mine = static_cast<const char*>(send);
  if (bytes == 0 || (send == recv && r >= 2)) {
    if (bytes > 0) memcpy(all + r * bytes, send, bytes);
    mine = all + r * bytes;
  }
  InFlight f(p);
  for (int i = 1; i < n; ++i) {
    int src = Mod(r - i, n);
    HCOMM_RETURN_IF_ERROR(f.Recv(all + src * bytes, bytes, src));
  }
  for (int i = 1; i < n; ++i) HCOMM_RETURN_IF_ERROR(f.Send(mine, bytes, Mod(r + i, n)));
  HCOMM_RETURN_IF_ERROR(f.WaitAll());
  // Every rank reduces every contribution, in rank order: all get the same
  // bits, and float16/bfloat16 are rounded once, from their own vectors.
  ReduceParts(
      out, [&](int i) -> const char* { return i == r ? mine : all + i * bytes; }, n, count, t,
      op, n);
  return absl::OkStatus();
}

absl::Status ReduceScatterDirect(Peers& p, const void* send, void* recv, size_t recvcount,
                                 DataType t, ReduceOp op) {
  const int n = p.size(), r = p.rank();
  const size_t bytes = recvcount * DataTypeSize(t);
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  // The others' parts of block r land in their slots of the scratch; this
  // rank's own part is read where it is, unless the output overlaps it
  // without being it (Reduce2 allows only the same pointer).
  char* parts = p.Scratch(0, std::max<size_t>(bytes * n, 1));
  const char* mine = in + r * bytes;
  if (bytes == 0 || (mine != out && mine < out + bytes && out < mine + bytes)) {
    if (bytes > 0) memcpy(parts + r * bytes, mine, bytes);
    mine = parts + r * bytes;
  }
  InFlight f(p);
  for (int i = 1; i < n; ++i) {
    int src = Mod(r - i, n);
    HCOMM_RETURN_IF_ERROR(f.Recv(parts + src * bytes, bytes, src));
  }
  for (int i = 1; i < n; ++i) {
    int dst = Mod(r + i, n);
    HCOMM_RETURN_IF_ERROR(f.Send(in + dst * bytes, bytes, dst));
  }
  HCOMM_RETURN_IF_ERROR(f.WaitAll());
  ReduceParts(
      out, [&](int i) -> const char* { return i == r ? mine : parts + i * bytes; }, n,
      recvcount, t, op, n);
  return absl::OkStatus();
}

absl::Status AllGatherDirect(Peers& p, const void* send, void* recv, size_t bytes_per_rank) {
  const int n = p.size(), r = p.rank();
  char* out = static_cast<char*>(recv);
  if (bytes_per_rank > 0 && send != recv && out + r * bytes_per_rank != send) {
    memmove(out + r * bytes_per_rank, send, bytes_per_rank);
  }
  InFlight f(p);
  for (int i = 1; i < n; ++i) {
    int src = Mod(r - i, n);
    HCOMM_RETURN_IF_ERROR(f.Recv(out + src * bytes_per_rank, bytes_per_rank, src));
  }
  for (int i = 1; i < n; ++i) {
    HCOMM_RETURN_IF_ERROR(f.Send(out + r * bytes_per_rank, bytes_per_rank, Mod(r + i, n)));
  }
  return f.WaitAll();
}

absl::Status BroadcastDirect(Peers& p, void* buf, size_t bytes, int root) {
  const int n = p.size(), r = p.rank();
  InFlight f(p);
  if (r == root) {
    for (int i = 1; i < n; ++i) HCOMM_RETURN_IF_ERROR(f.Send(buf, bytes, Mod(r + i, n)));
  } else {
    HCOMM_RETURN_IF_ERROR(f.Recv(buf, bytes, root));
  }
  return f.WaitAll();
}

absl::Status ReduceDirect(Peers& p, const void* send, void* recv, size_t count, DataType t,
                          ReduceOp op, int root) {
  const int n = p.size(), r = p.rank();
  const size_t bytes = count * DataTypeSize(t);
  InFlight f(p);
  if (r != root) {
    HCOMM_RETURN_IF_ERROR(f.Send(send, bytes, root));
    return f.WaitAll();
  }
  char* all = p.Scratch(0, std::max<size_t>(bytes * n, 1));
  if (bytes > 0) memcpy(all + r * bytes, send, bytes);
  for (int i = 0; i < n; ++i) {
    if (i != r) HCOMM_RETURN_IF_ERROR(f.Recv(all + i * bytes, bytes, i));
  }
  HCOMM_RETURN_IF_ERROR(f.WaitAll());
  ReduceParts(
      recv, [&](int i) -> const char* { return all + i * bytes; }, n, count, t, op, n);
  return absl::OkStatus();
}

absl::Status AllToAllDirect(Peers& p, const void* send, void* recv, size_t bytes_per_rank) {
  const int n = p.size(), r = p.rank();
  const char* in = static_cast<const char*>(send);
  if (send == recv) {  // in place: keep a copy of what we send
    char* copy = p.Scratch(0, std::max<size_t>(bytes_per_rank * n, 1));
    if (bytes_per_rank > 0) memcpy(copy, send, bytes_per_rank * n);
    in = copy;
  }
  char* out = static_cast<char*>(recv);
  if (bytes_per_rank > 0) {
    memmove(out + r * bytes_per_rank, in + r * bytes_per_rank, bytes_per_rank);
  }
  InFlight f(p);
  for (int i = 1; i < n; ++i) {
    int src = Mod(r - i, n);
    HCOMM_RETURN_IF_ERROR(f.Recv(out + src * bytes_per_rank, bytes_per_rank, src));
  }
  for (int i = 1; i < n; ++i) {
    int dst = Mod(r + i, n);
    HCOMM_RETURN_IF_ERROR(f.Send(in + dst * bytes_per_rank, bytes_per_rank, dst));
  }
  return f.WaitAll();
}

absl::Status GatherDirect(Peers& p, const void* send, void* recv, size_t bytes_per_rank,
                          int root) {
  const int n = p.size(), r = p.rank();
  InFlight f(p);
  if (r != root) {
    HCOMM_RETURN_IF_ERROR(f.Send(send, bytes_per_rank, root));
    return f.WaitAll();
  }
  char* out = static_cast<char*>(recv);
  if (bytes_per_rank > 0 && send != recv && out + r * bytes_per_rank != send) {
    memmove(out + r * bytes_per_rank, send, bytes_per_rank);
  }
  for (int i = 0; i < n; ++i) {
    if (i != r) HCOMM_RETURN_IF_ERROR(f.Recv(out + i * bytes_per_rank, bytes_per_rank, i));
  }
  return f.WaitAll();
}

absl::Status ScatterDirect(Peers& p, const void* send, void* recv, size_t bytes_per_rank,
                           int root) {
  const int n = p.size(), r = p.rank();
  InFlight f(p);
  if (r != root) {
    HCOMM_RETURN_IF_ERROR(f.Recv(recv, bytes_per_rank, root));
    return f.WaitAll();
  }
  const char* in = static_cast<const char*>(send);
  for (int i = 1; i < n; ++i) {
    int dst = Mod(r + i, n);
    HCOMM_RETURN_IF_ERROR(f.Send(in + dst * bytes_per_rank, bytes_per_rank, dst));
  }
  HCOMM_RETURN_IF_ERROR(f.WaitAll());
  // In place (recv == send): the root's block stays where it is.
  if (bytes_per_rank > 0 && recv != send && recv != in + r * bytes_per_rank) {
    memmove(recv, in + r * bytes_per_rank, bytes_per_rank);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// The table's rows (entries.h). The direct algorithms complete every
// element in one combine of all ranks' own values, so 16-bit floats travel
// as they are (HalfTravelsAsIs).

namespace entries {

namespace {
size_t Bytes(const CollectiveCall& c) { return c.count * DataTypeSize(c.dtype); }
}  // namespace

double DirectAllReduceCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return t.fan + t.fanned * t.RendezvousUs(t.S) + (t.n - 1) * t.S * t.b +
         t.Reduce((t.n - 1) * t.S, t.S);
}

absl::Status DirectAllReduceRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return AllReduceDirect(p, c.send, c.recv, c.count, c.dtype, c.reduce);
}

double DirectBroadcastCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return t.fan + t.fanned * t.RendezvousUs(t.S) + (t.n - 1) * t.S * t.b;
}

absl::Status DirectBroadcastRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return BroadcastDirect(p, c.recv, Bytes(c), c.root);
}

double DirectReduceCost(double bytes, int nranks, const LinkModel& link) {
  return DirectAllReduceCost(bytes, nranks, link);
}

absl::Status DirectReduceRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return ReduceDirect(p, c.send, c.recv, c.count, c.dtype, c.reduce, c.root);
}

double DirectAllGatherCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return t.fan + t.fanned * t.RendezvousUs(t.S / t.n) + (t.n - 1) / t.n * t.S * t.b * 1.1;
}

absl::Status DirectAllGatherRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return AllGatherDirect(p, c.send, c.recv, Bytes(c));
}

double DirectReduceScatterCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return t.fan + t.fanned * t.RendezvousUs(t.S / t.n) + (t.n - 1) / t.n * t.S * t.b * 1.1 +
         t.Reduce((t.n - 1) / t.n * t.S, t.S / t.n);
}

absl::Status DirectReduceScatterRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return ReduceScatterDirect(p, c.send, c.recv, c.count, c.dtype, c.reduce);
}

double DirectAllToAllCost(double bytes, int nranks, const LinkModel& link) {
  const CostTerms t(bytes, nranks, link);
  return t.fan + t.fanned * t.RendezvousUs(t.S / t.n) + (t.n - 1) / t.n * t.S * t.b;
}

absl::Status DirectAllToAllRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return AllToAllDirect(p, c.send, c.recv, Bytes(c));
}

double DirectGatherCost(double bytes, int nranks, const LinkModel& link) {
  return DirectAllToAllCost(bytes, nranks, link);
}

absl::Status DirectGatherRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return GatherDirect(p, c.send, c.recv, Bytes(c), c.root);
}

double DirectScatterCost(double bytes, int nranks, const LinkModel& link) {
  return DirectAllToAllCost(bytes, nranks, link);
}

absl::Status DirectScatterRun(Peers& p, const CollectiveCall& c, const RunEnv&) {
  return ScatterDirect(p, c.send, c.recv, Bytes(c), c.root);
}

}  // namespace entries

}  // namespace hcomm
