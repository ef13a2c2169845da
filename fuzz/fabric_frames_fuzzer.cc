// libFuzzer target: the point-to-point protocol's frame handling
// (core/p2p/engine.cc: Engine::OnFrame / OnPayload behind the TCP transport),
// against a peer that completed the handshake and then sends anything.
//
// Per input: rank 0 is a real Engine (world of 2, TCP only, its own store);
// the harness plays rank 1 through the real bootstrap (store, handshake,
// hello) and then interleaves, as the input says:
//   - receives and sends that rank 0 posts to rank 1 (eager and rendezvous
//     sizes, any tag, ANY_SOURCE), and
//   - frames that "rank 1" writes on its connection: a wire header with any
//     kind, context, tag, ids and declared length, then some payload (as
//     much as declared, or less, or more), or raw bytes.
// Finally the harness closes its connection, as a dying peer would.
//
// Checked: no memory error (ASan/UBSan); every request rank 0 posted ends
// within a few seconds of the connection closing (DESIGN.md: a broken
// connection fails pending operations within seconds, never a hang), with
// a status the API documents for it; Destroy() returns promptly.
//
// Input: a sequence of commands, one byte each plus arguments taken from
// the following bytes (see the switch below). Expensive (a whole job
// bootstrap per input): a few hundred executions per second at best.
//
// Build and run: tools/fuzz.sh fabric_frames SECONDS.
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/base/config.h"
#include "core/p2p/engine.h"
#include "core/bootstrap/handshake.h"
#include "core/base/net.h"
#include "core/p2p/request.h"
#include "core/base/status.h"
#include "core/bootstrap/store.pb.h"
#include "core/bootstrap/store_client.h"
#include "core/p2p/protocol.h"
#include "transports/transport.h"

namespace {

constexpr uint32_t kWireMagic = 0x464d4348;  // transports/tcp/tcp_transport.cc
constexpr absl::Duration kSetup = absl::Seconds(20);
constexpr absl::Duration kEnd = absl::Seconds(8);  // "within seconds"
constexpr size_t kMaxBuf = 160 * 1024;             // above Engine::kEagerBytes

void Check(bool ok, const char* what, absl::string_view detail = "") {
  if (ok) return;
  fprintf(stderr, "fabric_frames_fuzzer: invariant violated: %s [%.*s]\n", what,
          static_cast<int>(detail.size()), detail.data());
  abort();
}

using hcomm::Meta;  // the engine's frame header (core/p2p/protocol.h)

class Input {
 public:
  Input(const uint8_t* d, size_t n) : p_(d), end_(d + n) {}
  bool empty() const { return p_ >= end_; }
  uint8_t U8() { return empty() ? 0 : *p_++; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  uint32_t U32() { return U16() | (static_cast<uint32_t>(U16()) << 16); }
  uint64_t U64() { return U32() | (static_cast<uint64_t>(U32()) << 32); }
  absl::string_view Bytes(size_t n) {
    n = std::min<size_t>(n, static_cast<size_t>(end_ - p_));
    absl::string_view s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

int FreePort() {
  int port = 0;
  auto l = hcomm::net::Listen("127.0.0.1", 0, &port);
  Check(l.ok(), "listen for a free port");
  return port;
}

bool WriteAll(int fd, absl::string_view bytes) {
  return hcomm::net::WriteFull(fd, bytes.data(), bytes.size(),
                               hcomm::MonoNow() + absl::Seconds(5))
      .ok();
}

// The harness's rank 1: a connection to rank 0 that has passed the
// bootstrap. Reads (and drops) whatever rank 0 sends, on its own thread.
struct FakePeer {
  std::unique_ptr<hcomm::StoreClient> store;
  hcomm::net::Fd fd;
  std::thread drain;
  std::atomic<bool> eof{false};

  ~FakePeer() {
    if (fd.valid()) ::shutdown(fd.get(), SHUT_RDWR);
    if (drain.joinable()) drain.join();
  }

  void StartDraining() {
    drain = std::thread([this] {
      char buf[64 * 1024];
      for (;;) {
        struct pollfd p = {fd.get(), POLLIN, 0};
        int r = ::poll(&p, 1, 100);
        if (r < 0 && errno != EINTR) break;
        if (r <= 0) continue;
        ssize_t n = ::recv(fd.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) break;
      }
      eof = true;
    });
  }
};

// Joins rank 0's job as rank 1, the way Engine::Bootstrap (core/p2p/
// setup.cc) and the tcp transport's setup (transports/tcp/tcp_protocol.cc)
// do: a claim, a card with a tcp card, and a dial of the lower rank.
void Join(FakePeer* peer, int store_port) {
  const hcomm::MonoTime deadline = hcomm::MonoNow() + kSetup;
  auto store =
      hcomm::StoreClient::Connect(hcomm::net::HostPort{"127.0.0.1", store_port}, "", deadline);
  Check(store.ok(), "store connect", store.status().ToString());
  peer->store = std::move(*store);
  auto job = peer->store->Get("hcomm/job_id", deadline);
  Check(job.ok(), "job id", job.status().ToString());
  // "<id> <world size> <key> <check 0|1>"
  std::vector<std::string> job_parts = absl::StrSplit(*job, ' ');
  Check(job_parts.size() == 4 && job_parts[1] == "2", "job id parse", *job);
  Check(peer->store->Add("hcomm/claim/1", 1, deadline).ok(), "claim rank 1");
  hcomm::store::RankCard mine;
  mine.set_host("fuzz-peer-host");
  mine.set_pid(getpid());
  mine.set_cpus("-");
  hcomm::store::TransportCard* tcp = mine.add_transports();
  tcp->set_name("tcp");
  tcp->set_card("127.0.0.1:1");  // never dialed: rank 0 is the lower rank
  Check(peer->store->Set("hcomm/card/1", mine.SerializeAsString(), deadline).ok(),
        "publish rank 1");
  Check(peer->store->Wait({"hcomm/card/0", "hcomm/card/1"}, deadline).ok(), "wait for ranks");
  auto card0 = peer->store->Get("hcomm/card/0", deadline);
  hcomm::store::RankCard theirs;
  Check(card0.ok() && theirs.ParseFromString(*card0), "rank 0's card");
  std::string addr;
  for (const auto& t : theirs.transports()) {
    if (t.name() == "tcp") addr = t.card();
  }
  auto hp = hcomm::net::ParseHostPort(addr);
  Check(hp.ok(), "rank 0's tcp address parse", addr);
  auto fd = hcomm::net::ConnectWithRetry(*hp, deadline);
  Check(fd.ok(), "connect to rank 0", fd.status().ToString());
  Check(hcomm::HandshakeAsClient(fd->get(), "", deadline).ok(), "handshake with rank 0");
  Check(hcomm::net::WriteFrame(fd->get(), absl::StrCat(job_parts[2], " 1 2"), deadline).ok(),
        "hello to rank 0");
  peer->fd = std::move(*fd);
}

bool Allowed(hcomm::ErrorCode c) {
  using hcomm::ErrorCode;
  return c == ErrorCode::kOk || c == ErrorCode::kPeerFailure || c == ErrorCode::kMismatch ||
         c == ErrorCode::kAborted;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  const int port = FreePort();
  hcomm::Options opts;
  opts.rank = 0;
  opts.world_size = 2;
  opts.store_addr = absl::StrCat("127.0.0.1:", port);
  opts.timeout_ms = absl::ToInt64Milliseconds(kSetup);
  opts.transports = {"tcp"};
  opts.host_id = "fuzz-rank0-host";

  absl::StatusOr<std::unique_ptr<hcomm::Engine>> fabric = hcomm::InvalidArgument("not started");
  std::thread init([&] { fabric = hcomm::Engine::Init(opts); });
  FakePeer peer;
  Join(&peer, port);
  init.join();
  Check(fabric.ok(), "rank 0 init", fabric.status().ToString());
  hcomm::Engine& f = **fabric;
  peer.StartDraining();

  std::vector<std::unique_ptr<char[]>> buffers;
  std::vector<std::shared_ptr<hcomm::Request>> reqs;
  for (int step = 0; step < 64 && !in.empty(); ++step) {
    switch (in.U8() % 6) {
      case 0: {  // rank 0 posts a receive
        size_t cap = in.U32() % kMaxBuf;
        int tag = in.U8() % 4;
        int from = (in.U8() & 1) ? hcomm::kAnySource : 1;
        buffers.emplace_back(new char[cap + 1]);
        auto r = f.Irecv(0, buffers.back().get(), cap, 1, from, tag);
        if (r.ok()) reqs.push_back(*r);
        break;
      }
      case 1: {  // rank 0 sends to rank 1
        size_t n = in.U32() % kMaxBuf;
        int tag = in.U8() % 4;
        buffers.emplace_back(new char[n + 1]());
        auto r = f.Isend(0, buffers.back().get(), n, 1, 1, tag);
        if (r.ok()) reqs.push_back(*r);
        break;
      }
      case 2:    // a frame from rank 1: header from the input, honest length
      case 3: {  // ... or a declared length from the input
        const bool honest = in.U8() < 128;
        Meta m;
        memset(&m, 0, sizeof m);
        m.kind = in.U8() % 12;
        m.flags = in.U8();
        m.comm_id = in.U8() % 3;
        m.tag = static_cast<int8_t>(in.U8());
        m.src = 1;
        m.size = in.U8() < 200 ? in.U32() % kMaxBuf : in.U64();
        m.id = in.U8() % 16;  // rank 0's request ids are small
        m.id2 = in.U8() % 16;
        absl::string_view payload = in.Bytes(in.U16() % 4096);
        uint64_t declared = payload.size();
        std::string body(payload);
        if (!honest) {
          declared = in.U8() < 128 ? in.U32() : in.U64();
        } else if (m.kind == 1 && (in.U8() & 1)) {
          // An eager message of the size the header announces.
          declared = m.size % (2 * hcomm::Engine::kEagerBytes);
          body.resize(declared, 'x');
        }
        // The TCP transport's header of a whole frame (piece 0, the piece's
        // length equal to the frame's: transports/tcp/tcp_transport.cc).
        char hdr[24 + sizeof m];
        const uint32_t magic = kWireMagic, whole = 0;
        memcpy(hdr, &magic, 4);
        memcpy(hdr + 4, &whole, 4);
        memcpy(hdr + 8, &declared, 8);
        memcpy(hdr + 16, &declared, 8);
        memcpy(hdr + 24, &m, sizeof m);
        WriteAll(peer.fd.get(), absl::string_view(hdr, sizeof hdr));
        WriteAll(peer.fd.get(), body);
        break;
      }
      case 4:  // raw bytes from rank 1
        WriteAll(peer.fd.get(), in.Bytes(in.U8()));
        break;
      case 5:  // let rank 0 make progress
        for (auto& r : reqs) f.Test(r.get());
        break;
    }
  }

  // Rank 1 goes away: every request that involves it must end within
  // seconds. A receive from ANY_SOURCE may legitimately stay pending when
  // rank 1 said goodbye first (rank 0 itself could still send to it);
  // Destroy must then end it.
  ::shutdown(peer.fd.get(), SHUT_RDWR);
  const hcomm::MonoTime deadline = hcomm::MonoNow() + kEnd;
  for (auto& r : reqs) {
    if (r->kind == hcomm::Request::Kind::kRecv && r->peer == hcomm::kAnySource) continue;
    absl::Status s = f.Wait(r.get(), deadline);
    Check(r->done.load(), "a request still pending seconds after its peer's connection closed",
          s.ToString());
    Check(Allowed(hcomm::CodeOf(s)), "unexpected status", s.ToString());
  }
  const hcomm::MonoTime start = hcomm::MonoNow();
  f.Destroy().IgnoreError();
  Check(hcomm::MonoNow() - start < kEnd, "Destroy took too long");
  for (auto& r : reqs) {
    Check(r->done.load(), "a request still pending after Destroy");
    Check(Allowed(hcomm::CodeOf(r->status)), "unexpected status", r->status.ToString());
  }
  fabric->reset();
  return 0;
}
