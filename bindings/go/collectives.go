package hcomm

import (
	"hcomm.local/hcomm/internal/capi"
)

// Collectives: every rank of c calls each one, in the same order, with
// matching lengths, op and root. They block until this rank's part is done
// or the communicator's timeout passes, and pass the Go slices to C
// without copies. Lengths are checked here (a wrong one is
// StatusInvalidArgument, before anything is sent); ranks that disagree get
// StatusMismatch or StatusTimeout from hcomm. Empty slices are valid and
// still synchronise.

// AllReduce replaces buf on every rank with op over all ranks' buf,
// element by element (hcomm_allreduce, in place).
func AllReduce[T Number](c *Comm, buf []T, op Op) error {
	if err := opArg("AllReduce", op); err != nil {
		return c.refuse("AllReduce", err, func(h uintptr) error {
			return capi.Hcomm_allreduce(nil, nil, 0, badDtype, 0, h)
		})
	}
	dt := dtypeOf[T]()
	return c.do("AllReduce", func(h uintptr) error {
		p := ptr(buf)
		return capi.Hcomm_allreduce(p, p, int64(len(buf)), dt, capi.Hcomm_reduce_op_t(op), h)
	})
}

// Broadcast copies root's buf to every rank's buf (hcomm_broadcast).
func Broadcast[T Number](c *Comm, buf []T, root int) error {
	if err := cint("Broadcast", "root", root); err != nil {
		return c.refuse("Broadcast", err, func(h uintptr) error {
			return capi.Hcomm_broadcast(nil, 0, badDtype, 0, h)
		})
	}
	dt := dtypeOf[T]()
	return c.do("Broadcast", func(h uintptr) error {
		return capi.Hcomm_broadcast(ptr(buf), int64(len(buf)), dt, root, h)
	})
}

// Reduce replaces root's buf with op over all ranks' buf (hcomm_reduce, in
// place at the root); the other ranks' buf is left as it was.
func Reduce[T Number](c *Comm, buf []T, op Op, root int) error {
	err := opArg("Reduce", op)
	if err == nil {
		err = cint("Reduce", "root", root)
	}
	if err != nil {
		return c.refuse("Reduce", err, func(h uintptr) error {
			return capi.Hcomm_reduce(nil, nil, 0, badDtype, 0, 0, h)
		})
	}
	dt := dtypeOf[T]()
	return c.do("Reduce", func(h uintptr) error {
		send := ptr(buf)
		recv := send
		if c.rank != root {
			recv = nil // only the root's recvbuf is used
		}
		return capi.Hcomm_reduce(send, recv, int64(len(buf)), dt, capi.Hcomm_reduce_op_t(op), root, h)
	})
}

// AllGather puts every rank's send, in rank order, into recv on every rank
// (hcomm_allgather); len(recv) must be Size*len(send). send may be this
// rank's block of recv (recv[Rank*n:(Rank+1)*n]): that is done in place.
func AllGather[T Number](c *Comm, send, recv []T) error {
	dt := dtypeOf[T]()
	return c.do("AllGather", func(h uintptr) error {
		if len(recv) != c.size*len(send) {
			_ = capi.Hcomm_allgather(nil, nil, 0, badDtype, h) // refused: see badDtype
			return invalid("AllGather on rank %d: recv has %d elements, want Size*len(send) = %d*%d",
				c.rank, len(recv), c.size, len(send))
		}
		sp := ptr(send)
		if len(send) > 0 && sameStart(send, recv[c.rank*len(send):]) {
			sp = ptr(recv) // in place
		}
		return capi.Hcomm_allgather(sp, ptr(recv), int64(len(send)), dt, h)
	})
}

// ReduceScatter reduces send (Size blocks of len(recv) elements) with op
// over all ranks and leaves block Rank of the result in recv
// (hcomm_reduce_scatter); len(send) must be Size*len(recv). recv may be
// send[:len(recv)]: that is done in place.
func ReduceScatter[T Number](c *Comm, send, recv []T, op Op) error {
	if err := opArg("ReduceScatter", op); err != nil {
		return c.refuse("ReduceScatter", err, func(h uintptr) error {
			return capi.Hcomm_reduce_scatter(nil, nil, 0, badDtype, 0, h)
		})
	}
	dt := dtypeOf[T]()
	return c.do("ReduceScatter", func(h uintptr) error {
		if len(send) != c.size*len(recv) {
			_ = capi.Hcomm_reduce_scatter(nil, nil, 0, badDtype, 0, h) // refused: see badDtype
			return invalid("ReduceScatter on rank %d: send has %d elements, want Size*len(recv) = %d*%d",
				c.rank, len(send), c.size, len(recv))
		}
		return capi.Hcomm_reduce_scatter(ptr(send), ptr(recv), int64(len(recv)), dt,
			capi.Hcomm_reduce_op_t(op), h)
	})
}

// AllToAll sends block j of send to rank j and puts the block from rank i
// in block i of recv (hcomm_alltoall); send and recv have the same length,
// a multiple of Size.
func AllToAll[T Number](c *Comm, send, recv []T) error {
	dt := dtypeOf[T]()
	return c.do("AllToAll", func(h uintptr) error {
		if len(send) != len(recv) || len(send)%c.size != 0 {
			_ = capi.Hcomm_alltoall(nil, nil, 0, badDtype, h) // refused: see badDtype
			return invalid("AllToAll on rank %d: send has %d elements and recv %d; want equal lengths, a multiple of Size %d",
				c.rank, len(send), len(recv), c.size)
		}
		return capi.Hcomm_alltoall(ptr(send), ptr(recv), int64(len(send)/c.size), dt, h)
	})
}

// Gather puts every rank's send, in rank order, into root's recv
// (hcomm_gather); at the root len(recv) must be Size*len(send), elsewhere
// recv is not used (nil is fine).
func Gather[T Number](c *Comm, send, recv []T, root int) error {
	if err := cint("Gather", "root", root); err != nil {
		return c.refuse("Gather", err, func(h uintptr) error {
			return capi.Hcomm_gather(nil, nil, 0, badDtype, 0, h)
		})
	}
	dt := dtypeOf[T]()
	return c.do("Gather", func(h uintptr) error {
		sp, rp := ptr(send), ptr(recv)
		if c.rank == root {
			if len(recv) != c.size*len(send) {
				_ = capi.Hcomm_gather(nil, nil, 0, badDtype, 0, h) // refused: see badDtype
				return invalid("Gather on root %d: recv has %d elements, want Size*len(send) = %d*%d",
					c.rank, len(recv), c.size, len(send))
			}
			if len(send) > 0 && sameStart(send, recv[c.rank*len(send):]) {
				sp = rp // in place
			}
		} else {
			rp = nil
		}
		return capi.Hcomm_gather(sp, rp, int64(len(send)), dt, root, h)
	})
}

// Scatter sends block r (len(recv) elements) of root's send to rank r's
// recv (hcomm_scatter); at the root len(send) must be Size*len(recv),
// elsewhere send is not used (nil is fine).
func Scatter[T Number](c *Comm, send, recv []T, root int) error {
	if err := cint("Scatter", "root", root); err != nil {
		return c.refuse("Scatter", err, func(h uintptr) error {
			return capi.Hcomm_scatter(nil, nil, 0, badDtype, 0, h)
		})
	}
	dt := dtypeOf[T]()
	return c.do("Scatter", func(h uintptr) error {
		sp := ptr(send)
		if c.rank == root {
			if len(send) != c.size*len(recv) {
				_ = capi.Hcomm_scatter(nil, nil, 0, badDtype, 0, h) // refused: see badDtype
				return invalid("Scatter on root %d: send has %d elements, want Size*len(recv) = %d*%d",
					c.rank, len(send), c.size, len(recv))
			}
		} else {
			sp = nil
		}
		return capi.Hcomm_scatter(sp, ptr(recv), int64(len(recv)), dt, root, h)
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

func opArg(name string, op Op) error {
	return cint(name, "op", int(op))
}
