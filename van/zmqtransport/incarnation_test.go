package zmqtransport

import (
	"context"
	"fmt"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/gopslite/pslite/van"
)

// sender returns a transport presenting process proc, connected to port
// as node 9's identity.
func sender(t *testing.T, port int, proc string) *Transport {
	t.Helper()
	s, err := New(Options{Process: proc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Connect(1, "127.0.0.1", port, van.Identity(9)); err != nil {
		t.Fatal(err)
	}
	return s
}

func sendText(t *testing.T, s *Transport, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Send(ctx, 1, [][]byte{[]byte(text)}, false); err != nil {
		t.Fatal(err)
	}
}

// On libzmq too, a connection claiming a node's identity from another
// process than the one registered for it is not listened to: a stranger's
// plain socket (let in by the identity handover of a replacement's window).
// A replacement whose messages arrive before this node has heard of it is
// held, then heard in order once it has.
func TestIncarnationsOnLibzmq(t *testing.T) {
	port := freePort(t)
	rx, err := New(Options{RecvTimeout: 50 * time.Millisecond, Process: "rx"})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if _, err := rx.Bind("127.0.0.1", port, 0); err != nil {
		t.Fatal(err)
	}
	if err := rx.SetHandover(true); err != nil {
		t.Fatal(err)
	}
	old := sender(t, port, "aaaa")
	sendText(t, old, "old")
	if ident, frames := recvWithin(t, rx, 10*time.Second); string(ident) != "ps9" || string(frames[0]) != "old" {
		t.Fatalf("got %q from %q", frames[0], ident)
	}
	if got := rx.ProcessOf([]byte("ps9")); got != "aaaa" {
		if got == "" {
			t.Skip("this libzmq presents no ZMQ_METADATA properties")
		}
		t.Fatalf("ProcessOf(ps9) = %q, want aaaa", got)
	}
	rx.SetIncarnations(map[int]string{9: "aaaa"})
	old.Close() // node 9 is dead

	// A stranger's plain socket claiming ps9.
	ctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Term()
	s, err := ctx.NewSocket(zmq.DEALER)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close() // (again: a no-op)
	s.SetLinger(0)
	s.SetIdentity("ps9")
	if err := s.Connect(fmt.Sprintf("tcp://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := s.Send(fmt.Sprintf("stranger %d", i), 0); err != nil {
			t.Fatal(err)
		}
	}
	// Its messages are read (and held) before it goes: under the
	// handover, two connections with one identity take it from each
	// other, and what waits on the one that loses it is lost.
	deadline := time.Now().Add(10 * time.Second)
	for rx.heldCount() < 5 {
		if _, frames, err := rx.Recv(); err == nil {
			t.Fatalf("heard the stranger's %q", frames[0])
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the stranger's 5 messages held", rx.heldCount())
		}
	}
	s.Close()
	// The replacement, before this node has heard of it.
	repl := sender(t, port, "bbbb")
	for i := range 3 {
		sendText(t, repl, fmt.Sprintf("new %d", i))
	}
	if _, frames, err := rx.Recv(); err == nil {
		t.Fatalf("heard %q before the replacement was registered", frames[0])
	}

	// The scheduler registers the replacement: its messages come, in
	// order; the stranger's never do.
	rx.SetIncarnations(map[int]string{9: "bbbb"})
	for i := range 3 {
		if ident, frames := recvWithin(t, rx, 10*time.Second); string(ident) != "ps9" || string(frames[0]) != fmt.Sprintf("new %d", i) {
			t.Fatalf("got %q from %q, want new %d", frames[0], ident, i)
		}
	}
	sendText(t, repl, "new 3")
	if _, frames := recvWithin(t, rx, 10*time.Second); string(frames[0]) != "new 3" {
		t.Fatalf("got %q, want new 3", frames[0])
	}
	for range 5 {
		if _, frames, err := rx.Recv(); err == nil {
			t.Fatalf("got %q after the replacement's messages", frames[0])
		}
	}
}

// heldCount returns the messages held for their process.
func (t *Transport) heldCount() int {
	t.inc.mu.Lock()
	defer t.inc.mu.Unlock()
	return len(t.inc.held)
}
