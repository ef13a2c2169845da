// float32 <-> 16-bit float conversion for compressed transfers (the `fp16`
// and `bf16` values of the `compression` key, shared/API.md "Compression"):
// a sender encodes a float32 chunk, a receiver decodes it or adds it straight
// into its float32 accumulator.
//
//   std::vector<uint16_t> wire(count);
//   if (!hcomm::EncodeHalf(hcomm::HalfFormat::kFp16, chunk, count, wire.data())) {
//     // Some finite value does not fit fp16: send `chunk` as float32.
//   }
//   ...
//   hcomm::AccumulateHalf(hcomm::HalfFormat::kFp16, wire.data(), count, acc);
//
// Formats: kFp16 is IEEE binary16 (5 exponent bits, 10 fraction bits, largest
// finite 65504); kBf16 is bfloat16 (the top half of a float32: 8 exponent
// bits, 7 fraction bits, largest finite 0x1.fep127 ~ 3.39e38).
//
// Encoding rounds to nearest, ties to even. Decoding is exact (every 16-bit
// value is a float32). So every error comes from encoding, and for a finite x
// whose encoding was accepted (EncodeHalf returned true):
//
//   fp16: |x| in [2^-14, 65504]           |decode(encode(x)) - x| <= 2^-11 |x|
//         |x| below 2^-14 (subnormals)    |decode(encode(x)) - x| <= 2^-25
//         (|x| <= 2^-25 becomes a zero of x's sign)
//   bf16: |x| in [2^-126, FLT_MAX], where accepted
//                                         |decode(encode(x)) - x| <= 2^-8 |x|
//         |x| below 2^-126 (float32 subnormals)
//                                         |decode(encode(x)) - x| <= 2^-134
//
// Call these u (2^-11 for fp16, 2^-8 for bf16) and eta (2^-25, 2^-134).
//
// A compressed reduction of n ranks' values x_1..x_n (a sum) adds in float32
// (relative error <= 2^-24 per addition) and rounds a value to the 16-bit
// format each time it leaves a rank compressed. Let h be the largest number
// of such roundings on the way from any one contribution to the result, and
// R the number of roundings whose output the result depends on. Re-encoding
// a value that was decoded and not changed is exact and does not count: the
// allgather phase of a ring forwards the final sum with one rounding in all.
// Then, as long as no float32 addition overflows,
//
//   |result - sum x_j| <= g * sum |x_j|  +  (1 + g) * R * eta,
//   g = (1 + u)^h * (1 + 2^-24)^(n-1) - 1  ~  h*u + (n-1)*2^-24.
//
// (Each contribution is multiplied by at most h factors (1 + d), |d| <= u,
// and n - 1 factors (1 + e), |e| <= 2^-24; each rounding in the subnormal
// range instead adds at most eta, which later steps scale by at most 1 + g.)
// Examples, fp16: a ring allreduce over n ranks rounds each partial sum on
// each of the n - 1 reduce-scatter hops and the final sum once more for the
// allgather, so h = R = n; at n = 8, g ~ 8 * 2^-11 ~ 3.9e-3. A direct
// (all-to-one) reduction rounds each contribution once: h = 1, R = n - 1.
// A chunk whose encoding is refused travels as float32 and adds no rounding.
//
// Overflow: EncodeHalf returns false, and the caller sends the chunk
// uncompressed, when a finite input would round to Inf in the format: fp16
// |x| >= 65520 (the midpoint between 65504 and 2^16, which rounds to even,
// i.e. to Inf; 65504 <= |x| < 65520 becomes 65504), bf16 |x| >= 0x1.ffp127
// (the midpoint above 0x1.fep127; FLT_MAX is refused). So a finite input
// never arrives as Inf or NaN. Inf inputs stay Inf of the same sign; NaN
// inputs stay NaN (quieted, the top fraction bits kept: the sign and the
// leading payload bits survive, the exact payload may not). Decoding a NaN
// gives a quiet NaN (fp16: a signalling NaN is quieted, as VCVTPH2PS does).
//
// The conversions are those of reduce.h (FloatToHalf, FloatToBFloat16,
// HalfToFloat, BFloat16ToFloat), element for element.
//
// Speed: on x86-64 CPUs with AVX2 and F16C the calls run vector code (F16C's
// VCVTPS2PH / VCVTPH2PS for fp16, AVX2 integer rounding for bf16) with the
// overflow check folded into the same pass; elsewhere a portable scalar
// loop. Both give the same bits (AccumulateHalf: the same bits, except which
// NaN's payload a sum of two NaNs carries). The choice is made at the first
// call; HCOMM_KERNELS=scalar (as for reduce.h) forces the scalar loop, read
// once. Results assume the default floating-point environment (round to
// nearest, no flush-to-zero or denormals-are-zero).
//
// Pointers: n == 0 touches nothing (the pointers may then be null); otherwise
// they must be valid for n elements, need no alignment beyond their type's,
// and the input and output ranges must not overlap (acc and in, likewise).
//
// THREAD SAFETY: every function is thread-safe and never blocks: it touches
// only the caller's buffers. ForceHalfKernelIsaForTesting changes a
// process-wide choice; it is for single-threaded tests and benchmarks.
#ifndef HCOMM_ALGORITHMS_KERNELS_HALF_H_
#define HCOMM_ALGORITHMS_KERNELS_HALF_H_

#include <cstddef>
#include <cstdint>

namespace hcomm {

// The 16-bit wire format. Append-only; the values may travel in a header.
enum class HalfFormat : int {
  kFp16 = 0,  // IEEE 754 binary16
  kBf16 = 1,  // bfloat16
};

// "fp16", "bf16"; "invalid" for a value that is not a HalfFormat.
const char* HalfFormatName(HalfFormat f);

// out[i] = in[i] rounded to `f` (nearest, ties to even), for i < n. Returns
// true when every finite in[i] stays finite. Returns false when at least one
// finite in[i] would become Inf (see "Overflow" above); out[0..n) is then
// written but meaningless: send the chunk uncompressed. An invalid `f`
// writes nothing and returns false.
bool EncodeHalf(HalfFormat f, const float* in, size_t n, uint16_t* out);

// out[i] = in[i] as float32 (exact), for i < n. An invalid `f` does nothing.
void DecodeHalf(HalfFormat f, const uint16_t* in, size_t n, float* out);

// DecodeHalf where the n 16-bit values lie at the start of the very buffer
// the n floats go to: buf[0, 2n) as 16-bit values becomes buf[0, 4n) as
// float32 (a receive of a compressed message into its float32 buffer needs
// no second buffer). Works from the end backwards through a small stack
// block. An invalid `f` does nothing.
void DecodeHalfInPlace(HalfFormat f, void* buf, size_t n);

// acc[i] = acc[i] + decode(in[i]) in float32 (one rounding, IEEE addition),
// for i < n: the reduction of a received compressed chunk, in one pass. An
// invalid `f` does nothing.
void AccumulateHalf(HalfFormat f, const uint16_t* in, size_t n, float* acc);

// Which implementation the calls use: "avx2" (AVX2 + F16C) or "scalar".
const char* HalfKernelIsa();

// Test/benchmark hook: use `isa` ("scalar" or "avx2") for every later call in
// this process. Returns false, changing nothing, if the name is unknown or
// this CPU or build cannot run it.
bool ForceHalfKernelIsaForTesting(const char* isa);

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_KERNELS_HALF_H_
