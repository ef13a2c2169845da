// hcomm's error vocabulary inside the C++ core.
//
// The core speaks absl::Status. hcomm has codes that canonical status codes
// cannot carry (PEER_FAILURE, MISMATCH, ...), so every hcomm error carries its
// precise code as a payload; c_api/ maps it to hcomm_status_t in one place.
//
//   return hcomm::PeerFailure(absl::StrCat("rank 3 closed its connection"));
//   ...
//   if (hcomm::CodeOf(status) == hcomm::ErrorCode::kPeerFailure) ...
//
// The numeric values equal hcomm_status_t's (c_api/include/hcomm/hcomm.h),
// which a static_assert in c_api checks.
#ifndef HCOMM_CORE_BASE_STATUS_H_
#define HCOMM_CORE_BASE_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace hcomm {

enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kNoDevice = 2,
  kOutOfMem = 3,
  kTimeout = 4,
  kPeerFailure = 5,
  kMismatch = 6,
  kAborted = 7,
  kUnavailable = 8,
  kPermissionDenied = 9,
  kNotSupported = 10,
  kInternal = 11,
};

// "HCOMM_ERR_TIMEOUT" and the like (hcomm_status_string's names);
// "HCOMM_UNKNOWN_STATUS" for a value that is not a code.
const char* ErrorCodeName(ErrorCode code);

// Makes a status with the given hcomm code and message.
absl::Status MakeError(ErrorCode code, absl::string_view message);

// The hcomm code of a status: its payload if it has one, else derived from
// the canonical code.
ErrorCode CodeOf(const absl::Status& status);

inline absl::Status InvalidArgument(absl::string_view m) {
  return MakeError(ErrorCode::kInvalidArgument, m);
}
inline absl::Status NoDevice(absl::string_view m) { return MakeError(ErrorCode::kNoDevice, m); }
inline absl::Status OutOfMem(absl::string_view m) { return MakeError(ErrorCode::kOutOfMem, m); }
inline absl::Status Timeout(absl::string_view m) { return MakeError(ErrorCode::kTimeout, m); }
inline absl::Status PeerFailure(absl::string_view m) {
  return MakeError(ErrorCode::kPeerFailure, m);
}
inline absl::Status Mismatch(absl::string_view m) { return MakeError(ErrorCode::kMismatch, m); }
inline absl::Status Aborted(absl::string_view m) { return MakeError(ErrorCode::kAborted, m); }
inline absl::Status Unavailable(absl::string_view m) {
  return MakeError(ErrorCode::kUnavailable, m);
}
inline absl::Status PermissionDenied(absl::string_view m) {
  return MakeError(ErrorCode::kPermissionDenied, m);
}
inline absl::Status NotSupported(absl::string_view m) {
  return MakeError(ErrorCode::kNotSupported, m);
}
inline absl::Status Internal(absl::string_view m) { return MakeError(ErrorCode::kInternal, m); }

// The same status with `context` prefixed to its message; the code and the
// payload are kept.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

// A duration for a message: "0.35 s", "12 s".
std::string Seconds(absl::Duration d);

}  // namespace hcomm

// Abseil 20220623 (Debian 12) has no ABSL_RETURN_IF_ERROR; these are ours.
#define HCOMM_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::absl::Status hcomm_status_ = (expr);          \
    if (!hcomm_status_.ok()) return hcomm_status_;  \
  } while (0)

#define HCOMM_STATUS_CONCAT_INNER_(a, b) a##b
#define HCOMM_STATUS_CONCAT_(a, b) HCOMM_STATUS_CONCAT_INNER_(a, b)
#define HCOMM_ASSIGN_OR_RETURN(lhs, expr) \
  HCOMM_ASSIGN_OR_RETURN_IMPL_(HCOMM_STATUS_CONCAT_(hcomm_statusor_, __LINE__), lhs, expr)
#define HCOMM_ASSIGN_OR_RETURN_IMPL_(so, lhs, expr) \
  auto so = (expr);                                 \
  if (!so.ok()) return so.status();                 \
  lhs = std::move(so).value()

#endif  // HCOMM_CORE_BASE_STATUS_H_
