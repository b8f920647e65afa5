//go:build cgo

package zmtptransport

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// zmqSocket returns a libzmq socket of type typ; with heartbeats, they
// (every 20ms, 200ms timeout) drop the connection unless the peer answers
// PINGs.
func zmqSocket(t *testing.T, typ zmq.Type, identity string, heartbeats bool) *zmq.Socket {
	t.Helper()
	s, err := zmq.NewSocket(typ)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.SetLinger(0)
	s.SetRcvtimeo(wait)
	if heartbeats {
		s.SetHeartbeatIvl(20 * time.Millisecond)
		s.SetHeartbeatTimeout(200 * time.Millisecond)
	}
	if identity != "" {
		s.SetIdentity(identity)
	}
	return s
}

// disconnects counts the DISCONNECTED events of s from now on.
func disconnects(t *testing.T, s *zmq.Socket) func() int {
	t.Helper()
	addr := fmt.Sprintf("inproc://mon-%p", s)
	if err := s.Monitor(addr, zmq.EVENT_DISCONNECTED); err != nil {
		t.Fatal(err)
	}
	mon, err := zmq.NewSocket(zmq.PAIR)
	if err != nil {
		t.Fatal(err)
	}
	// Stop monitoring before the PAIR closes (cleanups run last first, so
	// before s closes too): libzmq sends an event with a send that blocks
	// its I/O thread for ever when no PAIR reads it, which would stall
	// every later socket of the process.
	t.Cleanup(func() {
		s.Monitor("", 0)
		mon.Close()
	})
	mon.Connect(addr)
	return func() int {
		n := 0
		for {
			if _, _, _, err := mon.RecvEvent(zmq.DONTWAIT); err != nil {
				return n
			}
			n++
		}
	}
}

func TestWithLibzmq(t *testing.T) {
	// Our DEALER to libzmq's ROUTER.
	router := zmqSocket(t, zmq.ROUTER, "", true)
	if err := router.Bind("tcp://127.0.0.1:*"); err != nil {
		t.Fatal(err)
	}
	routerDown := disconnects(t, router)
	port := boundPort(t, router)
	tx := newTransport(t, Options{})
	tx.Connect(1, "127.0.0.1", port, "ps8")
	if _, err := tx.Send(context.Background(), 1, [][]byte{[]byte("meta"), pattern(300, 1)}, false); err != nil {
		t.Fatal(err)
	}
	got, err := router.RecvMessageBytes(0)
	if err != nil || len(got) != 3 || string(got[0]) != "ps8" || string(got[1]) != "meta" || string(got[2]) != string(pattern(300, 1)) {
		t.Fatalf("libzmq's ROUTER received %q, %v", got, err)
	}

	// libzmq's DEALER to our ROUTER.
	rx, rport := bound(t, Options{})
	dealer := zmqSocket(t, zmq.DEALER, "ps4", true)
	dealerDown := disconnects(t, dealer)
	if err := dealer.Connect(fmt.Sprintf("tcp://127.0.0.1:%d", rport)); err != nil {
		t.Fatal(err)
	}
	dealer.SendMessage([]byte("m"), pattern(70000, 2))
	ident, frames := recv(t, rx)
	if ident != "ps4" || len(frames) != 2 || string(frames[1]) != string(pattern(70000, 2)) {
		t.Fatalf("identity %q, %d frames", ident, len(frames))
	}

	// Both libzmq sockets ping every 20ms and drop a connection that is
	// silent for 200ms: after a second of quiet, both connections still
	// stand, since PINGs are answered.
	afterQuietSecond(t, tx, router, dealer, rx)
	if n, m := routerDown(), dealerDown(); n != 0 || m != 0 {
		t.Fatalf("libzmq dropped %d (ROUTER) and %d (DEALER) connections for missing heartbeats", n, m)
	}
}

// libzmq answers PINGs whatever its own heartbeat options: with a link
// timeout on our side only, both connections stand after a quiet second.
func TestHeartbeatsWithLibzmqWithoutHeartbeats(t *testing.T) {
	opts := Options{LinkTimeout: 200 * time.Millisecond}
	router := zmqSocket(t, zmq.ROUTER, "", false)
	router.Bind("tcp://127.0.0.1:*")
	port := boundPort(t, router)
	tx := newTransport(t, opts)
	ev := connect(t, tx, 1, port, "ps8")
	rx, rport := bound(t, opts)
	dealer := zmqSocket(t, zmq.DEALER, "ps4", false)
	dealerDown := disconnects(t, dealer)
	dealer.Connect(fmt.Sprintf("tcp://127.0.0.1:%d", rport))

	afterQuietSecond(t, tx, router, dealer, rx)
	select {
	case e := <-ev.ch:
		t.Fatalf("our DEALER's connection went %q", e)
	default:
	}
	if n := dealerDown(); n != 0 {
		t.Fatalf("the connection to libzmq's DEALER dropped %d times", n)
	}
}

// boundPort returns the TCP port a libzmq socket bound on 127.0.0.1.
func boundPort(t *testing.T, s *zmq.Socket) int {
	t.Helper()
	endpoint, err := s.GetLastEndpoint()
	var port int
	if err == nil {
		_, err = fmt.Sscanf(endpoint[len("tcp://127.0.0.1:"):], "%d", &port)
	}
	if err != nil {
		t.Fatalf("port of %q: %v", endpoint, err)
	}
	return port
}

// afterQuietSecond waits a second, then sends a message each way: from
// our DEALER (node 1 of tx) to libzmq's router, and from libzmq's dealer
// to our rx; both must arrive.
func afterQuietSecond(t *testing.T, tx *Transport, router, dealer *zmq.Socket, rx *Transport) {
	t.Helper()
	time.Sleep(time.Second)
	tx.Send(context.Background(), 1, [][]byte{[]byte("later")}, false)
	dealer.SendMessage([]byte("later"))
	if got, err := router.RecvMessageBytes(0); err != nil || string(got[1]) != "later" {
		t.Fatalf("after a quiet second: %q %v", got, err)
	}
	if _, frames := recv(t, rx); string(frames[0]) != "later" {
		t.Fatalf("after a quiet second: %q", frames[0])
	}
}

// libzmq sends a heartbeat command as soon as it is due, between two frames
// of a message it is sending (ZMTP's grammar has commands between messages
// only): a PONG answering our PING, or its own PING. Our ROUTER takes the
// message whole, answers the PING, and keeps the connection. Before, it
// dropped the connection ("command frame inside a message"), with a C++
// ps-lite server's answers in it.
func TestLibzmqHeartbeatsInsideMessages(t *testing.T) {
	// Our side pings every 1/12 of the link timeout, libzmq's every 20ms;
	// the timeouts are long, for a loaded machine.
	rx, port := bound(t, Options{LinkTimeout: time.Second})
	dealer := zmqSocket(t, zmq.DEALER, "ps4", true)
	dealer.SetHeartbeatTimeout(10 * time.Second)
	dealerDown := disconnects(t, dealer)
	if err := dealer.Connect(fmt.Sprintf("tcp://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	// Messages of several large frames, sent for long enough that many
	// heartbeats fall due in the middle of one.
	const frameBytes = 1 << 20
	big := [][]byte{pattern(frameBytes, 1), pattern(frameBytes, 2), pattern(frameBytes, 3)}
	sent := 0
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond || sent < 20; sent++ {
		if _, err := dealer.SendMessage(fmt.Sprintf("m%d", sent), big[0], big[1], big[2]); err != nil {
			t.Fatal(err)
		}
		ident, frames := recv(t, rx)
		if ident != "ps4" || len(frames) != 4 || string(frames[0]) != fmt.Sprintf("m%d", sent) {
			t.Fatalf("message %d: identity %q, %d frames, first %.10q", sent, ident, len(frames), frames[0])
		}
		for i, f := range frames[1:] {
			if !bytes.Equal(f, big[i]) {
				t.Fatalf("message %d: frame %d differs", sent, i+1)
			}
		}
	}
	if n := dealerDown(); n != 0 {
		t.Fatalf("the connection from libzmq's DEALER dropped %d times in %d messages", n, sent)
	}
	t.Logf("%d messages of %d frames of %d bytes", sent, len(big)+1, frameBytes)
}
