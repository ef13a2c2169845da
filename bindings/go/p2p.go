package hcomm

import (
	"hcomm.local/hcomm/internal/capi"
)

// Send sends buf to rank dst of c with tag (>= 0) (hcomm_send). It returns
// once the message has been handed to the transport: buf may be reused.
// The slice goes to C without a copy. A send to oneself works (post the
// receive first, or use Isend).
func Send[T Number](c *Comm, buf []T, dst, tag int) error {
	if err := p2pArgs("Send", dst, tag); err != nil {
		return err
	}
	dt := dtypeOf[T]()
	return c.do("Send", func(h uintptr) error {
		return capi.Hcomm_send(ptr(buf), int64(len(buf)), dt, dst, tag, h)
	})
}

// Recv receives a message from rank src (or AnySource) with tag (or
// AnyTag) into buf and returns the rank it came from (hcomm_recv). len(buf)
// is the capacity: a shorter message fills the front of buf (Irecv tells
// the count), a longer one fails with StatusMismatch and writes nothing.
//
// With a given src the slice goes to C without a copy. With AnySource the
// message is received into C memory and copied, because only a request
// can tell the source and a request's buffer must not be Go memory (see
// Irecv).
func Recv[T Number](c *Comm, buf []T, src, tag int) (int, error) {
	if err := p2pArgs("Recv", src, tag); err != nil {
		return -1, err
	}
	if src != AnySource {
		dt := dtypeOf[T]()
		err := c.do("Recv", func(h uintptr) error {
			return capi.Hcomm_recv(ptr(buf), int64(len(buf)), dt, src, tag, h)
		})
		if err != nil {
			return -1, err
		}
		return src, nil
	}
	r, err := Irecv(c, buf, src, tag)
	if err != nil {
		return -1, err
	}
	defer r.Free()
	if err := r.Wait(); err != nil {
		return r.Source(), err
	}
	return r.Source(), nil
}

// Isend starts sending buf to rank dst with tag (hcomm_isend). buf is
// copied into C memory before Isend returns, so it may be reused at once;
// complete the request with Wait or Test, then Free it.
func Isend[T Number](c *Comm, buf []T, dst, tag int) (*Request, error) {
	if err := p2pArgs("Isend", dst, tag); err != nil {
		return nil, err
	}
	r, err := newRequest(c, "Isend", buf, true, false)
	if err != nil {
		return nil, err
	}
	dt := dtypeOf[T]()
	var rh uintptr
	err = c.do("Isend", func(h uintptr) error {
		return capi.Hcomm_isend(r.cbuf, int64(len(buf)), dt, dst, tag, h, &rh)
	})
	return r.started(rh, err)
}

// Irecv starts receiving a message from rank src (or AnySource) with tag
// (or AnyTag) into buf (hcomm_irecv). hcomm receives into C memory; Wait
// or Test copies the message into buf when the request completes, so buf
// must not be touched until then. Free the request afterwards.
func Irecv[T Number](c *Comm, buf []T, src, tag int) (*Request, error) {
	if err := p2pArgs("Irecv", src, tag); err != nil {
		return nil, err
	}
	r, err := newRequest(c, "Irecv", buf, false, true)
	if err != nil {
		return nil, err
	}
	dt := dtypeOf[T]()
	var rh uintptr
	err = c.do("Irecv", func(h uintptr) error {
		return capi.Hcomm_irecv(r.cbuf, int64(len(buf)), dt, src, tag, h, &rh)
	})
	return r.started(rh, err)
}

// p2pArgs checks that peer and tag fit a C int; hcomm checks the rest.
func p2pArgs(op string, peer, tag int) error {
	if err := cint(op, "peer", peer); err != nil {
		return err
	}
	return cint(op, "tag", tag)
}
