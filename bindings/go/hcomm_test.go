package hcomm_test

// Single-process tests (a world of one rank). The multi-process tests are
// in multiprocess_test.go.

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"hcomm.local/hcomm"
	"hcomm.local/hcomm/internal/capi"
)

// initSolo makes a one-rank communicator and closes it when t ends.
func initSolo(t *testing.T) *hcomm.Comm {
	t.Helper()
	c, err := hcomm.Init(map[string]string{"rank": "0", "world_size": "1", "timeout_ms": "10000"})
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// wantStatus fails unless err is an *hcomm.Error with status st and a
// message.
func wantStatus(t *testing.T, err error, st hcomm.Status) *hcomm.Error {
	t.Helper()
	var e *hcomm.Error
	if !errors.As(err, &e) {
		t.Fatalf("got error %v (%T), want an *hcomm.Error with %v", err, err, st)
	}
	if e.Status != st {
		t.Fatalf("got status %v (%v), want %v", e.Status, err, st)
	}
	if !errors.Is(err, &hcomm.Error{Status: st}) {
		t.Fatalf("errors.Is(%v, status %v) is false", err, st)
	}
	if e.Message == "" || !strings.Contains(e.Error(), st.String()) {
		t.Fatalf("error %q: want a message and the status name %s", e.Error(), st)
	}
	return e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestConstantsMatchHeader(t *testing.T) {
	statuses := []struct {
		got  hcomm.Status
		want int
	}{
		{hcomm.StatusSuccess, capi.HCOMM_SUCCESS},
		{hcomm.StatusInvalidArgument, capi.HCOMM_ERR_INVALID_ARGUMENT},
		{hcomm.StatusNoDevice, capi.HCOMM_ERR_NO_DEVICE},
		{hcomm.StatusOutOfMem, capi.HCOMM_ERR_OUT_OF_MEM},
		{hcomm.StatusTimeout, capi.HCOMM_ERR_TIMEOUT},
		{hcomm.StatusPeerFailure, capi.HCOMM_ERR_PEER_FAILURE},
		{hcomm.StatusMismatch, capi.HCOMM_ERR_MISMATCH},
		{hcomm.StatusAborted, capi.HCOMM_ERR_ABORTED},
		{hcomm.StatusUnavailable, capi.HCOMM_ERR_UNAVAILABLE},
		{hcomm.StatusPermissionDenied, capi.HCOMM_ERR_PERMISSION_DENIED},
		{hcomm.StatusNotSupported, capi.HCOMM_ERR_NOT_SUPPORTED},
		{hcomm.StatusInternal, capi.HCOMM_ERR_INTERNAL},
	}
	for _, s := range statuses {
		if int(s.got) != s.want {
			t.Errorf("%v = %d, header says %d", s.got, int(s.got), s.want)
		}
	}
	ops := map[hcomm.Op]int{hcomm.Sum: capi.HCOMM_SUM, hcomm.Prod: capi.HCOMM_PROD,
		hcomm.Min: capi.HCOMM_MIN, hcomm.Max: capi.HCOMM_MAX, hcomm.Avg: capi.HCOMM_AVG}
	for op, want := range ops {
		if int(op) != want {
			t.Errorf("%v = %d, header says %d", op, int(op), want)
		}
	}
	if hcomm.AnySource != capi.HCOMM_ANY_SOURCE || hcomm.AnyTag != capi.HCOMM_ANY_TAG ||
		hcomm.Undefined != capi.HCOMM_UNDEFINED {
		t.Errorf("AnySource/AnyTag/Undefined disagree with the header")
	}
	if maj, min, pat := hcomm.Version(); maj != capi.HCOMM_VERSION_MAJOR ||
		min != capi.HCOMM_VERSION_MINOR || pat != capi.HCOMM_VERSION_PATCH {
		t.Errorf("library version %d.%d.%d, header %d.%d.%d", maj, min, pat,
			capi.HCOMM_VERSION_MAJOR, capi.HCOMM_VERSION_MINOR, capi.HCOMM_VERSION_PATCH)
	}
}

func TestStatusString(t *testing.T) {
	if s := hcomm.StatusTimeout.String(); s != "HCOMM_ERR_TIMEOUT" {
		t.Errorf("StatusTimeout.String() = %q", s)
	}
	if s := hcomm.Status(99).String(); s != "HCOMM_UNKNOWN_STATUS" {
		t.Errorf("Status(99).String() = %q", s)
	}
	if s := hcomm.Avg.String(); s != "Avg" {
		t.Errorf("Avg.String() = %q", s)
	}
	e := &hcomm.Error{Status: hcomm.StatusMismatch, Message: "too big"}
	if e.Error() != "hcomm: HCOMM_ERR_MISMATCH: too big" {
		t.Errorf("Error() = %q", e.Error())
	}
	if errors.Is(e, hcomm.ErrTimeout) || !errors.Is(e, hcomm.ErrMismatch) {
		t.Errorf("errors.Is does not follow Status")
	}
	wrapped := fmt.Errorf("step 3: %w", e)
	var got *hcomm.Error
	if !errors.As(wrapped, &got) || got.Status != hcomm.StatusMismatch {
		t.Errorf("errors.As through a wrap failed")
	}
}

func TestInitSolo(t *testing.T) {
	c := initSolo(t)
	if c.Rank() != 0 || c.Size() != 1 {
		t.Fatalf("Rank, Size = %d, %d; want 0, 1", c.Rank(), c.Size())
	}
	must(t, c.Barrier())
	if tr, err := c.Transport(0); err != nil || tr != "self" {
		t.Errorf("Transport(0) = %q, %v; want self", tr, err)
	}
	_, err := c.Transport(1)
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	must(t, c.SetTimeout(5*time.Second))
	must(t, c.Set("timeout_ms", "6000"))
}

// callsStillWork checks an AllReduce and a send to self after a
// compression change (exact on one rank).
func callsStillWork(t *testing.T, c *hcomm.Comm, what string) {
	t.Helper()
	x := []float32{0.5, 1.25, 3, 1e-3, 7.75}
	y := append([]float32(nil), x...)
	must(t, hcomm.AllReduce(c, y, hcomm.Sum))
	must(t, hcomm.Send(c, x, 0, 61))
	got := make([]float32, len(x))
	_, err := hcomm.Recv(c, got, 0, 61)
	must(t, err)
	for i := range x {
		if y[i] != x[i] || got[i] != x[i] {
			t.Fatalf("%s: allreduce %v, received %v; want %v", what, y, got, x)
		}
	}
}

func TestSetCompression(t *testing.T) {
	c := initSolo(t)
	valid := []hcomm.Compression{
		hcomm.CompressionNone,
		hcomm.CompressionFP16,
		hcomm.CompressionBF16,
		hcomm.CompressionDelta,
		hcomm.CompressionFP16 | hcomm.CompressionDelta,
		hcomm.CompressionBF16 | hcomm.CompressionDelta,
	}
	for _, k := range valid {
		must(t, c.SetCompression(k))
		callsStillWork(t, c, k.String())
		must(t, c.SetCompression(hcomm.CompressionNone))
		callsStillWork(t, c, "None after "+k.String())
	}
	names := map[hcomm.Compression]string{
		hcomm.CompressionNone: "None", hcomm.CompressionFP16 | hcomm.CompressionDelta: "FP16|Delta",
		hcomm.CompressionBF16: "BF16", 8: "Compression(8)",
	}
	for k, want := range names {
		if k.String() != want {
			t.Errorf("Compression(%d).String() = %q, want %q", int(k), k.String(), want)
		}
	}
	if hcomm.CompressionNone != 0 || hcomm.CompressionFP16 != 1 || hcomm.CompressionBF16 != 2 ||
		hcomm.CompressionDelta != 4 {
		t.Errorf("the Compression flags are not 0, 1, 2, 4")
	}

	bad := []struct {
		k   hcomm.Compression
		why string
	}{
		{hcomm.CompressionFP16 | hcomm.CompressionBF16, "both CompressionFP16 and CompressionBF16"},
		{hcomm.CompressionFP16 | hcomm.CompressionBF16 | hcomm.CompressionDelta, "both"},
		{8, "no Compression flag"},
		{-1, "no Compression flag"},
	}
	for _, b := range bad {
		e := wantStatus(t, c.SetCompression(b.k), hcomm.StatusInvalidArgument)
		if !strings.Contains(e.Message, "SetCompression: kind") || !strings.Contains(e.Message, b.why) {
			t.Errorf("SetCompression(%d): message %q does not say %q", int(b.k), e.Message, b.why)
		}
	}
	// C's own check, through the generic setter.
	e := wantStatus(t, c.Set("compression", "fp16,bf16"), hcomm.StatusInvalidArgument)
	if !strings.Contains(e.Message, "compression") {
		t.Errorf("message %q does not name the key", e.Message)
	}
	callsStillWork(t, c, "after the refusals")

	var nilComm *hcomm.Comm
	wantStatus(t, nilComm.SetCompression(hcomm.CompressionFP16), hcomm.StatusInvalidArgument)
	closed, err := hcomm.Init(map[string]string{"rank": "0", "world_size": "1"})
	must(t, err)
	must(t, closed.Close())
	wantStatus(t, closed.SetCompression(hcomm.CompressionFP16), hcomm.StatusInvalidArgument)
}

func TestInitErrors(t *testing.T) {
	_, err := hcomm.Init(map[string]string{"no_such_key": "1"})
	e := wantStatus(t, err, hcomm.StatusInvalidArgument)
	if !strings.Contains(e.Message, "no_such_key") {
		t.Errorf("message %q does not name the key", e.Message)
	}
	_, err = hcomm.Init(map[string]string{"rank": "0", "world_size": "1", "timeout_ms": "soon"})
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	_, err = hcomm.Init(map[string]string{"rank": "3", "world_size": "2", "store_addr": "127.0.0.1:1"})
	wantStatus(t, err, hcomm.StatusInvalidArgument)
}

// A NUL in a string for C would cut it there: the C side would read
// "timeout_ms", "tok" or the channel name's prefix.
func TestNulInStrings(t *testing.T) {
	solo := func(k, v string) map[string]string {
		return map[string]string{"rank": "0", "world_size": "1", k: v}
	}
	bad := []map[string]string{solo("timeout_ms\x00x", "5000"), solo("job_token", "tok\x00en")}
	for _, cfg := range bad {
		c, err := hcomm.Init(cfg)
		if c != nil {
			c.Close()
		}
		e := wantStatus(t, err, hcomm.StatusInvalidArgument)
		if !strings.Contains(e.Message, "NUL") {
			t.Errorf("Init(%q): message %q does not say NUL", cfg, e.Message)
		}
	}
	c := initSolo(t)
	wantStatus(t, c.Set("timeout_ms", "5000\x00x"), hcomm.StatusInvalidArgument)
	wantStatus(t, c.Set("timeout_ms\x00x", "5000"), hcomm.StatusInvalidArgument)

	name := fmt.Sprintf("hcomm-go-nul-%d", os.Getpid())
	ch, err := hcomm.OpenChannel(name+"\x00more", 64, true)
	if ch != nil {
		ch.Close()
	}
	e := wantStatus(t, err, hcomm.StatusInvalidArgument)
	if !strings.Contains(e.Message, "name") {
		t.Errorf("OpenChannel: message %q does not name the argument", e.Message)
	}
	if _, err := os.Stat("/dev/shm/hcomm-ch-" + name); err == nil {
		t.Errorf("OpenChannel made /dev/shm/hcomm-ch-%s", name)
	}
}

// soloAllReduce checks every op of AllReduce, Reduce and ReduceScatter on
// one rank (the identity, Avg included) for T.
func soloAllReduce[T hcomm.Number](t *testing.T, c *hcomm.Comm) {
	t.Helper()
	for _, op := range []hcomm.Op{hcomm.Sum, hcomm.Prod, hcomm.Min, hcomm.Max, hcomm.Avg} {
		buf := []T{1, 2, 3, 100}
		must(t, hcomm.AllReduce(c, buf, op))
		if buf[0] != 1 || buf[1] != 2 || buf[2] != 3 || buf[3] != 100 {
			t.Fatalf("AllReduce %v %T on one rank changed the data: %v", op, buf, buf)
		}
		must(t, hcomm.Reduce(c, buf, op, 0))
		recv := make([]T, 4)
		must(t, hcomm.ReduceScatter(c, buf, recv, op))
		if recv[3] != 100 {
			t.Fatalf("ReduceScatter %v %T = %v", op, recv, recv)
		}
	}
}

func TestCollectivesSolo(t *testing.T) {
	c := initSolo(t)
	soloAllReduce[int8](t, c)
	soloAllReduce[uint8](t, c)
	soloAllReduce[int32](t, c)
	soloAllReduce[uint32](t, c)
	soloAllReduce[int64](t, c)
	soloAllReduce[uint64](t, c)
	soloAllReduce[float32](t, c)
	soloAllReduce[float64](t, c)

	// A type defined over a Number type works too.
	type celsius float64
	temps := []celsius{21.5, -3}
	must(t, hcomm.AllReduce(c, temps, hcomm.Max))
	if temps[0] != 21.5 || temps[1] != -3 {
		t.Fatalf("AllReduce of a defined type: %v", temps)
	}

	b := []int64{7, 8, 9}
	must(t, hcomm.Broadcast(c, b, 0))
	g := make([]int64, 3)
	must(t, hcomm.AllGather(c, b, g))
	if g[2] != 9 {
		t.Fatalf("AllGather = %v", g)
	}
	must(t, hcomm.AllGather(c, g, g)) // in place
	a := make([]int64, 3)
	must(t, hcomm.AllToAll(c, b, a))
	if a[0] != 7 || a[2] != 9 {
		t.Fatalf("AllToAll = %v", a)
	}
	must(t, hcomm.Gather(c, b, g, 0))
	must(t, hcomm.Scatter(c, g, a, 0))
	if a[1] != 8 {
		t.Fatalf("Scatter = %v", a)
	}

	r, err := hcomm.IAllReduce(c, []float32{1.5, 2.5}, hcomm.Sum)
	must(t, err)
	must(t, r.Wait())
	must(t, r.Free())

	// Empty slices are valid everywhere.
	var none []float64
	must(t, hcomm.AllReduce(c, none, hcomm.Sum))
	must(t, hcomm.Broadcast(c, none, 0))
	must(t, hcomm.AllGather(c, none, none))
	must(t, hcomm.AllToAll(c, none, []float64{}))
	must(t, hcomm.ReduceScatter(c, none, none, hcomm.Min))
	must(t, c.Barrier())
}

func TestCollectiveArgumentErrors(t *testing.T) {
	c := initSolo(t)
	buf := []float32{1, 2}
	wantStatus(t, hcomm.AllGather(c, buf, make([]float32, 3)), hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.ReduceScatter(c, buf, make([]float32, 1), hcomm.Sum), hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.AllToAll(c, buf, make([]float32, 1)), hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.Gather(c, buf, nil, 0), hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.Scatter(c, nil, buf, 0), hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.AllReduce(c, buf, hcomm.Op(42)), hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.Broadcast(c, buf, 1), hcomm.StatusInvalidArgument)
	e := wantStatus(t, hcomm.Reduce(c, buf, hcomm.Sum, -1), hcomm.StatusInvalidArgument)
	if !strings.Contains(e.Message, "root") {
		t.Errorf("message %q does not mention the root", e.Message)
	}
	wantStatus(t, hcomm.Broadcast(c, buf, 1<<40), hcomm.StatusInvalidArgument)
	// The communicator is still usable.
	must(t, hcomm.AllReduce(c, buf, hcomm.Sum))
}

func TestSendToSelf(t *testing.T) {
	c := initSolo(t)
	// Isend first, then a blocking Recv.
	r, err := hcomm.Isend(c, []int32{1, 2, 3}, 0, 5)
	must(t, err)
	got := make([]int32, 3)
	src, err := hcomm.Recv(c, got, 0, 5)
	must(t, err)
	if src != 0 || got[0] != 1 || got[2] != 3 {
		t.Fatalf("Recv = %d, %v", src, got)
	}
	must(t, r.Wait())
	if r.Source() != 0 || r.Tag() != 5 || r.Count() != 3 {
		t.Errorf("send info = %d, %d, %d", r.Source(), r.Tag(), r.Count())
	}
	must(t, r.Free())

	// Irecv with wildcards and a larger buffer, then a blocking Send; the
	// Isend buffer is reusable at once (it was copied).
	in := make([]float64, 8)
	rr, err := hcomm.Irecv(c, in, hcomm.AnySource, hcomm.AnyTag)
	must(t, err)
	if done, err := rr.Test(); done || err != nil {
		t.Fatalf("Test before any send = %v, %v", done, err)
	}
	if rr.Count() != -1 {
		t.Errorf("Count before completion = %d", rr.Count())
	}
	out := []float64{math.Pi, math.E}
	must(t, hcomm.Send(c, out, 0, 77))
	must(t, rr.Wait())
	if in[0] != math.Pi || in[1] != math.E || in[2] != 0 {
		t.Fatalf("Irecv data = %v", in)
	}
	if rr.Source() != 0 || rr.Tag() != 77 || rr.Count() != 2 {
		t.Errorf("recv info = %d, %d, %d", rr.Source(), rr.Tag(), rr.Count())
	}
	must(t, rr.Wait()) // again: the same result
	must(t, rr.Free())
	must(t, rr.Free()) // a no-op
	wantStatus(t, rr.Wait(), hcomm.StatusInvalidArgument)

	// AnySource through the blocking Recv, and Test polling.
	s, err := hcomm.Isend(c, []uint8("hello"), 0, 9)
	must(t, err)
	for {
		done, err := s.Test()
		must(t, err)
		if done {
			break
		}
		time.Sleep(time.Millisecond)
	}
	msg := make([]uint8, 16)
	src, err = hcomm.Recv(c, msg, hcomm.AnySource, 9)
	must(t, err)
	if src != 0 || string(msg[:5]) != "hello" {
		t.Fatalf("Recv(AnySource) = %d, %q", src, msg)
	}
	must(t, s.Free())

	// Empty messages.
	must(t, hcomm.WaitAll(mustReq(t)(hcomm.Isend(c, []int64{}, 0, 1))))
	_, err = hcomm.Recv(c, []int64(nil), 0, 1)
	must(t, err)
}

func mustReq(t *testing.T) func(*hcomm.Request, error) *hcomm.Request {
	return func(r *hcomm.Request, err error) *hcomm.Request {
		t.Helper()
		must(t, err)
		t.Cleanup(func() { r.Free() })
		return r
	}
}

func TestPointToPointErrors(t *testing.T) {
	c := initSolo(t)
	buf := []int32{1, 2, 3, 4}
	e := wantStatus(t, hcomm.Send(c, buf, 1, 0), hcomm.StatusInvalidArgument)
	if !strings.Contains(e.Message, "1") {
		t.Errorf("message %q does not name the peer", e.Message)
	}
	wantStatus(t, hcomm.Send(c, buf, 0, -5), hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.Send(c, buf, 1<<33, 0), hcomm.StatusInvalidArgument)
	_, err := hcomm.Recv(c, buf, 7, 0)
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	_, err = hcomm.Isend(c, buf, -3, 0)
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	_, err = hcomm.Irecv(c, buf, 0, -2)
	wantStatus(t, err, hcomm.StatusInvalidArgument)

	// A message larger than the receive buffer: MISMATCH, nothing written.
	r := mustReq(t)(hcomm.Isend(c, buf, 0, 3))
	small := []int32{-1, -1}
	_, err = hcomm.Recv(c, small, 0, 3)
	wantStatus(t, err, hcomm.StatusMismatch)
	if small[0] != -1 || small[1] != -1 {
		t.Errorf("a MISMATCH receive wrote %v", small)
	}
	must(t, r.Wait()) // the send completes normally

	// A receive nobody sends to: TIMEOUT after timeout_ms; the request
	// stays pending and completes once a message comes.
	must(t, c.SetTimeout(150*time.Millisecond))
	start := time.Now()
	_, err = hcomm.Recv(c, small, 0, 99)
	e = wantStatus(t, err, hcomm.StatusTimeout)
	if !e.Timeout() || !errors.Is(err, hcomm.ErrTimeout) {
		t.Errorf("Timeout()/errors.Is disagree")
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 5*time.Second {
		t.Errorf("the timeout took %v", d)
	}
	rr := mustReq(t)(hcomm.Irecv(c, small, 0, 98))
	wantStatus(t, rr.Wait(), hcomm.StatusTimeout)
	if done, err := rr.Test(); done || err != nil {
		t.Fatalf("after a Wait timeout: Test = %v, %v; want still pending", done, err)
	}
	must(t, hcomm.Send(c, []int32{42}, 0, 98))
	must(t, rr.Wait())
	if small[0] != 42 || rr.Count() != 1 {
		t.Errorf("late receive: %v, count %d", small, rr.Count())
	}
	must(t, c.SetTimeout(10*time.Second))
	wantStatus(t, c.SetTimeout(0), hcomm.StatusInvalidArgument)
	wantStatus(t, c.Set("transports", "tcp"), hcomm.StatusInvalidArgument) // fixed at init

	// Freeing a pending receive cancels it; its C buffer is freed by Close.
	p, err := hcomm.Irecv(c, make([]float64, 1000), 0, 1234)
	must(t, err)
	must(t, p.Free())
	must(t, c.Barrier())
}

func TestGroupsSolo(t *testing.T) {
	c := initSolo(t)
	g, err := c.NewGroup([]int{0})
	must(t, err)
	if g == nil || g.Size() != 1 || g.Rank() != 0 {
		t.Fatalf("NewGroup([0]) = %v", g)
	}
	must(t, hcomm.AllReduce(g, []int32{1}, hcomm.Sum))
	must(t, g.Close())
	g, err = c.NewGroup([]int{})
	must(t, err)
	if g != nil {
		t.Fatalf("NewGroup([]) = %v, want nil", g)
	}
	_, err = c.NewGroup([]int{1})
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	_, err = c.NewGroup([]int{0, 0})
	wantStatus(t, err, hcomm.StatusInvalidArgument)

	s, err := c.Split(hcomm.Undefined, 0)
	must(t, err)
	if s != nil {
		t.Fatalf("Split(Undefined) = %v, want nil", s)
	}
	s, err = c.Split(3, 0)
	must(t, err)
	if s == nil || s.Size() != 1 {
		t.Fatalf("Split(3, 0) = %v", s)
	}
	must(t, s.Close())
	_, err = c.Split(-7, 0)
	wantStatus(t, err, hcomm.StatusInvalidArgument)

	// Methods of a nil Comm (a non-member's group) fail cleanly.
	var none *hcomm.Comm
	wantStatus(t, none.Barrier(), hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.AllReduce(none, []int32{1}, hcomm.Sum), hcomm.StatusInvalidArgument)
	if none.Rank() != -1 || none.Size() != -1 || none.Close() != nil {
		t.Errorf("nil Comm: Rank/Size/Close")
	}
}

func TestClosedComm(t *testing.T) {
	c, err := hcomm.Init(map[string]string{"rank": "0", "world_size": "1"})
	must(t, err)
	// A request left pending when the Comm closes fails with ABORTED.
	pending, err := hcomm.Irecv(c, make([]int32, 4), 0, 1)
	must(t, err)
	must(t, c.Close())
	must(t, c.Close()) // again: a no-op
	wantStatus(t, pending.Wait(), hcomm.StatusAborted)
	must(t, pending.Free())

	buf := []float32{1}
	wantStatus(t, hcomm.Send(c, buf, 0, 0), hcomm.StatusInvalidArgument)
	_, err = hcomm.Recv(c, buf, 0, 0)
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	_, err = hcomm.Recv(c, buf, hcomm.AnySource, 0)
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	_, err = hcomm.Isend(c, buf, 0, 0)
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	_, err = hcomm.Irecv(c, buf, 0, 0)
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.AllReduce(c, buf, hcomm.Sum), hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.Broadcast(c, buf, 0), hcomm.StatusInvalidArgument)
	wantStatus(t, hcomm.AllGather(c, buf, buf), hcomm.StatusInvalidArgument)
	_, err = hcomm.IAllReduce(c, buf, hcomm.Sum)
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	wantStatus(t, c.Barrier(), hcomm.StatusInvalidArgument)
	wantStatus(t, c.Abort(), hcomm.StatusInvalidArgument)
	wantStatus(t, c.SetTimeout(time.Second), hcomm.StatusInvalidArgument)
	_, err = c.NewGroup([]int{0})
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	_, err = c.Split(0, 0)
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	if c.Rank() != -1 || c.Size() != -1 {
		t.Errorf("closed Comm: Rank, Size = %d, %d", c.Rank(), c.Size())
	}
	var r *hcomm.Request
	wantStatus(t, r.Wait(), hcomm.StatusInvalidArgument)
	if r.Free() != nil || r.Source() != -1 {
		t.Errorf("nil Request: Free/Source")
	}
}

func TestAbort(t *testing.T) {
	c := initSolo(t)
	r, err := hcomm.Irecv(c, make([]int64, 2), 0, 5)
	must(t, err)
	defer r.Free()
	must(t, c.Abort())
	wantStatus(t, r.Wait(), hcomm.StatusAborted)
	wantStatus(t, hcomm.Send(c, []int64{1}, 0, 5), hcomm.StatusAborted)
}

func TestChannel(t *testing.T) {
	name := fmt.Sprintf("hcomm-go-test-%d", os.Getpid())
	w, err := hcomm.OpenChannel(name, 1<<16, true)
	must(t, err)
	defer w.Close()
	r, err := hcomm.OpenChannel(name, 0, false)
	must(t, err)
	defer r.Close()
	if r.Name() != name {
		t.Errorf("Name() = %q", r.Name())
	}

	must(t, w.Write([]byte("first"), time.Second))
	must(t, w.Write(nil, 0)) // an empty message is a message
	big := make([]byte, 10000)
	for i := range big {
		big[i] = byte(i * 7)
	}
	must(t, w.Write(big, time.Second))

	got, err := r.Read(time.Second)
	must(t, err)
	if string(got) != "first" {
		t.Fatalf("Read = %q", got)
	}
	n, err := r.ReadInto(make([]byte, 8), time.Second)
	must(t, err)
	if n != 0 {
		t.Fatalf("empty message read as %d bytes", n)
	}
	// Too small: MISMATCH with the size, and the message stays.
	n, err = r.ReadInto(make([]byte, 100), 0)
	wantStatus(t, err, hcomm.StatusMismatch)
	if n != len(big) {
		t.Fatalf("MISMATCH reported %d bytes, want %d", n, len(big))
	}
	got, err = r.Read(time.Second) // grows its buffer
	must(t, err)
	if len(got) != len(big) || got[9999] != big[9999] {
		t.Fatalf("Read of %d bytes got %d", len(big), len(got))
	}

	// Empty channel: TIMEOUT; too large a message: INVALID_ARGUMENT.
	start := time.Now()
	_, err = r.Read(50 * time.Millisecond)
	wantStatus(t, err, hcomm.StatusTimeout)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Read timeout took %v", d)
	}
	wantStatus(t, w.Write(make([]byte, 1<<17), 0), hcomm.StatusInvalidArgument)
	wantStatus(t, w.Write([]byte("x"), -time.Second), hcomm.StatusInvalidArgument)

	// Names: a second create fails, an unknown name is NO_DEVICE, a bad
	// name INVALID_ARGUMENT.
	_, err = hcomm.OpenChannel(name, 1024, true)
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	_, err = hcomm.OpenChannel(name+"-absent", 0, false)
	wantStatus(t, err, hcomm.StatusNoDevice)
	_, err = hcomm.OpenChannel("a/b", 1024, true)
	wantStatus(t, err, hcomm.StatusInvalidArgument)

	must(t, r.Close())
	must(t, r.Close())
	wantStatus(t, r.Write([]byte("x"), 0), hcomm.StatusInvalidArgument)
	_, err = r.Read(0)
	wantStatus(t, err, hcomm.StatusInvalidArgument)
	must(t, w.Close())
	_, err = hcomm.OpenChannel(name, 0, false) // the creator's close removed it
	wantStatus(t, err, hcomm.StatusNoDevice)
}

func TestConcurrentGoroutines(t *testing.T) {
	c := initSolo(t)
	const workers = 8
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func(w int) {
			for i := 0; i < 20; i++ {
				r, err := hcomm.Isend(c, []int64{int64(w), int64(i)}, 0, 100+w)
				if err != nil {
					errs <- err
					return
				}
				got := make([]int64, 2)
				if _, err := hcomm.Recv(c, got, 0, 100+w); err != nil {
					errs <- err
					return
				}
				if err := hcomm.WaitAll(r); err != nil {
					errs <- err
					return
				}
				r.Free()
				if got[0] != int64(w) || got[1] != int64(i) {
					errs <- fmt.Errorf("worker %d message %d: got %v", w, i, got)
					return
				}
			}
			errs <- nil
		}(w)
	}
	for w := 0; w < workers; w++ {
		must(t, <-errs)
	}
}

func TestAbortUnblocksThenClose(t *testing.T) {
	c, err := hcomm.Init(map[string]string{"rank": "0", "world_size": "1", "timeout_ms": "20000"})
	must(t, err)
	done := make(chan error)
	go func() {
		_, err := hcomm.Recv(c, make([]float32, 4), 0, 7) // nobody sends
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it block (the test passes either way)
	start := time.Now()
	must(t, c.Abort())
	wantStatus(t, <-done, hcomm.StatusAborted)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Abort took %v to unblock the receive", d)
	}
	must(t, c.Close())
	wantStatus(t, c.Barrier(), hcomm.StatusInvalidArgument)
}
