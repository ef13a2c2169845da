// Enum helpers and the run-time dispatch to the kernel tables of
// reduce_scalar.cc and reduce_simd.cc (see reduce.h).
#include "algorithms/kernels/reduce.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace hcomm {

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::kInt8:
      return "int8";
    case DataType::kUint8:
      return "uint8";
    case DataType::kInt32:
      return "int32";
    case DataType::kUint32:
      return "uint32";
    case DataType::kInt64:
      return "int64";
    case DataType::kUint64:
      return "uint64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
  }
  return "invalid";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
  }
  return "invalid";
}

namespace reduce_internal {
namespace {

enum class Level : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

// Whether this CPU (and OS: libgcc's cpu model checks XGETBV for the YMM and
// ZMM state) can run the level. Checked before touching a vector table.
bool CpuSupports(Level level) {
  switch (level) {
    case Level::kScalar:
      return true;
    case Level::kAvx2:
#if defined(__x86_64__) || defined(__i386__)
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
#else
      return false;
#endif
    case Level::kAvx512:
#if defined(__x86_64__) || defined(__i386__)
      __builtin_cpu_init();
      return CpuSupports(Level::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
#else
      return false;
#endif
  }
  return false;
}

// The table of `level` if this build has it and the CPU can run it.
const KernelTable* UsableTable(Level level) {
  if (!CpuSupports(level)) return nullptr;
  switch (level) {
    case Level::kScalar:
      return ScalarKernels();
    case Level::kAvx2:
      return Avx2Kernels();
    case Level::kAvx512:
      return Avx512Kernels();
  }
  return nullptr;
}

bool ParseLevel(const char* name, Level* out) {
  if (name == nullptr) return false;
  if (std::strcmp(name, "scalar") == 0) {
    *out = Level::kScalar;
  } else if (std::strcmp(name, "avx2") == 0) {
    *out = Level::kAvx2;
  } else if (std::strcmp(name, "avx512") == 0) {
    *out = Level::kAvx512;
  } else {
    return false;
  }
  return true;
}

// The table every call uses; null until the first call picks one.
std::atomic<const KernelTable*> g_active{nullptr};

const KernelTable* PickOnce() {
  // A function-local static: the environment is read exactly once.
  static const KernelTable* const chosen =
      SelectKernels(std::getenv("HCOMM_KERNELS"));
  const KernelTable* expected = nullptr;
  // A ForceKernelIsaForTesting that ran first wins.
  g_active.compare_exchange_strong(expected, chosen,
                                   std::memory_order_acq_rel);
  return g_active.load(std::memory_order_acquire);
}

inline const KernelTable* Active() {
  const KernelTable* t = g_active.load(std::memory_order_acquire);
  return t != nullptr ? t : PickOnce();
}

}  // namespace

const KernelTable* SelectKernels(const char* requested) {
  Level cap = Level::kAvx512;
  if (!ParseLevel(requested, &cap)) cap = Level::kAvx512;
  for (int l = static_cast<int>(cap); l > 0; --l) {
    if (const KernelTable* t = UsableTable(static_cast<Level>(l))) return t;
  }
  return ScalarKernels();
}

void ManyMode(ReduceOp op, int divisor, int* mode, float* k) {
  *mode = 0;
  *k = 1;
  if (op != ReduceOp::kAvg || divisor <= 1) return;
  // A power of two divides exactly as a multiply by its reciprocal.
  const bool pow2 = (divisor & (divisor - 1)) == 0;
  *mode = pow2 ? 1 : 2;
  *k = pow2 ? 1.0f / static_cast<float>(divisor) : static_cast<float>(divisor);
}

}  // namespace reduce_internal

void Reduce2(void* dst, const void* a, const void* b, size_t count,
             DataType t, ReduceOp op) {
  if (count == 0) return;
  const int ti = static_cast<int>(t);
  int oi = static_cast<int>(op);
  if (!IsValidDataType(ti) || !IsValidReduceOp(oi)) return;
  if (op == ReduceOp::kAvg) oi = static_cast<int>(ReduceOp::kSum);
  reduce_internal::Active()->binary[ti][oi](dst, a, b, count);
}

void ReduceInto(void* dst, const void* src, size_t count, DataType t,
                ReduceOp op) {
  Reduce2(dst, dst, src, count, t, op);
}

void DivideBy(void* dst, size_t count, DataType t, int n) {
  if (count == 0 || n < 1) return;
  const int ti = static_cast<int>(t);
  if (!IsValidDataType(ti)) return;
  reduce_internal::Active()->divide[ti](dst, count, n);
}

namespace {
// Row of the 16-bit float types in KernelTable::widen / narrow; -1 otherwise.
int HalfRow(DataType t) {
  return t == DataType::kFloat16 ? 0 : t == DataType::kBFloat16 ? 1 : -1;
}
}  // namespace

void AverageOfTwo(void* dst, const void* a, const void* b, size_t count, DataType t) {
  const int row = t == DataType::kFloat32 ? 0 : t == DataType::kFloat64 ? 1 : -1;
  if (count == 0 || row < 0) return;
  reduce_internal::Active()->average2[row](dst, a, b, count);
}

void ReduceHalfParts(void* dst, const void* const* parts, int n, size_t count, DataType t,
                     ReduceOp op, int divisor) {
  const int row = HalfRow(t), oi = static_cast<int>(op);
  if (count == 0 || row < 0 || n < 1 || n > kMaxHalfParts || divisor < 1 ||
      !IsValidReduceOp(oi)) {
    return;
  }
  int mode;
  float k;
  reduce_internal::ManyMode(op, divisor, &mode, &k);
  const int kop = op == ReduceOp::kAvg ? static_cast<int>(ReduceOp::kSum) : oi;
  reduce_internal::Active()->many[row][kop](dst, parts, n, count, mode, k);
}

void WidenToFloat32(float* dst, const void* src, size_t count, DataType t) {
  const int row = HalfRow(t);
  if (count == 0 || row < 0) return;
  reduce_internal::Active()->widen[row](dst, src, count);
}

void NarrowFromFloat32(void* dst, const float* src, size_t count, DataType t) {
  const int row = HalfRow(t);
  if (count == 0 || row < 0) return;
  reduce_internal::Active()->narrow[row](dst, src, count);
}

const char* KernelIsa() { return reduce_internal::Active()->isa; }

bool ForceKernelIsaForTesting(const char* isa) {
  reduce_internal::Level level;
  if (!reduce_internal::ParseLevel(isa, &level)) return false;
  const reduce_internal::KernelTable* t = reduce_internal::UsableTable(level);
  if (t == nullptr) return false;
  reduce_internal::g_active.store(t, std::memory_order_release);
  return true;
}

}  // namespace hcomm
