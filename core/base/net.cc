#include "core/base/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/clock.h"
#include "core/base/interrupt.h"
#include "core/base/status.h"

namespace hcomm {
namespace net {
namespace {

int PollTimeoutMs(MonoTime deadline) {
  absl::Duration left = deadline - MonoNow();
  if (left <= absl::ZeroDuration()) return 0;
  int64_t ms = absl::ToInt64Milliseconds(left + absl::Microseconds(999));
  // Wake at least every second, and as often as a Ctrl-C is looked for
  // (core/base/interrupt.h) where a binding asks for that.
  const int64_t most = InterruptCheckSet() ? absl::ToInt64Milliseconds(kInterruptCheckPeriod)
                                           : 1000;
  return static_cast<int>(std::min<int64_t>(ms, most));
}

absl::Status WaitFor(int fd, short events, MonoTime deadline, const char* what) {
  for (;;) {
    struct pollfd p = {fd, events, 0};
    int to = PollTimeoutMs(deadline);
    int r = ::poll(&p, 1, to);
    if (r > 0) return absl::OkStatus();
    if (r < 0 && errno != EINTR) {
      return Internal(absl::StrCat("poll: ", strerror(errno)));
    }
    if (r == 0) {
      const MonoTime now = MonoNow();
      if (now >= deadline || InterruptNow(now)) {
        return Timeout(absl::StrCat(TimedOutOrInterrupted(),
                                    " waiting for the socket to become ", what));
      }
    }
  }
}

absl::StatusOr<struct addrinfo*> Resolve(const HostPort& hp, bool passive) {
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  struct addrinfo* res = nullptr;
  std::string port = absl::StrCat(hp.port);
  int rc = ::getaddrinfo(hp.host.empty() ? nullptr : hp.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return Unavailable(absl::StrCat("cannot resolve ", hp.ToString(), ": ", gai_strerror(rc)));
  }
  return res;
}

// Descriptors owned by some Fd, one bit each, for the child of a fork to
// close (lock-free: the child may have been forked while another thread was
// here).
constexpr int kTrackedFds = 1 << 16;
std::atomic<uint64_t> owned_fds[kTrackedFds / 64];

void CloseOwnedInChild() {
  for (int w = 0; w < kTrackedFds / 64; ++w) {
    uint64_t bits = owned_fds[w].exchange(0, std::memory_order_relaxed);
    while (bits != 0) {
      const int b = __builtin_ctzll(bits);
      bits &= bits - 1;
      ::close(w * 64 + b);
    }
  }
}

[[maybe_unused]] const int close_owned_registered =
    pthread_atfork(nullptr, nullptr, CloseOwnedInChild);

}  // namespace

void Fd::Own(int fd) {
  if (fd < 0 || fd >= kTrackedFds) return;
  owned_fds[fd / 64].fetch_or(uint64_t{1} << (fd % 64), std::memory_order_relaxed);
}

void Fd::Disown(int fd) {
  if (fd < 0 || fd >= kTrackedFds) return;
  owned_fds[fd / 64].fetch_and(~(uint64_t{1} << (fd % 64)), std::memory_order_relaxed);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.fd_;
    forks_ = o.forks_;
    o.fd_ = -1;
  }
  return *this;
}

int Fd::release() {
  const int f = fd_;
  if (f >= 0 && forks_ == hcomm::ForkCount()) Disown(f);
  fd_ = -1;
  return f;
}

void Fd::reset(int fd) {
  // One inherited across a fork was closed in the child already.
  if (fd_ >= 0 && forks_ == hcomm::ForkCount()) {
    Disown(fd_);
    ::close(fd_);
  }
  fd_ = fd;
  forks_ = hcomm::ForkCount();
  Own(fd);
}

std::string HostPort::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view s, absl::string_view what) {
  HostPort hp;
  absl::string_view port_str;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == absl::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':') {
      return InvalidArgument(absl::StrCat(what, " '", s, "' is not [host]:port"));
    }
    hp.host = std::string(s.substr(1, close - 1));
    port_str = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == absl::string_view::npos || colon == 0) {
      return InvalidArgument(absl::StrCat(what, " '", s, "' is not host:port"));
    }
    hp.host = std::string(s.substr(0, colon));
    port_str = s.substr(colon + 1);
  }
  int port = 0;
  if (!absl::SimpleAtoi(port_str, &port) || port < 0 || port > 65535) {
    return InvalidArgument(absl::StrCat(what, " '", s, "' has no valid port (0-65535)"));
  }
  hp.port = port;
  return hp;
}

absl::Status SetNonBlocking(int fd) {
  int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    return Internal(absl::StrCat("fcntl(O_NONBLOCK): ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status SetNoDelay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) {
    return Internal(absl::StrCat("setsockopt(TCP_NODELAY): ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Fd> Listen(const std::string& host, int port, int* bound_port) {
  HostPort hp{host, port};
  HCOMM_ASSIGN_OR_RETURN(struct addrinfo* res, Resolve(hp, /*passive=*/true));
  absl::Status last = Unavailable(absl::StrCat("cannot listen on ", hp.ToString()));
  for (struct addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) continue;
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) < 0 || ::listen(fd.get(), 1024) < 0) {
      last = Unavailable(absl::StrCat("cannot listen on ", hp.ToString(), ": ", strerror(errno)));
      continue;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    ::getsockname(fd.get(), reinterpret_cast<struct sockaddr*>(&ss), &len);
    if (bound_port != nullptr) {
      *bound_port = ss.ss_family == AF_INET6
                        ? ntohs(reinterpret_cast<struct sockaddr_in6*>(&ss)->sin6_port)
                        : ntohs(reinterpret_cast<struct sockaddr_in*>(&ss)->sin_port);
    }
    ::freeaddrinfo(res);
    return fd;
  }
  ::freeaddrinfo(res);
  return last;
}

absl::StatusOr<Fd> Connect(const HostPort& hp, MonoTime deadline) {
  HCOMM_ASSIGN_OR_RETURN(struct addrinfo* res, Resolve(hp, /*passive=*/false));
  absl::Status last = Unavailable(absl::StrCat("cannot connect to ", hp.ToString()));
  for (struct addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) continue;
    int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      absl::Status w = WaitWritable(fd.get(), deadline);
      if (!w.ok()) {
        last = Timeout(absl::StrCat("connect to ", hp.ToString(), " timed out"));
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc < 0) {
      last = Unavailable(absl::StrCat("cannot connect to ", hp.ToString(), ": ", strerror(errno)));
      continue;
    }
    if (ai->ai_family == AF_INET || ai->ai_family == AF_INET6) SetNoDelay(fd.get()).IgnoreError();
    ::freeaddrinfo(res);
    return fd;
  }
  ::freeaddrinfo(res);
  return last;
}

absl::StatusOr<Fd> ConnectWithRetry(const HostPort& hp, MonoTime deadline) {
  absl::Duration backoff = absl::Milliseconds(10);
  for (;;) {
    absl::StatusOr<Fd> fd = Connect(hp, deadline);
    if (fd.ok()) return fd;
    const MonoTime now = MonoNow();
    if (now + backoff >= deadline) return Annotate(fd.status(), "gave up at the deadline");
    if (InterruptNow(now)) {
      return Annotate(fd.status(), absl::StrCat("gave up: ", TimedOutOrInterrupted()));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(200));
  }
}

absl::StatusOr<Fd> Accept(int listen_fd, MonoTime deadline) {
  for (;;) {
    int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c >= 0) {
      SetNoDelay(c).IgnoreError();
      return Fd(c);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Internal(absl::StrCat("accept: ", strerror(errno)));
    }
    HCOMM_RETURN_IF_ERROR(WaitReadable(listen_fd, deadline));
  }
}

absl::Status WaitReadable(int fd, MonoTime deadline) {
  return WaitFor(fd, POLLIN, deadline, "readable");
}

absl::Status WaitWritable(int fd, MonoTime deadline) {
  return WaitFor(fd, POLLOUT, deadline, "writable");
}

absl::Status ReadFull(int fd, void* buf, size_t n, MonoTime deadline) {
  char* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, p + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      return PeerFailure(absl::StrCat("connection closed by the other side after ", got, " of ",
                                      n, " bytes"));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      absl::Status w = WaitReadable(fd, deadline);
      if (!w.ok()) {
        return Timeout(absl::StrCat("read timed out after ", got, " of ", n, " bytes"));
      }
      continue;
    }
    return PeerFailure(absl::StrCat("read failed: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status WriteFull(int fd, const void* buf, size_t n, MonoTime deadline) {
  const char* p = static_cast<const char*>(buf);
  size_t put = 0;
  while (put < n) {
    ssize_t r = ::send(fd, p + put, n - put, MSG_NOSIGNAL);
    if (r >= 0) {
      put += static_cast<size_t>(r);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      absl::Status w = WaitWritable(fd, deadline);
      if (!w.ok()) {
        return Timeout(absl::StrCat("write timed out after ", put, " of ", n, " bytes"));
      }
      continue;
    }
    return PeerFailure(absl::StrCat("write failed: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status WriteFrame(int fd, absl::string_view payload, MonoTime deadline) {
  if (payload.size() > 0xffffffffu) return InvalidArgument("frame larger than 4 GiB");
  uint32_t n = static_cast<uint32_t>(payload.size());
  unsigned char hdr[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                          static_cast<unsigned char>(n >> 16),
                          static_cast<unsigned char>(n >> 24)};
  HCOMM_RETURN_IF_ERROR(WriteFull(fd, hdr, sizeof hdr, deadline));
  return WriteFull(fd, payload.data(), payload.size(), deadline);
}

absl::StatusOr<std::string> ReadFrame(int fd, size_t max_len, MonoTime deadline) {
  unsigned char hdr[4];
  HCOMM_RETURN_IF_ERROR(ReadFull(fd, hdr, sizeof hdr, deadline));
  uint32_t n = static_cast<uint32_t>(hdr[0]) | (static_cast<uint32_t>(hdr[1]) << 8) |
               (static_cast<uint32_t>(hdr[2]) << 16) | (static_cast<uint32_t>(hdr[3]) << 24);
  if (n > max_len) {
    return InvalidArgument(absl::StrCat("frame of ", n, " bytes exceeds the limit of ", max_len));
  }
  std::string out(n, '\0');
  HCOMM_RETURN_IF_ERROR(ReadFull(fd, out.data(), n, deadline));
  return out;
}

absl::StatusOr<std::string> LocalAddressToward(const HostPort& hp) {
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  struct addrinfo* res = nullptr;
  std::string port = absl::StrCat(hp.port == 0 ? 9 : hp.port);
  int rc = ::getaddrinfo(hp.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return Unavailable(absl::StrCat("cannot resolve ", hp.ToString(), ": ", gai_strerror(rc)));
  }
  absl::Status last = Unavailable(absl::StrCat("no route to ", hp.ToString()));
  for (struct addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd.valid() || ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) < 0) continue;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (::getsockname(fd.get(), reinterpret_cast<struct sockaddr*>(&ss), &len) < 0) continue;
    char buf[INET6_ADDRSTRLEN];
    const void* addr = ss.ss_family == AF_INET6
                           ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr)
                           : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr);
    if (::inet_ntop(ss.ss_family, addr, buf, sizeof buf) == nullptr) continue;
    ::freeaddrinfo(res);
    return std::string(buf);
  }
  ::freeaddrinfo(res);
  return last;
}

std::string HostName() {
  char buf[256];
  if (::gethostname(buf, sizeof buf) != 0) return "localhost";
  buf[sizeof buf - 1] = '\0';
  return buf;
}

}  // namespace net
}  // namespace hcomm
