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
	send := func(pub, sec string) {
		s, _ := ctx.NewSocket(zmq.DEALER)
		defer s.Close()
		s.SetLinger(0)
		s.SetCurveServerkey(job.Public)
		s.SetCurvePublickey(pub)
		s.SetCurveSecretkey(sec)
		s.Connect(fmt.Sprintf("tcp://127.0.0.1:%d", port))
		s.SendBytes([]byte("hello"), 0)
		time.Sleep(300 * time.Millisecond) // let the handshake finish before closing
	}
	other, _ := van.NewCurveKeys()
	send(other.Public, other.Secret)
	if _, _, err := tr.Recv(); !errors.Is(err, van.ErrRecvTimeout) {
		t.Errorf("a message from a stranger got through (err %v)", err)
	}
	if tr.Refused() == 0 {
		t.Error("the stranger was not counted as refused")
	}
	send(job.Public, job.Secret)
	_, frames, err := tr.Recv()
	if err != nil || len(frames) != 1 || string(frames[0]) != "hello" {
		t.Errorf("a peer with the job's keys: %v %q", err, frames)
	}
}
