package sendq

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gopslite/pslite/van"
)

func TestRoom(t *testing.T) {
	var mu sync.Mutex
	var r Room
	n := 2
	full := func() bool { return n >= 2 }
	mu.Lock()
	if err := r.Check(full); !errors.Is(err, van.ErrWouldBlock) {
		t.Fatalf("Check on a full queue: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := r.Wait(ctx, &mu, full); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past its context: %v", err)
	}
	mu.Unlock()

	// waitThen starts a sender that waits for room, runs f under mu once
	// it waits, and returns the sender's error.
	waitThen := func(f func()) error {
		done := make(chan error)
		go func() {
			mu.Lock()
			defer mu.Unlock()
			done <- r.Wait(context.Background(), &mu, full)
		}()
		for { // until the sender waits
			mu.Lock()
			if r.waiters == 1 {
				f()
				mu.Unlock()
				break
			}
			mu.Unlock()
			runtime.Gosched()
		}
		return <-done
	}
	if err := waitThen(func() {
		n = 1
		r.Freed()
		r.Freed() // again, before the waiter has run
	}); err != nil {
		t.Fatalf("Wait after Freed: %v", err)
	}

	n = 2
	if err := waitThen(r.Close); err != nil {
		t.Fatalf("Wait after Close: %v", err)
	}
	mu.Lock()
	if err := r.Wait(context.Background(), &mu, full); err != nil || !r.closed {
		t.Fatalf("Wait on a closed room: %v", err)
	}
	mu.Unlock()
}

// fakePeer is a Holdable that records what Flush did.
type fakePeer struct {
	held, queued  bool
	drained, woke int
}

func (p *fakePeer) SetHeld(on bool) (bool, bool) {
	was := p.held
	p.held = on
	return was, p.queued
}

func (p *fakePeer) Wake() { p.woke++ }

func TestHeldAndView(t *testing.T) {
	var h Held[*fakePeer]
	idle, busy, full := &fakePeer{}, &fakePeer{queued: true}, &fakePeer{queued: true}
	for _, p := range []*fakePeer{idle, busy, full, busy} {
		h.Hold(p)
	}
	if !idle.held || !busy.held || len(h.list) != 3 {
		t.Fatalf("held %d peers (busy twice)", len(h.list))
	}
	// busy's queue drains on the caller; full's does not, so its writer
	// is woken; idle has nothing queued.
	h.Flush(func(p *fakePeer) bool { p.drained++; return p != full })
	for name, c := range map[string]struct {
		p              *fakePeer
		drained, woken int
	}{"idle": {idle, 0, 0}, "busy": {busy, 1, 0}, "full": {full, 1, 1}} {
		if c.p.held || c.p.drained != c.drained || c.p.woke != c.woken {
			t.Errorf("%s: held %v, drained %d, woken %d; want false, %d, %d", name, c.p.held, c.p.drained, c.p.woke, c.drained, c.woken)
		}
	}
	if len(h.list) != 0 {
		t.Fatal("Flush left peers held")
	}

	a, b := new(int), new(int)
	var v View[*int]
	if _, err := v.Get(1); !errors.Is(err, van.ErrNoPeer) {
		t.Fatalf("empty view: %v", err)
	}
	peers := map[int]*int{1: a}
	v.Publish(peers, false)
	peers[2] = b // the view keeps its own copy
	if p, err := v.Get(1); err != nil || p != a || !v.Current(1, a) || v.Current(1, b) {
		t.Fatalf("Get(1) = %v, %v", p, err)
	}
	if _, err := v.Get(2); !errors.Is(err, van.ErrNoPeer) {
		t.Fatalf("Get(2) after the map changed: %v", err)
	}
	v.Publish(nil, true)
	if _, err := v.Get(1); !errors.Is(err, van.ErrClosed) || !v.Closed() || v.Current(1, a) {
		t.Fatalf("closed view: %v", err)
	}
}
