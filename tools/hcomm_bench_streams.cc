// hcomm_bench's stream benchmarks, over the public C API (hcomm/hcomm.h):
//
//   hcomm_run -n 2 -- hcomm_bench priority [--bulk 256M] [--small 8] [--runs 5] [--json]
//   hcomm_run -n 2 -- hcomm_bench fusion [--count 1000] [--size 1K] [--runs 5] [--json]
//
// priority: the latency of a small allreduce (--small bytes, float32) while
// a bulk allreduce (--bulk bytes) runs, in three modes, each --runs times:
//   alone     the small one on a stream of priority 10, nothing else running;
//   fifo      the small one queued on the bulk's stream (priority 0) right
//             after it: it waits for the whole bulk;
//   priority  the small one on the priority-10 stream while the bulk runs on
//             the priority-0 one.
// Every run starts with a barrier; the bulk is queued at once, the small one
// a quarter of the bulk's time later (measured alone first), so that it
// meets the bulk in flight. Its latency is from its enqueue to the end of
// an event synchronize after it; the reported time is the median over runs
// of the slowest rank's. Also reported: the bulk's own time and its bus
// bandwidth (2(n-1)/n x bytes / time).
//
// fusion: --count allreduces of --size bytes (float32), issued back to back:
//   blocking  hcomm_allreduce, one after the other;
//   stream    queued on one stream (fusion_bytes: the library's default),
//             then one synchronize;
//   unfused   the same on a stream made with fusion_bytes 0.
// Times are the median over runs of the slowest rank's total, and per
// operation; for the streams also the caller's time in the enqueue calls,
// and blocking's total over it: the most a stream's speedup can be (its
// "ceiling"). Then a lone allreduce of 8 bytes, repeated --count times one
// at a time: blocking, and on a stream (enqueue, event record, event
// synchronize), with the enqueue call's own time and that of a no-op host
// callback taken through the stream the same way (the stream's own cost
// around an operation).
//
// Output: a table on rank 0's stdout, or with --json one JSON object per
// line instead (written with nlohmann/json). The results are checked; a
// wrong one fails the run (exit status 1).
#include "tools/hcomm_bench_streams.h"

#include <getopt.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hcomm/hcomm.h"
#include "nlohmann/json.hpp"

namespace hcomm_bench {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

[[noreturn]] void Die(const char* call, hcomm_status_t st) {
  std::string message = hcomm_last_error();
  std::fprintf(stderr, "hcomm_bench: %s failed: %s: %s\n", call, hcomm_status_string(st),
               message.c_str());
  std::fflush(stdout);
  std::exit(kExitFailure);
}

#define CALL(expr)                                    \
  do {                                                \
    hcomm_status_t st_ = (expr);                      \
    if (st_ != HCOMM_SUCCESS) Die(#expr, st_);        \
  } while (0)

double NowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void SleepUntilUs(double t) {
  const double left = t - NowUs();
  if (left > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(left));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Size with K, M, G suffixes (2^10, 2^20, 2^30); 0 on a bad value.
size_t ParseSize(const char* s) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s) return 0;
  switch (*end) {
    case 'K': case 'k': v <<= 10; ++end; break;
    case 'M': case 'm': v <<= 20; ++end; break;
    case 'G': case 'g': v <<= 30; ++end; break;
    default: break;
  }
  return *end == '\0' ? static_cast<size_t>(v) : 0;
}

struct Flags {
  size_t bulk = size_t{256} << 20;
  size_t small = 8;
  size_t count = 1000;
  size_t size = 1024;
  int runs = 5;
  bool json = false;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr, "hcomm_bench: %s\n\n%s", why, StreamOpsUsage());
  std::exit(kExitUsage);
}

Flags ParseFlags(int argc, char** argv) {
  static const option kLong[] = {
      {"bulk", required_argument, nullptr, 'B'}, {"small", required_argument, nullptr, 'S'},
      {"count", required_argument, nullptr, 'n'}, {"size", required_argument, nullptr, 's'},
      {"runs", required_argument, nullptr, 'r'}, {"json", no_argument, nullptr, 'j'},
      {"help", no_argument, nullptr, 'h'},        {nullptr, 0, nullptr, 0}};
  Flags f;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, "n:s:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 'B': f.bulk = ParseSize(optarg); if (f.bulk < 4) Usage("--bulk needs a size >= 4"); break;
      case 'S': f.small = ParseSize(optarg); if (f.small < 4) Usage("--small needs a size >= 4"); break;
      case 'n': f.count = ParseSize(optarg); if (f.count == 0) Usage("--count needs a number >= 1"); break;
      case 's': f.size = ParseSize(optarg); if (f.size < 4) Usage("--size needs a size >= 4"); break;
      case 'r': f.runs = std::atoi(optarg); if (f.runs < 1) Usage("--runs needs a number >= 1"); break;
      case 'j': f.json = true; break;
      case 'h': std::printf("%s", StreamOpsUsage()); std::exit(0);
      default: Usage("bad flag");
    }
  }
  if (optind < argc) Usage("unexpected argument");
  return f;
}

struct Job {
  hcomm_comm_t comm = nullptr;
  int rank = 0, size = 0;
  std::string transport;
};

Job Join() {
  Job j;
  CALL(hcomm_comm_init(nullptr, &j.comm));
  CALL(hcomm_comm_rank(j.comm, &j.rank));
  CALL(hcomm_comm_size(j.comm, &j.size));
  const char* name = "self";
  if (j.size > 1) CALL(hcomm_comm_transport(j.comm, (j.rank + 1) % j.size, &name));
  j.transport = name;
  return j;
}

// The slowest rank's value.
double MaxOverRanks(const Job& j, double v) {
  CALL(hcomm_allreduce(&v, &v, 1, HCOMM_FLOAT64, HCOMM_MAX, j.comm));
  return v;
}

void Enqueue(hcomm_stream_t s, hcomm_op_kind_t kind, const void* send, void* recv,
             size_t count) {
  hcomm_op_t op = HCOMM_OP_INIT;
  op.kind = kind;
  op.sendbuf = send;
  op.recvbuf = recv;
  op.count = count;
  op.dtype = HCOMM_FLOAT32;
  op.op = HCOMM_SUM;
  CALL(hcomm_stream_enqueue(s, &op));
}

// Every element of `v` must be `want`.
void Expect(const Job& j, const std::vector<float>& v, float want, const char* what) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != want) {
      std::fprintf(stderr, "hcomm_bench: rank %d: %s: element %zu is %g, expected %g\n", j.rank,
                   what, i, v[i], want);
      std::exit(kExitFailure);
    }
  }
}

void Emit(const Job& j, bool json, nlohmann::json row, const std::string& line) {
  if (j.rank != 0) return;
  row["nranks"] = j.size;
  row["transport"] = j.transport;
  if (json) {
    std::printf("%s\n", row.dump().c_str());
  } else {
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);
}

std::string Fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string Fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

int Priority(const Flags& f) {
  Job j = Join();
  hcomm_stream_t hi, lo;
  CALL(hcomm_stream_create(j.comm, 10, &hi));
  CALL(hcomm_stream_create(j.comm, 0, &lo));
  hcomm_event_t e;
  CALL(hcomm_event_create(&e));
  const size_t nbulk = f.bulk / 4, nsmall = f.small / 4;
  std::vector<float> bulk_in(nbulk, 1.0f), bulk_out(nbulk), small_in(nsmall, 1.0f), small_out(nsmall);
  const float n = static_cast<float>(j.size);

  // The bulk alone (twice: the first run also touches the memory), to know
  // when it is a quarter of the way.
  double t0 = 0, bulk_alone = 0;
  for (int warm = 0; warm < 2; ++warm) {
    CALL(hcomm_barrier(j.comm));
    t0 = NowUs();
    Enqueue(lo, HCOMM_OP_ALLREDUCE, bulk_in.data(), bulk_out.data(), nbulk);
    CALL(hcomm_stream_synchronize(lo));
    bulk_alone = MaxOverRanks(j, NowUs() - t0);
  }
  Expect(j, bulk_out, n, "bulk allreduce");
  if (j.rank == 0 && !f.json) {
    std::printf("# priority: a %zu-byte allreduce while a %zu-byte one runs (%d ranks, %s); "
                "the bulk alone: %.0f us\n",
                f.small, f.bulk, j.size, j.transport.c_str(), bulk_alone);
    std::printf("# %-9s %12s %12s %12s %14s\n", "mode", "small_us", "small_max", "bulk_us",
                "bulk_busbw_GBs");
  }
  const double delay = bulk_alone / 4;
  const char* kModes[] = {"alone", "fifo", "priority"};
  for (const char* mode : kModes) {
    std::vector<double> small_us, bulk_us;
    for (int r = 0; r < f.runs; ++r) {
      std::fill(small_out.begin(), small_out.end(), 0.0f);
      std::fill(bulk_out.begin(), bulk_out.end(), 0.0f);
      const bool with_bulk = std::strcmp(mode, "alone") != 0;
      hcomm_stream_t target = std::strcmp(mode, "fifo") == 0 ? lo : hi;
      CALL(hcomm_barrier(j.comm));
      t0 = NowUs();
      if (with_bulk) Enqueue(lo, HCOMM_OP_ALLREDUCE, bulk_in.data(), bulk_out.data(), nbulk);
      if (with_bulk) SleepUntilUs(t0 + delay);
      const double t1 = NowUs();
      Enqueue(target, HCOMM_OP_ALLREDUCE, small_in.data(), small_out.data(), nsmall);
      CALL(hcomm_event_record(e, target));
      CALL(hcomm_event_synchronize(e));
      const double t2 = NowUs();
      CALL(hcomm_stream_synchronize(lo));
      const double t3 = NowUs();
      small_us.push_back(MaxOverRanks(j, t2 - t1));
      bulk_us.push_back(MaxOverRanks(j, t3 - t0));
      Expect(j, small_out, n, "small allreduce");
      if (with_bulk) Expect(j, bulk_out, n, "bulk allreduce");
    }
    const double small = Median(small_us), bulk = Median(bulk_us);
    const double small_max = *std::max_element(small_us.begin(), small_us.end());
    const bool with_bulk = std::strcmp(mode, "alone") != 0;
    const double busbw = with_bulk ? 2.0 * (j.size - 1) / j.size * f.bulk / bulk / 1e3 : 0;
    nlohmann::json row = {{"op", "priority"}, {"mode", mode}, {"small_bytes", f.small},
                          {"bulk_bytes", f.bulk}, {"small_us", small}, {"small_max_us", small_max},
                          {"bulk_us", with_bulk ? bulk : 0.0}, {"bulk_busbw_gbs", busbw},
                          {"bulk_alone_us", bulk_alone}, {"runs", f.runs}};
    Emit(j, f.json, row,
         Fmt("  %-9s %12.1f %12.1f %12.0f %14.2f", mode, small, small_max,
             with_bulk ? bulk : 0.0, busbw));
  }
  CALL(hcomm_event_destroy(e));
  CALL(hcomm_stream_destroy(hi));
  CALL(hcomm_stream_destroy(lo));
  CALL(hcomm_comm_destroy(j.comm));
  return 0;
}

int Fusion(const Flags& f) {
  Job j = Join();
  const size_t per = f.size / 4;
  std::vector<std::vector<float>> bufs(f.count, std::vector<float>(per));
  const float n = static_cast<float>(j.size);
  auto fill = [&] {
    for (auto& b : bufs) std::fill(b.begin(), b.end(), 1.0f);
  };
  auto check = [&](const char* what) {
    for (auto& b : bufs) Expect(j, b, n, what);
  };
  hcomm_stream_t fused, unfused;
  CALL(hcomm_stream_create(j.comm, 0, &fused));
  CALL(hcomm_comm_set(j.comm, "fusion_bytes", "0"));
  CALL(hcomm_stream_create(j.comm, 0, &unfused));
  CALL(hcomm_comm_set(j.comm, "fusion_bytes", "auto"));
  if (j.rank == 0 && !f.json) {
    std::printf("# fusion: %zu allreduces of %zu bytes issued back to back (%d ranks, %s)\n",
                f.count, f.size, j.size, j.transport.c_str());
    std::printf("# %-9s %12s %12s %10s %12s %10s\n", "mode", "total_us", "per_op_us", "speedup",
                "enqueue_us", "ceiling");
  }
  double blocking_total = 0;
  const char* kModes[] = {"blocking", "stream", "unfused"};
  for (const char* mode : kModes) {
    const bool blocking = std::strcmp(mode, "blocking") == 0;
    std::vector<double> totals, enqueues;
    for (int r = 0; r < f.runs + 1; ++r) {  // the first run warms up
      fill();
      CALL(hcomm_barrier(j.comm));
      const double t0 = NowUs();
      double enqueued = 0;
      if (blocking) {
        for (auto& b : bufs) CALL(hcomm_allreduce(b.data(), b.data(), per, HCOMM_FLOAT32, HCOMM_SUM, j.comm));
      } else {
        hcomm_stream_t s = std::strcmp(mode, "stream") == 0 ? fused : unfused;
        for (auto& b : bufs) Enqueue(s, HCOMM_OP_ALLREDUCE, b.data(), b.data(), per);
        enqueued = NowUs() - t0;
        CALL(hcomm_stream_synchronize(s));
      }
      const double total = MaxOverRanks(j, NowUs() - t0);
      enqueued = MaxOverRanks(j, enqueued);
      if (r > 0) {
        totals.push_back(total);
        enqueues.push_back(enqueued);
      }
      check(mode);
    }
    const double total = Median(totals);
    if (blocking) blocking_total = total;
    const double speedup = blocking_total / total;
    nlohmann::json row = {{"op", "fusion"}, {"mode", mode}, {"count", f.count},
                          {"bytes", f.size}, {"total_us", total},
                          {"per_op_us", total / f.count}, {"speedup_vs_blocking", speedup},
                          {"runs", f.runs}};
    std::string line = Fmt("  %-9s %12.0f %12.2f %9.1fx", mode, total, total / f.count, speedup);
    if (!blocking) {
      // The caller's own time in the enqueue calls: a stream's total is
      // never below it, so blocking / it is the most its speedup can be.
      const double enqueue = Median(enqueues);
      row["enqueue_us"] = enqueue;
      row["speedup_ceiling"] = blocking_total / enqueue;
      line += Fmt(" %12.0f %9.1fx", enqueue, blocking_total / enqueue);
    }
    Emit(j, f.json, row, line);
  }

  // A lone 8-byte allreduce, one at a time.
  std::vector<float> one(2, 1.0f);
  hcomm_event_t e;
  CALL(hcomm_event_create(&e));
  std::vector<double> blocking_us, stream_us, enqueue_us, overhead_us;
  for (int r = 0; r < f.runs + 1; ++r) {
    CALL(hcomm_barrier(j.comm));
    double t0 = NowUs();
    for (size_t i = 0; i < f.count; ++i) {
      CALL(hcomm_allreduce(one.data(), one.data(), 2, HCOMM_FLOAT32, HCOMM_MAX, j.comm));
    }
    const double blocking = MaxOverRanks(j, (NowUs() - t0) / f.count);
    CALL(hcomm_barrier(j.comm));
    double enq = 0;
    t0 = NowUs();
    for (size_t i = 0; i < f.count; ++i) {
      hcomm_op_t op = HCOMM_OP_INIT;
      op.kind = HCOMM_OP_ALLREDUCE;
      op.sendbuf = one.data();
      op.recvbuf = one.data();
      op.count = 2;
      op.dtype = HCOMM_FLOAT32;
      op.op = HCOMM_MAX;
      const double a = NowUs();
      CALL(hcomm_stream_enqueue(fused, &op));
      enq += NowUs() - a;
      CALL(hcomm_event_record(e, fused));
      CALL(hcomm_event_synchronize(e));
    }
    const double streamed = MaxOverRanks(j, (NowUs() - t0) / f.count);
    const double enq_us = MaxOverRanks(j, enq / f.count);
    // What the stream itself costs around an operation: a callback that
    // does nothing, queued, marked and waited for just as the allreduce.
    t0 = NowUs();
    for (size_t i = 0; i < f.count; ++i) {
      CALL(hcomm_stream_enqueue_host(fused, [](void*) {}, nullptr));
      CALL(hcomm_event_record(e, fused));
      CALL(hcomm_event_synchronize(e));
    }
    const double overhead = MaxOverRanks(j, (NowUs() - t0) / f.count);
    if (r > 0) {
      blocking_us.push_back(blocking);
      stream_us.push_back(streamed);
      enqueue_us.push_back(enq_us);
      overhead_us.push_back(overhead);
    }
  }
  Expect(j, one, 1.0f, "lone allreduce");
  const double b = Median(blocking_us), s = Median(stream_us), q = Median(enqueue_us),
               o = Median(overhead_us);
  nlohmann::json row = {{"op", "fusion"}, {"mode", "lone"}, {"bytes", 8},
                        {"blocking_us", b}, {"stream_us", s}, {"enqueue_us", q},
                        {"stream_noop_us", o},
                        {"ratio_to_blocking_plus_enqueue", s / (b + q)},
                        {"ratio_to_blocking_plus_noop", s / (b + o)}, {"runs", f.runs}};
  Emit(j, f.json, row,
       Fmt("# lone 8-byte allreduce: blocking %.2f us, on a stream %.2f us (the enqueue call "
           "%.2f us; a no-op through the stream, enqueue to synchronize, %.2f us); "
           "stream / (blocking + enqueue call) = %.2f, stream / (blocking + no-op) = %.2f",
           b, s, q, o, s / (b + q), s / (b + o)));
  CALL(hcomm_event_destroy(e));
  CALL(hcomm_stream_destroy(fused));
  CALL(hcomm_stream_destroy(unfused));
  CALL(hcomm_comm_destroy(j.comm));
  return 0;
}

}  // namespace

bool IsStreamOp(const std::string& op) { return op == "priority" || op == "fusion"; }

const char* StreamOpsUsage() {
  return "  priority        an allreduce of --small bytes on a priority-10 stream while one of\n"
         "                  --bulk bytes runs on a priority-0 stream, against the same queued\n"
         "                  after the bulk on its stream (fifo) and alone; flags: --bulk N\n"
         "                  (256M), --small N (8), --runs N (5), --json\n"
         "  fusion          --count allreduces of --size bytes issued back to back: blocking,\n"
         "                  on a stream, on a stream without fusion; and a lone 8-byte\n"
         "                  allreduce blocking and on a stream; flags: -n/--count N (1000),\n"
         "                  -s/--size N (1K), --runs N (5), --json\n";
}

int RunStreamOp(const std::string& op, int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  return op == "priority" ? Priority(f) : Fusion(f);
}

}  // namespace hcomm_bench
