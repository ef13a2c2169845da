// libFuzzer target: the TCP transport's inbound frame parser
// (transports/tcp/tcp_transport.cc: ReadAvailable, Consume, BeginPayload
// and EndPayload).
//
// Input: 4 bytes that seed the write chunking (and may ask for filled
// pieces, see below), then the byte stream a peer sends on an established
// (already authenticated) connection: wire headers (magic "HCMF", 32-bit
// piece, 64-bit payload length, 64-bit piece length, 40-byte FrameMeta)
// and payloads, or junk. Piece 0: a whole frame, its two lengths equal.
// Any other piece: one piece of a frame of more than kPieceBytes that moves
// in pieces (payload length: the whole frame's; piece length: the bytes
// after this header), in order, perhaps with other frames (whole, or pieces
// of other ids) between them. Per input the harness opens a fresh loopback
// TCP connection, hands the accepted end to a fresh TcpTransport (self 0,
// peer 1) with a recording FrameSink, writes the stream in chunks (polling
// the transport between chunks, so headers and payloads are split at every
// kind of boundary), closes, and polls until the transport reports the
// connection lost.
//
// An independent parse of the stream comes first: the frames it finds and
// the sink calls the wire asks for, in order. The sink follows those calls
// one by one as they come (several frames in pieces may be open at once,
// so an OnPayload is matched to its frame by the parse, not by the last
// OnFrame). It takes payloads of up to 1 MiB, each open frame's into its
// own buffer of exactly that size (ASan catches any write past it), unless
// the frame's first meta byte is odd, and has the transport discard the
// rest. Checked:
// - every frame gets one OnFrame, with the meta and the whole payload
//   length of its first header, and, once its last byte is in, one
//   OnPayload after it with the same meta and length; the calls of whole
//   frames and of frames in pieces interleave as the wire says;
// - a taken payload arrives byte for byte, each piece in its place;
// - after the first malformed header (bad magic, more than kPieceBytes
//   after one header, a whole frame whose lengths differ, a first piece of a bad size, a piece of 0 bytes or past
//   its frame's end, a new frame in pieces while kMostPartial are open)
//   nothing more is delivered, and the connection ends saying "malformed"
//   (and only then);
// - OnConnectionLost runs exactly once, as a PeerFailure.
//
// A frame in pieces is larger than kPieceBytes (256 KiB), the inputs at
// most 64 KiB (tools/fuzz.sh). So that such frames complete, the seed's bit
// 30 asks for filled pieces: the input then holds the pieces' headers
// without their payloads, and the harness makes those up (bytes that
// depend on their place in the stream, so a piece put at the wrong offset
// shows), up to kMostFilled in all; whole frames and junk stay as they are.
//
// Build and run: tools/fuzz.sh tcp_frames SECONDS.
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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
#include "core/base/clock.h"
#include "core/base/net.h"
#include "core/base/status.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/transport.h"

namespace {

constexpr uint32_t kMagic = 0x464d4348;  // "HCMF", as in tcp_transport.cc
constexpr size_t kHeaderBytes = 24 + hcomm::kFrameMetaBytes;
constexpr uint64_t kPieceBytes = hcomm::TcpTransport::kPieceBytes;
constexpr size_t kMostPartial = 64;  // as in tcp_transport.cc
constexpr uint64_t kMaxTaken = 1 << 20;
constexpr size_t kMostFilled = 3 << 19;  // made-up payload bytes per input

void Check(bool ok, const char* what) {
  if (ok) return;
  fprintf(stderr, "tcp_frames_fuzzer: invariant violated: %s\n", what);
  abort();
}

bool Taken(absl::string_view meta, uint64_t len) {
  return len > 0 && len <= kMaxTaken && (static_cast<uint8_t>(meta[0]) & 1) == 0;
}

struct Event {
  std::string meta;
  uint64_t len = 0;
  bool completed = false;
  bool taken = false;
  std::string payload;  // when taken and completed
};

// One sink call the wire asks for: OnFrame (or OnPayload) of frames[frame].
struct Step {
  bool payload;
  size_t frame;
};

// What the stream should deliver.
struct Wire {
  std::vector<Event> frames;  // in the order of their first headers
  std::vector<Step> steps;
  bool malformed = false;  // the parse stopped at a malformed header
};

class RecordingSink : public hcomm::FrameSink {
 public:
  explicit RecordingSink(const Wire* want) : want_(want) {}

  void* OnFrame(int peer, const hcomm::FrameMeta& meta, uint64_t len) override {
    Check(peer == 1, "OnFrame for the wrong peer");
    Check(!lost_, "OnFrame after OnConnectionLost");
    const Step& step = Next();
    Check(!step.payload, "OnFrame where the wire ends a frame (OnPayload due)");
    Check(step.frame == frames_.size(), "OnFrame out of the wire's order");
    const Event& want = want_->frames[step.frame];
    Frame f;
    f.e.meta.assign(reinterpret_cast<const char*>(meta.bytes), sizeof meta.bytes);
    f.e.len = len;
    f.e.taken = Taken(f.e.meta, len);
    Check(f.e.meta == want.meta, "OnFrame meta differs from the frame's first header");
    Check(len == want.len, "OnFrame length differs from the frame's first header");
    if (f.e.taken) f.buf.reset(new char[len]);  // exactly len: ASan flags any write past it
    frames_.push_back(std::move(f));
    return frames_.back().buf.get();
  }

  void OnPayload(int peer, const hcomm::FrameMeta& meta, uint64_t len) override {
    Check(peer == 1, "OnPayload for the wrong peer");
    Check(!lost_, "OnPayload after OnConnectionLost");
    const Step& step = Next();
    Check(step.payload, "OnPayload where the wire begins a frame (OnFrame due)");
    // The wire's OnFrame for this frame came before (steps are in order).
    Frame& f = frames_[step.frame];
    Check(!f.e.completed, "OnPayload twice for one frame");
    Check(f.e.len == len, "OnPayload length differs from OnFrame's");
    Check(memcmp(f.e.meta.data(), meta.bytes, sizeof meta.bytes) == 0,
          "OnPayload meta differs from OnFrame's");
    f.e.completed = true;
    if (f.e.taken) f.e.payload.assign(f.buf.get(), len);
    f.buf.reset();
  }

  void OnConnectionLost(int peer, const absl::Status& status) override {
    Check(peer == 1, "OnConnectionLost for the wrong peer");
    Check(!lost_, "OnConnectionLost twice");
    Check(hcomm::CodeOf(status) == hcomm::ErrorCode::kPeerFailure,
          "connection lost with a code other than PEER_FAILURE");
    lost_ = true;
    why_ = std::string(status.message());
  }

  bool lost() const { return lost_; }
  const std::string& why() const { return why_; }
  size_t steps() const { return next_; }
  size_t frames() const { return frames_.size(); }
  const Event& frame(size_t i) const { return frames_[i].e; }

 private:
  struct Frame {
    Event e;
    std::unique_ptr<char[]> buf;  // while open, when taken
  };

  const Step& Next() {
    Check(next_ < want_->steps.size(),
          "a frame delivered that the wire does not have (after a malformed header, or "
          "past the end of the stream)");
    return want_->steps[next_++];
  }

  const Wire* want_;
  size_t next_ = 0;
  std::vector<Frame> frames_;
  bool lost_ = false;
  std::string why_;
};

uint64_t Le(absl::string_view s, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[i])) << (8 * i);
  return v;
}

// An independent parse of `s`: the frames of its complete headers, in
// order, and the sink calls they make, up to the first malformed header.
Wire Expected(absl::string_view s) {
  Wire w;
  struct Open {
    uint32_t piece;
    size_t frame;
    uint64_t got;
  };
  std::vector<Open> open;  // frames in pieces begun and not ended
  auto begin = [&w](absl::string_view meta, uint64_t len) {
    Event e;
    e.meta = std::string(meta);
    e.len = len;
    e.taken = Taken(e.meta, len);
    w.frames.push_back(std::move(e));
    w.steps.push_back({false, w.frames.size() - 1});
    return w.frames.size() - 1;
  };
  while (s.size() >= kHeaderBytes) {
    const uint32_t piece = static_cast<uint32_t>(Le(s.substr(4), 4));
    const uint64_t payload_len = Le(s.substr(8), 8);
    const uint64_t piece_len = Le(s.substr(16), 8);
    const absl::string_view meta = s.substr(24, hcomm::kFrameMetaBytes);
    // More than a piece after one header (a whole frame over kPieceBytes
    // included): no sender writes it.
    if (Le(s, 4) != kMagic || piece_len > kPieceBytes) {
      w.malformed = true;
      break;
    }
    size_t k = 0;  // the frame this header's payload belongs to
    size_t o = 0;  // its index in `open`, for a piece
    if (piece == 0) {
      if (piece_len != payload_len) {
        w.malformed = true;
        break;
      }
      k = begin(meta, payload_len);
    } else {
      while (o < open.size() && open[o].piece != piece) ++o;
      if (o == open.size()) {  // its first piece
        if (open.size() >= kMostPartial || piece_len == 0 || piece_len > kPieceBytes ||
            payload_len <= kPieceBytes) {
          w.malformed = true;
          break;
        }
        open.push_back({piece, begin(meta, payload_len), 0});
      }
      k = open[o].frame;
      if (piece_len == 0 || piece_len > w.frames[k].len - open[o].got) {
        w.malformed = true;
        break;
      }
    }
    s.remove_prefix(kHeaderBytes);
    if (s.size() < piece_len) break;  // the stream ends inside this payload
    Event& e = w.frames[k];
    if (e.taken) e.payload.append(s.data(), piece_len);
    s.remove_prefix(piece_len);
    if (piece != 0) {
      open[o].got += piece_len;
      if (open[o].got < e.len) continue;
      open.erase(open.begin() + o);  // ended: its id may come again
    }
    e.completed = true;
    w.steps.push_back({true, k});
  }
  for (Event& e : w.frames) {
    if (!e.completed) e.payload.clear();
  }
  return w;
}

// The stream for `in` with filled pieces (see the top): every piece's
// header is followed by made-up bytes, as many as it says while fewer than
// kMostFilled have been made. Up to the first header with a bad magic,
// which goes out as it is with everything after it.
std::string Filled(absl::string_view in) {
  std::string out;
  size_t made = 0;
  while (in.size() >= kHeaderBytes && Le(in, 4) == kMagic) {
    const uint32_t piece = static_cast<uint32_t>(Le(in.substr(4), 4));
    const uint64_t piece_len = Le(in.substr(16), 8);
    out.append(in.data(), kHeaderBytes);
    in.remove_prefix(kHeaderBytes);
    if (piece == 0) {  // a whole frame: its payload from the input
      const size_t n = static_cast<size_t>(std::min<uint64_t>(piece_len, in.size()));
      out.append(in.data(), n);
      in.remove_prefix(n);
      continue;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(piece_len, kMostFilled - made));
    for (size_t i = 0; i < n; ++i) {
      const uint32_t at = static_cast<uint32_t>(out.size());
      out.push_back(static_cast<char>((at * 2654435761u) >> 24));
    }
    made += n;
    if (made == kMostFilled) return out;  // the stream ends in this piece
  }
  out.append(in.data(), in.size());
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
  absl::string_view input(reinterpret_cast<const char*>(data + 4), size - 4);
  const std::string filled = (seed & 0x40000000u) ? Filled(input) : std::string();
  const absl::string_view stream = (seed & 0x40000000u) ? absl::string_view(filled) : input;

  int port = 0;
  int lfd = Listener(&port);
  const hcomm::MonoTime deadline = hcomm::MonoNow() + absl::Seconds(5);
  auto client = hcomm::net::Connect(hcomm::net::HostPort{"127.0.0.1", port}, deadline);
  Check(client.ok(), "connect to the loopback listener");
  auto accepted = hcomm::net::Accept(lfd, deadline);
  Check(accepted.ok(), "accept on the loopback listener");

  const Wire want = Expected(stream);
  RecordingSink sink(&want);
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
        break;  // the transport gave up on the connection (a malformed header)
      }
      while (transport.Poll(absl::ZeroDuration()) > 0) {
      }
      Check(hcomm::MonoNow() < deadline, "writing the stream took too long");
    }
    ::shutdown(client->get(), SHUT_WR);
    while (!sink.lost()) {
      transport.Poll(absl::Milliseconds(10));
      Check(hcomm::MonoNow() < deadline, "the transport never reported the closed connection");
    }
  }

  Check(sink.steps() == want.steps.size(), "fewer OnFrame/OnPayload calls than the wire asks for");
  Check(sink.frames() == want.frames.size(), "number of frames differs from the wire");
  for (size_t i = 0; i < want.frames.size(); ++i) {
    const Event& got = sink.frame(i);
    Check(got.meta == want.frames[i].meta, "meta differs from the wire");
    Check(got.len == want.frames[i].len, "length differs from the wire");
    Check(got.completed == want.frames[i].completed, "completion differs from the wire");
    Check(got.payload == want.frames[i].payload, "payload differs from the wire");
  }
  Check((sink.why().find("malformed") != std::string::npos) == want.malformed,
        "the connection's end says \"malformed\" other than at a malformed header");
  return 0;
}
