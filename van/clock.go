package van

import (
	"slices"
	"sync"
	"time"
)

// Clock tells the van the time and runs its timers: the control protocol's
// ticks (heartbeats, failure detection) and the resender's. SystemClock is
// the real one; FakeClock moves only when a test advances it, so that
// timeouts are tested without waiting for them.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc runs f once d has passed and returns a function that stops
	// the timer (it reports whether it stopped f from running).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// SystemClock returns the clock of the system.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// FakeClock is a Clock that moves only when Advance is called. Timers run
// in the goroutine that calls Advance, in the order they are due, so that
// when Advance returns everything due by then has run. It is safe for
// concurrent use.
type FakeClock struct {
	mu      sync.Mutex // guards now, timers, seq
	now     time.Time
	timers  []*fakeTimer
	seq     uint64
	advance sync.Mutex // serialises Advance
}

type fakeTimer struct {
	when time.Time
	seq  uint64 // order among timers due at the same time
	f    func()
	done bool
}

// NewFakeClock returns a fake clock set to start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now implements Clock.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements Clock.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{when: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		stopped := !t.done
		t.done = true
		return stopped
	}
}

// Advance moves the clock forward by d, running every timer that falls due,
// at its own time, including timers those timers set.
func (c *FakeClock) Advance(d time.Duration) {
	c.advance.Lock()
	defer c.advance.Unlock()
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool { return t.done })
		var next *fakeTimer
		for _, t := range c.timers {
			if !t.when.After(end) && (next == nil || t.when.Before(next.when) || t.when.Equal(next.when) && t.seq < next.seq) {
				next = t
			}
		}
		if next == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		next.done = true
		if next.when.After(c.now) {
			c.now = next.when
		}
		c.mu.Unlock()
		next.f()
	}
}

// ticker calls f every d on clock until its stop function is called. A
// call of f in progress when stop is called runs to its end (stop does not
// wait for it); none starts afterwards.
func ticker(clock Clock, d time.Duration, f func()) (stop func()) {
	var mu sync.Mutex // guards stopped and cancel; never held while f runs
	stopped := false
	var cancel func() bool
	var tick func()
	tick = func() {
		mu.Lock()
		s := stopped
		mu.Unlock()
		if s {
			return
		}
		f()
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			cancel = clock.AfterFunc(d, tick)
		}
	}
	mu.Lock()
	cancel = clock.AfterFunc(d, tick)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		cancel()
	}
}
