#include "core/bootstrap/store_server.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <exception>
#include <new>
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
#include "core/base/clock.h"
#include "core/bootstrap/handshake.h"
#include "core/base/status.h"
#include "core/bootstrap/store.pb.h"

namespace hcomm {
namespace {

// A frame's buffer starts at this size (or the frame's, if smaller) and
// then at most doubles per step, each step only once the previous one is full.
constexpr size_t kFirstFrameChunk = 64 * 1024;
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

std::atomic<StoreServer::AllocationHook> g_alloc_hook{nullptr};

// What an exception that reached a connection's thread was, for the log.
std::string DescribeException(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc& ex) {
    return absl::StrCat("out of memory (", ex.what(), ")");
  } catch (const std::exception& ex) {
    return absl::StrCat("exception: ", ex.what());
  } catch (...) {
    return "unknown exception";
  }
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
  auto* arg = new (std::nothrow) std::function<void()>(std::move(fn));
  if (arg == nullptr) {
    pthread_attr_destroy(&attr);
    return false;
  }
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
  return Start(host, port, std::move(token), StoreLimits());
}

void StoreServer::SetAllocationHookForTest(AllocationHook hook) { g_alloc_hook.store(hook); }

size_t StoreServer::PendingFrameBytes() const {
  absl::MutexLock l(&mu_);
  return pending_frame_bytes_;
}

absl::Status StoreServer::AwaitPendingFrameBytes(size_t n, MonoTime deadline) {
  size_t have = 0;
  if (PollUntil([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return (have = pending_frame_bytes_) >= n; },
                deadline)) {
    return absl::OkStatus();
  }
  return Timeout(absl::StrCat("store server: ", have, " bytes reserved for frames, wanted ", n));
}

bool StoreServer::PollUntil(absl::FunctionRef<bool()> reached, MonoTime deadline) {
  for (;;) {
    {
      absl::MutexLock l(&mu_);
      if (reached()) return true;
    }
    if (MonoNow() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));  // relative: no wall clock
  }
}

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, int port,
                                                                std::string token,
                                                                const StoreLimits& limits) {
  int bound = 0;
  HCOMM_ASSIGN_OR_RETURN(net::Fd lfd, net::Listen(host, port, &bound));
  net::Fd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return Internal(absl::StrCat("store server: eventfd: ", strerror(errno)));
  std::unique_ptr<StoreServer> server(
      new StoreServer(std::move(lfd), std::move(wake), bound, std::move(token), limits));
  StoreServer* s = server.get();
  if (!SpawnThread([s] { s->AcceptLoop(); }, &s->accept_thread_)) {
    return Internal("store server: cannot start the accept thread");
  }
  s->accept_started_ = true;
  return server;
}

StoreServer::StoreServer(net::Fd listen_fd, net::Fd wake_fd, int port, std::string token)
    : StoreServer(std::move(listen_fd), std::move(wake_fd), port, std::move(token), StoreLimits()) {}

StoreServer::StoreServer(net::Fd listen_fd, net::Fd wake_fd, int port, std::string token,
                         const StoreLimits& limits)
    : token_(std::move(token)),
      limits_(limits),
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
    try {
      ReapFinished();
    } catch (const std::exception& e) {  // a vector's allocation: retried next round
      fprintf(stderr, "hcomm WARN: store server on port %d: reaping connection threads: %s\n",
              port_, e.what());
    }
    if (Stopping()) return;
    if (r <= 0 || listener_dead || (fds[1].revents & POLLIN) == 0) continue;
    for (;;) {
      int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        Admit(fd);  // closes fd itself on any failure
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
  if (stopping_ || authenticated_ >= limits_.max_connections) {
    ::close(fd);  // the client sees the connection closed
    return;
  }
  // Room for the newcomer among those still in the handshake: the oldest
  // goes. Shutting its socket down ends its handshake at once; its thread
  // then closes it and leaves.
  while (!unauthenticated_.empty() &&
         unauthenticated_.size() >= std::max<size_t>(limits_.max_unauthenticated, 1)) {
    const uint64_t oldest = *unauthenticated_.begin();
    unauthenticated_.erase(unauthenticated_.begin());
    auto it = conns_.find(oldest);
    if (it != conns_.end() && it->second.fd >= 0) ::shutdown(it->second.fd, SHUT_RDWR);
  }
  const uint64_t id = next_conn_id_++;
  Conn* conn = nullptr;
  try {
    conn = &conns_[id];
    unauthenticated_.insert(id);
  } catch (const std::exception& e) {
    conns_.erase(id);
    unauthenticated_.erase(id);
    ::close(fd);
    fprintf(stderr, "hcomm WARN: store server on port %d: refused a connection: %s\n", port_,
            e.what());
    return;
  }
  net::Fd::Own(fd);  // a fork's child closes it (core/base/net.h)
  conn->fd = fd;
  if (!SpawnThread([this, id, fd] { ServeConnection(id, fd); }, &conn->thread)) {
    net::Fd::Disown(fd);
    ::close(fd);
    conns_.erase(id);
    unauthenticated_.erase(id);
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
  // The thread boundary: nothing may escape it (it would end rank 0's
  // process). A failure here costs this connection only.
  try {
    AuthenticateAndServe(id, fd);
  } catch (...) {
    const std::string why = DescribeException(std::current_exception());
    fprintf(stderr,
            "hcomm WARN: store server on port %d: dropped connection %llu after %s while "
            "serving it; the store keeps serving the others\n",
            port_, static_cast<unsigned long long>(id), why.c_str());
  }
  {
    absl::MutexLock l(&mu_);
    net::Fd::Disown(fd);
    ::close(fd);
    unauthenticated_.erase(id);
    auto it = conns_.find(id);  // always there: only the accept thread reaps done ones
    if (it != conns_.end()) {
      if (it->second.authenticated) --authenticated_;
      it->second.authenticated = false;
      it->second.fd = -1;
      it->second.done = true;
    }
  }
  Wake();  // have the accept thread join us
}

void StoreServer::AuthenticateAndServe(uint64_t id, int fd) {
  if (Stopping()) return;
  absl::Status s = HandshakeAsServer(fd, token_, MonoNow() + limits_.handshake_timeout);
  // A failed handshake (stranger, wrong token, junk) just ends the connection.
  if (!s.ok()) return;
  {
    absl::MutexLock l(&mu_);
    // Dropped for a newer stranger while it finished: it lost its place.
    if (unauthenticated_.erase(id) == 0) return;
    if (authenticated_ >= limits_.max_connections) return;
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    it->second.authenticated = true;
    ++authenticated_;
  }
  ServeRequests(fd);
}

absl::StatusOr<std::string> StoreServer::ReadRequestFrame(int fd, MonoTime deadline) {
  unsigned char hdr[4];
  HCOMM_RETURN_IF_ERROR(net::ReadFull(fd, hdr, sizeof hdr, deadline));
  const uint32_t n = static_cast<uint32_t>(hdr[0]) | (static_cast<uint32_t>(hdr[1]) << 8) |
                     (static_cast<uint32_t>(hdr[2]) << 16) |
                     (static_cast<uint32_t>(hdr[3]) << 24);
  if (n > kMaxFrameBytes) {
    return InvalidArgument(
        absl::StrCat("frame of ", n, " bytes exceeds the limit of ", kMaxFrameBytes));
  }
  // What this frame has added to pending_frame_bytes_; given back however
  // we leave (an error, or an exception from a failed allocation).
  struct Reservation {
    StoreServer* server;
    size_t bytes = 0;
    ~Reservation() {
      absl::MutexLock l(&server->mu_);
      server->pending_frame_bytes_ -= bytes;
    }
  } reservation{this};
  std::string out;
  size_t got = 0;
  while (got < n) {
    if (got == out.size()) {
      const size_t next = std::min<size_t>(n, std::max(kFirstFrameChunk, 2 * got));
      if (AllocationHook hook = g_alloc_hook.load()) hook(next);
      out.resize(next);
      absl::MutexLock l(&mu_);
      pending_frame_bytes_ += next - reservation.bytes;
      reservation.bytes = next;
    }
    HCOMM_RETURN_IF_ERROR(net::ReadFull(fd, out.data() + got, out.size() - got, deadline));
    got = out.size();
  }
  return out;
}

void StoreServer::ServeRequests(int fd) {
  for (;;) {
    if (Stopping()) return;
    absl::Status idle = net::WaitReadable(fd, MonoNow() + kIdleSlice);
    if (CodeOf(idle) == ErrorCode::kTimeout) continue;
    if (!idle.ok()) return;
    absl::StatusOr<std::string> frame = ReadRequestFrame(fd, MonoNow() + kFrameTimeout);
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
    if (!net::WriteFrame(fd, bytes, MonoNow() + kFrameTimeout).ok()) return;
  }
}

bool StoreServer::Handle(int fd, const store::Request& req, store::Response* resp) {
  const int64_t timeout_ms =
      std::min<uint64_t>(req.timeout_ms(), static_cast<uint64_t>(kMaxWaitMs));
  const absl::Duration timeout = absl::Milliseconds(timeout_ms);
  const MonoTime deadline = MonoNow() + timeout;
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
      const std::string& key = req.set().key();
      const std::string& value = req.set().value();
      absl::MutexLock l(&mu_);
      auto it = data_.find(key);
      const size_t old_cost = it == data_.end() ? 0 : EntryCost(key, it->second.size());
      s = CheckRoomLocked("SET", key, value.size(), old_cost);
      if (!s.ok()) {
        SetError(s, resp);
        return true;
      }
      StoreLocked(key, value);
      NotifyKeyLocked(key);
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
      const std::string text = absl::StrCat(next);
      const size_t old_cost = it == data_.end() ? 0 : EntryCost(key, it->second.size());
      s = CheckRoomLocked("ADD", key, text.size(), old_cost);
      if (!s.ok()) {
        SetError(s, resp);
        return true;
      }
      StoreLocked(key, text);
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

absl::Status StoreServer::CheckRoomLocked(absl::string_view op, const std::string& key,
                                          size_t value_bytes, size_t old_cost) const {
  const size_t after = stored_bytes_ - old_cost + EntryCost(key, value_bytes);
  if (after <= limits_.max_stored_bytes) return absl::OkStatus();
  return OutOfMem(absl::StrCat(
      "the store is full: ", op, " of key ", Quote(key), " (", value_bytes,
      "-byte value) would bring the stored total to ", after, " bytes; the limit is ",
      limits_.max_stored_bytes, " bytes (", data_.size(), " keys hold ", stored_bytes_,
      " bytes, counting ", kEntryOverheadBytes, " bytes per key)"));
}

void StoreServer::StoreLocked(const std::string& key, const std::string& value) {
  // Counted step by step, so that an allocation that fails midway (the
  // connection thread catches it) leaves stored_bytes_ exact.
  auto [it, inserted] = data_.try_emplace(key);
  if (inserted) stored_bytes_ += EntryCost(key, 0);
  const size_t old_size = it->second.size();
  it->second = value;  // strong guarantee: unchanged if it throws
  stored_bytes_ = stored_bytes_ - old_size + value.size();
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
                                    MonoTime deadline, std::vector<std::string>* missing) {
  absl::MutexLock l(&mu_);
  *missing = MissingLocked(keys);
  if (missing->empty()) return absl::OkStatus();
  Waiter self;
  // Unregisters however we leave: registering can fail to allocate, and
  // a Waiter left registered would dangle. Destroyed before `l` unlocks.
  struct Registration {
    StoreServer* server;
    Waiter* self;
    absl::Span<const std::string> keys;
    ~Registration() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      server->waiters_.erase(self);
      for (const std::string& k : keys) {
        auto it = server->waiters_by_key_.find(k);
        if (it == server->waiters_by_key_.end()) continue;
        it->second.erase(self);
        if (it->second.empty()) server->waiters_by_key_.erase(it);
      }
    }
  } registration{this, &self, keys};
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
    const MonoTime now = MonoNow();
    if (now >= deadline) {
      result = Timeout("timed out");
      break;
    }
    const MonoTime slice = std::min(deadline, now + kIdleSlice);
    // Every slice, check (without blocking) that the client is still there,
    // so that a vanished client does not keep its thread parked.
    if (self.cv.WaitUntil(&mu_, slice) && slice < deadline && PeerHungUp(fd)) {
      result = PeerFailure("the client hung up while waiting");
      break;
    }
  }
  // `registration` unregisters, also keys that were set meanwhile.
  return result;
}

absl::Status StoreServer::AwaitWaiters(int n, MonoTime deadline) {
  const size_t want = static_cast<size_t>(std::max(n, 0));
  size_t have = 0;
  if (PollUntil([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return (have = waiters_.size()) >= want; },
                deadline)) {
    return absl::OkStatus();
  }
  return Timeout(absl::StrCat("store server: ", have, " requests waiting, wanted ", n));
}

}  // namespace hcomm
