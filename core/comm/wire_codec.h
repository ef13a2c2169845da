// Compression on the wire (API.md "Compression"): where a communicator
// frames bytes for the wire, FLOAT32 data may travel as 16-bit floats
// (algorithms/kernels/half.h). This file holds the framing rules that
// sender and receiver share; core/comm/collective_peers.h applies them to a
// collective's pieces and communicator.cc to point-to-point payloads.
//
// Collectives' pieces: a receiver knows each piece's size, so a piece that
// arrives with half its bytes is the 16-bit form and is decoded in place; a
// piece whose values do not fit the format (EncodeHalf refuses it) travels
// as float32.
//
// Point-to-point: a receiver cannot know the sender's size, so a coded
// message says how it is coded in its fingerprint, which plain
// point-to-point messages leave at 0 (and collectives mark with bit 63):
//
//   bit 62        coded
//   bits 56..59   WireCoding
//   bits 48..55   delta codings: the message's generation on its key
//   bits 0..47    the message's size as the sender gave it, in bytes
//
// Every receive (blocking, or a request's finish step) decodes what it got
// (DecodeReceived), whatever its own communicator's setting: the sender
// alone decides.
//
// When it pays: a link over shared memory moves float32 faster than the
// conversion would, so nothing to or from a peer reached over shm is
// compressed (Communicator::CompressesTo), nor a collective that runs in
// the shared segment; a point-to-point message below kMinCodedP2pBytes is
// not worth the conversion's fixed cost.
#ifndef HCOMM_CORE_COMM_WIRE_CODEC_H_
#define HCOMM_CORE_COMM_WIRE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "algorithms/kernels/half.h"
#include "core/base/config.h"
#include "core/p2p/request.h"

namespace hcomm {

enum class WireCoding : uint8_t {
  kPlain = 0,
  kFp16 = 1,  // float32 as IEEE binary16
  kBf16 = 2,  // float32 as bfloat16
  // `delta` (core/comm/delta_state.h): the message as it is, kept as the
  // next base; or a frame against the previous one.
  kDeltaFull = 3,
  kDeltaFrame = 4,
};

inline constexpr uint64_t kCodedMark = uint64_t{1} << 62;
inline constexpr uint64_t kCodedBytesMask = (uint64_t{1} << 48) - 1;
// Smaller point-to-point FLOAT32 messages travel as they are.
inline constexpr size_t kMinCodedP2pBytes = 1024;

inline uint64_t CodedFingerprint(WireCoding c, uint64_t bytes) {
  return kCodedMark | static_cast<uint64_t>(c) << 56 | (bytes & kCodedBytesMask);
}
inline uint64_t DeltaFingerprint(WireCoding c, uint8_t gen, uint64_t bytes) {
  return CodedFingerprint(c, bytes) | static_cast<uint64_t>(gen) << 48;
}
inline uint8_t GenerationOf(uint64_t fingerprint) {
  return static_cast<uint8_t>(fingerprint >> 48);
}
inline bool IsDelta(WireCoding c) {
  return c == WireCoding::kDeltaFull || c == WireCoding::kDeltaFrame;
}
inline WireCoding CodingOf(uint64_t fingerprint) {
  if ((fingerprint >> 62) != 1) return WireCoding::kPlain;  // plain, or a collective's
  return static_cast<WireCoding>((fingerprint >> 56) & 0xf);
}
inline uint64_t CodedBytes(uint64_t fingerprint) { return fingerprint & kCodedBytesMask; }

// The 16-bit format of a `compression` setting; false for none.
bool HalfOf(Options::Half h, HalfFormat* f);
inline WireCoding CodingOf(HalfFormat f) {
  return f == HalfFormat::kFp16 ? WireCoding::kFp16 : WireCoding::kBf16;
}

// The 16-bit form of `bytes` bytes of float32 at `buf`, or null where they
// travel as they are (a size that is not a whole number of floats, or a
// value the format cannot hold).
std::unique_ptr<uint16_t[]> EncodeForWire(HalfFormat f, const void* buf, size_t bytes);

// Makes a completed receive's buffer hold the message as its sender had it:
// decodes a coded payload in place and sets out_bytes to the sender's size.
// Mismatch if that size exceeds the receive buffer (nothing is written
// past it), the payload is not what its fingerprint says, or its coding is
// one this build does not know. OK and untouched for a plain message.
absl::Status DecodeReceived(Request& r);
// The same for a blocking receive's buffer of `capacity` bytes into which
// `got` bytes came from world rank `source` under `tag`: *out_bytes gets
// the sender's size (0 on error).
absl::Status DecodeCoded(uint64_t fingerprint, void* buf, size_t capacity, size_t got, int source,
                         int tag, size_t* out_bytes);

// Request::finish of point-to-point requests that may carry a coded
// payload: a receive decodes it (DecodeReceived); a send lets go of the
// encoded copy it kept (Request::keep).
// A receive's Request::keep holds its communicator's DeltaState
// (core/comm/delta_state.h) for a delta-coded payload.
absl::Status FinishP2p(Request& r);

}  // namespace hcomm

#endif  // HCOMM_CORE_COMM_WIRE_CODEC_H_
