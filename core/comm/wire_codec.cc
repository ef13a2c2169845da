#include "core/comm/wire_codec.h"

#include "absl/strings/str_cat.h"
#include "core/base/status.h"
#include "core/comm/delta_state.h"

namespace hcomm {

bool HalfOf(Options::Half h, HalfFormat* f) {
  switch (h) {
    case Options::Half::kFp16:
      *f = HalfFormat::kFp16;
      return true;
    case Options::Half::kBf16:
      *f = HalfFormat::kBf16;
      return true;
    case Options::Half::kNone:
      break;
  }
  return false;
}

std::unique_ptr<uint16_t[]> EncodeForWire(HalfFormat f, const void* buf, size_t bytes) {
  if (bytes == 0 || bytes % 4 != 0) return nullptr;
  const size_t n = bytes / 4;
  std::unique_ptr<uint16_t[]> wire(new uint16_t[n]);
  if (!EncodeHalf(f, static_cast<const float*>(buf), n, wire.get())) return nullptr;
  return wire;
}

absl::Status DecodeCoded(uint64_t fingerprint, void* buf, size_t capacity, size_t got, int source,
                         int tag, size_t* out_bytes) {
  const WireCoding c = CodingOf(fingerprint);
  if (c == WireCoding::kPlain) return absl::OkStatus();
  const uint64_t bytes = CodedBytes(fingerprint);
  const auto from = [&] { return absl::StrCat("from rank ", source, " tag ", tag); };
  *out_bytes = 0;
  if (c != WireCoding::kFp16 && c != WireCoding::kBf16) {
    return Mismatch(absl::StrCat("a message ", from(), " came coded as ", static_cast<int>(c),
                                 ", a coding this build of hcomm does not know"));
  }
  if (bytes > capacity) {
    return Mismatch(absl::StrCat("message of ", bytes, " bytes ", from(),
                                 " exceeds the receive buffer of ", capacity,
                                 " bytes (it travelled compressed, as ",
                                 c == WireCoding::kFp16 ? "fp16" : "bf16", ")"));
  }
  if (bytes % 4 != 0 || got != bytes / 2) {
    return Mismatch(absl::StrCat("a compressed message ", from(), " has ", got,
                                 " bytes where its ", bytes, " bytes of float32 take ", bytes / 2));
  }
  DecodeHalfInPlace(c == WireCoding::kFp16 ? HalfFormat::kFp16 : HalfFormat::kBf16, buf,
                    bytes / 4);
  *out_bytes = bytes;
  return absl::OkStatus();
}

absl::Status DecodeReceived(Request& r) {
  const WireCoding c = CodingOf(r.out_fingerprint);
  if (c == WireCoding::kPlain) return absl::OkStatus();
  if (IsDelta(c)) {
    auto* delta = static_cast<DeltaState*>(r.keep.get());
    if (delta == nullptr) {
      return Internal("a delta-coded message came to a receive with no delta state");
    }
    size_t got = r.out_bytes;
    return delta->Receive(r.out_source, r.out_tag, r.out_fingerprint, r.recv_buf, r.bytes, got,
                          &r.out_bytes);
  }
  return DecodeCoded(r.out_fingerprint, r.recv_buf, r.bytes, r.out_bytes, r.out_source, r.out_tag,
                     &r.out_bytes);
}

absl::Status FinishP2p(Request& r) {
  absl::Status s = r.kind == Request::Kind::kRecv ? DecodeReceived(r) : absl::OkStatus();
  r.keep.reset();
  return s;
}

}  // namespace hcomm
