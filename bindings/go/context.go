package hcomm

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"hcomm.local/hcomm/internal/capi"
)

// Cancellation of blocking calls by a context.Context.
//
// Each ...Context call makes its library call through a wrapper of
// hcomm_go.i ("Cancellation") with a flag of its own, an int32 that a
// goroutine sets when ctx ends. The library's waits look at the flag of
// their thread 100 ms after they began waiting and every 100 ms after that,
// and a set flag ends the call as its deadline would (a receive is
// withdrawn, a collective fails). So a call ends about 100 ms at most
// after ctx does, whatever the communicator's timeout_ms.

// The values of a call's flag (see hcomm_go.i).
const (
	flagClear       = 0 // run on
	flagEnd         = 1 // end the call: set by Go
	flagInterrupted = 2 // the library saw flagEnd and ended the call: set by C
)

var enableInterrupts sync.Once

// contextError is the error of a ...Context call that its context ended:
// errors.Is(err, context.Canceled) or errors.Is(err,
// context.DeadlineExceeded) holds (it unwraps to ctx.Err()), and its text
// adds what the library said, or what became of the operation.
type contextError struct {
	op     string
	ctxErr error  // ctx.Err()
	detail string // the library's message or a note; may be empty
}

func (e *contextError) Error() string {
	s := "hcomm: " + e.op + ": " + e.ctxErr.Error()
	if e.detail != "" {
		s += " (" + e.detail + ")"
	}
	return s
}

func (e *contextError) Unwrap() error { return e.ctxErr }

// endedBy makes the error of op that ctx ended; lib is what the library
// returned (nil: it was not called, or said nothing of use).
func endedBy(op string, ctx context.Context, lib error, note string) error {
	e := &contextError{op: op, ctxErr: ctx.Err(), detail: note}
	if e.ctxErr == nil { // (never: the flag is set only once ctx is done)
		e.ctxErr = context.Canceled
	}
	if he, ok := lib.(*Error); ok {
		// The library's words were written for a Python Ctrl-C.
		msg := strings.ReplaceAll(he.Message, "interrupted (a signal handler raised)", "interrupted")
		if msg != "" {
			if e.detail != "" {
				e.detail += "; "
			}
			e.detail += he.Status.String() + ": " + msg
		}
	}
	return e
}

// checkContext fails for a nil ctx (naming op); otherwise it returns nil.
func checkContext(op string, ctx context.Context) error {
	if ctx == nil {
		return invalid("%s: ctx is nil (use context.Background() for no cancellation)", op)
	}
	return nil
}

// blocking makes the blocking library call `call` under ctx: call hands
// `cancel` to an hcomm_go_*_cancellable wrapper (nil when ctx can never
// end, which is then no dearer than the plain call). If ctx ends during the
// call and the library ends it for that, the result wraps ctx.Err(); a call
// that finished by itself meanwhile returns its own result. ctx must not be
// nil and must not have ended yet (the callers decide what that means).
func blocking(op string, ctx context.Context, call func(cancel *int32) error) error {
	done := ctx.Done()
	if done == nil {
		return call(nil)
	}
	enableInterrupts.Do(capi.Hcomm_go_enable_interrupts)
	flag := new(int32)
	stop := make(chan struct{})
	go func() {
		select {
		case <-done:
			atomic.CompareAndSwapInt32(flag, flagClear, flagEnd)
		case <-stop:
		}
	}()
	err := call(flag)
	close(stop)
	if err != nil && atomic.LoadInt32(flag) == flagInterrupted {
		return endedBy(op, ctx, err, "")
	}
	return err
}
