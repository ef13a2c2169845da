// An hcomm transport plugin: frames between the ranks of one host over
// Unix-domain stream sockets, named "uds". Built against the installed
// headers only, as a third party would:
//
//   c++ -std=c++17 -fPIC -shared $(pkg-config --cflags hcomm) uds_protocol.cc -o libhcomm_uds.so
//   HCOMM_PLUGINS=$PWD/libhcomm_uds.so HCOMM_TRANSPORTS=uds hcomm_run -n 4 -- ./app
//
// (docs/plugins.md walks through it.) What it does:
//   publish   listens on /tmp/hcomm-uds-<job key>-<rank> (mode 0600; the
//             card is that path)
//   can_reach a rank of the same host_id whose socket is there
//   connect   dials the lower ranks and accepts the higher; both ends prove
//             the job's token (host->authenticate); the dialer says who it
//             is; then the socket name goes, so nothing is left in /tmp
//   send      frames "<payload length: 8 bytes><header><payload>", written
//             at once where the socket takes them, else queued in order and
//             finished by poll
//   poll      poll(2) over every connection: reads what arrived, straight
//             into the buffer the library gives for each payload, and
//             writes what is queued
// A connection that ends (EOF, an error, fail_peer, shutdown_all) fails
// its queued frames and is reported once through on_connection_lost.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "hcomm/protocol.hpp"

namespace {

constexpr int kLookMs = 200;  // setup waits ask host->check this often

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::string Errno(const char* what) { return std::string(what) + ": " + strerror(errno); }

// Blocking helpers for setup (hello frames), bounded by a deadline.
bool WaitFd(int fd, short events, int64_t deadline_ms) {
  for (;;) {
    const int64_t left = deadline_ms - NowMs();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kLookMs)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

bool WriteAll(int fd, const void* data, size_t n, int64_t deadline_ms) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && errno == EAGAIN) {
      if (!WaitFd(fd, POLLOUT, deadline_ms)) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n, int64_t deadline_ms) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else if (r < 0 && errno == EAGAIN) {
      if (!WaitFd(fd, POLLIN, deadline_ms)) return false;
    } else {
      return false;
    }
  }
  return true;
}

class UdsProtocol final : public hcomm::Protocol {
 public:
  using Protocol::Protocol;

  ~UdsProtocol() override {
    if (listener_ >= 0) ::close(listener_);
    if (!path_.empty()) ::unlink(path_.c_str());
    for (auto& [peer, c] : conns_) {
      if (c->fd >= 0) ::close(c->fd);
    }
  }

  hcomm_status_t Publish(std::string* card) override {
    path_ = std::string("/tmp/hcomm-uds-") + host().job_key + "-" + std::to_string(rank());
    sockaddr_un addr{};
    if (path_.size() >= sizeof addr.sun_path) {
      return Fail(HCOMM_ERR_NO_DEVICE, "socket path too long: " + path_);
    }
    listener_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listener_ < 0) return Fail(HCOMM_ERR_NO_DEVICE, Errno("socket(AF_UNIX)"));
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    ::unlink(path_.c_str());  // a crashed job's of the same key
    // Owner-only from the start: the umask applies to bind's file.
    const mode_t old = ::umask(0077);
    const int bound = ::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::umask(old);
    if (bound != 0 || ::listen(listener_, 128) != 0) {
      const std::string why = Errno(("bind/listen " + path_).c_str());
      path_.clear();
      return Fail(HCOMM_ERR_NO_DEVICE, why);
    }
    *card = path_;
    return HCOMM_SUCCESS;
  }

  bool CanReach(int peer, const char* peer_host, const char* peer_card) override {
    struct stat st;
    if (listener_ < 0 || strcmp(peer_host, host().host_id) != 0 ||
        ::stat(peer_card, &st) != 0 || !S_ISSOCK(st.st_mode)) {
      return false;
    }
    paths_[peer] = peer_card;
    return true;
  }

  hcomm_status_t Connect(const std::vector<int>& peers) override {
    for (int p : peers) {
      if (p < rank()) {
        if (hcomm_status_t s = Dial(p); s != HCOMM_SUCCESS) return s;
      }
    }
    size_t higher = 0;
    for (int p : peers) higher += p > rank() ? 1 : 0;
    for (size_t got = 0; got < higher;) {
      int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno != EAGAIN && errno != EINTR) return Fail(HCOMM_ERR_UNAVAILABLE, Errno("accept"));
        // Another rank's init failed, or the deadline passed (the host set
        // the reason).
        if (hcomm_status_t s = host().check(host().ctx); s != HCOMM_SUCCESS) return s;
        WaitFd(listener_, POLLIN, NowMs() + kLookMs);
        continue;
      }
      // A stranger, or a rank of another job, is dropped.
      int who = -1;
      if (Authenticate(fd, /*as_server=*/true) != HCOMM_SUCCESS || !ReadHello(fd, &who) ||
          std::find(peers.begin(), peers.end(), who) == peers.end() || who < rank() ||
          conns_.count(who) > 0) {
        ::close(fd);
        continue;
      }
      Add(who, fd);
      ++got;
    }
    // Everyone who will dial us has: the name goes, the socket stays. (No
    // rank asks can_reach of it any more: a lower one has answered our
    // dial, a higher one has dialed, and the others stopped at another
    // transport or another host.)
    ::close(listener_);
    listener_ = -1;
    ::unlink(path_.c_str());
    path_.clear();
    return HCOMM_SUCCESS;
  }

  hcomm_status_t Send(int peer, const void* header, const void* payload, size_t len,
                      hcomm_transport_done_fn done, void* done_arg, uint64_t* handle) override {
    Conn* c = At(peer);
    if (c == nullptr) return Fail(HCOMM_ERR_INVALID_ARGUMENT, "no connection to that rank");
    auto f = std::make_unique<Frame>();
    f->prefix.resize(8 + header_bytes());
    const uint64_t n = len;
    memcpy(&f->prefix[0], &n, 8);
    memcpy(&f->prefix[8], header, header_bytes());
    f->payload = static_cast<const char*>(payload);
    f->len = len;
    f->done = done;
    f->done_arg = done_arg;
    f->handle = next_handle_.fetch_add(1);
    *handle = f->handle;
    std::vector<Finished> finished;
    {
      std::lock_guard<std::mutex> l(c->send_mu);
      if (c->dead) {
        if (done != nullptr) finished.push_back({done, done_arg, HCOMM_ERR_PEER_FAILURE, c->why});
      } else {
        c->queue.push_back(std::move(f));
        pending_.fetch_add(1);
        if (c->queue.size() == 1) WriteQueued(c, &finished);
      }
    }
    Run(finished);
    return HCOMM_SUCCESS;
  }

  bool Cancel(int peer, uint64_t handle) override {
    Conn* c = At(peer);
    if (c == nullptr) return false;
    std::lock_guard<std::mutex> l(c->send_mu);
    for (auto it = c->queue.begin(); it != c->queue.end(); ++it) {
      Frame& f = **it;
      if (f.handle != handle) continue;
      if (f.sent == 0) {
        c->queue.erase(it);
        pending_.fetch_sub(1);
        return true;  // none of it left: dropped, done never runs
      }
      // Partly written: the rest must still go (the stream would break),
      // from a copy, so that the caller may reuse its buffer.
      if (f.owned.empty() && f.len > 0) {
        f.owned.assign(f.payload, f.payload + f.len);
        f.payload = f.owned.data();
      }
      return false;
    }
    return false;
  }

  int Poll(int64_t timeout_ns) override {
    std::vector<Conn*> all;
    std::vector<pollfd> fds;
    {
      std::lock_guard<std::mutex> l(conns_mu_);
      for (auto& [peer, c] : conns_) {
        if (c->reported) continue;
        short events = POLLIN;
        {
          std::lock_guard<std::mutex> s(c->send_mu);
          if (!c->queue.empty() || c->close_write) events |= POLLOUT;
        }
        all.push_back(c.get());
        fds.push_back(pollfd{c->fd, events, 0});
      }
    }
    int events = 0;
    // Connections failed by fail_peer or shutdown_all are reported first.
    for (Conn* c : all) events += ReportIfDead(c);
    if (all.empty()) return events;
    int ms = 0;
    if (timeout_ns > 0) ms = static_cast<int>(std::min<int64_t>((timeout_ns + 999999) / 1000000, 50));
    const int ready = ::poll(fds.data(), fds.size(), events > 0 ? 0 : ms);
    if (ready <= 0) return events;
    for (size_t i = 0; i < all.size(); ++i) {
      Conn* c = all[i];
      if (fds[i].revents & POLLOUT) {
        std::vector<Finished> finished;
        {
          std::lock_guard<std::mutex> l(c->send_mu);
          WriteQueued(c, &finished);
        }
        events += static_cast<int>(finished.size());
        Run(finished);
      }
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) events += Read(c);
      events += ReportIfDead(c);
    }
    return events;
  }

  size_t PendingSends() override { return pending_.load(); }

  void CloseWrite(int peer) override {
    Conn* c = At(peer);
    if (c == nullptr) return;
    std::vector<Finished> finished;
    {
      std::lock_guard<std::mutex> l(c->send_mu);
      c->close_write = true;
      WriteQueued(c, &finished);  // shuts the write side once the queue is empty
    }
    Run(finished);
  }

  void ShutdownAll() override {
    std::vector<Conn*> all;
    {
      std::lock_guard<std::mutex> l(conns_mu_);
      for (auto& [peer, c] : conns_) all.push_back(c.get());
    }
    for (Conn* c : all) {
      ::shutdown(c->fd, SHUT_RDWR);
      MarkDead(c, "uds: the connection was shut down (abort)");
    }
  }

  void FailPeer(int peer, const char* why) override {
    Conn* c = At(peer);
    if (c == nullptr) return;
    ::shutdown(c->fd, SHUT_RDWR);
    MarkDead(c, why);
    ReportIfDead(c);
  }

 private:
  struct Frame {
    std::string prefix;  // length + header
    const char* payload = nullptr;
    size_t len = 0;
    size_t sent = 0;  // of prefix + payload
    std::vector<char> owned;
    hcomm_transport_done_fn done = nullptr;
    void* done_arg = nullptr;
    uint64_t handle = 0;
  };
  struct Finished {
    hcomm_transport_done_fn done;
    void* arg;
    hcomm_status_t status;
    std::string why;
  };
  struct Conn {
    int peer = -1;
    int fd = -1;
    std::mutex send_mu;  // queue, close_write, dead, why
    std::deque<std::unique_ptr<Frame>> queue;
    bool close_write = false;
    bool write_closed = false;
    bool dead = false;
    std::string why;
    std::mutex recv_mu;  // the frame arriving
    std::string prefix;  // bytes of its length and header so far
    char* dst = nullptr;
    uint64_t want = 0, got = 0;
    bool in_payload = false;
    std::vector<char> discard;
    std::atomic<bool> reported{false};
  };

  Conn* At(int peer) {
    std::lock_guard<std::mutex> l(conns_mu_);
    auto it = conns_.find(peer);
    return it == conns_.end() ? nullptr : it->second.get();
  }

  void Add(int peer, int fd) {
    auto c = std::make_unique<Conn>();
    c->peer = peer;
    c->fd = fd;
    std::lock_guard<std::mutex> l(conns_mu_);
    conns_[peer] = std::move(c);
  }

  hcomm_status_t Dial(int peer) {
    auto at = paths_.find(peer);
    if (at == paths_.end()) return Fail(HCOMM_ERR_INVALID_ARGUMENT, "no socket path of that rank");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, at->second.c_str(), at->second.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Fail(HCOMM_ERR_UNAVAILABLE, Errno("socket(AF_UNIX)"));
    while (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      if (errno != EINTR && errno != EAGAIN) {
        const std::string why = Errno(("connect " + at->second).c_str());
        ::close(fd);
        return Fail(HCOMM_ERR_UNAVAILABLE, why);
      }
    }
    const std::string hello = std::string(host().job_key) + " " + std::to_string(rank());
    const uint32_t n = static_cast<uint32_t>(hello.size());
    if (hcomm_status_t s = Authenticate(fd, /*as_server=*/false); s != HCOMM_SUCCESS) {
      ::close(fd);
      return s;  // (the host set the reason)
    }
    const int64_t deadline = NowMs() + TimeLeftMs();
    if (!WriteAll(fd, &n, 4, deadline) || !WriteAll(fd, hello.data(), n, deadline)) {
      ::close(fd);
      return Fail(HCOMM_ERR_UNAVAILABLE, "hello to rank " + std::to_string(peer) + " failed");
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    Add(peer, fd);
    return HCOMM_SUCCESS;
  }

  bool ReadHello(int fd, int* who) {
    const int64_t deadline = NowMs() + std::min<int64_t>(TimeLeftMs(), 5000);
    uint32_t n = 0;
    if (!ReadAll(fd, &n, 4, deadline) || n > 128) return false;
    std::string hello(n, '\0');
    if (!ReadAll(fd, &hello[0], n, deadline)) return false;
    const std::string want = std::string(host().job_key) + " ";
    if (hello.compare(0, want.size(), want) != 0) return false;
    char* end = nullptr;
    const long r = strtol(hello.c_str() + want.size(), &end, 10);
    if (end == hello.c_str() + want.size() || *end != '\0' || r < 0 || r >= world_size()) {
      return false;
    }
    *who = static_cast<int>(r);
    return true;
  }

  // Writes what the socket takes from the head of c's queue; finished
  // frames' callbacks go to *finished, to run once no lock is held.
  void WriteQueued(Conn* c, std::vector<Finished>* finished) {
    while (!c->dead && !c->queue.empty()) {
      Frame& f = *c->queue.front();
      iovec iov[2];
      int n = 0;
      if (f.sent < f.prefix.size()) {
        iov[n++] = {&f.prefix[f.sent], f.prefix.size() - f.sent};
        if (f.len > 0) iov[n++] = {const_cast<char*>(f.payload), f.len};
      } else {
        const size_t off = f.sent - f.prefix.size();
        iov[n++] = {const_cast<char*>(f.payload) + off, f.len - off};
      }
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = n;
      const ssize_t w = ::sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return;
        MarkDeadLocked(c, Errno("uds: send"));
        break;
      }
      f.sent += static_cast<size_t>(w);
      if (f.sent < f.prefix.size() + f.len) continue;
      if (f.done != nullptr) finished->push_back({f.done, f.done_arg, HCOMM_SUCCESS, ""});
      c->queue.pop_front();
      pending_.fetch_sub(1);
    }
    if (c->dead) {
      for (auto& f : c->queue) {
        if (f->done != nullptr) {
          finished->push_back({f->done, f->done_arg, HCOMM_ERR_PEER_FAILURE, c->why});
        }
        pending_.fetch_sub(1);
      }
      c->queue.clear();
      return;
    }
    if (c->queue.empty() && c->close_write && !c->write_closed) {
      ::shutdown(c->fd, SHUT_WR);
      c->write_closed = true;
    }
  }

  // Reads and delivers what the socket holds; returns the frames handled.
  // Where the connection ended, it is marked dead once the read lock is
  // let go (dead callbacks run with no lock held).
  int Read(Conn* c) {
    std::string ended;
    const int frames = ReadLocked(c, &ended);
    if (!ended.empty()) MarkDead(c, ended);
    return frames;
  }
  int ReadLocked(Conn* c, std::string* ended) {
    std::unique_lock<std::mutex> l(c->recv_mu, std::try_to_lock);
    if (!l.owns_lock()) return 0;  // another thread reads it
    const size_t prefix_bytes = 8 + header_bytes();
    int frames = 0;
    for (;;) {
      if (!c->in_payload) {
        char buf[256];
        const size_t need = prefix_bytes - c->prefix.size();
        const ssize_t r = ::recv(c->fd, buf, std::min(need, sizeof buf), MSG_DONTWAIT);
        if (r == 0) {
          *ended = "uds: the peer closed the connection";
          return frames;
        }
        if (r < 0) {
          if (errno == EINTR) continue;
          if (errno != EAGAIN) *ended = Errno("uds: recv");
          return frames;
        }
        c->prefix.append(buf, static_cast<size_t>(r));
        if (c->prefix.size() < prefix_bytes) continue;
        memcpy(&c->want, c->prefix.data(), 8);
        c->got = 0;
        c->dst = static_cast<char*>(OnFrame(c->peer, c->prefix.data() + 8, c->want));
        c->in_payload = true;
      }
      while (c->got < c->want) {
        char* into;
        size_t room;
        if (c->dst != nullptr) {
          into = c->dst + c->got;
          room = c->want - c->got;
        } else {  // dropped by the library: read and throw away
          c->discard.resize(64 * 1024);
          into = c->discard.data();
          room = std::min<uint64_t>(c->want - c->got, c->discard.size());
        }
        const ssize_t r = ::recv(c->fd, into, room, MSG_DONTWAIT);
        if (r == 0) {
          *ended = "uds: the peer closed the connection in the middle of a frame";
          return frames;
        }
        if (r < 0) {
          if (errno == EINTR) continue;
          if (errno != EAGAIN) *ended = Errno("uds: recv");
          return frames;
        }
        c->got += static_cast<uint64_t>(r);
      }
      OnPayload(c->peer, c->prefix.data() + 8, c->want);
      c->prefix.clear();
      c->in_payload = false;
      ++frames;
    }
  }

  void MarkDead(Conn* c, const std::string& why) {
    std::vector<Finished> finished;
    {
      std::lock_guard<std::mutex> l(c->send_mu);
      MarkDeadLocked(c, why);
      WriteQueued(c, &finished);  // fails what is queued
    }
    Run(finished);
  }
  void MarkDeadLocked(Conn* c, const std::string& why) {
    if (c->dead) return;
    c->dead = true;
    c->why = why;
  }

  // Reports a dead connection once (after what wholly arrived is read).
  int ReportIfDead(Conn* c) {
    std::string why;
    {
      std::lock_guard<std::mutex> l(c->send_mu);
      if (!c->dead) return 0;
      why = c->why;
    }
    if (c->reported.exchange(true)) return 0;
    OnConnectionLost(c->peer, why.c_str());
    return 1;
  }

  static void Run(const std::vector<Finished>& finished) {
    for (const Finished& f : finished) {
      f.done(f.arg, f.status, f.status == HCOMM_SUCCESS ? nullptr : f.why.c_str());
    }
  }

  int listener_ = -1;
  std::string path_;                  // our socket's name, until everyone dialed
  std::map<int, std::string> paths_;  // the peers', from their cards
  std::mutex conns_mu_;               // the map; each Conn locks its own state
  std::map<int, std::unique_ptr<Conn>> conns_;
  std::atomic<uint64_t> next_handle_{1};
  std::atomic<size_t> pending_{0};
};

}  // namespace

HCOMM_REGISTER_PROTOCOL("uds", UdsProtocol)
