package hcomm

import (
	"context"

	"hcomm.local/hcomm/internal/capi"
)

// Collectives: every rank of c calls each one, in the same order, with
// matching lengths, op and root. They block until this rank's part is done
// or the communicator's timeout passes, and pass the Go slices to C
// without copies. Lengths are checked here (a wrong one is
// StatusInvalidArgument, before anything is sent); ranks that disagree get
// StatusMismatch or StatusTimeout from hcomm. Empty slices are valid and
// still synchronise.

// Each collective has a Context variant (AllReduceContext, ...;
// Comm.BarrierContext) that a context.Context can end: see
// AllReduceContext.

// AllReduce replaces buf on every rank with op over all ranks' buf,
// element by element (hcomm_allreduce, in place).
func AllReduce[T Number](c *Comm, buf []T, op Op) error {
	return allReduce(context.Background(), "AllReduce", c, buf, op)
}

// AllReduceContext is AllReduce that ctx can end, as every collective's
// Context variant is. Once ctx is done, the call returns within about 100
// ms with an error that wraps ctx.Err() (errors.Is(err, context.Canceled)
// or context.DeadlineExceeded), whatever the communicator's timeout_ms:
// the collective fails on this rank as at its timeout, its turn among the
// collectives used up, and the other ranks' part of it fails as the
// library fails a collective that a rank left (at their timeout at the
// latest). With a ctx done before the call, the collective is not run, but
// its turn is taken as for a refused call (the other ranks' call fails at
// once with StatusMismatch naming this rank), so later calls stay paired.
// A collective that completed returns nil even if ctx ended meanwhile. A
// nil ctx is StatusInvalidArgument (the call is refused, its turn taken).
func AllReduceContext[T Number](ctx context.Context, c *Comm, buf []T, op Op) error {
	return allReduce(ctx, "AllReduceContext", c, buf, op)
}

func allReduce[T Number](ctx context.Context, name string, c *Comm, buf []T, op Op) error {
	refused := func(h uintptr) error {
		return capi.Hcomm_allreduce(nil, nil, 0, badDtype, 0, h)
	}
	err := checkContext(name, ctx)
	if err == nil {
		err = opArg(name, op)
	}
	if err != nil {
		return c.refuse(name, err, refused)
	}
	dt := dtypeOf[T]()
	return c.collective(ctx, name, refused, func(h uintptr, cancel *int32) error {
		p := ptr(buf)
		return capi.Hcomm_go_allreduce_cancellable(p, p, int64(len(buf)), dt, capi.Hcomm_reduce_op_t(op),
			h, cancel)
	})
}

// Broadcast copies root's buf to every rank's buf (hcomm_broadcast).
func Broadcast[T Number](c *Comm, buf []T, root int) error {
	return broadcast(context.Background(), "Broadcast", c, buf, root)
}

// BroadcastContext is Broadcast that ctx can end (see AllReduceContext).
func BroadcastContext[T Number](ctx context.Context, c *Comm, buf []T, root int) error {
	return broadcast(ctx, "BroadcastContext", c, buf, root)
}

func broadcast[T Number](ctx context.Context, name string, c *Comm, buf []T, root int) error {
	refused := func(h uintptr) error {
		return capi.Hcomm_broadcast(nil, 0, badDtype, 0, h)
	}
	err := checkContext(name, ctx)
	if err == nil {
		err = cint(name, "root", root)
	}
	if err != nil {
		return c.refuse(name, err, refused)
	}
	dt := dtypeOf[T]()
	return c.collective(ctx, name, refused, func(h uintptr, cancel *int32) error {
		return capi.Hcomm_go_broadcast_cancellable(ptr(buf), int64(len(buf)), dt, root, h, cancel)
	})
}

// Reduce replaces root's buf with op over all ranks' buf (hcomm_reduce, in
// place at the root); the other ranks' buf is left as it was.
func Reduce[T Number](c *Comm, buf []T, op Op, root int) error {
	return reduce(context.Background(), "Reduce", c, buf, op, root)
}

// ReduceContext is Reduce that ctx can end (see AllReduceContext).
func ReduceContext[T Number](ctx context.Context, c *Comm, buf []T, op Op, root int) error {
	return reduce(ctx, "ReduceContext", c, buf, op, root)
}

func reduce[T Number](ctx context.Context, name string, c *Comm, buf []T, op Op, root int) error {
	refused := func(h uintptr) error {
		return capi.Hcomm_reduce(nil, nil, 0, badDtype, 0, 0, h)
	}
	err := checkContext(name, ctx)
	if err == nil {
		err = opArg(name, op)
	}
	if err == nil {
		err = cint(name, "root", root)
	}
	if err != nil {
		return c.refuse(name, err, refused)
	}
	dt := dtypeOf[T]()
	return c.collective(ctx, name, refused, func(h uintptr, cancel *int32) error {
		send := ptr(buf)
		recv := send
		if c.rank != root {
			recv = nil // only the root's recvbuf is used
		}
		return capi.Hcomm_go_reduce_cancellable(send, recv, int64(len(buf)), dt, capi.Hcomm_reduce_op_t(op),
			root, h, cancel)
	})
}

// AllGather puts every rank's send, in rank order, into recv on every rank
// (hcomm_allgather); len(recv) must be Size*len(send). send may be this
// rank's block of recv (recv[Rank*n:(Rank+1)*n]): that is done in place.
func AllGather[T Number](c *Comm, send, recv []T) error {
	return allGather(context.Background(), "AllGather", c, send, recv)
}

// AllGatherContext is AllGather that ctx can end (see AllReduceContext).
func AllGatherContext[T Number](ctx context.Context, c *Comm, send, recv []T) error {
	return allGather(ctx, "AllGatherContext", c, send, recv)
}

func allGather[T Number](ctx context.Context, name string, c *Comm, send, recv []T) error {
	refused := func(h uintptr) error {
		return capi.Hcomm_allgather(nil, nil, 0, badDtype, h)
	}
	if err := checkContext(name, ctx); err != nil {
		return c.refuse(name, err, refused)
	}
	dt := dtypeOf[T]()
	return c.collective(ctx, name, refused, func(h uintptr, cancel *int32) error {
		if len(recv) != c.size*len(send) {
			_ = refused(h) // see badDtype
			return invalid("%s on rank %d: recv has %d elements, want Size*len(send) = %d*%d",
				name, c.rank, len(recv), c.size, len(send))
		}
		sp := ptr(send)
		if len(send) > 0 && sameStart(send, recv[c.rank*len(send):]) {
			sp = ptr(recv) // in place
		}
		return capi.Hcomm_go_allgather_cancellable(sp, ptr(recv), int64(len(send)), dt, h, cancel)
	})
}

// ReduceScatter reduces send (Size blocks of len(recv) elements) with op
// over all ranks and leaves block Rank of the result in recv
// (hcomm_reduce_scatter); len(send) must be Size*len(recv). recv may be
// send[:len(recv)]: that is done in place.
func ReduceScatter[T Number](c *Comm, send, recv []T, op Op) error {
	return reduceScatter(context.Background(), "ReduceScatter", c, send, recv, op)
}

// ReduceScatterContext is ReduceScatter that ctx can end (see
// AllReduceContext).
func ReduceScatterContext[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	return reduceScatter(ctx, "ReduceScatterContext", c, send, recv, op)
}

func reduceScatter[T Number](ctx context.Context, name string, c *Comm, send, recv []T, op Op) error {
	refused := func(h uintptr) error {
		return capi.Hcomm_reduce_scatter(nil, nil, 0, badDtype, 0, h)
	}
	err := checkContext(name, ctx)
	if err == nil {
		err = opArg(name, op)
	}
	if err != nil {
		return c.refuse(name, err, refused)
	}
	dt := dtypeOf[T]()
	return c.collective(ctx, name, refused, func(h uintptr, cancel *int32) error {
		if len(send) != c.size*len(recv) {
			_ = refused(h) // see badDtype
			return invalid("%s on rank %d: send has %d elements, want Size*len(recv) = %d*%d",
				name, c.rank, len(send), c.size, len(recv))
		}
		return capi.Hcomm_go_reduce_scatter_cancellable(ptr(send), ptr(recv), int64(len(recv)), dt,
			capi.Hcomm_reduce_op_t(op), h, cancel)
	})
}

// AllToAll sends block j of send to rank j and puts the block from rank i
// in block i of recv (hcomm_alltoall); send and recv have the same length,
// a multiple of Size.
func AllToAll[T Number](c *Comm, send, recv []T) error {
	return allToAll(context.Background(), "AllToAll", c, send, recv)
}

// AllToAllContext is AllToAll that ctx can end (see AllReduceContext).
func AllToAllContext[T Number](ctx context.Context, c *Comm, send, recv []T) error {
	return allToAll(ctx, "AllToAllContext", c, send, recv)
}

func allToAll[T Number](ctx context.Context, name string, c *Comm, send, recv []T) error {
	refused := func(h uintptr) error {
		return capi.Hcomm_alltoall(nil, nil, 0, badDtype, h)
	}
	if err := checkContext(name, ctx); err != nil {
		return c.refuse(name, err, refused)
	}
	dt := dtypeOf[T]()
	return c.collective(ctx, name, refused, func(h uintptr, cancel *int32) error {
		if len(send) != len(recv) || len(send)%c.size != 0 {
			_ = refused(h) // see badDtype
			return invalid("%s on rank %d: send has %d elements and recv %d; want equal lengths, a multiple of Size %d",
				name, c.rank, len(send), len(recv), c.size)
		}
		return capi.Hcomm_go_alltoall_cancellable(ptr(send), ptr(recv), int64(len(send)/c.size), dt, h, cancel)
	})
}

// Gather puts every rank's send, in rank order, into root's recv
// (hcomm_gather); at the root len(recv) must be Size*len(send), elsewhere
// recv is not used (nil is fine).
func Gather[T Number](c *Comm, send, recv []T, root int) error {
	return gather(context.Background(), "Gather", c, send, recv, root)
}

// GatherContext is Gather that ctx can end (see AllReduceContext).
func GatherContext[T Number](ctx context.Context, c *Comm, send, recv []T, root int) error {
	return gather(ctx, "GatherContext", c, send, recv, root)
}

func gather[T Number](ctx context.Context, name string, c *Comm, send, recv []T, root int) error {
	refused := func(h uintptr) error {
		return capi.Hcomm_gather(nil, nil, 0, badDtype, 0, h)
	}
	err := checkContext(name, ctx)
	if err == nil {
		err = cint(name, "root", root)
	}
	if err != nil {
		return c.refuse(name, err, refused)
	}
	dt := dtypeOf[T]()
	return c.collective(ctx, name, refused, func(h uintptr, cancel *int32) error {
		sp, rp := ptr(send), ptr(recv)
		if c.rank == root {
			if len(recv) != c.size*len(send) {
				_ = refused(h) // see badDtype
				return invalid("%s on root %d: recv has %d elements, want Size*len(send) = %d*%d",
					name, c.rank, len(recv), c.size, len(send))
			}
			if len(send) > 0 && sameStart(send, recv[c.rank*len(send):]) {
				sp = rp // in place
			}
		} else {
			rp = nil
		}
		return capi.Hcomm_go_gather_cancellable(sp, rp, int64(len(send)), dt, root, h, cancel)
	})
}

// Scatter sends block r (len(recv) elements) of root's send to rank r's
// recv (hcomm_scatter); at the root len(send) must be Size*len(recv),
// elsewhere send is not used (nil is fine).
func Scatter[T Number](c *Comm, send, recv []T, root int) error {
	return scatter(context.Background(), "Scatter", c, send, recv, root)
}

// ScatterContext is Scatter that ctx can end (see AllReduceContext).
func ScatterContext[T Number](ctx context.Context, c *Comm, send, recv []T, root int) error {
	return scatter(ctx, "ScatterContext", c, send, recv, root)
}

func scatter[T Number](ctx context.Context, name string, c *Comm, send, recv []T, root int) error {
	refused := func(h uintptr) error {
		return capi.Hcomm_scatter(nil, nil, 0, badDtype, 0, h)
	}
	err := checkContext(name, ctx)
	if err == nil {
		err = cint(name, "root", root)
	}
	if err != nil {
		return c.refuse(name, err, refused)
	}
	dt := dtypeOf[T]()
	return c.collective(ctx, name, refused, func(h uintptr, cancel *int32) error {
		sp := ptr(send)
		if c.rank == root {
			if len(send) != c.size*len(recv) {
				_ = refused(h) // see badDtype
				return invalid("%s on root %d: send has %d elements, want Size*len(recv) = %d*%d",
					name, c.rank, len(send), c.size, len(recv))
			}
		} else {
			sp = nil
		}
		return capi.Hcomm_go_scatter_cancellable(sp, ptr(recv), int64(len(recv)), dt, root, h, cancel)
	})
}

// IAllReduce starts an AllReduce of buf that runs in the background
// (hcomm_iallreduce); its place in the order of collectives is this call.
// Like Irecv, it works on a C copy of buf: the result is copied into buf
// when Wait or Test sees the request complete, so leave buf alone until
// then. Free the request afterwards.
func IAllReduce[T Number](c *Comm, buf []T, op Op) (*Request, error) {
	err := opArg("IAllReduce", op)
	var r *Request
	if err == nil {
		r, err = newRequest(c, "IAllReduce", buf, true, true) // its C copy may fail
	}
	if err != nil {
		return nil, c.refuse("IAllReduce", err, func(h uintptr) error {
			return capi.Hcomm_allreduce(nil, nil, 0, badDtype, 0, h)
		})
	}
	r.whole = true
	dt := dtypeOf[T]()
	var rh uintptr
	err = c.do("IAllReduce", func(h uintptr) error {
		return capi.Hcomm_iallreduce(r.cbuf, r.cbuf, int64(len(buf)), dt, capi.Hcomm_reduce_op_t(op), h, &rh)
	})
	return r.started(rh, err)
}

// badDtype is no hcomm_dtype_t. A collective that this binding refuses by
// its own checks never reached the library, while the other ranks' calls
// of it did: so that it still takes its turn among the communicator's
// collectives there (their call then fails at once with StatusMismatch
// naming this rank, and later calls stay paired), the library is handed
// the same collective with this dtype, which it refuses in turn (hcomm.h).
const badDtype = capi.Hcomm_dtype_t(-1)

// refuse hands the library collective `call` (see badDtype) and returns err.
func (c *Comm) refuse(name string, err error, call func(h uintptr) error) error {
	_ = c.do(name, call)
	return err
}

// collective makes a blocking collective on c under ctx (see blocking).
// If ctx is done already, it is not made: refused hands the library the
// same collective with an argument it refuses instead, so that this rank's
// turn is taken all the same (see badDtype).
func (c *Comm) collective(ctx context.Context, name string, refused func(h uintptr) error,
	call func(h uintptr, cancel *int32) error) error {
	if ctx.Err() != nil {
		if err := c.do(name, func(h uintptr) error {
			_ = refused(h)
			return nil
		}); err != nil {
			return err // a nil or closed Comm
		}
		return endedBy(name, ctx, nil, "the collective was not run; its turn was taken")
	}
	return blocking(name, ctx, func(cancel *int32) error {
		return c.do(name, func(h uintptr) error { return call(h, cancel) })
	})
}

func opArg(name string, op Op) error {
	return cint(name, "op", int(op))
}
