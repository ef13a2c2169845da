package hcomm

// Tests that look inside Comm: they wait on the state of c.mu to know that a
// call is running and that Close is waiting for it.

import (
	"errors"
	"testing"
	"time"
)

// waitFor polls cond until it holds; it fails the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAbortWhileCloseWaits(t *testing.T) {
	c, err := Init(map[string]string{"rank": "0", "world_size": "1", "timeout_ms": "10000"})
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	recvDone := make(chan error, 1)
	go func() {
		_, err := Recv(c, make([]int32, 1), 0, 9) // nobody sends
		recvDone <- err
	}()
	waitFor(t, "the Recv to run", func() bool {
		if c.mu.TryLock() {
			c.mu.Unlock()
			return false
		}
		return true
	})
	closeDone := make(chan error, 1)
	go func() { closeDone <- c.Close() }()
	waitFor(t, "Close to wait for the Recv", func() bool {
		if c.mu.TryRLock() {
			c.mu.RUnlock()
			return false
		}
		return true
	})

	// Calls begun now fail at once; Close still waits for the Recv.
	if err := c.Barrier(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Barrier during Close = %v, want StatusInvalidArgument", err)
	}
	if c.Rank() != -1 {
		t.Errorf("Rank during Close = %d, want -1", c.Rank())
	}
	select {
	case err := <-closeDone:
		t.Fatalf("Close returned %v while a Recv was running", err)
	default:
	}

	// Abort must not wait behind Close: it ends the Recv, then Close ends.
	start := time.Now()
	if err := c.Abort(); err != nil {
		t.Fatalf("Abort during Close: %v", err)
	}
	if err := <-recvDone; !errors.Is(err, ErrAborted) {
		t.Errorf("Recv = %v, want StatusAborted", err)
	}
	if err := <-closeDone; err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Abort took %v to end the Recv and the Close", d)
	}
	if err := c.Abort(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Abort after Close = %v, want StatusInvalidArgument", err)
	}
}
