/* Python fragment of bindings/hcomm.i (%included for SWIGPYTHON only).
 *
 * Builds the private extension module `hcomm._native` (swig -python -noproxy
 * -threads -module _native; see tools/bzl/hcomm_python.bzl). The public API
 * is the hand-written package bindings/python/hcomm/, which is the only user
 * of this module. What this fragment does to the C API:
 *
 * - Status: ONE typemap turns every hcomm_status_t other than HCOMM_SUCCESS
 *   into the exception class of that code (hcomm.errors: HcommError and its
 *   subclasses), with attribute `status` and the message of
 *   hcomm_last_error(), read on the calling thread right after the call.
 *   A function whose only result is its status returns None.
 * - Out pointers: handles (config, comm, request, channel) and ints/sizes
 *   come back as return values (a list when there are several). A NULL
 *   handle (a rank outside a new group) comes back as None.
 * - Buffers (every `void*` / `const void*` parameter) are any Python object
 *   with the buffer protocol, or None for NULL. The C call gets the object's
 *   own memory (PyObject_GetBuffer, C-contiguous; writable where the call
 *   writes), never a copy. The export is released when the call returns, so
 *   callers that hand a buffer to a nonblocking call must keep the object
 *   alive and unresizable themselves (the package holds a memoryview).
 *   The caller passes count and dtype; the package checks them against the
 *   buffer's size before calling (this module trusts them, as C does).
 * - The GIL is released during every C call (-threads), so blocking calls
 *   let other Python threads run.
 */

%{
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_api/interrupt_hook.h"

/* Imports hcomm.errors (the package's exception classes) once. */
static PyObject* hcomm_py_errors_module(void) {
  static PyObject* mod = NULL;
  if (mod == NULL) mod = PyImport_ImportModule("hcomm.errors");
  return mod;
}

/* Sets the Python error for `status` with `message` (UTF-8, bad bytes
 * replaced). `nbytes`, when not NULL, becomes the exception's `nbytes`
 * attribute (the size of a message that did not fit). Falls back to
 * RuntimeError if the package's error classes cannot be imported. */
static void hcomm_py_set_error(int status, const char* message, const size_t* nbytes) {
  PyObject* msg = PyUnicode_DecodeUTF8(message, (Py_ssize_t)strlen(message), "replace");
  PyObject* mod = hcomm_py_errors_module();
  PyObject* exc = NULL;
  if (msg != NULL && mod != NULL) {
    exc = PyObject_CallMethod(mod, "_from_status", "iO", status, msg);
  }
  if (exc != NULL && nbytes != NULL) {
    PyObject* n = PyLong_FromSize_t(*nbytes);
    if (n == NULL || PyObject_SetAttrString(exc, "nbytes", n) != 0) Py_CLEAR(exc);
    Py_XDECREF(n);
  }
  if (exc != NULL) {
    PyErr_SetObject((PyObject*)Py_TYPE(exc), exc);
    Py_DECREF(exc);
  } else if (PyErr_Occurred() != NULL && !PyErr_ExceptionMatches(PyExc_Exception)) {
    /* A KeyboardInterrupt (or SystemExit) raised by a signal handler while
     * the error was built: it is the user's, and goes on in its place. */
  } else {
    PyErr_Clear();
    PyErr_Format(PyExc_RuntimeError, "%s (%d): %s", hcomm_status_string((hcomm_status_t)status),
                 status, message);
  }
  Py_XDECREF(msg);
}

/* Turns the pending Python error of a failed buffer export (not a buffer,
 * read-only, not contiguous) into hcomm.InvalidArgumentError naming the
 * function and the parameter. */
static void hcomm_py_buffer_error(const char* func, const char* param, int writable) {
  PyObject *type, *value, *tb, *text = NULL;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value != NULL) text = PyObject_Str(value);
  const char* detail = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
  PyErr_Clear();
  char buf[512];
  snprintf(buf, sizeof buf,
           "%s: parameter '%s' needs a C-contiguous%s buffer (numpy array, CPU torch tensor, "
           "bytearray, memoryview, ...): %s",
           func, param, writable ? ", writable" : "", detail != NULL ? detail : "not a buffer");
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  hcomm_py_set_error(HCOMM_ERR_INVALID_ARGUMENT, buf, NULL);
}
%}

/* ---- status: the one error typemap ------------------------------------- */

%typemap(out) hcomm_status_t {
  /* A signal handler that raised inside the call (hcomm_py_check_signals):
   * its exception is what the caller gets, whatever the call returned. */
  if (PyErr_Occurred() != NULL) SWIG_fail;
  if ($1 != HCOMM_SUCCESS) {
    hcomm_py_set_error((int)$1, hcomm_last_error(), NULL);
    SWIG_fail;
  }
  $result = SWIG_Py_Void();
}

/* hcomm_channel_read: the same, and a MISMATCH also carries the size of the
 * message that did not fit (exception attribute `nbytes`), so the caller can
 * grow its buffer and read again. */
%typemap(out) hcomm_status_t hcomm_channel_read {
  if (PyErr_Occurred() != NULL) SWIG_fail;
  if ($1 != HCOMM_SUCCESS) {
    hcomm_py_set_error((int)$1, hcomm_last_error(), $1 == HCOMM_ERR_MISMATCH ? arg4 : NULL);
    SWIG_fail;
  }
  $result = SWIG_Py_Void();
}

/* ---- buffers: zero copy through the buffer protocol --------------------- */

%typemap(in) const void* (Py_buffer view, int have_view = 0) {
  if ($input == Py_None) {
    $1 = NULL;
  } else {
    if (PyObject_GetBuffer($input, &view, PyBUF_C_CONTIGUOUS) != 0) {
      hcomm_py_buffer_error("$symname", "$1_name", 0);
      SWIG_fail;
    }
    have_view = 1;
    $1 = view.buf;
  }
}
%typemap(freearg) const void* {
  if (have_view$argnum) PyBuffer_Release(&view$argnum);
}
%typemap(typecheck, precedence=SWIG_TYPECHECK_POINTER) const void*, void* {
  $1 = ($input == Py_None || PyObject_CheckBuffer($input)) ? 1 : 0;
}

%typemap(in) void* (Py_buffer view, int have_view = 0) {
  if ($input == Py_None) {
    $1 = NULL;
  } else {
    if (PyObject_GetBuffer($input, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) {
      hcomm_py_buffer_error("$symname", "$1_name", 1);
      SWIG_fail;
    }
    have_view = 1;
    $1 = view.buf;
  }
}
%typemap(freearg) void* {
  if (have_view$argnum) PyBuffer_Release(&view$argnum);
}

/* ---- out-pointer handles become return values --------------------------- */

%define HCOMM_PY_OUT_HANDLE(HANDLE, NAME)
%typemap(in, numinputs=0) HANDLE* NAME (HANDLE tmp = NULL) {
  $1 = &tmp;
}
%typemap(argout) HANDLE* NAME {
  $result = SWIG_Python_AppendOutput($result,
      SWIG_NewPointerObj(SWIG_as_voidptr(tmp$argnum), $descriptor(HANDLE), 0));
}
%enddef

HCOMM_PY_OUT_HANDLE(hcomm_config_t, out)
HCOMM_PY_OUT_HANDLE(hcomm_comm_t, out)
HCOMM_PY_OUT_HANDLE(hcomm_request_t, req)
HCOMM_PY_OUT_HANDLE(hcomm_channel_t, out)
HCOMM_PY_OUT_HANDLE(hcomm_stream_t, out)
HCOMM_PY_OUT_HANDLE(hcomm_event_t, out)

/* ---- out-pointer numbers become return values ---------------------------- */

%include "typemaps.i"
%apply int* OUTPUT { int* rank, int* size, int* major, int* minor, int* patch, int* done,
                     int* source, int* tag, int* idle };

%typemap(in, numinputs=0) size_t* count (size_t tmp = 0), size_t* nbytes (size_t tmp = 0) {
  $1 = &tmp;
}
%typemap(argout) size_t* count, size_t* nbytes {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromSize_t(tmp$argnum));
}

/* Static strings returned through `const char** name` (hcomm_comm_transport). */
%typemap(in, numinputs=0) const char** name (const char* tmp = NULL) {
  $1 = ($1_ltype)&tmp;  /* SWIG declares the argument without its const */
}
%typemap(argout) const char** name {
  $result = SWIG_Python_AppendOutput($result,
      tmp$argnum != NULL ? PyUnicode_FromString(tmp$argnum) : SWIG_Py_Void());
}

/* ---- input arrays from Python sequences ---------------------------------- */

/* hcomm_comm_create_group(comm, ranks, nranks): `ranks` is a sequence of int. */
%typemap(in) (const int* ranks, int nranks) (int* arr = NULL) {
  PyObject* seq = PySequence_Fast($input, "ranks must be a sequence of int");
  if (seq == NULL) SWIG_fail;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  arr = (int*)malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  if (arr == NULL) { Py_DECREF(seq); PyErr_NoMemory(); SWIG_fail; }
  for (Py_ssize_t i = 0; i < n; ++i) {
    long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
    if (v == -1 && PyErr_Occurred()) { Py_DECREF(seq); SWIG_fail; }
    if (v < INT_MIN || v > INT_MAX) {
      Py_DECREF(seq);
      PyErr_SetString(PyExc_OverflowError, "rank does not fit in a C int");
      SWIG_fail;
    }
    arr[i] = (int)v;
  }
  Py_DECREF(seq);
  if (n > INT_MAX) { PyErr_SetString(PyExc_OverflowError, "too many ranks"); SWIG_fail; }
  $1 = arr;
  $2 = (int)n;
}
%typemap(freearg) (const int* ranks, int nranks) {
  free(arr$argnum);
}

/* hcomm_waitall(n, reqs): `reqs` is a sequence of request handles. */
%typemap(in) (int n, hcomm_request_t* reqs) (hcomm_request_t* arr = NULL) {
  PyObject* seq = PySequence_Fast($input, "reqs must be a sequence of request handles");
  if (seq == NULL) SWIG_fail;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > INT_MAX) { Py_DECREF(seq); PyErr_SetString(PyExc_OverflowError, "too many requests"); SWIG_fail; }
  arr = (hcomm_request_t*)calloc((size_t)(n > 0 ? n : 1), sizeof(hcomm_request_t));
  if (arr == NULL) { Py_DECREF(seq); PyErr_NoMemory(); SWIG_fail; }
  for (Py_ssize_t i = 0; i < n; ++i) {
    void* p = NULL;
    int res = SWIG_ConvertPtr(PySequence_Fast_GET_ITEM(seq, i), &p,
                              $descriptor(hcomm_request_t), 0);
    if (!SWIG_IsOK(res)) {
      Py_DECREF(seq);
      SWIG_exception_fail(SWIG_ArgError(res), "in method '$symname', reqs must be request handles");
    }
    arr[i] = (hcomm_request_t)p;
  }
  Py_DECREF(seq);
  $1 = (int)n;
  $2 = arr;
}
%typemap(freearg) (int n, hcomm_request_t* reqs) {
  free(arr$argnum);
}

/* ---- helpers for the package --------------------------------------------- */

/* hcomm_py_enable_interrupts(ident): from now on a blocking call made on the
 * thread `ident` (the main thread's threading ident, i.e. its pthread_t),
 * which is where Python runs signal handlers, runs them every 100 ms while
 * it waits (c_api/interrupt_hook.h). When one raises (Ctrl-C's
 * KeyboardInterrupt), the call ends as at its deadline and the exception
 * propagates. Other threads' calls are left alone. */
%nothread hcomm_py_enable_interrupts;
%inline %{
static unsigned long hcomm_py_main_thread;

static int hcomm_py_check_signals(void) {
  if ((unsigned long)pthread_self() != hcomm_py_main_thread) return 0;
  PyGILState_STATE gil = PyGILState_Ensure();
  /* The exception a handler raises stays set on this thread for the
   * status typemap to find when the call returns. */
  const int raised = PyErr_CheckSignals() != 0;
  PyGILState_Release(gil);
  return raised;
}

static void hcomm_py_enable_interrupts(unsigned long ident) {
  hcomm_py_main_thread = ident;
  hcomm_internal_set_interrupt_check(&hcomm_py_check_signals);
}
%}

/* hcomm_py_buffer_address(obj): the address of obj's memory, read through the
 * buffer protocol (the package checks buffers of one call for overlap). */
%nothread hcomm_py_buffer_address;
%inline %{
static PyObject* hcomm_py_buffer_address(PyObject* obj) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) != 0) return NULL;
  PyObject* address = PyLong_FromVoidPtr(view.buf);
  PyBuffer_Release(&view);
  return address;
}
%}

/* ---- streams ------------------------------------------------------------- */

/* The package enqueues through hcomm_py_stream_enqueue, which takes an
 * operation's fields as arguments (buffers through the typemaps above; the
 * package keeps them alive until the operation has run). Host callbacks
 * are not offered: a Python callable would run on a thread of the library
 * without the GIL. */
%ignore hcomm_op_t;
%ignore hcomm_stream_enqueue;
%ignore hcomm_stream_enqueue_host;
%inline %{
static hcomm_status_t hcomm_py_stream_enqueue(hcomm_stream_t s, int kind, const void* sendbuf,
                                              void* recvbuf, size_t count, int dtype, int op,
                                              int peer_or_root, int tag) {
  hcomm_op_t o = HCOMM_OP_INIT;
  /* Through memcpy: dtype and op may be any int (hcomm.h's enums). */
  memcpy(&o.kind, &kind, sizeof kind);
  o.sendbuf = sendbuf;
  o.recvbuf = recvbuf;
  o.count = count;
  memcpy(&o.dtype, &dtype, sizeof dtype);
  memcpy(&o.op, &op, sizeof op);
  o.peer_or_root = peer_or_root;
  o.tag = tag;
  return hcomm_stream_enqueue(s, &o);
}
%}

/* ---- the communication scheduler ------------------------------------------ */

/* Tasks and policies are Python callables, called from the scheduler's
 * threads (tasks) and the caller's (policies) while hcomm_scheduler_run has
 * the GIL released: the trampolines take the GIL for the call. The package
 * keeps the callables alive as long as the scheduler, catches what they
 * raise, and raises it again from run(). */
%ignore hcomm_task_info_t;
%ignore hcomm_policy_fn;
%ignore hcomm_scheduler_add_task;
%ignore hcomm_scheduler_set_policy;
%{
/* A task: task(stream_handle) -> int status (0, or the code of what it raised). */
static hcomm_status_t hcomm_py_task(hcomm_stream_t s, void* arg) {
  PyGILState_STATE gil = PyGILState_Ensure();
  long code = HCOMM_ERR_INTERNAL;
  PyObject* handle = SWIG_NewPointerObj(SWIG_as_voidptr(s), SWIGTYPE_p_hcomm_stream_s, 0);
  PyObject* r = handle != NULL ? PyObject_CallFunctionObjArgs((PyObject*)arg, handle, NULL) : NULL;
  if (r != NULL) {
    code = PyLong_AsLong(r);
    if (code == -1 && PyErr_Occurred()) code = HCOMM_ERR_INTERNAL;
  }
  PyErr_Clear();  /* the package's wrapper kept what was raised */
  Py_XDECREF(r);
  Py_XDECREF(handle);
  PyGILState_Release(gil);
  return (hcomm_status_t)code;
}

/* A policy: policy([(id, priority, registration_index), ...]) -> index;
 * -1 (refused by the scheduler as out of range) when it raised. */
static int hcomm_py_policy(const hcomm_task_info_t* ready, int nready, void* user) {
  PyGILState_STATE gil = PyGILState_Ensure();
  long pick = -1;
  PyObject* list = PyList_New(nready);
  for (int i = 0; list != NULL && i < nready; ++i) {
    PyObject* t = Py_BuildValue("(sii)", ready[i].id, ready[i].priority,
                                ready[i].registration_index);
    if (t == NULL) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, i, t);
  }
  PyObject* r = list != NULL ? PyObject_CallFunctionObjArgs((PyObject*)user, list, NULL) : NULL;
  if (r != NULL) {
    pick = PyLong_AsLong(r);
    if (pick == -1 && PyErr_Occurred()) pick = -1;
  }
  PyErr_Clear();
  Py_XDECREF(r);
  Py_XDECREF(list);
  PyGILState_Release(gil);
  return (int)pick;
}
%}

%nothread hcomm_py_scheduler_add_task;
%nothread hcomm_py_scheduler_set_policy;
%inline %{
/* hcomm_scheduler_add_task with `deps` a sequence of str and `task` a
 * callable (see hcomm_py_task). */
static PyObject* hcomm_py_scheduler_add_task(hcomm_scheduler_t s, const char* id, int priority,
                                             PyObject* deps, PyObject* task) {
  PyObject* seq = PySequence_Fast(deps, "depends_on must be a sequence of str");
  if (seq == NULL) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  const char** names = (const char**)calloc((size_t)(n > 0 ? n : 1), sizeof(char*));
  if (names == NULL) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    names[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
    if (names[i] == NULL) {
      free(names);
      Py_DECREF(seq);
      return NULL;
    }
  }
  hcomm_status_t st = hcomm_scheduler_add_task(s, id, priority, names, (int)n,
                                               &hcomm_py_task, task);
  free(names);
  Py_DECREF(seq);
  if (st != HCOMM_SUCCESS) {
    hcomm_py_set_error((int)st, hcomm_last_error(), NULL);
    return NULL;
  }
  Py_RETURN_NONE;
}

/* hcomm_scheduler_set_policy with a callable (see hcomm_py_policy), or None
 * for the default policy. */
static PyObject* hcomm_py_scheduler_set_policy(hcomm_scheduler_t s, PyObject* policy) {
  hcomm_status_t st = policy == Py_None
                          ? hcomm_scheduler_set_policy(s, NULL, NULL)
                          : hcomm_scheduler_set_policy(s, &hcomm_py_policy, policy);
  if (st != HCOMM_SUCCESS) {
    hcomm_py_set_error((int)st, hcomm_last_error(), NULL);
    return NULL;
  }
  Py_RETURN_NONE;
}
%}

HCOMM_PY_OUT_HANDLE(hcomm_scheduler_t, out)
