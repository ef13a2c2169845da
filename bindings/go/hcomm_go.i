/* Go fragment of bindings/hcomm.i (included for SWIGGO only).
 *
 * SWIG makes the low-level package hcomm.local/hcomm/internal/capi from it
 * (`swig -go -cgo -intgosize 64 -package capi`, see tools/bzl/hcomm_go.bzl);
 * the idiomatic package hcomm (the .go files of bindings/go/) is written by
 * hand over it.
 *
 * What this fragment changes from SWIG's defaults:
 *
 * - hcomm_status_t results become a Go `error`: nil for HCOMM_SUCCESS, else
 *   a *capi.Error with the status and hcomm_last_error(). The message is
 *   read inside the same C call as the failing function: hcomm_last_error()
 *   is thread-local, and a goroutine may move to another OS thread between
 *   two cgo calls, so reading it in a second call could see another
 *   thread's message.
 * - Opaque handles (hcomm_comm_t, hcomm_config_t, hcomm_request_t,
 *   hcomm_channel_t, hcomm_stream_t, hcomm_event_t) are uintptr; an
 *   out-pointer handle (`*out`, `*req`) is a *uintptr that the wrapper fills
 *   from a C temporary.
 * - Buffers (void*, const void*) are unsafe.Pointer, passed to C as real
 *   pointers so that cgo checks them and keeps them alive for the call. The
 *   C side never retains them past the call (nonblocking calls get C
 *   memory from the hand-written layer).
 * - int* out-parameters are *int32 and size_t* are *uint64 (C int is 32
 *   bits, Go int 64: SWIG's default *int would be wrong); const char** is
 *   a *string.
 * - (ranks, nranks) is a []int32 and (n, reqs) a []uintptr.
 * - hcomm_stream_enqueue is reached through hcomm_go_stream_enqueue, which
 *   takes the fields of an hcomm_op_t as arguments and builds the struct
 *   with HCOMM_OP_INIT, so Go never sees hcomm_op_t. Its buffers are C
 *   memory (the hand-written layer stages them, as for nonblocking calls).
 *   hcomm_stream_enqueue_host is not bound: its callback would run on a
 *   thread of the library, outside the Go runtime.
 * - Every blocking call on a communicator, request, stream or event is
 *   also reached through hcomm_go_*_cancellable, which takes one more
 *   argument, `int* cancel` (NULL: none), for the package's ...Context
 *   calls; see "Cancellation" below.
 */

%{
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "CODE:MESSAGE" in malloc'd memory for a failed call, {NULL, 0} for
 * success; swigStatusError (below) turns it into a Go error and frees it.
 * If even that allocation fails: {NULL, CODE}. */
static _gostring_ hcomm_go_status(hcomm_status_t st) {
  _gostring_ r;
  char prefix[24];
  const char* msg;
  size_t m;
  int k;
  r.p = NULL;
  r.n = 0;
  if (st == HCOMM_SUCCESS) return r;
  msg = hcomm_last_error();
  if (msg == NULL) msg = "";
  m = strlen(msg);
  k = snprintf(prefix, sizeof prefix, "%d:", (int)st);
  r.p = (char*)malloc((size_t)k + m);
  if (r.p == NULL) {
    r.n = (intgo)st;
    return r;
  }
  memcpy(r.p, prefix, (size_t)k);
  memcpy(r.p + k, msg, m);
  r.n = (intgo)((size_t)k + m);
  return r;
}
%}

/* ---- hcomm_status_t results -> error ------------------------------------- */

%typemap(gotype) hcomm_status_t "error"
%typemap(imtype) hcomm_status_t "string"
%typemap(ctype) hcomm_status_t "_gostring_"
%typemap(out) hcomm_status_t %{ $result = hcomm_go_status($1); %}
%typemap(goout) hcomm_status_t %{ $result = swigStatusError($1) %}

/* ...but the argument of hcomm_status_string stays a number. */
%typemap(gotype) hcomm_status_t status "int"
%typemap(imtype) hcomm_status_t status "int"
%typemap(ctype) hcomm_status_t status "intgo"
%typemap(in) hcomm_status_t status %{ $1 = (hcomm_status_t)$input; %}
%typemap(goin) hcomm_status_t status ""

%insert(go_wrapper) %{

// Error is a failed hcomm call: Status is the hcomm_status_t value and
// Message the text of hcomm_last_error() taken right after the call.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("hcomm status %d: %s", e.Status, e.Message)
}

// swigStatusError turns the "CODE:MESSAGE" string that hcomm_go_status
// returned (in C memory) into nil or an *Error, and frees it.
func swigStatusError(s string) error {
	p := *(*swig_gostring)(unsafe.Pointer(&s))
	if p.p == 0 {
		if p.n == 0 {
			return nil
		}
		return &Error{Status: p.n, Message: "(out of memory while reading the error message)"}
	}
	t := swigCopyString(s)
	e := &Error{Status: int(HCOMM_ERR_INTERNAL), Message: t}
	if i := strings.IndexByte(t, ':'); i > 0 {
		if code, err := strconv.Atoi(t[:i]); err == nil {
			e.Status, e.Message = code, t[i+1:]
		}
	}
	return e
}
%}
%go_import("fmt", "strconv", "strings")

/* swigStatusError uses the CopyString runtime even where no char* result
 * would pull it in. */
%fragment("CopyString");

/* ---- opaque handles -> uintptr ------------------------------------------- */

%define HCOMM_GO_HANDLE(TYPE)
%typemap(gotype) TYPE "uintptr"
%typemap(imtype) TYPE "uintptr"
%typemap(ctype) TYPE "uintptr_t"
%typemap(in) TYPE %{ $1 = (TYPE)$input; %}
%typemap(goin) TYPE ""

%typemap(gotype) TYPE *out, TYPE *req "*uintptr"
%typemap(imtype) TYPE *out, TYPE *req "*uintptr"
%typemap(ctype) TYPE *out, TYPE *req "uintptr_t*"
%typemap(in) TYPE *out (TYPE temp = NULL), TYPE *req (TYPE temp = NULL)
%{ $1 = ($input != NULL) ? &temp : NULL; %}
%typemap(argout) TYPE *out, TYPE *req
%{ if ($input != NULL) *$input = temp$argnum; %}
%typemap(goin) TYPE *out, TYPE *req ""
%typemap(goargout) TYPE *out, TYPE *req ""
%enddef

HCOMM_GO_HANDLE(hcomm_config_t)
HCOMM_GO_HANDLE(hcomm_comm_t)
HCOMM_GO_HANDLE(hcomm_request_t)
HCOMM_GO_HANDLE(hcomm_channel_t)
HCOMM_GO_HANDLE(hcomm_stream_t)
HCOMM_GO_HANDLE(hcomm_event_t)

/* ---- buffers -> unsafe.Pointer ------------------------------------------- */

%typemap(gotype) void *, const void * "unsafe.Pointer"
%typemap(imtype) void *, const void * "unsafe.Pointer"
%typemap(ctype) void *, const void * "void*"
%typemap(in) void *, const void * %{ $1 = ($1_ltype)$input; %}
%typemap(goin) void *, const void * ""

/* ---- scalar out-parameters ------------------------------------------------ */

%typemap(gotype) int * "*int32"
%typemap(imtype) int * "*int32"
%typemap(ctype) int * "int*"
%typemap(in) int * %{ $1 = ($1_ltype)$input; %}
%typemap(goin) int * ""

%typemap(gotype) size_t * "*uint64"
%typemap(imtype) size_t * "*uint64"
%typemap(ctype) size_t * "size_t*"
%typemap(in) size_t * %{ $1 = ($1_ltype)$input; %}
%typemap(goin) size_t * ""

/* const char** out-parameters (hcomm_comm_transport's name): a *string. The
 * C string is copied to C memory in the wrapper, then into a Go string. */
%typemap(gotype) const char ** "*string"
%typemap(imtype) const char ** "*string"
%typemap(ctype) const char ** "_gostring_*"
%typemap(in) const char ** (const char* temp = NULL)
%{ $1 = ($input != NULL) ? ($1_ltype)&temp : NULL; %}
%typemap(argout, fragment="AllocateString") const char **
%{
  if ($input != NULL) {
    *$input = Swig_AllocateString(temp$argnum ? temp$argnum : "",
                                  temp$argnum ? strlen(temp$argnum) : 0);
  }
%}
%typemap(goin) const char ** ""
%typemap(goargout, fragment="CopyString") const char **
%{
	if $input != nil {
		*$input = swigCopyString(*$input)
	}
%}

/* ---- arrays ---------------------------------------------------------------- */

%typemap(gotype) (const int* ranks, int nranks) "[]int32"
%typemap(imtype) (const int* ranks, int nranks) "[]int32"
%typemap(ctype) (const int* ranks, int nranks) "_goslice_"
%typemap(in) (const int* ranks, int nranks)
%{
  $1 = ($1_ltype)$input.array;
  $2 = (int)$input.len;
%}
%typemap(goin) (const int* ranks, int nranks) ""

%typemap(gotype) (int n, hcomm_request_t* reqs) "[]uintptr"
%typemap(imtype) (int n, hcomm_request_t* reqs) "[]uintptr"
%typemap(ctype) (int n, hcomm_request_t* reqs) "_goslice_"
%typemap(in) (int n, hcomm_request_t* reqs)
%{
  $1 = (int)$input.len;
  $2 = (hcomm_request_t*)$input.array;
%}
%typemap(goin) (int n, hcomm_request_t* reqs) ""

/* ---- C memory for nonblocking calls -------------------------------------- */
/* C must not keep a Go pointer after a call returns, but the buffer of an
 * isend/irecv/iallreduce is used until the request completes; the
 * hand-written layer therefore stages those buffers in C memory. */

%typemap(out) void * %{ $result = $1; %}
%typemap(goout) void * ""

%inline %{
/* n bytes of C memory (uninitialised), or NULL when n is 0 or out of
 * memory. */
static void* hcomm_go_malloc(size_t n) { return n > 0 ? malloc(n) : NULL; }
static void hcomm_go_free(void* p) { free(p); }
%}

/* ---- streams ---------------------------------------------------------------- */

%ignore hcomm_op_t;
%ignore hcomm_stream_enqueue;
%ignore hcomm_stream_enqueue_host;

%inline %{
/* One operation onto a stream, its hcomm_op_t built here from HCOMM_OP_INIT
 * (the struct_size of the header this library was built with). */
static hcomm_status_t hcomm_go_stream_enqueue(hcomm_stream_t s, hcomm_op_kind_t kind,
                                              const void* sendbuf, void* recvbuf, size_t count,
                                              hcomm_dtype_t dtype, hcomm_reduce_op_t op,
                                              int peer_or_root, int tag) {
  hcomm_op_t o = HCOMM_OP_INIT;
  o.kind = kind;
  o.sendbuf = sendbuf;
  o.recvbuf = recvbuf;
  o.count = count;
  o.dtype = dtype;
  o.op = op;
  o.peer_or_root = peer_or_root;
  o.tag = tag;
  return hcomm_stream_enqueue(s, &o);
}
%}

/* The scheduler: not in this binding yet. */
%rename("$ignore", regexmatch$name="^hcomm_scheduler_") "";
%ignore hcomm_task_info_t;
%ignore hcomm_policy_fn;

/* ---- Cancellation (the ...Context calls of package hcomm) ------------------ */
/* The library lets a binding end a blocking call from outside: a check
 * registered with hcomm_internal_set_interrupt_check (c_api/interrupt_hook.h,
 * exported by libhcomm_c.so but not installed, hence the declaration here)
 * runs on the thread waiting inside a call after it has waited 100 ms and
 * every 100 ms after that; when it returns nonzero, the call ends as at its
 * deadline (TIMEOUT, the message saying it was interrupted), unwinding as a
 * timeout does (a receive is withdrawn, a collective fails).
 *
 * hcomm_go_*_cancellable(..., int* cancel) makes its call with `cancel` in a
 * thread-local variable, all within one cgo call, so on one OS thread; the
 * check reads the flag of its own thread. `cancel` is Go memory: it is held
 * only for the duration of the call (cgo's rule) and set by a goroutine with
 * an atomic store of 1 when the call should end. The check answers 1 once
 * it sees the flag set and stores 2 into it, so that the Go side can tell a
 * call that the flag ended from one that ended by itself meanwhile. Threads
 * without a flag (the library's own, other bindings' calls) are never
 * interrupted. */

%{
HCOMM_API void hcomm_internal_set_interrupt_check(int (*check)(void));

static __thread int* hcomm_go_cancel;

static int hcomm_go_interrupt_check(void) {
  int* flag = hcomm_go_cancel;
  if (flag == NULL || __atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0) return 0;
  __atomic_store_n(flag, 2, __ATOMIC_RELEASE);
  return 1;
}

/* Returns `call` made with `cancel` as this thread's flag. */
#define HCOMM_GO_CANCELLABLE(cancel, call) \
  do {                                     \
    hcomm_status_t hcomm_go_st_;           \
    hcomm_go_cancel = (cancel);            \
    hcomm_go_st_ = (call);                 \
    hcomm_go_cancel = NULL;                \
    return hcomm_go_st_;                   \
  } while (0)
%}

%inline %{
/* Registers the check (process-wide; idempotent). Until then no call is
 * ever interrupted, and the library's waits do not look at the flags. */
static void hcomm_go_enable_interrupts(void) {
  hcomm_internal_set_interrupt_check(&hcomm_go_interrupt_check);
}

static hcomm_status_t hcomm_go_send_cancellable(const void* buf, size_t count, hcomm_dtype_t dtype,
                                                int peer, int tag, hcomm_comm_t comm,
                                                int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_send(buf, count, dtype, peer, tag, comm));
}

static hcomm_status_t hcomm_go_recv_cancellable(void* buf, size_t count, hcomm_dtype_t dtype,
                                                int peer, int tag, hcomm_comm_t comm,
                                                int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_recv(buf, count, dtype, peer, tag, comm));
}

static hcomm_status_t hcomm_go_wait_cancellable(hcomm_request_t req, int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_wait(req));
}

static hcomm_status_t hcomm_go_allreduce_cancellable(const void* sendbuf, void* recvbuf,
                                                     size_t count, hcomm_dtype_t dtype,
                                                     hcomm_reduce_op_t op, hcomm_comm_t comm,
                                                     int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_allreduce(sendbuf, recvbuf, count, dtype, op, comm));
}

static hcomm_status_t hcomm_go_broadcast_cancellable(void* buf, size_t count, hcomm_dtype_t dtype,
                                                     int root, hcomm_comm_t comm, int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_broadcast(buf, count, dtype, root, comm));
}

static hcomm_status_t hcomm_go_reduce_cancellable(const void* sendbuf, void* recvbuf, size_t count,
                                                  hcomm_dtype_t dtype, hcomm_reduce_op_t op,
                                                  int root, hcomm_comm_t comm, int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_reduce(sendbuf, recvbuf, count, dtype, op, root, comm));
}

static hcomm_status_t hcomm_go_allgather_cancellable(const void* sendbuf, void* recvbuf,
                                                     size_t count, hcomm_dtype_t dtype,
                                                     hcomm_comm_t comm, int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_allgather(sendbuf, recvbuf, count, dtype, comm));
}

static hcomm_status_t hcomm_go_reduce_scatter_cancellable(const void* sendbuf, void* recvbuf,
                                                          size_t count, hcomm_dtype_t dtype,
                                                          hcomm_reduce_op_t op,
                                                          hcomm_comm_t comm, int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_reduce_scatter(sendbuf, recvbuf, count, dtype, op, comm));
}

static hcomm_status_t hcomm_go_alltoall_cancellable(const void* sendbuf, void* recvbuf,
                                                    size_t count, hcomm_dtype_t dtype,
                                                    hcomm_comm_t comm, int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_alltoall(sendbuf, recvbuf, count, dtype, comm));
}

static hcomm_status_t hcomm_go_gather_cancellable(const void* sendbuf, void* recvbuf, size_t count,
                                                  hcomm_dtype_t dtype, int root,
                                                  hcomm_comm_t comm, int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_gather(sendbuf, recvbuf, count, dtype, root, comm));
}

static hcomm_status_t hcomm_go_scatter_cancellable(const void* sendbuf, void* recvbuf,
                                                   size_t count, hcomm_dtype_t dtype, int root,
                                                   hcomm_comm_t comm, int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_scatter(sendbuf, recvbuf, count, dtype, root, comm));
}

static hcomm_status_t hcomm_go_barrier_cancellable(hcomm_comm_t comm, int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_barrier(comm));
}

static hcomm_status_t hcomm_go_stream_synchronize_cancellable(hcomm_stream_t stream,
                                                              int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_stream_synchronize(stream));
}

static hcomm_status_t hcomm_go_event_synchronize_cancellable(hcomm_event_t event, int* cancel) {
  HCOMM_GO_CANCELLABLE(cancel, hcomm_event_synchronize(event));
}
%}
