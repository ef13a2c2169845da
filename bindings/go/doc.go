// Package hcomm is the Go binding of hcomm: tagged point-to-point messages
// and collectives between processes, over the C library libhcomm_c (cgo).
//
// Start N ranks of a program with the launcher (`hcomm_run -n 4 -- ./app`);
// each one does:
//
//	c, err := hcomm.Init(nil) // from the environment that hcomm_run sets
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer c.Close()
//	buf := []float32{float32(c.Rank()), 1}
//	if err := hcomm.AllReduce(c, buf, hcomm.Sum); err != nil {
//		var e *hcomm.Error
//		if errors.As(err, &e) && e.Status == hcomm.StatusTimeout { ... }
//	}
//
// Buffers are slices of any Number type (int8, uint8, int32, uint32,
// int64, uint64, float32, float64, or a type defined over one). Blocking
// calls hand the slice to C without a copy. Nonblocking calls (Isend,
// Irecv, IAllReduce) stage the data in C memory, because cgo forbids C to
// keep a Go pointer after a call returns; see Request.
//
// A Stream (Comm.NewStream) is an ordered queue of operations that the
// library runs in the background: StreamAllReduce, StreamSend, ... return
// at once, and Synchronize (or an Event recorded after them) waits for them
// and writes their results into the slices, which are staged in C memory
// in the meantime; see Stream and Event.
//
// Every blocking call has a variant that a context.Context can end:
// SendContext, RecvContext, AllReduceContext (and the other collectives'),
// Comm.BarrierContext, Request.WaitContext, Stream.SynchronizeContext and
// Event.SynchronizeContext. Once ctx is done, the call returns within
// about 100 ms (the library looks every 100 ms), also when ctx's deadline
// comes before timeout_ms, with an error that wraps ctx.Err():
//
//	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
//	defer cancel()
//	src, err := hcomm.RecvContext(ctx, c, buf, hcomm.AnySource, tag)
//	if errors.Is(err, context.DeadlineExceeded) { ... } // the receive was withdrawn
//
// Request.Done returns a channel closed once the request has ended, for
// select; Request.Err then returns its result.
//
// Every other error is an *Error with the Status and the message of
// hcomm_last_error() for the failed call. Nothing blocks past the
// communicator's timeout_ms. Comm, Request, Channel, Stream and Event are
// released by Close/Free (finalizers are only a safety net); using one
// afterwards, or a nil one, returns an *Error with StatusInvalidArgument.
//
// The package is the generated layer internal/capi (SWIG, from
// bindings/hcomm.i) plus the hand-written files of bindings/go/. Installed
// (bazel run //tools:install -- --prefix=DIR) it is DIR/go/hcomm, module
// hcomm.local/hcomm; a program uses it with
//
//	require hcomm.local/hcomm v0.0.0
//	replace hcomm.local/hcomm => DIR/go/hcomm
//
// in its go.mod, and links DIR/lib/libhcomm_c.so (RUNPATH set by cgo).
package hcomm
