package hcomm_test

// The context.Context variants of the blocking calls, and Request.Done,
// Err and WaitContext. The communicators' timeout_ms is a minute, so every
// call that ends within a second ended by its context.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"hcomm.local/hcomm"
)

// longTimeout is the timeout_ms of these tests' communicators.
const longTimeout = "60000"

// initLong makes a one-rank communicator with timeout_ms of a minute.
func initLong(t *testing.T) *hcomm.Comm {
	t.Helper()
	c, err := hcomm.Init(map[string]string{"rank": "0", "world_size": "1", "timeout_ms": longTimeout})
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(func() { must(t, c.Close()) })
	return c
}

// initPair makes a world of two ranks in this process (one goroutine per
// rank joins it) and closes both when t ends.
func initPair(t *testing.T) [2]*hcomm.Comm {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := l.Addr().String()
	l.Close()
	var comms [2]*hcomm.Comm
	var errs [2]error
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			comms[r], errs[r] = hcomm.Init(map[string]string{"rank": fmt.Sprint(r), "world_size": "2",
				"store_addr": addr, "timeout_ms": longTimeout, "job_token": "go-context-test"})
		}(r)
	}
	wg.Wait()
	for r := range comms {
		if errs[r] != nil {
			t.Fatalf("Init of rank %d: %v", r, errs[r])
		}
	}
	t.Cleanup(func() {
		for r := range comms {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				if err := comms[r].Close(); err != nil {
					t.Errorf("Close of rank %d: %v", r, err)
				}
			}(r)
		}
		wg.Wait()
	})
	return comms
}

// cancelAfter is a context cancelled after d.
func cancelAfter(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(d, cancel)
	t.Cleanup(cancel)
	return ctx
}

// deadlineIn is a context whose deadline is d from now.
func deadlineIn(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// wantEndedBy fails unless err wraps want (context.Canceled or
// DeadlineExceeded), is not the communicator's own timeout, names op, and
// came between min and max after start.
func wantEndedBy(t *testing.T, err, want error, op string, start time.Time, min, max time.Duration) {
	t.Helper()
	took := time.Since(start)
	if !errors.Is(err, want) {
		t.Fatalf("%s after %v: got %v, want an error wrapping %v", op, took, err, want)
	}
	if errors.Is(err, hcomm.ErrTimeout) {
		t.Fatalf("%s: %v counts as the communicator's timeout", op, err)
	}
	if !strings.Contains(err.Error(), op) {
		t.Fatalf("the error %q does not name %s", err, op)
	}
	if took < min || took > max {
		t.Fatalf("%s returned after %v, want between %v and %v", op, took, min, max)
	}
	t.Logf("%s after %v: %v", op, took.Round(time.Millisecond), err)
}

// goroutinesSettle fails unless the number of goroutines comes back to at
// most base within 2 s (nothing leaked).
func goroutinesSettle(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base,
				buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRecvContextCancel(t *testing.T) {
	c := initLong(t)
	base := runtime.NumGoroutine()
	for _, src := range []int{0, hcomm.AnySource} {
		buf := []int32{-1, -1}
		start := time.Now()
		got, err := hcomm.RecvContext(cancelAfter(t, 200*time.Millisecond), c, buf, src, 5) // no sender
		wantEndedBy(t, err, context.Canceled, "RecvContext", start, 200*time.Millisecond, time.Second)
		if got != -1 || buf[0] != -1 || buf[1] != -1 {
			t.Fatalf("the cancelled receive (src %d) returned %d and wrote %v", src, got, buf)
		}

		// The communicator still works, and the cancelled receive was
		// withdrawn: the next message goes to the next receive.
		s, err := hcomm.Isend(c, []int32{7, 8}, 0, 5)
		must(t, err)
		next := []int32{0, 0}
		from, err := hcomm.Recv(c, next, src, 5)
		must(t, err)
		must(t, s.Wait())
		must(t, s.Free())
		if from != 0 || next[0] != 7 || next[1] != 8 {
			t.Fatalf("after the cancelled receive (src %d): got %v from %d", src, next, from)
		}
		if buf[0] != -1 || buf[1] != -1 {
			t.Fatalf("the cancelled receive (src %d) wrote %v later", src, buf)
		}
	}
	goroutinesSettle(t, base)
}

func TestRecvContextDeadline(t *testing.T) {
	c := initLong(t)
	start := time.Now()
	_, err := hcomm.RecvContext(deadlineIn(t, 300*time.Millisecond), c, make([]float64, 4), 0, 6)
	wantEndedBy(t, err, context.DeadlineExceeded, "RecvContext", start, 300*time.Millisecond, time.Second)

	// A receive whose message is there completes, with or without a ctx.
	s, err := hcomm.Isend(c, []float64{1.5}, 0, 6)
	must(t, err)
	got := []float64{0}
	_, err = hcomm.RecvContext(deadlineIn(t, 5*time.Second), c, got, 0, 6)
	must(t, err)
	must(t, s.Free())
	if got[0] != 1.5 {
		t.Fatalf("RecvContext got %v", got)
	}
}

func TestContextDoneOrNil(t *testing.T) {
	c := initLong(t)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	wantEndedBy(t, hcomm.SendContext(done, c, []int32{1}, 0, 3), context.Canceled, "SendContext",
		start, 0, 50*time.Millisecond)
	_, err := hcomm.RecvContext(done, c, make([]int32, 1), 0, 3)
	wantEndedBy(t, err, context.Canceled, "RecvContext", start, 0, 50*time.Millisecond)
	// Nothing was sent.
	r, err := hcomm.Irecv(c, make([]int32, 1), 0, 3)
	must(t, err)
	if d, err := r.Test(); d || err != nil {
		t.Fatalf("a message arrived from a SendContext with a done ctx: %v %v", d, err)
	}
	must(t, r.Free())

	// With one rank, a collective refused for a done ctx takes its turn
	// alone; the next ones work.
	wantEndedBy(t, hcomm.AllReduceContext(done, c, []int32{1}, hcomm.Sum), context.Canceled,
		"AllReduceContext", start, 0, time.Second)
	x := []int32{4}
	must(t, hcomm.AllReduce(c, x, hcomm.Sum))
	must(t, hcomm.AllReduceContext(context.Background(), c, x, hcomm.Sum))
	must(t, c.BarrierContext(deadlineIn(t, 5*time.Second)))
	if x[0] != 4 {
		t.Fatalf("AllReduce of one rank: %v", x)
	}

	// A nil ctx is a bad argument, named.
	var nilCtx context.Context
	e := wantStatus(t, hcomm.SendContext(nilCtx, c, []int32{1}, 0, 3), hcomm.StatusInvalidArgument)
	if !strings.Contains(e.Message, "ctx") {
		t.Fatalf("the error does not name ctx: %v", e)
	}
	_, err = hcomm.RecvContext(nilCtx, c, []int32{1}, 0, 3)
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.BroadcastContext(nilCtx, c, []int32{1}, 0), hcomm.StatusInvalidArgument)
	wantStatus(t, c.BarrierContext(nilCtx), hcomm.StatusInvalidArgument)
	r, err = hcomm.Irecv(c, make([]int32, 1), 0, 4)
	must(t, err)
	wantStatus(t, r.WaitContext(nilCtx), hcomm.StatusInvalidArgument)
	must(t, r.Free())

	// A nil or closed Comm is still StatusInvalidArgument.
	wantStatus(t, hcomm.AllReduceContext(done, nil, []int32{1}, hcomm.Sum), hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.SendContext(context.Background(), nil, []int32{1}, 0, 0),
		hcomm.StatusInvalidArgument)
}

func TestCollectiveContextOneRankAlone(t *testing.T) {
	comms := initPair(t)
	base := runtime.NumGoroutine()
	// Rank 0 enters collectives that rank 1 never calls: ctx ends them.
	start := time.Now()
	buf := []float32{1, 2, 3}
	err := hcomm.AllReduceContext(cancelAfter(t, 200*time.Millisecond), comms[0], buf, hcomm.Sum)
	wantEndedBy(t, err, context.Canceled, "AllReduceContext", start, 200*time.Millisecond, time.Second)
	start = time.Now()
	err = comms[0].BarrierContext(deadlineIn(t, 300*time.Millisecond))
	wantEndedBy(t, err, context.DeadlineExceeded, "BarrierContext", start, 300*time.Millisecond, time.Second)
	start = time.Now()
	err = hcomm.BroadcastContext(cancelAfter(t, 150*time.Millisecond), comms[0], buf, 1)
	wantEndedBy(t, err, context.Canceled, "BroadcastContext", start, 150*time.Millisecond, time.Second)
	goroutinesSettle(t, base)

	// Point-to-point between the two ranks still works.
	s, err := hcomm.Isend(comms[0], []int64{42}, 1, 9)
	must(t, err)
	got := []int64{0}
	_, err = hcomm.RecvContext(deadlineIn(t, 5*time.Second), comms[1], got, 0, 9)
	must(t, err)
	must(t, s.Wait())
	must(t, s.Free())
	if got[0] != 42 {
		t.Fatalf("after the cancelled collectives: got %v", got)
	}
}

func TestCollectiveContextDoneTakesItsTurn(t *testing.T) {
	comms := initPair(t)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	// Rank 0's ctx is done before its AllReduce: the call is refused and
	// takes its turn, so rank 1's fails at once (not at its timeout)...
	var wg sync.WaitGroup
	var errs [2]error
	start := time.Now()
	wg.Add(2)
	go func() {
		defer wg.Done()
		errs[0] = hcomm.AllReduceContext(done, comms[0], []int32{1}, hcomm.Sum)
	}()
	go func() {
		defer wg.Done()
		errs[1] = hcomm.AllReduceContext(deadlineIn(t, 20*time.Second), comms[1], []int32{1}, hcomm.Sum)
	}()
	wg.Wait()
	if !errors.Is(errs[0], context.Canceled) {
		t.Fatalf("rank 0: %v, want context.Canceled", errs[0])
	}
	wantStatus(t, errs[1], hcomm.StatusMismatch)
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("rank 1's AllReduce failed after %v", d)
	}
	// ...and the next collective pairs up on both ranks.
	var bufs [2][]int32
	for r := range comms {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			bufs[r] = []int32{int32(r + 1)}
			errs[r] = hcomm.AllReduceContext(deadlineIn(t, 20*time.Second), comms[r], bufs[r], hcomm.Sum)
		}(r)
	}
	wg.Wait()
	for r := range comms {
		must(t, errs[r])
		if bufs[r][0] != 3 {
			t.Fatalf("rank %d: AllReduce gave %v, want [3]", r, bufs[r])
		}
	}
}

func TestRequestDone(t *testing.T) {
	c := initLong(t)
	base := runtime.NumGoroutine()
	got := make([]int32, 3)
	r, err := hcomm.Irecv(c, got, 0, 11)
	must(t, err)
	d := r.Done()
	if r.Done() != d {
		t.Fatalf("Done returned another channel")
	}
	select {
	case <-d:
		t.Fatalf("Done closed before anything was sent")
	case <-time.After(150 * time.Millisecond):
	}
	if err := r.Err(); err != nil {
		t.Fatalf("Err of a pending request: %v", err)
	}
	// Test does not block while the goroutine of Done waits in the library.
	start := time.Now()
	if done, err := r.Test(); done || err != nil {
		t.Fatalf("Test of a pending request: %v %v", done, err)
	}
	if took := time.Since(start); took > 50*time.Millisecond {
		t.Fatalf("Test took %v", took)
	}
	s, err := hcomm.Isend(c, []int32{4, 5}, 0, 11)
	must(t, err)
	select {
	case <-d:
	case <-time.After(5 * time.Second):
		t.Fatalf("Done not closed 5 s after the message was sent")
	}
	must(t, r.Err())
	if got[0] != 4 || got[1] != 5 || got[2] != 0 || r.Count() != 2 || r.Source() != 0 || r.Tag() != 11 {
		t.Fatalf("after Done: %v, count %d, source %d, tag %d", got, r.Count(), r.Source(), r.Tag())
	}
	must(t, r.Wait())
	if done, err := r.Test(); !done || err != nil {
		t.Fatalf("Test after Done: %v %v", done, err)
	}
	must(t, s.Wait())
	// Done of a request that has ended is closed at once.
	select {
	case <-s.Done():
	default:
		t.Fatalf("Done of a completed send is open")
	}
	must(t, r.Free())
	must(t, s.Free())

	// A failed receive: Done closes, Err says why.
	big, err := hcomm.Isend(c, []int32{1, 2, 3, 4}, 0, 12)
	must(t, err)
	small, err := hcomm.Irecv(c, make([]int32, 2), 0, 12)
	must(t, err)
	select {
	case <-small.Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("Done of a failing receive not closed")
	}
	wantStatus(t, small.Err(), hcomm.StatusMismatch)
	must(t, small.Free())
	must(t, big.Wait())
	must(t, big.Free())

	// Free of a request that nobody sends to, while the goroutine of Done
	// waits in the library: Free interrupts that wait, and Done closes.
	lonely, err := hcomm.Irecv(c, make([]int32, 1), 0, 13)
	must(t, err)
	ld := lonely.Done()
	time.Sleep(150 * time.Millisecond) // (passes either way: into the wait or not yet)
	start = time.Now()
	must(t, lonely.Free())
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Free took %v", took)
	}
	select {
	case <-ld:
	default:
		t.Fatalf("Done not closed by Free")
	}
	wantStatus(t, lonely.Err(), hcomm.StatusInvalidArgument)

	// Closing the communicator fails a pending request (StatusAborted):
	// Done closes.
	c2, err := hcomm.Init(map[string]string{"rank": "0", "world_size": "1", "timeout_ms": longTimeout})
	must(t, err)
	orphan, err := hcomm.Irecv(c2, make([]int32, 1), 0, 14)
	must(t, err)
	od := orphan.Done()
	must(t, c2.Close())
	select {
	case <-od:
	case <-time.After(5 * time.Second):
		t.Fatalf("Done not closed 5 s after Close of the communicator")
	}
	wantStatus(t, orphan.Err(), hcomm.StatusAborted)
	must(t, orphan.Free())

	// A nil Request: closed, and Err says so.
	var none *hcomm.Request
	<-none.Done()
	wantStatus(t, none.Err(), hcomm.StatusInvalidArgument)
	goroutinesSettle(t, base)
}

func TestRequestWaitContext(t *testing.T) {
	c := initLong(t)
	base := runtime.NumGoroutine()
	got := make([]int64, 2)
	r, err := hcomm.Irecv(c, got, 0, 21)
	must(t, err)
	start := time.Now()
	err = r.WaitContext(deadlineIn(t, 300*time.Millisecond))
	wantEndedBy(t, err, context.DeadlineExceeded, "WaitContext", start, 300*time.Millisecond, time.Second)
	start = time.Now()
	err = r.WaitContext(cancelAfter(t, 100*time.Millisecond))
	wantEndedBy(t, err, context.Canceled, "WaitContext", start, 100*time.Millisecond, time.Second)
	// The request is still pending, and its goroutine has stopped.
	if done, err := r.Test(); done || err != nil {
		t.Fatalf("after a cancelled WaitContext: Test = %v, %v", done, err)
	}
	goroutinesSettle(t, base)

	// Waiting again gets the message.
	s, err := hcomm.Isend(c, []int64{-3, 9}, 0, 21)
	must(t, err)
	must(t, r.WaitContext(deadlineIn(t, 5*time.Second)))
	if got[0] != -3 || got[1] != 9 {
		t.Fatalf("WaitContext got %v", got)
	}
	must(t, r.WaitContext(context.Background())) // the same result again
	must(t, s.WaitContext(context.Background()))
	must(t, r.Free())
	must(t, s.Free())

	// Several waiters at once, one of them cancelled, and a plain Wait
	// beside them: every one that stays gets the result.
	r, err = hcomm.Irecv(c, got, 0, 22)
	must(t, err)
	results := make(chan error, 3)
	go func() { results <- r.WaitContext(deadlineIn(t, 10*time.Second)) }()
	go func() { results <- r.Wait() }()
	go func() { <-r.Done(); results <- r.Err() }()
	start = time.Now()
	err = r.WaitContext(cancelAfter(t, 150*time.Millisecond))
	wantEndedBy(t, err, context.Canceled, "WaitContext", start, 150*time.Millisecond, time.Second)
	s, err = hcomm.Isend(c, []int64{6, 7}, 0, 22)
	must(t, err)
	for i := 0; i < 3; i++ {
		select {
		case err := <-results:
			must(t, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %d still waits 5 s after the send", i)
		}
	}
	if got[0] != 6 || got[1] != 7 {
		t.Fatalf("got %v", got)
	}
	must(t, r.Free())
	must(t, s.Free())

	// Without a ctx deadline, the communicator's timeout still bounds the
	// wait (StatusTimeout; still pending).
	short, err := hcomm.Init(map[string]string{"rank": "0", "world_size": "1", "timeout_ms": "300"})
	must(t, err)
	defer short.Close()
	r, err = hcomm.Irecv(short, got, 0, 24)
	must(t, err)
	start = time.Now()
	wantStatus(t, r.WaitContext(cancelAfter(t, time.Minute)), hcomm.StatusTimeout)
	if took := time.Since(start); took < 250*time.Millisecond || took > 5*time.Second {
		t.Fatalf("WaitContext timed out after %v, want the communicator's 300 ms", took)
	}
	if done, err := r.Test(); done || err != nil {
		t.Fatalf("after the timeout: Test = %v, %v", done, err)
	}
	must(t, r.Free())

	// A ctx done already: at once, and the request stays as it was.
	r, err = hcomm.Irecv(c, got, 0, 23)
	must(t, err)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	start = time.Now()
	wantEndedBy(t, r.WaitContext(done), context.Canceled, "WaitContext", start, 0, 50*time.Millisecond)
	must(t, r.Free())
	wantStatus(t, r.WaitContext(context.Background()), hcomm.StatusInvalidArgument) // freed
	goroutinesSettle(t, base)
}

func TestStreamSynchronizeContext(t *testing.T) {
	c := initLong(t)
	// Each stream's receive waits for a message that never comes: only a
	// ctx (or timeout_ms, a minute) ends a wait for it.
	a := newStream(t, c, 0)
	must(t, hcomm.StreamRecv(a, []int32{0}, 0, 1))
	start := time.Now()
	err := a.SynchronizeContext(deadlineIn(t, 300*time.Millisecond))
	wantEndedBy(t, err, context.DeadlineExceeded, "SynchronizeContext", start, 300*time.Millisecond,
		time.Second)

	b := newStream(t, c, 0)
	must(t, hcomm.StreamRecv(b, []int32{0}, 0, 2))
	e, err := hcomm.NewEvent()
	must(t, err)
	defer e.Close()
	must(t, e.Record(b))
	start = time.Now()
	err = e.SynchronizeContext(cancelAfter(t, 200*time.Millisecond))
	wantEndedBy(t, err, context.Canceled, "Event.SynchronizeContext", start, 200*time.Millisecond,
		time.Second)

	// Abort ends the receives, which were still running (unless a
	// cancelled call was running one itself: it failed then, and that call
	// reported it). Synchronize returns at once, not by its ctx.
	must(t, c.Abort())
	for i, s := range []*hcomm.Stream{a, b} {
		start = time.Now()
		err := s.SynchronizeContext(deadlineIn(t, 20*time.Second))
		var he *hcomm.Error
		if (err != nil && !errors.As(err, &he)) || time.Since(start) > 5*time.Second {
			t.Fatalf("stream %d: Synchronize after Abort: %v after %v, want the stream's result at once",
				i, err, time.Since(start))
		}
	}
}
