package hcomm

import (
	"context"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"hcomm.local/hcomm/internal/capi"
)

// Comm is a communicator (hcomm_comm_t): a group of ranks that exchange
// messages and run collectives. Make one with Init, NewGroup or Split, and
// Close it when done.
//
// Point-to-point calls may be made on one Comm from several goroutines at
// once; collectives must be issued in the same order on every rank, one at
// a time per Comm. A nil or closed Comm is safe to use: every call returns
// an *Error with StatusInvalidArgument.
type Comm struct {
	// mu is held shared by every call that uses h and exclusively by
	// Close, so that Close never frees the handle under a running call
	// (it waits for them instead).
	mu sync.RWMutex
	// amu is held by Abort instead of mu: an RLock would queue behind
	// Close's pending Lock, so Abort could not end the calls that Close
	// waits for. Close takes it too to clear h, so Abort never runs during
	// or after the destroy.
	amu        sync.Mutex
	h          uintptr // hcomm_comm_t; 0 once closed; written under mu and amu
	rank, size int
	open       atomic.Bool // false once Close has begun; readable without mu

	// C buffers of requests freed while still pending: hcomm may write
	// them until the communicator is destroyed, so Close frees them.
	omu     sync.Mutex
	orphans []unsafe.Pointer
	closed  bool // guarded by omu; set by Close after the destroy
}

// Init joins the job and returns its communicator (hcomm_comm_init). cfg
// holds configuration keys (rank, world_size, store_addr, job_token,
// timeout_ms, transports, algo, host_id, plugins; values as strings) that override
// the environment; nil reads everything from the environment (HCOMM_*,
// then torchrun / Open MPI / PMI / Slurm variables, as set by hcomm_run).
//
// Init blocks until every rank has joined or timeout_ms passes; it is
// collective over the job. Errors: StatusInvalidArgument (unknown key, bad
// value, missing rank/world_size/store_addr), StatusUnavailable,
// StatusPermissionDenied, StatusNoDevice.
func Init(cfg map[string]string) (*Comm, error) {
	var ch uintptr
	if cfg != nil {
		for k, v := range cfg {
			if err := cstring("Init", "config key "+strconv.Quote(k), k); err != nil {
				return nil, err
			}
			if err := cstring("Init", "config value of "+strconv.Quote(k), v); err != nil {
				return nil, err
			}
		}
		if err := fromC(capi.Hcomm_config_create(&ch)); err != nil {
			return nil, err
		}
		defer capi.Hcomm_config_destroy(ch)
		keys := make([]string, 0, len(cfg))
		for k := range cfg {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := fromC(capi.Hcomm_config_set(ch, k, cfg[k])); err != nil {
				return nil, err
			}
		}
	}
	var h uintptr
	if err := fromC(capi.Hcomm_comm_init(ch, &h)); err != nil {
		return nil, err
	}
	return wrapComm(h)
}

// wrapComm makes the Comm of a new handle (0: none, for non-members).
func wrapComm(h uintptr) (*Comm, error) {
	if h == 0 {
		return nil, nil
	}
	var r, s int32
	if err := fromC(capi.Hcomm_comm_rank(h, &r)); err != nil {
		capi.Hcomm_comm_destroy(h)
		return nil, err
	}
	if err := fromC(capi.Hcomm_comm_size(h, &s)); err != nil {
		capi.Hcomm_comm_destroy(h)
		return nil, err
	}
	c := &Comm{h: h, rank: int(r), size: int(s)}
	c.open.Store(true)
	// Only a safety net: Close is the way to release a Comm.
	runtime.SetFinalizer(c, func(c *Comm) { _ = c.Close() })
	return c, nil
}

// Rank is this process's rank in c (0 <= Rank < Size); -1 for a nil or
// closed Comm.
func (c *Comm) Rank() int {
	if c == nil || !c.open.Load() {
		return -1
	}
	return c.rank
}

// Size is the number of ranks in c; -1 for a nil or closed Comm.
func (c *Comm) Size() int {
	if c == nil || !c.open.Load() {
		return -1
	}
	return c.size
}

// Close destroys the communicator (hcomm_comm_destroy): it first waits (up
// to timeout_ms) until this rank's sends have been delivered, then fails
// requests still pending with StatusAborted and releases everything. It is
// local, not collective. Calls begun on c after Close has begun return
// StatusInvalidArgument; Close waits for calls already running on c in
// other goroutines to return, and Abort (before or during Close) ends them
// early. The Comm is closed even when an error is returned; closing a nil
// or closed Comm does nothing and returns nil.
func (c *Comm) Close() error {
	if c == nil {
		return nil
	}
	c.open.Store(false)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == 0 {
		return nil
	}
	c.amu.Lock()
	h := c.h
	c.h = 0
	c.amu.Unlock()
	err := fromC(capi.Hcomm_comm_destroy(h))
	runtime.SetFinalizer(c, nil)
	c.omu.Lock()
	c.closed = true
	for _, p := range c.orphans {
		capi.Hcomm_go_free(p)
	}
	c.orphans = nil
	c.omu.Unlock()
	return err
}

// adopt takes a C buffer that hcomm may still write until c is destroyed;
// it is freed now if c is already closed (every request of c has then
// ended), else by Close.
func (c *Comm) adopt(p unsafe.Pointer) {
	if p == nil {
		return
	}
	c.omu.Lock()
	defer c.omu.Unlock()
	if c.closed {
		capi.Hcomm_go_free(p)
		return
	}
	c.orphans = append(c.orphans, p)
}

// do runs f with c's handle, or fails with StatusInvalidArgument if c is
// nil or closed. op names the call in that error.
func (c *Comm) do(op string, f func(h uintptr) error) error {
	if c == nil {
		return invalid("%s: the Comm is nil (a NewGroup/Split result for a non-member?)", op)
	}
	if !c.open.Load() { // Close has begun: do not queue behind it
		return invalid("%s: the Comm is closed", op)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == 0 {
		return invalid("%s: the Comm is closed", op)
	}
	return fromC(f(c.h))
}

// Barrier returns once every rank of c has entered it (hcomm_barrier).
func (c *Comm) Barrier() error {
	return c.do("Barrier", func(h uintptr) error { return capi.Hcomm_barrier(h) })
}

// BarrierContext is Barrier that ctx can end, as the collectives' Context
// variants are (see AllReduceContext): once ctx is done it returns within
// about 100 ms with an error that wraps ctx.Err(). A barrier cannot be
// refused, so with a ctx done already it is still entered, to take its
// turn among the collectives: it then returns nil if every rank arrives
// within about 100 ms, and otherwise the error that wraps ctx.Err().
func (c *Comm) BarrierContext(ctx context.Context) error {
	const op = "BarrierContext"
	if err := checkContext(op, ctx); err != nil {
		return err
	}
	if ctx.Err() == nil {
		return blocking(op, ctx, func(cancel *int32) error {
			return c.do(op, func(h uintptr) error { return capi.Hcomm_go_barrier_cancellable(h, cancel) })
		})
	}
	enableInterrupts.Do(capi.Hcomm_go_enable_interrupts)
	flag := new(int32)
	*flag = flagEnd
	err := c.do(op, func(h uintptr) error { return capi.Hcomm_go_barrier_cancellable(h, flag) })
	if err != nil && atomic.LoadInt32(flag) == flagInterrupted {
		return endedBy(op, ctx, err, "")
	}
	return err
}

// Abort aborts c (hcomm_comm_abort): every pending and later operation on
// it fails with StatusAborted promptly. It may be called from any
// goroutine while others are blocked on c, also while Close waits for
// them. Close c afterwards. Aborting the world fails its groups too;
// aborting a group ends that group alone (its members' calls on it with
// this rank fail with StatusPeerFailure).
func (c *Comm) Abort() error {
	if c == nil {
		return invalid("Abort: the Comm is nil (a NewGroup/Split result for a non-member?)")
	}
	c.amu.Lock()
	defer c.amu.Unlock()
	if c.h == 0 {
		return invalid("Abort: the Comm is closed")
	}
	return fromC(capi.Hcomm_comm_abort(c.h))
}

// Set changes a setting of c (hcomm_comm_set); only "timeout_ms", "algo",
// "fusion_bytes", "compression" (see SetCompression) and
// "delta_cache_bytes" may be changed after Init. It applies to calls started afterwards,
// on this rank (change "algo" at the same point on every rank).
func (c *Comm) Set(key, value string) error {
	if err := cstring("Set", "key "+strconv.Quote(key), key); err != nil {
		return err
	}
	if err := cstring("Set", "value", value); err != nil {
		return err
	}
	return c.do("Set", func(h uintptr) error { return capi.Hcomm_comm_set(h, key, value) })
}

// SetTimeout sets c's timeout_ms: the deadline of every later blocking call
// on this rank (rounded up to a whole millisecond, at least 1).
func (c *Comm) SetTimeout(d time.Duration) error {
	if d <= 0 {
		return invalid("SetTimeout: timeout %v is not positive", d)
	}
	return c.Set("timeout_ms", strconv.Itoa(millis(d)))
}

// SetCompression sets what c compresses in the calls this rank starts
// afterwards (the config key "compression"): CompressionNone,
// CompressionFP16, CompressionBF16, CompressionDelta, or
// CompressionFP16|CompressionDelta / CompressionBF16|CompressionDelta. Call
// it at the same point on every rank (a collective expects the same
// setting on every rank; a receive decodes whatever comes). FP16/BF16 stay
// off over shared memory, where the conversion costs more than it saves,
// so results there are exact. FP16|BF16 or other bits are
// StatusInvalidArgument, and nothing changes.
func (c *Comm) SetCompression(kind Compression) error {
	value, err := kind.configValue("SetCompression")
	if err != nil {
		return err
	}
	return c.do("SetCompression", func(h uintptr) error {
		return capi.Hcomm_comm_set(h, "compression", value)
	})
}

// Transport names the transport that carries messages between this rank
// and peer (hcomm_comm_transport): "shm", "tcp", or "self" for this rank.
func (c *Comm) Transport(peer int) (string, error) {
	if err := cint("Transport", "peer", peer); err != nil {
		return "", err
	}
	var name string
	err := c.do("Transport", func(h uintptr) error {
		return capi.Hcomm_comm_transport(h, peer, &name)
	})
	return name, err
}

// NewGroup makes a communicator of the listed ranks of c
// (hcomm_comm_create_group); new rank = index in ranks. Every rank of c
// must call it with the same list (collective over c). Ranks not listed
// get (nil, nil).
func (c *Comm) NewGroup(ranks []int) (*Comm, error) {
	r32 := make([]int32, len(ranks))
	for i, r := range ranks {
		if err := cint("NewGroup", "rank", r); err != nil {
			var out uintptr
			return nil, c.refuse("NewGroup", err, func(h uintptr) error {
				return capi.Hcomm_comm_create_group(h, []int32{-1}, &out)
			})
		}
		r32[i] = int32(r)
	}
	var out uintptr
	err := c.do("NewGroup", func(h uintptr) error {
		return capi.Hcomm_comm_create_group(h, r32, &out)
	})
	if err != nil {
		return nil, err
	}
	return wrapComm(out)
}

// Split splits c (hcomm_comm_split): ranks passing the same color form a
// new communicator, ordered by (key, rank in c). A rank passing Undefined
// gets (nil, nil). Collective over c.
func (c *Comm) Split(color, key int) (*Comm, error) {
	err := cint("Split", "color", color)
	if err == nil {
		err = cint("Split", "key", key)
	}
	if err != nil {
		var out uintptr
		return nil, c.refuse("Split", err, func(h uintptr) error {
			return capi.Hcomm_comm_split(h, -2, 0, &out) // no color: refused there too
		})
	}
	var out uintptr
	err = c.do("Split", func(h uintptr) error {
		return capi.Hcomm_comm_split(h, color, key, &out)
	})
	if err != nil {
		return nil, err
	}
	return wrapComm(out)
}

// Shrink, after a rank failed (ErrPeerFailure): the surviving ranks of c
// agree on which ranks are gone and get a new communicator of the living
// ones, renumbered in their old order (hcomm_comm_shrink). Collective over
// the survivors; without a failure, a communicator of every rank. c is left
// as it is (its collectives keep failing): close it when done. A survivor
// that does not call it within the timeout makes the others' call fail
// with ErrTimeout naming it.
func (c *Comm) Shrink() (*Comm, error) {
	var out uintptr
	err := c.do("Shrink", func(h uintptr) error {
		return capi.Hcomm_comm_shrink(h, &out)
	})
	if err != nil {
		return nil, err
	}
	return wrapComm(out)
}
