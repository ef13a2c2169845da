#include "core/comm/fusion.h"

#include <cstdint>
#include <cstring>

namespace hcomm {
namespace {

// One element of `t` holding `v` (0, 1 or a small count).
void Put(void* at, DataType t, double v) {
  switch (t) {
    case DataType::kInt8: { int8_t x = static_cast<int8_t>(v); std::memcpy(at, &x, 1); return; }
    case DataType::kUint8: { uint8_t x = static_cast<uint8_t>(v); std::memcpy(at, &x, 1); return; }
    case DataType::kInt32: { int32_t x = static_cast<int32_t>(v); std::memcpy(at, &x, 4); return; }
    case DataType::kUint32: { uint32_t x = static_cast<uint32_t>(v); std::memcpy(at, &x, 4); return; }
    case DataType::kInt64: { int64_t x = static_cast<int64_t>(v); std::memcpy(at, &x, 8); return; }
    case DataType::kUint64: { uint64_t x = static_cast<uint64_t>(v); std::memcpy(at, &x, 8); return; }
    case DataType::kFloat16: { uint16_t x = FloatToHalf(static_cast<float>(v)); std::memcpy(at, &x, 2); return; }
    case DataType::kBFloat16: { uint16_t x = FloatToBFloat16(static_cast<float>(v)); std::memcpy(at, &x, 2); return; }
    case DataType::kFloat32: { float x = static_cast<float>(v); std::memcpy(at, &x, 4); return; }
    case DataType::kFloat64: std::memcpy(at, &v, 8); return;
  }
}

double Get(const void* at, DataType t) {
  switch (t) {
    case DataType::kInt8: { int8_t x; std::memcpy(&x, at, 1); return x; }
    case DataType::kUint8: { uint8_t x; std::memcpy(&x, at, 1); return x; }
    case DataType::kInt32: { int32_t x; std::memcpy(&x, at, 4); return x; }
    case DataType::kUint32: { uint32_t x; std::memcpy(&x, at, 4); return x; }
    case DataType::kInt64: { int64_t x; std::memcpy(&x, at, 8); return static_cast<double>(x); }
    case DataType::kUint64: { uint64_t x; std::memcpy(&x, at, 8); return static_cast<double>(x); }
    case DataType::kFloat16: { uint16_t x; std::memcpy(&x, at, 2); return HalfToFloat(x); }
    case DataType::kBFloat16: { uint16_t x; std::memcpy(&x, at, 2); return BFloat16ToFloat(x); }
    case DataType::kFloat32: { float x; std::memcpy(&x, at, 4); return x; }
    case DataType::kFloat64: { double x; std::memcpy(&x, at, 8); return x; }
  }
  return 0;
}

// The largest sum of ones `t` holds exactly.
double ExactCount(DataType t) {
  switch (t) {
    case DataType::kInt8: return 127;
    case DataType::kUint8: return 255;
    case DataType::kFloat16: return 2048;
    case DataType::kBFloat16: return 256;
    default: return 1e15;
  }
}

}  // namespace

bool LanesExact(DataType t, ReduceOp op, int nranks) {
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg) return true;  // 0s and 1s stay 0s and 1s
  return nranks <= ExactCount(t);
}

// A lane holds "yes" as the value that `op` keeps only when every rank
// says yes: 1 for sum, avg, prod and min (sum: the count of ranks; avg:
// 1), 0 for max.
void WriteLanes(void* lanes, DataType t, ReduceOp op, size_t queued) {
  const size_t es = DataTypeSize(t);
  for (int j = 0; j < kFusionLanes; ++j) {
    const bool yes = queued >= (size_t{1} << j);
    const double v = op == ReduceOp::kMax ? (yes ? 0 : 1) : (yes ? 1 : 0);
    Put(static_cast<char*>(lanes) + j * es, t, v);
  }
}

size_t AgreedBatch(const void* lanes, DataType t, ReduceOp op, int nranks) {
  const size_t es = DataTypeSize(t);
  size_t agreed = 0;
  for (int j = 0; j < kFusionLanes; ++j) {
    const double v = Get(static_cast<const char*>(lanes) + j * es, t);
    bool all;
    switch (op) {
      case ReduceOp::kSum: all = v == nranks; break;
      case ReduceOp::kMax: all = v == 0; break;
      default: all = v == 1; break;  // prod, min, avg
    }
    if (!all) break;
    agreed = size_t{1} << j;
  }
  return agreed;
}

}  // namespace hcomm
