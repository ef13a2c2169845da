"""Exceptions of hcomm: one class per status code of the C API.

Every failed hcomm call raises an instance of HcommError, a RuntimeError,
or, for the codes that have one, of its subclass. `status` is the numeric
code (hcomm_status_t), `status_name` its name ("HCOMM_ERR_TIMEOUT"), and the
message is "hcomm operation <what>: " followed by hcomm_last_error() of the
failed call (rank, peer, tag, sizes), e.g. "hcomm operation timeout: recv
from rank 1 tag 0 ...", the way torch.distributed users catch
RuntimeError.

    try:
        hcomm.recv(buf, src=1)
    except hcomm.TimeoutError as e:        # also a builtin TimeoutError
        print(e.status, e)
"""

import builtins
import enum

__all__ = [
    "Status",
    "HcommError",
    "InvalidArgumentError",
    "NoDeviceError",
    "OutOfMemoryError",
    "OutOfMemError",
    "TimeoutError",
    "PeerFailureError",
    "MismatchError",
    "AbortedError",
    "UnavailableError",
    "PermissionDeniedError",
    "NotSupportedError",
    "InternalError",
]


class Status(enum.IntEnum):
    """hcomm_status_t (values are part of the ABI)."""

    SUCCESS = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_NO_DEVICE = 2
    ERR_OUT_OF_MEM = 3
    ERR_TIMEOUT = 4
    ERR_PEER_FAILURE = 5
    ERR_MISMATCH = 6
    ERR_ABORTED = 7
    ERR_UNAVAILABLE = 8
    ERR_PERMISSION_DENIED = 9
    ERR_NOT_SUPPORTED = 10
    ERR_INTERNAL = 11


class HcommError(RuntimeError):
    """A failed hcomm call. `status` is the numeric hcomm_status_t."""

    status = None  # Each subclass sets its own code.

    def __init__(self, message="", status=None):
        super().__init__(message)
        if status is not None:
            self.status = int(status)

    @property
    def status_name(self):
        """The C name of the status, e.g. "HCOMM_ERR_TIMEOUT"."""
        try:
            return "HCOMM_" + Status(self.status).name
        except (ValueError, TypeError):
            return "HCOMM_UNKNOWN_STATUS"

    def __str__(self):
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):
        return (type(self), (str(self), self.status), self.__dict__ or None)


class InvalidArgumentError(HcommError):
    """Bad input (buffer, rank, tag, dtype, config key); nothing changed."""

    status = Status.ERR_INVALID_ARGUMENT


class NoDeviceError(HcommError):
    """The requested transport/device is absent (or a channel name is not open)."""

    status = Status.ERR_NO_DEVICE


class OutOfMemoryError(HcommError):
    """An allocation (or /dev/shm) ran out of memory."""

    status = Status.ERR_OUT_OF_MEM


OutOfMemError = OutOfMemoryError  # The C name, HCOMM_ERR_OUT_OF_MEM.


class TimeoutError(HcommError, builtins.TimeoutError):
    """The call's deadline (timeout_ms) passed; also a builtin TimeoutError."""

    status = Status.ERR_TIMEOUT


class PeerFailureError(HcommError):
    """A peer died or its connection broke."""

    status = Status.ERR_PEER_FAILURE


class MismatchError(HcommError):
    """A message larger than the receive buffer, or ranks disagree on a collective.

    `nbytes` is the size of the message that did not fit, where the C API
    reports it (SharedMemoryChannel reads), else None.
    """

    status = Status.ERR_MISMATCH
    nbytes = None


class AbortedError(HcommError):
    """The communicator was aborted (or destroyed with the request pending)."""

    status = Status.ERR_ABORTED


class UnavailableError(HcommError):
    """The rendezvous store is unreachable, or init could not complete."""

    status = Status.ERR_UNAVAILABLE


class PermissionDeniedError(HcommError):
    """A peer or the store rejected our job token."""

    status = Status.ERR_PERMISSION_DENIED


class NotSupportedError(HcommError):
    """The operation is not supported."""

    status = Status.ERR_NOT_SUPPORTED


class InternalError(HcommError):
    """A bug in hcomm; report it with the message."""

    status = Status.ERR_INTERNAL


_BY_STATUS = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        NoDeviceError,
        OutOfMemoryError,
        TimeoutError,
        PeerFailureError,
        MismatchError,
        AbortedError,
        UnavailableError,
        PermissionDeniedError,
        NotSupportedError,
        InternalError,
    )
}


# What "hcomm operation ..." says for each status.
_WHAT = {
    Status.ERR_INVALID_ARGUMENT: "invalid argument",
    Status.ERR_NO_DEVICE: "no device",
    Status.ERR_OUT_OF_MEM: "out of memory",
    Status.ERR_TIMEOUT: "timeout",
    Status.ERR_PEER_FAILURE: "peer failure",
    Status.ERR_MISMATCH: "mismatch",
    Status.ERR_ABORTED: "aborted",
    Status.ERR_UNAVAILABLE: "unavailable",
    Status.ERR_PERMISSION_DENIED: "permission denied",
    Status.ERR_NOT_SUPPORTED: "not supported",
    Status.ERR_INTERNAL: "internal error",
}

_PREFIX = "hcomm operation "


def _message(status, message):
    """message prefixed "hcomm operation <what>: " (once)."""
    message = str(message)
    if message.startswith(_PREFIX):
        return message
    return "%s%s: %s" % (_PREFIX, _WHAT.get(status, "failed (status %s)" % status), message)


def _from_status(status, message):
    """The exception for a non-success status (called by the extension module)."""
    return _BY_STATUS.get(status, HcommError)(_message(status, message), status)


def _invalid(message):
    """An InvalidArgumentError raised by the Python layer itself (a
    collective refused here is then handed to the library to refuse too,
    see _communicator._collective)."""
    return InvalidArgumentError(_message(Status.ERR_INVALID_ARGUMENT, message),
                                Status.ERR_INVALID_ARGUMENT)

# Shown as hcomm.TimeoutError etc. in tracebacks (the package re-exports them).
for _cls in [HcommError] + list(_BY_STATUS.values()):
    _cls.__module__ = "hcomm"
del _cls
