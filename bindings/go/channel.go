package hcomm

import (
	"errors"
	"runtime"
	"strconv"
	"sync"
	"time"

	"hcomm.local/hcomm/internal/capi"
)

// Channel is a SharedMemoryChannel (hcomm_channel_t): a named FIFO of
// messages in host shared memory, for processes on one machine that share
// no communicator. Each message is delivered whole to exactly one reader;
// the messages of one writer are read in the order written. Any number of
// goroutines and processes may read and write one channel at once.
type Channel struct {
	mu   sync.RWMutex // shared by Write/Read, exclusive by Close
	h    uintptr      // hcomm_channel_t; 0 once closed
	name string
}

// OpenChannel creates (create true) or opens the channel name (1 to 200
// characters, no '/'; the file /dev/shm/hcomm-ch-NAME). Creating reserves
// size bytes of ring (1 to 2^30; a message of n bytes takes 8 + n rounded
// up to 8) and fails with StatusInvalidArgument if the name exists;
// opening ignores size and fails with StatusNoDevice if no creator has it
// open.
func OpenChannel(name string, size int, create bool) (*Channel, error) {
	if err := cstring("OpenChannel", "name "+strconv.Quote(name), name); err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, invalid("OpenChannel %q: size %d is negative", name, size)
	}
	cr := 0
	if create {
		cr = 1
	}
	var h uintptr
	if err := fromC(capi.Hcomm_channel_open(name, int64(size), cr, &h)); err != nil {
		return nil, err
	}
	ch := &Channel{h: h, name: name}
	runtime.SetFinalizer(ch, func(ch *Channel) { _ = ch.Close() })
	return ch, nil
}

// Name is the channel's name.
func (ch *Channel) Name() string {
	if ch == nil {
		return ""
	}
	return ch.name
}

func (ch *Channel) do(op string, f func(h uintptr) error) error {
	if ch == nil {
		return invalid("Channel.%s: the Channel is nil", op)
	}
	ch.mu.RLock()
	defer ch.mu.RUnlock()
	if ch.h == 0 {
		return invalid("Channel.%s: channel %q is closed", op, ch.name)
	}
	return fromC(f(ch.h))
}

// Write appends data as one message (hcomm_channel_write), waiting up to
// timeout for room (0: try once). A message larger than the capacity less
// 8 bytes fails at once with StatusInvalidArgument; no room in time is
// StatusTimeout. data is copied; it may be empty.
func (ch *Channel) Write(data []byte, timeout time.Duration) error {
	ms := millis(timeout)
	return ch.do("Write", func(h uintptr) error {
		return capi.Hcomm_channel_write(h, ptr(data), int64(len(data)), ms)
	})
}

// ReadInto reads the next message into buf and returns its size
// (hcomm_channel_read), waiting up to timeout for one (0: try once). A
// message larger than buf is StatusMismatch and stays in the channel; n is
// then its size, so a caller can grow buf and read again.
func (ch *Channel) ReadInto(buf []byte, timeout time.Duration) (n int, err error) {
	ms := millis(timeout)
	var nb uint64
	err = ch.do("Read", func(h uintptr) error {
		return capi.Hcomm_channel_read(h, ptr(buf), int64(len(buf)), &nb, ms)
	})
	if err != nil && !errors.Is(err, ErrMismatch) {
		return 0, err
	}
	return int(nb), err
}

// Read reads the next message and returns it in a new slice, waiting up to
// timeout for one (0: try once); StatusTimeout if none came.
func (ch *Channel) Read(timeout time.Duration) ([]byte, error) {
	buf := make([]byte, 4096)
	deadline := time.Now().Add(timeout)
	for {
		n, err := ch.ReadInto(buf, timeout)
		if err == nil {
			if n < len(buf)/2 {
				return append([]byte(nil), buf[:n]...), nil
			}
			return buf[:n], nil
		}
		if !errors.Is(err, ErrMismatch) {
			return nil, err
		}
		// Too big for buf: grow it and read again (another reader may take
		// the message first; then this waits for the next one).
		buf = make([]byte, n)
		if timeout = time.Until(deadline); timeout < 0 {
			timeout = 0
		}
	}
}

// Close releases the handle (hcomm_channel_close); the creator's Close
// also removes the name (handles open elsewhere keep working). The
// Channel is closed even when an error is returned; closing a nil or
// closed Channel does nothing.
func (ch *Channel) Close() error {
	if ch == nil {
		return nil
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.h == 0 {
		return nil
	}
	err := fromC(capi.Hcomm_channel_close(ch.h))
	ch.h = 0
	runtime.SetFinalizer(ch, nil)
	return err
}
