#include "core/bootstrap/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/base/clock.h"
#include "core/base/net.h"
#include "core/base/status.h"
#include "core/bootstrap/store.pb.h"

namespace hcomm {
namespace {

constexpr char kMagic[] = "HCOMM";
constexpr uint32_t kVersion = 1;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;  // SHA-256
// Every handshake message is far below this; the limit is checked before
// anything is allocated.
constexpr size_t kMaxHandshakeFrame = 1024;
constexpr char kClientLabel[] = "hcomm-v1-client";
constexpr char kServerLabel[] = "hcomm-v1-server";

absl::StatusOr<std::string> RandomNonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) !=
      1) {
    return Internal("handshake: RAND_bytes could not produce a nonce");
  }
  return nonce;
}

// HMAC-SHA256(token, label | first | second). The nonces have a fixed
// length, so the concatenation is unambiguous.
absl::StatusOr<std::string> Mac(absl::string_view token, absl::string_view label,
                                absl::string_view first, absl::string_view second) {
  const std::string msg = absl::StrCat(label, first, second);
  // OpenSSL treats a NULL key as "reuse the previous key"; an empty token
  // must be an empty key, so always pass a valid pointer.
  static const unsigned char kEmptyKey[1] = {0};
  const void* key = token.empty() ? static_cast<const void*>(kEmptyKey)
                                  : static_cast<const void*>(token.data());
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  if (HMAC(EVP_sha256(), key, static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out,
           &out_len) == nullptr ||
      out_len != kMacBytes) {
    return Internal("handshake: HMAC-SHA256 failed");
  }
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

bool MacEquals(absl::string_view got, absl::string_view want) {
  return got.size() == want.size() && CRYPTO_memcmp(got.data(), want.data(), want.size()) == 0;
}

absl::Status Send(int fd, const google::protobuf::MessageLite& msg, MonoTime deadline,
                  absl::string_view what) {
  std::string bytes;
  if (!msg.SerializeToString(&bytes)) {
    return Internal(absl::StrCat("handshake: cannot serialise the ", what));
  }
  return Annotate(net::WriteFrame(fd, bytes, deadline), absl::StrCat("handshake: sending the ", what));
}

}  // namespace

absl::Status HandshakeAsClient(int fd, absl::string_view token, MonoTime deadline) {
  // 1. Hello.
  absl::StatusOr<std::string> frame = net::ReadFrame(fd, kMaxHandshakeFrame, deadline);
  if (!frame.ok()) {
    if (CodeOf(frame.status()) == ErrorCode::kInvalidArgument) {
      return PeerFailure(absl::StrCat(
          "handshake: the other side is not an hcomm endpoint (", frame.status().message(), ")"));
    }
    return Annotate(frame.status(), "handshake: waiting for the other side's hello");
  }
  store::Hello hello;
  if (!hello.ParseFromString(*frame) || hello.magic() != kMagic) {
    return PeerFailure("handshake: the other side is not an hcomm endpoint (bad hello)");
  }
  if (hello.version() != kVersion) {
    return PeerFailure(absl::StrCat("handshake: the other side speaks handshake version ",
                                    hello.version(), ", we speak ", kVersion));
  }
  if (hello.server_nonce().size() != kNonceBytes) {
    return PeerFailure(absl::StrCat("handshake: the other side sent a nonce of ",
                                    hello.server_nonce().size(), " bytes, expected ",
                                    kNonceBytes));
  }

  // 2. Proof.
  HCOMM_ASSIGN_OR_RETURN(std::string client_nonce, RandomNonce());
  store::Proof proof;
  HCOMM_ASSIGN_OR_RETURN(std::string mac,
                         Mac(token, kClientLabel, hello.server_nonce(), client_nonce));
  proof.set_client_nonce(client_nonce);
  proof.set_mac(mac);
  HCOMM_RETURN_IF_ERROR(Send(fd, proof, deadline, "proof"));

  // 3. Verdict.
  frame = net::ReadFrame(fd, kMaxHandshakeFrame, deadline);
  if (!frame.ok()) {
    if (CodeOf(frame.status()) == ErrorCode::kInvalidArgument) {
      return PeerFailure(absl::StrCat("handshake: bad verdict frame (", frame.status().message(),
                                      ")"));
    }
    return Annotate(frame.status(), "handshake: waiting for the other side's verdict");
  }
  store::Verdict verdict;
  if (!verdict.ParseFromString(*frame)) {
    return PeerFailure("handshake: the other side sent an unparsable verdict");
  }
  if (!verdict.accepted()) {
    return PermissionDenied(
        "handshake: the other side refused our job token (the tokens differ, or only one side "
        "has one)");
  }
  HCOMM_ASSIGN_OR_RETURN(std::string want,
                         Mac(token, kServerLabel, client_nonce, hello.server_nonce()));
  if (!MacEquals(verdict.mac(), want)) {
    return PermissionDenied(
        "handshake: the other side accepted us but could not prove it knows the job token");
  }
  return absl::OkStatus();
}

absl::Status HandshakeAsServer(int fd, absl::string_view token, MonoTime deadline) {
  // 1. Hello.
  HCOMM_ASSIGN_OR_RETURN(std::string server_nonce, RandomNonce());
  store::Hello hello;
  hello.set_magic(kMagic);
  hello.set_version(kVersion);
  hello.set_server_nonce(server_nonce);
  HCOMM_RETURN_IF_ERROR(Send(fd, hello, deadline, "hello"));

  // 2. Proof. ReadFrame refuses a long frame before allocating it.
  absl::StatusOr<std::string> frame = net::ReadFrame(fd, kMaxHandshakeFrame, deadline);
  if (!frame.ok()) return Annotate(frame.status(), "handshake: waiting for the client's proof");
  store::Proof proof;
  if (!proof.ParseFromString(*frame)) {
    return InvalidArgument(absl::StrCat("handshake: the client sent an unparsable proof (",
                                        frame->size(), " bytes)"));
  }
  if (proof.client_nonce().size() != kNonceBytes || proof.mac().size() != kMacBytes) {
    return InvalidArgument(absl::StrCat("handshake: malformed proof (nonce of ",
                                        proof.client_nonce().size(), " bytes, mac of ",
                                        proof.mac().size(), " bytes; expected ", kNonceBytes,
                                        " and ", kMacBytes, ")"));
  }
  HCOMM_ASSIGN_OR_RETURN(std::string want,
                         Mac(token, kClientLabel, server_nonce, proof.client_nonce()));

  // 3. Verdict.
  store::Verdict verdict;
  if (!MacEquals(proof.mac(), want)) {
    verdict.set_accepted(false);
    // Best effort: the client learns why we hang up; our answer stays the same.
    Send(fd, verdict, deadline, "verdict").IgnoreError();
    return PermissionDenied(
        "handshake: the client did not prove the job token (the tokens differ, or only one side "
        "has one)");
  }
  HCOMM_ASSIGN_OR_RETURN(std::string mac,
                         Mac(token, kServerLabel, proof.client_nonce(), server_nonce));
  verdict.set_accepted(true);
  verdict.set_mac(mac);
  return Send(fd, verdict, deadline, "verdict");
}

}  // namespace hcomm
