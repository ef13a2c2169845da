// libFuzzer target: the rendezvous store's request protocol
// (core/bootstrap/store_server.h) after a successful handshake.
//
// The input is the whole byte stream an authenticated client sends: frames
// (4-byte little-endian length + store.proto Request), truncated frames,
// over-long lengths, junk. A fresh StoreServer (not listening: no threads)
// runs its real per-connection loop, StoreServer::ServeRequests, on one end
// of a socketpair; a harness thread writes the input into the other end,
// closes its write side and reads every response.
//
// A GET or WAIT for a key that this input never sets would park the server
// until the request's own timeout (up to 30 days). The harness notices a
// parked waiter once the connection has gone quiet (AwaitWaiters) and then
// stops the server the way its destructor does: the waiter answers
// "shutting down" and the loop ends. Short timeouts (0, a few ms) still
// reach the timeout path, with its list of missing keys.
//
// Checked on every input: the loop ends (no hang: libFuzzer's -timeout);
// every response is one well-formed frame carrying a store.proto Response
// whose code is an hcomm code; there are never more responses than
// requests.
//
// Build and run: tools/fuzz.sh store_request SECONDS.
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/base/net.h"
#include "core/base/status.h"
#include "core/bootstrap/store.pb.h"
#include "core/bootstrap/store_server.h"

namespace hcomm {

// Reaches the server's private connection loop (declared a friend in
// store_server.h).
class StoreServerFuzzPeer {
 public:
  // A server that holds no socket and runs no thread: only its state and
  // its request handling.
  static std::unique_ptr<StoreServer> NewUnstarted() {
    return std::unique_ptr<StoreServer>(new StoreServer(net::Fd(), net::Fd(), 0, ""));
  }
  static void ServeRequests(StoreServer* s, int fd) { s->ServeRequests(fd); }
  // What ~StoreServer does first: parked waiters answer "shutting down" and
  // the connection loop ends.
  static void Stop(StoreServer* s) {
    absl::MutexLock l(&s->mu_);
    s->stopping_ = true;
    for (StoreServer::Waiter* w : s->waiters_) w->cv.Signal();
  }
};

}  // namespace hcomm

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  fprintf(stderr, "store_request_fuzzer: invariant violated: %s\n", what);
  abort();
}

// Counts complete request frames the way the server frames them (it may
// stop earlier: a frame over the limit ends the connection).
size_t CountFrames(absl::string_view in) {
  size_t n = 0;
  while (in.size() >= 4) {
    uint32_t len = static_cast<uint8_t>(in[0]) | (static_cast<uint8_t>(in[1]) << 8) |
                   (static_cast<uint8_t>(in[2]) << 16) |
                   (static_cast<uint32_t>(static_cast<uint8_t>(in[3])) << 24);
    if (len > hcomm::StoreServer::kMaxFrameBytes || in.size() - 4 < len) break;
    ++n;
    in.remove_prefix(4 + len);
  }
  return n;
}

// The client side: writes `input`, half-closes, reads until the server
// closes. Stops the server when it parks on a key that cannot come.
std::string RunClient(int fd, absl::string_view input, hcomm::StoreServer* server) {
  std::string got;
  bool write_closed = false;
  char buf[64 * 1024];
  for (;;) {
    if (!write_closed && input.empty()) {
      ::shutdown(fd, SHUT_WR);
      write_closed = true;
    }
    struct pollfd p = {fd, static_cast<short>(POLLIN | (write_closed ? 0 : POLLOUT)), 0};
    int r = ::poll(&p, 1, 5);
    if (r == 0) {
      // Quiet: if the server is parked in GET/WAIT, nothing this client
      // sends can help (requests are served in order).
      if (server->AwaitWaiters(1, hcomm::MonoNow()).ok()) hcomm::StoreServerFuzzPeer::Stop(server);
      continue;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p.revents & POLLOUT) {
      ssize_t w = ::send(fd, input.data(), input.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        input.remove_prefix(static_cast<size_t>(w));
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        input = absl::string_view();  // the server hung up
      }
    }
    if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        got.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        break;
      }
    }
  }
  return got;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  int sv[2];
  Check(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
  Check(hcomm::net::SetNonBlocking(sv[0]).ok() && hcomm::net::SetNonBlocking(sv[1]).ok(),
        "O_NONBLOCK");
  std::unique_ptr<hcomm::StoreServer> server = hcomm::StoreServerFuzzPeer::NewUnstarted();

  std::string responses;
  std::thread client([&] { responses = RunClient(sv[1], input, server.get()); });
  hcomm::StoreServerFuzzPeer::ServeRequests(server.get(), sv[0]);
  ::close(sv[0]);  // as ServeConnection does; the client then sees EOF
  client.join();
  ::close(sv[1]);

  // Every response is a complete, parsable frame with an hcomm code.
  absl::string_view rest(responses);
  size_t count = 0;
  while (!rest.empty()) {
    Check(rest.size() >= 4, "truncated response header");
    uint32_t len = static_cast<uint8_t>(rest[0]) | (static_cast<uint8_t>(rest[1]) << 8) |
                   (static_cast<uint8_t>(rest[2]) << 16) |
                   (static_cast<uint32_t>(static_cast<uint8_t>(rest[3])) << 24);
    Check(rest.size() - 4 >= len, "truncated response");
    hcomm::store::Response resp;
    Check(resp.ParseFromArray(rest.data() + 4, static_cast<int>(len)), "unparsable response");
    Check(resp.code() >= 0 && resp.code() <= static_cast<int>(hcomm::ErrorCode::kInternal),
          "response code is not an hcomm code");
    Check(resp.code() == 0 || !resp.message().empty(), "error response without a message");
    Check(resp.missing_size() <= 100, "more than 100 missing keys reported");
    rest.remove_prefix(4 + len);
    ++count;
  }
  Check(count <= CountFrames(input), "more responses than requests");
  return 0;
}
