package hcomm

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"hcomm.local/hcomm/internal/capi"
)

// Request is a nonblocking operation (hcomm_request_t) started by Isend,
// Irecv or IAllReduce. Complete it with Wait (or Test until done, or select
// on Done), then Free it. Its methods may be called from several
// goroutines.
//
// Buffers: cgo forbids C to keep a Go pointer after a call returns, and
// hcomm uses a nonblocking call's buffer until the request completes. So
// the buffer lives in C memory (malloc): Isend copies the slice in before
// returning (the slice may be reused at once), and Irecv/IAllReduce copy
// the result out into the caller's slice when Wait, Test or the goroutine
// of Done sees the request complete (the slice must be left alone until
// then). Blocking calls pass Go slices to C directly, without a copy.
type Request struct {
	// mu guards the fields below. It is held only for short spells (never
	// across a wait in the library), so Test, Done, Err, Source, ... never
	// wait long for it.
	mu     sync.Mutex
	comm   *Comm
	op     string
	h      uintptr        // hcomm_request_t; 0 once freed
	cbuf   unsafe.Pointer // the C staging buffer; nil when empty or released
	nbytes int
	out    []byte // the caller's slice, for results copied out; nil for sends
	esize  int    // bytes per element
	whole  bool   // copy all of cbuf out (a collective), not `count` elements

	done               bool
	err                error
	source, tag, count int

	// ended is Done's channel: closed once the request is seen to have
	// ended (finish) or is freed. Made with the request, never replaced.
	ended       chan struct{}
	endedClosed bool

	// The library takes one waiter at a time per request (a wait, or a test
	// or info call): the one in hcomm_wait runs without mu and marks it in
	// inWait, and everyone else keeps off h meanwhile. cond (on mu) is
	// broadcast when that wait returns, the request is freed, or a
	// WaitContext's ctx ends.
	cond     sync.Cond
	inWait   bool
	waitStop *int32 // the watcher's flag while inWait is its wait (nil for another's)
	claims   int    // Wait, WaitContext and Free calls waiting for inWait to clear: the watcher keeps out

	// The watcher: one goroutine per request, started by Done, that waits
	// in the library (hcomm_wait, not polling) until the request ends or is
	// freed. Wait, WaitContext and Free interrupt its wait (through its
	// flag, within about 100 ms) to take the library's wait themselves.
	watching   bool // the goroutine runs
	doneWanted bool // Done was called
}

// closedChan is Done's channel for a nil Request.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// newRequest stages buf in C memory for a nonblocking op; copyIn copies
// buf there now, copyOut marks buf as the destination of the result.
func newRequest[T Number](c *Comm, op string, buf []T, copyIn, copyOut bool) (*Request, error) {
	var zero T
	r := &Request{comm: c, op: op, esize: int(unsafe.Sizeof(zero)), source: -1, tag: -1, count: -1,
		ended: make(chan struct{})}
	r.cond.L = &r.mu
	r.nbytes = len(buf) * r.esize
	if r.nbytes == 0 {
		return r, nil
	}
	r.cbuf = capi.Hcomm_go_malloc(int64(r.nbytes))
	if r.cbuf == nil {
		return nil, &Error{Status: StatusOutOfMem,
			Message: op + ": cannot allocate " + strconv.Itoa(r.nbytes) + " bytes of C memory for the buffer"}
	}
	goBytes := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), r.nbytes)
	if copyIn {
		copy(r.cBytes(), goBytes)
	}
	if copyOut {
		r.out = goBytes
	}
	return r, nil
}

// cBytes is the staging buffer as a slice (C memory).
func (r *Request) cBytes() []byte {
	return unsafe.Slice((*byte)(r.cbuf), r.nbytes)
}

// started finishes making the request once the C call has returned: on
// failure the staging buffer is freed and err returned.
func (r *Request) started(h uintptr, err error) (*Request, error) {
	if err != nil {
		capi.Hcomm_go_free(r.cbuf)
		r.cbuf = nil
		return nil, err
	}
	r.h = h
	// Only a safety net: Free is the way to release a Request. (While the
	// watcher runs, it keeps r reachable.)
	runtime.SetFinalizer(r, func(r *Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.h != 0 {
			r.release()
		}
	})
	return r, nil
}

// Wait waits for the request to complete (hcomm_wait) and returns the
// operation's own result; on completion a receive's data is copied into
// its slice. It blocks up to the communicator's timeout: on StatusTimeout
// the request is still pending and may be waited on again. Waiting again
// after completion returns the same result.
func (r *Request) Wait() error {
	if r == nil {
		return invalid("Wait: the Request is nil")
	}
	return r.wait("Wait", nil)
}

// wait is Wait, its hcomm_wait made through the wrapper with the flag
// cancel (nil: none; see blocking). Once the flag is set, it also stops
// waiting for another goroutine's wait in the library to return (whoever
// sets it broadcasts cond); it then returns nil with the request pending,
// which its caller tells by the flag.
func (r *Request) wait(op string, cancel *int32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.h == 0 {
			return invalid("%s: the %s request is freed", op, r.op)
		}
		if r.done {
			return r.err
		}
		if cancel != nil && atomic.LoadInt32(cancel) != flagClear {
			return nil
		}
		if !r.inWait {
			break
		}
		// Another goroutine waits in the library: the watcher is
		// interrupted, a Wait is waited for.
		r.claims++
		r.interruptWatcher()
		r.cond.Wait()
		r.claims--
	}
	h := r.h
	r.inWait = true
	r.mu.Unlock()
	err := fromC(capi.Hcomm_go_wait_cancellable(h, cancel))
	r.mu.Lock()
	r.inWait = false
	r.cond.Broadcast()
	return r.settle(err)
}

// settle records what a wait in the library returned (mu held, no wait in
// the library now) and returns it: on StatusTimeout the request may still
// be pending, and then it stays so.
func (r *Request) settle(err error) error {
	if errors.Is(err, ErrTimeout) {
		// Pending still, unless the operation itself ended that way.
		var d int32
		terr := fromC(capi.Hcomm_test(r.h, &d))
		if d == 0 {
			return err
		}
		err = terr
	}
	r.finish(err)
	return err
}

// interruptWatcher ends the watcher's wait in the library, if that is the
// wait now (mu held); the watcher then waits until it is wanted again.
func (r *Request) interruptWatcher() {
	if r.inWait && r.waitStop != nil {
		atomic.CompareAndSwapInt32(r.waitStop, flagClear, flagEnd)
	}
}

// wanted reports whether the watcher should run (mu held).
func (r *Request) wanted() bool {
	return r.h != 0 && !r.done && r.doneWanted
}

// startWatcher starts the watcher unless it runs (mu held).
func (r *Request) startWatcher() {
	if !r.watching {
		r.watching = true
		go r.watch()
	}
}

// watch is the watcher: it waits in the library until the request ends or
// is freed, stepping aside while a Wait, WaitContext or Free takes the
// wait.
func (r *Request) watch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		for r.wanted() && (r.inWait || r.claims > 0) {
			r.cond.Wait()
		}
		if !r.wanted() {
			r.watching = false
			return
		}
		stop := new(int32)
		h := r.h
		r.inWait, r.waitStop = true, stop
		r.mu.Unlock()
		err := fromC(capi.Hcomm_go_wait_cancellable(h, stop))
		r.mu.Lock()
		r.inWait, r.waitStop = false, nil
		r.cond.Broadcast()
		// An interrupted wait left the request pending (settle sees it),
		// unless it ended meanwhile; a timed out one is waited again.
		_ = r.settle(err)
	}
}

// Done returns a channel that is closed once the request has ended, so
// that it can be used in a select; Err (or Wait) then returns its result,
// and a receive's data is in its slice. The first call starts a goroutine
// that waits in the library (hcomm_wait, without polling) until the
// request ends or is freed; Done never blocks. Free closes the channel too
// (Err then returns StatusInvalidArgument). For a nil Request the channel
// is closed.
//
//	select {
//	case <-req.Done():
//		err = req.Err()
//	case <-ctx.Done():
//	}
func (r *Request) Done() <-chan struct{} {
	if r == nil {
		return closedChan
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h != 0 && !r.done {
		r.doneWanted = true
		r.startWatcher()
	}
	return r.ended
}

// Err returns nil while the request is pending (as context.Context.Err
// does before Done is closed), and once it has ended, the operation's
// result, as Wait returns it (nil: it succeeded). It never blocks nor
// drives the request: use it after Done, Wait or Test. A nil or freed
// Request returns StatusInvalidArgument.
func (r *Request) Err() error {
	if r == nil {
		return invalid("Err: the Request is nil")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h == 0 {
		return invalid("Err: the %s request is freed", r.op)
	}
	if r.done {
		return r.err
	}
	return nil
}

// WaitContext is Wait that ctx can end: once ctx is done it returns
// within about 100 ms with an
// error that wraps ctx.Err() (errors.Is(err, context.Canceled) or
// context.DeadlineExceeded); otherwise it is Wait, up to the
// communicator's timeout. The request that ctx ended the wait of stays
// pending, as after Wait's StatusTimeout: wait on it again (Wait,
// WaitContext, Test, Done) or Free it; its slice is left alone meanwhile.
// A ctx done already returns at once, unless the request has ended (its
// result is then returned).
func (r *Request) WaitContext(ctx context.Context) error {
	const op = "WaitContext"
	if r == nil {
		return invalid("%s: the Request is nil", op)
	}
	if err := checkContext(op, ctx); err != nil {
		return err
	}
	return r.waitContext(op, ctx)
}

// waitContext is WaitContext for op.
func (r *Request) waitContext(op string, ctx context.Context) error {
	done := ctx.Done()
	if done == nil {
		return r.wait(op, nil)
	}
	if ctx.Err() != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.h == 0 {
			return invalid("%s: the %s request is freed", op, r.op)
		}
		if r.done {
			return r.err
		}
		return endedBy(op, ctx, nil, "the "+r.op+" request is still pending")
	}
	enableInterrupts.Do(capi.Hcomm_go_enable_interrupts)
	flag := new(int32)
	stop := make(chan struct{})
	go func() {
		select {
		case <-done:
			r.mu.Lock()
			atomic.CompareAndSwapInt32(flag, flagClear, flagEnd)
			r.cond.Broadcast() // (a wait for another goroutine's wait ends too)
			r.mu.Unlock()
		case <-stop:
		}
	}()
	err := r.wait(op, flag)
	close(stop)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.done:
		return r.err
	case r.h == 0:
		return invalid("%s: the %s request is freed", op, r.op)
	case atomic.LoadInt32(flag) == flagClear:
		return err // the communicator's timeout: still pending
	}
	return endedBy(op, ctx, err, "the "+r.op+" request is still pending")
}

// Test reports whether the request has completed, without blocking
// (hcomm_test); once it has, err is the operation's result and a receive's
// data has been copied into its slice. While another goroutine waits for
// the request in the library (Wait, WaitContext, or the goroutine of
// Done), Test reports what is known without calling the library: that
// wait records the end.
func (r *Request) Test() (done bool, err error) {
	if r == nil {
		return false, invalid("Test: the Request is nil")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h == 0 {
		return false, invalid("Test: the %s request is freed", r.op)
	}
	if r.done {
		return true, r.err
	}
	if r.inWait {
		return false, nil
	}
	var d int32
	err = fromC(capi.Hcomm_test(r.h, &d))
	if d == 0 {
		return false, err
	}
	r.finish(err)
	return true, err
}

// finish records the end of the request (r.mu held): its info, its result
// copied out, the staging buffer freed (hcomm no longer uses it), and
// Done's channel closed.
func (r *Request) finish(err error) {
	r.done, r.err = true, err
	var s, t int32
	var n uint64
	if capi.Hcomm_request_info(r.h, &s, &t, &n) == nil {
		r.source, r.tag, r.count = int(s), int(t), int(n)
	}
	if err == nil && r.out != nil && r.cbuf != nil {
		m := r.nbytes
		if !r.whole && r.count >= 0 && r.count*r.esize < m {
			m = r.count * r.esize
		}
		copy(r.out[:m], r.cBytes()[:m])
	}
	r.out = nil
	capi.Hcomm_go_free(r.cbuf)
	r.cbuf = nil
	r.closeEnded()
}

// closeEnded closes Done's channel once (mu held).
func (r *Request) closeEnded() {
	if !r.endedClosed {
		r.endedClosed = true
		close(r.ended)
	}
}

// Source is, once the request has completed, the rank the message came
// from (a receive) or went to (a send); -1 before.
func (r *Request) Source() int {
	if r == nil {
		return -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.source
}

// Tag is, once the request has completed, the message's tag; -1 before.
func (r *Request) Tag() int {
	if r == nil {
		return -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tag
}

// Count is, once the request has completed, the number of elements that
// arrived (a receive) or were sent (a send); -1 before.
func (r *Request) Count() int {
	if r == nil {
		return -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Free releases the request (hcomm_request_free). A receive still pending
// is cancelled if nothing has reached it yet; otherwise the operation
// finishes in the background (its C buffer is then kept until the Comm is
// closed) and its slice is not written. Done's channel is closed, and the
// goroutine of Done stops (Free waits up to about 100 ms for it to leave
// the library; it waits for a Wait running in another goroutine to
// return). Freeing a nil or freed Request does nothing; other methods on a
// freed Request return StatusInvalidArgument.
func (r *Request) Free() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Not under a wait in the library: the watcher's is interrupted, a
	// Wait's is waited for.
	for r.h != 0 && r.inWait {
		r.claims++
		r.interruptWatcher()
		r.cond.Wait()
		r.claims--
	}
	if r.h == 0 {
		return nil
	}
	runtime.SetFinalizer(r, nil)
	r.release()
	return nil
}

// release frees the handle (r.mu held, r.h != 0).
func (r *Request) release() {
	if !r.done {
		var d int32
		err := fromC(capi.Hcomm_test(r.h, &d))
		if d == 1 {
			r.finish(err)
		}
	}
	capi.Hcomm_request_free(r.h)
	r.h = 0
	if r.cbuf != nil {
		// Still pending: hcomm may use the buffer until the Comm is destroyed.
		r.comm.adopt(r.cbuf)
		r.cbuf = nil
	}
	r.out = nil
	r.closeEnded()
	r.cond.Broadcast() // the watcher, if any, stops
}

// WaitAll waits for every request, even after one fails, and returns the
// first failure (like hcomm_waitall).
func WaitAll(reqs ...*Request) error {
	var first error
	for _, r := range reqs {
		if err := r.Wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
