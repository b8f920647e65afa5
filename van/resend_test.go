package van

import (
	"testing"

	"github.com/gopslite/pslite/message"
)

func TestMsgSigLayout(t *testing.T) {
	cases := []struct {
		app, sender, recver, ts int32
		req                     bool
		want                    uint64
	}{
		// app 0, worker 9 -> server 8, timestamp 5, request:
		// 9<<40 | 8<<32 | 5<<1 | 1
		{0, 9, 8, 5, true, 0x0000_0908_0000_000b},
		// app 1, server 8 -> worker 9, timestamp 0, response.
		{1, 8, 9, 0, false, 0x0001_0809_0000_0000},
		// ids wider than 8 bits and apps wider than 16 are truncated.
		{0x1_0002, 0x101, 0x1ff, 1, false, 0x0002_01ff_0000_0002},
		// timestamp<<1 overflows int32 and sign-extends, as in C++.
		{0, 9, 8, 1 << 30, false, 0xffff_ffff_8000_0000},
	}
	for _, c := range cases {
		if got := MsgSig(c.app, c.sender, c.recver, c.ts, c.req); got != c.want {
			t.Errorf("MsgSig(%d,%d,%d,%d,%t) = %#x, want %#x", c.app, c.sender, c.recver, c.ts, c.req, got, c.want)
		}
	}
}

func TestSigRingForgetsOldest(t *testing.T) {
	r := newSigRing(3)
	for _, s := range []uint64{1, 2, 3} {
		if !r.add(s) {
			t.Fatalf("%d reported as seen", s)
		}
	}
	if r.add(2) {
		t.Error("duplicate 2 not detected")
	}
	r.add(4) // evicts 1
	if !r.add(1) {
		t.Error("1 should have been forgotten")
	}
	if len(r.set) != 3 {
		t.Errorf("set holds %d entries, want 3", len(r.set))
	}
}

// TestResenderKeepsCopiesOfCopiedMessages checks that a message whose
// frames the sender may reuse (not ZeroCopy) is resent from a copy, and a
// ZeroCopy one from the sender's frames.
func TestResenderKeepsCopiesOfCopiedMessages(t *testing.T) {
	r := &resender{sendBuf: map[uint64]*outgoing{}}
	for ts, zeroCopy := range []bool{false, true} {
		buf := []byte{1, 2, 3}
		m := message.New()
		m.Meta.AppID, m.Meta.Timestamp, m.Meta.Recver = 0, int32(ts), 9
		m.Data = [][]byte{buf}
		m.ZeroCopy = zeroCopy
		r.addOutgoing(m, 8)
		buf[0] = 99 // the sender reuses its buffer
		kept := r.sendBuf[MsgSig(0, 8, 9, int32(ts), false)]
		if kept == nil {
			t.Fatalf("zeroCopy=%v: message not kept", zeroCopy)
		}
		if got, want := kept.msg.Data[0][0], map[bool]byte{false: 1, true: 99}[zeroCopy]; got != want {
			t.Errorf("zeroCopy=%v: a resend would carry %d, want %d", zeroCopy, got, want)
		}
	}
}
