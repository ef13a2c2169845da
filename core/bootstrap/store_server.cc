#include "core/bootstrap/store_server.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/bootstrap/handshake.h"
#include "core/base/status.h"
#include "core/bootstrap/store.pb.h"

namespace hcomm {
namespace {

// A silent stranger cannot hold a connection slot longer than this.
constexpr absl::Duration kHandshakeTimeout = absl::Seconds(10);
// Time allowed to receive the rest of a request, or to send a response, once
// it has started.
constexpr absl::Duration kFrameTimeout = absl::Seconds(60);
// How often an idle or waiting connection thread looks up from its wait
// (shutdown also wakes it at once).
constexpr absl::Duration kIdleSlice = absl::Seconds(1);
// Longest server-side wait a client may ask for.
constexpr int64_t kMaxWaitMs = int64_t{30} * 24 * 3600 * 1000;
// A timeout response lists at most this many missing keys.
constexpr size_t kMaxMissingReported = 100;
constexpr size_t kThreadStackBytes = size_t{1} << 20;

std::string Quote(absl::string_view key) {
  constexpr size_t kShown = 200;
  if (key.size() <= kShown) return absl::StrCat("'", absl::CHexEscape(key), "'");
  return absl::StrCat("'", absl::CHexEscape(key.substr(0, kShown)), "...' (", key.size(),
                      " bytes)");
}

std::string QuoteList(absl::Span<const std::string> keys) {
  constexpr size_t kListed = 20;
  std::vector<std::string> quoted;
  for (size_t i = 0; i < keys.size() && i < kListed; ++i) quoted.push_back(Quote(keys[i]));
  std::string out = absl::StrJoin(quoted, ", ");
  if (keys.size() > kListed) absl::StrAppend(&out, " and ", keys.size() - kListed, " more");
  return out;
}

void* ThreadMain(void* arg) {
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
  (*fn)();
  return nullptr;
}

// Starts a thread without exceptions; false when the system refuses.
bool SpawnThread(std::function<void()> fn, pthread_t* out) {
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return false;
  pthread_attr_setstacksize(&attr, kThreadStackBytes);
  auto* arg = new std::function<void()>(std::move(fn));
  int rc = pthread_create(out, &attr, &ThreadMain, arg);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    delete arg;
    return false;
  }
  return true;
}

// True when the client closed or reset its side of the connection.
bool PeerHungUp(int fd) {
  struct pollfd p = {fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

absl::Status CheckKey(absl::string_view key) {
  if (key.empty()) return InvalidArgument("store keys must not be empty");
  if (key.size() > StoreServer::kMaxKeyBytes) {
    return InvalidArgument(absl::StrCat("store key ", Quote(key), " is longer than ",
                                        StoreServer::kMaxKeyBytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckKeys(const google::protobuf::RepeatedPtrField<std::string>& keys) {
  if (static_cast<size_t>(keys.size()) > StoreServer::kMaxKeysPerRequest) {
    return InvalidArgument(absl::StrCat("a store request may name at most ",
                                        StoreServer::kMaxKeysPerRequest, " keys, got ",
                                        keys.size()));
  }
  for (const std::string& k : keys) HCOMM_RETURN_IF_ERROR(CheckKey(k));
  return absl::OkStatus();
}

void SetError(const absl::Status& s, store::Response* resp) {
  resp->set_code(static_cast<int32_t>(CodeOf(s)));
  resp->set_message(std::string(s.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, int port,
                                                                std::string token) {
  int bound = 0;
  HCOMM_ASSIGN_OR_RETURN(net::Fd lfd, net::Listen(host, port, &bound));
  net::Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return Internal(absl::StrCat("store server: eventfd: ", strerror(errno)));
  std::unique_ptr<StoreServer> server(
      new StoreServer(std::move(lfd), std::move(wake), bound, std::move(token)));
  StoreServer* s = server.get();
  if (!SpawnThread([s] { s->AcceptLoop(); }, &s->accept_thread_)) {
    return Internal("store server: cannot start the accept thread");
  }
  s->accept_started_ = true;
  return server;
}

StoreServer::StoreServer(net::Fd listen_fd, net::Fd wake_fd, int port, std::string token)
    : token_(std::move(token)),
      port_(port),
      listen_fd_(std::move(listen_fd)),
      wake_fd_(std::move(wake_fd)) {}

StoreServer::~StoreServer() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
    for (Waiter* w : waiters_) w->cv.Signal();
  }
  Wake();
  if (accept_started_) pthread_join(accept_thread_, nullptr);
  // The accept thread is gone, so conns_ no longer grows. Shutting a socket
  // down wakes its thread from any read, write or poll.
  std::vector<pthread_t> threads;
  {
    absl::MutexLock l(&mu_);
    for (auto& [id, conn] : conns_) {
      if (conn.fd >= 0) ::shutdown(conn.fd, SHUT_RDWR);
      threads.push_back(conn.thread);
    }
  }
  for (pthread_t t : threads) pthread_join(t, nullptr);
  absl::MutexLock l(&mu_);
  conns_.clear();
}

void StoreServer::Wake() {
  uint64_t one = 1;
  ssize_t r = ::write(wake_fd_.get(), &one, sizeof one);
  (void)r;  // EAGAIN: the counter is already non-zero, a wakeup is pending
}

bool StoreServer::Stopping() const {
  absl::MutexLock l(&mu_);
  return stopping_;
}

void StoreServer::AcceptLoop() {
  bool backoff = false;  // out of descriptors: stop polling the listener briefly
  bool listener_dead = false;  // torn down under us: serve existing clients only
  for (;;) {
    struct pollfd fds[2] = {{wake_fd_.get(), POLLIN, 0}, {listen_fd_.get(), POLLIN, 0}};
    int timeout_ms = backoff ? 100 : static_cast<int>(absl::ToInt64Milliseconds(kIdleSlice));
    int r = ::poll(fds, backoff || listener_dead ? 1 : 2, timeout_ms);
    if (r > 0 && !listener_dead && (fds[1].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0 &&
        (fds[1].revents & POLLIN) == 0) {
      listener_dead = true;
    }
    backoff = false;
    if (r > 0 && (fds[0].revents & POLLIN) != 0) {
      uint64_t count;
      ssize_t n = ::read(wake_fd_.get(), &count, sizeof count);
      (void)n;
    }
    ReapFinished();
    if (Stopping()) return;
    if (r <= 0 || listener_dead || (fds[1].revents & POLLIN) == 0) continue;
    for (;;) {
      int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        Admit(fd);
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        backoff = true;
      }
      if (errno == EINVAL || errno == EBADF || errno == ENOTSOCK) {
        // The listening socket was shut down (e.g. killed from outside):
        // polling it again would spin. Keep serving connected clients.
        listener_dead = true;
      }
      break;  // EAGAIN, or an error to retry after the next poll
    }
  }
}

void StoreServer::Admit(int fd) {
  net::SetNoDelay(fd).IgnoreError();  // fails harmlessly on non-TCP sockets
  absl::MutexLock l(&mu_);
  if (stopping_ || conns_.size() >= kMaxConnections) {
    ::close(fd);  // the client sees the connection closed
    return;
  }
  net::Fd::Own(fd);  // a fork's child closes it (core/base/net.h)
  const uint64_t id = next_conn_id_++;
  Conn& conn = conns_[id];
  conn.fd = fd;
  if (!SpawnThread([this, id, fd] { ServeConnection(id, fd); }, &conn.thread)) {
    net::Fd::Disown(fd);
    ::close(fd);
    conns_.erase(id);
  }
}

void StoreServer::ReapFinished() {
  std::vector<pthread_t> finished;
  {
    absl::MutexLock l(&mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->second.done) {
        finished.push_back(it->second.thread);
        conns_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  // Each of these threads has only its return left to do.
  for (pthread_t t : finished) pthread_join(t, nullptr);
}

void StoreServer::ServeConnection(uint64_t id, int fd) {
  if (!Stopping()) {
    absl::Status s = HandshakeAsServer(fd, token_, absl::Now() + kHandshakeTimeout);
    // A failed handshake (stranger, wrong token, junk) just ends the connection.
    if (s.ok()) ServeRequests(fd);
  }
  {
    absl::MutexLock l(&mu_);
    net::Fd::Disown(fd);
    ::close(fd);
    Conn& conn = conns_[id];
    conn.fd = -1;
    conn.done = true;
  }
  Wake();  // have the accept thread join us
}

void StoreServer::ServeRequests(int fd) {
  for (;;) {
    if (Stopping()) return;
    absl::Status idle = net::WaitReadable(fd, absl::Now() + kIdleSlice);
    if (CodeOf(idle) == ErrorCode::kTimeout) continue;
    if (!idle.ok()) return;
    absl::StatusOr<std::string> frame =
        net::ReadFrame(fd, kMaxFrameBytes, absl::Now() + kFrameTimeout);
    // Closed, truncated or over-long frames: the stream cannot be trusted.
    if (!frame.ok()) return;
    store::Request req;
    store::Response resp;
    if (!req.ParseFromString(*frame)) {
      // Framing is intact, so answer and carry on.
      SetError(InvalidArgument(absl::StrCat("store server: unparsable request (", frame->size(),
                                            " bytes)")),
               &resp);
    } else {
      frame->clear();
      frame->shrink_to_fit();
      resp.set_id(req.id());
      if (!Handle(fd, req, &resp)) return;
    }
    std::string bytes;
    if (!resp.SerializeToString(&bytes)) return;
    if (!net::WriteFrame(fd, bytes, absl::Now() + kFrameTimeout).ok()) return;
  }
}

bool StoreServer::Handle(int fd, const store::Request& req, store::Response* resp) {
  const int64_t timeout_ms =
      std::min<uint64_t>(req.timeout_ms(), static_cast<uint64_t>(kMaxWaitMs));
  const absl::Duration timeout = absl::Milliseconds(timeout_ms);
  const absl::Time deadline = absl::Now() + timeout;
  switch (req.op_case()) {
    case store::Request::kSet: {
      absl::Status s = CheckKey(req.set().key());
      if (s.ok() && req.set().value().size() > kMaxValueBytes) {
        s = InvalidArgument(absl::StrCat("store value for key ", Quote(req.set().key()), " has ",
                                         req.set().value().size(), " bytes; the limit is ",
                                         kMaxValueBytes));
      }
      if (!s.ok()) {
        SetError(s, resp);
        return true;
      }
      absl::MutexLock l(&mu_);
      data_[req.set().key()] = req.set().value();
      NotifyKeyLocked(req.set().key());
      return true;
    }
    case store::Request::kGet: {
      const std::string& key = req.get().key();
      absl::Status s = CheckKey(key);
      std::vector<std::string> missing;
      if (s.ok()) s = AwaitKeys(fd, {key}, deadline, &missing);
      if (CodeOf(s) == ErrorCode::kPeerFailure) return false;
      if (!s.ok()) {
        if (CodeOf(s) == ErrorCode::kTimeout) {
          s = Timeout(absl::StrCat("key ", Quote(key), " was not set within ",
                                   absl::FormatDuration(timeout)));
          resp->add_missing(key);
        }
        SetError(s, resp);
        return true;
      }
      absl::MutexLock l(&mu_);
      auto it = data_.find(key);
      if (it != data_.end()) resp->set_value(it->second);  // keys are never erased
      return true;
    }
    case store::Request::kAdd: {
      const std::string& key = req.add().key();
      absl::Status s = CheckKey(key);
      if (!s.ok()) {
        SetError(s, resp);
        return true;
      }
      absl::MutexLock l(&mu_);
      int64_t current = 0;
      auto it = data_.find(key);
      if (it != data_.end() && !absl::SimpleAtoi(it->second, &current)) {
        SetError(InvalidArgument(absl::StrCat("store ADD on key ", Quote(key),
                                              " whose value is not a decimal int64")),
                 resp);
        return true;
      }
      int64_t next = 0;
      if (__builtin_add_overflow(current, req.add().delta(), &next)) {
        SetError(InvalidArgument(absl::StrCat("store ADD of ", req.add().delta(), " to key ",
                                              Quote(key), " (", current, ") overflows int64")),
                 resp);
        return true;
      }
      data_[key] = absl::StrCat(next);
      NotifyKeyLocked(key);
      resp->set_counter(next);
      return true;
    }
    case store::Request::kWait: {
      absl::Status s = CheckKeys(req.wait().keys());
      std::vector<std::string> keys(req.wait().keys().begin(), req.wait().keys().end());
      std::vector<std::string> missing;
      if (s.ok()) s = AwaitKeys(fd, keys, deadline, &missing);
      if (CodeOf(s) == ErrorCode::kPeerFailure) return false;
      if (!s.ok()) {
        if (CodeOf(s) == ErrorCode::kTimeout) {
          s = Timeout(absl::StrCat(missing.size(), " of ", keys.size(),
                                   " keys were not set within ", absl::FormatDuration(timeout),
                                   ": ", QuoteList(missing)));
          for (size_t i = 0; i < missing.size() && i < kMaxMissingReported; ++i) {
            resp->add_missing(missing[i]);
          }
        }
        SetError(s, resp);
      }
      return true;
    }
    case store::Request::kCheck: {
      absl::Status s = CheckKeys(req.check().keys());
      if (!s.ok()) {
        SetError(s, resp);
        return true;
      }
      absl::MutexLock l(&mu_);
      for (const std::string& k : req.check().keys()) resp->add_exists(data_.contains(k));
      return true;
    }
    case store::Request::OP_NOT_SET:
      break;
  }
  SetError(InvalidArgument("store server: request without an operation (newer client?)"), resp);
  return true;
}

std::vector<std::string> StoreServer::MissingLocked(absl::Span<const std::string> keys) const {
  std::vector<std::string> missing;
  for (const std::string& k : keys) {
    if (!data_.contains(k)) missing.push_back(k);
  }
  return missing;
}

void StoreServer::NotifyKeyLocked(const std::string& key) {
  auto it = waiters_by_key_.find(key);
  if (it == waiters_by_key_.end()) return;
  for (Waiter* w : it->second) w->cv.Signal();
}

absl::Status StoreServer::AwaitKeys(int fd, absl::Span<const std::string> keys,
                                    absl::Time deadline, std::vector<std::string>* missing) {
  absl::MutexLock l(&mu_);
  *missing = MissingLocked(keys);
  if (missing->empty()) return absl::OkStatus();
  Waiter self;
  waiters_.insert(&self);
  for (const std::string& k : *missing) waiters_by_key_[k].insert(&self);
  absl::Status result;
  for (;;) {
    *missing = MissingLocked(keys);
    if (missing->empty()) break;
    if (stopping_) {
      result = Unavailable("the store server is shutting down");
      break;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      result = Timeout("timed out");
      break;
    }
    const absl::Time slice = std::min(deadline, now + kIdleSlice);
    // Every slice, check (without blocking) that the client is still there,
    // so that a vanished client does not keep its thread parked.
    if (self.cv.WaitWithDeadline(&mu_, slice) && slice < deadline && PeerHungUp(fd)) {
      result = PeerFailure("the client hung up while waiting");
      break;
    }
  }
  // Unregister: keys that were set meanwhile are still registered too.
  waiters_.erase(&self);
  for (const std::string& k : keys) {
    auto it = waiters_by_key_.find(k);
    if (it == waiters_by_key_.end()) continue;
    it->second.erase(&self);
    if (it->second.empty()) waiters_by_key_.erase(it);
  }
  return result;
}

absl::Status StoreServer::AwaitWaiters(int n, absl::Time deadline) {
  struct Arg {
    StoreServer* server;
    size_t n;
  } arg{this, static_cast<size_t>(std::max(n, 0))};
  auto enough = [](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a->server->waiters_.size() >= a->n;
  };
  bool ok = mu_.LockWhenWithDeadline(absl::Condition(+enough, &arg), deadline);
  const size_t have = waiters_.size();
  mu_.Unlock();
  if (ok) return absl::OkStatus();
  return Timeout(absl::StrCat("store server: ", have, " requests waiting, wanted ", n));
}

}  // namespace hcomm
