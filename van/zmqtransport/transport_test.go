package zmqtransport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/gopslite/pslite/van"
)

// freePort returns a TCP port on loopback that nobody listens on.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// queued returns how many messages wait in the writer's queue for node id.
func (t *Transport) queued(id int) int {
	p, err := t.peer(id)
	if err != nil {
		return 0
	}
	p.qMu.Lock()
	defer p.qMu.Unlock()
	return p.n
}

// fill sends to node 1 until a Send would wait, and returns a channel that
// receives the result of a Send left waiting for room.
func fill(t *testing.T, tr *Transport) <-chan error {
	t.Helper()
	msg := [][]byte{make([]byte, 64)}
	for i := 0; ; i++ {
		if i > 100000 {
			t.Fatal("the queue never filled up")
		}
		if _, err := tr.TrySend(1, msg, false); errors.Is(err, van.ErrWouldBlock) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	res := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		_, err := tr.Send(context.Background(), 1, msg, false)
		res <- err
	}()
	<-started
	select {
	case err := <-res:
		t.Fatalf("Send to a full peer returned at once: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	return res
}

// A Send waiting on a peer that does not read holds up neither a reconnect
// nor Close: both return at once, and the Send returns with an error.
func TestBlockedSendHoldsUpNothing(t *testing.T) {
	tr, err := New(Options{WaterMark: 1, QueueLimit: 4, Linger: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Nobody listens: everything waits in the socket's queue.
	if err := tr.Connect(1, "127.0.0.1", freePort(t), van.Identity(9)); err != nil {
		t.Fatal(err)
	}
	res := fill(t, tr)
	start := time.Now()
	if err := tr.Connect(1, "127.0.0.1", freePort(t), van.Identity(9)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("reconnect took %v", d)
	}
	select {
	case err := <-res:
		if !errors.Is(err, van.ErrPeerClosed) {
			t.Errorf("waiting Send returned %v, want ErrPeerClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Send still waits after a reconnect")
	}
	res = fill(t, tr)
	start = time.Now()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	select {
	case err := <-res:
		if err == nil {
			t.Error("waiting Send succeeded on a closed transport")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Send still waits after Close")
	}
}

// A waiting Send gives up with its context.
func TestSendContext(t *testing.T) {
	tr, err := New(Options{WaterMark: 1, QueueLimit: 1, Linger: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Connect(1, "127.0.0.1", freePort(t), van.Identity(9)); err != nil {
		t.Fatal(err)
	}
	fill(t, tr) // leaves one Send waiting with no deadline; Close ends it
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := tr.Send(ctx, 1, [][]byte{{1}}, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Send = %v, want the context's error", err)
	}
}

// Messages from one goroutine arrive in order, whether they went straight
// to ZeroMQ or through the writer's queue.
func TestOrderAcrossQueue(t *testing.T) {
	port := freePort(t)
	send, err := New(Options{WaterMark: 2, QueueLimit: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	if err := send.Connect(1, "127.0.0.1", port, van.Identity(9)); err != nil {
		t.Fatal(err)
	}
	const n = 500
	done := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			if _, err := send.Send(context.Background(), 1, [][]byte{[]byte(fmt.Sprint(i))}, false); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	// Nobody reads yet: once ZeroMQ's queue is full, messages wait in the
	// writer's queue, and once that is full too the sender waits. Receive
	// only then, so that messages went both ways.
	deadline := time.Now().Add(10 * time.Second)
	for send.queued(1) < send.opts.QueueLimit {
		if time.Now().After(deadline) {
			t.Fatalf("the writer's queue holds %d messages, never %d", send.queued(1), send.opts.QueueLimit)
		}
		runtime.Gosched()
	}
	recv, err := New(Options{RecvTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	if _, err := recv.Bind("127.0.0.1", port, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		_, frames := recvWithin(t, recv, 10*time.Second)
		if got := string(frames[0]); got != fmt.Sprint(i) {
			t.Fatalf("message %d is %q", i, got)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Closing a transport with many peers costs about what it costs with one:
// the writers and monitors stop in parallel and at once.
func BenchmarkClose(b *testing.B) {
	for _, peers := range []int{1, 40} {
		b.Run(fmt.Sprintf("peers=%d", peers), func(b *testing.B) {
			recv, err := New(Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer recv.Close()
			port, err := recv.Bind("127.0.0.1", 0, 0)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				tr, err := New(Options{})
				if err != nil {
					b.Fatal(err)
				}
				tr.SetConnectionHandler(func(int, bool) {})
				for id := 0; id < peers; id++ {
					if err := tr.Connect(id, "127.0.0.1", port, van.Identity(1000+peers*i+id)); err != nil {
						b.Fatal(err)
					}
					if _, err := tr.Send(context.Background(), id, [][]byte{{1}}, false); err != nil {
						b.Fatal(err)
					}
				}
				for id := 0; id < peers; id++ {
					recvWithin(b, recv, 10*time.Second)
				}
				b.StartTimer()
				if err := tr.Close(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
			}
		})
	}
}

// heldMonitor returns a transport connected as node 1 to a listening one
// whose connection handler is running, held, on the monitor's goroutine:
// it returns once release is closed.
func heldMonitor(t *testing.T, stopWait time.Duration) (tr *Transport, port int, release chan struct{}) {
	t.Helper()
	srv, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	port, err = srv.Bind("127.0.0.1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	tr, err = New(Options{Linger: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	tr.stopWait = stopWait
	entered := make(chan struct{}, 8)
	release = make(chan struct{})
	tr.SetConnectionHandler(func(int, bool) {
		entered <- struct{}{}
		<-release
	})
	if err := tr.Connect(1, "127.0.0.1", port, van.Identity(9)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered: // the handler now holds the monitor's goroutine
	case <-time.After(10 * time.Second):
		t.Fatal("no connection event")
	}
	return tr, port, release
}

// closeWithin closes tr and returns Close's error; the test fails if Close
// takes 10 s.
func closeWithin(t *testing.T, tr *Transport) error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- tr.Close() }()
	select {
	case err := <-closed:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
		return nil
	}
}

// A writer closing its socket does not wait for the socket's monitor, whose
// goroutine may be busy delivering an event: a connection replaced while
// its handler runs has its writer stopped at once, and Close returns once
// the handler does.
func TestWriterStopsWhileMonitorBusy(t *testing.T) {
	tr, port, release := heldMonitor(t, 0)
	old, err := tr.peer(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Connect(1, "127.0.0.1", port, van.Identity(9)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the replaced connection's writer waits for its monitor")
	}
	close(release)
	if err := closeWithin(t, tr); err != nil {
		t.Fatal(err)
	}
}

// Close does not hang while a socket monitor's goroutine is held in the
// connection handler (terminating ZeroMQ's context waits for that
// goroutine's socket): it gives up after its bound and says why.
func TestCloseBoundedWhileHandlerHeld(t *testing.T) {
	tr, _, release := heldMonitor(t, 200*time.Millisecond)
	defer close(release)
	if err := closeWithin(t, tr); !errors.Is(err, errTermStuck) {
		t.Errorf("Close = %v, want %v", err, errTermStuck)
	}
}
