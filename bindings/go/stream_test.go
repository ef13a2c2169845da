package hcomm_test

// Streams and events. The Test* functions run on a world of one rank; the
// testStream* steps run on every rank of TestMultiProcess (multiprocess_test.go).

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"hcomm.local/hcomm"
)

// newStream makes a stream of c and closes it when t ends.
func newStream(t *testing.T, c *hcomm.Comm, priority int) *hcomm.Stream {
	t.Helper()
	s, err := c.NewStream(priority)
	must(t, err)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Stream.Close: %v", err)
		}
	})
	return s
}

// wantInvalid fails unless err is StatusInvalidArgument naming `names`.
func wantInvalid(t *testing.T, err error, names string) {
	t.Helper()
	e := wantStatus(t, err, hcomm.StatusInvalidArgument)
	if !strings.Contains(e.Message, names) {
		t.Fatalf("%q does not name %q", e.Message, names)
	}
}

func TestStreamEveryKind(t *testing.T) {
	c := initSolo(t)
	s := newStream(t, c, 0)
	if s.Priority() != 0 {
		t.Fatalf("Priority = %d", s.Priority())
	}
	ar := []int32{1, -2, 3}
	bc := []int64{5, 6}
	red := []float32{1.5}
	ag := make([]float64, 2)
	rs := make([]uint32, 2)
	a2a := make([]int8, 2)
	ga := make([]uint64, 1)
	sc := make([]float32, 2)
	got := []int32{0, 0, 0, -1}
	must(t, hcomm.StreamAllReduce(s, ar, hcomm.Sum))
	must(t, hcomm.StreamBroadcast(s, bc, 0))
	must(t, hcomm.StreamReduce(s, red, hcomm.Prod, 0))
	must(t, hcomm.StreamAllGather(s, []float64{7, 8}, ag))
	must(t, hcomm.StreamReduceScatter(s, []uint32{4, 5}, rs, hcomm.Sum))
	must(t, hcomm.StreamAllToAll(s, []int8{9, 10}, a2a))
	must(t, hcomm.StreamGather(s, []uint64{11}, ga, 0))
	must(t, hcomm.StreamScatter(s, []float32{12, 13}, sc, 0))
	must(t, s.Barrier())
	must(t, hcomm.StreamSend(s, []int32{7, 8}, 0, 3))
	must(t, hcomm.StreamRecv(s, got, 0, 3))
	must(t, s.Synchronize())
	want := fmt.Sprint([]int32{1, -2, 3}, []int64{5, 6}, []float32{1.5}, []float64{7, 8},
		[]uint32{4, 5}, []int8{9, 10}, []uint64{11}, []float32{12, 13}, []int32{7, 8, 0, -1})
	if g := fmt.Sprint(ar, bc, red, ag, rs, a2a, ga, sc, got); g != want {
		t.Fatalf("got  %s\nwant %s", g, want)
	}
	idle, err := s.Query()
	must(t, err)
	if !idle {
		t.Fatalf("not idle after Synchronize")
	}
}

func TestStreamStagesSlices(t *testing.T) {
	c := initSolo(t)
	s := newStream(t, c, 0)
	out := []int32{42}
	must(t, hcomm.StreamSend(s, out, 0, 4))
	out[0] = 0 // staged at the call: the message holds 42
	into := []int32{-1}
	must(t, hcomm.StreamRecv(s, into, 0, 4))
	must(t, s.Synchronize())
	if into[0] != 42 || out[0] != 0 {
		t.Fatalf("received %d (42); the sent slice holds %d (0: a send writes nothing back)", into[0], out[0])
	}

	// Operations chain through a slice: x is received into, then sent on
	// from the same copy; a slice inside x shares it too.
	backing := make([]int64, 6)
	x := backing[:4]
	y := make([]int64, 2)
	must(t, hcomm.StreamSend(s, []int64{1, 2, 3, 4}, 0, 1))
	must(t, hcomm.StreamRecv(s, x, 0, 1))
	must(t, hcomm.StreamSend(s, x[1:3], 0, 2))
	must(t, hcomm.StreamRecv(s, y, 0, 2))
	// Partly overlapping x, which is still in use: refused, nothing queued.
	wantInvalid(t, hcomm.StreamRecv(s, backing[2:6], 0, 9), "overlaps")
	must(t, s.Synchronize())
	if fmt.Sprint(x, y) != "[1 2 3 4] [2 3]" {
		t.Fatalf("x %v (1 2 3 4), y %v (2 3)", x, y)
	}
	// Released by the Synchronize: now it may be used.
	must(t, hcomm.StreamSend(s, []int64{5, 6, 7, 8}, 0, 3))
	must(t, hcomm.StreamRecv(s, backing[2:6], 0, 3))
	must(t, s.Synchronize())
	if fmt.Sprint(backing) != "[1 2 5 6 7 8]" {
		t.Fatalf("backing %v", backing)
	}
}

func TestStreamFailsUntilSynchronize(t *testing.T) {
	c := initSolo(t)
	s := newStream(t, c, 0)
	must(t, hcomm.StreamSend(s, make([]int32, 4), 0, 3))
	small := []int32{-1, -1}
	must(t, hcomm.StreamRecv(s, small, 0, 3)) // too small: MISMATCH when it runs
	must(t, s.Barrier())                      // skipped
	e := wantStatus(t, s.Synchronize(), hcomm.StatusMismatch)
	if !strings.Contains(e.Message, "recv") {
		t.Fatalf("the error does not name the recv: %v", e)
	}
	if small[0] != -1 {
		t.Fatalf("the failed recv wrote %v", small)
	}
	must(t, s.Synchronize()) // cleared
	v := []int32{0}
	must(t, hcomm.StreamSend(s, []int32{6}, 0, 4))
	must(t, hcomm.StreamRecv(s, v, 0, 4))
	must(t, s.Synchronize())
	if v[0] != 6 {
		t.Fatalf("after the failure: %v", v)
	}
}

func TestStreamEvents(t *testing.T) {
	c := initSolo(t)
	a := newStream(t, c, 0)
	b := newStream(t, c, 5)
	e, err := hcomm.NewEvent()
	must(t, err)
	defer func() { must(t, e.Close()) }()
	done, err := e.Query()
	must(t, err)
	if !done {
		t.Fatalf("an event never recorded is not reached")
	}
	must(t, e.Synchronize())

	// The event writes back what is before its mark.
	x := []int32{0}
	must(t, hcomm.StreamSend(a, []int32{5}, 0, 1))
	must(t, hcomm.StreamRecv(a, x, 0, 1))
	must(t, e.Record(a))
	must(t, e.Synchronize())
	if x[0] != 5 {
		t.Fatalf("after Event.Synchronize x = %v", x)
	}

	// b's send reads z after a's recv has written it: b waits for a's mark.
	z := []int32{0}
	y := []int32{0}
	must(t, hcomm.StreamSend(a, []int32{9}, 0, 2))
	must(t, hcomm.StreamRecv(a, z, 0, 2))
	must(t, e.Record(a))
	must(t, b.WaitEvent(e))
	must(t, hcomm.StreamSend(b, z, 0, 3))
	must(t, hcomm.StreamRecv(b, y, 0, 3))
	must(t, e.Record(b))
	must(t, e.Synchronize())
	done, err = e.Query()
	must(t, err)
	// b is past its wait for a's mark: a's recv into z has run too, and z,
	// used by both streams, is written back.
	if !done || y[0] != 9 || z[0] != 9 {
		t.Fatalf("reached %v, y = %v (9), z = %v (9)", done, y, z)
	}
}

func TestStreamCloseRunsOutTheQueue(t *testing.T) {
	c := initSolo(t)
	s, err := c.NewStream(1)
	must(t, err)
	x := make([]float32, 3)
	must(t, hcomm.StreamSend(s, []float32{1, 2, 3}, 0, 8))
	must(t, hcomm.StreamRecv(s, x, 0, 8))
	must(t, s.Close())
	if fmt.Sprint(x) != "[1 2 3]" {
		t.Fatalf("x = %v after Close", x)
	}
	must(t, s.Close()) // idempotent
	wantInvalid(t, hcomm.StreamAllReduce(s, x, hcomm.Sum), "Stream is closed")
	wantInvalid(t, s.Synchronize(), "Stream is closed")
	_, err = s.Query()
	wantInvalid(t, err, "Stream is closed")
	e, err := hcomm.NewEvent()
	must(t, err)
	wantInvalid(t, e.Record(s), "Stream is closed")
	wantInvalid(t, s.WaitEvent(e), "Stream is closed")
	must(t, e.Close())
	must(t, e.Close())
	wantInvalid(t, e.Synchronize(), "Event is closed")
	_, err = e.Query()
	wantInvalid(t, err, "Event is closed")

	var nilStream *hcomm.Stream
	wantInvalid(t, nilStream.Synchronize(), "Stream is nil")
	wantInvalid(t, hcomm.StreamSend(nilStream, x, 0, 0), "Stream is nil")
	wantInvalid(t, hcomm.StreamAllGather(nilStream, x, x), "Stream is nil")
	must(t, nilStream.Close())
	var nilEvent *hcomm.Event
	wantInvalid(t, nilEvent.Synchronize(), "Event is nil")
}

func TestStreamBadArguments(t *testing.T) {
	c := initSolo(t)
	s := newStream(t, c, 0)
	wantInvalid(t, hcomm.StreamSend(s, []int32{1}, 1, 0), "peer 1")
	wantInvalid(t, hcomm.StreamRecv(s, []int32{1}, 0, -5), "tag -5")
	wantInvalid(t, hcomm.StreamSend(s, []int32{1}, 1<<40, 0), "peer")
	wantInvalid(t, hcomm.StreamBroadcast(s, []int32{1}, 3), "root 3")
	wantInvalid(t, hcomm.StreamAllReduce(s, []int32{1}, hcomm.Op(99)), "op 99")
	wantInvalid(t, hcomm.StreamAllReduce(s, []int32{1}, hcomm.Op(1<<40)), "op")
	wantInvalid(t, hcomm.StreamAllGather(s, []int32{1, 2}, []int32{1}), "recv has 1 elements")
	wantInvalid(t, hcomm.StreamReduceScatter(s, []int32{1}, []int32{1, 2}, hcomm.Sum), "send has 1 elements")
	wantInvalid(t, hcomm.StreamAllToAll(s, []int32{1}, []int32{1, 2}), "recv 2")
	wantInvalid(t, hcomm.StreamGather(s, []int32{1}, nil, 0), "recv has 0 elements")
	wantInvalid(t, hcomm.StreamScatter(s, nil, []int32{1}, 0), "send has 0 elements")
	wantInvalid(t, s.WaitEvent(nil), "Event is nil")
	var e *hcomm.Event
	wantInvalid(t, e.Record(s), "Event is nil")
	_, err := c.NewStream(1 << 40)
	wantInvalid(t, err, "priority")
	// The refused collectives took their turns; nothing failed, and the stream still works.
	must(t, s.Synchronize())
	v := []int32{3}
	must(t, hcomm.StreamAllReduce(s, v, hcomm.Max))
	must(t, s.Synchronize())
	if v[0] != 3 {
		t.Fatalf("v = %v", v)
	}
}

func TestStreamOutlivesItsComm(t *testing.T) {
	c, err := hcomm.Init(map[string]string{"rank": "0", "world_size": "1", "timeout_ms": "10000"})
	must(t, err)
	s, err := c.NewStream(2)
	must(t, err)
	must(t, c.Close())
	_, err = c.NewStream(0)
	wantInvalid(t, err, "Comm is closed")
	v := []int32{0}
	must(t, hcomm.StreamSend(s, []int32{12}, 0, 1))
	must(t, hcomm.StreamRecv(s, v, 0, 1))
	must(t, s.Close())
	if v[0] != 12 {
		t.Fatalf("v = %v", v)
	}
}

func TestStreamFromGoroutines(t *testing.T) {
	// Sends and receives of distinct tags from 4 goroutines at once, each
	// synchronizing after its pair: every pair is queued in its order,
	// whatever the interleaving.
	c := initSolo(t)
	s := newStream(t, c, 0)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			got := []int32{0}
			for k := 0; k < 20; k++ {
				v := int32(g*100 + k)
				if err := hcomm.StreamSend(s, []int32{v}, 0, 10+g); err != nil {
					errs <- err
					return
				}
				if err := hcomm.StreamRecv(s, got, 0, 10+g); err != nil {
					errs <- err
					return
				}
				if err := s.Synchronize(); err != nil {
					errs <- err
					return
				}
				if got[0] != v {
					errs <- fmt.Errorf("goroutine %d got %d, want %d", g, got[0], v)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// --- steps of TestRank (4 ranks) -------------------------------------------

// rankSum is the sum over ranks r of (r+1)*k.
func rankSum(c *hcomm.Comm, k int) int {
	n := c.Size()
	return k * n * (n + 1) / 2
}

func testStreamEveryKind(t *testing.T, c *hcomm.Comm) {
	hi := newStream(t, c, 10)
	lo := newStream(t, c, 0)
	for _, s := range []*hcomm.Stream{hi, lo} {
		streamEveryKind(t, c, s)
	}
}

func streamEveryKind(t *testing.T, c *hcomm.Comm, s *hcomm.Stream) {
	const k = 5
	n, me := c.Size(), c.Rank()
	in := make([]int32, k)
	bc := make([]int32, k)
	for i := range in {
		in[i] = int32((me + 1) * (i + 1))
		bc[i] = -1
		if me == 1 {
			bc[i] = int32(1000 + i)
		}
	}
	ar := append([]int32(nil), in...)
	red := append([]int32(nil), in...)
	ag := make([]int32, k*n)
	rsIn := make([]int32, k*n)
	a2aIn := make([]int32, k*n)
	var scIn, ga []int32
	if me == 0 {
		scIn, ga = make([]int32, k*n), make([]int32, k*n)
	}
	for i := 0; i < k*n; i++ {
		rsIn[i] = int32((me + 1) * (i + 1))
		a2aIn[i] = int32(me*1000 + i)
		if me == 0 {
			scIn[i] = int32(7 * i)
		}
	}
	rs, a2a, sc := make([]int32, k), make([]int32, k*n), make([]int32, k)
	got := []int64{-1}
	must(t, hcomm.StreamAllReduce(s, ar, hcomm.Sum))
	must(t, hcomm.StreamBroadcast(s, bc, 1))
	must(t, hcomm.StreamReduce(s, red, hcomm.Max, n-1))
	must(t, hcomm.StreamAllGather(s, in, ag))
	must(t, hcomm.StreamReduceScatter(s, rsIn, rs, hcomm.Sum))
	must(t, hcomm.StreamAllToAll(s, a2aIn, a2a))
	must(t, hcomm.StreamGather(s, in, ga, 0))
	must(t, hcomm.StreamScatter(s, scIn, sc, 0))
	must(t, s.Barrier())
	must(t, hcomm.StreamSend(s, []int64{int64(me)}, (me+1)%n, 3))
	must(t, hcomm.StreamRecv(s, got, (me+n-1)%n, 3))
	must(t, s.Synchronize())
	for i := 0; i < k; i++ {
		switch {
		case int(ar[i]) != rankSum(c, i+1):
			t.Fatalf("AllReduce %v", ar)
		case bc[i] != int32(1000+i):
			t.Fatalf("Broadcast %v", bc)
		case me == n-1 && int(red[i]) != n*(i+1), me != n-1 && red[i] != in[i]:
			t.Fatalf("Reduce Max to %d: %v", n-1, red)
		case int(rs[i]) != rankSum(c, me*k+i+1):
			t.Fatalf("ReduceScatter %v", rs)
		case int(sc[i]) != 7*(me*k+i):
			t.Fatalf("Scatter %v", sc)
		}
	}
	for r := 0; r < n; r++ {
		for i := 0; i < k; i++ {
			switch {
			case int(ag[r*k+i]) != (r+1)*(i+1):
				t.Fatalf("AllGather %v", ag)
			case me == 0 && int(ga[r*k+i]) != (r+1)*(i+1):
				t.Fatalf("Gather %v", ga)
			case int(a2a[r*k+i]) != r*1000+me*k+i:
				t.Fatalf("AllToAll %v", a2a)
			}
		}
	}
	if got[0] != int64((me+n-1)%n) {
		t.Fatalf("StreamRecv got %v", got)
	}
}

// Both streams at once: small allreduces on the high-priority one, a large
// one on the other.
func testStreamPriorities(t *testing.T, c *hcomm.Comm) {
	hi := newStream(t, c, 10)
	lo := newStream(t, c, 0)
	n, r := c.Size(), c.Rank()
	big := make([]float64, 1<<17)
	for i := range big {
		big[i] = float64(i + r)
	}
	must(t, hcomm.StreamAllReduce(lo, big, hcomm.Sum))
	small := make([][]int32, 20)
	for k := range small {
		small[k] = []int32{int32((r + 1) * k), int32(r)}
		op := hcomm.Sum
		if k%2 == 1 {
			op = hcomm.Max
		}
		must(t, hcomm.StreamAllReduce(hi, small[k], op))
	}
	must(t, hi.Synchronize())
	for k, v := range small {
		want0, want1 := rankSum(c, k), n*(n-1)/2
		if k%2 == 1 {
			want0, want1 = n*k, n-1
		}
		if int(v[0]) != want0 || int(v[1]) != want1 {
			t.Fatalf("hi AllReduce %d = %v, want [%d %d]", k, v, want0, want1)
		}
	}
	must(t, lo.Synchronize())
	for i := 0; i < len(big); i += 1021 {
		if want := float64(n*i + n*(n-1)/2); big[i] != want {
			t.Fatalf("lo AllReduce [%d] = %v, want %v", i, big[i], want)
		}
	}
}

// In place, one after another: Sum then Prod gives (n(n+1)/2)^n; the
// other order would not.
func testStreamOrder(t *testing.T, c *hcomm.Comm) {
	s := newStream(t, c, 0)
	v := []int64{int64(c.Rank() + 1)}
	must(t, hcomm.StreamAllReduce(s, v, hcomm.Sum))
	must(t, hcomm.StreamAllReduce(s, v, hcomm.Prod))
	must(t, hcomm.StreamAllReduce(s, v, hcomm.Max))
	must(t, s.Synchronize())
	want := int64(1)
	for k := 0; k < c.Size(); k++ {
		want *= int64(rankSum(c, 1))
	}
	if v[0] != want {
		t.Fatalf("Sum then Prod in place = %d, want %d", v[0], want)
	}
}

// b's ReduceScatter of x waits, through an event, for a's AllReduce that
// produces x.
func testStreamEvent(t *testing.T, c *hcomm.Comm) {
	a := newStream(t, c, 0)
	b := newStream(t, c, 0)
	n := c.Size()
	const m = 1 << 16
	x := make([]float32, m)
	for i := range x {
		x[i] = 1
	}
	y := make([]float32, m/n)
	e, err := hcomm.NewEvent()
	must(t, err)
	defer func() { must(t, e.Close()) }()
	must(t, hcomm.StreamAllReduce(a, x, hcomm.Sum))
	must(t, e.Record(a))
	must(t, b.WaitEvent(e))
	must(t, hcomm.StreamReduceScatter(b, x, y, hcomm.Sum))
	must(t, e.Record(b))
	must(t, e.Synchronize()) // no stream Synchronize: the event writes y back
	for i, v := range y {
		if v != float32(n*n) {
			t.Fatalf("y[%d] = %v, want %d", i, v, n*n)
		}
	}
	// b is past its wait for a's mark, so x, used on both, is written back.
	if x[0] != float32(n) || x[m-1] != float32(n) {
		t.Fatalf("x = %v ... %v, want %d", x[0], x[m-1], n)
	}
	must(t, a.Synchronize())
	must(t, b.Synchronize())
}

// A stream's recv takes only that stream's send of the same peer and tag.
func testStreamContexts(t *testing.T, c *hcomm.Comm) {
	a := newStream(t, c, 0)
	b := newStream(t, c, 0)
	switch c.Rank() {
	case 0:
		fromA, fromB, fromBlocking := []int32{-1}, []int32{-1}, []int32{-1}
		// Posted first, on both streams: the blocking send must not match them.
		must(t, hcomm.StreamRecv(b, fromB, 1, 9))
		must(t, hcomm.StreamRecv(a, fromA, 1, 9))
		_, err := hcomm.Recv(c, fromBlocking, 1, 9)
		must(t, err)
		must(t, a.Synchronize())
		must(t, b.Synchronize())
		if fromBlocking[0] != 100 || fromA[0] != 200 || fromB[0] != 300 {
			t.Fatalf("blocking recv got %d (100), stream a %d (200), stream b %d (300)",
				fromBlocking[0], fromA[0], fromB[0])
		}
	case 1:
		must(t, hcomm.Send(c, []int32{100}, 0, 9))
		must(t, hcomm.StreamSend(b, []int32{300}, 0, 9))
		must(t, b.Synchronize())
		must(t, hcomm.StreamSend(a, []int32{200}, 0, 9))
		must(t, a.Synchronize())
	}
	must(t, c.Barrier())
}

// Rank 1 alone passes a recv of the wrong length: this package refuses it
// there, and the others' stream fails with StatusMismatch until Synchronize
// returns it; then it works again.
func testStreamRefusedOnOneRank(t *testing.T, c *hcomm.Comm) {
	s := newStream(t, c, 0)
	r, n := c.Rank(), c.Size()
	recv := make([]int32, n)
	if r == 1 {
		recv = recv[:n-1]
	}
	err := hcomm.StreamAllGather(s, []int32{int32(r)}, recv)
	if r == 1 {
		wantStatus(t, err, hcomm.StatusInvalidArgument)
	} else {
		must(t, err)
	}
	must(t, hcomm.StreamAllReduce(s, []int32{1}, hcomm.Sum)) // fails after it
	err = s.Synchronize()
	if r != 1 {
		e := wantStatus(t, err, hcomm.StatusMismatch)
		if !strings.Contains(e.Message, "allgather") {
			t.Fatalf("the error does not name the allgather: %v", e)
		}
		must(t, s.Synchronize()) // cleared
	} else if err != nil {
		wantStatus(t, err, hcomm.StatusMismatch)
	}
	must(t, c.Barrier())
	w := []int32{int32(r + 1)}
	must(t, hcomm.StreamAllReduce(s, w, hcomm.Sum))
	must(t, s.Synchronize())
	if int(w[0]) != rankSum(c, 1) {
		t.Fatalf("AllReduce after the failure = %v", w)
	}
}

func testStreamClose(t *testing.T, c *hcomm.Comm) {
	s, err := c.NewStream(3)
	must(t, err)
	w := []int64{int64(c.Rank() + 1)}
	must(t, hcomm.StreamAllReduce(s, w, hcomm.Sum))
	must(t, s.Barrier())
	must(t, s.Close())
	if int(w[0]) != rankSum(c, 1) {
		t.Fatalf("AllReduce queued before Close = %v", w)
	}
}
