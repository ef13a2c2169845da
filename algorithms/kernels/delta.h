// Lossless delta coding of a message against the previous message of the
// same size (the `delta` value of the `compression` key, shared/API.md
// "Compression"): the sender XORs the new message with the one it sent
// before, so that unchanged bytes become zeros, writes the zero runs as
// lengths, and compresses the result with zstd. The receiver, which kept the
// previous message, reverses the steps and checks the result against a
// checksum of the new message carried in the frame.
//
//   hcomm::DeltaCodec codec;                       // one per thread
//   std::vector<char> frame(hcomm::DeltaBound(n));
//   absl::StatusOr<size_t> len = codec.Encode(prev, msg, n, frame.data(), frame.size());
//   ...                                            // frame[0, *len) travels
//   absl::Status s = codec.Decode(cached, frame.data(), *len, cached, n);  // in place
//   // !s.ok(): `cached` is now garbage; ask for (or wait for) the whole message.
//
// Why the zero runs: zstd alone codes scattered changes poorly (each
// changed byte costs a literal and a match, and a match of zeros breaks
// wherever its source had a change too): 1% of the bytes of 16 MiB changed
// at random places took 3.2% of n at level 1 and still 2.7% at level 19,
// against 2.5% at level 1 with the runs (zstd 1.5.4). Clustered changes and wholly
// changed messages code as before.
//
// Frame (all integers little-endian):
//   offset  0  4 bytes  magic "HCDL"
//   offset  4  1 byte   version (1)
//   offset  5  3 bytes  zero (reserved)
//   offset  8  8 bytes  n, the message size in bytes
//   offset 16  8 bytes  XXH64 (seed 0) of the message
//   offset 24  one zstd frame (window at most 2^kDeltaWindowLog bytes),
//              ending exactly at the frame's end, whose content is, for each
//              64 KiB block of the message in order (the last one shorter),
//              records (zeros, literals, literal bytes): `zeros` bytes equal
//              to the base, then `literals` bytes given as message XOR base.
//              zeros and literals are LEB128 varints of at most 3 bytes
//              (values up to 65536); a record covers at least one byte, and
//              a block's records cover exactly that block.
//   Encode starts a record at every run of 3 or more unchanged bytes, so the
//   content is at most n + 8 bytes per block.
//
// Memory: no buffer of the message's size is ever allocated. Encoding works
// through two 64 KiB blocks (the XORed bytes, their records), decoding
// through one; a DeltaCodec owns them and its zstd contexts, made on first
// use and kept for later calls: about 1.5 MiB for decoding (the decoder
// refuses frames that ask for a window above 2^kDeltaWindowLog, so a hostile
// frame cannot make it allocate more) and, for encoding, what zstd needs at
// the chosen level with that window (measured with zstd 1.5.4: 1.8 MiB at
// level 1, 14 MiB at level 9).
//
// Frames come from the network: Decode reads only frame[0, frame_len) and
// writes only out[0, n), whatever the frame holds, and rejects (never
// crashes on) anything that is not a well-formed frame for n bytes whose
// result matches the sender's checksum: a damaged frame, or one made
// against another base, is refused as far as a 64-bit checksum can tell.
//
// THREAD SAFETY: a DeltaCodec is not thread-safe (one per thread, or guard
// it). The free functions use a codec of the calling thread's own, so they
// are thread-safe; it lives until the thread ends. Nothing blocks.
#ifndef HCOMM_ALGORITHMS_KERNELS_DELTA_H_
#define HCOMM_ALGORITHMS_KERNELS_DELTA_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace hcomm {

// Bytes in front of the zstd frame (see "Frame" above).
constexpr size_t kDeltaHeaderBytes = 24;
// The largest zstd window Encode uses and Decode accepts: 1 MiB.
constexpr int kDeltaWindowLog = 20;
// The compression levels Encode accepts: zstd's fast negative levels up to
// 9. Higher levels take tens of MiB of tables (82 MiB at 19) and compress
// at well under 0.1 GB/s, slower than the links they would save time on.
constexpr int kDeltaMinLevel = -7;
constexpr int kDeltaMaxLevel = 9;

// The largest frame Encode can produce for n bytes: out_cap >= DeltaBound(n)
// never fails for lack of room. 0 for an n too large to encode (above zstd's
// limit, ~2^64 - 2^56).
size_t DeltaBound(size_t n);

class DeltaCodec {
 public:
  DeltaCodec();
  ~DeltaCodec();
  DeltaCodec(const DeltaCodec&) = delete;
  DeltaCodec& operator=(const DeltaCodec&) = delete;

  // Writes the frame of `msg` against `base` (both n bytes) to out[0,
  // out_cap) and returns its length. msg and base may be the same buffer (the
  // frame is then tiny) but must not overlap `out`. n == 0 is allowed (the
  // pointers other than out may then be null).
  // Errors (out's contents are then meaningless):
  // - InvalidArgument: a null pointer with n > 0, a null out, a level outside
  //   [kDeltaMinLevel, kDeltaMaxLevel], or n with DeltaBound(n) == 0;
  // - ResourceExhausted: the frame does not fit out_cap. Pass out_cap = n (or
  //   less) to get this instead of a frame that saves nothing; pass
  //   DeltaBound(n) to never get it;
  // - Internal: zstd failed (out of memory).
  absl::StatusOr<size_t> Encode(const void* base, const void* msg, size_t n, void* out,
                                size_t out_cap, int level = 1);

  // Reconstructs the n-byte message of frame[0, frame_len) against `base`
  // into out. out may be base itself (the cached previous message is then
  // updated in place); any other overlap of out with base or the frame is
  // not allowed. n == 0 is allowed (base and out may then be null).
  // Errors:
  // - InvalidArgument: a null pointer where bytes are needed (base or out with
  //   n > 0, frame with frame_len > 0), out overlapping base other than
  //   exactly, out overlapping the frame;
  // - DataLoss: the frame is truncated, malformed, of another version, for
  //   another message size, or its checksum does not match what came out
  //   (e.g. the base differs from the sender's). The message says which;
  // - Internal: zstd could not allocate its context.
  // On any error out[0, n) holds meaningless bytes (some of them may already
  // have been written); where out is base, the cached message is lost.
  absl::Status Decode(const void* base, const void* frame, size_t frame_len, void* out, size_t n);

  // Encode, and leaves `base` holding the message: each block is copied
  // while it is in cache, which saves a pass over memory against a memcpy
  // afterwards (a sender keeping what it sent as the next base). On any
  // error base holds parts of both: copy msg into it.
  absl::StatusOr<size_t> EncodeAdvancing(void* base, const void* msg, size_t n, void* out,
                                         size_t out_cap, int level = 1);
  // Decode into `base` itself, and copies the message to `copy` (n bytes,
  // overlapping neither base nor the frame) block by block while it is in
  // cache (a receiver keeping the base and handing the message out). On
  // any error both hold meaningless bytes.
  absl::Status DecodeCopying(void* base, const void* frame, size_t frame_len, void* copy,
                             size_t n);

 private:
  struct Contexts;
  std::unique_ptr<Contexts> ctx_;
  unsigned char* advance_ = nullptr;  // EncodeAdvancing's base
  unsigned char* copy_ = nullptr;     // DecodeCopying's copy
};

// DeltaCodec::Encode / Decode with the calling thread's own codec.
absl::StatusOr<size_t> EncodeDelta(const void* base, const void* msg, size_t n, void* out,
                                   size_t out_cap, int level = 1);
absl::Status DecodeDelta(const void* base, const void* frame, size_t frame_len, void* out,
                         size_t n);
absl::StatusOr<size_t> EncodeDeltaAdvancing(void* base, const void* msg, size_t n, void* out,
                                            size_t out_cap, int level = 1);
absl::Status DecodeDeltaCopying(void* base, const void* frame, size_t frame_len, void* copy,
                                size_t n);

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_KERNELS_DELTA_H_
