// Socket helpers with deadlines, for bootstrap paths (store, handshakes,
// connection setup). The data path (transports/tcp) has its own event loop.
//
//   HCOMM_ASSIGN_OR_RETURN(net::HostPort hp, net::ParseHostPort("127.0.0.1:29500"));
//   HCOMM_ASSIGN_OR_RETURN(net::Fd fd, net::Connect(hp, deadline));
//   HCOMM_RETURN_IF_ERROR(net::WriteFrame(fd.get(), bytes, deadline));
//
// Every call that may block takes an absolute deadline and returns
// hcomm Timeout when it passes. File descriptors are non-blocking and
// close-on-exec.
#ifndef HCOMM_CORE_BASE_NET_H_
#define HCOMM_CORE_BASE_NET_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/forks.h"

namespace hcomm {
namespace net {

// Owns a file descriptor; closes it on destruction.
//
// Across fork(): the child of a fork closes at once every descriptor that an
// Fd of the parent owned (below 65536), so that a child outliving its parent
// does not hold the parent's connections open (its peers would not see it
// die) or its listening ports bound. An Fd the child inherited owns nothing
// there: resetting or destroying it closes nothing (the number may name
// another file by then).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd), forks_(hcomm::ForkCount()) { Own(fd); }
  Fd(Fd&& o) noexcept : fd_(o.fd_), forks_(o.forks_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership: the caller closes the descriptor.
  int release();
  void reset(int fd = -1);

  // For a descriptor kept as a plain int, not in an Fd: Own(fd) once it is
  // open, Disown(fd) before it is closed, and a fork's child closes it too.
  static void Own(int fd);
  static void Disown(int fd);

 private:
  int fd_ = -1;
  uint32_t forks_ = 0;  // hcomm::ForkCount() when fd_ was taken
};

struct HostPort {
  std::string host;
  int port = 0;
  std::string ToString() const;
};

// Parses "host:port" or "[v6addr]:port". `what` names the setting in errors.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view s, absl::string_view what = "address");

// Listens on host:port (port 0 = any free port) with a large backlog.
// *bound_port receives the port actually bound.
absl::StatusOr<Fd> Listen(const std::string& host, int port, int* bound_port);

// Connects once; fails at once on refusal.
absl::StatusOr<Fd> Connect(const HostPort& hp, MonoTime deadline);

// Connects, retrying refusals (the listener may not be up yet) until the
// deadline.
absl::StatusOr<Fd> ConnectWithRetry(const HostPort& hp, MonoTime deadline);

// Accepts one connection; Timeout when the deadline passes first.
absl::StatusOr<Fd> Accept(int listen_fd, MonoTime deadline);

// Waits until fd is readable (or writable); Timeout at the deadline.
absl::Status WaitReadable(int fd, MonoTime deadline);
absl::Status WaitWritable(int fd, MonoTime deadline);

// Reads / writes exactly n bytes. A closed connection is PeerFailure.
absl::Status ReadFull(int fd, void* buf, size_t n, MonoTime deadline);
absl::Status WriteFull(int fd, const void* buf, size_t n, MonoTime deadline);

// Length-prefixed frames: a 4-byte little-endian length, then the bytes.
// ReadFrame refuses (InvalidArgument) a length above max_len before reading
// or allocating anything.
absl::Status WriteFrame(int fd, absl::string_view payload, MonoTime deadline);
absl::StatusOr<std::string> ReadFrame(int fd, size_t max_len, MonoTime deadline);

absl::Status SetNonBlocking(int fd);
absl::Status SetNoDelay(int fd);

// The local IP address this machine would use to reach `hp` (a UDP
// connect: nothing is sent).
absl::StatusOr<std::string> LocalAddressToward(const HostPort& hp);

// The local machine's host name ("localhost" if it cannot be read).
std::string HostName();

}  // namespace net
}  // namespace hcomm

#endif  // HCOMM_CORE_BASE_NET_H_
