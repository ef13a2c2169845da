// Job-token handshake: the first exchange on every hcomm bootstrap connection
// (the rendezvous store, and peer-to-peer connections between ranks).
//
// Both sides prove to each other that they know the job's shared secret
// without sending it: a mutual HMAC-SHA256 challenge-response over random
// nonces. An empty token means "open": the same protocol runs with an empty
// key, so a side with a token and a side without one refuse each other.
//
//   // accepting side                      // connecting side
//   HCOMM_ASSIGN_OR_RETURN(net::Fd fd,     HCOMM_ASSIGN_OR_RETURN(net::Fd fd,
//       net::Accept(lfd, deadline));           net::Connect(hp, deadline));
//   HCOMM_RETURN_IF_ERROR(                 HCOMM_RETURN_IF_ERROR(
//       HandshakeAsServer(fd.get(),            HandshakeAsClient(fd.get(),
//                         token, dl));                           token, dl));
//
// Protocol (version 1); each message is one net::WriteFrame of a protobuf
// from core/bootstrap/store.proto, and no handshake frame may exceed 1 KiB:
//   server -> client  Hello{magic "HCOMM", version 1, server_nonce (32 B)}
//   client -> server  Proof{client_nonce (32 B),
//                           mac = HMAC(token, "hcomm-v1-client" | server_nonce | client_nonce)}
//   server -> client  Verdict{accepted, mac = HMAC(token, "hcomm-v1-server" |
//                                                  client_nonce | server_nonce)}
// MACs are compared in constant time. Distinct labels stop a reflected proof.
//
// THREAD SAFETY: both functions are thread-safe; each uses only its own fd,
// which nobody else may read or write during the handshake.
#ifndef HCOMM_CORE_BOOTSTRAP_HANDSHAKE_H_
#define HCOMM_CORE_BOOTSTRAP_HANDSHAKE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/base/clock.h"

namespace hcomm {

// Runs the connecting side on a connected, non-blocking socket `fd` (not
// owned; the caller closes it). Blocks until done or `deadline`.
// Errors: PermissionDenied("... refused our job token") when the other side
// rejects our proof; PermissionDenied when the other side cannot prove the
// token; Timeout at the deadline; PeerFailure when the connection breaks or
// the other side does not speak this protocol.
absl::Status HandshakeAsClient(int fd, absl::string_view token, MonoTime deadline);

// Runs the accepting side on a connected, non-blocking socket `fd` (not
// owned; the caller closes it afterwards on any error). Blocks until done or
// `deadline`. Never allocates more than a few KiB for what the client sends.
// Errors: PermissionDenied for a wrong or missing token (after telling the
// client so); InvalidArgument for junk, oversized or unparsable frames;
// Timeout at the deadline; PeerFailure when the connection breaks.
absl::Status HandshakeAsServer(int fd, absl::string_view token, MonoTime deadline);

}  // namespace hcomm

#endif  // HCOMM_CORE_BOOTSTRAP_HANDSHAKE_H_
