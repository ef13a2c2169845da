// libhcomm_c: argument checks, then the C++ core, then one status mapping.
// No exception crosses this boundary.

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
#include "c_api/interrupt_hook.h"
#include "c_api/internal.h"
#include "c_api/request_slots.h"
#include "core/base/interrupt.h"
#include "core/base/status.h"

static_assert(HCOMM_ERR_INTERNAL == static_cast<int>(hcomm::ErrorCode::kInternal),
              "hcomm_status_t and hcomm::ErrorCode must agree");
static_assert(HCOMM_ERR_PEER_FAILURE == static_cast<int>(hcomm::ErrorCode::kPeerFailure),
              "hcomm_status_t and hcomm::ErrorCode must agree");
static_assert(HCOMM_FLOAT64 == static_cast<int>(hcomm::DataType::kFloat64) &&
                  HCOMM_BFLOAT16 == static_cast<int>(hcomm::DataType::kBFloat16) &&
                  HCOMM_INT8 == static_cast<int>(hcomm::DataType::kInt8),
              "hcomm_dtype_t and hcomm::DataType must agree");
static_assert(HCOMM_AVG == static_cast<int>(hcomm::ReduceOp::kAvg) &&
                  HCOMM_MAX == static_cast<int>(hcomm::ReduceOp::kMax),
              "hcomm_reduce_op_t and hcomm::ReduceOp must agree");

namespace {

thread_local std::string last_error;

hcomm_status_t Fail(hcomm_status_t code, const std::string& message) {
  last_error = message;
  return code;
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD hcomm_status_t FailWith(const absl::Status& s) {
  return Fail(static_cast<hcomm_status_t>(hcomm::CodeOf(s)), std::string(s.message()));
}

// The one place where a Status becomes a C status code.
inline hcomm_status_t ToC(const absl::Status& s) {
  if (ABSL_PREDICT_TRUE(s.ok())) return HCOMM_SUCCESS;
  return FailWith(s);
}

hcomm_status_t BadArg(const std::string& message) {
  return Fail(HCOMM_ERR_INVALID_ARGUMENT, message);
}

// Runs `body`, turning any escaping exception into HCOMM_ERR_INTERNAL.
template <typename F>
hcomm_status_t Guard(const char* fn, F&& body) {
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
int RawValue(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "the C enums are int-sized");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

size_t DtypeSize(int d) {
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
ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD hcomm_status_t ForkedComm(const char* fn,
                                                                    hcomm_comm_t comm) {
  return BadArg(absl::StrCat(
      fn, ": comm was made by process ", comm->pid, ", and this process (", getpid(),
      ") is a fork of it: a fork's child cannot use its parent's communicators (they share its "
      "connections and peers); destroying it here releases nothing the parent uses"));
}

// CheckP2p's checks in order, each with its message: called once one of
// them failed.
ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD hcomm_status_t P2pError(
    const char* fn, const void* buf, size_t count, const hcomm_dtype_t& dtype, int peer, int tag,
    hcomm_comm_t comm, bool is_recv, size_t* bytes) {
  if (comm == nullptr || !comm->impl) {
    return BadArg(absl::StrCat(fn, ": comm is NULL or destroyed"));
  }
  if (comm->forks != hcomm::ForkCount()) return ForkedComm(fn, comm);
  const int rank = comm->impl->rank();
  const int size = comm->impl->size();
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

// Checks shared by every point-to-point entry point. On success *bytes is
// the message size in bytes. Inline, with every check in one test; a
// failure goes to P2pError for its message.
inline hcomm_status_t CheckP2p(const char* fn, const void* buf, size_t count,
                               const hcomm_dtype_t& dtype, int peer, int tag, hcomm_comm_t comm,
                               bool is_recv, size_t* bytes) {
  if (ABSL_PREDICT_TRUE(comm != nullptr && comm->impl && comm->forks == hcomm::ForkCount())) {
    const size_t esize = DtypeSize(RawValue(dtype));
    const int size = comm->impl->size();
    const bool peer_ok = (is_recv && peer == HCOMM_ANY_SOURCE) || (peer >= 0 && peer < size);
    const bool tag_ok = tag >= 0 || (is_recv && tag == HCOMM_ANY_TAG);
    if (ABSL_PREDICT_TRUE(esize != 0 && count <= static_cast<size_t>(PTRDIFF_MAX) / esize &&
                          (buf != nullptr || count == 0) && peer_ok && tag_ok)) {
      *bytes = count * esize;
      return HCOMM_SUCCESS;
    }
  }
  return P2pError(fn, buf, count, dtype, peer, tag, comm, is_recv, bytes);
}

hcomm_status_t NewRequest(std::shared_ptr<hcomm::Request> r, const hcomm::Communicator& comm,
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

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD hcomm_status_t BadRequest(const std::string& what,
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
ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD hcomm_status_t NullComm(const char* fn) {
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

constexpr int kNoOp = INT32_MIN;  // CheckTypes: the call takes no reduce op

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD hcomm_status_t BadTypes(const char* fn,
                                                                   hcomm_comm_t comm,
                                                                   int dtype, int op_value) {
  if (DtypeSize(dtype) == 0) {
    return BadArg(absl::StrCat(fn, " on rank ", comm->impl->rank(), ": dtype ", dtype,
                               " is not an hcomm_dtype_t"));
  }
  return BadArg(absl::StrCat(fn, " on rank ", comm->impl->rank(), ": op ", op_value,
                             " is not an hcomm_reduce_op_t"));
}

// Checks a collective's dtype (and op, unless op_value is kNoOp) and returns
// the element size in *esize.
inline hcomm_status_t CheckTypes(const char* fn, hcomm_comm_t comm, const hcomm_dtype_t& dtype,
                                 int op_value, size_t* esize) {
  *esize = DtypeSize(RawValue(dtype));
  if (ABSL_PREDICT_FALSE(*esize == 0 ||
                         (op_value != kNoOp && !hcomm::IsValidReduceOp(op_value)))) {
    return BadTypes(fn, comm, RawValue(dtype), op_value);
  }
  return HCOMM_SUCCESS;
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD hcomm_status_t BadBuf(const char* fn,
                                                                 hcomm_comm_t comm,
                                                                 const char* name, size_t count,
                                                                 bool too_large) {
  if (too_large) {
    return BadArg(absl::StrCat(fn, " on rank ", comm->impl->rank(), ": count ", count,
                               " is too large"));
  }
  return BadArg(absl::StrCat(fn, " on rank ", comm->impl->rank(), ": ", name,
                             " is NULL with count ", count));
}

// A buffer of `count` elements (times `mult`) must exist when count > 0.
inline hcomm_status_t CheckBuf(const char* fn, hcomm_comm_t comm, const void* buf,
                               const char* name, size_t count, size_t esize, size_t mult = 1) {
  size_t total = 0;
  const bool too_large = __builtin_mul_overflow(count, esize * mult, &total) ||
                         total > static_cast<size_t>(PTRDIFF_MAX);
  if (ABSL_PREDICT_FALSE(too_large || (buf == nullptr && count > 0))) {
    return BadBuf(fn, comm, name, count, too_large);
  }
  return HCOMM_SUCCESS;
}

hcomm_status_t CheckRoot(const char* fn, hcomm_comm_t comm, int root) {
  if (root < 0 || root >= comm->impl->size()) {
    return BadArg(absl::StrCat(fn, " on rank ", comm->impl->rank(), ": root ", root,
                               " is out of range for a communicator of ", comm->impl->size(),
                               " ranks"));
  }
  return HCOMM_SUCCESS;
}

#define HCOMM_C_CHECK(expr)                       \
  do {                                            \
    hcomm_status_t hcomm_c_st_ = (expr);          \
    if (hcomm_c_st_ != HCOMM_SUCCESS) return hcomm_c_st_; \
  } while (0)

// A collective `op` refused with `st` once `comm` itself checked out: the
// call still takes its turn among the communicator's collectives
// (Communicator::RejectCollective), so that the other ranks' calls of it
// fail at once and later calls stay paired. Returns `st`.
ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD hcomm_status_t Refused(hcomm_comm_t comm,
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

hcomm::DataType DT(hcomm_dtype_t d) { return static_cast<hcomm::DataType>(d); }
hcomm::ReduceOp OP(hcomm_reduce_op_t o) { return static_cast<hcomm::ReduceOp>(o); }

// Destroyed handles keep their few bytes (and are never reused), so that a
// later call with one is told so (INVALID_ARGUMENT, as API.md says) instead
// of reading freed memory; what they held is released. They are listed
// (hcomm_c::Keep), not lost: kept on purpose, and not leaks to a leak
// checker.
void KeepDestroyed(const void* handle) { hcomm_c::Keep(handle); }

}  // namespace

extern "C" {

const char* hcomm_status_string(hcomm_status_t status) {
  return hcomm::ErrorCodeName(static_cast<hcomm::ErrorCode>(RawValue(status)));
}

const char* hcomm_last_error(void) { return last_error.c_str(); }

void hcomm_internal_set_interrupt_check(int (*check)(void)) { hcomm::SetInterruptCheck(check); }

hcomm_status_t hcomm_version(int* major, int* minor, int* patch) {
  if (major) *major = HCOMM_VERSION_MAJOR;
  if (minor) *minor = HCOMM_VERSION_MINOR;
  if (patch) *patch = HCOMM_VERSION_PATCH;
  return HCOMM_SUCCESS;
}

hcomm_status_t hcomm_config_create(hcomm_config_t* out) {
  return Guard(__func__, [&] {
    if (out == nullptr) return BadArg("hcomm_config_create: out is NULL");
    *out = new hcomm_config_s;
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_config_set(hcomm_config_t cfg, const char* key, const char* value) {
  return Guard(__func__, [&] {
    if (cfg == nullptr || cfg->destroyed) {
      return BadArg("hcomm_config_set: cfg is NULL or destroyed");
    }
    if (key == nullptr) return BadArg("hcomm_config_set: key is NULL");
    if (value == nullptr) {
      return BadArg(absl::StrCat("hcomm_config_set: value for key '", key, "' is NULL"));
    }
    return ToC(cfg->impl.Set(key, value));
  });
}

hcomm_status_t hcomm_config_destroy(hcomm_config_t cfg) {
  if (cfg == nullptr) return HCOMM_SUCCESS;
  return Guard(__func__, [&] {
    if (cfg->destroyed) return BadArg("hcomm_config_destroy: cfg was destroyed already");
    cfg->impl = hcomm::Config();
    cfg->destroyed = true;
    KeepDestroyed(cfg);
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_comm_init(hcomm_config_t cfg, hcomm_comm_t* out) {
  return Guard(__func__, [&] {
    if (out == nullptr) return BadArg("hcomm_comm_init: out is NULL");
    *out = nullptr;
    if (cfg != nullptr && cfg->destroyed) return BadArg("hcomm_comm_init: cfg was destroyed");
    hcomm::Config empty;
    const hcomm::Config& config = cfg != nullptr ? cfg->impl : empty;
    auto opts = config.Resolve();
    if (!opts.ok()) return ToC(hcomm::Annotate(opts.status(), "hcomm_comm_init"));
    auto comm = hcomm::Communicator::Init(*opts);
    if (!comm.ok()) return ToC(hcomm::Annotate(comm.status(), "hcomm_comm_init"));
    *out = new hcomm_comm_s{std::move(comm).value()};
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_comm_rank(hcomm_comm_t comm, int* rank) {
  HCOMM_C_CHECK(CheckCommHandle("hcomm_comm_rank", comm));
  if (rank == nullptr) return BadArg("hcomm_comm_rank: rank is NULL");
  *rank = comm->impl->rank();
  return HCOMM_SUCCESS;
}

hcomm_status_t hcomm_comm_size(hcomm_comm_t comm, int* size) {
  HCOMM_C_CHECK(CheckCommHandle("hcomm_comm_size", comm));
  if (size == nullptr) return BadArg("hcomm_comm_size: size is NULL");
  *size = comm->impl->size();
  return HCOMM_SUCCESS;
}

hcomm_status_t hcomm_comm_set(hcomm_comm_t comm, const char* key, const char* value) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckComm("hcomm_comm_set", comm));
    if (key == nullptr) return BadArg("hcomm_comm_set: key is NULL");
    if (value == nullptr) {
      return BadArg(absl::StrCat("hcomm_comm_set: value for key '", key, "' is NULL"));
    }
    return ToC(comm->impl->SetOption(key, value));
  });
}

hcomm_status_t hcomm_comm_transport(hcomm_comm_t comm, int peer, const char** name) {
  HCOMM_C_CHECK(CheckCommHandle("hcomm_comm_transport", comm));
  if (name == nullptr) return BadArg("hcomm_comm_transport: name is NULL");
  if (peer < 0 || peer >= comm->impl->size()) {
    return BadArg(absl::StrCat("hcomm_comm_transport on rank ", comm->impl->rank(), ": peer ",
                               peer, " is out of range for a communicator of ",
                               comm->impl->size(), " ranks"));
  }
  *name = comm->impl->TransportTo(peer);
  return HCOMM_SUCCESS;
}

hcomm_status_t hcomm_comm_abort(hcomm_comm_t comm) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckComm("hcomm_comm_abort", comm));
    comm->impl->Abort();
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_comm_destroy(hcomm_comm_t comm) {
  if (comm == nullptr) return HCOMM_SUCCESS;
  return Guard(__func__, [&] {
    if (!comm->impl) return BadArg("hcomm_comm_destroy: comm was destroyed already");
    if (comm->forks != hcomm::ForkCount()) {
      // A fork's child letting go of its parent's communicator: ending it
      // here would tell the parent's peers that the parent left, and wait
      // for threads that only the parent has. Kept as it is instead.
      hcomm_c::Keep(comm->impl.release());
      KeepDestroyed(comm);
      return HCOMM_SUCCESS;
    }
    absl::Status s = comm->impl->Destroy();
    comm->impl.reset();  // the handle stays, destroyed (see KeepDestroyed)
    KeepDestroyed(comm);
    return ToC(s);
  });
}

hcomm_status_t hcomm_send(const void* buf, size_t count, hcomm_dtype_t dtype, int peer, int tag,
                          hcomm_comm_t comm) {
  return Guard(__func__, [&] {
    size_t bytes = 0;
    hcomm_status_t st = CheckP2p("hcomm_send", buf, count, dtype, peer, tag, comm, false, &bytes);
    if (st != HCOMM_SUCCESS) return st;
    return ToC(comm->impl->Send(buf, bytes, DtypeSize(dtype), peer, tag));
  });
}

hcomm_status_t hcomm_recv(void* buf, size_t count, hcomm_dtype_t dtype, int peer, int tag,
                          hcomm_comm_t comm) {
  return Guard(__func__, [&] {
    size_t bytes = 0;
    hcomm_status_t st = CheckP2p("hcomm_recv", buf, count, dtype, peer, tag, comm, true, &bytes);
    if (st != HCOMM_SUCCESS) return st;
    return ToC(comm->impl->Recv(buf, bytes, DtypeSize(dtype), peer, tag));
  });
}

hcomm_status_t hcomm_isend(const void* buf, size_t count, hcomm_dtype_t dtype, int peer, int tag,
                           hcomm_comm_t comm, hcomm_request_t* req) {
  return Guard(__func__, [&] {
    size_t bytes = 0;
    hcomm_status_t st = CheckP2p("hcomm_isend", buf, count, dtype, peer, tag, comm, false, &bytes);
    if (st != HCOMM_SUCCESS) return st;
    if (req == nullptr) return BadArg("hcomm_isend: req is NULL");
    auto r = comm->impl->Isend(buf, bytes, DtypeSize(dtype), peer, tag);
    if (!r.ok()) return ToC(r.status());
    return NewRequest(std::move(r).value(), *comm->impl, req);
  });
}

hcomm_status_t hcomm_irecv(void* buf, size_t count, hcomm_dtype_t dtype, int peer, int tag,
                           hcomm_comm_t comm, hcomm_request_t* req) {
  return Guard(__func__, [&] {
    size_t bytes = 0;
    hcomm_status_t st = CheckP2p("hcomm_irecv", buf, count, dtype, peer, tag, comm, true, &bytes);
    if (st != HCOMM_SUCCESS) return st;
    if (req == nullptr) return BadArg("hcomm_irecv: req is NULL");
    auto r = comm->impl->Irecv(buf, bytes, DtypeSize(dtype), peer, tag);
    if (!r.ok()) return ToC(r.status());
    return NewRequest(std::move(r).value(), *comm->impl, req);
  });
}

hcomm_status_t hcomm_wait(hcomm_request_t req) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckRequest("hcomm_wait", req));
    hcomm::Request* r = req->impl.get();
    if (r->done.load(std::memory_order_acquire)) return ToC(r->status);
    return ToC(req->driver->Wait(r, absl::Now() + req->timeout));
  });
}

hcomm_status_t hcomm_test(hcomm_request_t req, int* done) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckRequest("hcomm_test", req));
    if (done == nullptr) return BadArg("hcomm_test: done is NULL");
    hcomm::Request* r = req->impl.get();
    bool d = r->done.load(std::memory_order_acquire) || req->driver->Test(r);
    *done = d ? 1 : 0;
    return d ? ToC(r->status) : HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_waitall(int n, hcomm_request_t* reqs) {
  return Guard(__func__, [&] {
    if (n < 0) return BadArg(absl::StrCat("hcomm_waitall: n is ", n));
    if (n > 0 && reqs == nullptr) return BadArg("hcomm_waitall: reqs is NULL");
    for (int i = 0; i < n; ++i) {
      if (ABSL_PREDICT_FALSE(!UsableRequest(reqs[i]))) {
        return BadRequest(absl::StrCat("hcomm_waitall: reqs[", i, "]"), reqs[i]);
      }
    }
    hcomm_status_t first = HCOMM_SUCCESS;
    std::string first_msg;
    for (int i = 0; i < n; ++i) {
      hcomm_status_t st = hcomm_wait(reqs[i]);
      if (st != HCOMM_SUCCESS && first == HCOMM_SUCCESS) {
        first = st;
        first_msg = absl::StrCat("hcomm_waitall: reqs[", i, "]: ", last_error);
      }
    }
    if (first != HCOMM_SUCCESS) return Fail(first, first_msg);
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_request_info(hcomm_request_t req, int* source, int* tag, size_t* count) {
  HCOMM_C_CHECK(CheckRequest("hcomm_request_info", req));
  hcomm::Request* r = req->impl.get();
  if (!r->done.load(std::memory_order_acquire)) {
    return BadArg("hcomm_request_info: the request has not completed (wait or test it first)");
  }
  if (source) {
    int w = r->out_source;
    const std::vector<int>& map = *req->world_to_group;
    *source = (w >= 0 && static_cast<size_t>(w) < map.size()) ? map[w] : w;
  }
  if (tag) *tag = r->out_tag;
  if (count) *count = r->elem_size ? r->out_bytes / r->elem_size : 0;
  return HCOMM_SUCCESS;
}

hcomm_status_t hcomm_request_free(hcomm_request_t req) {
  if (req == nullptr) return HCOMM_SUCCESS;
  return Guard(__func__, [&] {
    if (LiveRequest(req) && req->forks != hcomm::ForkCount()) {
      // A fork's child letting go of its parent's request: the slot keeps
      // its references (the last one to the engine would end it, as a
      // destroy would) and is never handed out again.
      req->live.store(false, std::memory_order_release);
      return HCOMM_SUCCESS;
    }
    HCOMM_C_CHECK(CheckRequest("hcomm_request_free", req));
    if (!req->impl->done.load()) req->driver->Release(req->impl);
    // False only where another thread freed it meanwhile.
    if (!hcomm_c::RequestSlots::Get().Give(req)) return BadRequest("hcomm_request_free: req", req);
    return HCOMM_SUCCESS;
  });
}

// ---------------------------------------------------------------------------
// Groups

hcomm_status_t hcomm_comm_split(hcomm_comm_t comm, int color, int key, hcomm_comm_t* out) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckComm("hcomm_comm_split", comm));
    constexpr hcomm::CollectiveOp kSplit = hcomm::CollectiveOp::kAllGather;  // what it runs
    if (out == nullptr) return Refused(comm, kSplit, BadArg("hcomm_comm_split: out is NULL"));
    *out = nullptr;
    if (color < 0 && color != HCOMM_UNDEFINED) {
      return Refused(comm, kSplit,
                     BadArg(absl::StrCat("hcomm_comm_split on rank ", comm->impl->rank(),
                                         ": color ", color,
                                         " is negative (use HCOMM_UNDEFINED to opt out)")));
    }
    auto child = comm->impl->Split(color, key);
    if (!child.ok()) return ToC(child.status());
    if (*child) *out = new hcomm_comm_s{std::move(child).value()};
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_comm_create_group(hcomm_comm_t comm, const int* ranks, int nranks,
                                       hcomm_comm_t* out) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckComm("hcomm_comm_create_group", comm));
    constexpr hcomm::CollectiveOp kCreate = hcomm::CollectiveOp::kAllGather;  // what it runs
    if (out == nullptr) {
      return Refused(comm, kCreate, BadArg("hcomm_comm_create_group: out is NULL"));
    }
    *out = nullptr;
    if (nranks < 0) {
      return Refused(comm, kCreate,
                     BadArg(absl::StrCat("hcomm_comm_create_group: nranks is ", nranks)));
    }
    if (nranks > 0 && ranks == nullptr) {
      return Refused(comm, kCreate,
                     BadArg(absl::StrCat("hcomm_comm_create_group: ranks is NULL with nranks ",
                                         nranks)));
    }
    std::vector<int> list(ranks, ranks + nranks);
    auto child = comm->impl->CreateGroup(list);
    if (!child.ok()) return ToC(child.status());
    if (*child) *out = new hcomm_comm_s{std::move(child).value()};
    return HCOMM_SUCCESS;
  });
}

// ---------------------------------------------------------------------------
// Collectives

hcomm_status_t hcomm_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                               hcomm_dtype_t dtype, hcomm_reduce_op_t op, hcomm_comm_t comm) {
  return Guard(__func__, [&] {
    const char* fn = "hcomm_allreduce";
    size_t es;
    HCOMM_C_CHECK(CheckComm(fn, comm));
    HCOMM_C_CHECK_ARGS(kAllReduce, CheckTypes(fn, comm, dtype, RawValue(op), &es));
    HCOMM_C_CHECK_ARGS(kAllReduce, CheckBuf(fn, comm, sendbuf, "sendbuf", count, es));
    HCOMM_C_CHECK_ARGS(kAllReduce, CheckBuf(fn, comm, recvbuf, "recvbuf", count, es));
    return ToC(comm->impl->AllReduce(sendbuf, recvbuf, count, DT(dtype), OP(op)));
  });
}

hcomm_status_t hcomm_broadcast(void* buf, size_t count, hcomm_dtype_t dtype, int root,
                               hcomm_comm_t comm) {
  return Guard(__func__, [&] {
    const char* fn = "hcomm_broadcast";
    size_t es;
    HCOMM_C_CHECK(CheckComm(fn, comm));
    HCOMM_C_CHECK_ARGS(kBroadcast, CheckTypes(fn, comm, dtype, kNoOp, &es));
    HCOMM_C_CHECK_ARGS(kBroadcast, CheckRoot(fn, comm, root));
    HCOMM_C_CHECK_ARGS(kBroadcast, CheckBuf(fn, comm, buf, "buf", count, es));
    return ToC(comm->impl->Broadcast(buf, count, DT(dtype), root));
  });
}

hcomm_status_t hcomm_reduce(const void* sendbuf, void* recvbuf, size_t count,
                            hcomm_dtype_t dtype, hcomm_reduce_op_t op, int root,
                            hcomm_comm_t comm) {
  return Guard(__func__, [&] {
    const char* fn = "hcomm_reduce";
    size_t es;
    HCOMM_C_CHECK(CheckComm(fn, comm));
    HCOMM_C_CHECK_ARGS(kReduce, CheckTypes(fn, comm, dtype, RawValue(op), &es));
    HCOMM_C_CHECK_ARGS(kReduce, CheckRoot(fn, comm, root));
    HCOMM_C_CHECK_ARGS(kReduce, CheckBuf(fn, comm, sendbuf, "sendbuf", count, es));
    if (comm->impl->rank() == root) {
      HCOMM_C_CHECK_ARGS(kReduce, CheckBuf(fn, comm, recvbuf, "recvbuf (at the root)", count, es));
    }
    return ToC(comm->impl->Reduce(sendbuf, recvbuf, count, DT(dtype), OP(op), root));
  });
}

hcomm_status_t hcomm_allgather(const void* sendbuf, void* recvbuf, size_t sendcount,
                               hcomm_dtype_t dtype, hcomm_comm_t comm) {
  return Guard(__func__, [&] {
    const char* fn = "hcomm_allgather";
    size_t es;
    HCOMM_C_CHECK(CheckComm(fn, comm));
    HCOMM_C_CHECK_ARGS(kAllGather, CheckTypes(fn, comm, dtype, kNoOp, &es));
    HCOMM_C_CHECK_ARGS(kAllGather, CheckBuf(fn, comm, sendbuf, "sendbuf", sendcount, es));
    HCOMM_C_CHECK_ARGS(kAllGather,
                       CheckBuf(fn, comm, recvbuf, "recvbuf", sendcount, es, comm->impl->size()));
    return ToC(comm->impl->AllGather(sendbuf, recvbuf, sendcount, DT(dtype)));
  });
}

hcomm_status_t hcomm_reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                    hcomm_dtype_t dtype, hcomm_reduce_op_t op,
                                    hcomm_comm_t comm) {
  return Guard(__func__, [&] {
    const char* fn = "hcomm_reduce_scatter";
    size_t es;
    HCOMM_C_CHECK(CheckComm(fn, comm));
    HCOMM_C_CHECK_ARGS(kReduceScatter, CheckTypes(fn, comm, dtype, RawValue(op), &es));
    HCOMM_C_CHECK_ARGS(kReduceScatter,
                       CheckBuf(fn, comm, sendbuf, "sendbuf", recvcount, es, comm->impl->size()));
    HCOMM_C_CHECK_ARGS(kReduceScatter, CheckBuf(fn, comm, recvbuf, "recvbuf", recvcount, es));
    return ToC(comm->impl->ReduceScatter(sendbuf, recvbuf, recvcount, DT(dtype), OP(op)));
  });
}

hcomm_status_t hcomm_alltoall(const void* sendbuf, void* recvbuf, size_t count,
                              hcomm_dtype_t dtype, hcomm_comm_t comm) {
  return Guard(__func__, [&] {
    const char* fn = "hcomm_alltoall";
    size_t es;
    HCOMM_C_CHECK(CheckComm(fn, comm));
    HCOMM_C_CHECK_ARGS(kAllToAll, CheckTypes(fn, comm, dtype, kNoOp, &es));
    HCOMM_C_CHECK_ARGS(kAllToAll,
                       CheckBuf(fn, comm, sendbuf, "sendbuf", count, es, comm->impl->size()));
    HCOMM_C_CHECK_ARGS(kAllToAll,
                       CheckBuf(fn, comm, recvbuf, "recvbuf", count, es, comm->impl->size()));
    return ToC(comm->impl->AllToAll(sendbuf, recvbuf, count, DT(dtype)));
  });
}

hcomm_status_t hcomm_gather(const void* sendbuf, void* recvbuf, size_t sendcount,
                            hcomm_dtype_t dtype, int root, hcomm_comm_t comm) {
  return Guard(__func__, [&] {
    const char* fn = "hcomm_gather";
    size_t es;
    HCOMM_C_CHECK(CheckComm(fn, comm));
    HCOMM_C_CHECK_ARGS(kGather, CheckTypes(fn, comm, dtype, kNoOp, &es));
    HCOMM_C_CHECK_ARGS(kGather, CheckRoot(fn, comm, root));
    HCOMM_C_CHECK_ARGS(kGather, CheckBuf(fn, comm, sendbuf, "sendbuf", sendcount, es));
    if (comm->impl->rank() == root) {
      HCOMM_C_CHECK_ARGS(kGather,
                         CheckBuf(fn, comm, recvbuf, "recvbuf (at the root)", sendcount, es,
                             comm->impl->size()));
    }
    return ToC(comm->impl->Gather(sendbuf, recvbuf, sendcount, DT(dtype), root));
  });
}

hcomm_status_t hcomm_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                             hcomm_dtype_t dtype, int root, hcomm_comm_t comm) {
  return Guard(__func__, [&] {
    const char* fn = "hcomm_scatter";
    size_t es;
    HCOMM_C_CHECK(CheckComm(fn, comm));
    HCOMM_C_CHECK_ARGS(kScatter, CheckTypes(fn, comm, dtype, kNoOp, &es));
    HCOMM_C_CHECK_ARGS(kScatter, CheckRoot(fn, comm, root));
    if (comm->impl->rank() == root) {
      HCOMM_C_CHECK_ARGS(kScatter,
                         CheckBuf(fn, comm, sendbuf, "sendbuf (at the root)", recvcount, es,
                             comm->impl->size()));
    }
    HCOMM_C_CHECK_ARGS(kScatter, CheckBuf(fn, comm, recvbuf, "recvbuf", recvcount, es));
    return ToC(comm->impl->Scatter(sendbuf, recvbuf, recvcount, DT(dtype), root));
  });
}

hcomm_status_t hcomm_barrier(hcomm_comm_t comm) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckComm("hcomm_barrier", comm));
    return ToC(comm->impl->Barrier());
  });
}

hcomm_status_t hcomm_iallreduce(const void* sendbuf, void* recvbuf, size_t count,
                                hcomm_dtype_t dtype, hcomm_reduce_op_t op, hcomm_comm_t comm,
                                hcomm_request_t* req) {
  return Guard(__func__, [&] {
    const char* fn = "hcomm_iallreduce";
    size_t es;
    HCOMM_C_CHECK(CheckComm(fn, comm));
    if (req == nullptr) {
      return Refused(comm, hcomm::CollectiveOp::kAllReduce,
                     BadArg("hcomm_iallreduce: req is NULL"));
    }
    HCOMM_C_CHECK_ARGS(kAllReduce, CheckTypes(fn, comm, dtype, RawValue(op), &es));
    HCOMM_C_CHECK_ARGS(kAllReduce, CheckBuf(fn, comm, sendbuf, "sendbuf", count, es));
    HCOMM_C_CHECK_ARGS(kAllReduce, CheckBuf(fn, comm, recvbuf, "recvbuf", count, es));
    auto r = comm->impl->IAllReduce(sendbuf, recvbuf, count, DT(dtype), OP(op));
    if (!r.ok()) return ToC(r.status());
    return NewRequest(std::move(r).value(), *comm->impl, req);
  });
}

// ---- Shared-memory channel ----

hcomm_status_t hcomm_channel_open(const char* name, size_t capacity_bytes, int create,
                                  hcomm_channel_t* out) {
  return Guard(__func__, [&] {
    if (out == nullptr) return BadArg("hcomm_channel_open: out is NULL");
    *out = nullptr;
    if (name == nullptr) return BadArg("hcomm_channel_open: name is NULL");
    auto ch = hcomm::Channel::Open(name, capacity_bytes, create != 0);
    if (!ch.ok()) return ToC(hcomm::Annotate(ch.status(), "hcomm_channel_open"));
    *out = new hcomm_channel_s{std::move(ch).value()};
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_channel_write(hcomm_channel_t ch, const void* data, size_t nbytes,
                                   int timeout_ms) {
  return Guard(__func__, [&] {
    if (ch == nullptr || !ch->impl) return BadArg("hcomm_channel_write: ch is NULL or closed");
    const std::string& name = ch->impl->name();
    if (data == nullptr && nbytes > 0) {
      return BadArg(absl::StrCat("hcomm_channel_write to channel '", name,
                                 "': data is NULL with nbytes ", nbytes));
    }
    if (timeout_ms < 0) {
      return BadArg(absl::StrCat("hcomm_channel_write to channel '", name, "': timeout_ms is ",
                                 timeout_ms, "; it must be >= 0 (0 tries once)"));
    }
    const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
    return ToC(hcomm::Annotate(ch->impl->Write(data, nbytes, deadline), "hcomm_channel_write"));
  });
}

hcomm_status_t hcomm_channel_read(hcomm_channel_t ch, void* buf, size_t cap, size_t* nbytes,
                                  int timeout_ms) {
  return Guard(__func__, [&] {
    if (ch == nullptr || !ch->impl) return BadArg("hcomm_channel_read: ch is NULL or closed");
    const std::string& name = ch->impl->name();
    if (nbytes == nullptr) {
      return BadArg(absl::StrCat("hcomm_channel_read from channel '", name, "': nbytes is NULL"));
    }
    if (buf == nullptr && cap > 0) {
      return BadArg(absl::StrCat("hcomm_channel_read from channel '", name,
                                 "': buf is NULL with cap ", cap));
    }
    if (timeout_ms < 0) {
      return BadArg(absl::StrCat("hcomm_channel_read from channel '", name, "': timeout_ms is ",
                                 timeout_ms, "; it must be >= 0 (0 tries once)"));
    }
    const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
    return ToC(
        hcomm::Annotate(ch->impl->Read(buf, cap, nbytes, deadline), "hcomm_channel_read"));
  });
}

hcomm_status_t hcomm_channel_close(hcomm_channel_t ch) {
  if (ch == nullptr) return HCOMM_SUCCESS;
  return Guard(__func__, [&] {
    if (!ch->impl) return BadArg("hcomm_channel_close: ch was closed already");
    absl::Status s = ch->impl->Close();
    ch->impl.reset();  // the handle stays, closed (see KeepDestroyed)
    KeepDestroyed(ch);
    return ToC(hcomm::Annotate(s, "hcomm_channel_close"));
  });
}

}  // extern "C"
