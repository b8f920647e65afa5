package message

import (
	"bytes"
	"sync"
	"testing"
)

// A loan gives back the buffers it was made of, from a list of its own:
// whatever the receiver does to its frames afterwards (Own puts copies in
// their place) cannot change what goes back. This is the bug that gave the
// ZMTP transport's pool the copies Own made, while messages still held them.
func TestLoanGivesBackItsOwnBuffers(t *testing.T) {
	meta, big, small := []byte("meta"), bytes.Repeat([]byte{1}, 100), []byte{2}
	frames := [][]byte{meta, big, small}
	var back [][]byte
	l := NewLoan(frames, 1<<1, func(bufs [][]byte) { back = append(back, bufs...) })
	m := &Message{}
	m.SetFrames(frames[1:])
	m.Lend(l.Mask()>>1, l)
	frames[1] = nil // the caller's list is the caller's
	m.Own()
	if len(back) != 1 || &back[0][0] != &big[0] {
		t.Fatalf("given back %d buffers, the first the lent one: %v", len(back), len(back) == 1 && &back[0][0] == &big[0])
	}
	if &m.Data[0][0] == &big[0] || !bytes.Equal(m.Data[0], big) || &m.Data[1][0] != &small[0] {
		t.Fatal("Own did not replace exactly the lent frame by a faithful copy")
	}
}

// Holds and drops: the memory goes back once, with the last drop; a hold
// after that is refused, and a drop without a hold is counted.
func TestLoanHoldsAndDrops(t *testing.T) {
	buf := make([]byte, 64)
	given := 0
	l := NewLoan([][]byte{buf}, 1, func([][]byte) { given++ })
	if NewLoan([][]byte{buf}, 0, nil) != nil {
		t.Fatal("a loan of no frame")
	}
	for range 2 {
		if !l.Hold() {
			t.Fatal("a live loan refused a hold")
		}
	}
	l.Drop()
	l.Drop()
	if given != 0 || l.Returned() {
		t.Fatal("given back while held")
	}
	l.Drop()
	if given != 1 || !l.Returned() {
		t.Fatalf("given back %d times after the last drop", given)
	}
	if l.Hold() {
		t.Fatal("a hold on memory given back")
	}
	before := LoanMisuses()
	l.Drop()
	if given != 1 || LoanMisuses() != before+1 {
		t.Fatalf("a drop without a hold gave back again (%d) or was not counted", given)
	}
}

// Lent memory is found by address (any part of a frame) while the loan is
// held, and a hold taken that way keeps it from going back.
func TestHoldLentByAddress(t *testing.T) {
	buf := make([]byte, 1024)
	other := make([]byte, 1024)
	given := 0
	l := NewLoan([][]byte{buf}, 1, func([][]byte) { given++ })
	if !IsLent(buf[100:200]) || IsLent(other) || IsLent(nil) {
		t.Fatal("IsLent is wrong about a part of the frame, another buffer or nothing")
	}
	drop, ok := HoldLent(buf[1000:])
	if !ok {
		t.Fatal("HoldLent did not find a part of the frame")
	}
	if _, ok := HoldLent(other); ok {
		t.Fatal("HoldLent found memory that is not lent")
	}
	l.Drop() // the message's hold
	if given != 0 || !IsLent(buf) {
		t.Fatal("given back while a send held it")
	}
	drop()
	if given != 1 || IsLent(buf) {
		t.Fatal("not given back after the last hold, or still found")
	}
}

// Holds taken and dropped from many goroutines give the memory back once.
func TestLoanConcurrentHolds(t *testing.T) {
	for range 50 {
		buf := make([]byte, 8)
		var mu sync.Mutex
		given := 0
		l := NewLoan([][]byte{buf}, 1, func([][]byte) { mu.Lock(); given++; mu.Unlock() })
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 100 {
					if drop, ok := HoldLent(buf); ok {
						drop()
					}
				}
			}()
		}
		l.Drop()
		wg.Wait()
		if given != 1 {
			t.Fatalf("given back %d times, want 1", given)
		}
	}
}

// A detached copy shares the frames but not the loan: releasing both gives
// the memory back once, when the original is released, and changing the
// copy's list leaves the original's alone.
func TestDetachedHoldsNoLoan(t *testing.T) {
	buf := make([]byte, 16)
	given := 0
	m := &Message{}
	m.SetFrames([][]byte{buf, {1}})
	m.Lend(1, NewLoan(m.Data, 1, func([][]byte) { given++ }))
	c := m.Detached()
	if c.Lent() || &c.Data[0][0] != &buf[0] {
		t.Fatal("the copy holds the loan, or does not share the frames")
	}
	c.Data[1] = nil
	c.Release()
	if given != 0 || m.Data[1] == nil {
		t.Fatal("releasing the copy gave the memory back, or the copy shares the original's list")
	}
	m.Release()
	if given != 1 {
		t.Fatalf("given back %d times", given)
	}
}
