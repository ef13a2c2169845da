// The whole reduction of each element from its parts, for the places where
// one rank combines every contribution at once: the shared segment, the
// direct algorithms, and the last (with two ranks the only) combine of the
// ring and the trees.
//
//   // out = in0 + in1 + in2 (float16, accumulated in float32), averaged:
//   const char* in[3] = {a, b, c};
//   hcomm::ReduceParts(out, [&](int j) { return in[j]; }, 3, count,
//                      hcomm::DataType::kFloat16, hcomm::ReduceOp::kAvg, 3);
//
// A header of its own, not reduce.h: that one is compiled with each ISA
// level's flags, and must define no inline function that the linker could
// pick for a call from plain code.
#ifndef HCOMM_ALGORITHMS_KERNELS_REDUCE_PARTS_H_
#define HCOMM_ALGORITHMS_KERNELS_REDUCE_PARTS_H_

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "algorithms/kernels/reduce.h"

namespace hcomm {

// ReduceParts of float16/bfloat16 over more than kMaxHalfParts parts: each
// chunk widened into float32 buffers (16 KiB of them, on the stack). Not
// inlined, so that ReduceParts' other paths, which small collectives take,
// need no such frame.
template <typename Part>
__attribute__((noinline)) void ReduceHalfPartsInChunks(char* dst, Part part, int n,
                                                       size_t count, DataType t, ReduceOp op,
                                                       int divisor) {
  const ReduceOp rop = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  constexpr size_t kChunk = 2048;
  float acc[kChunk], next[kChunk];
  for (size_t i = 0; i < count; i += kChunk) {
    const size_t len = std::min(kChunk, count - i);
    WidenToFloat32(acc, part(0) + 2 * i, len, t);
    for (int j = 1; j < n; ++j) {
      WidenToFloat32(next, part(j) + 2 * i, len, t);
      ReduceInto(acc, next, len, DataType::kFloat32, rop);
    }
    if (op == ReduceOp::kAvg) DivideBy(acc, len, DataType::kFloat32, divisor);
    NarrowFromFloat32(dst + 2 * i, acc, len, t);
  }
}

// dst (count elements of t) = op over part(0), ..., part(n - 1), in that
// order; kAvg sums and divides by `divisor` here, while dst is still in the
// cache. float16 and bfloat16 accumulate in float32 and are rounded once,
// divided first (as the float32 path divides before it rounds), so their
// parts must be the contributions themselves, never a rounded partial
// result. dst may be part(0) or part(1) and no other part.
template <typename Part>  // const char* part(int j)
void ReduceParts(void* out, Part part, int n, size_t count, DataType t, ReduceOp op,
                 int divisor) {
  char* dst = static_cast<char*>(out);
  const ReduceOp rop = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  if (n == 1) {
    const char* only = part(0);
    if (count > 0 && dst != only) memmove(dst, only, count * DataTypeSize(t));
    if (op == ReduceOp::kAvg) DivideBy(dst, count, t, divisor);
    return;
  }
  const bool floating = t == DataType::kFloat32 || t == DataType::kFloat64;
  if (n == 2 && op == ReduceOp::kAvg && divisor == 2 && floating) {
    // One pass, not a sum and then a division.
    AverageOfTwo(dst, part(0), part(1), count, t);
    return;
  }
  if (!IsHalfFloat(t)) {
    Reduce2(dst, part(0), part(1), count, t, rop);
    for (int j = 2; j < n; ++j) ReduceInto(dst, part(j), count, t, rop);
    if (op == ReduceOp::kAvg) DivideBy(dst, count, t, divisor);
    return;
  }
  // Two parts: the pair kernel widens, combines in float32 and rounds once
  // too, in one pass instead of four over each chunk.
  if (n == 2 && op != ReduceOp::kAvg) {
    Reduce2(dst, part(0), part(1), count, t, op);
    return;
  }
  if (n <= kMaxHalfParts) {
    // One pass over all parts, each element combined in float32 in a
    // register: chunks widened into float32 buffers took several passes and
    // measured slower than float32 of the same bytes (docs/performance.md,
    // "16-bit parts in one pass").
    const void* ptrs[kMaxHalfParts];
    for (int j = 0; j < n; ++j) ptrs[j] = part(j);
    ReduceHalfParts(dst, ptrs, n, count, t, op, divisor);
    return;
  }
  ReduceHalfPartsInChunks(dst, part, n, count, t, op, divisor);
}

// ReduceParts of two parts: dst = a op b. dst may be a or b.
inline void ReduceParts2(void* dst, const void* a, const void* b, size_t count, DataType t,
                         ReduceOp op, int divisor) {
  const char* parts[2] = {static_cast<const char*>(a), static_cast<const char*>(b)};
  ReduceParts(dst, [&](int j) { return parts[j]; }, 2, count, t, op, divisor);
}

}  // namespace hcomm

#endif  // HCOMM_ALGORITHMS_KERNELS_REDUCE_PARTS_H_
