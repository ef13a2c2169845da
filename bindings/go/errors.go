package hcomm

import (
	"errors"
	"fmt"

	"hcomm.local/hcomm/internal/capi"
)

// Status is an hcomm_status_t: the outcome of a call. Values are those of
// hcomm.h and never change.
type Status int

// The status codes of hcomm.h.
const (
	StatusSuccess          Status = 0
	StatusInvalidArgument  Status = 1  // bad argument, or a closed/nil handle
	StatusNoDevice         Status = 2  // requested transport/device (or channel) absent
	StatusOutOfMem         Status = 3  // out of memory
	StatusTimeout          Status = 4  // the communicator's timeout passed
	StatusPeerFailure      Status = 5  // a peer died or its connection broke
	StatusMismatch         Status = 6  // message larger than the buffer, or ranks disagree
	StatusAborted          Status = 7  // the communicator was aborted (or closed)
	StatusUnavailable      Status = 8  // rendezvous store unreachable
	StatusPermissionDenied Status = 9  // peer or store rejected the job token
	StatusNotSupported     Status = 10 // not supported
	StatusInternal         Status = 11 // a bug in hcomm
)

// String returns the C name of the status, e.g. "HCOMM_ERR_TIMEOUT"
// (hcomm_status_string).
func (s Status) String() string {
	if int64(s) != int64(int32(s)) {
		return "HCOMM_UNKNOWN_STATUS"
	}
	return capi.Hcomm_status_string(int(s))
}

// Error is the error every function of this package returns: the status
// and the message of hcomm_last_error() for the failed call (which names
// the rank, peer, tag and sizes involved).
//
//	var e *hcomm.Error
//	if errors.As(err, &e) && e.Status == hcomm.StatusTimeout { ... }
//	if errors.Is(err, hcomm.ErrTimeout) { ... }  // the same test
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "hcomm: " + e.Status.String()
	}
	return "hcomm: " + e.Status.String() + ": " + e.Message
}

// Is reports whether target is an *Error with the same Status (its Message
// is not compared), so that errors.Is(err, hcomm.ErrTimeout) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && e != nil && t.Status == e.Status
}

// Timeout reports whether the error is StatusTimeout (as net.Error does).
func (e *Error) Timeout() bool { return e.Status == StatusTimeout }

// Sentinels for errors.Is: each matches every *Error of its status.
var (
	ErrInvalidArgument  = &Error{Status: StatusInvalidArgument}
	ErrNoDevice         = &Error{Status: StatusNoDevice}
	ErrOutOfMem         = &Error{Status: StatusOutOfMem}
	ErrTimeout          = &Error{Status: StatusTimeout}
	ErrPeerFailure      = &Error{Status: StatusPeerFailure}
	ErrMismatch         = &Error{Status: StatusMismatch}
	ErrAborted          = &Error{Status: StatusAborted}
	ErrUnavailable      = &Error{Status: StatusUnavailable}
	ErrPermissionDenied = &Error{Status: StatusPermissionDenied}
	ErrNotSupported     = &Error{Status: StatusNotSupported}
	ErrInternal         = &Error{Status: StatusInternal}
)

// fromC turns the error of a generated call (nil or *capi.Error) into nil
// or an *Error.
func fromC(err error) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*Error); ok {
		return e // found on the Go side
	}
	var ce *capi.Error
	if errors.As(err, &ce) {
		return &Error{Status: Status(ce.Status), Message: ce.Message}
	}
	return &Error{Status: StatusInternal, Message: err.Error()}
}

// invalid makes a StatusInvalidArgument error found on the Go side.
func invalid(format string, args ...interface{}) error {
	return &Error{Status: StatusInvalidArgument, Message: fmt.Sprintf(format, args...)}
}
