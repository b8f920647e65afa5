package van

import (
	"slices"
	"testing"
	"time"
)

func TestFakeClockRunsTimersInOrder(t *testing.T) {
	start := time.Unix(1000, 0)
	c := NewFakeClock(start)
	var got []string
	c.AfterFunc(3*time.Second, func() { got = append(got, "c") })
	c.AfterFunc(time.Second, func() {
		got = append(got, "a")
		// A timer set by a timer runs in the same Advance if it falls due.
		c.AfterFunc(time.Second, func() { got = append(got, "b") })
	})
	stop := c.AfterFunc(2500*time.Millisecond, func() { got = append(got, "stopped") })
	if !stop() {
		t.Error("stop of a pending timer reported false")
	}
	c.Advance(2 * time.Second)
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("after 2s: %v", got)
	}
	if !c.Now().Equal(start.Add(2 * time.Second)) {
		t.Errorf("Now = %v", c.Now())
	}
	c.Advance(5 * time.Second)
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("after 7s: %v", got)
	}
}

func TestTickerOnFakeClock(t *testing.T) {
	c := NewFakeClock(time.Unix(0, 0))
	n := 0
	stop := ticker(c, 100*time.Millisecond, func() { n++ })
	c.Advance(time.Second)
	if n != 10 {
		t.Errorf("%d ticks in 1s of 100ms, want 10", n)
	}
	stop()
	c.Advance(time.Second)
	if n != 10 {
		t.Errorf("ticks after stop: %d", n)
	}
}
