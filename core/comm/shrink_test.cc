// Communicator::Shrink with real processes: 4 ranks forked from the test,
// one of them SIGKILLed (as a crashed trainer dies), the survivors see
// PEER_FAILURE, shrink, and go on with an allreduce on the smaller
// communicator. Also: the store's host (rank 0) dies; a second rank dies
// just before or during the shrink; shrink without a failure (threads).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "core/comm/communicator.h"
#include "gtest/gtest.h"
#include "testing/multirank.h"

namespace hcomm {
namespace {

constexpr int kWorld = 4;
constexpr int64_t kTimeoutMs = 10000;

// In a child: prints why and exits 1.
#define CHILD_CHECK(cond, ...)                                                             \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      fprintf(stderr, "rank %d: %s:%d: %s: %s\n", g_rank, __FILE__, __LINE__, #cond,       \
              absl::StrCat(__VA_ARGS__).c_str());                                          \
      fflush(stderr);                                                                      \
      _exit(1);                                                                            \
    }                                                                                      \
  } while (0)

int g_rank = -1;

// Forks `world` ranks running fn(rank, options) (their exit status is the
// child's) and returns each one's wait status. A child that outlives 60 s
// is ended by its alarm.
std::vector<int> RunForked(int world, const std::function<int(int, const Options&)>& fn) {
  const int port = testing::FreePort();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(60);
      g_rank = r;
      int rc = fn(r, testing::RankOptions(r, world, port, kTimeoutMs));
      fflush(nullptr);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  std::vector<int> status(world, -1);
  for (int r = 0; r < world; ++r) {
    while (waitpid(pids[r], &status[r], 0) < 0 && errno == EINTR) {
    }
  }
  return status;
}

bool KilledBy(int status, int sig) { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
bool ExitedOk(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::unique_ptr<Communicator> InitOrDie(const Options& o) {
  auto c = Communicator::Init(o);
  CHILD_CHECK(c.ok(), c.status().ToString());
  return std::move(c).value();
}

// Every rank: an allreduce and a barrier that work.
void WarmUp(Communicator& c) {
  int32_t v = c.rank() + 1, sum = 0;
  absl::Status s = c.AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum);
  CHILD_CHECK(s.ok(), s.ToString());
  CHILD_CHECK(sum == c.size() * (c.size() + 1) / 2, "sum ", sum);
  s = c.Barrier();
  CHILD_CHECK(s.ok(), s.ToString());
}

// `victim` dies (SIGKILL) once every other rank has said it is done with
// the world's collectives (a message each): a member's death fails what is
// pending in the communicator's collectives, and a survivor still in the
// warm-up's barrier would see it there.
void DieWhenOthersAreDone(Communicator& c, int victim) {
  int32_t done = 1;
  if (c.rank() != victim) {
    absl::Status s = c.Send(&done, sizeof done, sizeof done, victim, 99);
    CHILD_CHECK(s.ok(), s.ToString());
    return;
  }
  for (int r = 0; r < c.size(); ++r) {
    if (r == victim) continue;
    absl::Status s = c.Recv(&done, sizeof done, sizeof done, r, 99);
    CHILD_CHECK(s.ok(), s.ToString());
  }
  raise(SIGKILL);
}

// A survivor: its collectives fail with PEER_FAILURE now.
void ExpectPeerFailure(Communicator& c) {
  int32_t v = 1, out = 0;
  absl::Status s = c.AllReduce(&v, &out, 1, DataType::kInt32, ReduceOp::kSum);
  CHILD_CHECK(CodeOf(s) == ErrorCode::kPeerFailure, "allreduce after a rank died: ", s.ToString());
}

// On the shrunk communicator: the survivors' (world rank + 1) sum, by
// allreduce of a few elements, and a ring of point-to-point messages.
// Returns the allreduce's status (PEER_FAILURE where another member died).
absl::Status UseShrunk(Communicator& c, const std::vector<int>& survivors_world, int my_world) {
  std::vector<int64_t> v(1000, my_world + 1), sum(1000, 0);
  absl::Status s = c.AllReduce(v.data(), sum.data(), v.size(), DataType::kInt64, ReduceOp::kSum);
  if (!s.ok()) return s;
  int64_t want = 0;
  for (int w : survivors_world) want += w + 1;
  for (int64_t x : sum) CHILD_CHECK(x == want, "allreduce gave ", x, " instead of ", want);
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  int32_t out = my_world, in = -1;
  auto r = c.Irecv(&in, sizeof in, sizeof in, prev, 5);
  if (!r.ok()) return r.status();
  s = c.Send(&out, sizeof out, sizeof out, next, 5);
  if (!s.ok()) return s;
  s = c.Wait(r->get(), c.Deadline());
  if (!s.ok()) return s;
  CHILD_CHECK(in == survivors_world[prev], "ring: got ", in, " from rank ", prev);
  return absl::OkStatus();
}

// The basic case: `victim` dies after a working barrier; the others see
// PEER_FAILURE, shrink to 3 ranks (in their old order) and allreduce.
void KillOneAndShrink(int victim) {
  std::vector<int> st = RunForked(kWorld, [victim](int rank, const Options& o) {
    std::unique_ptr<Communicator> world = InitOrDie(o);
    WarmUp(*world);
    DieWhenOthersAreDone(*world, victim);
    ExpectPeerFailure(*world);
    auto shrunk = world->Shrink();
    CHILD_CHECK(shrunk.ok(), shrunk.status().ToString());
    Communicator& c = **shrunk;
    CHILD_CHECK(c.size() == kWorld - 1, "size ", c.size());
    CHILD_CHECK(c.rank() == (rank < victim ? rank : rank - 1), "new rank ", c.rank());
    std::vector<int> survivors;
    for (int w = 0; w < kWorld; ++w) {
      if (w != victim) survivors.push_back(w);
    }
    absl::Status s = UseShrunk(c, survivors, rank);
    CHILD_CHECK(s.ok(), s.ToString());
    // A later collective of every kind works too (a broadcast from the new
    // rank 0 and a barrier).
    int64_t b = c.rank() == 0 ? 4242 : 0;
    s = c.Broadcast(&b, 1, DataType::kInt64, 0);
    CHILD_CHECK(s.ok() && b == 4242, s.ToString(), " b ", b);
    s = c.Barrier();
    CHILD_CHECK(s.ok(), s.ToString());
    s = c.Destroy();
    CHILD_CHECK(s.ok(), s.ToString());
    return 0;
  });
  for (int r = 0; r < kWorld; ++r) {
    if (r == victim) {
      EXPECT_TRUE(KilledBy(st[r], SIGKILL)) << "rank " << r << " status " << st[r];
    } else {
      EXPECT_TRUE(ExitedOk(st[r])) << "rank " << r << " status " << st[r];
    }
  }
}

class ShrinkTest : public ::testing::TestWithParam<testing::TransportMode> {
 protected:
  void SetUp() override { testing::SetTransportMode(GetParam()); }
  void TearDown() override { testing::SetTransportMode(testing::TransportMode::kDefault); }
};

TEST_P(ShrinkTest, SurvivorsOfAKilledRankShrinkAndAllReduce) { KillOneAndShrink(2); }

// Rank 0 serves the rendezvous store: shrink needs no store.
TEST_P(ShrinkTest, StoreHostDies) { KillOneAndShrink(0); }

// Rank 1 dies; rank 3 dies as the survivors shrink (just before its own
// shrink call, or a moment into it). Whatever the survivors agreed first,
// they end with a communicator of ranks 0 and 2: where the first shrink
// kept rank 3 (it died after its view was counted), the next collective
// fails with PEER_FAILURE and they shrink again, as a training loop does.
TEST_P(ShrinkTest, SecondRankDiesDuringShrink) {
  for (int when : {0, 1}) {
    SCOPED_TRACE(when == 0 ? "before shrink" : "during shrink");
    std::vector<int> st = RunForked(kWorld, [when](int rank, const Options& o) {
      std::unique_ptr<Communicator> world = InitOrDie(o);
      WarmUp(*world);
      DieWhenOthersAreDone(*world, 1);
      ExpectPeerFailure(*world);
      if (rank == 3) {
        if (when == 0) raise(SIGKILL);
        // Dies 2 ms into its shrink, or just after it (never to use it).
        std::thread([] {
          usleep(2000);
          raise(SIGKILL);
        }).detach();
        world->Shrink().IgnoreError();
        for (;;) pause();
      }
      std::vector<std::unique_ptr<Communicator>> comms;
      Communicator* c = world.get();
      for (int attempt = 0;; ++attempt) {
        CHILD_CHECK(attempt < 3, "still failing after ", attempt, " shrinks");
        auto shrunk = c->Shrink();
        CHILD_CHECK(shrunk.ok(), shrunk.status().ToString());
        comms.push_back(std::move(shrunk).value());
        c = comms.back().get();
        std::vector<int> survivors = c->size() == 2 ? std::vector<int>{0, 2}
                                                    : std::vector<int>{0, 2, 3};
        CHILD_CHECK(c->size() == 2 || c->size() == 3, "size ", c->size());
        absl::Status s = UseShrunk(*c, survivors, rank);
        if (s.ok()) {
          CHILD_CHECK(c->size() == 2, "allreduce worked with dead rank 3 a member");
          break;
        }
        CHILD_CHECK(CodeOf(s) == ErrorCode::kPeerFailure, s.ToString());
      }
      CHILD_CHECK(c->rank() == (rank == 0 ? 0 : 1), "new rank ", c->rank());
      return 0;
    });
    EXPECT_TRUE(KilledBy(st[1], SIGKILL)) << st[1];
    EXPECT_TRUE(KilledBy(st[3], SIGKILL)) << st[3];
    EXPECT_TRUE(ExitedOk(st[0])) << st[0];
    EXPECT_TRUE(ExitedOk(st[2])) << st[2];
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ShrinkTest,
                         ::testing::Values(testing::TransportMode::kDefault,
                                           testing::TransportMode::kTcp),
                         [](const ::testing::TestParamInfo<testing::TransportMode>& i) {
                           return std::string(testing::TransportModeName(i.param));
                         });

// Without a failure, shrink is a copy: every rank, same order, its own
// contexts (the parent still works beside it); shrinking the copy works too.
TEST(ShrinkNoFailure, CopiesEveryRank) {
  testing::RunRanks(3, [](int rank, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    auto copy = (*world)->Shrink();
    ASSERT_TRUE(copy.ok()) << copy.status();
    EXPECT_EQ((*copy)->size(), 3);
    EXPECT_EQ((*copy)->rank(), rank);
    auto again = (*copy)->Shrink();
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ((*again)->size(), 3);
    for (Communicator* c : {world->get(), copy->get(), again->get()}) {
      int32_t v = rank + 1, sum = 0;
      absl::Status s = c->AllReduce(&v, &sum, 1, DataType::kInt32, ReduceOp::kSum);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(sum, 6);
    }
    EXPECT_TRUE((*again)->Destroy().ok());
    EXPECT_TRUE((*copy)->Destroy().ok());
    EXPECT_TRUE((*world)->Destroy().ok());
  });
}

// A rank alone shrinks to itself.
TEST(ShrinkNoFailure, OneRank) {
  testing::RunRanks(1, [](int, const Options& o) {
    auto world = Communicator::Init(o);
    ASSERT_TRUE(world.ok()) << world.status();
    auto copy = (*world)->Shrink();
    ASSERT_TRUE(copy.ok()) << copy.status();
    EXPECT_EQ((*copy)->size(), 1);
    EXPECT_EQ((*copy)->rank(), 0);
  });
}

// A rank that does not call shrink: the others' shrink times out naming it.
TEST(ShrinkNoFailure, MissingRankTimesOutNamingIt) {
  testing::RunRanks(
      3,
      [](int rank, Options o) {
        auto world = Communicator::Init(o);
        ASSERT_TRUE(world.ok()) << world.status();
        ASSERT_TRUE((*world)->SetOption("timeout_ms", "300").ok());
        if (rank != 2) {
          auto copy = (*world)->Shrink();
          EXPECT_EQ(CodeOf(copy.status()), ErrorCode::kTimeout) << copy.status();
          EXPECT_NE(copy.status().message().find("no view yet from rank 2"), std::string::npos)
              << copy.status();
        }
        ASSERT_TRUE((*world)->SetOption("timeout_ms", "10000").ok());
        EXPECT_TRUE((*world)->Barrier().ok());
      },
      10000);
}

}  // namespace
}  // namespace hcomm
