package hcomm

import (
	"context"

	"hcomm.local/hcomm/internal/capi"
)

// Send sends buf to rank dst of c with tag (>= 0) (hcomm_send). It returns
// once the message has been handed to the transport: buf may be reused.
// The slice goes to C without a copy. A send to oneself works (post the
// receive first, or use Isend).
func Send[T Number](c *Comm, buf []T, dst, tag int) error {
	return send(context.Background(), "Send", c, buf, dst, tag)
}

// SendContext is Send that ctx can end: once ctx is done the call returns
// within about 100 ms with an error that wraps ctx.Err() (errors.Is(err,
// context.Canceled) or context.DeadlineExceeded), whatever the
// communicator's timeout_ms; the send ends as at its timeout. A ctx done
// already returns at once and sends nothing. A send that completed returns
// nil even if ctx ended meanwhile.
func SendContext[T Number](ctx context.Context, c *Comm, buf []T, dst, tag int) error {
	const op = "SendContext"
	if err := checkContext(op, ctx); err != nil {
		return err
	}
	return send(ctx, op, c, buf, dst, tag)
}

func send[T Number](ctx context.Context, op string, c *Comm, buf []T, dst, tag int) error {
	if err := p2pArgs(op, dst, tag); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return endedBy(op, ctx, nil, "nothing was sent")
	}
	dt := dtypeOf[T]()
	return blocking(op, ctx, func(cancel *int32) error {
		return c.do(op, func(h uintptr) error {
			return capi.Hcomm_go_send_cancellable(ptr(buf), int64(len(buf)), dt, dst, tag, h, cancel)
		})
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
	return recv(context.Background(), "Recv", c, buf, src, tag)
}

// RecvContext is Recv that ctx can end: once ctx is done the call returns
// within about 100 ms with an error that wraps ctx.Err(), whatever the
// communicator's timeout_ms. The receive is then withdrawn: a message sent
// later goes to a later receive, and buf is not written after the call
// returns. A ctx done already returns at once and receives nothing. A
// receive that completed returns its source and result even if ctx ended
// meanwhile.
func RecvContext[T Number](ctx context.Context, c *Comm, buf []T, src, tag int) (int, error) {
	const op = "RecvContext"
	if err := checkContext(op, ctx); err != nil {
		return -1, err
	}
	return recv(ctx, op, c, buf, src, tag)
}

func recv[T Number](ctx context.Context, op string, c *Comm, buf []T, src, tag int) (int, error) {
	if err := p2pArgs(op, src, tag); err != nil {
		return -1, err
	}
	if err := ctx.Err(); err != nil {
		return -1, endedBy(op, ctx, nil, "nothing was received")
	}
	if src != AnySource {
		dt := dtypeOf[T]()
		err := blocking(op, ctx, func(cancel *int32) error {
			return c.do(op, func(h uintptr) error {
				return capi.Hcomm_go_recv_cancellable(ptr(buf), int64(len(buf)), dt, src, tag, h, cancel)
			})
		})
		if err != nil {
			return -1, err
		}
		return src, nil
	}
	r, err := irecv(op, c, buf, src, tag)
	if err != nil {
		return -1, err
	}
	err = r.waitContext(op, ctx)
	// Freeing a receive still pending withdraws it; one that completed in
	// the meantime is finished (its message copied into buf) by the Free.
	r.Free()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.done {
		return -1, err
	}
	return r.source, r.err
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
	return irecv("Irecv", c, buf, src, tag)
}

func irecv[T Number](op string, c *Comm, buf []T, src, tag int) (*Request, error) {
	if err := p2pArgs(op, src, tag); err != nil {
		return nil, err
	}
	r, err := newRequest(c, "Irecv", buf, false, true)
	if err != nil {
		return nil, err
	}
	dt := dtypeOf[T]()
	var rh uintptr
	err = c.do(op, func(h uintptr) error {
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
