// Ping-pong through ShmTransport between two forked processes: one-way
// latency and bandwidth per size, through the Transport interface only.
//
//   bazel run -c opt //transports/shm:shm_pingpong
//   HCOMM_SHM_CMA=0 bazel run //transports/shm:shm_pingpong   # ring-copy path
//   shm_pingpong --block   # wait with Poll(10ms) (spin, then futex) instead of Poll(0)
//   shm_pingpong --pin     # rank 0 on cpu 0, rank 1 on cpu 1
//   shm_pingpong --sizes=8,262144 --scale=2
//
// One-way time = round-trip time / 2 (median of 5 timed runs); GB/s = 1e9 B/s.
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/base/clock.h"
#include "transports/shm/shm_transport.h"

namespace hcomm {
namespace {

int64_t NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

class BenchSink : public FrameSink {
 public:
  void* OnFrame(int, const FrameMeta&, uint64_t len) override {
    return len <= cap_ ? buf_ : nullptr;
  }
  void OnPayload(int, const FrameMeta&, uint64_t) override {
    got_.fetch_add(1, std::memory_order_release);
  }
  void OnConnectionLost(int peer, const absl::Status& s) override {
    fprintf(stderr, "connection to rank %d lost: %s\n", peer, s.ToString().c_str());
    _exit(2);
  }
  void SetBuffer(char* b, size_t cap) {
    buf_ = b;
    cap_ = cap;
  }
  uint64_t got() const { return got_.load(std::memory_order_acquire); }

 private:
  char* buf_ = nullptr;
  size_t cap_ = 0;
  std::atomic<uint64_t> got_{0};
};

bool WriteAll(int fd, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  return write(fd, &n, 4) == 4 && write(fd, s.data(), n) == static_cast<ssize_t>(n);
}

std::string ReadStr(int fd) {
  uint32_t n = 0;
  if (read(fd, &n, 4) != 4) return "";
  std::string s(n, '\0');
  size_t off = 0;
  while (off < n) {
    ssize_t r = read(fd, &s[off], n - off);
    if (r <= 0) return "";
    off += static_cast<size_t>(r);
  }
  return s;
}

struct Options {
  bool block = false;
  bool pin = false;
  double scale = 1.0;
  std::vector<size_t> sizes = {8, 4096, 65536, 256 * 1024, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
};

int Iterations(size_t size, double scale) {
  double it = size <= 4096 ? 20000 : 2e9 / static_cast<double>(size);  // ~2 GB per run
  it = std::min(it, 5000.0) * scale;
  return std::max(4, static_cast<int>(it));
}

int RunRank(int rank, int link, const Options& o, const std::string& key) {
  const int peer = 1 - rank;
  if (o.pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(rank, &set);
    sched_setaffinity(0, sizeof set, &set);
  }
  BenchSink sink;
  auto t_or = ShmTransport::Create(rank, 2, {peer}, key, &sink);
  if (!t_or.ok()) {
    fprintf(stderr, "rank %d: %s\n", rank, t_or.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<ShmTransport> t = std::move(*t_or);
  WriteAll(link, t->Address());
  std::string peer_addr = ReadStr(link);
  absl::Status s = t->Connect(peer, peer_addr, MonoNow() + absl::Seconds(10));
  if (!s.ok()) {
    fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  WriteAll(link, "attached");
  ReadStr(link);
  s = t->FinishSetup();
  if (!s.ok()) {
    fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  const size_t max_size = *std::max_element(o.sizes.begin(), o.sizes.end());
  // Persistent, pre-touched buffers: first touch costs ~11 us per page here.
  std::unique_ptr<char[]> sbuf(new char[max_size]);
  std::unique_ptr<char[]> rbuf(new char[max_size]);
  memset(sbuf.get(), 0x5A, max_size);
  memset(rbuf.get(), 0, max_size);
  sink.SetBuffer(rbuf.get(), max_size);
  FrameMeta meta;
  memset(&meta, 0, sizeof meta);
  uint64_t expect = 0;
  auto wait_one = [&] {
    ++expect;
    if (o.block) {
      while (sink.got() < expect) t->Poll(absl::Milliseconds(10));
    } else {
      while (sink.got() < expect) t->Poll(absl::ZeroDuration());
    }
  };
  if (rank == 0) {
    printf("# shm_pingpong: %s path, wait=%s%s\n",
           t->UsesCma(peer) ? "CMA (single copy)" : "ring copy (pipelined)",
           o.block ? "Poll(10ms)" : "Poll(0) spin", o.pin ? ", pinned" : "");
    printf("# %10s %8s %12s %12s %10s\n", "bytes", "iters", "one-way us", "min us", "GB/s");
  }
  for (size_t size : o.sizes) {
    const int iters = Iterations(size, o.scale);
    std::vector<double> runs;
    for (int run = -1; run < 5; ++run) {  // run -1 warms up
      const int n = run < 0 ? std::max(2, iters / 10) : iters;
      const int64_t start = NowNs();
      for (int i = 0; i < n; ++i) {
        if (rank == 0) {
          t->Send(peer, meta, sbuf.get(), size, nullptr);
          wait_one();
        } else {
          wait_one();
          t->Send(peer, meta, sbuf.get(), size, nullptr);
        }
      }
      const int64_t ns = NowNs() - start;
      if (run >= 0) runs.push_back(ns / 1e3 / (2.0 * n));
    }
    // Let the last frames' callbacks (CMA acknowledgements) come in.
    while (t->PendingSends() > 0) t->Poll(absl::Milliseconds(1));
    if (rank == 0) {
      std::sort(runs.begin(), runs.end());
      const double med = runs[runs.size() / 2];
      printf("  %10zu %8d %12.3f %12.3f %10.2f\n", size, iters, med, runs.front(),
             size / (med * 1e3));
      fflush(stdout);
    }
  }
  WriteAll(link, "done");
  ReadStr(link);
  return 0;
}

}  // namespace
}  // namespace hcomm

int main(int argc, char** argv) {
  hcomm::Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--block") {
      o.block = true;
    } else if (a == "--pin") {
      o.pin = true;
    } else if (a.rfind("--scale=", 0) == 0) {
      if (!absl::SimpleAtod(a.substr(8), &o.scale)) return 2;
    } else if (a.rfind("--sizes=", 0) == 0) {
      o.sizes.clear();
      for (absl::string_view p : absl::StrSplit(a.substr(8), ',')) {
        size_t v;
        if (!absl::SimpleAtoi(p, &v) || v == 0) return 2;
        o.sizes.push_back(v);
      }
    } else {
      fprintf(stderr, "usage: %s [--block] [--pin] [--scale=X] [--sizes=a,b,...]\n", argv[0]);
      return 2;
    }
  }
  const std::string key = absl::StrCat("pingpong-", getpid());
  int sv[2][2];
  for (auto& p : sv) {
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, p) != 0) return 1;
  }
  pid_t kids[2];
  for (int r = 0; r < 2; ++r) {
    fflush(stdout);
    kids[r] = fork();
    if (kids[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      _exit(hcomm::RunRank(r, sv[r][1], o, key));
    }
  }
  // Relay: addresses, then two barriers.
  for (int round = 0; round < 3; ++round) {
    std::string m0 = hcomm::ReadStr(sv[0][0]);
    std::string m1 = hcomm::ReadStr(sv[1][0]);
    if (m0.empty() || m1.empty()) break;
    hcomm::WriteAll(sv[0][0], m1);
    hcomm::WriteAll(sv[1][0], m0);
  }
  int rc = 0;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  return rc;
}
