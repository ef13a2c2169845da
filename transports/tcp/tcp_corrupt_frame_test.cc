// Two ranks over TCP, as threads of this process: a frame header no rank
// writes, injected into their connection, fails that peer at once (with
// PEER_FAILURE naming it and what was wrong), and the receives pending on
// both sides end in seconds rather than at the communicator's timeout.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/base/net.h"
#include "core/base/status.h"
#include "core/p2p/engine.h"
#include "gtest/gtest.h"
#include "testing/multirank.h"

namespace hcomm {
namespace {

int PortOf(const sockaddr_in& a) { return ntohs(a.sin_port); }

// This process's connected loopback TCP sockets whose ends are not the
// store's port: the ranks' own connection (both of its ends).
std::vector<int> RankSockets(int store_port) {
  std::vector<int> fds;
  for (int fd = 0; fd < 4096; ++fd) {
    int type = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    sockaddr_in self{}, peer{};
    socklen_t sl = sizeof self, pl = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &sl) != 0 ||
        self.sin_family != AF_INET ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) {
      continue;
    }
    if (PortOf(self) == store_port || PortOf(peer) == store_port) continue;
    fds.push_back(fd);
  }
  return fds;
}

TEST(TcpCorruptFrameTest, ACorruptFrameFailsThePeerAndThePendingReceives) {
  testing::SetTransportMode(testing::TransportMode::kTcp);
  absl::Barrier posted(2);
  absl::Mutex mu;
  std::vector<absl::Status> got(2);
  std::vector<absl::Duration> took(2);
  testing::RunRanks(
      2,
      [&](int rank, const Options& o) {
        auto e = Engine::Init(o);
        ASSERT_TRUE(e.ok()) << e.status();
        char buf[8];
        auto r = (*e)->Irecv(0, buf, sizeof buf, 1, 1 - rank, 5);
        EXPECT_TRUE(r.ok()) << r.status();
        posted.Block();  // both receives are pending
        if (rank == 0) {
          auto store = net::ParseHostPort(o.store_addr, "store_addr");
          ASSERT_TRUE(store.ok()) << store.status();
          const std::vector<int> fds = RankSockets(store->port);
          ASSERT_EQ(2u, fds.size()) << "expected the two ends of the ranks' connection";
          // A whole frame claiming 1 TiB (the wire header of
          // tcp_transport.cc: magic, piece 0, two equal lengths, meta).
          std::string h(24 + kFrameMetaBytes, '\0');
          const uint32_t magic = 0x464d4348, piece = 0;
          const uint64_t huge = 1ull << 40;
          memcpy(&h[0], &magic, 4);
          memcpy(&h[4], &piece, 4);
          memcpy(&h[8], &huge, 8);
          memcpy(&h[16], &huge, 8);
          ASSERT_EQ(static_cast<ssize_t>(h.size()), write(fds[0], h.data(), h.size()));
        }
        if (!r.ok()) return;
        const MonoTime t0 = MonoNow();
        absl::Status s = (*e)->Wait(r->get(), t0 + absl::Seconds(8));
        absl::MutexLock l(&mu);
        got[rank] = s;
        took[rank] = MonoNow() - t0;
      },
      /*timeout_ms=*/30000);
  int malformed = 0;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    EXPECT_EQ(CodeOf(got[rank]), ErrorCode::kPeerFailure) << got[rank];
    EXPECT_LT(took[rank], absl::Seconds(2)) << got[rank];
    const std::string why(got[rank].message());
    if (why.find(absl::StrCat("rank ", 1 - rank, " sent a malformed frame")) != std::string::npos) {
      ++malformed;
    }
  }
  EXPECT_EQ(1, malformed) << got[0] << " / " << got[1];
}

}  // namespace
}  // namespace hcomm
