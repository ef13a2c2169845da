// The point-to-point protocol's frames: what the engine writes into the
// opaque header (FrameMeta) of every frame a transport carries.
//
//   FrameMeta f = Pack(MakeMeta(kEager, ctx, rank, tag, bytes, send_id, fingerprint));
//   Meta m = Unpack(f);   // m.kind == kEager
//
// Messages up to the eager limit travel whole (EAGER). Larger ones send a
// request-to-send (RTS); the receiver answers with a clear-to-send (CTS)
// once a receive matches, or a REJECT if it is too small; only then does
// the payload (DATA) move. The rest end or withdraw what is in flight.
//
// Send and receive ids are this engine's own, not the job's: a CTS or
// REJECT for send id X counts only on the connection of the rank that send
// targets and in its context, a DATA or DATA_ABORT for receive id Y only
// from the rank whose RTS that receive matched and in its context. Any
// other is a protocol violation by the rank that sent it (docs/
// reliability.md, "Control frames and their sender").
#ifndef HCOMM_CORE_P2P_PROTOCOL_H_
#define HCOMM_CORE_P2P_PROTOCOL_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/p2p/request.h"
#include "transports/transport.h"

namespace hcomm {

// Frame kinds of the point-to-point protocol.
enum FrameKind : uint8_t {
  kEager = 1,      // header + payload
  kRts = 2,        // request-to-send: id = send id, size = bytes
  kCts = 3,        // clear-to-send: id = send id, id2 = receive id
  kReject = 4,     // receiver's buffer too small: id = send id
  kData = 5,       // payload of a rendezvous: id = receive id
  kCancelRts = 6,  // sender withdrew an RTS: id = send id
  kDataAbort = 7,  // sender cannot honour a CTS: id = receive id
  kGoodbye = 8,    // the sender is destroying its communicator
  kNotice = 9,     // a collective clash: id = culprit fp, id2 = reporter fp,
                   // size = culprit rank; fails (ctx, tag) everywhere
  kAbandon = 11,   // the sender aborted the communicator whose contexts are
                   // comm_id (point-to-point) and id (collectives)
  kCredit = 12,    // flow control: size = bytes of eager messages the sender
                   // of this frame has taken (core/p2p/flow.h)
};

struct Meta {
  uint8_t kind;
  uint8_t flags;
  uint16_t reserved;
  uint32_t comm_id;
  int32_t tag;
  int32_t src;
  uint64_t size;
  uint64_t id;
  uint64_t id2;
};
static_assert(sizeof(Meta) == kFrameMetaBytes, "Meta must fill FrameMeta exactly");

inline FrameMeta Pack(const Meta& m) {
  FrameMeta f;
  memcpy(f.bytes, &m, sizeof m);
  return f;
}

inline Meta Unpack(const FrameMeta& f) {
  Meta m;
  memcpy(&m, f.bytes, sizeof m);
  return m;
}

inline Meta MakeMeta(FrameKind kind, uint32_t ctx, int src, int tag, uint64_t size, uint64_t id,
              uint64_t id2 = 0) {
  Meta m;
  memset(&m, 0, sizeof m);
  m.kind = kind;
  m.comm_id = ctx;
  m.tag = tag;
  m.src = src;
  m.size = size;
  m.id = id;
  m.id2 = id2;
  return m;
}

// A frame kind's name in messages ("CTS", "DATA_ABORT").
inline const char* FrameKindName(uint8_t kind) {
  switch (kind) {
    case kEager: return "EAGER";
    case kRts: return "RTS";
    case kCts: return "CTS";
    case kReject: return "REJECT";
    case kData: return "DATA";
    case kCancelRts: return "CANCEL_RTS";
    case kDataAbort: return "DATA_ABORT";
    case kGoodbye: return "GOODBYE";
    case kNotice: return "NOTICE";
    case kAbandon: return "ABANDON";
    case kCredit: return "CREDIT";
    default: return "unknown frame";
  }
}

inline std::string PeerName(int peer) {
  return peer == kAnySource ? std::string("any rank") : absl::StrCat("rank ", peer);
}

inline std::string TagName(int tag) {
  return tag == kAnyTag ? std::string("any tag") : absl::StrCat("tag ", tag);
}

}  // namespace hcomm

#endif  // HCOMM_CORE_P2P_PROTOCOL_H_
