package zmqtransport

import (
	"bytes"
	"context"
	"net"
	"runtime"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van"
)

// zmqPair returns a transport connected as node 9 to node 1 and a function
// that creates node 1's transport, bound to the port the first connects to:
// until it is called, whatever is sent waits in the sender's queue.
func zmqPair(t testing.TB) (send *Transport, bind func() *Transport) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	send, err = New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := send.Connect(1, "127.0.0.1", port, van.Identity(9)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { send.Close() })
	return send, func() *Transport {
		recv, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := recv.Bind("127.0.0.1", port, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { recv.Close() })
		return recv
	}
}

var sink = make([][]byte, 16)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func recvWithin(t testing.TB, tr *Transport, d time.Duration) ([]byte, [][]byte) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ident, frames, err := tr.Recv()
		if err == nil {
			return ident, frames
		}
		if err != van.ErrRecvTimeout || time.Now().After(deadline) {
			t.Fatalf("Recv: %v", err)
		}
	}
}

func TestRawSocketHandle(t *testing.T) {
	ctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Term()
	for _, typ := range []zmq.Type{zmq.ROUTER, zmq.DEALER, zmq.PAIR} {
		s, err := ctx.NewSocket(typ)
		if err != nil {
			t.Fatal(err)
		}
		if rawSocket(s) == nil {
			t.Errorf("no libzmq handle for a %v socket", typ)
		}
		s.Close()
	}
}

// TestZeroCopyFrames sends messages mixing small frames (copied) and large
// shared ones (sent from Go memory) while the receiver does not exist yet,
// so that they wait in the sender's queue while the collector runs and the
// memory they came from is reused; then it checks they arrive intact and
// that every pinned frame is released.
func TestZeroCopyFrames(t *testing.T) {
	send, bind := zmqPair(t)
	sizes := [][]int{{10}, {10, zeroCopyMin, 3}, {zeroCopyMin - 1, 5 << 20}, {0, 8 << 20, 1},
		// more frames than one call sends, and more small bytes than the
		// receiver packs together
		{1, 2, 3, 4, 5}, {8, zeroCopyMin, 8, zeroCopyMin, 8}, {4096, 4096, 4096, 4096, 4096, 4097, 0}}
	var want [][][]byte
	for _, shared := range []bool{false, true} {
		for i, sz := range sizes {
			func() { // the frames are unreachable once this returns
				frames := make([][]byte, len(sz))
				for j, n := range sz {
					frames[j] = pattern(n, byte(i*10+j))
				}
				if _, err := send.Send(context.Background(), 1, frames, shared); err != nil {
					t.Fatal(err)
				}
			}()
			frames := make([][]byte, len(sz))
			for j, n := range sz {
				frames[j] = pattern(n, byte(i*10+j))
			}
			want = append(want, frames)
		}
	}
	for range 3 {
		runtime.GC()
		for k := range sink { // reuse freed memory if anything was freed
			sink[k] = pattern(1<<20, 0xEE)
		}
	}
	recv := bind()
	if recv.reader == nil {
		t.Fatal("the receiver does not use the frame reader")
	}
	for i, w := range want {
		ident, got := recvWithin(t, recv, 10*time.Second)
		if van.ParseIdentity(ident) != 9 {
			t.Fatalf("identity %q", ident)
		}
		if len(got) != len(w) {
			t.Fatalf("message %d: %d frames, want %d", i, len(got), len(w))
		}
		for j := range w {
			if !bytes.Equal(got[j], w[j]) {
				t.Fatalf("message %d frame %d (%d bytes) corrupted", i, j, len(w[j]))
			}
		}
	}
	// libzmq releases a frame on its I/O thread once it has written it out,
	// with no event to wait on: poll, with a deadline.
	deadline := time.Now().Add(5 * time.Second)
	for pinnedFrames.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d frames still pinned after delivery", pinnedFrames.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestZeroCopyReleasedOnClose checks that frames queued for a peer that
// never reads them are released when the transport closes.
func TestZeroCopyReleasedOnClose(t *testing.T) {
	tr, err := New(Options{Linger: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Nobody listens on the port: messages wait in the socket's queue.
	if err := tr.Connect(1, "127.0.0.1", 1, van.Identity(9)); err != nil {
		t.Fatal(err)
	}
	before := pinnedFrames.Load()
	for range 3 {
		if _, err := tr.Send(context.Background(), 1, [][]byte{pattern(8, 0), pattern(1<<20, 1)}, true); err != nil {
			t.Fatal(err)
		}
	}
	if n := pinnedFrames.Load() - before; n != 3 {
		t.Fatalf("%d frames pinned while queued, want 3", n)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if n := pinnedFrames.Load() - before; n != 0 {
		t.Fatalf("%d frames still pinned after Close", n)
	}
}

// TestBindPicksFreePort binds two transports to port 0: each gets its own
// port from the kernel, and a peer reaches it there.
func TestBindPicksFreePort(t *testing.T) {
	var ports []int
	var recvs []*Transport
	for range 2 {
		tr, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		port, err := tr.Bind("127.0.0.1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, port)
		recvs = append(recvs, tr)
	}
	if ports[0] <= 0 || ports[0] == ports[1] {
		t.Fatalf("ports %v", ports)
	}
	send, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	if err := send.Connect(1, "127.0.0.1", ports[1], van.Identity(9)); err != nil {
		t.Fatal(err)
	}
	if _, err := send.Send(context.Background(), 1, [][]byte{[]byte("hi")}, false); err != nil {
		t.Fatal(err)
	}
	if _, got := recvWithin(t, recvs[1], 5*time.Second); string(got[0]) != "hi" {
		t.Fatalf("got %q", got)
	}
}

// TestRecvLent checks that RecvLent lends large frames (views of libzmq's
// buffers, marked in the mask) and copies small ones, that the views hold
// the bytes sent until given back, and that PoisonLent overwrites them
// when they are.
func TestRecvLent(t *testing.T) {
	for _, poison := range []bool{false, true} {
		send, _ := zmqPair(t)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		recv, err := New(Options{PoisonLent: poison})
		if err != nil {
			t.Fatal(err)
		}
		defer recv.Close()
		if _, err := recv.Bind("127.0.0.1", port, 0); err != nil {
			t.Fatal(err)
		}
		if err := send.Connect(2, "127.0.0.1", port, van.Identity(9)); err != nil {
			t.Fatal(err)
		}
		big, small := pattern(zeroCopyMin, 3), pattern(100, 4)
		if _, err := send.Send(context.Background(), 2, [][]byte{small, big, small}, false); err != nil {
			t.Fatal(err)
		}
		before := lentMessages.Load()
		var ident []byte
		var frames [][]byte
		var loan *message.Loan
		deadline := time.Now().Add(10 * time.Second)
		for {
			ident, frames, loan, err = recv.RecvLent()
			if err != van.ErrRecvTimeout || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if van.ParseIdentity(ident) != 9 || len(frames) != 3 || loan == nil || loan.Mask() != 1<<1 {
			t.Fatalf("identity %q, %d frames, loan %v", ident, len(frames), loan)
		}
		if !bytes.Equal(frames[0], small) || !bytes.Equal(frames[1], big) || !bytes.Equal(frames[2], small) {
			t.Fatal("frames differ from those sent")
		}
		if n := lentMessages.Load() - before; n != 1 {
			t.Fatalf("%d messages lent, want 1", n)
		}
		kept := frames[1] // a handle that keeps a view: wrong, but it happens
		misuses := message.LoanMisuses()
		loan.Drop()
		loan.Drop() // a second drop gives nothing back, and is counted
		if n := message.LoanMisuses() - misuses; n != 1 {
			t.Fatalf("%d misuses counted, want 1", n)
		}
		if n := lentMessages.Load() - before; n != 0 {
			t.Fatalf("%d messages still lent after release", n)
		}
		if poison {
			// Without poison the memory is libzmq's to reuse or free; with
			// it, it stays, overwritten, for a while.
			if kept[0] != 0xDB || kept[len(kept)-1] != 0xDB {
				t.Fatalf("poisoned view reads %#x...%#x, want 0xDB", kept[0], kept[len(kept)-1])
			}
		}
		if !bytes.Equal(frames[0], small) {
			t.Fatal("a copied frame changed with the release")
		}
	}
}
