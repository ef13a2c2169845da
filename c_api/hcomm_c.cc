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
#include "c_api/shim.h"
#include "core/base/clock.h"
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

using namespace hcomm_c;  // NOLINT: the shim's own helpers (shim.h)

namespace {
thread_local std::string last_error;
}  // namespace

std::string& hcomm_c::LastError() { return last_error; }

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
    return ToC(comm->impl->Send(buf, bytes, DtypeSize(dtype), peer, tag,
                                static_cast<hcomm::DataType>(dtype)));
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
    auto r = comm->impl->Isend(buf, bytes, DtypeSize(dtype), peer, tag,
                               static_cast<hcomm::DataType>(dtype));
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
    if (r->done.load(std::memory_order_acquire)) return ToC(req->driver->Finished(r));
    return ToC(req->driver->Wait(r, hcomm::MonoNow() + req->timeout));
  });
}

hcomm_status_t hcomm_test(hcomm_request_t req, int* done) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckRequest("hcomm_test", req));
    if (done == nullptr) return BadArg("hcomm_test: done is NULL");
    hcomm::Request* r = req->impl.get();
    bool d = req->driver->Test(r);
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
  hcomm::FinishRequest(r);  // (a wait or test ran it already)
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

hcomm_status_t hcomm_comm_shrink(hcomm_comm_t comm, hcomm_comm_t* out) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckComm("hcomm_comm_shrink", comm));
    // (Not a collective of comm's sequence: nothing to take a turn for.)
    if (out == nullptr) return BadArg("hcomm_comm_shrink: out is NULL");
    *out = nullptr;
    auto child = comm->impl->Shrink();
    if (!child.ok()) return ToC(child.status());
    *out = new hcomm_comm_s{std::move(child).value()};
    return HCOMM_SUCCESS;
  });
}

}  // extern "C"
