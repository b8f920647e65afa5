package van

import (
	"github.com/gopslite/pslite/message"
)

// Lender is implemented by transports that can lend large received frames
// instead of copying them into memory of the receiver's own. The van lends
// them on to customers that accept lent messages (a KVServer with
// LendRequests on, and every KVWorker for its pull answers) and copies them
// for everyone else, so the copy of a
// large request is saved only where the handler promises not to keep it.
type Lender interface {
	// RecvLent is Recv, except that some frames may be views of the
	// transport's own buffers, lent: loan (nil when nothing is) says which
	// (bit i of its Mask for frames[i]) and holds them for the caller, who
	// drops its hold once done. The buffers stay valid and unchanged until
	// the last hold is dropped; the transport gets them back from the
	// loan's own list, so the caller may do what it likes with frames.
	RecvLent() (identity []byte, frames [][]byte, loan *message.Loan, err error)
}

// keepable returns msg, or, when msg is sent without copies (ZeroCopy) and
// some of its frames lie in lent memory (a handler answering with a view of
// its request), a copy of it that holds that memory until the resender
// forgets it (its Forget releases the copy).
func keepable(msg *message.Message) *message.Message {
	if !msg.ZeroCopy || message.LiveLoans() == 0 {
		return msg
	}
	if msg.Lent() { // a received message sent on: its loan ends with its handler
		own := msg.Detached()
		ownFrames(own)
		return own
	}
	var mask uint64
	var drops []func()
	for i, f := range msg.Data {
		if i >= 64 {
			break
		}
		if drop, ok := message.HoldLent(f); ok {
			mask |= 1 << i
			drops = append(drops, drop)
		}
	}
	if drops == nil {
		return msg
	}
	kept := msg.Detached()
	// One loan over the memory held: giving it back drops the holds.
	kept.Lend(mask, message.NewLoan(kept.Data, mask, func([][]byte) {
		for _, drop := range drops {
			drop()
		}
	}))
	return kept
}

// ownFrames replaces the data frames of msg that lie in lent memory by
// copies, before msg is kept for resending.
func ownFrames(msg *message.Message) {
	if message.LiveLoans() == 0 {
		return
	}
	copied := false
	for i, f := range msg.Data {
		if message.IsLent(f) {
			if !copied { // the caller's list of frames stays as it was
				msg.SetFrames(msg.Data)
				copied = true
			}
			msg.Data[i] = message.Clone(f)
		}
	}
}

// recv receives the next message, lent when the transport lends: loan
// then holds the lent frames (bit i+1 of its mask for the data frame i; bit
// 0 is the meta) for the message that decode makes, whose Release or Own
// drops the hold. Without wait (only with a Batcher) it returns
// ErrRecvTimeout at once when no message waits.
func (v *Van) recv(wait bool) (ident []byte, frames [][]byte, loan *message.Loan, err error) {
	switch {
	case !wait:
		return v.batcher.TryRecvLent()
	case v.lender != nil:
		return v.lender.RecvLent()
	default:
		ident, frames, err = v.tr.Recv()
		return ident, frames, nil, err
	}
}
