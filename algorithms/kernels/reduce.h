// Elementwise reduction kernels: every hcomm dtype x every reduce op,
// vectorised for AVX2 and AVX-512 with a portable scalar fallback, chosen at
// run time from what the CPU supports.
//
// The collective algorithms call these on each received chunk:
//
//   // acc[i] += incoming[i] for float32, in place:
//   hcomm::ReduceInto(acc, incoming, count, hcomm::DataType::kFloat32,
//                     hcomm::ReduceOp::kSum);
//   ...
//   // kAvg reduces like kSum; divide once at the end:
//   if (op == hcomm::ReduceOp::kAvg) hcomm::DivideBy(acc, count, dtype, size);
//
// Numeric semantics (the same bits on every ISA level, NaN payloads of sum and
// prod aside):
// - Integers wrap (two's complement); sum and prod are computed in unsigned
//   arithmetic, so overflow is never undefined behaviour.
// - float32/float64: sum and prod are the plain IEEE operations. min and max
//   are commutative and order zeros: min(-0, +0) == -0, max(-0, +0) == +0.
//   If either operand is a NaN the result is a NaN (NaN propagates, unlike
//   fmin/fmax); for min/max its bits depend only on the two operands (not on
//   their order or the level). sum and prod follow IEEE (a NaN operand gives
//   a NaN); which operand's payload survives is unspecified, and may differ
//   between the elements of one call.
// - float16 (IEEE binary16) and bfloat16: each operand is widened to float32
//   exactly, the op runs in float32 and the result is rounded back to
//   nearest-even (subnormals kept, overflow to inf). A NaN result becomes a
//   quiet NaN that keeps the top payload bits (as the x86 conversion
//   instructions do). FloatToHalf etc. below expose the same conversions.
// - Results assume the default floating-point environment (round to nearest,
//   no flush-to-zero / denormals-are-zero in MXCSR).
//
// Pointers may be unaligned (any byte address); any count works, including 0
// (which touches nothing, and then the pointers may be null). Element data is
// only accessed through memcpy-style loads, so buffers need not have the
// element type's alignment.
//
// Dispatch: the first call picks the best level the CPU and OS support
// ("avx512" needs AVX512F/BW/VL/DQ, "avx2" needs AVX2/FMA/F16C, otherwise
// "scalar"). The environment variable HCOMM_KERNELS=scalar|avx2|avx512 caps
// that choice (for tests and benchmarks); it is read once, at first use.
//
// THREAD SAFETY: every function here is thread-safe and never blocks (the
// kernels touch only the caller's buffers). ForceKernelIsaForTesting changes
// a process-wide choice and is meant for single-threaded tests/benchmarks.
#ifndef HCOMM_ALGORITHMS_KERNELS_REDUCE_H_
#define HCOMM_ALGORITHMS_KERNELS_REDUCE_H_

#include <cstddef>
#include <cstdint>

namespace hcomm {

// Same numeric values as hcomm_dtype_t / hcomm_reduce_op_t in
// c_api/include/hcomm/hcomm.h (core and algorithms do not depend on c_api;
// c_api static_asserts that the values agree). Append-only.
enum class DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kBFloat16 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
};

enum class ReduceOp : int {
  kSum = 0,
  kProd = 1,
  kMin = 2,
  kMax = 3,
  kAvg = 4,  // reduces as kSum; the caller divides by the size with DivideBy
};

// Size in bytes of one element; 0 for a value that is not a DataType.
inline size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

// Whether `t` is float16 or bfloat16, the 16-bit floats that reductions
// accumulate in float32 (WidenToFloat32 / NarrowFromFloat32).
inline bool IsHalfFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16;
}

// Whether `v` is the numeric value of a DataType / ReduceOp.
inline bool IsValidDataType(int v);  // defined below, after kNumDataTypes
inline bool IsValidReduceOp(int v) {
  return v >= static_cast<int>(ReduceOp::kSum) && v <= static_cast<int>(ReduceOp::kAvg);
}

// "int8", "uint8", ..., "float16", "bfloat16", "float32", "float64";
// "invalid" for a value that is not a DataType. Static strings.
const char* DataTypeName(DataType t);
// "sum", "prod", "min", "max", "avg"; "invalid" otherwise. Static strings.
const char* ReduceOpName(ReduceOp op);

// dst[i] = dst[i] (op) src[i] for i < count. kAvg accumulates like kSum.
// dst and src may be the same pointer; otherwise they must not overlap.
// An invalid `t` or `op` does nothing (callers validate with IsValid*).
void ReduceInto(void* dst, const void* src, size_t count, DataType t,
                ReduceOp op);

// dst[i] = a[i] (op) b[i] for i < count (out-of-place form). dst may equal a
// or b (or both); any other overlap is not allowed. An invalid `t` or `op`
// does nothing.
void Reduce2(void* dst, const void* a, const void* b, size_t count,
             DataType t, ReduceOp op);

// dst[i] = src[i] widened exactly to float32, for t = kFloat16 or kBFloat16
// (vectorised like the reductions; any other t does nothing). dst and src
// must not overlap.
void WidenToFloat32(float* dst, const void* src, size_t count, DataType t);

// dst[i] = src[i] rounded to t (kFloat16 or kBFloat16) as FloatToHalf /
// FloatToBFloat16 round; any other t does nothing. dst and src must not
// overlap.
void NarrowFromFloat32(void* dst, const float* src, size_t count, DataType t);

// dst[i] = (a[i] + b[i]) / 2 for t = kFloat32 or kFloat64, in one pass: the
// sum rounded, then halved, as Reduce2 and DivideBy by 2 compute it; any
// other t does nothing (16-bit floats: ReduceHalfParts). Pointer rules as
// for Reduce2.
void AverageOfTwo(void* dst, const void* a, const void* b, size_t count, DataType t);

// At most this many parts for ReduceHalfParts.
constexpr int kMaxHalfParts = 8;

// dst[i] = parts[0][i] op parts[1][i] op ... op parts[n-1][i] for t =
// kFloat16 or kBFloat16, 1 <= n <= kMaxHalfParts, in one pass: every part
// widened to float32, combined in that order, divided by `divisor` for
// kAvg (kAvg combines as kSum) and rounded once. dst may be parts[0] or
// parts[1]; any other t, n out of range or divisor < 1 does nothing.
void ReduceHalfParts(void* dst, const void* const* parts, int n, size_t count, DataType t,
                     ReduceOp op, int divisor);

// The final step of kAvg: dst[i] = dst[i] / n. Integers truncate toward zero
// as C division does (-7 / 2 == -3); float32/float64 use IEEE division by n
// converted to that type; float16/bfloat16 divide in float32 and round to
// nearest-even. n must be >= 1; n < 1 or an invalid `t` does nothing.
void DivideBy(void* dst, size_t count, DataType t, int n);

// Which implementation the calls above use: "avx512", "avx2" or "scalar".
const char* KernelIsa();

// Test/benchmark hook: use `isa` ("scalar", "avx2" or "avx512") for all
// subsequent calls in this process. Returns false, changing nothing, if the
// name is unknown or this CPU/build lacks that level.
bool ForceKernelIsaForTesting(const char* isa);

// The scalar conversions the kernels use (the vector paths agree with them
// bit for bit). FloatToHalf / FloatToBFloat16 round to nearest-even; a NaN
// becomes a quiet NaN keeping the top payload bits. HalfToFloat quiets a
// signalling NaN (as VCVTPH2PS does); BFloat16ToFloat is exact (a shift).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t b);
uint16_t FloatToBFloat16(float f);

// ---------------------------------------------------------------------------
// Implementation details shared by reduce.cc and the per-ISA kernel files.
// Not part of the interface: use the functions above.
namespace reduce_internal {

constexpr int kNumDataTypes = 10;
constexpr int kNumKernelOps = 4;  // sum, prod, min, max (avg runs as sum)

// dst[i] = a[i] op b[i]; dst may equal a or b.
using BinaryKernel = void (*)(void* dst, const void* a, const void* b,
                              size_t count);
using ManyKernel = void (*)(void* dst, const void* const* parts, int n, size_t count,
                           int mode, float k);
// dst[i] /= n, n >= 1.
using DivideKernel = void (*)(void* dst, size_t count, int n);
// dst[i] = float32 of the 16-bit src[i], and back.
using WidenKernel = void (*)(float* dst, const void* src, size_t count);
using NarrowKernel = void (*)(void* dst, const float* src, size_t count);

// One implementation level. Every entry is non-null.
struct KernelTable {
  const char* isa;
  BinaryKernel binary[kNumDataTypes][kNumKernelOps];
  DivideKernel divide[kNumDataTypes];
  // [0] float16, [1] bfloat16.
  WidenKernel widen[2];
  NarrowKernel narrow[2];
  // dst = (a + b) / 2 (AverageOfTwo): [0] float32, [1] float64.
  BinaryKernel average2[2];
  // ReduceHalfParts by [0] float16, [1] bfloat16 and op: after combining,
  // mode 1 multiplies by k, mode 2 divides by k, mode 0 neither.
  ManyKernel many[2][kNumKernelOps];
};

// What ReduceHalfParts asks of a `many` kernel after combining: kAvg by
// a power of two multiplies by the exact reciprocal (mode 1), by another
// divisor divides (mode 2); anything else neither (mode 0, k = 1).
void ManyMode(ReduceOp op, int divisor, int* mode, float* k);

// Always available.
const KernelTable* ScalarKernels();
// Null when this build has no such kernels (e.g. not x86-64). Whether the CPU
// can run them is a separate question (see SelectKernels).
const KernelTable* Avx2Kernels();
const KernelTable* Avx512Kernels();

// The best table the CPU supports, capped by `requested` ("scalar", "avx2",
// "avx512"; null or anything else means no cap). This is what the first call
// uses, with requested = getenv("HCOMM_KERNELS").
const KernelTable* SelectKernels(const char* requested);

}  // namespace reduce_internal

inline bool IsValidDataType(int v) { return v >= 0 && v < reduce_internal::kNumDataTypes; }

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_KERNELS_REDUCE_H_
