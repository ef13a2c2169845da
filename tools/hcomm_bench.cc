// hcomm_bench: benchmarks in the style of nccl-tests, written against the
// public C API (hcomm/hcomm.h) only.
//
// Every rank of a job runs the same command line; rank 0 prints, the others
// stay quiet:
//
//   hcomm_run -n 2 -- hcomm_bench p2p -b 8 -e 64M -f 2
//   hcomm_run -n 4 -- hcomm_bench allreduce -b 8 -e 64M -f 8 -d float -o sum -a ring
//
// Operations are rows of kOps (an OpDesc each): a name, how many ranks it
// needs, which ranks move data, how to run `iters` unchecked (timed) or one
// checked iteration, how sizes map to element counts, and how to turn times
// into algorithm/bus bandwidth.
//
// p2p: ping-pong between rank 0 and rank 1 (other ranks only join the job,
// meet the others in a message barrier, and leave). One iteration is one
// round trip; the reported time is the one-way time (round trip / 2), rank
// 0's. -d/-o/-a/-r do not apply to it (accepted and ignored).
//
// Collectives (allreduce, broadcast, reduce, allgather, reduce_scatter,
// alltoall, gather, scatter): every rank takes part; -d dtype (default
// float), -o redop (default sum; reductions only), -a algorithm
// (hcomm_comm_set "algo"; by default the library's choice or HCOMM_ALGO), -r
// root (default 0; broadcast, reduce, gather and scatter only), -z wire
// compression (hcomm_comm_set "compression", see below). Sizes and counts
// follow nccl-tests:
//   allreduce, broadcast, reduce: size = the bytes of each rank's vector,
//     count = size / sizeof(dtype);
//   allgather, reduce_scatter, alltoall, gather, scatter: size = the bytes
//     of the whole (gathered / scattered / exchanged) vector, count = the elements per
//     rank = size / sizeof(dtype) / nranks (per peer block for alltoall); the
//     size column shows count * nranks * sizeof(dtype) (size rounded down).
//   algbw = size / time; busbw = algbw x factor: allreduce 2(n-1)/n,
//   reduce_scatter, allgather, alltoall, gather, scatter (n-1)/n,
//   broadcast, reduce 1.
// Only the out-of-place variant is measured (broadcast is in place by API).
//
// copy: no communication; every rank copies its vector (size bytes) from its
// send buffer to its receive buffer with memcpy, all at once, timed like a
// collective. Any allreduce reads each rank's input and writes its output,
// so above the caches the copy's time is the floor under it on the same
// ranks and CPUs. busbw = algbw.
// copy_stream: the same with non-temporal stores (StreamCopy in
// algorithms/kernels/shared_copy.h), which write the output without reading its lines
// first: past the caches that floor is lower than memcpy's wherever memcpy
// keeps ordinary stores (2 ranks on the 2-vCPU Intel VM, 64 MiB: 5.0-6.5
// ms against 9.4-10.9).
//
// Measurement, per message size:
//   iters  = min(-n, max(1, 5e7 / bytes))   (-n for 0 bytes): small messages
//            run -n iterations, large ones fewer, so that one run moves about
//            5e7 bytes and a point of 5 runs takes roughly 0.1-0.5 s at
//            1-5 GB/s (longer only when one iteration alone takes longer);
//   warmup = min(-w, iters) untimed iterations. With -c 1, p2p's warm-up
//            iterations carry data that the receivers verify (a pattern that
//            depends on size, iteration and direction), at least one per
//            size even with -w 0; a collective's first warm-up iteration is
//            the checked one (inputs filled with a rank- and index-dependent
//            pattern that is exact for the dtype and op, the output compared
//            with a reference computed here), the others run unchecked. The
//            timed runs never fill or verify buffers, so checking costs
//            nothing in the times;
//   runs   = --runs (default 5) timed runs of `iters` iterations each.
//            p2p: rank 0's time per iteration. Collectives: every run starts
//            after hcomm_barrier; a run's time is the maximum over ranks
//            (hcomm_allreduce MAX) of each rank's mean time per operation.
//            The tables show the median over runs (p2p also min and max).
//   algbw  = bytes / median time (GB/s, 1e9 B/s); busbw = algbw x the op's
//            bus factor (1 for p2p).
//   #wrong = wrong bytes (p2p) or wrong elements (collectives), summed over
//            ranks.
//
// Compression: -z VALUE (none, fp16, bf16, delta, fp16,delta, bf16,delta)
// sets the world communicator's "compression" key with hcomm_comm_set right
// after init; the library judges the value (a bad one exits 2 with its
// message). With fp16 or bf16 a FLOAT32 collective's data may travel as
// 16-bit floats over TCP (never over shared memory), so the check of a
// -d float collective cannot ask for exact results. It then fills the
// inputs with the same integers plus a fraction of the rank (or block) and
// index that no 16-bit format holds (prod keeps its exact integers), takes
// the reference in double from the float32 inputs, and accepts an element
// whose error is within the library's bound for a sum over n ranks with h
// roundings to 16 bits:
//   |got - want| <= g * sum_j |x_j|,  g = (1+u)^h (1+2^-24)^(n-1) - 1,
//   u = 2^-11 (fp16) or 2^-8 (bf16), n = h = the number of ranks (the ring
//   allreduce rounds each piece n times); sum_j |x_j| is the sum of the
//   magnitudes of the inputs that made the element (1 input for a data-
//   movement collective; avg divides it by n and allows one more float32
//   rounding). The largest |got - want| / sum_j |x_j| over the checked
//   elements of all ranks is reported as max_rel_err (0 when every element
//   is exact). Other dtypes, p2p (sent as bytes) and -z without fp16/bf16
//   are checked exactly, as without -z.
//
// Output: a table on rank 0's stdout, or with --json one JSON object per
// line INSTEAD of the table (nothing else on stdout), written with
// nlohmann/json (numbers as JSON writes them: 9.6e-05). "transport" names the
// transports of the measured links as hcomm_comm_transport reports them
// ("shm", "tcp", "shm+tcp", "self"). Keys in this order:
//   {"op":"p2p","bytes":N,"time_us":MEDIAN,"algbw_gbs":X,"busbw_gbs":X,
//    "wrong":W,"time_min_us":..,"time_max_us":..,"iters":..,"runs":..,
//    "nranks":..,"transport":"..","checked":true}
//   {"op":"allreduce","bytes":N,"time_us":MEDIAN,"algbw_gbs":X,"busbw_gbs":Y,
//    "wrong":W,"count":C,"type":"float","redop":"sum","root":-1,"algo":"auto",
//    "nranks":..,"time_min_us":..,"time_max_us":..,"iters":..,"runs":..,
//    "transport":"..","checked":true,"in_place":false}
// With -z both end with two more keys (absent without -z):
//    ...,"compression":"fp16","max_rel_err":X}
// (max_rel_err: 0 where the check is exact or off.)
//
// Exit status: 0 on success; 1 when an hcomm call fails (stderr:
// "hcomm_bench: <call> failed: <status>: <hcomm_last_error()>") or when the
// data check found wrong data; 2 on bad usage (also a bad -d/-o/-a/-z, or
// -r not below the number of ranks) or too few ranks.

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/kernels/shared_copy.h"
#include "hcomm/hcomm.h"
#include "nlohmann/json.hpp"
#include "tools/hcomm_bench_streams.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// Tags. Benchmark traffic and control messages never share a tag.
constexpr int kTagPing = 1;
constexpr int kTagPong = 2;
constexpr int kTagWrong = 3;
constexpr int kTagBarrier = 4;
constexpr int kTagRelease = 5;

// Iteration scaling (see the file comment).
constexpr double kBytesPerRun = 5e7;
constexpr int kMinIters = 1;

constexpr char kUsage[] =
    "usage: hcomm_bench OP [flags]     (run as every rank: hcomm_run -n N -- hcomm_bench ...)\n"
    "\n"
    "OP:\n"
    "%s"
    "\n"
    "flags (sizes accept K, M, G suffixes = 2^10, 2^20, 2^30):\n"
    "  -b, --minbytes N      smallest message size (default 8)\n"
    "  -e, --maxbytes N      largest message size (default 8M)\n"
    "  -f, --stepfactor F    multiply the size by F (integer >= 2) each step (default 2)\n"
    "  -n, --iters N         iterations per timed run, an upper bound: large sizes use\n"
    "                        min(N, max(1, 5e7 / bytes)) (default 100)\n"
    "  -w, --warmup_iters N  untimed warm-up iterations, at most the timed count (default 10)\n"
    "  -c, --check 0|1       verify the data of warm-up iterations (p2p: all of them;\n"
    "                        collectives: the first), at least one per size; wrong bytes\n"
    "                        (p2p) or elements (collectives) go to #wrong (default 1)\n"
    "  -d, --datatype T      collectives: int8, uint8, int32, uint32, int64, uint64,\n"
    "                        half (float16), bfloat16, float (float32), double (float64)\n"
    "                        (default float)\n"
    "  -o, --op OP           reductions: sum, prod, min, max, avg (default sum)\n"
    "  -a, --algo A          collectives: auto, ring, tree, direct (hcomm_comm_set \"algo\";\n"
    "                        default: the library's choice, or HCOMM_ALGO)\n"
    "  -r, --root R          broadcast, reduce, gather, scatter: the root rank (default 0)\n"
    "  -z, --compression V   hcomm_comm_set \"compression\" V after init: none, fp16, bf16,\n"
    "                        delta, fp16,delta, bf16,delta; with fp16/bf16 the check of\n"
    "                        float collectives allows the documented error bound and the\n"
    "                        output reports max_rel_err (default: not set, HCOMM_COMPRESSION)\n"
    "      --runs N          timed runs per size; the median is reported (default 5)\n"
    "      --json            one JSON object per size on stdout instead of the table\n"
    "  -h, --help            this text\n"
    "\n"
    "Collectives measure the out-of-place variant; sizes as in nccl-tests: allreduce,\n"
    "broadcast, reduce: bytes per rank; allgather, reduce_scatter, alltoall, gather,\n"
    "scatter: bytes of the whole vector, count = elements per rank = size / sizeof(T) /\n"
    "nranks.\n";

// ---------------------------------------------------------------------------
// Errors

// Reports a failed hcomm call and ends the program. The last-error text is
// copied first: it is only valid until the next hcomm call on this thread.
[[noreturn]] void DieHcomm(const char* call, hcomm_status_t status) {
  std::string message = hcomm_last_error();
  std::fprintf(stderr, "hcomm_bench: %s failed: %s: %s\n", call,
               hcomm_status_string(status), message.c_str());
  std::fflush(stdout);
  std::exit(kExitFailure);
}

void Check(hcomm_status_t status, const char* call) {
  if (status != HCOMM_SUCCESS) DieHcomm(call, status);
}

// ---------------------------------------------------------------------------
// Options

struct Options {
  size_t min_bytes = 8;
  size_t max_bytes = size_t{8} << 20;
  size_t factor = 2;
  int iters = 100;
  int warmup = 10;
  int check = 1;
  int runs = 5;
  bool json = false;
  hcomm_dtype_t dtype = HCOMM_FLOAT32;
  hcomm_reduce_op_t redop = HCOMM_SUM;
  std::string algo;  // empty: not set (the library's choice or HCOMM_ALGO)
  int root = 0;
  std::string compression;  // empty: -z not given (HCOMM_COMPRESSION or none)
};

// ---------------------------------------------------------------------------
// Element types and reduction operations (names as nccl-tests prints them)

struct DtypeName {
  const char* name;  // as printed
  hcomm_dtype_t dtype;
  size_t size;
  const char* aliases[3];
};

const DtypeName kDtypes[] = {
    {"int8", HCOMM_INT8, 1, {"char", nullptr, nullptr}},
    {"uint8", HCOMM_UINT8, 1, {nullptr, nullptr, nullptr}},
    {"int32", HCOMM_INT32, 4, {"int", nullptr, nullptr}},
    {"uint32", HCOMM_UINT32, 4, {nullptr, nullptr, nullptr}},
    {"int64", HCOMM_INT64, 8, {nullptr, nullptr, nullptr}},
    {"uint64", HCOMM_UINT64, 8, {nullptr, nullptr, nullptr}},
    {"half", HCOMM_FLOAT16, 2, {"float16", "fp16", nullptr}},
    {"bfloat16", HCOMM_BFLOAT16, 2, {"bf16", nullptr, nullptr}},
    {"float", HCOMM_FLOAT32, 4, {"float32", "fp32", nullptr}},
    {"double", HCOMM_FLOAT64, 8, {"float64", "fp64", nullptr}},
};

const DtypeName& DtypeInfo(hcomm_dtype_t t) {
  for (const DtypeName& d : kDtypes) {
    if (d.dtype == t) return d;
  }
  return kDtypes[8];
}

bool ParseDtype(const std::string& text, hcomm_dtype_t* out) {
  for (const DtypeName& d : kDtypes) {
    bool match = text == d.name;
    for (const char* alias : d.aliases) match = match || (alias != nullptr && text == alias);
    if (match) {
      *out = d.dtype;
      return true;
    }
  }
  return false;
}

struct RedopName {
  const char* name;
  hcomm_reduce_op_t op;
};

const RedopName kRedops[] = {{"sum", HCOMM_SUM},
                             {"prod", HCOMM_PROD},
                             {"min", HCOMM_MIN},
                             {"max", HCOMM_MAX},
                             {"avg", HCOMM_AVG}};

const char* RedopString(hcomm_reduce_op_t op) {
  for (const RedopName& r : kRedops) {
    if (r.op == op) return r.name;
  }
  return "?";
}

bool ParseRedop(const std::string& text, hcomm_reduce_op_t* out) {
  for (const RedopName& r : kRedops) {
    if (text == r.name) {
      *out = r.op;
      return true;
    }
  }
  return false;
}

bool ValidAlgo(const std::string& text) {
  return text == "auto" || text == "ring" || text == "tree" || text == "direct";
}

// Parses "8", "64K", "1M", "2G" (suffix case-insensitive, optional trailing
// "B"/"iB"). Returns false on junk or overflow.
bool ParseSize(const char* text, size_t* out) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0) return false;
  std::string suffix(end);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    shift = 30;
  } else {
    return false;
  }
  if (shift > 0 && value > (~0ULL >> shift)) return false;
  value <<= shift;
  if (value > SIZE_MAX) return false;
  *out = static_cast<size_t>(value);
  return true;
}

bool ParseInt(const char* text, long min, long max, long* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < min || value > max) return false;
  *out = value;
  return true;
}

// ---------------------------------------------------------------------------
// Data pattern: 64-bit words from a per-(size, iteration, direction) seed.

uint64_t Mix64(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t PatternSeed(size_t bytes, int iter, int direction) {
  return Mix64(Mix64(bytes) ^ (static_cast<uint64_t>(iter) << 8) ^
               static_cast<uint64_t>(direction));
}

// Writes the pattern (invert = false) or its bitwise complement (invert =
// true: a receive buffer that fails the check wherever nothing was written).
void FillPattern(unsigned char* buf, size_t bytes, uint64_t seed, bool invert) {
  const uint64_t flip = invert ? ~0ULL : 0;
  size_t i = 0;
  for (uint64_t word = 0; bytes - i >= 8; i += 8, ++word) {
    uint64_t v = Mix64(seed ^ word) ^ flip;
    std::memcpy(buf + i, &v, 8);
  }
  if (i < bytes) {
    uint64_t v = Mix64(seed ^ (i / 8)) ^ flip;
    std::memcpy(buf + i, &v, bytes - i);
  }
}

// Counts the bytes of buf[0, received) that differ from the pattern, plus
// the bytes that did not arrive at all (expected - received).
uint64_t CountWrong(const unsigned char* buf, size_t expected, size_t received,
                    uint64_t seed) {
  uint64_t wrong = expected > received ? expected - received : 0;
  const size_t n = std::min(expected, received);
  for (size_t i = 0; i < n; i += std::min<size_t>(8, n - i)) {
    uint64_t want = Mix64(seed ^ (i / 8));
    const size_t len = std::min<size_t>(8, n - i);
    uint64_t got = 0;
    std::memcpy(&got, buf + i, len);
    if (std::memcmp(&got, &want, len) == 0) continue;
    const auto* w = reinterpret_cast<const unsigned char*>(&want);
    for (size_t k = 0; k < len; ++k) wrong += buf[i + k] != w[k];
  }
  return wrong;
}

// ---------------------------------------------------------------------------
// The job and the operation table

struct Bench {
  hcomm_comm_t comm = nullptr;
  int rank = 0;
  int size = 0;
  Options opt;
  // Allocated once at the largest size, by participating ranks only.
  unsigned char* sendbuf = nullptr;
  unsigned char* recvbuf = nullptr;
  std::string algo;       // the algorithm in effect, as printed
  std::string transport;  // the transports in use, as printed
  // -z with fp16 or bf16 and -d float: inputs with fractions, results
  // checked within the error bound (see the file comment).
  bool lossy = false;
  double gamma = 0;        // g of the bound, for this job's number of ranks
  double max_rel_err = 0;  // this rank's, over the checks since last reset
};

struct OpDesc {
  const char* name;
  const char* summary;
  int min_ranks;
  // Whether `rank` moves data. Rank 0 always does: it times and prints.
  bool (*participates)(int rank, int size);
  // Bytes of send and receive buffer a participant needs for `bytes`.
  size_t (*buffer_bytes)(size_t bytes, int size);
  // Reported time per iteration = measured time per iteration / divisor
  // (p2p: 2, the one-way time of a round trip).
  double time_divisor;
  // busbw = algbw x bus_factor(size), as in nccl-tests.
  double (*bus_factor)(int size);
  // Runs `iters` iterations without touching the data (the timed path).
  void (*run)(Bench& b, size_t bytes, int iters);
  // Runs iteration `iter` with a pattern in flight and returns the number of
  // wrong bytes (p2p) or elements (collectives) this rank received.
  uint64_t (*checked_iter)(Bench& b, size_t bytes, int iter);
  // Collectives only (nullptr for p2p, which is then timed by rank 0 alone):
  // nccl-tests' count for a size of `bytes` with elements of `esize` bytes on
  // `n` ranks, and the bytes the size column shows for that count.
  size_t (*count_for)(size_t bytes, size_t esize, int n);
  size_t (*shown_bytes)(size_t count, size_t esize, int n);
  bool uses_redop;  // prints -o as its redop (else "none")
  bool uses_root;   // prints -r as its root (else -1)
};

// --- p2p: ping-pong between ranks 0 and 1 ---

bool P2pParticipates(int rank, int /*size*/) { return rank < 2; }
size_t P2pBufferBytes(size_t bytes, int /*size*/) { return bytes; }
double P2pBusFactor(int /*size*/) { return 1.0; }

void P2pRun(Bench& b, size_t bytes, int iters) {
  for (int i = 0; i < iters; ++i) {
    if (b.rank == 0) {
      Check(hcomm_send(b.sendbuf, bytes, HCOMM_UINT8, 1, kTagPing, b.comm), "hcomm_send");
      Check(hcomm_recv(b.recvbuf, bytes, HCOMM_UINT8, 1, kTagPong, b.comm), "hcomm_recv");
    } else {
      Check(hcomm_recv(b.recvbuf, bytes, HCOMM_UINT8, 0, kTagPing, b.comm), "hcomm_recv");
      Check(hcomm_send(b.sendbuf, bytes, HCOMM_UINT8, 0, kTagPong, b.comm), "hcomm_send");
    }
  }
}

// Receives one message of `bytes` into recvbuf (prepared with the inverted
// pattern) and returns its wrong bytes, including any that never arrived.
uint64_t ReceiveAndCount(Bench& b, size_t bytes, int peer, int tag, uint64_t seed) {
  FillPattern(b.recvbuf, bytes, seed, /*invert=*/true);
  hcomm_request_t req = nullptr;
  Check(hcomm_irecv(b.recvbuf, bytes, HCOMM_UINT8, peer, tag, b.comm, &req), "hcomm_irecv");
  Check(hcomm_wait(req), "hcomm_wait");
  size_t received = 0;
  Check(hcomm_request_info(req, nullptr, nullptr, &received), "hcomm_request_info");
  Check(hcomm_request_free(req), "hcomm_request_free");
  return CountWrong(b.recvbuf, bytes, received, seed);
}

uint64_t P2pCheckedIter(Bench& b, size_t bytes, int iter) {
  const uint64_t ping = PatternSeed(bytes, iter, kTagPing);
  const uint64_t pong = PatternSeed(bytes, iter, kTagPong);
  if (b.rank == 0) {
    FillPattern(b.sendbuf, bytes, ping, false);
    Check(hcomm_send(b.sendbuf, bytes, HCOMM_UINT8, 1, kTagPing, b.comm), "hcomm_send");
    return ReceiveAndCount(b, bytes, 1, kTagPong, pong);
  }
  const uint64_t wrong = ReceiveAndCount(b, bytes, 0, kTagPing, ping);
  FillPattern(b.sendbuf, bytes, pong, false);
  Check(hcomm_send(b.sendbuf, bytes, HCOMM_UINT8, 0, kTagPong, b.comm), "hcomm_send");
  return wrong;
}

// --- Collectives ---
//
// Inputs are small integers, which every dtype holds exactly, chosen so that
// every result is exact too: sum of values in [-2, 2] ([0, 4] unsigned),
// prod of 1s with one 2 (and one -1 on every other index for signed and
// floating types), min/max of values in [-5, 5] ([0, 10]), avg of c(i) + d(r)
// where the d(r) (+1, -1, ...) cancel, so the average is c(i) exactly.
// Integer results wrap as the library's arithmetic does; floating ones stay
// exact while |sum| <= 256 (bfloat16), i.e. up to 128 ranks.

bool IsFloatType(hcomm_dtype_t t) {
  return t == HCOMM_FLOAT16 || t == HCOMM_BFLOAT16 || t == HCOMM_FLOAT32 || t == HCOMM_FLOAT64;
}

bool IsUnsignedType(hcomm_dtype_t t) {
  return t == HCOMM_UINT8 || t == HCOMM_UINT32 || t == HCOMM_UINT64;
}

// float -> IEEE binary16 / bfloat16 bits; exact for the small integers used
// here (round to nearest even in general, no NaN handling needed).
uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (absx < 0x38800000u) {  // below the smallest normal half: flush (not used)
    return sign;
  }
  const uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t mant = absx & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

uint16_t FloatToBfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// Encodes the integer v as a value of type t into out (t's size bytes).
void Encode(hcomm_dtype_t t, int64_t v, unsigned char* out) {
  switch (t) {
    case HCOMM_INT8:
    case HCOMM_UINT8: {
      const uint8_t x = static_cast<uint8_t>(v);
      std::memcpy(out, &x, 1);
      break;
    }
    case HCOMM_INT32:
    case HCOMM_UINT32: {
      const uint32_t x = static_cast<uint32_t>(v);
      std::memcpy(out, &x, 4);
      break;
    }
    case HCOMM_INT64:
    case HCOMM_UINT64: {
      const uint64_t x = static_cast<uint64_t>(v);
      std::memcpy(out, &x, 8);
      break;
    }
    case HCOMM_FLOAT16: {
      const uint16_t x = FloatToHalf(static_cast<float>(v));
      std::memcpy(out, &x, 2);
      break;
    }
    case HCOMM_BFLOAT16: {
      const uint16_t x = FloatToBfloat16(static_cast<float>(v));
      std::memcpy(out, &x, 2);
      break;
    }
    case HCOMM_FLOAT32: {
      const float x = static_cast<float>(v);
      std::memcpy(out, &x, 4);
      break;
    }
    case HCOMM_FLOAT64: {
      const double x = static_cast<double>(v);
      std::memcpy(out, &x, 8);
      break;
    }
  }
}

// What an element holds before the operation writes it: a value no check
// expects (NaN for floating types, 0x80.. for integers).
void FillGarbage(unsigned char* buf, size_t bytes, hcomm_dtype_t t) {
  std::memset(buf, IsFloatType(t) ? 0xff : 0x80, bytes);
}

// avg: every rank's element i is AvgBase(i) + d(rank), the d cancelling.
int64_t AvgBase(hcomm_dtype_t t, size_t i) {
  return IsUnsignedType(t) ? static_cast<int64_t>(i % 3) + 1 : static_cast<int64_t>(i % 5) - 2;
}

// Rank r's input element i of a reduction with `op` on n ranks.
int64_t ReduceInput(hcomm_dtype_t t, hcomm_reduce_op_t op, int r, int n, size_t i) {
  const bool is_unsigned = IsUnsignedType(t);
  const uint64_t ur = static_cast<uint64_t>(r);
  switch (op) {
    case HCOMM_SUM: {
      const int64_t v = static_cast<int64_t>((ur * 7 + i) % 5);
      return is_unsigned ? v : v - 2;
    }
    case HCOMM_MIN:
    case HCOMM_MAX: {
      const int64_t v = static_cast<int64_t>((ur * 13 + i * 3) % 11);
      return is_unsigned ? v : v - 5;
    }
    case HCOMM_PROD: {
      const size_t un = static_cast<size_t>(n);
      if (static_cast<size_t>(r) == i % un) return 2;
      if (!is_unsigned && n > 1 && static_cast<size_t>(r) == (i + 1) % un && (i / un) % 2 == 1) {
        return -1;
      }
      return 1;
    }
    case HCOMM_AVG: {
      const int64_t c = AvgBase(t, i);
      int64_t d = r % 2 == 0 ? 1 : -1;
      if (n % 2 == 1 && r == n - 1) d = 0;
      return c + d;
    }
  }
  return 0;
}

// The reduction over ranks 0..n-1 of element i (integers wrap when encoded).
int64_t ReduceExpected(hcomm_dtype_t t, hcomm_reduce_op_t op, int n, size_t i) {
  switch (op) {
    case HCOMM_SUM: {
      uint64_t acc = 0;
      for (int r = 0; r < n; ++r) acc += static_cast<uint64_t>(ReduceInput(t, op, r, n, i));
      return static_cast<int64_t>(acc);
    }
    case HCOMM_MIN:
    case HCOMM_MAX: {
      int64_t acc = ReduceInput(t, op, 0, n, i);
      for (int r = 1; r < n; ++r) {
        const int64_t v = ReduceInput(t, op, r, n, i);
        acc = op == HCOMM_MIN ? std::min(acc, v) : std::max(acc, v);
      }
      return acc;
    }
    case HCOMM_PROD: {
      const size_t un = static_cast<size_t>(n);
      return (!IsUnsignedType(t) && n > 1 && (i / un) % 2 == 1) ? -2 : 2;
    }
    case HCOMM_AVG:
      return AvgBase(t, i);
  }
  return 0;
}

// Element i of the block that `key` (a rank, or a source/destination pair)
// contributes to a data-movement collective.
int64_t MoveValue(hcomm_dtype_t t, uint64_t key, size_t i) {
  const int64_t v = static_cast<int64_t>((key * 131 + i * 7) % 97);
  return IsUnsignedType(t) ? v : v - 48;
}

size_t Esize(const Bench& b) { return DtypeInfo(b.opt.dtype).size; }

// buf[i] = f(i) for i < count.
template <typename F>
void FillElems(unsigned char* buf, size_t count, hcomm_dtype_t t, F f) {
  const size_t es = DtypeInfo(t).size;
  for (size_t i = 0; i < count; ++i) Encode(t, f(i), buf + i * es);
}

// The number of i < count with buf[i] != f(i).
template <typename F>
uint64_t CountWrongElems(const unsigned char* buf, size_t count, hcomm_dtype_t t, F f) {
  const size_t es = DtypeInfo(t).size;
  unsigned char want[8];
  uint64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    Encode(t, f(i), want);
    wrong += std::memcmp(buf + i * es, want, es) != 0;
  }
  return wrong;
}

// --- The checked elements: exact, or within the bound under lossy compression
//
// The checks below fill and compare through these four helpers, which
// follow the patterns above bit for bit unless b.lossy is set (-z with
// fp16 or bf16, -d float): then every input gets a fraction that no 16-bit
// float holds, the reference is computed in double from the float32
// inputs, and an element passes when its error is within g * sum_j |x_j|.

// A fraction in [-1/3, 1/3] of (key, i) with no short binary expansion.
double Fraction(uint64_t key, size_t i) {
  return (static_cast<double>(Mix64(Mix64(key) ^ i) % 2001) - 1000.0) / 3001.0;
}

// Rank r's float32 input element i of a lossy-checked reduction with `op`
// on n ranks: the exact pattern plus a fraction (prod keeps its integers:
// its products, unlike sums, would not be bounded by g * sum |x_j|).
float LossyReduceInput(hcomm_reduce_op_t op, int r, int n, size_t i) {
  const double base = static_cast<double>(ReduceInput(HCOMM_FLOAT32, op, r, n, i));
  if (op == HCOMM_PROD) return static_cast<float>(base);
  return static_cast<float>(base + Fraction(static_cast<uint64_t>(r), i));
}

// The element that key's block holds at index i, lossy-checked.
float LossyMoveValue(uint64_t key, size_t i) {
  return static_cast<float>(static_cast<double>(MoveValue(HCOMM_FLOAT32, key, i)) +
                            Fraction(key, i));
}

// A reference element and the sum of the magnitudes of the inputs that
// make it (the scale of its error bound).
struct Want {
  double value;
  double scale;
};

Want LossyReduceWant(hcomm_reduce_op_t op, int n, size_t i) {
  Want w{0, 0};
  for (int r = 0; r < n; ++r) {
    const double x = LossyReduceInput(op, r, n, i);
    if (r == 0 || op == HCOMM_SUM || op == HCOMM_AVG) {
      w.value = r == 0 ? x : w.value + x;
    } else if (op == HCOMM_MIN) {
      w.value = std::min(w.value, x);
    } else if (op == HCOMM_MAX) {
      w.value = std::max(w.value, x);
    } else {  // HCOMM_PROD: exact
      w.value *= x;
    }
    w.scale += std::fabs(x);
  }
  if (op == HCOMM_PROD) w.scale = std::fabs(w.value);
  if (op == HCOMM_AVG) {
    w.value /= n;
    w.scale /= n;
  }
  return w;
}

// Whether the float32 element at `p` is within g * w.scale of w.value;
// notes its relative error in b.max_rel_err. NaN (nothing written) fails.
bool WithinBound(Bench& b, const unsigned char* p, const Want& w, double g) {
  float got;
  std::memcpy(&got, p, 4);
  const double err = std::fabs(static_cast<double>(got) - w.value);
  if (w.scale > 0 && std::isfinite(err)) b.max_rel_err = std::max(b.max_rel_err, err / w.scale);
  return err <= g * w.scale;
}

// Rank b.rank's input vector of a reduction: count elements.
void FillReduceInputs(Bench& b, unsigned char* buf, size_t count) {
  const hcomm_dtype_t t = b.opt.dtype;
  const hcomm_reduce_op_t op = b.opt.redop;
  if (b.lossy) {
    for (size_t j = 0; j < count; ++j) {
      const float x = LossyReduceInput(op, b.rank, b.size, j);
      std::memcpy(buf + j * 4, &x, 4);
    }
    return;
  }
  FillElems(buf, count, t, [&](size_t i) { return ReduceInput(t, op, b.rank, b.size, i); });
}

// The wrong elements among `count` results, result i being element
// first + i of the reduction over all ranks.
uint64_t CountWrongReduced(Bench& b, const unsigned char* buf, size_t count, size_t first) {
  const hcomm_dtype_t t = b.opt.dtype;
  const hcomm_reduce_op_t op = b.opt.redop;
  if (b.lossy) {
    // avg rounds once more, dividing the float32 sum.
    const double g = op == HCOMM_AVG ? (1 + b.gamma) * (1 + std::ldexp(1.0, -24)) - 1 : b.gamma;
    uint64_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      wrong += !WithinBound(b, buf + i * 4, LossyReduceWant(op, b.size, first + i), g);
    }
    return wrong;
  }
  return CountWrongElems(buf, count, t,
                         [&](size_t i) { return ReduceExpected(t, op, b.size, first + i); });
}

// Data movement: element j < count of buf is index ki(j).second of the
// block keyed ki(j).first (a rank, or a source/destination pair).
template <typename KeyIndex>
void FillMoved(Bench& b, unsigned char* buf, size_t count, KeyIndex ki) {
  const hcomm_dtype_t t = b.opt.dtype;
  if (b.lossy) {
    for (size_t j = 0; j < count; ++j) {
      const auto [key, i] = ki(j);
      const float x = LossyMoveValue(key, i);
      std::memcpy(buf + j * 4, &x, 4);
    }
    return;
  }
  FillElems(buf, count, t, [&](size_t j) {
    const auto [key, i] = ki(j);
    return MoveValue(t, key, i);
  });
}

template <typename KeyIndex>
uint64_t CountWrongMoved(Bench& b, const unsigned char* buf, size_t count, KeyIndex ki) {
  const hcomm_dtype_t t = b.opt.dtype;
  if (b.lossy) {
    uint64_t wrong = 0;
    for (size_t j = 0; j < count; ++j) {
      const auto [key, i] = ki(j);
      const double x = LossyMoveValue(key, i);
      wrong += !WithinBound(b, buf + j * 4, Want{x, std::fabs(x)}, b.gamma);
    }
    return wrong;
  }
  return CountWrongElems(buf, count, t, [&](size_t j) {
    const auto [key, i] = ki(j);
    return MoveValue(t, key, i);
  });
}

// The (key, index) of element j of a vector that is one block of `key`.
auto OneBlock(uint64_t key) {
  return [key](size_t j) { return std::pair<uint64_t, size_t>{key, j}; };
}

// The (key, index) of element j of a vector of blocks of `count` elements,
// block k keyed key_of(k).
template <typename KeyOf>
auto Blocks(size_t count, KeyOf key_of) {
  return [count, key_of](size_t j) {
    return std::pair<uint64_t, size_t>{key_of(j / count), j % count};
  };
}

size_t CountPerRankVector(size_t bytes, size_t esize, int /*n*/) { return bytes / esize; }
size_t CountPerRankOfTotal(size_t bytes, size_t esize, int n) {
  return bytes / esize / static_cast<size_t>(n);
}
size_t ShownPerRankVector(size_t count, size_t esize, int /*n*/) { return count * esize; }
size_t ShownTotal(size_t count, size_t esize, int n) {
  return count * esize * static_cast<size_t>(n);
}

bool AllParticipate(int /*rank*/, int /*size*/) { return true; }
size_t CollBufferBytes(size_t bytes, int /*size*/) { return bytes; }
double AllReduceBusFactor(int n) { return n > 0 ? 2.0 * (n - 1) / n : 0.0; }
double GatherLikeBusFactor(int n) { return n > 0 ? static_cast<double>(n - 1) / n : 0.0; }
double OneBusFactor(int /*n*/) { return 1.0; }

// allreduce: count = bytes / sizeof(T) per rank.
void AllReduceRun(Bench& b, size_t bytes, int iters) {
  const size_t count = bytes / Esize(b);
  for (int i = 0; i < iters; ++i) {
    Check(hcomm_allreduce(b.sendbuf, b.recvbuf, count, b.opt.dtype, b.opt.redop, b.comm),
          "hcomm_allreduce");
  }
}

uint64_t AllReduceChecked(Bench& b, size_t bytes, int /*iter*/) {
  const size_t count = bytes / Esize(b);
  FillReduceInputs(b, b.sendbuf, count);
  FillGarbage(b.recvbuf, count * Esize(b), b.opt.dtype);
  AllReduceRun(b, bytes, 1);
  return CountWrongReduced(b, b.recvbuf, count, 0);
}

// broadcast (in place by API): count = bytes / sizeof(T); root's recvbuf.
void BroadcastRun(Bench& b, size_t bytes, int iters) {
  const size_t count = bytes / Esize(b);
  for (int i = 0; i < iters; ++i) {
    Check(hcomm_broadcast(b.recvbuf, count, b.opt.dtype, b.opt.root, b.comm), "hcomm_broadcast");
  }
}

uint64_t BroadcastChecked(Bench& b, size_t bytes, int /*iter*/) {
  const size_t count = bytes / Esize(b);
  const uint64_t root = static_cast<uint64_t>(b.opt.root);
  if (b.rank == b.opt.root) {
    FillMoved(b, b.recvbuf, count, OneBlock(root));
  } else {
    FillGarbage(b.recvbuf, count * Esize(b), b.opt.dtype);
  }
  BroadcastRun(b, bytes, 1);
  return CountWrongMoved(b, b.recvbuf, count, OneBlock(root));
}

// reduce: count = bytes / sizeof(T); only the root's result is checked.
void ReduceRun(Bench& b, size_t bytes, int iters) {
  const size_t count = bytes / Esize(b);
  for (int i = 0; i < iters; ++i) {
    Check(hcomm_reduce(b.sendbuf, b.recvbuf, count, b.opt.dtype, b.opt.redop, b.opt.root, b.comm),
          "hcomm_reduce");
  }
}

uint64_t ReduceChecked(Bench& b, size_t bytes, int /*iter*/) {
  const size_t count = bytes / Esize(b);
  FillReduceInputs(b, b.sendbuf, count);
  FillGarbage(b.recvbuf, count * Esize(b), b.opt.dtype);
  ReduceRun(b, bytes, 1);
  if (b.rank != b.opt.root) return 0;
  return CountWrongReduced(b, b.recvbuf, count, 0);
}

// allgather: size = the gathered vector; count = size / sizeof(T) / n per rank.
void AllGatherRun(Bench& b, size_t bytes, int iters) {
  const size_t count = CountPerRankOfTotal(bytes, Esize(b), b.size);
  for (int i = 0; i < iters; ++i) {
    Check(hcomm_allgather(b.sendbuf, b.recvbuf, count, b.opt.dtype, b.comm), "hcomm_allgather");
  }
}

// Runs an allgather or gather once (`run`) with every rank's block keyed
// by its rank, and counts the wrong elements of the gathered vector where
// `gets` (the root, for gather; every rank, for allgather).
uint64_t GatheredChecked(Bench& b, size_t bytes, void (*run)(Bench&, size_t, int), bool gets) {
  const size_t count = CountPerRankOfTotal(bytes, Esize(b), b.size);
  const uint64_t me = static_cast<uint64_t>(b.rank);
  FillMoved(b, b.sendbuf, count, OneBlock(me));
  FillGarbage(b.recvbuf, count * static_cast<size_t>(b.size) * Esize(b), b.opt.dtype);
  run(b, bytes, 1);
  if (!gets) return 0;
  return CountWrongMoved(b, b.recvbuf, count * static_cast<size_t>(b.size),
                         Blocks(count, [](size_t k) { return static_cast<uint64_t>(k); }));
}

uint64_t AllGatherChecked(Bench& b, size_t bytes, int /*iter*/) {
  return GatheredChecked(b, bytes, AllGatherRun, true);
}

// reduce_scatter: size = the input vector; count = size / sizeof(T) / n per rank.
void ReduceScatterRun(Bench& b, size_t bytes, int iters) {
  const size_t count = CountPerRankOfTotal(bytes, Esize(b), b.size);
  for (int i = 0; i < iters; ++i) {
    Check(hcomm_reduce_scatter(b.sendbuf, b.recvbuf, count, b.opt.dtype, b.opt.redop, b.comm),
          "hcomm_reduce_scatter");
  }
}

uint64_t ReduceScatterChecked(Bench& b, size_t bytes, int /*iter*/) {
  const size_t count = CountPerRankOfTotal(bytes, Esize(b), b.size);
  const size_t base = count * static_cast<size_t>(b.rank);
  FillReduceInputs(b, b.sendbuf, count * static_cast<size_t>(b.size));
  FillGarbage(b.recvbuf, count * Esize(b), b.opt.dtype);
  ReduceScatterRun(b, bytes, 1);
  return CountWrongReduced(b, b.recvbuf, count, base);
}

// alltoall: size = each rank's whole send (= receive) vector; count =
// size / sizeof(T) / n per peer block.
void AllToAllRun(Bench& b, size_t bytes, int iters) {
  const size_t count = CountPerRankOfTotal(bytes, Esize(b), b.size);
  for (int i = 0; i < iters; ++i) {
    Check(hcomm_alltoall(b.sendbuf, b.recvbuf, count, b.opt.dtype, b.comm), "hcomm_alltoall");
  }
}

uint64_t AllToAllChecked(Bench& b, size_t bytes, int /*iter*/) {
  const size_t count = CountPerRankOfTotal(bytes, Esize(b), b.size);
  const uint64_t n = static_cast<uint64_t>(b.size), me = static_cast<uint64_t>(b.rank);
  const size_t total = count * static_cast<size_t>(b.size);
  // Block k of my send vector goes to rank k: key (me -> k) = me * n + k.
  FillMoved(b, b.sendbuf, total, Blocks(count, [me, n](size_t k) { return me * n + k; }));
  FillGarbage(b.recvbuf, total * Esize(b), b.opt.dtype);
  AllToAllRun(b, bytes, 1);
  // Block k of my receive vector came from rank k: key (k -> me).
  return CountWrongMoved(b, b.recvbuf, total,
                         Blocks(count, [me, n](size_t k) { return k * n + me; }));
}

// gather to -r: size = the gathered vector; count = size / sizeof(T) / n
// per rank; only the root's result is checked.
void GatherRun(Bench& b, size_t bytes, int iters) {
  const size_t count = CountPerRankOfTotal(bytes, Esize(b), b.size);
  for (int i = 0; i < iters; ++i) {
    Check(hcomm_gather(b.sendbuf, b.recvbuf, count, b.opt.dtype, b.opt.root, b.comm),
          "hcomm_gather");
  }
}

uint64_t GatherChecked(Bench& b, size_t bytes, int /*iter*/) {
  return GatheredChecked(b, bytes, GatherRun, b.rank == b.opt.root);
}

// scatter from -r: size = the root's whole vector; count = size / sizeof(T)
// / n per rank.
void ScatterRun(Bench& b, size_t bytes, int iters) {
  const size_t count = CountPerRankOfTotal(bytes, Esize(b), b.size);
  for (int i = 0; i < iters; ++i) {
    Check(hcomm_scatter(b.sendbuf, b.recvbuf, count, b.opt.dtype, b.opt.root, b.comm),
          "hcomm_scatter");
  }
}

uint64_t ScatterChecked(Bench& b, size_t bytes, int /*iter*/) {
  const size_t count = CountPerRankOfTotal(bytes, Esize(b), b.size);
  const uint64_t me = static_cast<uint64_t>(b.rank);
  if (b.rank == b.opt.root) {
    // Block k of the root's vector goes to rank k.
    FillMoved(b, b.sendbuf, count * static_cast<size_t>(b.size),
              Blocks(count, [](size_t k) { return static_cast<uint64_t>(k); }));
  }
  FillGarbage(b.recvbuf, count * Esize(b), b.opt.dtype);
  ScatterRun(b, bytes, 1);
  return CountWrongMoved(b, b.recvbuf, count, OneBlock(me));
}

// copy: no communication. Each rank copies its vector from its send
// buffer into its receive buffer (memcpy), all ranks at once: the least any
// collective that reads every rank's input and writes its output (allreduce,
// broadcast's receivers, ...) can take on the same ranks and CPUs. Above the
// caches this is the memory's floor, which hcomm's times are set beside in
// tools/compare_peers.sh.
void CopyRun(Bench& b, size_t bytes, int iters) {
  for (int i = 0; i < iters; ++i) {
    std::memcpy(b.recvbuf, b.sendbuf, bytes);
    // Each copy happens: the compiler may not merge repeated ones.
    asm volatile("" ::: "memory");
  }
}

void CopyStreamRun(Bench& b, size_t bytes, int iters) {
  for (int i = 0; i < iters; ++i) hcomm::StreamCopy(b.recvbuf, b.sendbuf, bytes);
}

// Either copy, checked: the output is the rank's input.
uint64_t CopyCheckedBy(Bench& b, size_t bytes, void (*run)(Bench&, size_t, int)) {
  const size_t count = bytes / Esize(b);
  const uint64_t me = static_cast<uint64_t>(b.rank);
  FillMoved(b, b.sendbuf, count, OneBlock(me));
  FillGarbage(b.recvbuf, count * Esize(b), b.opt.dtype);
  run(b, bytes, 1);
  return CountWrongMoved(b, b.recvbuf, count, OneBlock(me));
}

uint64_t CopyChecked(Bench& b, size_t bytes, int /*iter*/) {
  return CopyCheckedBy(b, bytes, CopyRun);
}

uint64_t CopyStreamChecked(Bench& b, size_t bytes, int /*iter*/) {
  return CopyCheckedBy(b, bytes, CopyStreamRun);
}

const OpDesc kOps[] = {
    {"p2p", "ping-pong between rank 0 and rank 1; time = one-way (round trip / 2)",
     /*min_ranks=*/2, P2pParticipates, P2pBufferBytes, /*time_divisor=*/2.0, P2pBusFactor,
     P2pRun, P2pCheckedIter, nullptr, nullptr, false, false},
    {"allreduce", "hcomm_allreduce; size = bytes per rank; busbw = algbw x 2(n-1)/n",
     /*min_ranks=*/1, AllParticipate, CollBufferBytes, 1.0, AllReduceBusFactor, AllReduceRun,
     AllReduceChecked, CountPerRankVector, ShownPerRankVector, /*uses_redop=*/true,
     /*uses_root=*/false},
    {"broadcast", "hcomm_broadcast from -r; size = bytes per rank; busbw = algbw",
     /*min_ranks=*/1, AllParticipate, CollBufferBytes, 1.0, OneBusFactor, BroadcastRun,
     BroadcastChecked, CountPerRankVector, ShownPerRankVector, false, true},
    {"reduce", "hcomm_reduce to -r; size = bytes per rank; busbw = algbw",
     /*min_ranks=*/1, AllParticipate, CollBufferBytes, 1.0, OneBusFactor, ReduceRun,
     ReduceChecked, CountPerRankVector, ShownPerRankVector, true, true},
    {"allgather", "hcomm_allgather; size = gathered bytes, count per rank = size/T/n; "
     "busbw = algbw x (n-1)/n",
     /*min_ranks=*/1, AllParticipate, CollBufferBytes, 1.0, GatherLikeBusFactor, AllGatherRun,
     AllGatherChecked, CountPerRankOfTotal, ShownTotal, false, false},
    {"reduce_scatter", "hcomm_reduce_scatter; size = input bytes, count per rank = size/T/n; "
     "busbw = algbw x (n-1)/n",
     /*min_ranks=*/1, AllParticipate, CollBufferBytes, 1.0, GatherLikeBusFactor,
     ReduceScatterRun, ReduceScatterChecked, CountPerRankOfTotal, ShownTotal, true, false},
    {"alltoall", "hcomm_alltoall; size = bytes sent per rank, count per peer = size/T/n; "
     "busbw = algbw x (n-1)/n",
     /*min_ranks=*/1, AllParticipate, CollBufferBytes, 1.0, GatherLikeBusFactor, AllToAllRun,
     AllToAllChecked, CountPerRankOfTotal, ShownTotal, false, false},
    {"gather", "hcomm_gather to -r; size = gathered bytes, count per rank = size/T/n; "
     "busbw = algbw x (n-1)/n",
     /*min_ranks=*/1, AllParticipate, CollBufferBytes, 1.0, GatherLikeBusFactor, GatherRun,
     GatherChecked, CountPerRankOfTotal, ShownTotal, false, true},
    {"scatter", "hcomm_scatter from -r; size = the root's bytes, count per rank = size/T/n; "
     "busbw = algbw x (n-1)/n",
     /*min_ranks=*/1, AllParticipate, CollBufferBytes, 1.0, GatherLikeBusFactor, ScatterRun,
     ScatterChecked, CountPerRankOfTotal, ShownTotal, false, true},
    {"copy", "no communication: each rank memcpy()s its vector (size bytes) into its "
     "receive buffer; the memory floor beside allreduce; busbw = algbw",
     /*min_ranks=*/1, AllParticipate, CollBufferBytes, 1.0, OneBusFactor, CopyRun, CopyChecked,
     CountPerRankVector, ShownPerRankVector, false, false},
    {"copy_stream", "copy with non-temporal stores (around the caches); busbw = algbw",
     /*min_ranks=*/1, AllParticipate, CollBufferBytes, 1.0, OneBusFactor, CopyStreamRun,
     CopyStreamChecked, CountPerRankVector, ShownPerRankVector, false, false},
};

const OpDesc* FindOp(const std::string& name) {
  for (const OpDesc& op : kOps) {
    if (name == op.name) return &op;
  }
  return nullptr;
}

void PrintUsage(FILE* out) {
  std::string ops;
  for (const OpDesc& op : kOps) {
    char line[256];
    std::snprintf(line, sizeof(line), "  %-15s %s (>= %d rank%s)\n", op.name, op.summary,
                  op.min_ranks, op.min_ranks == 1 ? "" : "s");
    ops += line;
  }
  ops += hcomm_bench::StreamOpsUsage();
  std::fprintf(out, kUsage, ops.c_str());
}

[[noreturn]] void UsageError(const char* fmt, const char* arg) {
  std::fprintf(stderr, "hcomm_bench: ");
  std::fprintf(stderr, fmt, arg);
  std::fprintf(stderr, "\n\n");
  PrintUsage(stderr);
  std::exit(kExitUsage);
}

Options ParseFlags(int argc, char** argv) {
  Options opt;
  for (int i = 0; i < argc; ++i) {
    std::string flag = argv[i];
    const char* value = nullptr;
    // "--name=value" and "-xVALUE" carry their value inline.
    const size_t eq = flag.find('=');
    if (flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = argv[i] + eq + 1;
      flag.resize(eq);
    } else if (flag.size() > 2 && flag[0] == '-' && flag[1] != '-') {
      value = argv[i] + 2;
      flag.resize(2);
    }
    if (flag == "-h" || flag == "--help") {
      PrintUsage(stdout);
      std::exit(0);
    }
    if (flag == "--json") {
      if (value != nullptr) UsageError("--json takes no value", "");
      opt.json = true;
      continue;
    }
    auto next = [&]() -> const char* {
      if (value != nullptr) return value;
      if (i + 1 >= argc) UsageError("%s needs a value", flag.c_str());
      return argv[++i];
    };
    long n = 0;
    if (flag == "-b" || flag == "--minbytes") {
      const char* v = next();
      if (!ParseSize(v, &opt.min_bytes)) UsageError("bad size for -b: '%s'", v);
    } else if (flag == "-e" || flag == "--maxbytes") {
      const char* v = next();
      if (!ParseSize(v, &opt.max_bytes)) UsageError("bad size for -e: '%s'", v);
    } else if (flag == "-f" || flag == "--stepfactor") {
      const char* v = next();
      if (!ParseInt(v, 2, 1 << 20, &n)) UsageError("bad -f (an integer >= 2): '%s'", v);
      opt.factor = static_cast<size_t>(n);
    } else if (flag == "-n" || flag == "--iters") {
      const char* v = next();
      if (!ParseInt(v, 1, 1 << 30, &n)) UsageError("bad -n (an integer >= 1): '%s'", v);
      opt.iters = static_cast<int>(n);
    } else if (flag == "-w" || flag == "--warmup_iters") {
      const char* v = next();
      if (!ParseInt(v, 0, 1 << 30, &n)) UsageError("bad -w (an integer >= 0): '%s'", v);
      opt.warmup = static_cast<int>(n);
    } else if (flag == "-c" || flag == "--check") {
      const char* v = next();
      if (!ParseInt(v, 0, 1, &n)) UsageError("bad -c (0 or 1): '%s'", v);
      opt.check = static_cast<int>(n);
    } else if (flag == "-d" || flag == "--datatype") {
      const char* v = next();
      if (!ParseDtype(v, &opt.dtype)) {
        UsageError("bad -d '%s' (int8, uint8, int32, uint32, int64, uint64, half, bfloat16, "
                   "float, double)", v);
      }
    } else if (flag == "-o" || flag == "--op") {
      const char* v = next();
      if (!ParseRedop(v, &opt.redop)) UsageError("bad -o '%s' (sum, prod, min, max, avg)", v);
    } else if (flag == "-a" || flag == "--algo") {
      const char* v = next();
      if (!ValidAlgo(v)) UsageError("bad -a '%s' (auto, ring, tree, direct)", v);
      opt.algo = v;
    } else if (flag == "-r" || flag == "--root") {
      const char* v = next();
      if (!ParseInt(v, 0, 1 << 20, &n)) UsageError("bad -r (a rank >= 0): '%s'", v);
      opt.root = static_cast<int>(n);
    } else if (flag == "-z" || flag == "--compression") {
      // Judged by the library after init (hcomm_comm_set), as HCOMM_COMPRESSION.
      opt.compression = next();
      if (opt.compression.empty()) UsageError("-z needs a value%s", "");
    } else if (flag == "--runs") {
      const char* v = next();
      if (!ParseInt(v, 1, 1 << 20, &n)) UsageError("bad --runs (an integer >= 1): '%s'", v);
      opt.runs = static_cast<int>(n);
    } else {
      UsageError("unknown flag '%s'", argv[i]);
    }
  }
  if (opt.max_bytes < opt.min_bytes) UsageError("-e is smaller than -b%s", "");
  return opt;
}

// The sizes of the sweep: min, min*f, ... <= max (0 is followed by 1).
std::vector<size_t> Sizes(const Options& opt) {
  std::vector<size_t> sizes;
  size_t s = opt.min_bytes;
  while (true) {
    sizes.push_back(s);
    if (s == 0) {
      s = 1;
    } else if (s > opt.max_bytes / opt.factor) {
      break;
    } else {
      s *= opt.factor;
    }
    if (s > opt.max_bytes) break;
  }
  return sizes;
}

int ItersFor(const Options& opt, size_t bytes) {
  if (bytes == 0) return opt.iters;
  const double scaled = std::max<double>(kMinIters, kBytesPerRun / static_cast<double>(bytes));
  return static_cast<int>(std::min<double>(opt.iters, scaled));
}

// Every rank reports to rank 0, then rank 0 releases everyone.
void MessageBarrier(Bench& b) {
  int32_t token = b.rank;
  if (b.rank == 0) {
    for (int r = 1; r < b.size; ++r) {
      Check(hcomm_recv(&token, 1, HCOMM_INT32, r, kTagBarrier, b.comm), "hcomm_recv");
    }
    for (int r = 1; r < b.size; ++r) {
      Check(hcomm_send(&token, 1, HCOMM_INT32, r, kTagRelease, b.comm), "hcomm_send");
    }
  } else {
    Check(hcomm_send(&token, 1, HCOMM_INT32, 0, kTagBarrier, b.comm), "hcomm_send");
    Check(hcomm_recv(&token, 1, HCOMM_INT32, 0, kTagRelease, b.comm), "hcomm_recv");
  }
}

// A zeroed buffer of `bytes` rounded up to whole pages (at least one), or
// exit. A size within a page of SIZE_MAX has no such rounding (it would wrap
// to a tiny buffer that the count then overruns): it fails as too large.
unsigned char* AllocTouched(size_t bytes) {
  constexpr size_t kPage = 4096;
  void* p = nullptr;
  size_t alloc = bytes;
  if (bytes <= SIZE_MAX - (kPage - 1)) {
    alloc = std::max(kPage, (bytes + kPage - 1) / kPage * kPage);
    p = std::aligned_alloc(kPage, alloc);
  }
  if (p == nullptr) {
    std::fprintf(stderr,
                 "hcomm_bench: cannot allocate %zu bytes for the largest size (-e, "
                 "--maxbytes); lower it\n",
                 alloc);
    std::exit(kExitFailure);
  }
  std::memset(p, 0, alloc);  // pre-touch: no page faults inside timed runs
  return static_cast<unsigned char*>(p);
}

// The allowed transports as configured (HCOMM_TRANSPORTS, else "auto").
std::string ConfiguredTransports() {
  const char* t = std::getenv("HCOMM_TRANSPORTS");
  return (t != nullptr && *t != '\0') ? t : "auto";
}

// The transports the measured links use, from hcomm_comm_transport: "shm",
// "tcp", "shm+tcp" (a mix), "self" (one rank). p2p: rank 0's link to rank
// 1 (local). Collectives: every rank's links to its peers (collective: an
// hcomm_allreduce of per-transport link counts). Falls back to the
// configured list if the library cannot say.
std::string DescribeTransports(Bench& b, const OpDesc& op) {
  static const char* const kNames[] = {"shm", "tcp", "self"};
  constexpr int kKinds = 4;  // the three above and "other"
  int64_t links[kKinds] = {0, 0, 0, 0};
  bool known = true;
  const bool collective = op.count_for != nullptr;
  for (int peer = 0; peer < b.size; ++peer) {
    if (!collective && !(b.rank == 0 && peer == 1)) continue;
    const char* name = nullptr;
    if (hcomm_comm_transport(b.comm, peer, &name) != HCOMM_SUCCESS || name == nullptr) {
      known = false;
      continue;
    }
    int kind = kKinds - 1;
    for (int k = 0; k < 3; ++k) {
      if (std::strcmp(name, kNames[k]) == 0) kind = k;
    }
    ++links[kind];
  }
  if (collective) {
    int64_t unknown = known ? 0 : 1;
    Check(hcomm_allreduce(&unknown, &unknown, 1, HCOMM_INT64, HCOMM_MAX, b.comm),
          "hcomm_allreduce (transports)");
    Check(hcomm_allreduce(links, links, kKinds, HCOMM_INT64, HCOMM_SUM, b.comm),
          "hcomm_allreduce (transports)");
    known = unknown == 0;
  }
  if (!known) return ConfiguredTransports();
  std::string out;
  for (int k = 0; k < 2; ++k) {
    if (links[k] > 0) out += (out.empty() ? "" : "+") + std::string(kNames[k]);
  }
  if (links[3] > 0) out += out.empty() ? "other" : "+other";
  if (out.empty()) out = links[2] > 0 ? "self" : ConfiguredTransports();
  return out;
}

// `v` rounded to `digits` decimals, as the JSON rows give it.
double Rounded(double v, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

struct Point {
  size_t bytes;  // as shown (collectives: nccl-tests' size for the count)
  size_t count;  // collectives: elements per rank (per peer block for alltoall)
  int iters;
  double min_us, med_us, max_us;
  double algbw, busbw;
  uint64_t wrong;
  double max_rel_err;  // over ranks; 0 unless b.lossy
};

Point MeasureSize(Bench& b, const OpDesc& op, size_t bytes) {
  const Options& opt = b.opt;
  const bool collective = op.count_for != nullptr;
  Point p{};
  p.bytes = bytes;
  if (collective) {
    const size_t es = Esize(b);
    p.count = op.count_for(bytes, es, b.size);
    p.bytes = op.shown_bytes(p.count, es, b.size);
  }
  p.iters = ItersFor(opt, p.bytes);
  const int warmup = std::min(opt.warmup, p.iters);
  b.max_rel_err = 0;

  if (opt.check && collective) {
    // The first warm-up iteration carries checked data; the rest do not.
    p.wrong += op.checked_iter(b, bytes, 0);
    op.run(b, bytes, std::max(0, warmup - 1));
  } else if (opt.check) {
    const int checked = std::max(1, warmup);
    for (int i = 0; i < checked; ++i) p.wrong += op.checked_iter(b, bytes, i);
  } else {
    op.run(b, bytes, warmup);
  }

  std::vector<double> times_us;
  for (int r = 0; r < opt.runs; ++r) {
    if (collective) Check(hcomm_barrier(b.comm), "hcomm_barrier");
    const auto t0 = std::chrono::steady_clock::now();
    op.run(b, bytes, p.iters);
    const auto t1 = std::chrono::steady_clock::now();
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    times_us.push_back(us / p.iters / op.time_divisor);
  }
  if (collective) {
    // A run takes as long as its slowest rank: the maximum over ranks of
    // each rank's mean time per operation, run by run.
    Check(hcomm_allreduce(times_us.data(), times_us.data(), times_us.size(), HCOMM_FLOAT64,
                          HCOMM_MAX, b.comm),
          "hcomm_allreduce (times)");
  }
  std::sort(times_us.begin(), times_us.end());
  const size_t n = times_us.size();
  p.min_us = times_us.front();
  p.max_us = times_us.back();
  p.med_us = n % 2 ? times_us[n / 2] : (times_us[n / 2 - 1] + times_us[n / 2]) / 2;
  p.algbw = p.med_us > 0 ? static_cast<double>(p.bytes) / (p.med_us * 1e-6) / 1e9 : 0.0;
  p.busbw = p.algbw * op.bus_factor(b.size);

  // The wrong bytes/elements every participant saw, added up.
  if (opt.check && collective) {
    uint64_t wrong = p.wrong;
    Check(hcomm_allreduce(&wrong, &p.wrong, 1, HCOMM_UINT64, HCOMM_SUM, b.comm),
          "hcomm_allreduce (#wrong)");
    if (b.lossy) {
      Check(hcomm_allreduce(&b.max_rel_err, &p.max_rel_err, 1, HCOMM_FLOAT64, HCOMM_MAX, b.comm),
            "hcomm_allreduce (max_rel_err)");
    }
  } else if (opt.check) {
    uint64_t wrong = p.wrong;
    if (b.rank == 0) {
      for (int r = 1; r < b.size; ++r) {
        if (!op.participates(r, b.size)) continue;
        Check(hcomm_recv(&wrong, 1, HCOMM_UINT64, r, kTagWrong, b.comm), "hcomm_recv");
        p.wrong += wrong;
      }
    } else {
      Check(hcomm_send(&wrong, 1, HCOMM_UINT64, 0, kTagWrong, b.comm), "hcomm_send");
    }
  }
  return p;
}

// With -z, the row's compression keys.
void AddCompressionKeys(const Bench& b, const Point& p, nlohmann::ordered_json* row) {
  if (b.opt.compression.empty()) return;
  (*row)["compression"] = b.opt.compression;
  char err[32];
  std::snprintf(err, sizeof(err), "%.6g", p.max_rel_err);
  (*row)["max_rel_err"] = std::strtod(err, nullptr);
}

// With -z, the header line that says what it does to the check.
void PrintCompressionHeader(const Bench& b) {
  if (b.opt.compression.empty()) return;
  if (b.lossy) {
    std::printf("# compression %s: float data checked within g * sum|x_j|, g = %.6g "
                "(n = h = %d); max_rel_err = max |got - want| / sum|x_j|\n",
                b.opt.compression.c_str(), b.gamma, b.size);
  } else {
    std::printf("# compression %s: data checked exactly\n", b.opt.compression.c_str());
  }
}

void PrintHeader(const Bench& b, const OpDesc& op) {
  const Options& o = b.opt;
  std::printf("# hcomm_bench %s: %d ranks, transport %s, iters %d, warmup %d\n", op.name,
              b.size, b.transport.c_str(), o.iters, o.warmup);
  std::printf("# sizes %zu..%zu x%zu, %d runs per size, check %d; iters per run = "
              "min(%d, max(%d, %.0e / bytes)); times per iteration%s\n",
              o.min_bytes, o.max_bytes, o.factor, o.runs, o.check, o.iters, kMinIters,
              kBytesPerRun, op.time_divisor == 2.0 ? ", one-way (round trip / 2)" : "");
  PrintCompressionHeader(b);
  std::printf("#%11s%14s%14s%14s%13s%13s%8s\n", "size", "time_min(us)", "time_med(us)",
              "time_max(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
}

const char* RedopColumn(const Bench& b, const OpDesc& op) {
  return op.uses_redop ? RedopString(b.opt.redop) : "none";
}

int RootColumn(const Bench& b, const OpDesc& op) { return op.uses_root ? b.opt.root : -1; }

void PrintCollectiveHeader(const Bench& b, const OpDesc& op) {
  const Options& o = b.opt;
  std::printf("# hcomm_bench %s: %d ranks, transport %s, algorithm %s, type %s, redop %s, "
              "root %d\n",
              op.name, b.size, b.transport.c_str(), b.algo.c_str(),
              DtypeInfo(o.dtype).name, RedopColumn(b, op), RootColumn(b, op));
  std::printf("# sizes %zu..%zu x%zu; iters %d per run = min(%d, max(%d, %.0e / bytes)), "
              "warmup %d, %d runs per size, check %d\n",
              o.min_bytes, o.max_bytes, o.factor, o.iters, o.iters, kMinIters, kBytesPerRun,
              o.warmup, o.runs, o.check);
  std::printf("# time = median over runs of the slowest rank's mean time per op "
              "(each run after a barrier)\n");
  PrintCompressionHeader(b);
  // With -z, one more column: max_rel_err.
  const bool z = !o.compression.empty();
  std::printf("#%76s\n", "out-of-place");
  std::printf("#%11s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s%s\n", "size", "count", "type",
              "redop", "root", "time", "algbw", "busbw", "#wrong", z ? "  max_rel_err" : "");
  std::printf("#%11s  %12s  %8s  %6s  %6s  %9s  %7s  %7s  %6s\n", "(B)", "(elements)", "", "",
              "", "(us)", "(GB/s)", "(GB/s)", "");
}

void PrintCollectivePoint(const Bench& b, const OpDesc& op, const Point& p) {
  const Options& o = b.opt;
  if (o.json) {
    nlohmann::ordered_json row = {
        {"op", op.name}, {"bytes", p.bytes}, {"time_us", Rounded(p.med_us, 3)},
        {"algbw_gbs", Rounded(p.algbw, 6)}, {"busbw_gbs", Rounded(p.busbw, 6)},
        {"wrong", p.wrong}, {"count", p.count}, {"type", DtypeInfo(o.dtype).name},
        {"redop", RedopColumn(b, op)}, {"root", RootColumn(b, op)}, {"algo", b.algo},
        {"nranks", b.size}, {"time_min_us", Rounded(p.min_us, 3)},
        {"time_max_us", Rounded(p.max_us, 3)}, {"iters", p.iters}, {"runs", o.runs},
        {"transport", b.transport}, {"checked", o.check != 0}, {"in_place", false}};
    AddCompressionKeys(b, p, &row);
    std::printf("%s\n", row.dump().c_str());
  } else {
    char wrong[32];
    if (o.check) {
      std::snprintf(wrong, sizeof(wrong), "%" PRIu64, p.wrong);
    } else {
      std::snprintf(wrong, sizeof(wrong), "N/A");
    }
    char rel[32] = "";
    if (!o.compression.empty()) std::snprintf(rel, sizeof(rel), "  %11.4g", p.max_rel_err);
    std::printf("%12zu  %12zu  %8s  %6s  %6d  %9.2f  %7.2f  %7.2f  %6s%s\n", p.bytes, p.count,
                DtypeInfo(o.dtype).name, RedopColumn(b, op), RootColumn(b, op), p.med_us,
                p.algbw, p.busbw, wrong, rel);
  }
  std::fflush(stdout);
}

void PrintPoint(const Bench& b, const OpDesc& op, const Point& p) {
  if (op.count_for != nullptr) {
    PrintCollectivePoint(b, op, p);
    return;
  }
  if (b.opt.json) {
    nlohmann::ordered_json row = {
        {"op", op.name}, {"bytes", p.bytes}, {"time_us", Rounded(p.med_us, 3)},
        {"algbw_gbs", Rounded(p.algbw, 6)}, {"busbw_gbs", Rounded(p.busbw, 6)},
        {"wrong", p.wrong}, {"time_min_us", Rounded(p.min_us, 3)},
        {"time_max_us", Rounded(p.max_us, 3)}, {"iters", p.iters}, {"runs", b.opt.runs},
        {"nranks", b.size}, {"transport", b.transport}, {"checked", b.opt.check != 0}};
    AddCompressionKeys(b, p, &row);
    std::printf("%s\n", row.dump().c_str());
  } else {
    char wrong[32];
    if (b.opt.check) {
      std::snprintf(wrong, sizeof(wrong), "%" PRIu64, p.wrong);
    } else {
      std::snprintf(wrong, sizeof(wrong), "N/A");
    }
    std::printf("%12zu%14.2f%14.2f%14.2f%13.3f%13.3f%8s\n", p.bytes, p.min_us, p.med_us,
                p.max_us, p.algbw, p.busbw, wrong);
  }
  std::fflush(stdout);
}

int RunBench(const OpDesc& op, const Options& opt) {
  Bench b;
  b.opt = opt;
  Check(hcomm_comm_init(nullptr, &b.comm), "hcomm_comm_init");
  Check(hcomm_comm_rank(b.comm, &b.rank), "hcomm_comm_rank");
  Check(hcomm_comm_size(b.comm, &b.size), "hcomm_comm_size");
  if (b.size < op.min_ranks) {
    std::fprintf(stderr, "hcomm_bench: %s needs at least %d ranks, the job has %d "
                 "(start it with hcomm_run -n %d -- hcomm_bench ...)\n",
                 op.name, op.min_ranks, b.size, op.min_ranks);
    hcomm_comm_destroy(b.comm);
    return kExitUsage;
  }
  if (op.uses_root && opt.root >= b.size) {
    if (b.rank == 0) {
      std::fprintf(stderr, "hcomm_bench: -r %d is not a rank of this %d-rank job\n", opt.root,
                   b.size);
    }
    hcomm_comm_destroy(b.comm);
    return kExitUsage;
  }
  if (!opt.compression.empty()) {
    const hcomm_status_t s = hcomm_comm_set(b.comm, "compression", opt.compression.c_str());
    if (s == HCOMM_ERR_INVALID_ARGUMENT) {
      const std::string message = hcomm_last_error();
      if (b.rank == 0) {
        std::fprintf(stderr, "hcomm_bench: bad -z '%s': %s\n", opt.compression.c_str(),
                     message.c_str());
      }
      hcomm_comm_destroy(b.comm);
      return kExitUsage;
    }
    Check(s, "hcomm_comm_set(compression)");
    // The library accepted it, so "fp16" or "bf16" in it is the 16-bit format.
    const bool fp16 = opt.compression.find("fp16") != std::string::npos;
    const bool bf16 = opt.compression.find("bf16") != std::string::npos;
    if ((fp16 || bf16) && opt.dtype == HCOMM_FLOAT32 && op.count_for != nullptr) {
      b.lossy = true;
      const double u = std::ldexp(1.0, fp16 ? -11 : -8);
      b.gamma = std::pow(1 + u, b.size) * std::pow(1 + std::ldexp(1.0, -24), b.size - 1) - 1;
    }
  }
  if (!opt.algo.empty()) {
    Check(hcomm_comm_set(b.comm, "algo", opt.algo.c_str()), "hcomm_comm_set(algo)");
    b.algo = opt.algo;
  } else {
    const char* env = std::getenv("HCOMM_ALGO");
    b.algo = (env != nullptr && *env != '\0') ? env : "auto";
  }
  b.transport = DescribeTransports(b, op);
  MessageBarrier(b);

  int exit_code = 0;
  if (op.participates(b.rank, b.size)) {
    const std::vector<size_t> sizes = Sizes(opt);
    const size_t buffer = op.buffer_bytes(sizes.back(), b.size);
    b.sendbuf = AllocTouched(buffer);
    b.recvbuf = AllocTouched(buffer);
    if (b.rank == 0 && !opt.json) {
      if (op.count_for != nullptr) {
        PrintCollectiveHeader(b, op);
      } else {
        PrintHeader(b, op);
      }
    }
    uint64_t total_wrong = 0;
    double busbw_sum = 0;
    double max_rel_err = 0;
    size_t rows = 0;
    std::optional<size_t> last_count;
    for (size_t bytes : sizes) {
      if (op.count_for != nullptr) {
        // Sizes that round to the count of the row before (-b 0, then 1
        // byte of float) would repeat it: each count is measured once.
        const size_t count = op.count_for(bytes, Esize(b), b.size);
        if (last_count == count) continue;
        last_count = count;
      }
      ++rows;
      const Point p = MeasureSize(b, op, bytes);
      total_wrong += p.wrong;
      busbw_sum += p.busbw;
      max_rel_err = std::max(max_rel_err, p.max_rel_err);
      if (b.rank == 0) PrintPoint(b, op, p);
    }
    if (b.rank == 0) {
      if (!opt.json) {
        if (opt.check) {
          std::printf("# Out of bounds values : %" PRIu64 " %s\n", total_wrong,
                      total_wrong == 0 ? "OK" : "FAILED");
        }
        std::printf("# Avg bus bandwidth    : %.3f GB/s\n", busbw_sum / rows);
        if (b.lossy && opt.check) {
          std::printf("# Max rel error        : %.6g (bound g = %.6g)\n", max_rel_err, b.gamma);
        }
        std::fflush(stdout);
      }
      if (total_wrong != 0) {
        std::fprintf(stderr, "hcomm_bench: data check failed: %" PRIu64 " wrong %s\n",
                     total_wrong, op.count_for != nullptr ? "elements" : "bytes");
        exit_code = kExitFailure;
      }
    }
    std::free(b.sendbuf);
    std::free(b.recvbuf);
  }
  Check(hcomm_comm_destroy(b.comm), "hcomm_comm_destroy");
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "hcomm_bench: missing OP\n\n");
    PrintUsage(stderr);
    return kExitUsage;
  }
  const std::string name = argv[1];
  if (name == "-h" || name == "--help") {
    PrintUsage(stdout);
    return 0;
  }
  if (hcomm_bench::IsStreamOp(name)) return hcomm_bench::RunStreamOp(name, argc - 1, argv + 1);
  const OpDesc* op = FindOp(name);
  if (op == nullptr) {
    std::fprintf(stderr, "hcomm_bench: unknown OP '%s'\n\n", name.c_str());
    PrintUsage(stderr);
    return kExitUsage;
  }
  const Options opt = ParseFlags(argc - 2, argv + 2);
  return RunBench(*op, opt);
}
