package control

import (
	"testing"
	"time"

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
	r := NewResender(time.Second, 3)
	for ts, zeroCopy := range []bool{false, true} {
		buf := []byte{1, 2, 3}
		m := message.New()
		m.Meta.AppID, m.Meta.Timestamp, m.Meta.Recver = 0, int32(ts), 9
		m.Data = [][]byte{buf}
		m.ZeroCopy = zeroCopy
		r.Outgoing(m, 8, time.Unix(0, 0))
		buf[0] = 99 // the sender reuses its buffer
		kept := r.sendBuf[MsgSig(0, 8, 9, int32(ts), false)]
		if kept == nil {
			t.Fatalf("zeroCopy=%v: message not kept", zeroCopy)
		}
		if got, want := kept.Msg.Data[0][0], map[bool]byte{false: 1, true: 99}[zeroCopy]; got != want {
			t.Errorf("zeroCopy=%v: a resend would carry %d, want %d", zeroCopy, got, want)
		}
	}
}

// Resends come one timeout after the send, then every timeout; the message
// is given up on maxRetry+1 timeouts after the send; an ACK ends it all;
// duplicates are acknowledged again and dropped.
func TestResenderTimeline(t *testing.T) {
	r := NewResender(time.Second, 2)
	t0 := time.Unix(100, 0)
	m := message.New()
	m.Meta.AppID, m.Meta.Timestamp, m.Meta.Recver, m.Meta.Request = 0, 7, 8, true
	r.Outgoing(m, 9, t0)
	at := func(d time.Duration) (int, int) {
		resend, failed := r.Due(t0.Add(d))
		for _, p := range resend {
			r.Resent(p)
		}
		return len(resend), len(failed)
	}
	for _, c := range []struct {
		d              time.Duration
		resend, failed int
	}{{900 * time.Millisecond, 0, 0}, {1100 * time.Millisecond, 1, 0}, {1900 * time.Millisecond, 0, 0}, {2100 * time.Millisecond, 1, 0}, {3100 * time.Millisecond, 0, 1}} {
		if rs, f := at(c.d); rs != c.resend || f != c.failed {
			t.Errorf("at %v: %d resends, %d failures; want %d, %d", c.d, rs, f, c.resend, c.failed)
		}
	}
	if r.Len() != 0 {
		t.Fatalf("%d pending after the failure", r.Len())
	}
	// An ACK ends it.
	r.Outgoing(m, 9, t0)
	ack := message.New()
	ack.Meta.Control.Cmd = message.CmdAck
	ack.Meta.Control.MsgSig = MsgSig(0, 9, 8, 7, true)
	if _, drop := r.Incoming(ack); !drop || r.Len() != 0 {
		t.Errorf("ACK: drop=%v, %d pending", drop, r.Len())
	}
	// A received message is acknowledged, twice if it comes twice, and the
	// second is dropped.
	in := message.New()
	in.Meta.Sender, in.Meta.Recver, in.Meta.Timestamp, in.Meta.AppID = 8, 9, 3, 0
	for i, wantDrop := range []bool{false, true} {
		ack, drop := r.Incoming(in)
		if ack == nil || ack.Meta.Control.MsgSig != MsgSig(0, 8, 9, 3, false) || ack.Meta.Recver != 8 || drop != wantDrop {
			t.Errorf("copy %d: ack %v, drop %v", i, ack, drop)
		}
	}
}

// A replacement numbers its messages afresh: once its predecessor's
// signatures are forgotten, they are no duplicates.
func TestResenderForgetSender(t *testing.T) {
	r := NewResender(time.Second, 3)
	in := func(sender int32) bool {
		m := message.New()
		m.Meta.Sender, m.Meta.Recver, m.Meta.Timestamp, m.Meta.AppID = sender, 1, 4, 0
		_, drop := r.Incoming(m)
		return drop
	}
	if in(10) || in(12) || !in(10) {
		t.Fatal("duplicate detection")
	}
	r.ForgetSender(10)
	if in(10) {
		t.Error("node 10's new message taken for a duplicate after ForgetSender")
	}
	if !in(12) {
		t.Error("node 12's duplicate forgotten too")
	}
}
