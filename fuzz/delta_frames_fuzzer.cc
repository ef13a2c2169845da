// libFuzzer target: delta frames (algorithms/kernels/delta.h), which arrive
// from the network, decoded against a cached base.
//
// Input: byte 0 picks the mode (its low bit); bytes 1-3 give the message
// size n (little-endian, modulo 256 KiB + 1, so up to five 64 KiB blocks);
// byte 4 seeds the base (a fixed pattern with runs of zeros in it).
//   0  raw frame: the rest of the input is the frame. Decode, out of place
//      and in place, must return OK or DataLoss; both ways must agree, and
//      the out-of-place call must leave the base alone.
//   1  mutated honest frame: byte 5 is a count c, then c triples (gap, run,
//      value) change the message from the base (runs of changed bytes
//      spread over it); byte after them picks the level. The harness encodes
//      the message against the base (which must decode back exactly), then
//      changes the frame as the remaining triples (position hi, position lo,
//      value) say: XOR the byte at position (modulo the frame's length) with
//      value, or, for value 0, cut the frame there. The changed frame must
//      be refused with DataLoss or decode to exactly the message: a wrong
//      message is never accepted.
//
// Build and run (clang with libFuzzer, from the repository root):
//   clang++ -std=c++17 -O1 -g -fno-omit-frame-pointer \
//     -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. \
//     fuzz/delta_frames_fuzzer.cc algorithms/kernels/delta.cc \
//     $(pkg-config --libs absl_statusor absl_str_format) -lzstd -lxxhash \
//     -o /tmp/delta_frames_fuzzer
//   /tmp/delta_frames_fuzzer -max_total_time=60 -max_len=4096
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "algorithms/kernels/delta.h"

namespace {

using Bytes = std::vector<unsigned char>;

void Check(bool ok, const char* what, const absl::Status& s = absl::OkStatus()) {
  if (ok) return;
  const std::string detail = s.ToString();
  fprintf(stderr, "delta_frames_fuzzer: invariant violated: %s [%s]\n", what, detail.c_str());
  abort();
}

Bytes Base(size_t n, unsigned char seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) {
    // Runs of zeros every 256 bytes, so in-place and copied zero runs differ.
    b[i] = (i & 0xff) < 16 ? 0 : static_cast<unsigned char>(i * 131 + seed);
  }
  return b;
}

// A frame in a buffer of exactly its size, so that ASan sees a read past it.
std::unique_ptr<unsigned char[]> Exact(const unsigned char* p, size_t len) {
  std::unique_ptr<unsigned char[]> copy(new unsigned char[len]);
  if (len > 0) std::memcpy(copy.get(), p, len);
  return copy;
}

hcomm::DeltaCodec& Codec() {
  static hcomm::DeltaCodec codec;  // reused across inputs, as a peer's would be
  return codec;
}

void RawFrame(const Bytes& base, const uint8_t* frame, size_t len) {
  auto f = Exact(frame, len);
  const Bytes before = base;
  Bytes out(base.size(), 0x5a);
  const absl::Status s1 = Codec().Decode(base.data(), f.get(), len, out.data(), out.size());
  Check(s1.ok() || absl::IsDataLoss(s1), "an undocumented code", s1);
  Check(base == before, "an out-of-place decode changed the base");
  Bytes cached = base;
  const absl::Status s2 = Codec().Decode(cached.data(), f.get(), len, cached.data(), cached.size());
  Check(s1.ok() == s2.ok(), "in place and out of place disagree", s2);
  if (s1.ok()) Check(out == cached, "in place and out of place decode differently");
}

void MutatedFrame(const Bytes& base, const uint8_t* data, size_t size) {
  Bytes msg = base;
  size_t used = 0;
  const size_t triples = size > 0 ? data[0] : 0;
  used = 1;
  size_t at = 0;
  for (size_t t = 0; t < triples && used + 3 <= size && !msg.empty(); ++t, used += 3) {
    at = (at + static_cast<size_t>(data[used]) * 37) % msg.size();
    const size_t run = data[used + 1] % 64 + 1;
    for (size_t k = 0; k < run && at + k < msg.size(); ++k) {
      msg[at + k] ^= static_cast<unsigned char>((data[used + 2] + 7 * k) | 1);
    }
  }
  int level = 1;
  if (used < size) {
    level =
        hcomm::kDeltaMinLevel + data[used] % (hcomm::kDeltaMaxLevel - hcomm::kDeltaMinLevel + 1);
    // The slow levels only rarely, to keep the executions fast.
    if (level > 5 && data[used] % 8 != 0) level = 1;
    ++used;
  }
  Bytes frame(hcomm::DeltaBound(msg.size()));
  absl::StatusOr<size_t> len =
      Codec().Encode(base.data(), msg.data(), msg.size(), frame.data(), frame.size(), level);
  Check(len.ok(), "encoding failed", len.status());
  frame.resize(*len);
  Bytes out;
  {
    auto f = Exact(frame.data(), frame.size());
    out.assign(msg.size(), 0);
    const absl::Status s =
        Codec().Decode(base.data(), f.get(), frame.size(), out.data(), out.size());
    Check(s.ok() && out == msg, "an honest frame does not decode to its message", s);
  }
  size_t cut = frame.size();
  for (; used + 3 <= size; used += 3) {
    const size_t pos = ((static_cast<size_t>(data[used]) << 8) | data[used + 1]) % frame.size();
    if (data[used + 2] == 0) {
      cut = std::min(cut, pos);
    } else {
      frame[pos] ^= data[used + 2];
    }
  }
  frame.resize(cut);
  auto f = Exact(frame.data(), frame.size());
  out.assign(msg.size(), 0);
  const absl::Status s = Codec().Decode(base.data(), f.get(), frame.size(), out.data(), out.size());
  Check(s.ok() || absl::IsDataLoss(s), "an undocumented code", s);
  if (s.ok()) Check(out == msg, "a damaged frame decoded to a wrong message");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const size_t n =
      (data[1] | (data[2] << 8) | (static_cast<size_t>(data[3]) << 16)) % ((256 << 10) + 1);
  const Bytes base = Base(n, data[4]);
  if ((data[0] & 1) == 0) {
    RawFrame(base, data + 5, size - 5);
  } else {
    MutatedFrame(base, data + 5, size - 5);
  }
  return 0;
}
