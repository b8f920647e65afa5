package van

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gopslite/pslite/message"
)

// Lender is implemented by transports that can lend large received frames
// instead of copying them into memory of the receiver's own. The van lends
// them on to customers that accept lent messages (a KVServer with
// LendRequests on) and copies them for everyone else, so the copy of a
// large request is saved only where the handler promises not to keep it.
type Lender interface {
	// RecvLent is Recv, except that some frames may be views of the
	// transport's own buffers: bit i of lent is set when frames[i] is one.
	// They stay valid and unchanged until release is called (once); release
	// is nil when nothing was lent.
	RecvLent() (identity []byte, frames [][]byte, lent uint64, release func(), err error)
}

// lentMemory is the memory lent to the handlers of all vans in the process
// and not given back yet, by message: a frame lent to a handler may be
// sent on from there (a server answering with its request's keys). A
// transport that sends such a frame without copying it, and a resender
// that keeps it, hold the message's memory (AcquireLent) until done with
// it; a transport that queues it copies it.
var lentMemory struct {
	n     atomic.Int32 // len(loans): no lock when nothing is lent
	mu    sync.Mutex
	loans []*loan
}

// loan is the lent memory of one message.
type loan struct {
	regions []lentRegion
	holds   int    // the message's, and one per AcquireLent
	release func() // the transport's, once nothing holds it
}

type lentRegion struct{ start, end uintptr }

func region(b []byte) lentRegion {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return lentRegion{p, p + uintptr(len(b))}
}

// lend records the frames of mask as lent and returns the message's
// release: it gives the memory back to the transport once no send holds it.
func lend(frames [][]byte, mask uint64, release func()) func() {
	l := &loan{holds: 1, release: release}
	for i, f := range frames {
		if i < 64 && mask&(1<<i) != 0 && len(f) > 0 {
			l.regions = append(l.regions, region(f))
		}
	}
	lentMemory.mu.Lock()
	lentMemory.loans = append(lentMemory.loans, l)
	lentMemory.n.Store(int32(len(lentMemory.loans)))
	lentMemory.mu.Unlock()
	return l.drop
}

// drop gives up one hold on l.
func (l *loan) drop() {
	lentMemory.mu.Lock()
	l.holds--
	done := l.holds == 0
	if done {
		ls := lentMemory.loans
		for i, x := range ls {
			if x == l {
				ls[i] = ls[len(ls)-1]
				ls[len(ls)-1] = nil
				lentMemory.loans = ls[:len(ls)-1]
				break
			}
		}
		lentMemory.n.Store(int32(len(lentMemory.loans)))
	}
	lentMemory.mu.Unlock()
	if done {
		l.release()
	}
}

// lookup returns the loan b lies in (partly), or nil; lentMemory.mu is held.
func lookup(b []byte) *loan {
	r := region(b)
	for _, l := range lentMemory.loans {
		for _, x := range l.regions {
			if r.start < x.end && x.start < r.end {
				return l
			}
		}
	}
	return nil
}

// IsLent reports whether b lies (partly) in memory lent to a handler.
func IsLent(b []byte) bool {
	if len(b) == 0 || lentMemory.n.Load() == 0 {
		return false
	}
	lentMemory.mu.Lock()
	defer lentMemory.mu.Unlock()
	return lookup(b) != nil
}

// AcquireLent holds the lent memory b lies in, if any, so that it stays
// valid after its handler returns, until release is called; ok is false
// when b is not lent memory. A transport that sends a frame without copying
// it calls it.
func AcquireLent(b []byte) (release func(), ok bool) {
	if len(b) == 0 || lentMemory.n.Load() == 0 {
		return nil, false
	}
	lentMemory.mu.Lock()
	defer lentMemory.mu.Unlock()
	l := lookup(b)
	if l == nil {
		return nil, false
	}
	l.holds++
	return l.drop, true
}

// keepable returns msg, or, when msg is sent without copies (ZeroCopy) and
// some of its frames lie in lent memory (a handler answering with a view of
// its request), a copy of it that holds that memory until the resender
// forgets it (its Forget releases the copy).
func keepable(msg *message.Message) *message.Message {
	if !msg.ZeroCopy || lentMemory.n.Load() == 0 {
		return msg
	}
	if msg.Lent() { // a received message sent on: its loan ends with its handler
		own := *msg
		own.Lend(0, nil)
		ownFrames(&own)
		return &own
	}
	var mask uint64
	var holds []func()
	for i, f := range msg.Data {
		if i >= 64 {
			break
		}
		if release, ok := AcquireLent(f); ok {
			mask |= 1 << i
			holds = append(holds, release)
		}
	}
	if holds == nil {
		return msg
	}
	kept := *msg
	kept.Lend(mask, func() {
		for _, release := range holds {
			release()
		}
	})
	return &kept
}

// ownFrames replaces the data frames of msg that lie in lent memory by
// copies, before msg is kept for resending.
func ownFrames(msg *message.Message) {
	if lentMemory.n.Load() == 0 {
		return
	}
	copied := false
	for i, f := range msg.Data {
		if IsLent(f) {
			if !copied { // the caller's slice of frames stays as it was
				msg.Data = append([][]byte(nil), msg.Data...)
				copied = true
			}
			msg.Data[i] = message.Clone(f)
		}
	}
}

// recv receives the next message, lent when the transport lends: the
// message's lent frames are then recorded, and msg.Release or msg.Own gives
// them back. Without wait (only with a Batcher) it returns ErrRecvTimeout
// at once when no message waits.
func (v *Van) recv(wait bool) (ident []byte, frames [][]byte, mask uint64, release func(), err error) {
	switch {
	case !wait:
		ident, frames, mask, release, err = v.batcher.TryRecvLent()
	case v.lender != nil:
		ident, frames, mask, release, err = v.lender.RecvLent()
	default:
		ident, frames, err = v.tr.Recv()
		return ident, frames, 0, nil, err
	}
	if release != nil {
		release = lend(frames, mask, release)
	}
	return ident, frames, mask, release, err
}
