//go:build cgo

package zmtptransport

import (
	"context"
	"fmt"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// zmqSocket returns a libzmq socket of type typ whose heartbeats (every
// 20ms, 200ms timeout) drop the connection unless the peer answers PINGs.
func zmqSocket(t *testing.T, typ zmq.Type, identity string) *zmq.Socket {
	t.Helper()
	s, err := zmq.NewSocket(typ)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.SetLinger(0)
	s.SetRcvtimeo(wait)
	s.SetHeartbeatIvl(20 * time.Millisecond)
	s.SetHeartbeatTimeout(200 * time.Millisecond)
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
	t.Cleanup(func() { mon.Close() })
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
	router := zmqSocket(t, zmq.ROUTER, "")
	if err := router.Bind("tcp://127.0.0.1:*"); err != nil {
		t.Fatal(err)
	}
	routerDown := disconnects(t, router)
	endpoint, _ := router.GetLastEndpoint()
	var port int
	fmt.Sscanf(endpoint[len("tcp://127.0.0.1:"):], "%d", &port)
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
	dealer := zmqSocket(t, zmq.DEALER, "ps4")
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
	time.Sleep(time.Second)
	tx.Send(context.Background(), 1, [][]byte{[]byte("later")}, false)
	dealer.SendMessage([]byte("later"))
	if got, err := router.RecvMessageBytes(0); err != nil || string(got[1]) != "later" {
		t.Fatalf("after a quiet second: %q %v", got, err)
	}
	if _, frames := recv(t, rx); string(frames[0]) != "later" {
		t.Fatalf("after a quiet second: %q", frames[0])
	}
	if n, m := routerDown(), dealerDown(); n != 0 || m != 0 {
		t.Fatalf("libzmq dropped %d (ROUTER) and %d (DEALER) connections for missing heartbeats", n, m)
	}
}
