// Package sendq holds what the transports' per-peer send queues share: the
// bound that senders wait on when a peer's queue is full (Room), the peers
// held by van.Batcher's Hold until Flush (Held), and a copy of the peers
// published for sends to read without a lock (View).
package sendq

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/gopslite/pslite/van"
)

// Room lets senders wait for room in a peer's queue. Its methods are
// called with the queue's mutex held; the zero Room is ready.
type Room struct {
	waiters int
	ch      chan struct{} // closed and replaced when room is freed
	closed  bool
}

// Wait returns once full reports false or the room is closed (the caller
// checks which), with mu (held on entry) held again. It waits for Freed
// or Close, or until ctx is done (returning ctx's error).
func (r *Room) Wait(ctx context.Context, mu *sync.Mutex, full func() bool) error {
	for full() && !r.closed {
		if r.ch == nil {
			r.ch = make(chan struct{})
		}
		ch := r.ch
		r.waiters++
		mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
		mu.Lock()
		r.waiters--
		if err != nil {
			return err
		}
	}
	return nil
}

// Check is Wait for a send that must not wait: it returns
// van.ErrWouldBlock when full reports true and the room is open.
func (r *Room) Check(full func() bool) error {
	if full() && !r.closed {
		return van.ErrWouldBlock
	}
	return nil
}

// Waiters returns how many senders wait.
func (r *Room) Waiters() int { return r.waiters }

// Freed wakes the waiting senders: the queue has shrunk.
func (r *Room) Freed() {
	// (ch is nil when it was closed by a Freed whose waiters have not
	// run yet: they are woken already.)
	if r.waiters > 0 && !r.closed && r.ch != nil {
		close(r.ch)
		r.ch = nil
	}
}

// Close wakes every waiting sender, now and from now on.
func (r *Room) Close() {
	if r.closed {
		return
	}
	r.closed = true
	if r.ch != nil {
		close(r.ch)
	}
}

// Holdable is a peer that Hold can hold back (see van.Batcher).
type Holdable interface {
	comparable
	// SetHeld sets whether the peer is held, and reports whether it was
	// and whether anything waits in its queue.
	SetHeld(on bool) (was, queued bool)
	// Wake wakes the peer's writer.
	Wake()
}

// Held is the set of peers held since the last Flush: what is sent to them
// waits in their queues. The zero Held is ready.
type Held[P Holdable] struct {
	mu   sync.Mutex
	list []P
}

// Hold holds p until the next Flush.
func (h *Held[P]) Hold(p P) {
	if was, _ := p.SetHeld(true); was {
		return
	}
	h.mu.Lock()
	h.list = append(h.list, p)
	h.mu.Unlock()
}

// Flush stops holding the held peers and sends what they queued meanwhile:
// drain sends it on the calling goroutine when that needs no waiting (and
// reports whether it did), else the peer's writer is woken to.
func (h *Held[P]) Flush(drain func(P) bool) {
	h.mu.Lock()
	list := h.list
	h.list = nil
	h.mu.Unlock()
	for _, p := range list {
		if _, queued := p.SetHeld(false); queued && !drain(p) {
			p.Wake()
		}
	}
	clear(list)
	if cap(list) <= 16 { // reuse the list
		h.mu.Lock()
		if h.list == nil {
			h.list = list[:0]
		}
		h.mu.Unlock()
	}
}

// View is a published copy of a transport's peers by node id, read
// without a lock; the zero View has no peers and is open.
type View[P comparable] struct {
	v atomic.Pointer[view[P]]
}

type view[P comparable] struct {
	peers  map[int]P
	closed bool
}

// Publish publishes a copy of peers, and whether the transport is closed.
func (v *View[P]) Publish(peers map[int]P, closed bool) {
	v.v.Store(&view[P]{peers: maps.Clone(peers), closed: closed})
}

// Get returns the peer for node id: van.ErrClosed once the transport is
// closed, van.ErrNoPeer (wrapped) for a node not connected.
func (v *View[P]) Get(id int) (P, error) {
	var zero P
	cur := v.v.Load()
	if cur == nil {
		return zero, fmt.Errorf("%w %d", van.ErrNoPeer, id)
	}
	if cur.closed {
		return zero, van.ErrClosed
	}
	p, ok := cur.peers[id]
	if !ok {
		return zero, fmt.Errorf("%w %d", van.ErrNoPeer, id)
	}
	return p, nil
}

// Current reports whether p is the open transport's peer for node id.
func (v *View[P]) Current(id int, p P) bool {
	got, err := v.Get(id)
	return err == nil && got == p
}

// Closed reports whether the transport has been published closed.
func (v *View[P]) Closed() bool {
	cur := v.v.Load()
	return cur != nil && cur.closed
}
