// libhcomm_c's collectives and shared-memory channel: argument checks, then
// the C++ core, then one status mapping (shim.h). No exception crosses this
// boundary.
#include "c_api/shim.h"
#include "core/base/clock.h"

using namespace hcomm_c;  // NOLINT: the shim's own helpers (shim.h)

extern "C" {

// ---------------------------------------------------------------------------
// Collectives

// Every blocking collective: the communicator, then its arguments
// (CheckCollective, which stream enqueues share), then the call.
#define HCOMM_C_COLLECTIVE(name, kind, collective_op, send, recv, count, dtype, op_value, root, \
                           call)                                                             \
  return Guard(__func__, [&] {                                                               \
    const char* fn = name;                                                                   \
    HCOMM_C_CHECK(CheckComm(fn, comm));                                                      \
    HCOMM_C_CHECK_ARGS(collective_op, CheckCollective(fn, *comm->impl, kind, send, recv,     \
                                                      count, dtype, op_value, root));        \
    return ToC(call);                                                                        \
  })

hcomm_status_t hcomm_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                               hcomm_dtype_t dtype, hcomm_reduce_op_t op, hcomm_comm_t comm) {
  HCOMM_C_COLLECTIVE("hcomm_allreduce", HCOMM_OP_ALLREDUCE, kAllReduce, sendbuf, recvbuf, count,
                     dtype, RawValue(op), 0,
                     comm->impl->AllReduce(sendbuf, recvbuf, count, DT(dtype), OP(op)));
}

hcomm_status_t hcomm_broadcast(void* buf, size_t count, hcomm_dtype_t dtype, int root,
                               hcomm_comm_t comm) {
  HCOMM_C_COLLECTIVE("hcomm_broadcast", HCOMM_OP_BROADCAST, kBroadcast, nullptr, buf, count, dtype,
                     kNoOp, root, comm->impl->Broadcast(buf, count, DT(dtype), root));
}

hcomm_status_t hcomm_reduce(const void* sendbuf, void* recvbuf, size_t count,
                            hcomm_dtype_t dtype, hcomm_reduce_op_t op, int root,
                            hcomm_comm_t comm) {
  HCOMM_C_COLLECTIVE("hcomm_reduce", HCOMM_OP_REDUCE, kReduce, sendbuf, recvbuf, count, dtype,
                     RawValue(op), root,
                     comm->impl->Reduce(sendbuf, recvbuf, count, DT(dtype), OP(op), root));
}

hcomm_status_t hcomm_allgather(const void* sendbuf, void* recvbuf, size_t sendcount,
                               hcomm_dtype_t dtype, hcomm_comm_t comm) {
  HCOMM_C_COLLECTIVE("hcomm_allgather", HCOMM_OP_ALLGATHER, kAllGather, sendbuf, recvbuf,
                     sendcount, dtype, kNoOp, 0,
                     comm->impl->AllGather(sendbuf, recvbuf, sendcount, DT(dtype)));
}

hcomm_status_t hcomm_reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                    hcomm_dtype_t dtype, hcomm_reduce_op_t op,
                                    hcomm_comm_t comm) {
  HCOMM_C_COLLECTIVE("hcomm_reduce_scatter", HCOMM_OP_REDUCE_SCATTER, kReduceScatter, sendbuf,
                     recvbuf, recvcount, dtype, RawValue(op), 0,
                     comm->impl->ReduceScatter(sendbuf, recvbuf, recvcount, DT(dtype), OP(op)));
}

hcomm_status_t hcomm_alltoall(const void* sendbuf, void* recvbuf, size_t count,
                              hcomm_dtype_t dtype, hcomm_comm_t comm) {
  HCOMM_C_COLLECTIVE("hcomm_alltoall", HCOMM_OP_ALLTOALL, kAllToAll, sendbuf, recvbuf, count,
                     dtype, kNoOp, 0, comm->impl->AllToAll(sendbuf, recvbuf, count, DT(dtype)));
}

hcomm_status_t hcomm_gather(const void* sendbuf, void* recvbuf, size_t sendcount,
                            hcomm_dtype_t dtype, int root, hcomm_comm_t comm) {
  HCOMM_C_COLLECTIVE("hcomm_gather", HCOMM_OP_GATHER, kGather, sendbuf, recvbuf, sendcount, dtype,
                     kNoOp, root, comm->impl->Gather(sendbuf, recvbuf, sendcount, DT(dtype), root));
}

hcomm_status_t hcomm_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                             hcomm_dtype_t dtype, int root, hcomm_comm_t comm) {
  HCOMM_C_COLLECTIVE("hcomm_scatter", HCOMM_OP_SCATTER, kScatter, sendbuf, recvbuf, recvcount,
                     dtype, kNoOp, root,
                     comm->impl->Scatter(sendbuf, recvbuf, recvcount, DT(dtype), root));
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
    HCOMM_C_CHECK(CheckComm(fn, comm));
    if (req == nullptr) {
      return Refused(comm, hcomm::CollectiveOp::kAllReduce,
                     BadArg("hcomm_iallreduce: req is NULL"));
    }
    HCOMM_C_CHECK_ARGS(kAllReduce, CheckCollective(fn, *comm->impl, HCOMM_OP_ALLREDUCE, sendbuf,
                                                   recvbuf, count, dtype, RawValue(op), 0));
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
    const hcomm::MonoTime deadline = hcomm::MonoNow() + absl::Milliseconds(timeout_ms);
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
    const hcomm::MonoTime deadline = hcomm::MonoNow() + absl::Milliseconds(timeout_ms);
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
