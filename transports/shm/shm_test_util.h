// Test fixtures for the shared-memory transport: forked ranks that talk to
// a coordinating parent over socketpairs (to exchange addresses and to meet
// at barriers; nothing sleeps to synchronise), a verifying FrameSink and
// payload patterns.
//
//   shm_test::Group g(2, [&](int rank, shm_test::Link& link) {
//     shm_test::TestSink sink(2);
//     std::unique_ptr<ShmTransport> t;
//     if (int rc = shm_test::SetUp(rank, 2, key, &sink, link, &t)) return rc;
//     ...
//     return 0;  // the child's exit code
//   });
//   EXPECT_EQ(g.Run(), std::vector<int>({0, 0}));
#ifndef HCOMM_TRANSPORTS_SHM_SHM_TEST_UTIL_H_
#define HCOMM_TRANSPORTS_SHM_SHM_TEST_UTIL_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "transports/shm/shm_transport.h"
#include "transports/transport.h"

namespace hcomm {
namespace shm_test {

// Prints and fails the child (returns 1) when `cond` is false.
#define SHM_CHECK(cond)                                                                           \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      fprintf(stderr, "[rank %d] %s:%d: check failed: %s\n", ::hcomm::shm_test::g_rank, __FILE__, \
              __LINE__, #cond);                                                                   \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)
#define SHM_CHECK_OK(expr)                                                                        \
  do {                                                                                            \
    ::absl::Status shm_check_status_ = (expr);                                                    \
    if (!shm_check_status_.ok()) {                                                                \
      fprintf(stderr, "[rank %d] %s:%d: %s: %s\n", ::hcomm::shm_test::g_rank, __FILE__, __LINE__, \
              #expr, shm_check_status_.ToString().c_str());                                       \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)

extern int g_rank;  // this child's rank, for messages (-1 in the parent)

// std::mutex with thread-safety annotations (absl::Mutex from Debian's
// uninstrumented library would make ThreadSanitizer report false races).
class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* m) ABSL_EXCLUSIVE_LOCK_FUNCTION(m) : m_(m) { m_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { m_->Unlock(); }

 private:
  Mutex* const m_;
};

// The child's end of its link to the parent.
class Link {
 public:
  explicit Link(int fd) : fd_(fd) {}
  // Every live child contributes one string; all get everyone's, by rank.
  std::vector<std::string> AllGather(const std::string& mine);
  void Barrier() { AllGather(""); }
  // Point-to-point with the parent (for choreographies the parent drives).
  void Tell(const std::string& s);
  std::string Hear();

 private:
  int fd_;
};

// Forks n ranks running `fn` (its return value is the exit code); a child
// gets SIGKILL if it outlives the parent or runs past 60 s.
class Group {
 public:
  Group(int n, std::function<int(int rank, Link& link)> fn);
  ~Group();  // kills and reaps any child still running

  // Serves all-gather rounds among the running children until all exited.
  // Returns exit codes (128 + signal for a signalled child, -1 if it had to
  // be killed at the deadline).
  std::vector<int> Run(absl::Duration timeout = absl::Seconds(60));

  // Building blocks for tests that drive a choreography.
  bool ServeAllGather(const std::vector<int>& ranks);  // one round among `ranks`
  std::string Hear(int rank);
  void Tell(int rank, const std::string& s);
  void Kill(int rank);
  int Wait(int rank);  // reaps; exit code as in Run

 private:
  struct Child {
    pid_t pid = -1;
    int fd = -1;
    bool reaped = false;
    int code = -1;
  };
  std::vector<Child> kids_;
};

// A job key unique to this test process and call.
std::string UniqueKey(const std::string& what);
// Names in /dev/shm that start with "hcomm-<key>".
std::vector<std::string> Leftovers(const std::string& key);

// Payload patterns: a frame's bytes are a function of its seed.
uint64_t SeedOf(int src, uint32_t stream, uint64_t seq);
void Fill(char* p, size_t n, uint64_t seed);
bool Matches(const char* p, size_t n, uint64_t seed);

enum MetaFlags : uint32_t { kDiscard = 1 };
struct TestMeta {
  uint32_t magic;
  int32_t src;
  uint32_t stream;
  uint32_t flags;
  uint64_t seq;
  uint64_t len;
  uint64_t seed;
};
static_assert(sizeof(TestMeta) == kFrameMetaBytes, "test meta fills FrameMeta");
FrameMeta MakeMeta(int src, uint32_t stream, uint64_t seq, uint64_t len, uint32_t flags = 0);
TestMeta ReadMeta(const FrameMeta& m);

// Verifies every frame: its length, its bytes, and that per (source,
// stream) sequence numbers arrive as 0, 1, 2, ... Thread-safe.
class TestSink : public FrameSink {
 public:
  explicit TestSink(int world);
  ~TestSink() override;
  void* OnFrame(int peer, const FrameMeta& meta, uint64_t payload_len) override;
  void OnPayload(int peer, const FrameMeta& meta, uint64_t payload_len) override;
  void OnConnectionLost(int peer, const absl::Status& status) override;

  int64_t frames_from(int peer) const;  // delivered (kept or discarded)
  int64_t discarded_from(int peer) const;
  int64_t frames_on(int peer, uint32_t stream) const;
  int64_t total_frames() const;
  bool lost(int peer) const;
  absl::Status lost_status(int peer) const;
  int64_t lost_at_ns(int peer) const;  // CLOCK_MONOTONIC
  int64_t frames_before_loss(int peer) const;
  int lost_reports(int peer) const;
  std::vector<std::string> errors() const;  // empty when all was well

 private:
  struct Peer;
  void Error(const std::string& e);
  const int world_;
  std::vector<std::unique_ptr<Peer>> peers_;
  mutable Mutex mu_;
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
};

// Counts send completions. Thread-safe.
class Tracker {
 public:
  SendCallback Callback();
  int64_t ok() const { return ok_.load(); }
  int64_t failed() const { return failed_.load(); }
  int64_t done() const { return ok_.load() + failed_.load(); }
  absl::Status first_failure() const;

 private:
  std::atomic<int64_t> ok_{0};
  std::atomic<int64_t> failed_{0};
  mutable Mutex mu_;
  absl::Status first_failure_ ABSL_GUARDED_BY(mu_);
};

// Polls t (slices of `slice`) until pred() or the timeout; returns pred().
bool PollUntil(Transport* t, const std::function<bool()>& pred,
               absl::Duration timeout = absl::Seconds(20),
               absl::Duration slice = absl::Milliseconds(5));

// Creates rank's transport with every other rank of `n` as a local peer,
// connects through the parent (all-gather of addresses, barrier) and
// finishes setup. Returns 0 or a failing exit code.
int SetUp(int rank, int n, const std::string& key, FrameSink* sink, Link& link,
          std::unique_ptr<ShmTransport>* out);

int64_t NowNs();  // CLOCK_MONOTONIC, comparable across processes

}  // namespace shm_test
}  // namespace hcomm

#endif  // HCOMM_TRANSPORTS_SHM_SHM_TEST_UTIL_H_
