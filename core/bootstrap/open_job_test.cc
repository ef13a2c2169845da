// A job without a token is open to anyone who reaches its store, and a
// store that cannot bind store_addr listens on every address: rank 0 says
// so on stderr, once per process, and never for a job that has a token or
// a single rank.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/bootstrap/job.h"
#include "core/bootstrap/store.pb.h"
#include "gtest/gtest.h"

namespace hcomm {
namespace {

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<struct sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<struct sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

Options RankOptions(int rank, int world_size, const std::string& store_addr,
                    const std::string& token) {
  Options o;
  o.rank = rank;
  o.world_size = world_size;
  o.store_addr = store_addr;
  o.job_token = token;
  o.timeout_ms = 10000;
  return o;
}

// Joins every rank of a job on its own thread (rank 0's store serves until
// all have joined); true if all joined.
bool RunJob(int world_size, const std::string& token) {
  const std::string addr = absl::StrCat("127.0.0.1:", FreePort());
  const MonoTime deadline = MonoNow() + absl::Seconds(10);
  std::vector<std::unique_ptr<Job>> jobs(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      auto job = Job::Join(RankOptions(r, world_size, addr, token), deadline);
      if (!job.ok()) {
        ADD_FAILURE() << job.status();
        return;
      }
      jobs[r] = std::move(job).value();
    });
  }
  for (auto& t : threads) t.join();
  bool all = true;
  for (const auto& j : jobs) all = all && j != nullptr;
  for (auto& j : jobs) {
    if (j != nullptr) j->MarkEnded();
  }
  // Rank 0 (the store) last.
  for (int r = world_size - 1; r >= 0; --r) jobs[r].reset();
  return all;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

constexpr char kNoToken[] = "no job token (HCOMM_JOB_TOKEN";

// The steps share the process's once-only warning, so they run in order.
// Init waiting for a rank that is late says so every Job::kWaitNotice on
// stderr, naming the missing rank, from every rank that waits; it said
// nothing before (a job looked hung for timeout_ms).
TEST(OpenJobTest, InitWaitingForALateRankNamesIt) {
  const std::string addr = absl::StrCat("127.0.0.1:", FreePort());
  const MonoTime deadline = MonoNow() + absl::Seconds(20);
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      if (r == 1) absl::SleepFor(Job::kWaitNotice + absl::Milliseconds(800));
      auto job = Job::Join(RankOptions(r, 3, addr, "t"), deadline);
      ASSERT_TRUE(job.ok()) << job.status();
      ASSERT_TRUE((*job)->Publish(store::RankCard(), deadline).ok());
      auto cards = (*job)->Cards(deadline);
      EXPECT_TRUE(cards.ok()) << cards.status();
      (*job)->MarkEnded();
      if (r == 0) absl::SleepFor(absl::Milliseconds(300));  // the store goes last
    });
  }
  for (auto& t : threads) t.join();
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (int r : {0, 2}) {
    const std::string line =
        absl::StrCat("hcomm: rank ", r, ": init has waited 5.");
    EXPECT_EQ(Count(err, line), 1) << err;
  }
  EXPECT_EQ(Count(err, absl::StrCat("for rank 1 to join the store at ", addr, " (2 of 3 joined")),
            2)
      << err;
  EXPECT_EQ(Count(err, "hcomm: rank 1:"), 0) << err;  // it waited for nobody
}

TEST(OpenJobTest, WarnsOnceWithoutTokenAndNeverWithOne) {
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(RunJob(2, "a-token"));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Count(err, "hcomm WARN"), 0) << err;

  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(RunJob(1, ""));  // one rank: nobody else could join anyway
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Count(err, kNoToken), 0) << err;

  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(RunJob(2, ""));
  ASSERT_TRUE(RunJob(3, ""));
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Count(err, kNoToken), 1) << err;
  EXPECT_EQ(Count(err, "hcomm WARN: rank 0 of 2: no job token (HCOMM_JOB_TOKEN"), 1) << err;
  EXPECT_EQ(Count(err, "hcomm_run sets one"), 1) << err;
  EXPECT_EQ(Count(err, "any process that reaches 127.0.0.1:"), 1) << err;
}

// store_addr names an address this host does not have (TEST-NET-1): rank 0
// serves the store on 0.0.0.0 and says so, once, even though no rank can
// then reach it at that address.
TEST(OpenJobTest, WarnsOnceWhenTheStoreListensOnEveryAddress) {
  for (int i = 0; i < 2; ++i) {
    const std::string addr = absl::StrCat("192.0.2.1:", FreePort());
    ::testing::internal::CaptureStderr();
    auto job = Job::Join(RankOptions(0, 2, addr, "a-token"), MonoNow() + absl::Seconds(1));
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(job.ok());
    EXPECT_EQ(Count(err, "listens on every address"), i == 0 ? 1 : 0) << err;
    EXPECT_EQ(Count(err, absl::StrCat("cannot serve the store at ", addr)), i == 0 ? 1 : 0)
        << err;
  }
}

}  // namespace
}  // namespace hcomm
