#include "transports/shm/shm_test_util.h"

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/base/clock.h"

namespace hcomm {
namespace shm_test {

int g_rank = -1;

namespace {

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes; waits at most until deadline_ns (0: forever).
bool ReadAll(int fd, void* p, size_t n, int64_t deadline_ns = 0) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    if (deadline_ns != 0) {
      int64_t left_ms = (deadline_ns - NowNs()) / 1'000'000;
      if (left_ms <= 0) return false;
      struct pollfd pfd = {fd, POLLIN, 0};
      int r = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
      if (r < 0 && errno != EINTR) return false;
      if (r <= 0) continue;
    }
    ssize_t got = ::read(fd, c, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    c += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool SendMsg(int fd, char type, const std::string& body) {
  char hdr[5];
  hdr[0] = type;
  uint32_t len = static_cast<uint32_t>(body.size());
  memcpy(hdr + 1, &len, 4);
  return WriteAll(fd, hdr, 5) && WriteAll(fd, body.data(), body.size());
}

bool RecvMsg(int fd, char* type, std::string* body, int64_t deadline_ns = 0) {
  char hdr[5];
  if (!ReadAll(fd, hdr, 5, deadline_ns)) return false;
  *type = hdr[0];
  uint32_t len;
  memcpy(&len, hdr + 1, 4);
  body->resize(len);
  return len == 0 || ReadAll(fd, &(*body)[0], len, deadline_ns);
}

std::string Pack(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) {
    uint32_t len = static_cast<uint32_t>(s.size());
    out.append(reinterpret_cast<const char*>(&len), 4);
    out.append(s);
  }
  return out;
}

std::vector<std::string> Unpack(const std::string& in) {
  std::vector<std::string> out;
  size_t off = 0;
  while (off + 4 <= in.size()) {
    uint32_t len;
    memcpy(&len, in.data() + off, 4);
    off += 4;
    out.push_back(in.substr(off, len));
    off += len;
  }
  return out;
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr uint32_t kMetaMagic = 0x5445534d;  // "MSET"

}  // namespace

int64_t NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// ---------------------------------------------------------------------------

std::vector<std::string> Link::AllGather(const std::string& mine) {
  char type;
  std::string body;
  if (!SendMsg(fd_, 'G', mine) || !RecvMsg(fd_, &type, &body) || type != 'R') {
    fprintf(stderr, "[rank %d] lost the link to the test parent\n", g_rank);
    _exit(3);
  }
  return Unpack(body);
}

void Link::Tell(const std::string& s) {
  if (!SendMsg(fd_, 'T', s)) _exit(3);
}

std::string Link::Hear() {
  char type;
  std::string body;
  if (!RecvMsg(fd_, &type, &body) || type != 'T') {
    fprintf(stderr, "[rank %d] lost the link to the test parent\n", g_rank);
    _exit(3);
  }
  return body;
}

Group::Group(int n, std::function<int(int rank, Link& link)> fn) : kids_(n) {
  for (int r = 0; r < n; ++r) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) abort();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) abort();
    if (pid == 0) {
      for (int i = 0; i < r; ++i) close(kids_[i].fd);
      close(sv[0]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      alarm(60);
      g_rank = r;
      Link link(sv[1]);
      int rc = fn(r, link);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
    close(sv[1]);
    kids_[r].pid = pid;
    kids_[r].fd = sv[0];
  }
}

Group::~Group() {
  for (Child& k : kids_) {
    if (!k.reaped && k.pid > 0) {
      kill(k.pid, SIGKILL);
      int st;
      waitpid(k.pid, &st, 0);
    }
    if (k.fd >= 0) close(k.fd);
  }
}

std::vector<int> Group::Run(absl::Duration timeout) {
  const int64_t deadline = NowNs() + absl::ToInt64Nanoseconds(timeout);
  const int n = static_cast<int>(kids_.size());
  std::vector<bool> live(n, true);
  std::vector<bool> has(n, false);
  std::vector<std::string> got(n);
  for (;;) {
    std::vector<struct pollfd> fds;
    std::vector<int> who;
    for (int r = 0; r < n; ++r) {
      if (live[r] && !has[r]) {
        fds.push_back({kids_[r].fd, POLLIN, 0});
        who.push_back(r);
      }
    }
    bool any_live = false;
    bool all_in = true;
    for (int r = 0; r < n; ++r) {
      if (live[r]) {
        any_live = true;
        if (!has[r]) all_in = false;
      }
    }
    if (!any_live) break;
    if (all_in) {
      std::string reply = Pack(got);
      for (int r = 0; r < n; ++r) {
        if (live[r] && !SendMsg(kids_[r].fd, 'R', reply)) live[r] = false;
        has[r] = false;
        got[r].clear();
      }
      continue;
    }
    int64_t left_ms = (deadline - NowNs()) / 1'000'000;
    if (left_ms <= 0) break;
    int pr = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (pr <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      int r = who[i];
      char type;
      std::string body;
      if (!RecvMsg(kids_[r].fd, &type, &body, deadline) || type != 'G') {
        live[r] = false;  // exited (or misbehaved)
        continue;
      }
      got[r] = body;
      has[r] = true;
    }
  }
  std::vector<int> codes(n);
  for (int r = 0; r < n; ++r) {
    if (!kids_[r].reaped && NowNs() >= deadline) Kill(r);
    codes[r] = Wait(r);
  }
  return codes;
}

bool Group::ServeAllGather(const std::vector<int>& ranks) {
  std::vector<std::string> got(kids_.size());
  const int64_t deadline = NowNs() + 60'000'000'000;
  for (int r : ranks) {
    char type;
    std::string body;
    if (!RecvMsg(kids_[r].fd, &type, &body, deadline) || type != 'G') return false;
    got[r] = body;
  }
  std::string reply = Pack(got);
  bool ok = true;
  for (int r : ranks) ok = SendMsg(kids_[r].fd, 'R', reply) && ok;
  return ok;
}

std::string Group::Hear(int rank) {
  char type;
  std::string body;
  if (!RecvMsg(kids_[rank].fd, &type, &body, NowNs() + 60'000'000'000) || type != 'T') {
    return "<link lost>";
  }
  return body;
}

void Group::Tell(int rank, const std::string& s) { SendMsg(kids_[rank].fd, 'T', s); }

void Group::Kill(int rank) {
  if (!kids_[rank].reaped) kill(kids_[rank].pid, SIGKILL);
}

int Group::Wait(int rank) {
  Child& k = kids_[rank];
  if (k.reaped) return k.code;
  int st = 0;
  pid_t r;
  do {
    r = waitpid(k.pid, &st, 0);
  } while (r < 0 && errno == EINTR);
  k.reaped = true;
  if (r < 0) {
    k.code = -1;
  } else if (WIFEXITED(st)) {
    k.code = WEXITSTATUS(st);
  } else if (WIFSIGNALED(st)) {
    k.code = 128 + WTERMSIG(st);
  }
  return k.code;
}

// ---------------------------------------------------------------------------

std::string UniqueKey(const std::string& what) {
  static std::atomic<int> counter{0};
  // Bazel's sandbox gives each test its own pid namespace, so tests run side
  // by side may share a pid but never this process's random word.
  static const uint32_t word = std::random_device{}();
  return absl::StrCat("t", getpid(), "x", absl::Hex(word), "-", what, "-",
                      counter.fetch_add(1));
}

std::vector<std::string> Leftovers(const std::string& key) {
  std::vector<std::string> out;
  const std::string prefix = absl::StrCat("hcomm-", key, "-");
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return out;
  while (struct dirent* e = readdir(d)) {
    if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.push_back(e->d_name);
  }
  closedir(d);
  return out;
}

uint64_t SeedOf(int src, uint32_t stream, uint64_t seq) {
  return Mix((static_cast<uint64_t>(src) << 48) ^ (static_cast<uint64_t>(stream) << 32) ^ seq);
}

void Fill(char* p, size_t n, uint64_t seed) {
  size_t words = n / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t v = Mix(seed + i);
    memcpy(p + 8 * i, &v, 8);
  }
  if (n % 8 != 0) {
    uint64_t v = Mix(seed + words);
    memcpy(p + 8 * words, &v, n % 8);
  }
}

bool Matches(const char* p, size_t n, uint64_t seed) {
  size_t words = n / 8;
  for (size_t i = 0; i < words; ++i) {
    uint64_t v = Mix(seed + i);
    if (memcmp(p + 8 * i, &v, 8) != 0) return false;
  }
  if (n % 8 != 0) {
    uint64_t v = Mix(seed + words);
    if (memcmp(p + 8 * words, &v, n % 8) != 0) return false;
  }
  return true;
}

FrameMeta MakeMeta(int src, uint32_t stream, uint64_t seq, uint64_t len, uint32_t flags) {
  TestMeta t;
  t.magic = kMetaMagic;
  t.src = src;
  t.stream = stream;
  t.flags = flags;
  t.seq = seq;
  t.len = len;
  t.seed = SeedOf(src, stream, seq);
  FrameMeta m;
  memcpy(m.bytes, &t, sizeof t);
  return m;
}

TestMeta ReadMeta(const FrameMeta& m) {
  TestMeta t;
  memcpy(&t, m.bytes, sizeof t);
  return t;
}

// ---------------------------------------------------------------------------

struct TestSink::Peer {
  Mutex mu;
  std::vector<char> buf ABSL_GUARDED_BY(mu);
  bool in_frame ABSL_GUARDED_BY(mu) = false;
  TestMeta cur ABSL_GUARDED_BY(mu);
  std::map<uint32_t, uint64_t> next_seq ABSL_GUARDED_BY(mu);
  std::map<uint32_t, int64_t> per_stream ABSL_GUARDED_BY(mu);
  int64_t frames ABSL_GUARDED_BY(mu) = 0;
  int64_t discarded ABSL_GUARDED_BY(mu) = 0;
  int lost_reports ABSL_GUARDED_BY(mu) = 0;
  absl::Status lost_status ABSL_GUARDED_BY(mu);
  int64_t lost_at ABSL_GUARDED_BY(mu) = 0;
  int64_t frames_before_loss ABSL_GUARDED_BY(mu) = 0;
};

TestSink::TestSink(int world) : world_(world) {
  for (int i = 0; i < world; ++i) peers_.push_back(std::make_unique<Peer>());
}

TestSink::~TestSink() = default;

void TestSink::Error(const std::string& e) {
  fprintf(stderr, "[rank %d] sink: %s\n", g_rank, e.c_str());
  MutexLock l(&mu_);
  if (errors_.size() < 20) errors_.push_back(e);
}

void* TestSink::OnFrame(int peer, const FrameMeta& meta, uint64_t payload_len) {
  if (peer < 0 || peer >= world_) {
    Error(absl::StrCat("frame from unknown rank ", peer));
    return nullptr;
  }
  Peer& p = *peers_[peer];
  TestMeta t = ReadMeta(meta);
  MutexLock l(&p.mu);
  if (p.in_frame) Error(absl::StrCat("OnFrame from rank ", peer, " before OnPayload"));
  p.in_frame = true;
  p.cur = t;
  if (t.magic != kMetaMagic || t.src != peer || t.len != payload_len) {
    Error(absl::StrCat("bad meta from rank ", peer, ": src ", t.src, " len ", t.len, " vs ",
                       payload_len));
  }
  if (t.flags & kDiscard) return nullptr;
  if (p.buf.size() < payload_len) p.buf.resize(payload_len);
  return p.buf.data();
}

void TestSink::OnPayload(int peer, const FrameMeta& meta, uint64_t payload_len) {
  if (peer < 0 || peer >= world_) return;
  Peer& p = *peers_[peer];
  TestMeta t = ReadMeta(meta);
  MutexLock l(&p.mu);
  if (!p.in_frame || memcmp(&t, &p.cur, sizeof t) != 0) {
    Error(absl::StrCat("OnPayload from rank ", peer, " does not match OnFrame"));
  }
  p.in_frame = false;
  uint64_t& next = p.next_seq[t.stream];
  if (t.seq != next) {
    Error(absl::StrCat("rank ", peer, " stream ", t.stream, ": got seq ", t.seq, ", expected ",
                       next));
  }
  next = t.seq + 1;
  if (t.flags & kDiscard) {
    ++p.discarded;
  } else if (t.seed != SeedOf(peer, t.stream, t.seq) ||
             !Matches(p.buf.data(), payload_len, t.seed)) {
    Error(absl::StrCat("rank ", peer, " stream ", t.stream, " seq ", t.seq, ": ", payload_len,
                       " payload bytes corrupted"));
  }
  ++p.frames;
  ++p.per_stream[t.stream];
}

void TestSink::OnConnectionLost(int peer, const absl::Status& status) {
  if (peer < 0 || peer >= world_) return;
  Peer& p = *peers_[peer];
  MutexLock l(&p.mu);
  if (++p.lost_reports == 1) {
    p.lost_status = status;
    p.lost_at = NowNs();
    p.frames_before_loss = p.frames;
  }
}

int64_t TestSink::frames_from(int peer) const {
  MutexLock l(&peers_[peer]->mu);
  return peers_[peer]->frames;
}
int64_t TestSink::discarded_from(int peer) const {
  MutexLock l(&peers_[peer]->mu);
  return peers_[peer]->discarded;
}
int64_t TestSink::frames_on(int peer, uint32_t stream) const {
  MutexLock l(&peers_[peer]->mu);
  auto it = peers_[peer]->per_stream.find(stream);
  return it == peers_[peer]->per_stream.end() ? 0 : it->second;
}
int64_t TestSink::total_frames() const {
  int64_t n = 0;
  for (int i = 0; i < world_; ++i) n += frames_from(i);
  return n;
}
bool TestSink::lost(int peer) const {
  MutexLock l(&peers_[peer]->mu);
  return peers_[peer]->lost_reports > 0;
}
absl::Status TestSink::lost_status(int peer) const {
  MutexLock l(&peers_[peer]->mu);
  return peers_[peer]->lost_status;
}
int64_t TestSink::lost_at_ns(int peer) const {
  MutexLock l(&peers_[peer]->mu);
  return peers_[peer]->lost_at;
}
int64_t TestSink::frames_before_loss(int peer) const {
  MutexLock l(&peers_[peer]->mu);
  return peers_[peer]->frames_before_loss;
}
int TestSink::lost_reports(int peer) const {
  MutexLock l(&peers_[peer]->mu);
  return peers_[peer]->lost_reports;
}
std::vector<std::string> TestSink::errors() const {
  MutexLock l(&mu_);
  return errors_;
}

// ---------------------------------------------------------------------------

SendCallback Tracker::Callback() {
  return [this](absl::Status s) {
    if (s.ok()) {
      ok_.fetch_add(1);
      return;
    }
    {
      MutexLock l(&mu_);
      if (first_failure_.ok()) first_failure_ = s;
    }
    failed_.fetch_add(1);
  };
}

absl::Status Tracker::first_failure() const {
  MutexLock l(&mu_);
  return first_failure_;
}

bool PollUntil(Transport* t, const std::function<bool()>& pred, absl::Duration timeout,
               absl::Duration slice) {
  const MonoTime deadline = MonoNow() + timeout;
  while (!pred()) {
    if (MonoNow() >= deadline) return pred();
    t->Poll(slice);
  }
  return true;
}

int SetUp(int rank, int n, const std::string& key, FrameSink* sink, Link& link,
          std::unique_ptr<ShmTransport>* out) {
  std::vector<int> peers;
  for (int i = 0; i < n; ++i) {
    if (i != rank) peers.push_back(i);
  }
  auto t = ShmTransport::Create(rank, n, peers, key, sink);
  SHM_CHECK_OK(t.status());
  std::vector<std::string> addrs = link.AllGather((*t)->Address());
  SHM_CHECK(static_cast<int>(addrs.size()) == n);
  const MonoTime deadline = MonoNow() + absl::Seconds(20);
  for (int p : peers) SHM_CHECK_OK((*t)->Connect(p, addrs[p], deadline));
  link.Barrier();
  SHM_CHECK_OK((*t)->FinishSetup());
  *out = std::move(*t);
  return 0;
}

}  // namespace shm_test
}  // namespace hcomm
