package hcomm

import (
	"errors"
	"runtime"
	"strconv"
	"sync"
	"unsafe"

	"hcomm.local/hcomm/internal/capi"
)

// Request is a nonblocking operation (hcomm_request_t) started by Isend,
// Irecv or IAllReduce. Complete it with Wait (or Test until done), then
// Free it. Its methods may be called from several goroutines.
//
// Buffers: cgo forbids C to keep a Go pointer after a call returns, and
// hcomm uses a nonblocking call's buffer until the request completes. So
// the buffer lives in C memory (malloc): Isend copies the slice in before
// returning (the slice may be reused at once), and Irecv/IAllReduce copy
// the result out into the caller's slice when Wait or Test sees the
// request complete (the slice must be left alone until then). Blocking
// calls pass Go slices to C directly, without a copy.
type Request struct {
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
}

// newRequest stages buf in C memory for a nonblocking op; copyIn copies
// buf there now, copyOut marks buf as the destination of the result.
func newRequest[T Number](c *Comm, op string, buf []T, copyIn, copyOut bool) (*Request, error) {
	var zero T
	r := &Request{comm: c, op: op, esize: int(unsafe.Sizeof(zero)), source: -1, tag: -1, count: -1}
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
	// Only a safety net: Free is the way to release a Request.
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
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h == 0 {
		return invalid("Wait: the %s request is freed", r.op)
	}
	if r.done {
		return r.err
	}
	err := fromC(capi.Hcomm_wait(r.h))
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

// Test reports whether the request has completed, without blocking
// (hcomm_test); once it has, err is the operation's result and a receive's
// data has been copied into its slice.
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
	var d int32
	err = fromC(capi.Hcomm_test(r.h, &d))
	if d == 0 {
		return false, err
	}
	r.finish(err)
	return true, err
}

// finish records the end of the request (r.mu held): its info, its result
// copied out, and the staging buffer freed (hcomm no longer uses it).
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
// closed) and its slice is not written. Freeing a nil or freed Request does
// nothing; other methods on a freed Request return StatusInvalidArgument.
func (r *Request) Free() error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
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
