package message

import (
	"bytes"
	"reflect"
	"testing"
)

// TestLendOwnRelease checks that Own copies exactly the lent frames and
// gives them back once, and that Release does nothing the second time.
func TestLendOwnRelease(t *testing.T) {
	lent := bytes.Repeat([]byte{7}, 3*cloneChunk+5) // several chunks
	mine := []byte("mine")
	m := &Message{Data: [][]byte{mine, lent}}
	released := 0
	m.Lend(1<<1, countingLoan(m.Data, 1<<1, &released))
	if !m.Lent() || m.IsLent(0) || !m.IsLent(1) {
		t.Fatalf("Lent %v, IsLent(0) %v, IsLent(1) %v", m.Lent(), m.IsLent(0), m.IsLent(1))
	}
	m.Own()
	if released != 1 || m.Lent() {
		t.Fatalf("released %d times, still lent %v", released, m.Lent())
	}
	if &m.Data[0][0] != &mine[0] {
		t.Error("Own copied a frame that was not lent")
	}
	if &m.Data[1][0] == &lent[0] || !bytes.Equal(m.Data[1], lent) {
		t.Error("Own did not copy the lent frame faithfully")
	}
	m.Release()
	m.Own()
	if released != 1 {
		t.Fatalf("released %d times after Release and Own of an owned message", released)
	}
	m.Lend(1, countingLoan(m.Data, 1, &released))
	m.Release()
	m.Release()
	if released != 2 {
		t.Fatalf("released %d times, want 2", released)
	}
}

// TestRecycle checks that Recycle gives lent frames back once and that Get
// hands out a message like New's, whatever the recycled one held.
func TestRecycle(t *testing.T) {
	for range 3 {
		m := Get()
		if !reflect.DeepEqual(m, New()) {
			t.Fatalf("Get() = %+v, want New()'s", m)
		}
		m.Meta.Timestamp, m.Meta.Body, m.ZeroCopy = 9, []byte("x"), true
		m.AddData(Float, make([]byte, 4))
		released := 0
		m.Lend(1, countingLoan(m.Data, 1, &released))
		m.Recycle()
		if released != 1 {
			t.Fatalf("lent frames given back %d times, want once", released)
		}
	}
}

// countingLoan returns a loan of the frames of mask that counts in
// *released how often it is given back.
func countingLoan(frames [][]byte, mask uint64, released *int) *Loan {
	return NewLoan(frames, mask, func([][]byte) { *released++ })
}
