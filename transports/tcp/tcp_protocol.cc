#include "transports/tcp/tcp_protocol.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/base/clock.h"
#include "core/base/interrupt.h"
#include "core/base/net.h"
#include "core/base/status.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/transport_protocol.h"

namespace hcomm {

namespace {

// How long an accept or a dial waits before asking whether init may go on
// (host->check: another rank's init may have failed).
constexpr absl::Duration kLook = absl::Milliseconds(200);
// How long an accepting rank gives a connection to prove it belongs to the
// job (token handshake and hello), how soon it looks again while some are
// being vetted, and how many it vets at once (more are dropped).
constexpr absl::Duration kVetTime = absl::Seconds(5);
constexpr absl::Duration kVetLook = absl::Milliseconds(5);
constexpr int kMaxVetting = 64;

class TcpProtocol final : public TransportProtocol<TcpTransport> {
 public:
  using TransportProtocol::TransportProtocol;

  hcomm_status_t Publish(std::string* card) override {
    const std::string ip = *host().address != '\0' ? host().address : "127.0.0.1";
    int port = 0;
    auto listener = net::Listen(ip, 0, &port);
    if (!listener.ok()) {
      return Fail(HCOMM_ERR_NO_DEVICE, absl::StrCat("cannot listen on ", ip, ": ",
                                                    listener.status().message()));
    }
    listener_ = std::move(listener).value();
    *card = net::HostPort{ip, port}.ToString();
    // The table carries no timeout_ms; the init's deadline is timeout_ms
    // from its start, so what is left of it now is the nearest bound this
    // transport can see (never above timeout_ms).
    timeout_ = absl::Milliseconds(TimeLeftMs());
    return HCOMM_SUCCESS;
  }

  bool CanReach(int peer, const char* peer_host, const char* peer_card) override {
    auto hp = net::ParseHostPort(peer_card, "peer address");
    if (!hp.ok()) return false;
    addresses_[peer] = *hp;
    return listener_.valid();
  }

  hcomm_status_t Connect(const std::vector<int>& peers) override;

 private:
  // Accepts the peers above this rank until all of them came (OK), init
  // may not go on, or the listener was shut. Sockets go to fds_.
  absl::Status AcceptHigher(const std::set<int>& higher);
  absl::StatusOr<net::Fd> Dial(int peer);
  // OK while init may go on; else a status of the host's code (its reason
  // is set already: Connect then returns stopped_ as it is).
  absl::Status Check() {
    const hcomm_status_t s = host().check(host().ctx);
    if (s == HCOMM_SUCCESS) return absl::OkStatus();
    stopped_.store(s);
    return MakeError(static_cast<ErrorCode>(s), "init may not go on");
  }
  std::string Hello() const {
    return absl::StrCat(host().job_key, " ", rank(), " ", world_size());
  }

  net::Fd listener_;
  absl::Duration timeout_ = absl::InfiniteDuration();  // for TcpLinkOptions
  std::map<int, net::HostPort> addresses_;  // from the peers' cards
  std::atomic<hcomm_status_t> stopped_{HCOMM_SUCCESS};
  absl::Mutex mu_;
  std::map<int, net::Fd> fds_ ABSL_GUARDED_BY(mu_);
};

absl::Status TcpProtocol::AcceptHigher(const std::set<int>& higher) {
  // Each connection is vetted (token handshake, then hello) on a thread of
  // its own, given kVetTime at most: a stranger that connects and stays
  // silent, or many of them, holds up no rank's connection but its own.
  struct Vetting {
    absl::Mutex mu;
    int fd ABSL_GUARDED_BY(mu) = -1;  // -1 once the vetting thread is done with it
    std::thread thread;
  };
  std::vector<std::unique_ptr<Vetting>> vetting;
  std::atomic<int> busy{0};
  auto all_here = [&] {
    absl::MutexLock l(&mu_);
    for (int r : higher) {
      if (fds_.count(r) == 0) return false;
    }
    return true;
  };
  absl::Status result;
  while (!all_here()) {
    const MonoTime deadline = Deadline();
    // While connections are being vetted, look back soon: one may be the last.
    const MonoTime slice =
        std::min(deadline, MonoNow() + (busy.load() > 0 ? kVetLook : kLook));
    auto c = net::Accept(listener_.get(), slice);
    if (!c.ok()) {
      if (CodeOf(c.status()) == ErrorCode::kTimeout && slice < deadline) {
        if (absl::Status go_on = Check(); !go_on.ok()) {
          result = go_on;
          break;
        }
        continue;
      }
      result = c.status();
      break;
    }
    if (busy.load() >= kMaxVetting) continue;  // a flood of strangers: dropped
    auto v = std::make_unique<Vetting>();
    {
      absl::MutexLock l(&v->mu);
      v->fd = c->get();
    }
    busy.fetch_add(1);
    Vetting* vp = v.get();
    v->thread = std::thread([this, vp, &higher, &busy, fd = std::move(*c)]() mutable {
      const MonoTime until = std::min(Deadline(), MonoNow() + kVetTime);
      int r = -1;
      bool ok = Authenticate(fd.get(), /*as_server=*/true) == HCOMM_SUCCESS;
      if (ok) {
        auto hello = net::ReadFrame(fd.get(), 128, until);
        std::vector<std::string> f;
        if (hello.ok()) f = absl::StrSplit(*hello, ' ');
        int n = 0;
        ok = hello.ok() && f.size() == 3 && f[0] == host().job_key &&
             absl::SimpleAtoi(f[1], &r) && absl::SimpleAtoi(f[2], &n) && n == world_size() &&
             higher.count(r) > 0;
      }
      {
        absl::MutexLock l(&vp->mu);
        vp->fd = -1;  // AcceptHigher no longer shuts it down
      }
      if (ok) {
        absl::MutexLock l(&mu_);
        if (fds_.count(r) == 0) fds_[r] = std::move(fd);
      }
      busy.fetch_sub(1);
    });
    vetting.push_back(std::move(v));
  }
  // Strangers still being vetted are cut short; every thread is joined.
  for (auto& v : vetting) {
    {
      absl::MutexLock l(&v->mu);
      if (v->fd >= 0) ::shutdown(v->fd, SHUT_RDWR);
    }
    v->thread.join();
  }
  if (result.ok() || all_here()) return absl::OkStatus();
  return result;
}

absl::StatusOr<net::Fd> TcpProtocol::Dial(int peer) {
  auto at = addresses_.find(peer);
  if (at == addresses_.end()) {
    return InvalidArgument(absl::StrCat("no address of rank ", peer));
  }
  absl::StatusOr<net::Fd> fd;
  for (;;) {
    const MonoTime deadline = Deadline();
    const MonoTime slice = std::min(deadline, MonoNow() + kLook);
    fd = net::ConnectWithRetry(at->second, slice);
    if (fd.ok() || slice >= deadline) break;
    if (absl::Status go_on = Check(); !go_on.ok()) return go_on;
  }
  if (!fd.ok()) {
    return Annotate(fd.status(),
                    absl::StrCat("connecting to rank ", peer, " at ", at->second.ToString()));
  }
  if (hcomm_status_t s = Authenticate(fd->get(), /*as_server=*/false); s != HCOMM_SUCCESS) {
    return MakeError(static_cast<ErrorCode>(s), absl::StrCat("handshake with rank ", peer));
  }
  HCOMM_RETURN_IF_ERROR(
      Annotate(net::WriteFrame(fd->get(), Hello(), Deadline()), absl::StrCat("hello to rank ", peer)));
  return fd;
}

hcomm_status_t TcpProtocol::Connect(const std::vector<int>& peers) {
  std::set<int> higher;
  for (int p : peers) {
    if (p > rank()) higher.insert(p);
  }
  absl::Status accepted;
  std::thread acceptor([&] { accepted = AcceptHigher(higher); });
  absl::Status dialed;
  for (int p : peers) {
    if (p > rank()) break;
    auto fd = Dial(p);
    if (!fd.ok()) {
      dialed = fd.status();
      break;
    }
    absl::MutexLock l(&mu_);
    fds_[p] = std::move(*fd);
  }
  if (!dialed.ok()) ::shutdown(listener_.get(), SHUT_RDWR);  // ends the acceptor's wait at once
  acceptor.join();
  if (stopped_.load() != HCOMM_SUCCESS) return stopped_.load();
  if (!dialed.ok()) {
    // A rank whose own init failed drops its connections a moment before
    // it says why in the store: a reset met here is most often that. Give
    // it that moment, and report its reason rather than the reset.
    const MonoTime grace = std::min(Deadline(), MonoNow() + absl::Seconds(1));
    for (;;) {
      if (!Check().ok()) return stopped_.load();
      if (MonoNow() >= grace || Interrupted()) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return Fail(dialed);
  }
  if (!accepted.ok()) {
    std::vector<int> missing;
    {
      absl::MutexLock l(&mu_);
      for (int r : higher) {
        if (fds_.count(r) == 0) missing.push_back(r);
      }
    }
    return Fail(HCOMM_ERR_UNAVAILABLE, absl::StrCat("ranks ", absl::StrJoin(missing, ", "),
                                                    " did not connect: ", accepted.message()));
  }
  listener_ = net::Fd();
  transport_ = std::make_unique<TcpTransport>(rank(), world_size(), sink(), timeout_);
  absl::MutexLock l(&mu_);
  for (auto& [p, fd] : fds_) {
    absl::Status added = transport_->AddConnection(p, std::move(fd));
    if (!added.ok()) return Fail(added);
  }
  fds_.clear();
  return HCOMM_SUCCESS;
}

constexpr hcomm_transport_v1_t kTcpTable = ProtocolTable<TcpProtocol>("tcp");

}  // namespace

const hcomm_transport_v1_t* TcpTransportTable() { return &kTcpTable; }

}  // namespace hcomm
