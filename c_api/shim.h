// The C shim's helpers (c_api/ internal), shared by hcomm_c.cc and
// hcomm_c_collectives.cc: the thread's last error, the one place a Status
// becomes an hcomm_status_t, and the argument checks every entry point runs.
#ifndef HCOMM_C_API_SHIM_H_
#define HCOMM_C_API_SHIM_H_

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "c_api/forks.h"
#include "c_api/internal.h"
#include "c_api/request_slots.h"
#include "core/base/interrupt.h"
#include "core/base/status.h"

namespace hcomm_c {

// The calling thread's last error (hcomm_last_error), kept in hcomm_c.cc.
// (A function, not a shared variable: a thread-local variable shared
// between files would show in the library's dynamic symbols.)
std::string& LastError();

inline hcomm_status_t Fail(hcomm_status_t code, const std::string& message) {
  LastError() = message;
  return code;
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD inline hcomm_status_t FailWith(const absl::Status& s) {
  return Fail(static_cast<hcomm_status_t>(hcomm::CodeOf(s)), std::string(s.message()));
}

// The one place where a Status becomes a C status code.
inline hcomm_status_t ToC(const absl::Status& s) {
  if (ABSL_PREDICT_TRUE(s.ok())) return HCOMM_SUCCESS;
  return FailWith(s);
}

inline hcomm_status_t BadArg(const std::string& message) {
  return Fail(HCOMM_ERR_INVALID_ARGUMENT, message);
}

// Runs `body`, turning any escaping exception into HCOMM_ERR_INTERNAL.
template <typename F>
inline hcomm_status_t Guard(const char* fn, F&& body) {
  hcomm::ClearInterrupt();  // a new call: not interrupted (core/base/interrupt.h)
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(HCOMM_ERR_OUT_OF_MEM, absl::StrCat(fn, ": out of memory"));
  } catch (const std::exception& e) {
    return Fail(HCOMM_ERR_INTERNAL, absl::StrCat(fn, ": internal error: ", e.what()));
  } catch (...) {
    return Fail(HCOMM_ERR_INTERNAL, absl::StrCat(fn, ": internal error"));
  }
}

// The value a C caller passed for an enum parameter, read without an
// enum-typed load: in C any int may arrive, but in C++ loading a value
// outside an enum's range (e.g. dtype 99, op -1) is undefined behaviour, so
// enum arguments are validated through this and passed by reference until
// then.
template <typename E>
inline int RawValue(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "the C enums are int-sized");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

inline size_t DtypeSize(int d) {
  switch (d) {
    case HCOMM_INT8:
    case HCOMM_UINT8: return 1;
    case HCOMM_FLOAT16:
    case HCOMM_BFLOAT16: return 2;
    case HCOMM_INT32:
    case HCOMM_UINT32:
    case HCOMM_FLOAT32: return 4;
    case HCOMM_INT64:
    case HCOMM_UINT64:
    case HCOMM_FLOAT64: return 8;
  }
  return 0;
}

// A communicator made before a fork, used in the child (c_api/forks.h).
ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD inline hcomm_status_t ForkedComm(const char* fn,
                                                                    hcomm_comm_t comm) {
  return BadArg(absl::StrCat(
      fn, ": comm was made by process ", comm->pid, ", and this process (", getpid(),
      ") is a fork of it: a fork's child cannot use its parent's communicators (they share its "
      "connections and peers); destroying it here releases nothing the parent uses"));
}

// CheckP2pArgs's checks in order, each with its message: called once one
// of them failed.
ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD inline hcomm_status_t P2pArgsError(
    const char* fn, const hcomm::Communicator& c, const void* buf, size_t count,
    const hcomm_dtype_t& dtype, int peer, int tag, bool is_recv, size_t* bytes) {
  const int rank = c.rank();
  const int size = c.size();
  size_t esize = DtypeSize(RawValue(dtype));
  if (esize == 0) {
    return BadArg(absl::StrCat(fn, " on rank ", rank, ": dtype ", RawValue(dtype),
                               " is not an hcomm_dtype_t"));
  }
  // No buffer can hold more than PTRDIFF_MAX bytes; a larger count would
  // only make the copy run off the end of the caller's memory.
  if (count > static_cast<size_t>(PTRDIFF_MAX) / esize) {
    return BadArg(absl::StrCat(fn, " on rank ", rank, ": count ", count, " is too large"));
  }
  if (buf == nullptr && count > 0) {
    return BadArg(absl::StrCat(fn, " on rank ", rank, ": buf is NULL with count ", count));
  }
  bool any_ok = is_recv && peer == HCOMM_ANY_SOURCE;
  if (!any_ok && (peer < 0 || peer >= size)) {
    return BadArg(absl::StrCat(fn, " on rank ", rank, ": peer ", peer,
                               " is out of range for a communicator of ", size, " ranks",
                               is_recv ? " (or HCOMM_ANY_SOURCE)" : ""));
  }
  bool any_tag_ok = is_recv && tag == HCOMM_ANY_TAG;
  if (tag < 0 && !any_tag_ok) {
    return BadArg(absl::StrCat(fn, " on rank ", rank, ": tag ", tag, " is negative",
                               is_recv ? " (tags are >= 0, or HCOMM_ANY_TAG)" : " (tags are >= 0)"));
  }
  *bytes = count * esize;
  return HCOMM_SUCCESS;
}

// The arguments of a point-to-point call on `c`. On success *bytes is the
// message size in bytes. Inline, with every check in one test; a failure
// goes to P2pArgsError for its message.
inline hcomm_status_t CheckP2pArgs(const char* fn, const hcomm::Communicator& c, const void* buf,
                                   size_t count, const hcomm_dtype_t& dtype, int peer, int tag,
                                   bool is_recv, size_t* bytes) {
  const size_t esize = DtypeSize(RawValue(dtype));
  const int size = c.size();
  const bool peer_ok = (is_recv && peer == HCOMM_ANY_SOURCE) || (peer >= 0 && peer < size);
  const bool tag_ok = tag >= 0 || (is_recv && tag == HCOMM_ANY_TAG);
  if (ABSL_PREDICT_TRUE(esize != 0 && count <= static_cast<size_t>(PTRDIFF_MAX) / esize &&
                        (buf != nullptr || count == 0) && peer_ok && tag_ok)) {
    *bytes = count * esize;
    return HCOMM_SUCCESS;
  }
  return P2pArgsError(fn, c, buf, count, dtype, peer, tag, is_recv, bytes);
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD inline hcomm_status_t P2pCommError(const char* fn,
                                                                       hcomm_comm_t comm) {
  if (comm == nullptr || !comm->impl) {
    return BadArg(absl::StrCat(fn, ": comm is NULL or destroyed"));
  }
  return ForkedComm(fn, comm);
}

// Checks shared by every point-to-point entry point: the communicator,
// then CheckP2pArgs.
inline hcomm_status_t CheckP2p(const char* fn, const void* buf, size_t count,
                               const hcomm_dtype_t& dtype, int peer, int tag, hcomm_comm_t comm,
                               bool is_recv, size_t* bytes) {
  if (ABSL_PREDICT_FALSE(comm == nullptr || !comm->impl || comm->forks != hcomm::ForkCount())) {
    return P2pCommError(fn, comm);
  }
  return CheckP2pArgs(fn, *comm->impl, buf, count, dtype, peer, tag, is_recv, bytes);
}

inline hcomm_status_t NewRequest(std::shared_ptr<hcomm::Request> r, const hcomm::Communicator& comm,
                          hcomm_request_t* out) {
  hcomm_request_s* slot = hcomm_c::RequestSlots::Get().Take();
  if (slot == nullptr) {
    if (!r->done.load(std::memory_order_acquire)) comm.request_driver()->Release(r);
    return Fail(HCOMM_ERR_OUT_OF_MEM, "out of request handles (too many requests not freed)");
  }
  slot->impl = std::move(r);
  slot->driver = comm.request_driver();
  slot->timeout = comm.timeout();
  slot->world_to_group = comm.world_to_group();
  slot->forks = hcomm::ForkCount();
  slot->pid = getpid();
  *out = slot;
  return HCOMM_SUCCESS;
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD inline hcomm_status_t BadRequest(const std::string& what,
                                                                    hcomm_request_t req) {
  if (req == nullptr) return BadArg(absl::StrCat(what, " is NULL"));
  if (!hcomm_c::RequestSlots::Get().Owns(req)) {
    return BadArg(absl::StrCat(what, " is not a request (no hcomm_isend, hcomm_irecv or ",
                               "hcomm_iallreduce made one at this address)"));
  }
  if (req->live.load(std::memory_order_acquire) && req->forks != hcomm::ForkCount()) {
    return BadArg(absl::StrCat(what, " was made by process ", req->pid, ", and this process (",
                               getpid(), ") is a fork of it: a fork's child cannot wait for its "
                               "parent's requests (hcomm_request_free lets it go here)"));
  }
  return BadArg(absl::StrCat(what, " was freed already (hcomm_request_free)"));
}

// Whether a request handle is one this library made and the caller has not
// freed.
inline bool LiveRequest(hcomm_request_t req) {
  return req != nullptr && hcomm_c::RequestSlots::Get().Owns(req) &&
         req->live.load(std::memory_order_acquire);
}

// Whether the caller may use it: a live one made in this process, not
// before a fork (c_api/forks.h).
inline bool UsableRequest(hcomm_request_t req) {
  return LiveRequest(req) && req->forks == hcomm::ForkCount();
}

inline hcomm_status_t CheckRequest(const char* fn, hcomm_request_t req) {
  if (ABSL_PREDICT_TRUE(UsableRequest(req))) return HCOMM_SUCCESS;
  return BadRequest(absl::StrCat(fn, ": req"), req);
}

// The checks of the calls below inline into each call at a few
// instructions; a failed one builds its message out of line.
ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD inline hcomm_status_t NullComm(const char* fn) {
  return BadArg(absl::StrCat(fn, ": comm is NULL or destroyed"));
}

// A communicator handle that is neither NULL nor destroyed; it may be one a
// fork's parent made (c_api/forks.h). Enough for the calls that only read
// what the handle holds (rank, size, transport).
inline hcomm_status_t CheckCommHandle(const char* fn, hcomm_comm_t comm) {
  if (ABSL_PREDICT_FALSE(comm == nullptr || !comm->impl)) return NullComm(fn);
  return HCOMM_SUCCESS;
}

// A communicator this process may use: not one made before a fork.
inline hcomm_status_t CheckComm(const char* fn, hcomm_comm_t comm) {
  const hcomm_status_t st = CheckCommHandle(fn, comm);
  if (ABSL_PREDICT_FALSE(st != HCOMM_SUCCESS)) return st;
  if (ABSL_PREDICT_FALSE(comm->forks != hcomm::ForkCount())) return ForkedComm(fn, comm);
  return HCOMM_SUCCESS;
}

#define HCOMM_C_CHECK(expr)                       \
  do {                                            \
    hcomm_status_t hcomm_c_st_ = (expr);          \
    if (hcomm_c_st_ != HCOMM_SUCCESS) return hcomm_c_st_; \
  } while (0)

constexpr int kNoOp = INT32_MIN;  // CheckTypes: the call takes no reduce op

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD inline hcomm_status_t BadTypes(
    const char* fn, const hcomm::Communicator& c, int dtype, int op_value) {
  if (DtypeSize(dtype) == 0) {
    return BadArg(absl::StrCat(fn, " on rank ", c.rank(), ": dtype ", dtype,
                               " is not an hcomm_dtype_t"));
  }
  return BadArg(absl::StrCat(fn, " on rank ", c.rank(), ": op ", op_value,
                             " is not an hcomm_reduce_op_t"));
}

// Checks a collective's dtype (and op, unless op_value is kNoOp) and returns
// the element size in *esize.
inline hcomm_status_t CheckTypes(const char* fn, const hcomm::Communicator& c,
                                 const hcomm_dtype_t& dtype, int op_value, size_t* esize) {
  *esize = DtypeSize(RawValue(dtype));
  if (ABSL_PREDICT_FALSE(*esize == 0 ||
                         (op_value != kNoOp && !hcomm::IsValidReduceOp(op_value)))) {
    return BadTypes(fn, c, RawValue(dtype), op_value);
  }
  return HCOMM_SUCCESS;
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD inline hcomm_status_t BadBuf(
    const char* fn, const hcomm::Communicator& c, const char* name, size_t count,
    bool too_large) {
  if (too_large) {
    return BadArg(absl::StrCat(fn, " on rank ", c.rank(), ": count ", count, " is too large"));
  }
  return BadArg(absl::StrCat(fn, " on rank ", c.rank(), ": ", name, " is NULL with count ", count));
}

// A buffer of `count` elements (times `mult`) must exist when count > 0.
inline hcomm_status_t CheckBuf(const char* fn, const hcomm::Communicator& c, const void* buf,
                               const char* name, size_t count, size_t esize, size_t mult = 1) {
  size_t total = 0;
  const bool too_large = __builtin_mul_overflow(count, esize * mult, &total) ||
                         total > static_cast<size_t>(PTRDIFF_MAX);
  if (ABSL_PREDICT_FALSE(too_large || (buf == nullptr && count > 0))) {
    return BadBuf(fn, c, name, count, too_large);
  }
  return HCOMM_SUCCESS;
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD inline hcomm_status_t BadRoot(
    const char* fn, const hcomm::Communicator& c, int root) {
  return BadArg(absl::StrCat(fn, " on rank ", c.rank(), ": root ", root,
                             " is out of range for a communicator of ", c.size(), " ranks"));
}

inline hcomm_status_t CheckRoot(const char* fn, const hcomm::Communicator& c, int root) {
  if (ABSL_PREDICT_FALSE(root < 0 || root >= c.size())) return BadRoot(fn, c, root);
  return HCOMM_SUCCESS;
}

// The arguments of collective `kind` (an hcomm_op_kind_t from
// HCOMM_OP_ALLREDUCE on) on `c`, checked in the order and with the
// messages of its blocking call. `op_value` is the reduce op's raw value
// (ignored by kinds without one); `buf_name` names BROADCAST's one buffer,
// which is recvbuf. With a constant kind it inlines to that call's checks.
inline hcomm_status_t CheckCollective(const char* fn, const hcomm::Communicator& c, int kind,
                                      const void* sendbuf, const void* recvbuf, size_t count,
                                      const hcomm_dtype_t& dtype, int op_value, int root,
                                      const char* buf_name = "buf") {
  size_t es = 0;
  const bool at_root = c.rank() == root;
  const size_t n = static_cast<size_t>(c.size());
  switch (kind) {
    case HCOMM_OP_ALLREDUCE:
      HCOMM_C_CHECK(CheckTypes(fn, c, dtype, op_value, &es));
      HCOMM_C_CHECK(CheckBuf(fn, c, sendbuf, "sendbuf", count, es));
      return CheckBuf(fn, c, recvbuf, "recvbuf", count, es);
    case HCOMM_OP_BROADCAST:
      HCOMM_C_CHECK(CheckTypes(fn, c, dtype, kNoOp, &es));
      HCOMM_C_CHECK(CheckRoot(fn, c, root));
      return CheckBuf(fn, c, recvbuf, buf_name, count, es);
    case HCOMM_OP_REDUCE:
      HCOMM_C_CHECK(CheckTypes(fn, c, dtype, op_value, &es));
      HCOMM_C_CHECK(CheckRoot(fn, c, root));
      HCOMM_C_CHECK(CheckBuf(fn, c, sendbuf, "sendbuf", count, es));
      return at_root ? CheckBuf(fn, c, recvbuf, "recvbuf (at the root)", count, es)
                     : HCOMM_SUCCESS;
    case HCOMM_OP_ALLGATHER:
      HCOMM_C_CHECK(CheckTypes(fn, c, dtype, kNoOp, &es));
      HCOMM_C_CHECK(CheckBuf(fn, c, sendbuf, "sendbuf", count, es));
      return CheckBuf(fn, c, recvbuf, "recvbuf", count, es, n);
    case HCOMM_OP_REDUCE_SCATTER:
      HCOMM_C_CHECK(CheckTypes(fn, c, dtype, op_value, &es));
      HCOMM_C_CHECK(CheckBuf(fn, c, sendbuf, "sendbuf", count, es, n));
      return CheckBuf(fn, c, recvbuf, "recvbuf", count, es);
    case HCOMM_OP_ALLTOALL:
      HCOMM_C_CHECK(CheckTypes(fn, c, dtype, kNoOp, &es));
      HCOMM_C_CHECK(CheckBuf(fn, c, sendbuf, "sendbuf", count, es, n));
      return CheckBuf(fn, c, recvbuf, "recvbuf", count, es, n);
    case HCOMM_OP_GATHER:
      HCOMM_C_CHECK(CheckTypes(fn, c, dtype, kNoOp, &es));
      HCOMM_C_CHECK(CheckRoot(fn, c, root));
      HCOMM_C_CHECK(CheckBuf(fn, c, sendbuf, "sendbuf", count, es));
      return at_root ? CheckBuf(fn, c, recvbuf, "recvbuf (at the root)", count, es, n)
                     : HCOMM_SUCCESS;
    case HCOMM_OP_SCATTER:
      HCOMM_C_CHECK(CheckTypes(fn, c, dtype, kNoOp, &es));
      HCOMM_C_CHECK(CheckRoot(fn, c, root));
      if (at_root) HCOMM_C_CHECK(CheckBuf(fn, c, sendbuf, "sendbuf (at the root)", count, es, n));
      return CheckBuf(fn, c, recvbuf, "recvbuf", count, es);
    case HCOMM_OP_BARRIER:
      return HCOMM_SUCCESS;
  }
  return BadArg(absl::StrCat(fn, " on rank ", c.rank(), ": kind ", kind,
                             " is not a collective hcomm_op_kind_t"));
}

// A collective `op` refused with `st` once `comm` itself checked out: the
// call still takes its turn among the communicator's collectives
// (Communicator::RejectCollective), so that the other ranks' calls of it
// fail at once and later calls stay paired. Returns `st`.
ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD inline hcomm_status_t Refused(hcomm_comm_t comm,
                                                                  hcomm::CollectiveOp op,
                                                                  hcomm_status_t st) {
  comm->impl->RejectCollective(op);
  return st;
}

// A collective's check of its arguments (see Refused).
#define HCOMM_C_CHECK_ARGS(op, expr)                                               \
  do {                                                                            \
    hcomm_status_t hcomm_c_st_ = (expr);                                          \
    if (hcomm_c_st_ != HCOMM_SUCCESS) {                                           \
      return Refused(comm, hcomm::CollectiveOp::op, hcomm_c_st_);                 \
    }                                                                             \
  } while (0)

inline hcomm::DataType DT(hcomm_dtype_t d) { return static_cast<hcomm::DataType>(d); }
inline hcomm::ReduceOp OP(hcomm_reduce_op_t o) { return static_cast<hcomm::ReduceOp>(o); }

// Destroyed handles keep their few bytes (and are never reused), so that a
// later call with one is told so (INVALID_ARGUMENT, as API.md says) instead
// of reading freed memory; what they held is released. They are listed
// (hcomm_c::Keep), not lost: kept on purpose, and not leaks to a leak
// checker.
inline void KeepDestroyed(const void* handle) { hcomm_c::Keep(handle); }

}  // namespace hcomm_c

#endif  // HCOMM_C_API_SHIM_H_
