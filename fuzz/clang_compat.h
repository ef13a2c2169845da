// Force-included (-include) into every translation unit of the fuzz build.
//
// transports/tcp/tcp_transport.h annotates private methods with
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->send_mu) where `Conn` is only forward
// declared. GCC (the Bazel toolchain) ignores thread-safety attributes, but
// clang parses them and rejects the member access into an incomplete type.
// The fuzz build does not run clang's thread-safety analysis anyway, so the
// annotation is dropped here rather than in the header.
#ifndef HCOMM_FUZZ_CLANG_COMPAT_H_
#define HCOMM_FUZZ_CLANG_COMPAT_H_

#include "absl/base/thread_annotations.h"

#undef ABSL_EXCLUSIVE_LOCKS_REQUIRED
#define ABSL_EXCLUSIVE_LOCKS_REQUIRED(...)

#endif  // HCOMM_FUZZ_CLANG_COMPAT_H_
