package van

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gopslite/pslite/message"
)

// Send encodes msg and sends it to msg.Meta.Recver, waiting while the
// peer's queue is full (a peer that does not keep up) until there is room,
// the job fails or the van stops. With resending on, the message is kept
// until acknowledged. It returns the bytes sent.
func (v *Van) Send(msg *message.Message) (int, error) {
	n, _, err := v.sendKept(msg)
	return n, err
}

// SendRecycled is Send for a message nothing else refers to: once sent, it
// is recycled (message.Recycle), unless it is kept for resending.
func (v *Van) SendRecycled(msg *message.Message) (int, error) {
	n, kept, err := v.sendKept(msg)
	if !kept {
		msg.Recycle()
	}
	return n, err
}

// sendKept is Send that also reports whether the resender keeps msg.
func (v *Van) sendKept(msg *message.Message) (n int, kept bool, err error) {
	if err := v.Err(); err != nil {
		return 0, false, err
	}
	r := v.res.Load()
	if r != nil {
		r.r.Outgoing(keepable(msg), v.MyNode().ID, v.clock.Now())
		kept = true
	}
	n, err = v.send(v.ctx, msg, true)
	switch {
	case err == nil:
		return n, kept, nil
	case v.ctx.Err() != nil:
		if e := v.Err(); e != nil {
			return 0, kept, e
		}
		return 0, kept, ErrStopped
	case r != nil && errors.Is(err, ErrPeerClosed):
		return 0, kept, nil // replaced meanwhile: the resender sends it to the new node
	}
	return n, kept, err
}

// post sends a control message without waiting (kept for resending like any
// other message).
func (v *Van) post(msg *message.Message) (int, error) {
	if r := v.res.Load(); r != nil {
		ownFrames(msg)
		r.r.Outgoing(msg, v.MyNode().ID, v.clock.Now())
	}
	return v.send(context.Background(), msg, false)
}

// trySend sends msg once if that needs no waiting; the receive loop and the
// resender send this way, so that a slow peer can never stall them (and,
// through them, everyone).
func (v *Van) trySend(msg *message.Message) (int, error) {
	return v.send(context.Background(), msg, false)
}

// resend sends again, without waiting, a message the resender keeps: its
// frames are not copied (the resender never changes them).
func (v *Van) resend(msg *message.Message) (int, error) {
	shared := msg.Detached() // (msg keeps its loan, if any, and so its memory)
	shared.ZeroCopy = true
	return v.send(context.Background(), shared, false)
}

// scratch is what sending a message needs besides the message: the frame
// list and the encoded meta (a data message's meta takes 20 to 60 bytes).
// (The meta is an allocation of its own: memory passed to C must not hold
// Go pointers, as the list does.)
type scratch struct {
	frames [4][]byte
	meta   []byte
}

// sendScratch holds scratches for reuse.
var sendScratch = sync.Pool{New: func() any { return &scratch{meta: make([]byte, 0, 96)} }}

// send sends msg once: with wait, waiting for room until ctx is done;
// without, never waiting.
func (v *Van) send(ctx context.Context, msg *message.Message, wait bool) (int, error) {
	if msg.Meta.Recver == emptyID {
		return 0, errors.New("van: message without a receiver")
	}
	down := false
	if v.ndown.Load() > 0 {
		v.downMu.Lock()
		down = v.down[int(msg.Meta.Recver)]
		v.downMu.Unlock()
	}
	if down {
		return 0, fmt.Errorf("%w: %s", ErrNodeDown, message.DescribeID(int(msg.Meta.Recver)))
	}
	// The transport keeps neither the list nor the meta frame once it
	// returns: both come from a pool.
	s := sendScratch.Get().(*scratch)
	meta, err := message.AppendEncode(s.meta[:0], &msg.Meta)
	if err != nil {
		sendScratch.Put(s)
		return 0, fmt.Errorf("van: encode meta: %w", err)
	}
	frames := append(append(s.frames[:0], meta), msg.Data...)
	var n int
	if wait {
		n, err = v.tr.Send(ctx, int(msg.Meta.Recver), frames, msg.ZeroCopy)
	} else {
		n, err = v.tr.TrySend(int(msg.Meta.Recver), frames, msg.ZeroCopy)
	}
	clear(s.frames[:]) // let the frames go
	sendScratch.Put(s)
	if err != nil {
		return n, err
	}
	v.sendBytes.Add(int64(n))
	v.metrics.Sent(&msg.Meta, n)
	if e := v.log.Trace(); e.Enabled() {
		e.Str("msg", msg.String()).Msg("sent")
	}
	return n, nil
}
