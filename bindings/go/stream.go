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

// Stream is an ordered queue of operations on a communicator
// (hcomm_stream_t), run by the library in the background; see hcomm.h,
// "Streams, priorities and fusion", for the contract. Make one with
// Comm.NewStream, queue operations with StreamAllReduce, StreamSend, ... (they
// return at once), and Close it when done.
//
//	s, err := c.NewStream(10)            // collective over c, in the same order on every rank
//	err = hcomm.StreamAllReduce(s, grads, hcomm.Sum)
//	err = hcomm.StreamBroadcast(s, params, 0)
//	err = s.Synchronize()                // grads and params hold the results now
//
// Operations of one stream run one after another in the order they were
// queued, and every rank queues the same operations in the same order. A
// stream is a matching context of its own: its sends and receives never
// match those of other streams or of the Comm's blocking calls. A higher
// priority is served first where streams compete. A failed operation fails
// the rest of the stream with the same status until Synchronize returns it.
//
// Buffers: cgo forbids C to keep a Go pointer after a call returns, so, as
// for Isend and Irecv, the library works on a copy of each slice in C
// memory, made when a queued operation first uses the slice. Every later
// operation of any stream that uses the same memory (the slice, or a slice
// inside it) before it is released works on that same copy, so operations
// chain through a slice as they do through a C buffer (also across streams
// ordered by an Event). The copy is written back into the slice (when some
// operation writes it), and freed, once the last of them is seen to have
// run: by Synchronize, Query, Close, or Event.Synchronize/Query of an event
// recorded after them, on each stream that used it (a stream seen past a
// WaitEvent counts for the stream of the event's mark). Until then leave the
// slice alone: it is not written, and what you write into it is not seen. A
// slice that partly overlaps one in use (neither inside the other) is
// StatusInvalidArgument. After a failure, slices get what the library left
// in the copy, as a C buffer would (operations skipped after a failure write
// nothing).
//
// A collective that this package refuses by its own checks (slices of the
// wrong lengths) still takes its turn on the stream, so that the other
// ranks' operation fails at once with StatusMismatch instead of waiting.
//
// Methods may be called from several goroutines; operations queued from
// several at once run in the order the stream took them. A nil or closed
// Stream returns StatusInvalidArgument.
type Stream struct {
	// mu is held shared by every call that uses h and exclusively by
	// Close, so that Close never destroys the handle under a running call.
	mu         sync.RWMutex
	h          uintptr // hcomm_stream_t; 0 once closed; written under mu
	open       atomic.Bool
	rank, size int
	priority   int

	// qmu guards ops and queued, and is held across an enqueue and its
	// count, so that queued numbers the operations in the stream's order.
	qmu    sync.Mutex
	ops    []*streamOp // queued, not yet seen to have run, in order
	queued uint64      // operations queued so far
	// fmu is held by finish while it writes slices back, so that a finish
	// returns only once the operations it saw run (also those that another
	// goroutine's finish took first) are written back. Taken before qmu.
	fmu sync.Mutex
}

// streamOp is one queued operation and the copies it uses, or a wait for
// another stream's mark (WaitEvent): once it has run, so have that
// stream's operations up to afterUpTo.
type streamOp struct {
	seq       uint64
	staged    []*staged
	after     *Stream
	afterUpTo uint64
}

// staged is C memory holding a copy of the Go bytes [start, end), shared by
// every queued operation that uses them.
type staged struct {
	start, end uintptr
	c          unsafe.Pointer
	goBytes    []byte // the Go memory, written back on release (kept alive until then)
	users      int    // queued operations that use it
	written    bool   // one of them writes it
}

// allStaged holds the copies in use by queued operations of every stream.
var (
	stagedMu  sync.Mutex
	allStaged []*staged // guarded by stagedMu
)

// stage returns the C copy of buf for a queued operation (adding it to
// *held), nil for an empty slice.
func stage[T Number](op string, what string, buf []T, output bool, held *[]*staged) (unsafe.Pointer, error) {
	if len(buf) == 0 {
		return nil, nil
	}
	var zero T
	n := len(buf) * int(unsafe.Sizeof(zero))
	p := uintptr(unsafe.Pointer(&buf[0]))
	stagedMu.Lock()
	defer stagedMu.Unlock()
	for _, s := range allStaged {
		if p >= s.start && p+uintptr(n) <= s.end {
			s.users++
			s.written = s.written || output
			*held = append(*held, s)
			return unsafe.Add(s.c, p-s.start), nil
		}
		if p < s.end && p+uintptr(n) > s.start {
			return nil, invalid("%s: %s overlaps, without lying inside it, a slice that a stream still "+
				"uses (Synchronize that stream first)", op, what)
		}
	}
	c := capi.Hcomm_go_malloc(int64(n))
	if c == nil {
		return nil, &Error{Status: StatusOutOfMem,
			Message: op + ": cannot allocate " + strconv.Itoa(n) + " bytes of C memory for " + what}
	}
	s := &staged{start: p, end: p + uintptr(n), c: c, users: 1, written: output,
		goBytes: unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), n)}
	copy(unsafe.Slice((*byte)(c), n), s.goBytes)
	allStaged = append(allStaged, s)
	*held = append(*held, s)
	return c, nil
}

// release lets go of copies; the last user writes a written copy back into
// its slice and frees it.
func release(held []*staged) {
	stagedMu.Lock()
	defer stagedMu.Unlock()
	for _, s := range held {
		s.users--
		if s.users > 0 {
			continue
		}
		if s.written {
			copy(s.goBytes, unsafe.Slice((*byte)(s.c), len(s.goBytes)))
		}
		capi.Hcomm_go_free(s.c)
		s.c, s.goBytes = nil, nil
		for i, t := range allStaged {
			if t == s {
				allStaged = append(allStaged[:i], allStaged[i+1:]...)
				break
			}
		}
	}
}

// NewStream makes a stream of c with priority (hcomm_stream_create): a
// higher number is served first where streams compete, 0 is the default.
// Collective over c: every rank makes its streams of c in the same order
// (the k-th stream of each rank meets the k-th of the others). The stream
// keeps working after c is closed; close it too.
func (c *Comm) NewStream(priority int) (*Stream, error) {
	if err := cint("NewStream", "priority", priority); err != nil {
		return nil, err
	}
	var out uintptr
	err := c.do("NewStream", func(h uintptr) error {
		return capi.Hcomm_stream_create(h, priority, &out)
	})
	if err != nil {
		return nil, err
	}
	s := &Stream{h: out, rank: c.rank, size: c.size, priority: priority}
	s.open.Store(true)
	// Only a safety net: Close is the way to release a Stream.
	runtime.SetFinalizer(s, func(s *Stream) { _ = s.Close() })
	return s, nil
}

// Priority is the priority the stream was made with.
func (s *Stream) Priority() int {
	if s == nil {
		return 0
	}
	return s.priority
}

// do runs f with s's handle, or fails with StatusInvalidArgument if s is
// nil or closed. op names the call in that error.
func (s *Stream) do(op string, f func(h uintptr) error) error {
	if s == nil {
		return invalid("%s: the Stream is nil", op)
	}
	if !s.open.Load() {
		return invalid("%s: the Stream is closed", op)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.h == 0 {
		return invalid("%s: the Stream is closed", op)
	}
	return fromC(f(s.h))
}

// queuedNow is the number of operations queued so far.
func (s *Stream) queuedNow() uint64 {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return s.queued
}

// finish releases the copies of the operations up to upTo, which have run,
// and, for the waits among them, of the operations before the marks they
// waited for on other streams.
func (s *Stream) finish(upTo uint64) {
	for _, o := range s.finishHere(upTo) {
		if o.after != nil {
			o.after.finish(o.afterUpTo)
		}
	}
}

// finishHere is finish on s alone; it returns the operations it finished.
func (s *Stream) finishHere(upTo uint64) []*streamOp {
	s.fmu.Lock()
	defer s.fmu.Unlock()
	s.qmu.Lock()
	k := 0
	for k < len(s.ops) && s.ops[k].seq <= upTo {
		k++
	}
	done := s.ops[:k]
	s.ops = append([]*streamOp(nil), s.ops[k:]...)
	s.qmu.Unlock()
	for _, o := range done {
		release(o.staged)
	}
	return done
}

// Synchronize waits until everything queued before the call has run (up to
// the communicator's timeout without progress) and writes the results into
// their slices (see Stream). It returns the stream's first error since the
// last Synchronize, which it clears: later operations run again.
// StatusTimeout means the stream went timeout_ms without finishing an
// operation (the message says what runs and what is queued); the work goes
// on.
func (s *Stream) Synchronize() error {
	return s.synchronize(context.Background(), "Synchronize")
}

// SynchronizeContext is Synchronize that ctx can end: once ctx is done it
// returns within about 100 ms with an error that wraps ctx.Err()
// (errors.Is(err, context.Canceled) or context.DeadlineExceeded), whatever
// the communicator's timeout_ms. The
// stream's work goes on, and the slices of operations not seen to have run
// stay in use; a later Synchronize (or Query, Close) finishes them. One
// exception: while the stream's own thread has not taken the next
// operation, Synchronize runs it on the calling thread (the library saves
// a hand-over so); if ctx ends during that operation, the operation fails
// as at its timeout (the error returned wraps ctx.Err() and quotes the
// operation's failure; later operations of the stream run again). A ctx
// done already returns at once.
func (s *Stream) SynchronizeContext(ctx context.Context) error {
	const op = "SynchronizeContext"
	if err := checkContext(op, ctx); err != nil {
		return err
	}
	return s.synchronize(ctx, op)
}

func (s *Stream) synchronize(ctx context.Context, op string) error {
	if ctx.Err() != nil {
		if err := s.do(op, func(uintptr) error { return nil }); err != nil {
			return err // a nil or closed Stream
		}
		return endedBy(op, ctx, nil, "the stream was not waited for")
	}
	var upTo uint64
	ran := false
	err := blocking(op, ctx, func(cancel *int32) error {
		return s.do(op, func(h uintptr) error {
			upTo = s.queuedNow()
			err := capi.Hcomm_go_stream_synchronize_cancellable(h, cancel)
			ran = !errors.Is(fromC(err), ErrTimeout)
			if !ran { // the stream stalled (or ctx ended), unless an operation itself timed out
				var idle int32
				ran = capi.Hcomm_stream_query(h, &idle) == nil && idle == 1
			}
			return err
		})
	})
	if ran {
		s.finish(upTo)
	}
	return err
}

// Query reports whether everything queued so far has run
// (hcomm_stream_query); if so, their results are in their slices. It never
// blocks on the stream.
func (s *Stream) Query() (bool, error) {
	var upTo uint64
	var idle int32
	err := s.do("Query", func(h uintptr) error {
		upTo = s.queuedNow()
		return capi.Hcomm_stream_query(h, &idle)
	})
	if err != nil {
		return false, err
	}
	if idle == 1 {
		s.finish(upTo)
	}
	return idle == 1, nil
}

// WaitEvent makes s's later operations wait until e's latest mark
// (recorded before this call) is reached (hcomm_stream_wait_event). It
// returns at once. Once s is seen past the wait, the results of the
// operations before the mark, on the stream it was recorded on, are
// written into their slices too.
func (s *Stream) WaitEvent(e *Event) error {
	return s.do("WaitEvent", func(h uintptr) error {
		return e.do("WaitEvent", func(eh uintptr) error {
			// Locks in Record's order: the stream's, then the event's.
			s.qmu.Lock()
			defer s.qmu.Unlock()
			e.rmu.Lock()
			defer e.rmu.Unlock()
			if err := capi.Hcomm_stream_wait_event(h, eh); err != nil {
				return err
			}
			if e.stream != nil {
				s.queued++
				s.ops = append(s.ops, &streamOp{seq: s.queued, after: e.stream, afterUpTo: e.upTo})
			}
			return nil
		})
	})
}

// Close runs what is queued, then ends the stream (hcomm_stream_destroy);
// every result is then in its slice. It waits for calls running on s in
// other goroutines. It returns an error that Synchronize has not returned
// yet, if any; the Stream is closed either way. Closing a nil or closed
// Stream does nothing and returns nil.
func (s *Stream) Close() error {
	if s == nil {
		return nil
	}
	s.open.Store(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == 0 {
		return nil
	}
	h := s.h
	s.h = 0
	err := fromC(capi.Hcomm_stream_destroy(h))
	runtime.SetFinalizer(s, nil)
	s.finish(s.queuedNow()) // the destroy ran everything
	return err
}

// Barrier queues a barrier: every rank's stream passes it together.
func (s *Stream) Barrier() error {
	return submit[uint8](s, "Stream.Barrier", capi.HCOMM_OP_BARRIER, nil, nil, false, 0, 0, 0, 0)
}

// Stream operations: each queues the operation its blocking namesake runs
// (same arguments, same checks) and returns at once; see Stream for when
// the results reach the slices. Collectives must be queued in the same
// order on every rank's stream.

// StreamAllReduce queues an AllReduce of buf in place.
func StreamAllReduce[T Number](s *Stream, buf []T, op Op) error {
	const name = "StreamAllReduce"
	if err := opArg(name, op); err != nil {
		return s.refuse(name, err, capi.HCOMM_OP_ALLREDUCE)
	}
	return submit(s, name, capi.HCOMM_OP_ALLREDUCE, buf, buf, true, len(buf), op, 0, 0)
}

// StreamBroadcast queues a Broadcast of root's buf to every rank's buf.
func StreamBroadcast[T Number](s *Stream, buf []T, root int) error {
	const name = "StreamBroadcast"
	if err := cint(name, "root", root); err != nil {
		return s.refuse(name, err, capi.HCOMM_OP_BROADCAST)
	}
	return submit(s, name, capi.HCOMM_OP_BROADCAST, nil, buf, true, len(buf), 0, root, 0)
}

// StreamReduce queues a Reduce of buf, in place at root (the other ranks'
// buf is left as it was).
func StreamReduce[T Number](s *Stream, buf []T, op Op, root int) error {
	const name = "StreamReduce"
	err := opArg(name, op)
	if err == nil {
		err = cint(name, "root", root)
	}
	if err != nil {
		return s.refuse(name, err, capi.HCOMM_OP_REDUCE)
	}
	if s != nil && s.rank != root {
		// Only the root's recvbuf is used: the others' buf is only read.
		return submit(s, name, capi.HCOMM_OP_REDUCE, buf, nil, false, len(buf), op, root, 0)
	}
	return submit(s, name, capi.HCOMM_OP_REDUCE, buf, buf, true, len(buf), op, root, 0)
}

// StreamAllGather queues an AllGather of every rank's send into recv;
// len(recv) must be Size*len(send). send may lie in recv (this rank's
// block: in place).
func StreamAllGather[T Number](s *Stream, send, recv []T) error {
	const name = "StreamAllGather"
	if s != nil && len(recv) != s.size*len(send) {
		return s.refuse(name, invalid("%s on rank %d: recv has %d elements, want Size*len(send) = %d*%d",
			name, s.rank, len(recv), s.size, len(send)), capi.HCOMM_OP_ALLGATHER)
	}
	return submit(s, name, capi.HCOMM_OP_ALLGATHER, send, recv, true, len(send), 0, 0, 0)
}

// StreamReduceScatter queues a ReduceScatter of send (Size blocks of
// len(recv) elements) into recv; len(send) must be Size*len(recv). recv may
// be send[:len(recv)] (in place).
func StreamReduceScatter[T Number](s *Stream, send, recv []T, op Op) error {
	const name = "StreamReduceScatter"
	err := opArg(name, op)
	if err == nil && s != nil && len(send) != s.size*len(recv) {
		err = invalid("%s on rank %d: send has %d elements, want Size*len(recv) = %d*%d",
			name, s.rank, len(send), s.size, len(recv))
	}
	if err != nil {
		return s.refuse(name, err, capi.HCOMM_OP_REDUCE_SCATTER)
	}
	return submit(s, name, capi.HCOMM_OP_REDUCE_SCATTER, send, recv, true, len(recv), op, 0, 0)
}

// StreamAllToAll queues an AllToAll: block j of send goes to rank j, block
// i of recv comes from rank i; send and recv have the same length, a
// multiple of Size.
func StreamAllToAll[T Number](s *Stream, send, recv []T) error {
	const name = "StreamAllToAll"
	if s != nil && (len(send) != len(recv) || len(send)%s.size != 0) {
		return s.refuse(name, invalid("%s on rank %d: send has %d elements and recv %d; want equal lengths, a multiple of Size %d",
			name, s.rank, len(send), len(recv), s.size), capi.HCOMM_OP_ALLTOALL)
	}
	n := 0
	if s != nil {
		n = len(send) / s.size
	}
	return submit(s, name, capi.HCOMM_OP_ALLTOALL, send, recv, true, n, 0, 0, 0)
}

// StreamGather queues a Gather of every rank's send into root's recv; at
// the root len(recv) must be Size*len(send), elsewhere recv is not used
// (nil is fine).
func StreamGather[T Number](s *Stream, send, recv []T, root int) error {
	const name = "StreamGather"
	err := cint(name, "root", root)
	if err == nil && s != nil && s.rank == root && len(recv) != s.size*len(send) {
		err = invalid("%s on root %d: recv has %d elements, want Size*len(send) = %d*%d",
			name, s.rank, len(recv), s.size, len(send))
	}
	if err != nil {
		return s.refuse(name, err, capi.HCOMM_OP_GATHER)
	}
	if s != nil && s.rank != root {
		recv = nil
	}
	return submit(s, name, capi.HCOMM_OP_GATHER, send, recv, recv != nil, len(send), 0, root, 0)
}

// StreamScatter queues a Scatter of root's send (Size blocks of len(recv)
// elements) to every rank's recv; at the root len(send) must be
// Size*len(recv), elsewhere send is not used (nil is fine).
func StreamScatter[T Number](s *Stream, send, recv []T, root int) error {
	const name = "StreamScatter"
	err := cint(name, "root", root)
	if err == nil && s != nil && s.rank == root && len(send) != s.size*len(recv) {
		err = invalid("%s on root %d: send has %d elements, want Size*len(recv) = %d*%d",
			name, s.rank, len(send), s.size, len(recv))
	}
	if err != nil {
		return s.refuse(name, err, capi.HCOMM_OP_SCATTER)
	}
	if s != nil && s.rank != root {
		send = nil
	}
	return submit(s, name, capi.HCOMM_OP_SCATTER, send, recv, true, len(recv), 0, root, 0)
}

// StreamSend queues a Send of buf to rank dst with tag (>= 0), in the
// stream's own matching context: only a StreamRecv of the same stream on
// dst takes it.
func StreamSend[T Number](s *Stream, buf []T, dst, tag int) error {
	if err := p2pArgs("StreamSend", dst, tag); err != nil {
		return err
	}
	return submit(s, "StreamSend", capi.HCOMM_OP_SEND, buf, nil, false, len(buf), 0, dst, tag)
}

// StreamRecv queues a Recv into buf (its capacity; a shorter message fills
// its front) from rank src with tag, sent by a StreamSend of the same
// stream on src; a longer message fails the operation with StatusMismatch.
func StreamRecv[T Number](s *Stream, buf []T, src, tag int) error {
	if err := p2pArgs("StreamRecv", src, tag); err != nil {
		return err
	}
	return submit(s, "StreamRecv", capi.HCOMM_OP_RECV, nil, buf, true, len(buf), 0, src, tag)
}

// isCollective reports whether an operation kind takes a turn among the
// stream's collectives.
func isCollective(kind int) bool {
	return kind != capi.HCOMM_OP_SEND && kind != capi.HCOMM_OP_RECV
}

// submit queues one operation of kind on send (read) and recv (written
// when output; nil for none). A slice lying inside the other shares its
// copy: the longer one is staged first.
func submit[T Number](s *Stream, name string, kind int, send, recv []T, output bool,
	count int, op Op, peerOrRoot, tag int) error {
	dt := dtypeOf[T]()
	return s.do(name, func(h uintptr) error {
		var held []*staged
		var sp, rp unsafe.Pointer
		var err error
		if len(send) > len(recv) {
			sp, err = stage(name, "send", send, false, &held)
			if err == nil {
				rp, err = stage(name, "recv", recv, output, &held)
			}
		} else {
			rp, err = stage(name, "recv", recv, output, &held)
			if err == nil {
				sp, err = stage(name, "send", send, false, &held)
			}
		}
		if err != nil {
			release(held)
			if isCollective(kind) {
				refuseOn(h, kind)
			}
			return err
		}
		s.qmu.Lock()
		err = capi.Hcomm_go_stream_enqueue(h, capi.Hcomm_op_kind_t(kind), sp, rp, int64(count), dt,
			capi.Hcomm_reduce_op_t(op), peerOrRoot, tag)
		if err == nil {
			s.queued++
			s.ops = append(s.ops, &streamOp{seq: s.queued, staged: held})
		}
		s.qmu.Unlock()
		if err != nil {
			release(held) // refused by the library, which took a collective's turn itself
		}
		return err
	})
}

// refuse hands the stream an operation of kind that the library refuses
// (see badDtype), so that a collective this package refused still takes
// its turn; it returns err.
func (s *Stream) refuse(name string, err error, kind int) error {
	_ = s.do(name, func(h uintptr) error {
		refuseOn(h, kind)
		return nil
	})
	return err
}

func refuseOn(h uintptr, kind int) {
	_ = capi.Hcomm_go_stream_enqueue(h, capi.Hcomm_op_kind_t(kind), nil, nil, 0, badDtype, 0, 0, 0)
}

// Event is a mark in a stream's queue (hcomm_event_t): recorded on a
// Stream, it is reached when everything queued on that stream before the
// record has run. Other streams can wait for it (Stream.WaitEvent) without
// blocking the caller; Synchronize blocks. An event never recorded counts
// as reached. Close it when done; a nil or closed Event returns
// StatusInvalidArgument.
//
//	e, _ := hcomm.NewEvent()
//	hcomm.StreamAllReduce(a, x, hcomm.Sum)
//	e.Record(a)
//	b.WaitEvent(e)                        // b's later work runs after a's AllReduce
//	hcomm.StreamReduceScatter(b, x, y, hcomm.Sum)
//	e.Record(b)
//	err = e.Synchronize()                 // y holds the result
//
// Reaching an event writes the results of the operations queued before it
// on the stream it was recorded on into their slices, once Synchronize or
// Query sees it reached; so does a stream that waited for it, once that
// stream is seen past the wait.
type Event struct {
	mu   sync.RWMutex // as Stream.mu
	h    uintptr      // hcomm_event_t; 0 once closed
	open atomic.Bool

	// The latest record: its stream, the operations queued on it then, and
	// how many records there were (to tell whether a wait was for it).
	rmu     sync.Mutex
	stream  *Stream
	upTo    uint64
	records uint64
}

// NewEvent makes an event, not recorded (hcomm_event_create).
func NewEvent() (*Event, error) {
	var h uintptr
	if err := fromC(capi.Hcomm_event_create(&h)); err != nil {
		return nil, err
	}
	e := &Event{h: h}
	e.open.Store(true)
	runtime.SetFinalizer(e, func(e *Event) { _ = e.Close() })
	return e, nil
}

func (e *Event) do(op string, f func(h uintptr) error) error {
	if e == nil {
		return invalid("%s: the Event is nil", op)
	}
	if !e.open.Load() {
		return invalid("%s: the Event is closed", op)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.h == 0 {
		return invalid("%s: the Event is closed", op)
	}
	return fromC(f(e.h))
}

// Record moves e's mark to the end of what is queued on s now
// (hcomm_event_record). It returns at once.
func (e *Event) Record(s *Stream) error {
	return s.do("Record", func(sh uintptr) error {
		return e.do("Record", func(eh uintptr) error {
			// The mark, the count and the record agree (WaitEvent reads them).
			s.qmu.Lock()
			defer s.qmu.Unlock()
			e.rmu.Lock()
			defer e.rmu.Unlock()
			if err := capi.Hcomm_event_record(eh, sh); err != nil {
				return err
			}
			e.stream, e.upTo = s, s.queued
			e.records++
			return nil
		})
	})
}

// latest is e's latest record (none for a nil Event).
func (e *Event) latest() (s *Stream, upTo, records uint64) {
	if e == nil {
		return nil, 0, 0
	}
	e.rmu.Lock()
	defer e.rmu.Unlock()
	return e.stream, e.upTo, e.records
}

// reached writes back the results before the mark of record `records`,
// now reached, unless the event was recorded again since.
func (e *Event) reached(s *Stream, upTo, records uint64) {
	if _, _, now := e.latest(); now == records && s != nil {
		s.finish(upTo)
	}
}

// Synchronize waits until e's latest mark is reached (up to the
// communicator's timeout without progress on that stream: StatusTimeout),
// then writes the results of the operations before it into their slices.
// It returns the stream's error if an operation before the mark failed
// (the stream keeps it for its own Synchronize).
func (e *Event) Synchronize() error {
	return e.synchronize(context.Background(), "Synchronize")
}

// SynchronizeContext is Synchronize that ctx can end, as
// Stream.SynchronizeContext is (and with its one exception: an operation
// that the call was running itself fails): once ctx is done it returns
// within about 100 ms with an error that wraps ctx.Err(), and the
// stream's work goes on.
func (e *Event) SynchronizeContext(ctx context.Context) error {
	const op = "Event.SynchronizeContext"
	if err := checkContext(op, ctx); err != nil {
		return err
	}
	return e.synchronize(ctx, op)
}

func (e *Event) synchronize(ctx context.Context, op string) error {
	if ctx.Err() != nil {
		if err := e.do(op, func(uintptr) error { return nil }); err != nil {
			return err // a nil or closed Event
		}
		return endedBy(op, ctx, nil, "the event was not waited for")
	}
	s, upTo, records := e.latest()
	done := false
	err := blocking(op, ctx, func(cancel *int32) error {
		return e.do(op, func(h uintptr) error {
			err := capi.Hcomm_go_event_synchronize_cancellable(h, cancel)
			var d int32
			done = capi.Hcomm_event_query(h, &d) == nil && d == 1
			return err
		})
	})
	if done {
		e.reached(s, upTo, records)
	}
	return err
}

// Query reports whether e's latest mark is reached (hcomm_event_query);
// if so, the results before it are in their slices. It never blocks.
func (e *Event) Query() (bool, error) {
	s, upTo, records := e.latest()
	var d int32
	err := e.do("Query", func(h uintptr) error { return capi.Hcomm_event_query(h, &d) })
	if err != nil {
		return false, err
	}
	if d == 1 {
		e.reached(s, upTo, records)
	}
	return d == 1, nil
}

// Close destroys the event (hcomm_event_destroy); streams waiting on it
// keep their marks. It waits for calls running on e in other goroutines.
// Closing a nil or closed Event does nothing and returns nil.
func (e *Event) Close() error {
	if e == nil {
		return nil
	}
	e.open.Store(false)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h == 0 {
		return nil
	}
	h := e.h
	e.h = 0
	runtime.SetFinalizer(e, nil)
	return fromC(capi.Hcomm_event_destroy(h))
}
