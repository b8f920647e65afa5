package zmqtransport

import (
	"errors"
	"fmt"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/van"
)

// libzmq agrees with the pure-Go keys: a pair made here passes libzmq's
// own derivation of the public key, and one made by libzmq passes Check.
func TestCurveKeysMatchLibzmq(t *testing.T) {
	ours, err := van.NewCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := zmq.AuthCurvePublic(ours.Secret)
	if err != nil || pub != ours.Public {
		t.Errorf("libzmq derives %q (%v) from our secret, we say %q", pub, err, ours.Public)
	}
	pub, sec, err := zmq.NewCurveKeypair()
	if err != nil {
		t.Skipf("libzmq without CURVE: %v", err)
	}
	if err := (van.CurveKeys{Public: pub, Secret: sec}).Check(); err != nil {
		t.Errorf("a libzmq pair fails Check: %v", err)
	}
}

// A peer that knows the job's public key but not its secret key gets past
// the handshake and is then refused by the ZAP handler; one that has the
// keys gets through.
func TestCurveZAP(t *testing.T) {
	job, _ := van.NewCurveKeys()
	tr, err := New(Options{Curve: &job, Log: zerolog.Nop(), RecvTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	port, err := tr.Bind("127.0.0.1", 0, 40)
	if err != nil {
		t.Fatal(err)
	}
	ctx, _ := zmq.NewContext()
	defer ctx.Term()
	// send connects a DEALER with the given key pair, sends "hello", and
	// returns the outcome of its first handshake (the socket's monitor
	// reports it) and a function that closes the socket.
	send := func(pub, sec string) (zmq.Event, func()) {
		t.Helper()
		s, _ := ctx.NewSocket(zmq.DEALER)
		s.SetLinger(0)
		s.SetCurveServerkey(job.Public)
		s.SetCurvePublickey(pub)
		s.SetCurveSecretkey(sec)
		handshake := make(chan zmq.Event, 1)
		mon, err := monitorSocket(ctx, s, zmq.EVENT_HANDSHAKE_SUCCEEDED|zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL|
			zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL|zmq.EVENT_HANDSHAKE_FAILED_AUTH, func(ev zmq.Event, _ string, _ int) {
			select {
			case handshake <- ev:
			default: // a retry's: the first one counts
			}
		})
		if err != nil {
			s.Close()
			t.Fatal(err)
		}
		closeSock := func() { mon.stop(s); <-mon.done; s.Close() }
		s.Connect(fmt.Sprintf("tcp://127.0.0.1:%d", port))
		s.SendBytes([]byte("hello"), 0)
		select {
		case ev := <-handshake:
			return ev, closeSock
		case <-time.After(10 * time.Second):
			closeSock()
			t.Fatal("no handshake")
			return 0, nil
		}
	}
	other, _ := van.NewCurveKeys()
	ev, closeSock := send(other.Public, other.Secret)
	closeSock() // refused: a retry would be refused again
	if ev != zmq.EVENT_HANDSHAKE_FAILED_AUTH {
		t.Errorf("a stranger's handshake: %v, want a refusal (EVENT_HANDSHAKE_FAILED_AUTH)", ev)
	}
	// The refusal reached the stranger, so the guard has counted it, and
	// the stranger's "hello" has gone nowhere.
	if tr.Refused() == 0 {
		t.Error("the stranger was not counted as refused")
	}
	if _, _, err := tr.Recv(); !errors.Is(err, van.ErrRecvTimeout) {
		t.Errorf("a message from a stranger got through (err %v)", err)
	}
	ev, closeSock = send(job.Public, job.Secret)
	defer closeSock() // after the message is received: closing drops what is unsent
	if ev != zmq.EVENT_HANDSHAKE_SUCCEEDED {
		t.Fatalf("a peer with the job's keys: handshake %v", ev)
	}
	_, frames := recvWithin(t, tr, 10*time.Second)
	if len(frames) != 1 || string(frames[0]) != "hello" {
		t.Errorf("a peer with the job's keys: %q", frames)
	}
}
