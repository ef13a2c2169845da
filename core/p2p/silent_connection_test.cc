// A stranger that connects to a rank's TCP listener during init and stays
// silent holds up nobody: connections are vetted (token handshake, hello)
// each on its own, so the ranks' own connections go through at once.
// (Before, a listener vetted one connection at a time, giving each up to
// 5 s: three silent strangers held every rank's init for 15 s.)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/base/net.h"
#include "core/p2p/engine.h"
#include "core/p2p/engine_testing.h"
#include "gtest/gtest.h"
#include "testing/multirank.h"

namespace hcomm {
namespace {

// TCP ports this process listens on (its sockets in /proc/net/tcp, state
// LISTEN).
std::set<int> ListeningPorts() {
  std::set<std::string> inodes;
  for (int fd = 0; fd < 4096; ++fd) {
    char link[64];
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = '\0';
    std::string l(link);
    if (l.rfind("socket:[", 0) == 0) inodes.insert(l.substr(8, l.size() - 9));
  }
  std::set<int> ports;
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::istringstream in(line);
    std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
    in >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
    if (st != "0A" || inodes.count(inode) == 0) continue;
    std::vector<std::string> hp = absl::StrSplit(local, ':');
    uint32_t port = 0;
    if (hp.size() == 2 && absl::SimpleHexAtoi(hp[1], &port)) ports.insert(static_cast<int>(port));
  }
  return ports;
}

int ConnectSilently(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(SilentConnectionTest, SilentStrangersNeverHoldUpInit) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  const int port = testing::FreePort();
  std::atomic<bool> stop{false};
  std::vector<int> strangers;
  // Three silent connections to every rank listener that appears (not the
  // store's), made while rank 2 has not started: they queue ahead of the
  // ranks' own.
  std::thread pest([&] {
    std::set<int> done{port};
    const MonoTime end = MonoNow() + absl::Seconds(5);
    while (!stop.load() && MonoNow() < end) {
      for (int p : ListeningPorts()) {
        if (!done.insert(p).second) continue;
        for (int i = 0; i < 3; ++i) {
          int fd = ConnectSilently(p);
          if (fd >= 0) strangers.push_back(fd);
        }
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
  });
  std::vector<absl::Duration> took(3);
  std::vector<std::thread> ranks;
  const MonoTime rank2_start = MonoNow() + absl::Milliseconds(800);
  for (int rank = 0; rank < 3; ++rank) {
    ranks.emplace_back([&, rank] {
      if (rank == 2) absl::SleepFor(rank2_start - MonoNow());
      auto c = testing::MustInit(testing::RankOptions(rank, 3, port, 30000));
      ASSERT_NE(c, nullptr);
      took[rank] = MonoNow() - rank2_start;
      // Every pair talks.
      int v = rank, got = -1;
      for (int peer = 0; peer < 3; ++peer) {
        if (peer == rank) continue;
        auto s = c->Isend(0, &v, sizeof v, 4, peer, 1);
        ASSERT_TRUE(s.ok()) << s.status();
        ASSERT_TRUE(c->Recv(0, &got, sizeof got, 4, peer, 1, absl::Seconds(10)).ok());
        EXPECT_EQ(got, peer);
        ASSERT_TRUE(c->Wait(s->get(), MonoNow() + absl::Seconds(10)).ok());
      }
    });
  }
  for (auto& t : ranks) t.join();
  stop.store(true);
  pest.join();
  EXPECT_GE(strangers.size(), 3u) << "no stranger connected: the test tested nothing";
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_LT(took[rank], absl::Seconds(3))
        << "rank " << rank << "'s init ended " << took[rank] << " after the last rank started, "
        << strangers.size() << " silent strangers connected";
  }
  for (int fd : strangers) close(fd);
  testing::SetTransportMode(testing::TransportMode::kDefault);
}

}  // namespace
}  // namespace hcomm
