package hcomm_test

// Multi-process tests: TestMultiProcess starts this test binary as 4 ranks
// through hcomm_run (path in $HCOMM_RUN), and each rank runs TestRank.

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"hcomm.local/hcomm"
)

const (
	rankEnv = "HCOMM_GO_TEST_RANK" // set in the ranks' environment
	nRanks  = 4
)

func TestMultiProcess(t *testing.T) {
	if os.Getenv(rankEnv) != "" {
		t.Skip("inside a rank")
	}
	launcher := os.Getenv("HCOMM_RUN")
	if launcher == "" {
		t.Skip("HCOMM_RUN (the path of hcomm_run) is not set")
	}
	self, err := os.Executable()
	must(t, err)
	start := time.Now()
	cmd := exec.Command(launcher, "-n", fmt.Sprint(nRanks), "--timeout", "120", "--",
		self, "-test.run=^TestRank$", "-test.v", "-test.timeout=110s")
	cmd.Env = append(os.Environ(), rankEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("hcomm_run -n %d (%.1f s):\n%s", nRanks, time.Since(start).Seconds(), out)
	if err != nil {
		t.Fatalf("hcomm_run: %v", err)
	}
	for r := 0; r < nRanks; r++ {
		if !strings.Contains(string(out), fmt.Sprintf("[rank %d] --- PASS: TestRank", r)) {
			t.Errorf("rank %d did not pass TestRank", r)
		}
	}
}

// TestRank is one rank of TestMultiProcess. Steps run in order and stop at
// the first failure (the launcher then stops the other ranks).
func TestRank(t *testing.T) {
	if os.Getenv(rankEnv) == "" {
		t.Skip("run by TestMultiProcess under hcomm_run")
	}
	// The environment from hcomm_run, plus an explicit key.
	c, err := hcomm.Init(map[string]string{"timeout_ms": "20000"})
	must(t, err)
	defer func() { must(t, c.Close()) }()
	if c.Size() != nRanks {
		t.Fatalf("Size = %d, want %d", c.Size(), nRanks)
	}
	for p := 0; p < nRanks; p++ {
		tr, err := c.Transport(p)
		must(t, err)
		if want := (p == c.Rank()); (tr == "self") != want || tr == "" {
			t.Fatalf("Transport(%d) = %q", p, tr)
		}
		if p == 0 {
			t.Logf("transport to rank 0: %s", tr)
		}
	}
	steps := []struct {
		name string
		f    func(*testing.T, *hcomm.Comm)
	}{
		{"SendRecvRing", testRing},
		{"IsendIrecvAllPairs", testAllPairs},
		{"AnySource", testAnySource},
		{"AnyTagShortMessage", testAnyTag},
		{"Mismatch", testMismatch},
		{"AllReduceEveryOp", testAllReduceOps},
		{"AllReduceSumEveryType", testAllReduceTypes},
		{"Broadcast", testBroadcast},
		{"ReduceEveryOp", testReduceOps},
		{"ReduceScatterEveryOp", testReduceScatterOps},
		{"AllGather", testAllGather},
		{"AllGatherRefusedOnOneRank", testAllGatherRefused},
		{"SplitAndNewGroupRefusedOnOneRank", testGroupsRefused},
		{"AllToAll", testAllToAll},
		{"GatherScatter", testGatherScatter},
		{"IAllReduce", testIAllReduce},
		{"NewGroup", testNewGroup},
		{"Split", testSplit},
		{"Timeout", testTimeout},
		{"Compression", testCompression},
		{"StreamEveryKindTwoPriorities", testStreamEveryKind},
		{"StreamsAtOnce", testStreamPriorities},
		{"StreamOrder", testStreamOrder},
		{"StreamEventOrdersAnotherStream", testStreamEvent},
		{"StreamMatchingContexts", testStreamContexts},
		{"StreamRefusedOnOneRank", testStreamRefusedOnOneRank},
		{"StreamCloseRunsOutTheQueue", testStreamClose},
	}
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.f(t, c) }) {
			t.FailNow()
		}
	}
	must(t, c.Barrier())
}

func testRing(t *testing.T, c *hcomm.Comm) {
	r, n := c.Rank(), c.Size()
	right, left := (r+1)%n, (r+n-1)%n
	out := []int32{int32(r), int32(r * 10), int32(r * 100)}
	in := make([]int32, 3)
	var src int
	var err error
	if r%2 == 0 {
		must(t, hcomm.Send(c, out, right, 1))
		src, err = hcomm.Recv(c, in, left, 1)
	} else {
		src, err = hcomm.Recv(c, in, left, 1)
		if err == nil {
			err = hcomm.Send(c, out, right, 1)
		}
	}
	must(t, err)
	if src != left || in[0] != int32(left) || in[2] != int32(left*100) {
		t.Fatalf("from %d got %v (source %d)", left, in, src)
	}
}

func testAllPairs(t *testing.T, c *hcomm.Comm) {
	r, n := c.Rank(), c.Size()
	bufs := make([][]float64, n)
	var reqs []*hcomm.Request
	var recvs []*hcomm.Request
	for p := 0; p < n; p++ {
		if p == r {
			continue
		}
		bufs[p] = make([]float64, 4)
		q, err := hcomm.Irecv(c, bufs[p], p, 10+p)
		must(t, err)
		recvs = append(recvs, q)
	}
	for p := 0; p < n; p++ {
		if p == r {
			continue
		}
		msg := []float64{float64(r), float64(p), 0.5, float64(r*n + p)}
		q, err := hcomm.Isend(c, msg, p, 10+r)
		must(t, err)
		msg[0] = -1 // Isend copied it: changing it now changes nothing
		reqs = append(reqs, q)
	}
	reqs = append(reqs, recvs...)
	must(t, hcomm.WaitAll(reqs...))
	for _, q := range recvs {
		p := q.Source()
		if q.Tag() != 10+p || q.Count() != 4 {
			t.Errorf("receive from %d: tag %d count %d", p, q.Tag(), q.Count())
		}
		b := bufs[p]
		if b[0] != float64(p) || b[1] != float64(r) || b[3] != float64(p*n+r) {
			t.Errorf("from %d got %v", p, b)
		}
	}
	for _, q := range reqs {
		must(t, q.Free())
	}
}

func testAnySource(t *testing.T, c *hcomm.Comm) {
	r, n := c.Rank(), c.Size()
	if r != 0 {
		must(t, hcomm.Send(c, []int64{int64(r) * 1000}, 0, 20))
		return
	}
	var got []int
	for i := 1; i < n; i++ {
		buf := []int64{-1}
		src, err := hcomm.Recv(c, buf, hcomm.AnySource, 20)
		must(t, err)
		if buf[0] != int64(src)*1000 {
			t.Errorf("message %d from %d", buf[0], src)
		}
		got = append(got, src)
	}
	sort.Ints(got)
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("sources %v, want [1 2 3]", got)
	}
}

func testAnyTag(t *testing.T, c *hcomm.Comm) {
	switch c.Rank() {
	case 1:
		must(t, hcomm.Send(c, []uint32{7, 8}, 0, 33))
	case 0:
		buf := make([]uint32, 5)
		q, err := hcomm.Irecv(c, buf, 1, hcomm.AnyTag)
		must(t, err)
		defer q.Free()
		must(t, q.Wait())
		if q.Source() != 1 || q.Tag() != 33 || q.Count() != 2 || buf[1] != 8 || buf[2] != 0 {
			t.Fatalf("got %v from %d tag %d count %d", buf, q.Source(), q.Tag(), q.Count())
		}
	}
}

func testMismatch(t *testing.T, c *hcomm.Comm) {
	switch c.Rank() {
	case 2:
		must(t, hcomm.Send(c, []int8{1, 2, 3, 4}, 3, 40))
	case 3:
		small := []int8{0, 0}
		_, err := hcomm.Recv(c, small, 2, 40)
		e := wantStatus(t, err, hcomm.StatusMismatch)
		t.Logf("expected error: %v", e)
	}
	must(t, c.Barrier())
}

var allOps = []hcomm.Op{hcomm.Sum, hcomm.Prod, hcomm.Min, hcomm.Max, hcomm.Avg}

// reduceWant is op over ranks 0..n-1 of x(r).
func reduceWant(op hcomm.Op, n int, x func(r int) float64) float64 {
	acc := x(0)
	for r := 1; r < n; r++ {
		v := x(r)
		switch op {
		case hcomm.Sum, hcomm.Avg:
			acc += v
		case hcomm.Prod:
			acc *= v
		case hcomm.Min:
			if v < acc {
				acc = v
			}
		case hcomm.Max:
			if v > acc {
				acc = v
			}
		}
	}
	if op == hcomm.Avg {
		acc /= float64(n)
	}
	return acc
}

// rankData is element i of rank r's input in the reduction tests.
func rankData(r, i int) float64 { return float64(r+1) * float64(i%3+1) * []float64{1, -1, 0.5}[i%3] }

func testAllReduceOps(t *testing.T, c *hcomm.Comm) {
	for _, op := range allOps {
		buf := make([]float64, 7)
		for i := range buf {
			buf[i] = rankData(c.Rank(), i)
		}
		must(t, hcomm.AllReduce(c, buf, op))
		for i, v := range buf {
			i := i
			if want := reduceWant(op, c.Size(), func(r int) float64 { return rankData(r, i) }); v != want {
				t.Fatalf("AllReduce %v: [%d] = %v, want %v", op, i, v, want)
			}
		}
	}
}

// allReduceSum checks AllReduce Sum for one element type.
func allReduceSum[T hcomm.Number](t *testing.T, c *hcomm.Comm) {
	t.Helper()
	r := c.Rank()
	buf := []T{T(r + 1), 2, T(r * 3)}
	must(t, hcomm.AllReduce(c, buf, hcomm.Sum))
	if buf[0] != 10 || buf[1] != 8 || buf[2] != 18 {
		t.Fatalf("AllReduce Sum %T = %v, want [10 8 18]", buf, buf)
	}
}

func testAllReduceTypes(t *testing.T, c *hcomm.Comm) {
	allReduceSum[int8](t, c)
	allReduceSum[uint8](t, c)
	allReduceSum[int32](t, c)
	allReduceSum[uint32](t, c)
	allReduceSum[int64](t, c)
	allReduceSum[uint64](t, c)
	allReduceSum[float32](t, c)
	allReduceSum[float64](t, c)
}

func testBroadcast(t *testing.T, c *hcomm.Comm) {
	buf := []int64{int64(100 + c.Rank()), int64(c.Rank())}
	must(t, hcomm.Broadcast(c, buf, 2))
	if buf[0] != 102 || buf[1] != 2 {
		t.Fatalf("Broadcast from 2 = %v", buf)
	}
}

func testReduceOps(t *testing.T, c *hcomm.Comm) {
	const root = 1
	for _, op := range allOps {
		buf := make([]float64, 5)
		for i := range buf {
			buf[i] = rankData(c.Rank(), i)
		}
		must(t, hcomm.Reduce(c, buf, op, root))
		for i, v := range buf {
			i := i
			want := rankData(c.Rank(), i) // unchanged on the other ranks
			if c.Rank() == root {
				want = reduceWant(op, c.Size(), func(r int) float64 { return rankData(r, i) })
			}
			if v != want {
				t.Fatalf("Reduce %v to %d: [%d] = %v, want %v", op, root, i, v, want)
			}
		}
	}
}

func testReduceScatterOps(t *testing.T, c *hcomm.Comm) {
	const per = 3
	n := c.Size()
	for _, op := range allOps {
		send := make([]float64, n*per)
		for i := range send {
			send[i] = rankData(c.Rank(), i)
		}
		recv := make([]float64, per)
		must(t, hcomm.ReduceScatter(c, send, recv, op))
		for j, v := range recv {
			i := c.Rank()*per + j
			if want := reduceWant(op, n, func(r int) float64 { return rankData(r, i) }); v != want {
				t.Fatalf("ReduceScatter %v: [%d] = %v, want %v", op, j, v, want)
			}
		}
	}
}

func testAllGather(t *testing.T, c *hcomm.Comm) {
	r, n := c.Rank(), c.Size()
	recv := make([]uint32, 2*n)
	must(t, hcomm.AllGather(c, []uint32{uint32(r), uint32(r * r)}, recv))
	for p := 0; p < n; p++ {
		if recv[2*p] != uint32(p) || recv[2*p+1] != uint32(p*p) {
			t.Fatalf("AllGather = %v", recv)
		}
	}
	// In place: this rank's block already in recv.
	inplace := make([]uint32, 2*n)
	inplace[2*r], inplace[2*r+1] = uint32(r+5), uint32(r+6)
	must(t, hcomm.AllGather(c, inplace[2*r:2*r+2], inplace))
	for p := 0; p < n; p++ {
		if inplace[2*p] != uint32(p+5) || inplace[2*p+1] != uint32(p+6) {
			t.Fatalf("in-place AllGather = %v", inplace)
		}
	}
}

// Rank 1 alone passes a recv of the wrong length: this binding refuses it
// (StatusInvalidArgument), the others' AllGather fails at once with
// StatusMismatch, and the calls after it stay paired (the refusal took its
// turn in the library too).
func testAllGatherRefused(t *testing.T, c *hcomm.Comm) {
	r, n := c.Rank(), c.Size()
	recv := make([]int32, n)
	if r == 1 {
		recv = recv[:n-1]
	}
	err := hcomm.AllGather(c, []int32{int32(r)}, recv)
	if r == 1 {
		wantStatus(t, err, hcomm.StatusInvalidArgument)
	} else if e := wantStatus(t, err, hcomm.StatusMismatch); !strings.Contains(e.Message, "rank 1 rejected its call") {
		t.Fatalf("the others' call failed without naming the refusal: %v", e)
	}
	for k := 0; k < 3; k++ {
		buf := []int32{int32(100*k + r)}
		must(t, hcomm.AllReduce(c, buf, hcomm.Sum))
		if want := int32(100*k*n + n*(n-1)/2); buf[0] != want {
			t.Fatalf("AllReduce %d after the refused call = %d, want %d", k, buf[0], want)
		}
	}
}

// A rank whose Split or NewGroup this binding refuses (a value no C int
// holds) still takes the call's turn: the others' call fails naming it,
// and the collectives after it pair up.
func testGroupsRefused(t *testing.T, c *hcomm.Comm) {
	r, n := c.Rank(), c.Size()
	for _, call := range []string{"Split", "NewGroup"} {
		var g *hcomm.Comm
		var err error
		switch {
		case call == "Split" && r == 1:
			g, err = c.Split(0, 1<<40)
		case call == "Split":
			g, err = c.Split(0, r)
		case r == 1:
			g, err = c.NewGroup([]int{0, 1 << 40})
		default:
			g, err = c.NewGroup([]int{0, 1})
		}
		if g != nil {
			must(t, g.Close())
		}
		if r == 1 {
			wantStatus(t, err, hcomm.StatusInvalidArgument)
		} else if e := wantStatus(t, err, hcomm.StatusMismatch); !strings.Contains(e.Message, "rank 1 rejected its call") {
			t.Fatalf("%s: the others' call failed without naming the refusal: %v", call, e)
		}
		buf := []int32{int32(r)}
		must(t, hcomm.AllReduce(c, buf, hcomm.Sum))
		if want := int32(n * (n - 1) / 2); buf[0] != want {
			t.Fatalf("AllReduce after the refused %s = %d, want %d", call, buf[0], want)
		}
	}
}

func testAllToAll(t *testing.T, c *hcomm.Comm) {
	r, n := c.Rank(), c.Size()
	send := make([]int64, 2*n)
	for j := 0; j < n; j++ {
		send[2*j], send[2*j+1] = int64(r*100+j), int64(-r)
	}
	recv := make([]int64, 2*n)
	must(t, hcomm.AllToAll(c, send, recv))
	for i := 0; i < n; i++ {
		if recv[2*i] != int64(i*100+r) || recv[2*i+1] != int64(-i) {
			t.Fatalf("AllToAll = %v", recv)
		}
	}
}

func testGatherScatter(t *testing.T, c *hcomm.Comm) {
	r, n := c.Rank(), c.Size()
	var all []float32
	if r == 3 {
		all = make([]float32, 2*n)
	}
	must(t, hcomm.Gather(c, []float32{float32(r), 0.25}, all, 3))
	if r == 3 {
		for p := 0; p < n; p++ {
			if all[2*p] != float32(p) || all[2*p+1] != 0.25 {
				t.Fatalf("Gather = %v", all)
			}
		}
	}
	var src []float32
	if r == 0 {
		src = make([]float32, 2*n)
		for i := range src {
			src[i] = float32(i) * 1.5
		}
	}
	part := make([]float32, 2)
	must(t, hcomm.Scatter(c, src, part, 0))
	if part[0] != float32(2*r)*1.5 || part[1] != float32(2*r+1)*1.5 {
		t.Fatalf("Scatter part = %v", part)
	}
}

func testIAllReduce(t *testing.T, c *hcomm.Comm) {
	buf := []float32{float32(c.Rank()), 1}
	q, err := hcomm.IAllReduce(c, buf, hcomm.Sum)
	must(t, err)
	defer q.Free()
	buf[0] = 1e9 // staged in C memory: no effect on the result
	for {
		done, err := q.Test()
		must(t, err)
		if done {
			break
		}
		time.Sleep(time.Millisecond)
	}
	must(t, q.Wait())
	if buf[0] != 6 || buf[1] != 4 {
		t.Fatalf("IAllReduce = %v, want [6 4]", buf)
	}
}

func testNewGroup(t *testing.T, c *hcomm.Comm) {
	r := c.Rank()
	g, err := c.NewGroup([]int{0, 2})
	must(t, err)
	if r%2 == 1 {
		if g != nil {
			t.Fatalf("rank %d is not in [0 2] but got a group", r)
		}
		return
	}
	defer func() { must(t, g.Close()) }()
	if g.Size() != 2 || g.Rank() != r/2 {
		t.Fatalf("group rank, size = %d, %d", g.Rank(), g.Size())
	}
	buf := []int32{int32(r), 1}
	must(t, hcomm.AllReduce(g, buf, hcomm.Sum))
	if buf[0] != 2 || buf[1] != 2 {
		t.Fatalf("group AllReduce = %v", buf)
	}
	// Point-to-point in group ranks.
	peer := 1 - g.Rank()
	q, err := hcomm.Isend(g, []int32{int32(r)}, peer, 5)
	must(t, err)
	defer q.Free()
	in := []int32{-1}
	src, err := hcomm.Recv(g, in, hcomm.AnySource, 5)
	must(t, err)
	must(t, q.Wait())
	if src != peer || in[0] != int32(2-r) {
		t.Fatalf("group recv %v from %d", in, src)
	}
	must(t, g.Barrier())
}

func testSplit(t *testing.T, c *hcomm.Comm) {
	r := c.Rank()
	// Two colors, ordered by descending parent rank.
	s, err := c.Split(r%2, -r)
	must(t, err)
	if s.Size() != 2 || s.Rank() != 1-r/2 {
		t.Fatalf("Split(%d, %d): rank, size = %d, %d", r%2, -r, s.Rank(), s.Size())
	}
	buf := []int64{int64(r)}
	must(t, hcomm.AllReduce(s, buf, hcomm.Max))
	if want := int64(2 + r%2); buf[0] != want {
		t.Fatalf("AllReduce Max in color %d = %d, want %d", r%2, buf[0], want)
	}
	must(t, s.Close())

	// Rank 3 opts out.
	color := 0
	if r == 3 {
		color = hcomm.Undefined
	}
	u, err := c.Split(color, r)
	must(t, err)
	if r == 3 {
		if u != nil {
			t.Fatalf("Split(Undefined) gave a communicator")
		}
		return
	}
	if u.Size() != 3 || u.Rank() != r {
		t.Fatalf("Split without rank 3: rank, size = %d, %d", u.Rank(), u.Size())
	}
	must(t, u.Barrier())
	must(t, u.Close())
}

// testCompression sets every compression kind on every rank, then none: a
// float32 AllReduce stays within the 16-bit format's error of the exact
// sum (over shared memory FP16/BF16 stay off and the sum is exact: either
// passes), and a repeated message (Delta's case) arrives exactly.
func testCompression(t *testing.T, c *hcomm.Comm) {
	r, n := c.Rank(), c.Size()
	value := func(rank, k int) float32 { // positive, no two alike
		return 0.5 + float32((k*7919+rank*104729)%1000)/1000*1.5
	}
	const count = 4099
	exact := make([]float64, count)
	for rank := 0; rank < n; rank++ {
		for k := range exact {
			exact[k] += float64(value(rank, k))
		}
	}
	right, left := (r+1)%n, (r+n-1)%n
	kinds := []hcomm.Compression{
		hcomm.CompressionFP16,
		hcomm.CompressionBF16,
		hcomm.CompressionDelta,
		hcomm.CompressionFP16 | hcomm.CompressionDelta,
		hcomm.CompressionBF16 | hcomm.CompressionDelta,
		hcomm.CompressionNone,
	}
	for _, kind := range kinds {
		must(t, c.SetCompression(kind))
		x := make([]float32, count)
		for k := range x {
			x[k] = value(r, k)
		}
		must(t, hcomm.AllReduce(c, x, hcomm.Sum))
		bound := 1e-3 // FP16 (and none)
		if kind&hcomm.CompressionBF16 != 0 {
			bound = 2e-2
		}
		worst := 0.0
		for k := range x {
			worst = math.Max(worst, math.Abs(float64(x[k])-exact[k])/exact[k])
		}
		if worst > bound {
			t.Fatalf("%v: AllReduce off by %g (relative), bound %g", kind, worst, bound)
		}
		for step := 0; step < 2; step++ { // the same size and tag twice
			out := make([]float64, 1000)
			in := make([]float64, 1000)
			for k := range out {
				out[k] = float64(r*1000 + k)
				if k <= step {
					out[k] += 0.5
				}
			}
			req, err := hcomm.Isend(c, out, right, 30)
			must(t, err)
			_, err = hcomm.Recv(c, in, left, 30)
			must(t, err)
			must(t, req.Wait())
			must(t, req.Free())
			for k := range in {
				want := float64(left*1000 + k)
				if k <= step {
					want += 0.5
				}
				if in[k] != want {
					t.Fatalf("%v: message %d from rank %d at %d: %g, want %g", kind, step, left, k,
						in[k], want)
				}
			}
		}
	}
	wantStatus(t, c.SetCompression(hcomm.CompressionFP16|hcomm.CompressionBF16),
		hcomm.StatusInvalidArgument)
	must(t, c.Barrier())
}

func testTimeout(t *testing.T, c *hcomm.Comm) {
	if c.Rank() == 0 {
		must(t, c.SetTimeout(300*time.Millisecond))
		start := time.Now()
		_, err := hcomm.Recv(c, make([]int32, 1), 1, 999) // never sent
		e := wantStatus(t, err, hcomm.StatusTimeout)
		if !errors.Is(err, hcomm.ErrTimeout) || !e.Timeout() {
			t.Fatalf("errors.Is/Timeout disagree on %v", err)
		}
		if d := time.Since(start); d < 250*time.Millisecond || d > 10*time.Second {
			t.Fatalf("timed out after %v", d)
		}
		t.Logf("expected error: %v", e)
		must(t, c.SetTimeout(20*time.Second))
	}
	must(t, c.Barrier())
}
