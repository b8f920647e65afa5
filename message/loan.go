package message

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// Loan is memory a transport lends with a received message: the buffers
// behind some of its large frames, which the transport takes back (to reuse,
// poison or free) once nobody reads them any more.
//
// A loan is the one owner of that memory's return:
//   - it keeps a list of the buffers of its own, made when it is created, so
//     nothing done to a message's frames afterwards (Message.Own replacing
//     them by copies, a decoder slicing them) changes what is given back;
//   - it counts holds: the message's, and one per send or resend that still
//     reads the memory (HoldLent); the transport gets the buffers back
//     exactly once, when the last hold is dropped;
//   - while it is held, it is found by address (IsLent, HoldLent), so that a
//     view of lent memory sent on (a server answering with its request's
//     keys) keeps the memory until it is written, wherever it goes.
//
// See docs/MEMORY.md for how loans fit the rest of message memory.
type Loan struct {
	bufs     [][]byte // the loan's own list of the lent buffers
	mask     uint64   // the frames lent, as NewLoan was told
	holds    atomic.Int32
	giveBack func(bufs [][]byte)
}

// NewLoan returns a loan of the frames of mask (bit i for frames[i], of the
// first 64) with one hold, the caller's. giveBack receives the loan's own
// list of those frames, once, when the last hold is dropped; it must not
// keep the list. NewLoan returns nil when mask names no frame.
func NewLoan(frames [][]byte, mask uint64, giveBack func(bufs [][]byte)) *Loan {
	l := &Loan{mask: mask, giveBack: giveBack}
	for i, f := range frames {
		if i < 64 && mask&(1<<i) != 0 {
			l.bufs = append(l.bufs, f)
		}
	}
	if len(l.bufs) == 0 {
		return nil
	}
	l.holds.Store(1)
	loans.add(l)
	return l
}

// Mask returns the frames the loan was made of: bit i for frames[i] of
// NewLoan's list.
func (l *Loan) Mask() uint64 { return l.mask }

// Hold adds a hold on the loan, so that its memory stays valid until the
// matching Drop; it reports false, and adds nothing, when the memory has
// been given back already.
func (l *Loan) Hold() bool {
	for {
		h := l.holds.Load()
		if h <= 0 {
			return false
		}
		if l.holds.CompareAndSwap(h, h+1) {
			return true
		}
	}
}

// Drop gives up one hold; the last gives the memory back to the transport.
// A drop without a hold changes nothing and is counted (see LoanMisuses).
func (l *Loan) Drop() {
	for {
		h := l.holds.Load()
		if h <= 0 {
			loanMisuses.Add(1)
			return
		}
		if l.holds.CompareAndSwap(h, h-1) {
			if h == 1 {
				l.giveBackNow()
			}
			return
		}
	}
}

func (l *Loan) giveBackNow() {
	loans.remove(l)
	bufs := l.bufs
	l.bufs = nil
	l.giveBack(bufs)
}

// Returned reports whether the memory has been given back.
func (l *Loan) Returned() bool { return l.holds.Load() <= 0 }

// covers reports whether b lies, at least partly, in the loan's memory.
func (l *Loan) covers(b []byte) bool {
	s, e := span(b)
	for _, f := range l.bufs {
		fs, fe := span(f)
		if s < fe && fs < e {
			return true
		}
	}
	return false
}

func span(b []byte) (start, end uintptr) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p, p + uintptr(len(b))
}

// loanMisuses counts drops of loans that were not held.
var loanMisuses atomic.Int64

// LoanMisuses returns how many times a loan was dropped without a hold in
// this process: a bug, which tests check for.
func LoanMisuses() int64 { return loanMisuses.Load() }

// loans is every loan of the process not given back yet, to find lent
// memory by address.
var loans loanIndex

type loanIndex struct {
	n    atomic.Int32 // len(live): no lock when nothing is lent
	mu   sync.Mutex
	live []*Loan
}

func (x *loanIndex) add(l *Loan) {
	x.mu.Lock()
	x.live = append(x.live, l)
	x.n.Store(int32(len(x.live)))
	x.mu.Unlock()
}

func (x *loanIndex) remove(l *Loan) {
	x.mu.Lock()
	for i, y := range x.live {
		if y == l {
			last := len(x.live) - 1
			x.live[i] = x.live[last]
			x.live[last] = nil
			x.live = x.live[:last]
			break
		}
	}
	x.n.Store(int32(len(x.live)))
	x.mu.Unlock()
}

// find returns the live loan b lies in, or nil; x.mu is held.
func (x *loanIndex) find(b []byte) *Loan {
	for _, l := range x.live {
		if l.covers(b) {
			return l
		}
	}
	return nil
}

// IsLent reports whether b lies, at least partly, in lent memory not given
// back yet.
func IsLent(b []byte) bool {
	if len(b) == 0 || loans.n.Load() == 0 {
		return false
	}
	loans.mu.Lock()
	defer loans.mu.Unlock()
	return loans.find(b) != nil
}

// HoldLent holds the loan b lies in, if any, so that b stays valid after
// the loan's message is released, until drop is called (once); ok is false
// when b is not lent memory. A transport that sends b without copying it,
// or a resender that keeps it, calls it.
func HoldLent(b []byte) (drop func(), ok bool) {
	if len(b) == 0 || loans.n.Load() == 0 {
		return nil, false
	}
	loans.mu.Lock()
	l := loans.find(b)
	ok = l != nil && l.Hold()
	loans.mu.Unlock()
	if !ok {
		return nil, false
	}
	return l.Drop, true
}

// LiveLoans returns how many loans of the process have not been given
// back, for tests.
func LiveLoans() int { return int(loans.n.Load()) }
