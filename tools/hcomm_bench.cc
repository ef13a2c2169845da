// hcomm_bench: benchmarks in the style of nccl-tests, written against the
// public C API (hcomm/hcomm.h) only.
//
// Every rank of a job runs the same command line; rank 0 prints, the others
// stay quiet:
//
//   hcomm_run -n 2 -- hcomm_bench p2p -b 8 -e 64M -f 2
//
// Operations are rows of kOps (an OpDesc each): a name, how many ranks it
// needs, which ranks move data, how to run `iters` untimed-checked or timed
// iterations, and how to turn times into algorithm/bus bandwidth. Only `p2p`
// exists today; collectives plug in as further rows.
//
// p2p: ping-pong between rank 0 and rank 1 (other ranks only join the job,
// meet the others in a message barrier, and leave). One iteration is one
// round trip; the reported time is the one-way time (round trip / 2).
//
// Measurement, per message size:
//   iters  = min(-n, max(1, 5e7 / bytes))   (-n for 0 bytes): small messages
//            run -n iterations, large ones fewer, so that one run moves about
//            1e8 bytes (both directions) and a point of 5 runs takes roughly
//            0.1-0.5 s at 1-5 GB/s (longer only when one round trip alone
//            takes longer);
//   warmup = min(-w, iters) untimed iterations; with -c 1 these warm-up
//            iterations carry data that the receivers verify (a pattern that
//            depends on size, iteration and direction), at least one per size
//            even with -w 0. The timed runs never fill or verify buffers, so
//            checking costs nothing in the times;
//   runs   = --runs (default 5) timed runs of `iters` iterations each; the
//            table shows min/median/max over runs of the per-iteration time.
//   algbw  = bytes / median time (GB/s, 1e9 B/s); busbw = algbw x the op's
//            bus factor (1 for p2p).
//
// Output: a table on rank 0's stdout, or with --json one JSON object per
// line INSTEAD of the table (nothing else on stdout), keys in this order:
//   {"op":"p2p","bytes":N,"time_us":MEDIAN,"algbw_gbs":X,"busbw_gbs":X,
//    "wrong":W,"time_min_us":..,"time_max_us":..,"iters":..,"runs":..,
//    "ranks":..,"transport":"..","checked":true}
//
// Exit status: 0 on success; 1 when an hcomm call fails (stderr:
// "hcomm_bench: <call> failed: <status>: <hcomm_last_error()>") or when the
// data check found wrong bytes; 2 on bad usage or too few ranks.

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hcomm/hcomm.h"

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
    "  -c, --check 0|1       verify the data in the warm-up iterations, at least one per\n"
    "                        size; wrong bytes go to the #wrong column (default 1)\n"
    "      --runs N          timed runs per size; min/median/max over runs (default 5)\n"
    "      --json            one JSON object per size on stdout instead of the table\n"
    "  -h, --help            this text\n";

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
};

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
  for (uint64_t word = 0; i + 8 <= bytes; i += 8, ++word) {
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
  for (size_t i = 0; i < n; i += 8) {
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
  // wrong bytes this rank received.
  uint64_t (*checked_iter)(Bench& b, size_t bytes, int iter);
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

const OpDesc kOps[] = {
    {"p2p", "ping-pong between rank 0 and rank 1; time = one-way (round trip / 2)",
     /*min_ranks=*/2, P2pParticipates, P2pBufferBytes, /*time_divisor=*/2.0, P2pBusFactor,
     P2pRun, P2pCheckedIter},
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
    std::snprintf(line, sizeof(line), "  %-8s %s (>= %d ranks)\n", op.name, op.summary,
                  op.min_ranks);
    ops += line;
  }
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

unsigned char* AllocTouched(size_t bytes) {
  const size_t alloc = std::max<size_t>(4096, (bytes + 4095) / 4096 * 4096);
  void* p = std::aligned_alloc(4096, alloc);
  if (p == nullptr) {
    std::fprintf(stderr, "hcomm_bench: cannot allocate %zu bytes\n", alloc);
    std::exit(kExitFailure);
  }
  std::memset(p, 0, alloc);  // pre-touch: no page faults inside timed runs
  return static_cast<unsigned char*>(p);
}

std::string TransportName() {
  const char* t = std::getenv("HCOMM_TRANSPORTS");
  return (t != nullptr && *t != '\0') ? t : "auto";
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\u%04x", c);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

struct Point {
  size_t bytes;
  int iters;
  double min_us, med_us, max_us;
  double algbw, busbw;
  uint64_t wrong;
};

Point MeasureSize(Bench& b, const OpDesc& op, size_t bytes) {
  const Options& opt = b.opt;
  Point p{};
  p.bytes = bytes;
  p.iters = ItersFor(opt, bytes);
  const int warmup = std::min(opt.warmup, p.iters);

  if (opt.check) {
    const int checked = std::max(1, warmup);
    for (int i = 0; i < checked; ++i) p.wrong += op.checked_iter(b, bytes, i);
  } else {
    op.run(b, bytes, warmup);
  }

  std::vector<double> times_us;
  for (int r = 0; r < opt.runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    op.run(b, bytes, p.iters);
    const auto t1 = std::chrono::steady_clock::now();
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    times_us.push_back(us / p.iters / op.time_divisor);
  }
  std::sort(times_us.begin(), times_us.end());
  const size_t n = times_us.size();
  p.min_us = times_us.front();
  p.max_us = times_us.back();
  p.med_us = n % 2 ? times_us[n / 2] : (times_us[n / 2 - 1] + times_us[n / 2]) / 2;
  p.algbw = p.med_us > 0 ? static_cast<double>(bytes) / (p.med_us * 1e-6) / 1e9 : 0.0;
  p.busbw = p.algbw * op.bus_factor(b.size);

  // Rank 0 adds up the wrong bytes every participant saw.
  if (opt.check) {
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

void PrintHeader(const Bench& b, const OpDesc& op) {
  const Options& o = b.opt;
  std::printf("# hcomm_bench %s: %d ranks, transport %s, iters %d, warmup %d\n", op.name,
              b.size, TransportName().c_str(), o.iters, o.warmup);
  std::printf("# sizes %zu..%zu x%zu, %d runs per size, check %d; iters per run = "
              "min(%d, max(%d, %.0e / bytes)); times per iteration%s\n",
              o.min_bytes, o.max_bytes, o.factor, o.runs, o.check, o.iters, kMinIters,
              kBytesPerRun, op.time_divisor == 2.0 ? ", one-way (round trip / 2)" : "");
  std::printf("#%11s%14s%14s%14s%13s%13s%8s\n", "size", "time_min(us)", "time_med(us)",
              "time_max(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
}

void PrintPoint(const Bench& b, const OpDesc& op, const Point& p) {
  if (b.opt.json) {
    std::printf("{\"op\":%s,\"bytes\":%zu,\"time_us\":%.3f,\"algbw_gbs\":%.6f,"
                "\"busbw_gbs\":%.6f,\"wrong\":%" PRIu64
                ",\"time_min_us\":%.3f,\"time_max_us\":%.3f,\"iters\":%d,\"runs\":%d,"
                "\"ranks\":%d,\"transport\":%s,\"checked\":%s}\n",
                JsonString(op.name).c_str(), p.bytes, p.med_us, p.algbw, p.busbw, p.wrong,
                p.min_us, p.max_us, p.iters, b.opt.runs, b.size,
                JsonString(TransportName()).c_str(), b.opt.check ? "true" : "false");
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
  MessageBarrier(b);

  int exit_code = 0;
  if (op.participates(b.rank, b.size)) {
    const std::vector<size_t> sizes = Sizes(opt);
    const size_t buffer = op.buffer_bytes(sizes.back(), b.size);
    b.sendbuf = AllocTouched(buffer);
    b.recvbuf = AllocTouched(buffer);
    if (b.rank == 0 && !opt.json) PrintHeader(b, op);
    uint64_t total_wrong = 0;
    double busbw_sum = 0;
    for (size_t bytes : sizes) {
      const Point p = MeasureSize(b, op, bytes);
      total_wrong += p.wrong;
      busbw_sum += p.busbw;
      if (b.rank == 0) PrintPoint(b, op, p);
    }
    if (b.rank == 0) {
      if (!opt.json) {
        if (opt.check) {
          std::printf("# Out of bounds values : %" PRIu64 " %s\n", total_wrong,
                      total_wrong == 0 ? "OK" : "FAILED");
        }
        std::printf("# Avg bus bandwidth    : %.3f GB/s\n", busbw_sum / sizes.size());
        std::fflush(stdout);
      }
      if (total_wrong != 0) {
        std::fprintf(stderr, "hcomm_bench: data check failed: %" PRIu64 " wrong bytes\n",
                     total_wrong);
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
  const OpDesc* op = FindOp(name);
  if (op == nullptr) {
    std::fprintf(stderr, "hcomm_bench: unknown OP '%s'\n\n", name.c_str());
    PrintUsage(stderr);
    return kExitUsage;
  }
  const Options opt = ParseFlags(argc - 2, argv + 2);
  return RunBench(*op, opt);
}
