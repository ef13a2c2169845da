// Delta coding (delta.h): per 64 KiB block, XOR against the base and zero
// runs as records; zstd's streaming API over the records; XXH64 of the
// message beside it.
#include "algorithms/kernels/delta.h"

#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "absl/strings/str_format.h"

namespace hcomm {
namespace {

constexpr char kMagic[4] = {'H', 'C', 'D', 'L'};
constexpr uint8_t kVersion = 1;
// The unit of XOR and of records: big enough that zstd is called rarely,
// small enough to stay in L2 beside zstd's own tables.
constexpr size_t kBlockBytes = 64 << 10;
// A run of this many unchanged bytes or more starts a record (shorter runs
// travel as literal zeros, which cost zstd less than a record).
constexpr size_t kMinZeroRun = 3;
// The most the records of one block add to its size (delta.h). The first
// record adds at most 4 bytes (an empty zero run's 1-byte varint and a
// literal varint of up to 3). A later record's zero run is 3 bytes or more,
// so its varint is at least 2 bytes shorter than the run it replaces; only a
// literal varint of 3 bytes (a literal run of 2^14 bytes or more) outweighs
// that, by 1, and a block has room for at most 4 such runs.
constexpr size_t kRecordSlackPerBlock = 8;
// The records buffer: a block's records and a margin that the check after
// BuildRecords relies on.
constexpr size_t kRecordsBytes = kBlockBytes + 64;
// Varints encode at most this (a whole block).
constexpr uint32_t kMaxVarint = kBlockBytes;

void PutLe64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

uint64_t GetLe64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// dst[i] = a[i] ^ b[i] for i < len. dst may be a or b; no other overlap.
void XorBytes(unsigned char* dst, const unsigned char* a, const unsigned char* b, size_t len) {
  // 32-byte generic vectors: two SSE2 operations on a baseline x86-64 build.
  // Every vector is loaded before it is stored, so dst == a or dst == b is
  // fine.
  typedef uint64_t V __attribute__((vector_size(32)));
  size_t i = 0;
  for (; i + sizeof(V) <= len; i += sizeof(V)) {
    V x, y;
    std::memcpy(&x, a + i, sizeof x);
    std::memcpy(&y, b + i, sizeof y);
    x ^= y;
    std::memcpy(dst + i, &x, sizeof x);
  }
  for (; i < len; ++i) dst[i] = static_cast<unsigned char>(a[i] ^ b[i]);
}

inline uint64_t Word(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// The high bit of each zero byte of w, and maybe of bytes above the first
// zero byte (the classic bit trick): its lowest set bit is exactly the first
// zero byte's.
inline uint64_t ZeroBytes(uint64_t w) {
  return (w - 0x0101010101010101ull) & ~w & 0x8080808080808080ull;
}

// The byte of a little-endian word at the lowest set bit of m (m != 0).
inline size_t ByteOf(uint64_t m) { return static_cast<size_t>(__builtin_ctzll(m)) >> 3; }

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "Word() reads bytes little-endian");

// The end of the run of zeros in x[i, len).
size_t ZeroRunEnd(const unsigned char* x, size_t i, size_t len) {
  for (; i + 8 <= len; i += 8) {
    const uint64_t w = Word(x + i);
    if (w != 0) return i + ByteOf(w);
  }
  while (i < len && x[i] == 0) ++i;
  return i;
}

// Where the literal run that starts at x[i] ends: at the next run of
// kMinZeroRun zeros or more, or at len (a shorter run of zeros at the end
// joins the literals). Where it ends at such a run, *zeros_end gets that
// run's end (the next record's zeros, found already).
size_t LiteralRunEnd(const unsigned char* x, size_t i, size_t len, size_t* zeros_end_out) {
  for (;;) {
    // Words without a zero byte hold no start of a zero run.
    for (; i + 8 <= len; i += 8) {
      const uint64_t z = ZeroBytes(Word(x + i));
      if (z != 0) {
        i += ByteOf(z);
        break;
      }
    }
    while (i < len && x[i] != 0) ++i;
    if (i == len) return len;
    const size_t zeros_end = ZeroRunEnd(x, i, len);
    if (zeros_end - i >= kMinZeroRun || zeros_end == len) {
      if (zeros_end == len && zeros_end - i < kMinZeroRun) return len;
      *zeros_end_out = zeros_end;
      return i;
    }
    i = zeros_end;
  }
}

unsigned char* PutVarint(unsigned char* p, uint32_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<unsigned char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<unsigned char>(v);
  return p;
}

// The records of one block of XORed bytes x[0, len), len <= kBlockBytes,
// written to out (room for len + kRecordSlackPerBlock bytes). Returns the
// end of what was written.
unsigned char* BuildRecords(const unsigned char* x, size_t len, unsigned char* out) {
  size_t i = 0;
  size_t next_zeros_end = 0;  // where the zeros starting at i end, if known
  bool known = false;
  do {
    const size_t zeros_end = known ? next_zeros_end : ZeroRunEnd(x, i, len);
    known = false;
    size_t literal_end = len;
    if (zeros_end != len) {
      literal_end = LiteralRunEnd(x, zeros_end, len, &next_zeros_end);
      known = literal_end != len;
    }
    out = PutVarint(out, static_cast<uint32_t>(zeros_end - i));
    out = PutVarint(out, static_cast<uint32_t>(literal_end - zeros_end));
    std::memcpy(out, x + zeros_end, literal_end - zeros_end);
    out += literal_end - zeros_end;
    i = literal_end;
  } while (i < len);
  return out;
}

size_t BlocksOf(size_t n) { return n / kBlockBytes + (n % kBlockBytes != 0); }

// The largest record stream Encode writes for n bytes; 0 when that
// overflows.
size_t RecordBound(size_t n) {
  const size_t slack = BlocksOf(n) * kRecordSlackPerBlock;
  return n > SIZE_MAX - slack ? 0 : n + slack;
}

std::string ZstdError(size_t code) { return ZSTD_getErrorName(code); }

// Whether [a, a + an) and [b, b + bn) share a byte.
bool Overlap(const void* a, size_t an, const void* b, size_t bn) {
  if (an == 0 || bn == 0) return false;
  const uintptr_t x = reinterpret_cast<uintptr_t>(a);
  const uintptr_t y = reinterpret_cast<uintptr_t>(b);
  return x < y + bn && y < x + an;
}

// The record stream of a delta frame, read out of its zstd frame through a
// staging block. Every failure is DataLoss, with what was wrong and where.
class RecordReader {
 public:
  RecordReader(ZSTD_DCtx* dctx, const unsigned char* z, size_t z_len, unsigned char* staging,
               size_t frame_len, size_t n)
      : dctx_(dctx), in_{z, z_len, 0}, staging_(staging), frame_len_(frame_len), n_(n) {}

  // A varint of at most 3 bytes and at most kMaxVarint.
  absl::Status ReadVarint(size_t at, uint32_t* v) {
    uint32_t value = 0;
    for (int k = 0; k < 3; ++k) {
      if (pos_ == end_) {
        if (absl::Status s = Fill(at); !s.ok()) return s;
      }
      const unsigned char byte = staging_[pos_++];
      value |= static_cast<uint32_t>(byte & 0x7f) << (7 * k);
      if ((byte & 0x80) == 0) {
        if (value > kMaxVarint) break;
        *v = value;
        return absl::OkStatus();
      }
    }
    return Loss(at, "a record length is malformed or above 65536");
  }

  // Hands the next `len` content bytes to take(const unsigned char*, size_t)
  // in pieces.
  template <typename Take>
  absl::Status ReadBytes(size_t at, size_t len, Take take) {
    while (len > 0) {
      if (pos_ == end_) {
        if (absl::Status s = Fill(at); !s.ok()) return s;
      }
      const size_t piece = std::min(len, end_ - pos_);
      take(staging_ + pos_, piece);
      pos_ += piece;
      len -= piece;
      at += piece;
    }
    return absl::OkStatus();
  }

  // After the last record: the zstd frame must end here, with no more
  // content, and the delta frame with it.
  absl::Status Finish() {
    if (pos_ != end_) return Loss(n_, "its records go on past the message's end");
    while (!frame_ended_) {
      ZSTD_outBuffer out = {staging_, kBlockBytes, 0};
      const size_t in_before = in_.pos;
      const size_t r = ZSTD_decompressStream(dctx_, &out, &in_);
      if (ZSTD_isError(r)) return Loss(n_, "zstd: " + ZstdError(r));
      if (out.pos > 0) return Loss(n_, "its records go on past the message's end");
      if (r == 0) {
        frame_ended_ = true;
      } else if (in_.pos == in_.size) {
        return Loss(n_, "it is truncated");
      } else if (in_.pos == in_before) {
        return Loss(n_, "zstd made no progress");
      }
    }
    if (in_.pos != in_.size) {
      return absl::DataLossError(
          absl::StrFormat("delta frame of %u bytes has %u bytes after its zstd frame", frame_len_,
                          in_.size - in_.pos));
    }
    return absl::OkStatus();
  }

 private:
  // Refills the empty staging block with at least one byte.
  absl::Status Fill(size_t at) {
    pos_ = end_ = 0;
    while (end_ == 0) {
      if (frame_ended_) {
        return Loss(at, "the zstd frame ends before the message does");
      }
      ZSTD_outBuffer out = {staging_, kBlockBytes, 0};
      const size_t in_before = in_.pos;
      const size_t r = ZSTD_decompressStream(dctx_, &out, &in_);
      if (ZSTD_isError(r)) return Loss(at, "zstd: " + ZstdError(r));
      end_ = out.pos;
      if (r == 0) frame_ended_ = true;  // complete and flushed
      if (end_ == 0 && !frame_ended_ && in_.pos == in_.size) {
        return Loss(at, "it is truncated");
      }
      if (end_ == 0 && !frame_ended_ && in_.pos == in_before) {
        // zstd promises progress while it has room; guard against a loop.
        return Loss(at, "zstd made no progress");
      }
    }
    return absl::OkStatus();
  }

  absl::Status Loss(size_t at, const std::string& what) const {
    return absl::DataLossError(
        absl::StrFormat("delta frame of %u bytes for a %u-byte message: %s (at message byte %u)",
                        frame_len_, n_, what, at));
  }

  ZSTD_DCtx* const dctx_;
  ZSTD_inBuffer in_;
  unsigned char* const staging_;  // kBlockBytes
  const size_t frame_len_;
  const size_t n_;
  size_t pos_ = 0, end_ = 0;  // unread content: staging_[pos_, end_)
  bool frame_ended_ = false;
};

}  // namespace

struct DeltaCodec::Contexts {
  ZSTD_CCtx* cctx = nullptr;
  ZSTD_DCtx* dctx = nullptr;
  XXH64_state_t* hash = nullptr;
  // Encode: the XORed block, then its records. Decode: the staging block.
  std::unique_ptr<unsigned char[]> block;
  std::unique_ptr<unsigned char[]> records;

  ~Contexts() {
    ZSTD_freeCCtx(cctx);  // each accepts null
    ZSTD_freeDCtx(dctx);
    XXH64_freeState(hash);
  }

  absl::Status EnsureCommon() {
    if (hash == nullptr) hash = XXH64_createState();
    if (!block) block.reset(new (std::nothrow) unsigned char[kBlockBytes]);
    if (hash == nullptr || !block) {
      return absl::InternalError("delta codec: out of memory for its checksum state or block");
    }
    return absl::OkStatus();
  }

  absl::Status EnsureEncoder() {
    if (cctx == nullptr) {
      cctx = ZSTD_createCCtx();
      if (cctx == nullptr) return absl::InternalError("delta codec: ZSTD_createCCtx failed");
      const size_t r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, kDeltaWindowLog);
      if (ZSTD_isError(r)) {
        return absl::InternalError("delta codec: setting zstd's window: " + ZstdError(r));
      }
    }
    if (!records) {
      records.reset(new (std::nothrow) unsigned char[kRecordsBytes]);
      if (!records) return absl::InternalError("delta codec: out of memory for its records");
    }
    return EnsureCommon();
  }

  absl::Status EnsureDecoder() {
    if (dctx == nullptr) {
      dctx = ZSTD_createDCtx();
      if (dctx == nullptr) return absl::InternalError("delta codec: ZSTD_createDCtx failed");
      const size_t r = ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, kDeltaWindowLog);
      if (ZSTD_isError(r)) {
        return absl::InternalError("delta codec: capping zstd's window: " + ZstdError(r));
      }
    }
    return EnsureCommon();
  }
};

size_t DeltaBound(size_t n) {
  const size_t records = RecordBound(n);
  if (records == 0 && n != 0) return 0;
  const size_t z = ZSTD_compressBound(records);
  if (ZSTD_isError(z) || z == 0 || z > SIZE_MAX - kDeltaHeaderBytes) return 0;
  return kDeltaHeaderBytes + z;
}

DeltaCodec::DeltaCodec() : ctx_(new Contexts) {}
DeltaCodec::~DeltaCodec() = default;

absl::StatusOr<size_t> DeltaCodec::Encode(const void* base, const void* msg, size_t n, void* out,
                                          size_t out_cap, int level) {
  if (out == nullptr || (n > 0 && (base == nullptr || msg == nullptr))) {
    return absl::InvalidArgumentError(absl::StrFormat("delta encode of %u bytes: null %s", n,
                                                      out == nullptr    ? "output"
                                                      : base == nullptr ? "base"
                                                                        : "message"));
  }
  if (level < kDeltaMinLevel || level > kDeltaMaxLevel) {
    return absl::InvalidArgumentError(absl::StrFormat("delta encode: level %d is outside [%d, %d]",
                                                      level, kDeltaMinLevel, kDeltaMaxLevel));
  }
  if (DeltaBound(n) == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("delta encode: %u bytes is above zstd's input limit", n));
  }
  if (out_cap < kDeltaHeaderBytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("delta encode of %u bytes: out_cap %u is below the %u-byte header", n,
                        out_cap, kDeltaHeaderBytes));
  }
  if (absl::Status s = ctx_->EnsureEncoder(); !s.ok()) return s;

  ZSTD_CCtx* const cctx = ctx_->cctx;
  // A failed call may have left a frame half done; parameters (the window)
  // stay.
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
  size_t r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (ZSTD_isError(r)) return absl::InternalError("delta encode: zstd setup: " + ZstdError(r));
  XXH64_reset(ctx_->hash, 0);

  const auto* b = static_cast<const unsigned char*>(base);
  const auto* m = static_cast<const unsigned char*>(msg);
  unsigned char* const o = static_cast<unsigned char*>(out);
  unsigned char* const xored = ctx_->block.get();
  unsigned char* const records = ctx_->records.get();
  ZSTD_outBuffer zout = {o + kDeltaHeaderBytes, out_cap - kDeltaHeaderBytes, 0};
  size_t off = 0;
  do {
    const size_t len = std::min(kBlockBytes, n - off);
    const bool last = off + len == n;
    size_t records_len = 0;
    if (len > 0) {
      XorBytes(xored, m + off, b + off, len);
      XXH64_update(ctx_->hash, m + off, len);
      if (advance_ != nullptr) std::memcpy(advance_ + off, m + off, len);
      records_len = static_cast<size_t>(BuildRecords(xored, len, records) - records);
      if (records_len > len + kRecordSlackPerBlock) {
        return absl::InternalError(absl::StrFormat(
            "delta encode: %u records bytes for a block of %u, above the bound", records_len, len));
      }
    }
    if (off == 0 && last) {
      // The whole content is known: the zstd frame states its size, and
      // zstd sizes its window to it (less memory on both sides).
      r = ZSTD_CCtx_setPledgedSrcSize(cctx, records_len);
      if (ZSTD_isError(r)) {
        return absl::InternalError("delta encode: zstd setup: " + ZstdError(r));
      }
    }
    ZSTD_inBuffer zin = {records, records_len, 0};
    const ZSTD_EndDirective mode = last ? ZSTD_e_end : ZSTD_e_continue;
    for (;;) {
      r = ZSTD_compressStream2(cctx, &zout, &zin, mode);
      if (ZSTD_isError(r)) return absl::InternalError("delta encode: zstd: " + ZstdError(r));
      // e_continue is done when it took the whole input; e_end when the frame
      // is complete (r == 0). Otherwise zstd stopped for lack of room.
      if (last ? r == 0 : zin.pos == zin.size) break;
      if (zout.pos == zout.size) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "delta encode of %u bytes: the frame does not fit out_cap %u (DeltaBound is %u)", n,
            out_cap, DeltaBound(n)));
      }
    }
    off += len;
  } while (off < n);

  std::memcpy(o, kMagic, 4);
  o[4] = kVersion;
  o[5] = o[6] = o[7] = 0;
  PutLe64(o + 8, n);
  PutLe64(o + 16, XXH64_digest(ctx_->hash));
  return kDeltaHeaderBytes + zout.pos;
}

absl::Status DeltaCodec::Decode(const void* base, const void* frame, size_t frame_len, void* out,
                                size_t n) {
  if ((n > 0 && (base == nullptr || out == nullptr)) || (frame_len > 0 && frame == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("delta decode of %u bytes from a %u-byte frame: null %s", n, frame_len,
                        frame_len > 0 && frame == nullptr ? "frame"
                        : base == nullptr                 ? "base"
                                                          : "output"));
  }
  if (out != base && Overlap(out, n, base, n)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("delta decode of %u bytes: output overlaps the base without being it", n));
  }
  if (Overlap(out, n, frame, frame_len)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("delta decode of %u bytes: output overlaps the frame", n));
  }
  const auto* f = static_cast<const unsigned char*>(frame);
  if (frame_len < kDeltaHeaderBytes) {
    return absl::DataLossError(
        absl::StrFormat("delta frame of %u bytes is shorter than its %u-byte header", frame_len,
                        kDeltaHeaderBytes));
  }
  if (std::memcmp(f, kMagic, 4) != 0) {
    return absl::DataLossError("delta frame: bad magic (not a delta frame)");
  }
  if (f[4] != kVersion) {
    return absl::DataLossError(
        absl::StrFormat("delta frame: version %d, this build reads version %d", f[4], kVersion));
  }
  if (f[5] != 0 || f[6] != 0 || f[7] != 0) {
    return absl::DataLossError("delta frame: reserved header bytes are not zero");
  }
  const uint64_t frame_n = GetLe64(f + 8);
  if (frame_n != n) {
    return absl::DataLossError(
        absl::StrFormat("delta frame is for a message of %u bytes, the base has %u", frame_n, n));
  }
  const uint64_t want_hash = GetLe64(f + 16);
  const unsigned char* const z = f + kDeltaHeaderBytes;
  const size_t z_len = frame_len - kDeltaHeaderBytes;
  // Rejects a damaged zstd frame header before any decoding, and a stated
  // content size that no encoder of n bytes writes.
  const unsigned long long content = ZSTD_getFrameContentSize(z, z_len);
  if (content == ZSTD_CONTENTSIZE_ERROR) {
    return absl::DataLossError(absl::StrFormat(
        "delta frame of %u bytes: the zstd frame header is malformed or truncated", frame_len));
  }
  if (content != ZSTD_CONTENTSIZE_UNKNOWN && content > RecordBound(n)) {
    return absl::DataLossError(absl::StrFormat(
        "delta frame: the zstd frame holds %u bytes, more than the records of a %u-byte "
        "message take",
        content, n));
  }
  if (absl::Status s = ctx_->EnsureDecoder(); !s.ok()) return s;

  ZSTD_DCtx_reset(ctx_->dctx, ZSTD_reset_session_only);  // keeps windowLogMax
  XXH64_reset(ctx_->hash, 0);
  const auto* b = static_cast<const unsigned char*>(base);
  unsigned char* const o = static_cast<unsigned char*>(out);
  RecordReader reader(ctx_->dctx, z, z_len, ctx_->block.get(), frame_len, n);
  for (size_t block = 0; block < n; block += kBlockBytes) {
    const size_t block_end = std::min(n, block + kBlockBytes);
    size_t at = block;
    while (at < block_end) {
      uint32_t zeros, literals;
      if (absl::Status s = reader.ReadVarint(at, &zeros); !s.ok()) return s;
      if (absl::Status s = reader.ReadVarint(at, &literals); !s.ok()) return s;
      if (zeros + literals == 0 || zeros + literals > block_end - at) {
        return absl::DataLossError(absl::StrFormat(
            "delta frame of %u bytes: a record of %u + %u bytes at message byte %u does not "
            "fit its block [%u, %u)",
            frame_len, zeros, literals, at, block, block_end));
      }
      if (o != b) std::memcpy(o + at, b + at, zeros);
      at += zeros;
      absl::Status s = reader.ReadBytes(at, literals, [&](const unsigned char* p, size_t len) {
        XorBytes(o + at, p, b + at, len);
        at += len;
      });
      if (!s.ok()) return s;
    }
    XXH64_update(ctx_->hash, o + block, block_end - block);
    if (copy_ != nullptr) std::memcpy(copy_ + block, o + block, block_end - block);
  }
  if (absl::Status s = reader.Finish(); !s.ok()) return s;
  const uint64_t got_hash = XXH64_digest(ctx_->hash);
  if (got_hash != want_hash) {
    return absl::DataLossError(absl::StrFormat(
        "delta frame of %u bytes: checksum mismatch (XXH64 %016x, the sender's %016x): "
        "the base differs from the sender's or the frame is damaged",
        frame_len, got_hash, want_hash));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> DeltaCodec::EncodeAdvancing(void* base, const void* msg, size_t n,
                                                   void* out, size_t out_cap, int level) {
  if (base == msg) return Encode(base, msg, n, out, out_cap, level);
  advance_ = static_cast<unsigned char*>(base);
  absl::StatusOr<size_t> len = Encode(base, msg, n, out, out_cap, level);
  advance_ = nullptr;
  return len;
}

absl::Status DeltaCodec::DecodeCopying(void* base, const void* frame, size_t frame_len,
                                       void* copy, size_t n) {
  const auto* c = static_cast<const unsigned char*>(copy);
  const auto* b = static_cast<const unsigned char*>(base);
  const auto* f = static_cast<const unsigned char*>(frame);
  if (n > 0 && (copy == nullptr || (c < b + n && b < c + n) ||
                (frame != nullptr && c < f + frame_len && f < c + n))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("delta decode of %u bytes: the copy is null or overlaps base or frame", n));
  }
  copy_ = static_cast<unsigned char*>(copy);
  absl::Status s = Decode(base, frame, frame_len, base, n);
  copy_ = nullptr;
  return s;
}

namespace {
DeltaCodec& ThreadCodec() {
  thread_local DeltaCodec codec;
  return codec;
}
}  // namespace

absl::StatusOr<size_t> EncodeDelta(const void* base, const void* msg, size_t n, void* out,
                                   size_t out_cap, int level) {
  return ThreadCodec().Encode(base, msg, n, out, out_cap, level);
}

absl::Status DecodeDelta(const void* base, const void* frame, size_t frame_len, void* out,
                         size_t n) {
  return ThreadCodec().Decode(base, frame, frame_len, out, n);
}

absl::StatusOr<size_t> EncodeDeltaAdvancing(void* base, const void* msg, size_t n, void* out,
                                            size_t out_cap, int level) {
  return ThreadCodec().EncodeAdvancing(base, msg, n, out, out_cap, level);
}

absl::Status DecodeDeltaCopying(void* base, const void* frame, size_t frame_len, void* copy,
                                size_t n) {
  return ThreadCodec().DecodeCopying(base, frame, frame_len, copy, n);
}

}  // namespace hcomm
