// libhcomm_c's streams and events (API.md, "Streams, priorities and
// fusion"): handle checks, an operation's arguments checked as its blocking
// call checks them (shim.h), then core/comm/comm_stream.h. No exception
// crosses this boundary.
#include <cstring>

#include "absl/time/time.h"
#include "c_api/shim.h"

using namespace hcomm_c;  // NOLINT: the shim's own helpers (shim.h)

namespace {

// "hcomm_stream_enqueue (allreduce)": how a refused operation is named.
const char* EnqueueFn(int kind) {
  static const char* const kNames[] = {
      "hcomm_stream_enqueue (send)",       "hcomm_stream_enqueue (recv)",
      "hcomm_stream_enqueue (allreduce)",  "hcomm_stream_enqueue (broadcast)",
      "hcomm_stream_enqueue (reduce)",     "hcomm_stream_enqueue (allgather)",
      "hcomm_stream_enqueue (reduce_scatter)", "hcomm_stream_enqueue (alltoall)",
      "hcomm_stream_enqueue (gather)",     "hcomm_stream_enqueue (scatter)",
      "hcomm_stream_enqueue (barrier)",
  };
  return kNames[kind];
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD hcomm_status_t BadStream(const char* fn,
                                                             hcomm_stream_t s) {
  if (s == nullptr || !s->impl) return BadArg(absl::StrCat(fn, ": s is NULL or destroyed"));
  return BadArg(absl::StrCat(fn, ": s was made by process ", s->pid, ", and this process (",
                             getpid(), ") is a fork of it: a fork's child cannot use its "
                             "parent's streams (their threads are the parent's)"));
}

inline hcomm_status_t CheckStream(const char* fn, hcomm_stream_t s) {
  if (ABSL_PREDICT_FALSE(s == nullptr || !s->impl || s->forks != hcomm::ForkCount())) {
    return BadStream(fn, s);
  }
  return HCOMM_SUCCESS;
}

inline hcomm_status_t CheckEvent(const char* fn, hcomm_event_t e) {
  if (e == nullptr || !e->impl) return BadArg(absl::StrCat(fn, ": e is NULL or destroyed"));
  return HCOMM_SUCCESS;
}

// The largest struct_size taken as a struct at all: beyond it the field
// was not set (HCOMM_OP_INIT), and reading that far could fault.
constexpr size_t kOpSizeLimit = 4096;

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD hcomm_status_t BadOp(const hcomm_op_t* op) {
  const char* fn = "hcomm_stream_enqueue";
  if (op == nullptr) return BadArg(absl::StrCat(fn, ": op is NULL"));
  const size_t size = op->struct_size;
  if (size < sizeof(hcomm_op_t) || size > kOpSizeLimit) {
    return BadArg(absl::StrCat(fn, ": op->struct_size is ", size, "; an hcomm_op_t of this "
                               "library is ", sizeof(hcomm_op_t),
                               " bytes (initialize it with HCOMM_OP_INIT)"));
  }
  return BadArg(absl::StrCat(
      fn, ": op sets fields past its byte ", sizeof(hcomm_op_t), " (op->struct_size is ", size,
      "), which this library (", HCOMM_VERSION_MAJOR, ".", HCOMM_VERSION_MINOR,
      ") does not know; use the library of the header it was built with"));
}

// Copies *op as this library knows it. A caller built with a later header
// passes a larger struct: taken when the fields this library does not know
// are all zero (unset), refused otherwise.
inline hcomm_status_t ReadOp(const hcomm_op_t* op, hcomm_op_t* out) {
  if (ABSL_PREDICT_FALSE(op == nullptr || op->struct_size < sizeof(hcomm_op_t) ||
                         op->struct_size > kOpSizeLimit)) {
    return BadOp(op);
  }
  if (ABSL_PREDICT_FALSE(op->struct_size > sizeof(hcomm_op_t))) {
    const unsigned char* extra = reinterpret_cast<const unsigned char*>(op) + sizeof(hcomm_op_t);
    for (size_t i = 0; i < op->struct_size - sizeof(hcomm_op_t); ++i) {
      if (extra[i] != 0) return BadOp(op);
    }
  }
  std::memcpy(out, op, sizeof(hcomm_op_t));
  return HCOMM_SUCCESS;
}

}  // namespace

extern "C" {

hcomm_status_t hcomm_stream_create(hcomm_comm_t comm, int priority, hcomm_stream_t* out) {
  return Guard(__func__, [&] {
    const char* fn = "hcomm_stream_create";
    HCOMM_C_CHECK(CheckComm(fn, comm));
    if (out == nullptr) return BadArg(absl::StrCat(fn, ": out is NULL"));
    *out = nullptr;
    auto made = hcomm::CommStream::Create(*comm->impl, priority);
    if (!made.ok()) return ToC(made.status());
    auto* s = new hcomm_stream_s;
    s->impl = std::move(made).value();
    *out = s;
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_stream_enqueue(hcomm_stream_t s, const hcomm_op_t* op) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckStream("hcomm_stream_enqueue", s));
    hcomm_op_t o;
    HCOMM_C_CHECK(ReadOp(op, &o));
    const int kind = RawValue(o.kind);
    if (kind < HCOMM_OP_SEND || kind > HCOMM_OP_BARRIER) {
      return BadArg(absl::StrCat("hcomm_stream_enqueue: op->kind ", kind,
                                 " is not an hcomm_op_kind_t"));
    }
    hcomm::Communicator& c = s->impl->comm();
    const char* fn = EnqueueFn(kind);
    if (kind == HCOMM_OP_SEND || kind == HCOMM_OP_RECV) {
      const bool is_recv = kind == HCOMM_OP_RECV;
      size_t bytes;
      HCOMM_C_CHECK(CheckP2pArgs(fn, c, is_recv ? o.recvbuf : o.sendbuf, o.count, o.dtype,
                                 o.peer_or_root, o.tag, is_recv, &bytes));
    } else {
      const hcomm_status_t st = CheckCollective(fn, c, kind, o.sendbuf, o.recvbuf, o.count,
                                                o.dtype, RawValue(o.op), o.peer_or_root, "recvbuf");
      if (st != HCOMM_SUCCESS) {
        // Takes its turn on the stream all the same (see hcomm.h).
        s->impl->EnqueueRejection(static_cast<hcomm::StreamOpKind>(kind));
        return st;
      }
    }
    hcomm::StreamOp so;
    so.kind = static_cast<hcomm::StreamOpKind>(kind);
    so.send = o.sendbuf;
    so.recv = o.recvbuf;
    so.count = o.count;
    if (kind != HCOMM_OP_BARRIER) so.dtype = DT(o.dtype);
    if (kind == HCOMM_OP_ALLREDUCE || kind == HCOMM_OP_REDUCE ||
        kind == HCOMM_OP_REDUCE_SCATTER) {
      so.op = OP(o.op);
    }
    so.peer_or_root = o.peer_or_root;
    so.tag = o.tag;
    s->impl->Enqueue(so);
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_stream_enqueue_host(hcomm_stream_t s, void (*fn)(void* arg), void* arg) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckStream("hcomm_stream_enqueue_host", s));
    if (fn == nullptr) return BadArg("hcomm_stream_enqueue_host: fn is NULL");
    s->impl->EnqueueHost(fn, arg);
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_stream_synchronize(hcomm_stream_t s) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckStream("hcomm_stream_synchronize", s));
    return ToC(s->impl->Synchronize());
  });
}

hcomm_status_t hcomm_stream_query(hcomm_stream_t s, int* idle) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckStream("hcomm_stream_query", s));
    if (idle == nullptr) return BadArg("hcomm_stream_query: idle is NULL");
    *idle = s->impl->Idle() ? 1 : 0;
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_stream_destroy(hcomm_stream_t s) {
  if (s == nullptr) return HCOMM_SUCCESS;
  return Guard(__func__, [&] {
    if (!s->impl) return BadArg("hcomm_stream_destroy: s was destroyed already");
    if (s->borrowed) {
      return BadArg("hcomm_stream_destroy: s is a scheduler's stream, handed to its task; "
                    "hcomm_scheduler_destroy ends it");
    }
    if (s->forks != hcomm::ForkCount()) {
      // A fork's child letting go of its parent's stream: the thread that
      // would run it out is the parent's. Kept as it is (as communicators).
      hcomm_c::Keep(s->impl.release());
      KeepDestroyed(s);
      return HCOMM_SUCCESS;
    }
    absl::Status st = s->impl->Destroy();
    s->impl.reset();  // the handle stays, destroyed (see KeepDestroyed)
    KeepDestroyed(s);
    return ToC(st);
  });
}

hcomm_status_t hcomm_event_create(hcomm_event_t* out) {
  return Guard(__func__, [&] {
    if (out == nullptr) return BadArg("hcomm_event_create: out is NULL");
    auto* e = new hcomm_event_s;
    e->impl = std::make_unique<hcomm::Event>();
    *out = e;
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_event_record(hcomm_event_t e, hcomm_stream_t s) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckEvent("hcomm_event_record", e));
    HCOMM_C_CHECK(CheckStream("hcomm_event_record", s));
    e->stall_ms.store(absl::ToInt64Milliseconds(s->impl->comm().timeout()),
                      std::memory_order_relaxed);
    s->impl->RecordEvent(*e->impl);
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_stream_wait_event(hcomm_stream_t s, hcomm_event_t e) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckStream("hcomm_stream_wait_event", s));
    HCOMM_C_CHECK(CheckEvent("hcomm_stream_wait_event", e));
    s->impl->WaitEvent(*e->impl);
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_event_synchronize(hcomm_event_t e) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckEvent("hcomm_event_synchronize", e));
    const absl::Duration stall = absl::Milliseconds(e->stall_ms.load(std::memory_order_relaxed));
    return ToC(e->impl->Synchronize(stall));
  });
}

hcomm_status_t hcomm_event_query(hcomm_event_t e, int* done) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckEvent("hcomm_event_query", e));
    if (done == nullptr) return BadArg("hcomm_event_query: done is NULL");
    *done = e->impl->Query() ? 1 : 0;
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_event_destroy(hcomm_event_t e) {
  if (e == nullptr) return HCOMM_SUCCESS;
  return Guard(__func__, [&] {
    if (!e->impl) return BadArg("hcomm_event_destroy: e was destroyed already");
    e->impl.reset();  // marks queued on streams keep the state they need
    KeepDestroyed(e);
    return HCOMM_SUCCESS;
  });
}

// ---------------------------------------------------------------------------
// Communication scheduler

namespace {

hcomm_status_t CheckScheduler(const char* fn, hcomm_scheduler_t s) {
  if (s == nullptr || !s->impl) return BadArg(absl::StrCat(fn, ": s is NULL or destroyed"));
  if (s->forks != hcomm::ForkCount()) {
    return BadArg(absl::StrCat(fn, ": s was made by process ", s->pid, ", and this process (",
                               getpid(), ") is a fork of it"));
  }
  return HCOMM_SUCCESS;
}

// The handle a task of `s` gets for `stream`, made on first use.
hcomm_stream_t TaskStream(hcomm_scheduler_t s, hcomm::CommStream& stream) {
  absl::MutexLock l(&s->mu);
  hcomm_stream_s*& h = s->streams[&stream];
  if (h == nullptr) {
    h = new hcomm_stream_s;
    h->impl.reset(&stream);
    h->borrowed = true;
  }
  return h;
}

}  // namespace

hcomm_status_t hcomm_scheduler_create(hcomm_comm_t comm, hcomm_scheduler_t* out) {
  return Guard(__func__, [&] {
    const char* fn = "hcomm_scheduler_create";
    HCOMM_C_CHECK(CheckComm(fn, comm));
    if (out == nullptr) return BadArg(absl::StrCat(fn, ": out is NULL"));
    *out = nullptr;
    auto made = hcomm::CommScheduler::Create(*comm->impl);
    if (!made.ok()) return ToC(made.status());
    auto* s = new hcomm_scheduler_s;
    s->impl = std::move(made).value();
    *out = s;
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_scheduler_add_task(hcomm_scheduler_t s, const char* id, int priority,
                                        const char* const* depends_on, int ndeps,
                                        hcomm_status_t (*fn)(hcomm_stream_t stream, void* arg),
                                        void* arg) {
  return Guard(__func__, [&] {
    const char* name = "hcomm_scheduler_add_task";
    HCOMM_C_CHECK(CheckScheduler(name, s));
    if (id == nullptr) return BadArg(absl::StrCat(name, ": id is NULL"));
    if (fn == nullptr) return BadArg(absl::StrCat(name, " of task '", id, "': fn is NULL"));
    if (ndeps < 0 || (ndeps > 0 && depends_on == nullptr)) {
      return BadArg(absl::StrCat(name, " of task '", id, "': depends_on is NULL with ndeps ",
                                 ndeps, ndeps < 0 ? " (ndeps must be >= 0)" : ""));
    }
    std::vector<std::string> deps;
    for (int i = 0; i < ndeps; ++i) {
      if (depends_on[i] == nullptr) {
        return BadArg(absl::StrCat(name, " of task '", id, "': depends_on[", i, "] is NULL"));
      }
      deps.emplace_back(depends_on[i]);
    }
    auto task = [s, fn, arg](hcomm::CommStream& stream) -> absl::Status {
      hcomm_stream_t h = TaskStream(s, stream);
      LastError().clear();  // what the task's own calls say, if it fails
      const hcomm_status_t st = fn(h, arg);
      if (st == HCOMM_SUCCESS) return absl::OkStatus();
      std::string message = absl::StrCat("its function returned ", hcomm_status_string(st));
      if (!LastError().empty()) absl::StrAppend(&message, ": ", LastError());
      return hcomm::MakeError(static_cast<hcomm::ErrorCode>(st), message);
    };
    absl::Status added = s->impl->AddTask(id, priority, std::move(deps), std::move(task));
    return ToC(hcomm::Annotate(added, name));
  });
}

hcomm_status_t hcomm_scheduler_set_policy(hcomm_scheduler_t s, hcomm_policy_fn fn, void* user) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckScheduler("hcomm_scheduler_set_policy", s));
    if (fn == nullptr) {
      s->impl->SetPolicy(nullptr);
      return HCOMM_SUCCESS;
    }
    s->impl->SetPolicy([fn, user](absl::Span<const hcomm::ReadyTask> ready) -> absl::StatusOr<int> {
      std::vector<hcomm_task_info_t> info;
      info.reserve(ready.size());
      for (const hcomm::ReadyTask& t : ready) {
        info.push_back(hcomm_task_info_t{t.id->c_str(), t.priority, t.registration_index});
      }
      return fn(info.data(), static_cast<int>(info.size()), user);
    });
    return HCOMM_SUCCESS;
  });
}

hcomm_status_t hcomm_scheduler_run(hcomm_scheduler_t s) {
  return Guard(__func__, [&] {
    HCOMM_C_CHECK(CheckScheduler("hcomm_scheduler_run", s));
    return ToC(hcomm::Annotate(s->impl->Run(), "hcomm_scheduler_run"));
  });
}

hcomm_status_t hcomm_scheduler_destroy(hcomm_scheduler_t s) {
  if (s == nullptr) return HCOMM_SUCCESS;
  return Guard(__func__, [&] {
    if (!s->impl) return BadArg("hcomm_scheduler_destroy: s was destroyed already");
    absl::Status st;
    if (s->forks == hcomm::ForkCount()) {
      st = s->impl->Destroy();
      s->impl.reset();
    } else {
      hcomm_c::Keep(s->impl.release());  // a fork's child: the parent's threads (as streams)
    }
    absl::MutexLock l(&s->mu);
    for (auto& [stream, h] : s->streams) {
      (void)h->impl.release();  // ended with the scheduler
      KeepDestroyed(h);
    }
    s->streams.clear();
    KeepDestroyed(s);
    return ToC(hcomm::Annotate(st, "hcomm_scheduler_destroy"));
  });
}

}  // extern "C"
