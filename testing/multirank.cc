#include "testing/multirank.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace hcomm {
namespace testing {

namespace {
TransportMode g_mode = TransportMode::kDefault;

// The C++ tests keep Abseil's lock-order checking on (the library turns it
// off unless HCOMM_DEBUG_LOCKS=1): a lock-order inversion fails the test.
const bool kLockChecks = [] {
  setenv("HCOMM_DEBUG_LOCKS", "1", /*overwrite=*/0);
  return true;
}();
}  // namespace

void SetTransportMode(TransportMode mode) { g_mode = mode; }

const char* TransportModeName(TransportMode mode) {
  switch (mode) {
    case TransportMode::kDefault: return "default";
    case TransportMode::kTcp: return "tcp";
    case TransportMode::kShm: return "shm";
    case TransportMode::kMixed: return "mixed";
    case TransportMode::kUds: return "uds";
  }
  return "?";
}

std::string UdsPluginPath() {
  const char* dir = getenv("TEST_SRCDIR");
  const char* ws = getenv("TEST_WORKSPACE");
  return absl::StrCat(dir != nullptr ? dir : ".", "/", ws != nullptr ? ws : "hcomm",
                      "/examples/plugin/libhcomm_uds.so");
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<struct sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<struct sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

Options RankOptions(int rank, int world_size, int port, int64_t timeout_ms,
                    const std::string& token) {
  Options o;
  o.rank = rank;
  o.world_size = world_size;
  o.store_addr = absl::StrCat("127.0.0.1:", port);
  o.job_token = token;
  o.timeout_ms = timeout_ms;
  o.host_id = "testhost";
  switch (g_mode) {
    case TransportMode::kTcp: o.transports = {"tcp"}; break;
    case TransportMode::kShm: o.transports = {"shm"}; break;
    case TransportMode::kMixed: o.host_id = absl::StrCat("testhost", rank % 2); break;
    case TransportMode::kUds:
      o.transports = {"uds"};
      o.plugins = {UdsPluginPath()};
      break;
    case TransportMode::kDefault: break;
  }
  return o;
}

void RunRanks(int world_size, const std::function<void(int, const Options&)>& fn,
              int64_t timeout_ms) {
  int port = FreePort();
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] { fn(r, RankOptions(r, world_size, port, timeout_ms)); });
  }
  for (auto& t : threads) t.join();
}

}  // namespace testing
}  // namespace hcomm
