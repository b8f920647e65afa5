package control

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
	r := NewResender(ResendConfig{Timeout: time.Second, MaxRetry: 3})
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

// req returns a request from node 9 to node 8 with timestamp ts and size
// bytes of data.
func req(ts int32, size int) *message.Message {
	m := message.New()
	m.Meta.AppID, m.Meta.Timestamp, m.Meta.Recver, m.Meta.Request = 0, ts, 8, true
	if size > 0 {
		m.Data = [][]byte{make([]byte, size)}
		m.ZeroCopy = true
	}
	return m
}

// ackOf returns node 8's ACK of req(ts, ...).
func ackOf(ts int32) *message.Message {
	ack := message.New()
	ack.Meta.Control.Cmd = message.CmdAck
	ack.Meta.Control.MsgSig = MsgSig(0, 9, 8, ts, true)
	return ack
}

// step runs r's timers at t, resends what is due (at t) and returns the
// timestamps resent and given up on.
func step(r *Resender, t time.Time) (resent, failed []int32) {
	rs, fs := r.Due(t)
	for _, p := range rs {
		r.Resent(p, t)
		resent = append(resent, p.Msg.Meta.Timestamp)
	}
	for _, m := range fs {
		failed = append(failed, m.Meta.Timestamp)
	}
	return resent, failed
}

// Resends back off: one timeout after the send, then 2, 4 and 8 timeouts
// after the previous one; with MaxRetry the message is given up on when it
// is due once more; an ACK ends it all; duplicates are acknowledged again
// and dropped.
func TestResenderTimeline(t *testing.T) {
	r := NewResender(ResendConfig{Timeout: time.Second, MaxRetry: 3})
	t0 := time.Unix(100, 0)
	r.Outgoing(req(7, 0), 9, t0)
	var got []string
	for ms := 0; ms <= 20000; ms += 100 {
		at := t0.Add(time.Duration(ms) * time.Millisecond)
		rs, fs := step(r, at)
		for range rs {
			got = append(got, fmt.Sprintf("resend@%v", at.Sub(t0)))
		}
		for range fs {
			got = append(got, fmt.Sprintf("fail@%v", at.Sub(t0)))
		}
	}
	if want := []string{"resend@1s", "resend@3s", "resend@7s", "fail@15s"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if r.Len() != 0 {
		t.Fatalf("%d pending after the failure", r.Len())
	}
	if err := r.FailError(req(7, 0)); !errors.Is(err, ErrNoAck) || !strings.Contains(err.Error(), "PS_RESEND_MAX_RETRY") {
		t.Errorf("FailError = %v", err)
	}
	// An ACK ends it.
	r.Outgoing(req(7, 0), 9, t0)
	if _, drop := r.Incoming(ackOf(7), t0); !drop || r.Len() != 0 {
		t.Errorf("ACK: drop=%v, %d pending", drop, r.Len())
	}
	// A received message is acknowledged, twice if it comes twice, and the
	// second is dropped.
	in := message.New()
	in.Meta.Sender, in.Meta.Recver, in.Meta.Timestamp, in.Meta.AppID = 8, 9, 3, 0
	for i, wantDrop := range []bool{false, true} {
		ack, drop := r.Incoming(in, t0)
		if ack == nil || ack.Meta.Control.MsgSig != MsgSig(0, 8, 9, 3, false) || ack.Meta.Recver != 8 || drop != wantDrop {
			t.Errorf("copy %d: ack %v, drop %v", i, ack, drop)
		}
	}
}

// Without MaxRetry a message is given up on GiveUp after its first send,
// however many resends that took: a 60 s outage is ridden out.
func TestResenderGivesUpInTime(t *testing.T) {
	r := NewResender(ResendConfig{Timeout: time.Second, GiveUp: 90 * time.Second})
	t0 := time.Unix(100, 0)
	r.Outgoing(req(1, 0), 9, t0)
	resends, failedAt := 0, time.Duration(0)
	for ms := 0; ms <= 120000 && failedAt == 0; ms += 100 {
		at := t0.Add(time.Duration(ms) * time.Millisecond)
		rs, fs := step(r, at)
		resends += len(rs)
		if len(fs) > 0 {
			failedAt = at.Sub(t0)
		}
		if ms == 61000 && r.Len() != 1 {
			t.Fatalf("given up on within a minute")
		}
	}
	// Resends at 1, 3, 7, 15, then every 8 s: 15+8k <= 90.
	if resends != 13 || failedAt < 90*time.Second || failedAt > 91*time.Second {
		t.Errorf("%d resends, given up on at %v; want 13 and 90s", resends, failedAt)
	}
	if err := r.FailError(req(1, 0)); strings.Contains(err.Error(), "MAX_RETRY") || !strings.Contains(err.Error(), "1m30s") {
		t.Errorf("FailError = %v", err)
	}
}

// A message queued behind others to the same peer is not resent while
// they may still be on their way, and a large one is given the time its
// bytes take.
func TestResenderWaitsForWhatIsAhead(t *testing.T) {
	r := NewResender(ResendConfig{Timeout: time.Second})
	t0 := time.Unix(100, 0)
	const big = 4 << 20 // 4 s at the assumed 1 MiB/s: 16 s allowed, plus the timeout
	r.Outgoing(req(1, big), 9, t0)
	r.Outgoing(req(2, 0), 9, t0)
	for s := 1; s <= 8; s++ {
		if rs, _ := step(r, t0.Add(time.Duration(s)*time.Second)); len(rs) > 0 {
			t.Fatalf("resent %v at %ds, while the large message may still be in flight", rs, s)
		}
	}
	// The large one arrives (it measures the line's rate: 4 MiB in 8 s),
	// so the small one can leave now, and is resent one timeout later.
	t1 := t0.Add(8 * time.Second)
	r.Incoming(ackOf(1), t1)
	if rs, _ := step(r, t1.Add(900*time.Millisecond)); len(rs) != 0 {
		t.Errorf("resent %v before the timeout", rs)
	}
	if rs, _ := step(r, t1.Add(1100*time.Millisecond)); !slices.Equal(rs, []int32{2}) {
		t.Errorf("resent %v, want [2]", rs)
	}
	if l := r.lines[8]; l.rate != big/8 {
		t.Errorf("measured rate %.0f B/s, want %d", l.rate, big/8)
	}
}

// When a later message's ACK arrives, the messages ahead of it without one
// were lost (or their ACK was): they are resent one timeout later, all at
// once, not one after the other.
func TestResenderResendsWhatALaterACKPassed(t *testing.T) {
	r := NewResender(ResendConfig{Timeout: time.Second})
	t0 := time.Unix(100, 0)
	for ts := int32(1); ts <= 4; ts++ {
		r.Outgoing(req(ts, 0), 9, t0)
	}
	t1 := t0.Add(300 * time.Millisecond)
	r.Incoming(ackOf(4), t1) // 1, 2 and 3 were dropped by the receiver
	rs, _ := step(r, t1.Add(1100*time.Millisecond))
	slices.Sort(rs)
	if !slices.Equal(rs, []int32{1, 2, 3}) {
		t.Errorf("resent %v, want [1 2 3]", rs)
	}
}

// A resend goes to the back of the line and the message it repeats leaves
// the head: the message behind gets its turn.
func TestResenderResendGoesToTheBack(t *testing.T) {
	r := NewResender(ResendConfig{Timeout: time.Second})
	t0 := time.Unix(100, 0)
	r.Outgoing(req(1, 0), 9, t0)
	r.Outgoing(req(2, 0), 9, t0)
	var got []string
	for ms := 100; ms <= 5000; ms += 100 {
		rs, _ := step(r, t0.Add(time.Duration(ms)*time.Millisecond))
		for _, ts := range rs {
			got = append(got, fmt.Sprintf("%d@%dms", ts, ms))
		}
	}
	// 1 at 1 s; 2, now the head, at 2 s; 1's resend, then the head, waits
	// 2 timeouts: 4 s.
	if want := []string{"1@1000ms", "2@2000ms", "1@4000ms"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// The ACK of a message sent twice says nothing of the one behind it.
	r.Incoming(ackOf(1), t0.Add(4100*time.Millisecond))
	if rs, _ := step(r, t0.Add(4200*time.Millisecond)); len(rs) != 0 {
		t.Errorf("resent %v after an ambiguous ACK", rs)
	}
}

// A replacement numbers its messages afresh: once its predecessor's
// signatures are forgotten, they are no duplicates.
func TestResenderForgetSender(t *testing.T) {
	r := NewResender(ResendConfig{Timeout: time.Second, MaxRetry: 3})
	in := func(sender int32) bool {
		m := message.New()
		m.Meta.Sender, m.Meta.Recver, m.Meta.Timestamp, m.Meta.AppID = sender, 1, 4, 0
		_, drop := r.Incoming(m, time.Unix(0, 0))
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

// A connection that drops may lose what was on its way: once it is back,
// what was sent before the drop is resent one timeout later, however
// large; what was sent while it was down is the head of the line from then.
func TestResenderResendsWhatABrokenConnectionCarried(t *testing.T) {
	r := NewResender(ResendConfig{Timeout: time.Second})
	t0 := time.Unix(100, 0)
	r.Outgoing(req(1, 64<<20), 9, t0) // 256 s allowed on a live connection
	r.Outgoing(req(2, 0), 9, t0)
	r.Connection(8, false, t0.Add(2*time.Second))
	r.Outgoing(req(3, 0), 9, t0.Add(3*time.Second)) // queued while down
	up := t0.Add(5 * time.Second)
	r.Connection(8, true, up)
	r.Incoming(ackOf(3), up.Add(100*time.Millisecond)) // 3 came through
	if rs, _ := step(r, up.Add(900*time.Millisecond)); len(rs) != 0 {
		t.Errorf("resent %v before the timeout", rs)
	}
	rs, _ := step(r, up.Add(1100*time.Millisecond))
	slices.Sort(rs)
	if !slices.Equal(rs, []int32{1, 2}) {
		t.Errorf("resent %v, want [1 2]", rs)
	}
	// Without the drop, the large message would have waited its 256 s.
	r = NewResender(ResendConfig{Timeout: time.Second})
	r.Outgoing(req(1, 64<<20), 9, t0)
	if rs, _ := step(r, t0.Add(100*time.Second)); len(rs) != 0 {
		t.Errorf("resent %v on a live connection within its allowance", rs)
	}
}

// TestResenderForgets checks that Forget hears of every message handed to
// Outgoing once the resender no longer keeps it, and of none it keeps or
// gives up on.
func TestResenderForgets(t *testing.T) {
	var forgotten []*message.Message
	r := NewResender(ResendConfig{Timeout: time.Second, GiveUp: 10 * time.Second,
		Forget: func(m *message.Message) { forgotten = append(forgotten, m) }})
	t0 := time.Unix(0, 0)
	want := func(what string, ms ...*message.Message) {
		t.Helper()
		if !slices.Equal(forgotten, ms) {
			t.Fatalf("%s: forgotten %v, want %v", what, forgotten, ms)
		}
		forgotten = nil
	}
	// A response (no response awaited): forgotten at its ACK.
	resp := message.New()
	resp.Meta.AppID, resp.Meta.Timestamp, resp.Meta.Recver, resp.ZeroCopy = 0, 1, 9, true
	r.Outgoing(resp, 8, t0)
	want("kept response")
	ack := message.New()
	ack.Meta.Control.Cmd, ack.Meta.Control.MsgSig = message.CmdAck, MsgSig(0, 8, 9, 1, false)
	r.Incoming(ack, t0)
	want("acknowledged response", resp)
	// A request: kept past its ACK, forgotten at its response.
	rq := req(2, 10)
	r.Outgoing(rq, 9, t0)
	r.Incoming(ackOf(2), t0)
	want("acknowledged request")
	answer := message.New()
	answer.Meta.AppID, answer.Meta.Timestamp, answer.Meta.Sender, answer.Meta.Recver = 0, 2, 8, 9
	r.Incoming(answer, t0)
	want("answered request", rq)
	// Sent twice: the second is not kept.
	a, b := req(3, 10), req(3, 10)
	r.Outgoing(a, 9, t0)
	r.Outgoing(b, 9, t0)
	want("duplicate", b)
	// An ACK is never kept; a copied message is kept as a copy.
	r.Outgoing(ackOf(4), 9, t0)
	if len(forgotten) != 1 {
		t.Fatalf("ACK: forgotten %v", forgotten)
	}
	forgotten = nil
	c := req(5, 10)
	c.ZeroCopy = false
	r.Outgoing(c, 9, t0)
	want("copied", c)
	// Dropped for a dead node, at ForgetAll, but not when given up on.
	d := req(6, 10)
	d.Meta.Recver = 7
	r.Outgoing(d, 9, t0)
	r.DropTo(7)
	want("dropped", d)
	_, failed := r.Due(t0.Add(time.Minute))
	if len(failed) != 2 { // timestamps 3 and 5
		t.Fatalf("%d given up on, want 2", len(failed))
	}
	want("given up")
	e := req(7, 10)
	r.Outgoing(e, 9, t0)
	r.ForgetAll()
	want("ForgetAll", e)
	if r.Len() != 0 {
		t.Fatalf("%d kept after ForgetAll", r.Len())
	}
}
