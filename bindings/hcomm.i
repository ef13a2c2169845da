/* The one SWIG interface of hcomm, over the public C header only.
 *
 * Each language adds its own fragment (typemaps that turn a non-success
 * status plus hcomm_last_error() into that language's error, handles
 * returned instead of out-pointers, buffers) from bindings/<lang>/, and its
 * hand-written idiomatic layer lives beside it. The build passes the module
 * name (-module) per language; see tools/bzl/. */
%module hcomm

%{
#include "hcomm/hcomm.h"
%}

%include "stdint.i"

#if defined(SWIGPYTHON)
%include "bindings/python/hcomm_python.i"
#elif defined(SWIGJAVA)
%include "bindings/java/hcomm_java.i"
#elif defined(SWIGGO)
%include "bindings/go/hcomm_go.i"
#endif

%include "hcomm/hcomm.h"
