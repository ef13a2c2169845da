// libFuzzer target: the TCP transport's inbound frame parser
// (transports/tcp/tcp_transport.cc: ReadAvailable and Consume).
//
// Input: 4 bytes that seed the write chunking, then the byte stream a peer
// sends on an established (already authenticated) connection: wire headers
// (magic "HCMF", reserved, 64-bit payload length, 40-byte FrameMeta) and
// payloads, or junk. Per input the harness opens a fresh loopback TCP
// connection, hands the accepted end to a fresh TcpTransport (self 0,
// peer 1) with a recording FrameSink, writes the stream in chunks (polling
// the transport between chunks, so headers and payloads are split at every
// kind of boundary), closes, and polls until the transport reports the
// connection lost.
//
// The sink takes payloads of up to 1 MiB into a buffer of exactly that size
// (ASan catches any write past it) unless the frame's first meta byte is
// odd, and has the transport discard the rest. Checked against an
// independent parse of the same stream:
// - OnFrame/OnPayload alternate as the transport contract says, with the
//   meta and the length from the wire, for every complete header;
// - a taken payload arrives byte for byte;
// - after the first bad magic nothing more is delivered;
// - OnConnectionLost runs exactly once, as a PeerFailure.
//
// Build and run: tools/fuzz.sh tcp_frames SECONDS.
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/net.h"
#include "core/base/status.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/transport.h"

namespace {

constexpr uint32_t kMagic = 0x464d4348;  // "HCMF", as in tcp_transport.cc
constexpr size_t kHeaderBytes = 16 + hcomm::kFrameMetaBytes;
constexpr uint64_t kMaxTaken = 1 << 20;

void Check(bool ok, const char* what) {
  if (ok) return;
  fprintf(stderr, "tcp_frames_fuzzer: invariant violated: %s\n", what);
  abort();
}

struct Event {
  std::string meta;
  uint64_t len = 0;
  bool completed = false;
  bool taken = false;
  std::string payload;  // when taken and completed
};

class RecordingSink : public hcomm::FrameSink {
 public:
  void* OnFrame(int peer, const hcomm::FrameMeta& meta, uint64_t len) override {
    Check(peer == 1, "OnFrame for the wrong peer");
    Check(!lost_, "OnFrame after OnConnectionLost");
    Check(events_.empty() || events_.back().completed, "OnFrame before the last OnPayload");
    Event e;
    e.meta.assign(reinterpret_cast<const char*>(meta.bytes), sizeof meta.bytes);
    e.len = len;
    e.taken = len > 0 && len <= kMaxTaken && (meta.bytes[0] & 1) == 0;
    events_.push_back(std::move(e));
    buf_.reset();
    if (!events_.back().taken) return nullptr;
    buf_.reset(new char[len]);  // exactly len: ASan flags any write past it
    return buf_.get();
  }

  void OnPayload(int peer, const hcomm::FrameMeta& meta, uint64_t len) override {
    Check(peer == 1, "OnPayload for the wrong peer");
    Check(!lost_, "OnPayload after OnConnectionLost");
    Check(!events_.empty() && !events_.back().completed, "OnPayload without OnFrame");
    Event& e = events_.back();
    Check(e.len == len, "OnPayload length differs from OnFrame's");
    Check(memcmp(e.meta.data(), meta.bytes, sizeof meta.bytes) == 0,
          "OnPayload meta differs from OnFrame's");
    e.completed = true;
    if (e.taken) e.payload.assign(buf_.get(), len);
  }

  void OnConnectionLost(int peer, const absl::Status& status) override {
    Check(peer == 1, "OnConnectionLost for the wrong peer");
    Check(!lost_, "OnConnectionLost twice");
    Check(hcomm::CodeOf(status) == hcomm::ErrorCode::kPeerFailure,
          "connection lost with a code other than PEER_FAILURE");
    lost_ = true;
  }

  bool lost() const { return lost_; }
  const std::vector<Event>& events() const { return events_; }

 private:
  std::vector<Event> events_;
  std::unique_ptr<char[]> buf_;
  bool lost_ = false;
};

uint64_t Le(absl::string_view s, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[i])) << (8 * i);
  return v;
}

// The frames an independent parse of `s` finds: complete headers with good
// magic, in order, up to the first bad magic.
std::vector<Event> Expected(absl::string_view s) {
  std::vector<Event> out;
  while (s.size() >= kHeaderBytes) {
    if (Le(s, 4) != kMagic) break;
    Event e;
    e.len = Le(s.substr(8), 8);
    e.meta = std::string(s.substr(16, hcomm::kFrameMetaBytes));
    e.taken = e.len > 0 && e.len <= kMaxTaken && (static_cast<uint8_t>(e.meta[0]) & 1) == 0;
    s.remove_prefix(kHeaderBytes);
    if (s.size() >= e.len) {
      e.completed = true;
      if (e.taken) e.payload = std::string(s.substr(0, e.len));
      s.remove_prefix(e.len);
    } else {
      s = absl::string_view();
    }
    out.push_back(std::move(e));
    if (!out.back().completed) break;
  }
  return out;
}

int Listener(int* port) {
  static int fd = -1;
  static int bound = 0;
  if (fd < 0) {
    auto l = hcomm::net::Listen("127.0.0.1", 0, &bound);
    Check(l.ok(), "listen on 127.0.0.1");
    fd = l->release();
  }
  *port = bound;
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t seed =
      static_cast<uint32_t>(Le(absl::string_view(reinterpret_cast<const char*>(data), 4), 4));
  absl::string_view stream(reinterpret_cast<const char*>(data + 4), size - 4);

  int port = 0;
  int lfd = Listener(&port);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  auto client = hcomm::net::Connect(hcomm::net::HostPort{"127.0.0.1", port}, deadline);
  Check(client.ok(), "connect to the loopback listener");
  auto accepted = hcomm::net::Accept(lfd, deadline);
  Check(accepted.ok(), "accept on the loopback listener");

  RecordingSink sink;
  {
    hcomm::TcpTransport transport(/*self=*/0, /*world_size=*/2, &sink);
    Check(transport.AddConnection(1, std::move(*accepted)).ok(), "AddConnection");

    // Chunk sizes from a small LCG: 1..64 bytes, or up to 4 KiB when the
    // seed's top bit is set.
    const size_t max_chunk = (seed & 0x80000000u) ? 4096 : 64;
    absl::string_view rest = stream;
    while (!rest.empty() && !sink.lost()) {
      seed = seed * 1664525u + 1013904223u;
      size_t chunk = std::min<size_t>(rest.size(), 1 + (seed >> 8) % max_chunk);
      ssize_t w = ::send(client->get(), rest.data(), chunk, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        rest.remove_prefix(static_cast<size_t>(w));
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        break;  // the transport gave up on the connection (bad magic)
      }
      while (transport.Poll(absl::ZeroDuration()) > 0) {
      }
      Check(absl::Now() < deadline, "writing the stream took too long");
    }
    ::shutdown(client->get(), SHUT_WR);
    while (!sink.lost()) {
      transport.Poll(absl::Milliseconds(10));
      Check(absl::Now() < deadline, "the transport never reported the closed connection");
    }
  }

  const std::vector<Event> want = Expected(stream);
  const std::vector<Event>& got = sink.events();
  Check(got.size() == want.size(), "number of frames differs from the wire");
  for (size_t i = 0; i < got.size(); ++i) {
    Check(got[i].meta == want[i].meta, "meta differs from the wire");
    Check(got[i].len == want[i].len, "length differs from the wire");
    Check(got[i].completed == want[i].completed, "completion differs from the wire");
    Check(got[i].payload == want[i].payload, "payload differs from the wire");
  }
  return 0;
}
