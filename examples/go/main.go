// allreduce: one rank of the Go example (package hcomm only).
//
// Started on every rank by run_allreduce.sh through hcomm_run:
//
//	bazel run //examples/go:allreduce                 # 4 ranks, 1 Mi elements
//	HCOMM_NP=3 bazel run //examples/go:allreduce -- -n 1000
//
// Each rank
//  1. passes a token (an int64 that every rank increments) around the ring
//     twice with hcomm.Send / hcomm.Recv, checking its value at every hop;
//  2. allreduces a []float32 with Sum (element i of rank r is r+1+i%7, so
//     the sum is known) and a []int64 with Max and Sum, and checks them;
//  3. prints what it got and how long the allreduces took.
//
// Exit status 0 when every check passed, 1 otherwise (the error names the
// status and the message of hcomm_last_error()).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"hcomm.local/hcomm"
)

const (
	tagToken = 1
	laps     = 2
)

func main() {
	n := flag.Int("n", 1<<20, "elements per allreduce")
	flag.Parse()
	if err := run(*n); err != nil {
		var e *hcomm.Error
		if errors.As(err, &e) {
			fmt.Fprintf(os.Stderr, "allreduce: failed with %v: %s\n", e.Status, e.Message)
		} else {
			fmt.Fprintf(os.Stderr, "allreduce: %v\n", err)
		}
		os.Exit(1)
	}
}

func run(n int) error {
	c, err := hcomm.Init(nil) // rank, world size and store from hcomm_run
	if err != nil {
		return err
	}
	defer c.Close()
	rank, size := c.Rank(), c.Size()
	if rank == 0 {
		major, minor, patch := hcomm.Version()
		fmt.Printf("hcomm %d.%d.%d, %d ranks, %d elements\n", major, minor, patch, size, n)
	}

	// 1. The token ring.
	right, left := (rank+1)%size, (rank+size-1)%size
	token := []int64{0}
	for lap := 0; lap < laps; lap++ {
		if rank == 0 {
			token[0] = int64(lap * size)
			if err := hcomm.Send(c, token, right, tagToken); err != nil {
				return err
			}
			if _, err := hcomm.Recv(c, token, left, tagToken); err != nil {
				return err
			}
			token[0]++ // rank 0's own increment closes the lap
		} else {
			if _, err := hcomm.Recv(c, token, left, tagToken); err != nil {
				return err
			}
			token[0]++
			if err := hcomm.Send(c, token, right, tagToken); err != nil {
				return err
			}
		}
		// After rank r's increment the token is lap*size + r (rank 0 counts
		// its increment last: lap*size + size).
		want := int64(lap*size + rank)
		if rank == 0 {
			want = int64(lap*size + size)
		}
		if token[0] != want {
			return fmt.Errorf("rank %d: token %d after lap %d, want %d", rank, token[0], lap, want)
		}
	}
	fmt.Printf("token ring: %d laps, token %d ok\n", laps, token[0])

	// 2. AllReduce of []float32 (Sum) and []int64 (Max and Sum).
	f := make([]float32, n)
	for i := range f {
		f[i] = float32(rank + 1 + i%7)
	}
	start := time.Now()
	if err := hcomm.AllReduce(c, f, hcomm.Sum); err != nil {
		return err
	}
	tf := time.Since(start)
	base := float32(size * (size + 1) / 2)
	for i, v := range f {
		if want := base + float32(size*(i%7)); v != want {
			return fmt.Errorf("rank %d: float32 sum [%d] = %v, want %v", rank, i, v, want)
		}
	}

	k := make([]int64, n)
	for i := range k {
		k[i] = int64(rank)*1_000_000_007 + int64(i)
	}
	start = time.Now()
	if err := hcomm.AllReduce(c, k, hcomm.Max); err != nil {
		return err
	}
	sum := []int64{int64(rank) << 40, 1}
	if err := hcomm.AllReduce(c, sum, hcomm.Sum); err != nil {
		return err
	}
	tk := time.Since(start)
	for i, v := range k {
		if want := int64(size-1)*1_000_000_007 + int64(i); v != want {
			return fmt.Errorf("rank %d: int64 max [%d] = %d, want %d", rank, i, v, want)
		}
	}
	if want := int64(size*(size-1)/2) << 40; sum[0] != want || sum[1] != int64(size) {
		return fmt.Errorf("rank %d: int64 sum = %v, want [%d %d]", rank, sum, want, size)
	}

	if n > 0 {
		fmt.Printf("allreduce float32 sum of %d: [0]=%v [%d]=%v ok (%.2f ms); int64 max/sum ok (%.2f ms)\n",
			n, f[0], n-1, f[n-1], ms(tf), ms(tk))
	} else {
		fmt.Printf("allreduce of 0 elements ok\n")
	}
	if err := c.Barrier(); err != nil {
		return err
	}
	return c.Close()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
