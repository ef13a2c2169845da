// libFuzzer target: the job-token handshake (core/bootstrap/handshake.h) against
// arbitrary bytes from the other side of a socketpair.
//
// The first input byte picks the mode (its low two bits):
//   0  server vs raw bytes: the rest of the input is everything the "client"
//      ever sends; HandshakeAsServer must refuse it (nobody can forge a MAC
//      over the server's fresh random nonce).
//   1  server vs a mutated honest client: the harness reads the server's
//      Hello, builds the correct Proof for the token, then mutates the frame
//      as the input says. The server must accept exactly when the frame it
//      got still carries a valid proof (computed here independently: length
//      limit, protobuf parse, nonce and MAC sizes, HMAC-SHA256).
//   2  client vs raw bytes: the rest of the input is everything the "server"
//      ever sends; HandshakeAsClient must refuse it.
// Every call must end promptly (the peer's side is closed, so no wait may
// reach its deadline) with one of the documented codes.
//
// Build and run: tools/fuzz.sh handshake SECONDS.
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/clock.h"
#include "core/bootstrap/handshake.h"
#include "core/base/net.h"
#include "core/base/status.h"
#include "core/bootstrap/store.pb.h"

namespace {

constexpr size_t kMaxFrame = 1024;  // handshake.cc's kMaxHandshakeFrame
constexpr absl::Duration kDeadline = absl::Seconds(5);
constexpr absl::Duration kPrompt = absl::Seconds(2);

void Check(bool ok, const char* what, absl::string_view detail = "") {
  if (ok) return;
  fprintf(stderr, "handshake_fuzzer: invariant violated: %s [%.*s]\n", what,
          static_cast<int>(detail.size()), detail.data());
  abort();
}

std::string Hmac(absl::string_view token, absl::string_view label, absl::string_view a,
                 absl::string_view b) {
  std::string msg = absl::StrCat(label, a, b);
  static const unsigned char kEmpty[1] = {0};
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), token.empty() ? kEmpty : reinterpret_cast<const unsigned char*>(token.data()),
       static_cast<int>(token.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), out, &n);
  return std::string(reinterpret_cast<char*>(out), n);
}

std::string Frame(absl::string_view payload) {
  uint32_t n = static_cast<uint32_t>(payload.size());
  char hdr[4] = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                 static_cast<char>(n >> 24)};
  return absl::StrCat(absl::string_view(hdr, 4), payload);
}

// Writes everything (the socket is non-blocking; the reader runs elsewhere
// or the bytes fit in the socket buffer). False if the other side is gone.
bool WriteAll(int fd, absl::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t w = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (w > 0) {
      bytes.remove_prefix(static_cast<size_t>(w));
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p = {fd, POLLOUT, 0};
      if (::poll(&p, 1, 2000) <= 0) return false;
      continue;
    }
    return false;
  }
  return true;
}

void CheckCode(const absl::Status& s, const char* side) {
  hcomm::ErrorCode c = hcomm::CodeOf(s);
  Check(c == hcomm::ErrorCode::kInvalidArgument || c == hcomm::ErrorCode::kPermissionDenied ||
            c == hcomm::ErrorCode::kPeerFailure,
        side, s.ToString());
  Check(!s.message().empty(), "error without a message", side);
}

struct Pair {
  int fd[2] = {-1, -1};  // [0]: the side under test, [1]: the harness
  Pair() {
    Check(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fd) == 0,
          "socketpair");
  }
  ~Pair() {
    ::close(fd[0]);
    ::close(fd[1]);
  }
};

void RawServer(absl::string_view token, absl::string_view bytes) {
  Pair p;
  WriteAll(p.fd[1], bytes.substr(0, 64 * 1024));
  ::shutdown(p.fd[1], SHUT_WR);
  const hcomm::MonoTime start = hcomm::MonoNow();
  absl::Status s = hcomm::HandshakeAsServer(p.fd[0], token, start + kDeadline);
  Check(!s.ok(), "server accepted raw bytes");
  CheckCode(s, "server vs raw bytes");
  Check(hcomm::MonoNow() - start < kPrompt, "server took too long", s.ToString());
}

void RawClient(absl::string_view token, absl::string_view bytes) {
  Pair p;
  WriteAll(p.fd[1], bytes.substr(0, 64 * 1024));
  ::shutdown(p.fd[1], SHUT_WR);
  const hcomm::MonoTime start = hcomm::MonoNow();
  absl::Status s = hcomm::HandshakeAsClient(p.fd[0], token, start + kDeadline);
  Check(!s.ok(), "client accepted raw bytes");
  CheckCode(s, "client vs raw bytes");
  Check(hcomm::MonoNow() - start < kPrompt, "client took too long", s.ToString());
}

// Mode 1. Input after the mode byte: token length (1 byte), token, then
// mutation commands of 3 bytes each: op, position, value.
void MutatedClient(absl::string_view in) {
  size_t tlen = in.empty() ? 0 : static_cast<uint8_t>(in[0]) % 33;
  in.remove_prefix(in.empty() ? 0 : 1);
  tlen = std::min(tlen, in.size());
  const std::string token(in.substr(0, tlen));
  in.remove_prefix(tlen);

  Pair p;
  absl::Status server_status;
  std::thread server(
      [&] {
        server_status = hcomm::HandshakeAsServer(p.fd[0], token, hcomm::MonoNow() + kDeadline);
      });

  // Read the Hello the way an honest client does.
  absl::StatusOr<std::string> hello_frame =
      hcomm::net::ReadFrame(p.fd[1], kMaxFrame, hcomm::MonoNow() + kDeadline);
  Check(hello_frame.ok(), "no hello from the server", hello_frame.status().ToString());
  hcomm::store::Hello hello;
  Check(hello.ParseFromString(*hello_frame) && hello.server_nonce().size() == 32, "bad hello");

  const std::string client_nonce(32, 'c');
  hcomm::store::Proof proof;
  proof.set_client_nonce(client_nonce);
  proof.set_mac(Hmac(token, "hcomm-v1-client", hello.server_nonce(), client_nonce));
  std::string wire = Frame(proof.SerializeAsString());

  // Apply the mutations to the whole frame (length prefix included).
  for (size_t i = 0; i + 3 <= in.size() && i < 3 * 16; i += 3) {
    uint8_t op = static_cast<uint8_t>(in[i]) % 4;
    size_t pos = wire.empty() ? 0 : static_cast<uint8_t>(in[i + 1]) % (wire.size() + 1);
    char val = in[i + 2];
    switch (op) {
      case 0:  // overwrite
        if (pos < wire.size()) wire[pos] = val;
        break;
      case 1:  // insert
        wire.insert(pos, 1, val);
        break;
      case 2:  // erase
        if (pos < wire.size()) wire.erase(pos, 1);
        break;
      case 3:  // truncate
        wire.resize(pos);
        break;
    }
  }
  WriteAll(p.fd[1], wire);
  ::shutdown(p.fd[1], SHUT_WR);
  // The verdict (under 100 bytes) fits in the socket buffer: no need to read
  // it for the server to finish.
  server.join();

  // What the server should have concluded from the first frame on the wire.
  bool valid = false;
  if (wire.size() >= 4) {
    uint32_t n = static_cast<uint8_t>(wire[0]) | (static_cast<uint8_t>(wire[1]) << 8) |
                 (static_cast<uint8_t>(wire[2]) << 16) |
                 (static_cast<uint32_t>(static_cast<uint8_t>(wire[3])) << 24);
    if (n <= kMaxFrame && wire.size() - 4 >= n) {
      hcomm::store::Proof got;
      if (got.ParseFromString(wire.substr(4, n)) && got.client_nonce().size() == 32 &&
          got.mac().size() == 32) {
        valid =
            got.mac() == Hmac(token, "hcomm-v1-client", hello.server_nonce(), got.client_nonce());
      }
    }
  }
  if (valid) {
    Check(server_status.ok(), "server refused a valid proof", server_status.ToString());
  } else {
    Check(!server_status.ok(), "server accepted an invalid proof");
    CheckCode(server_status, "server vs mutated proof");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] & 3;
  absl::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (mode) {
    case 0:
      RawServer("", rest);
      RawServer("secret", rest);
      break;
    case 1:
      MutatedClient(rest);
      break;
    default:
      RawClient("", rest);
      break;
  }
  return 0;
}
