"""Exceptions of hcomm: one class per status code of the C API.

Every failed hcomm call raises an instance of HcommError or, for the codes
that have one, of its subclass. `status` is the numeric code
(hcomm_status_t), `status_name` its name ("HCOMM_ERR_TIMEOUT"), and the
message is hcomm_last_error() of the failed call (rank, peer, tag, sizes).

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


class HcommError(Exception):
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


def _from_status(status, message):
    """The exception for a non-success status (called by the extension module)."""
    return _BY_STATUS.get(status, HcommError)(message, status)


def _invalid(message):
    """An InvalidArgumentError raised by the Python layer itself (a
    collective refused here is then handed to the library to refuse too,
    see _communicator._collective)."""
    return InvalidArgumentError(message, Status.ERR_INVALID_ARGUMENT)

# Shown as hcomm.TimeoutError etc. in tracebacks (the package re-exports them).
for _cls in [HcommError] + list(_BY_STATUS.values()):
    _cls.__module__ = "hcomm"
del _cls
