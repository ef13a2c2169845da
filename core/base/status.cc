#include "core/base/status.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace hcomm {
namespace {

constexpr char kCodeUrl[] = "hcomm.dev/code";

absl::StatusCode CanonicalFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return absl::StatusCode::kOk;
    case ErrorCode::kInvalidArgument: return absl::StatusCode::kInvalidArgument;
    case ErrorCode::kNoDevice: return absl::StatusCode::kNotFound;
    case ErrorCode::kOutOfMem: return absl::StatusCode::kResourceExhausted;
    case ErrorCode::kTimeout: return absl::StatusCode::kDeadlineExceeded;
    case ErrorCode::kPeerFailure: return absl::StatusCode::kUnavailable;
    case ErrorCode::kMismatch: return absl::StatusCode::kFailedPrecondition;
    case ErrorCode::kAborted: return absl::StatusCode::kAborted;
    case ErrorCode::kUnavailable: return absl::StatusCode::kUnavailable;
    case ErrorCode::kPermissionDenied: return absl::StatusCode::kPermissionDenied;
    case ErrorCode::kNotSupported: return absl::StatusCode::kUnimplemented;
    case ErrorCode::kInternal: return absl::StatusCode::kInternal;
  }
  return absl::StatusCode::kInternal;
}

}  // namespace

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "HCOMM_SUCCESS";
    case ErrorCode::kInvalidArgument: return "HCOMM_ERR_INVALID_ARGUMENT";
    case ErrorCode::kNoDevice: return "HCOMM_ERR_NO_DEVICE";
    case ErrorCode::kOutOfMem: return "HCOMM_ERR_OUT_OF_MEM";
    case ErrorCode::kTimeout: return "HCOMM_ERR_TIMEOUT";
    case ErrorCode::kPeerFailure: return "HCOMM_ERR_PEER_FAILURE";
    case ErrorCode::kMismatch: return "HCOMM_ERR_MISMATCH";
    case ErrorCode::kAborted: return "HCOMM_ERR_ABORTED";
    case ErrorCode::kUnavailable: return "HCOMM_ERR_UNAVAILABLE";
    case ErrorCode::kPermissionDenied: return "HCOMM_ERR_PERMISSION_DENIED";
    case ErrorCode::kNotSupported: return "HCOMM_ERR_NOT_SUPPORTED";
    case ErrorCode::kInternal: return "HCOMM_ERR_INTERNAL";
  }
  return "HCOMM_UNKNOWN_STATUS";
}

absl::Status MakeError(ErrorCode code, absl::string_view message) {
  if (code == ErrorCode::kOk) return absl::OkStatus();
  absl::Status s(CanonicalFor(code), message);
  s.SetPayload(kCodeUrl, absl::Cord(absl::StrCat(static_cast<int>(code))));
  return s;
}

ErrorCode CodeOf(const absl::Status& status) {
  if (status.ok()) return ErrorCode::kOk;
  if (auto payload = status.GetPayload(kCodeUrl)) {
    int v = 0;
    if (absl::SimpleAtoi(std::string(*payload), &v) && v > 0 &&
        v <= static_cast<int>(ErrorCode::kInternal)) {
      return static_cast<ErrorCode>(v);
    }
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange: return ErrorCode::kInvalidArgument;
    case absl::StatusCode::kNotFound: return ErrorCode::kNoDevice;
    case absl::StatusCode::kResourceExhausted: return ErrorCode::kOutOfMem;
    case absl::StatusCode::kDeadlineExceeded: return ErrorCode::kTimeout;
    case absl::StatusCode::kFailedPrecondition: return ErrorCode::kMismatch;
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled: return ErrorCode::kAborted;
    case absl::StatusCode::kUnavailable: return ErrorCode::kUnavailable;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated: return ErrorCode::kPermissionDenied;
    case absl::StatusCode::kUnimplemented: return ErrorCode::kNotSupported;
    default: return ErrorCode::kInternal;
  }
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  absl::Status out(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload([&out](absl::string_view url, const absl::Cord& payload) {
    out.SetPayload(url, payload);
  });
  return out;
}

std::string Seconds(absl::Duration d) {
  const double seconds = absl::ToDoubleSeconds(d);
  // Two decimals below ten seconds, whole seconds above.
  return seconds < 10 ? absl::StrFormat("%.2f s", seconds) : absl::StrFormat("%.0f s", seconds);
}

}  // namespace hcomm
