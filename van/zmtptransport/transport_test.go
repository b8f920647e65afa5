package zmtptransport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van"
)

// wait bounds every wait of these tests: far beyond what anything takes on
// a loaded machine.
const wait = 20 * time.Second

func newTransport(t *testing.T, opts Options) *Transport {
	t.Helper()
	if os.Getenv("ZMTP_TEST_LOG") != "" {
		opts.Log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	tr, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// bound returns a transport bound on loopback, and its port.
func bound(t *testing.T, opts Options) (*Transport, int) {
	t.Helper()
	tr := newTransport(t, opts)
	port, err := tr.Bind("127.0.0.1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tr, port
}

// recv receives the next message, waiting at most wait.
func recv(t *testing.T, tr *Transport) (string, [][]byte) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		ident, frames, err := tr.Recv()
		if errors.Is(err, van.ErrRecvTimeout) {
			continue
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		return string(ident), frames
	}
	t.Fatal("no message arrived")
	return "", nil
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func TestSendRecvInOrder(t *testing.T) {
	rx, port := bound(t, Options{})
	tx := newTransport(t, Options{})
	if err := tx.Connect(1, "127.0.0.1", port, "ps9"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Small messages (written directly or packed), a large shared one
	// (written from the caller's memory) and a large copied one, in order.
	const n = 2000
	big := pattern(zeroCopyMin+100, 3)
	for i := 0; i < n; i++ {
		frames := [][]byte{[]byte(strconv.Itoa(i)), pattern(i%300, byte(i))}
		switch i {
		case 500:
			frames = append(frames, big)
		case 900:
			frames = append(frames, pattern(1<<20, 5))
		}
		var err error
		if i%2 == 0 {
			_, err = tx.Send(ctx, 1, frames, i == 500)
		} else {
			_, err = tx.TrySend(1, frames, false)
		}
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for i := 0; i < n; i++ {
		ident, frames := recv(t, rx)
		if ident != "ps9" {
			t.Fatalf("identity %q", ident)
		}
		if string(frames[0]) != strconv.Itoa(i) || !bytes.Equal(frames[1], pattern(i%300, byte(i))) {
			t.Fatalf("message %d arrived as %q", i, frames[0])
		}
		switch i {
		case 500:
			if len(frames) != 3 || !bytes.Equal(frames[2], big) {
				t.Fatal("the shared large frame differs")
			}
		case 900:
			if len(frames) != 3 || !bytes.Equal(frames[2], pattern(1<<20, 5)) {
				t.Fatal("the copied large frame differs")
			}
		}
	}
}

func TestHeldMessagesLeaveOnFlush(t *testing.T) {
	rx, port := bound(t, Options{})
	tx := newTransport(t, Options{})
	tx.Connect(1, "127.0.0.1", port, "ps2")
	if _, err := tx.Send(context.Background(), 1, [][]byte{[]byte("first")}, false); err != nil {
		t.Fatal(err)
	}
	if _, frames := recv(t, rx); string(frames[0]) != "first" {
		t.Fatalf("got %q", frames[0])
	}
	tx.Hold(1)
	for i := 0; i < 10; i++ {
		tx.TrySend(1, [][]byte{[]byte(strconv.Itoa(i))}, false)
	}
	if _, _, err := rx.Recv(); !errors.Is(err, van.ErrRecvTimeout) {
		t.Fatalf("a held message arrived before Flush: %v", err)
	}
	tx.Flush()
	for i := 0; i < 10; i++ {
		if _, frames := recv(t, rx); string(frames[0]) != strconv.Itoa(i) {
			t.Fatalf("message %d arrived as %q", i, frames[0])
		}
	}
}

func TestAnonymousIdentityAndUnixSockets(t *testing.T) {
	port := 20000 + os.Getpid()%20000
	rx := newTransport(t, Options{Local: true})
	got, err := rx.Bind("", port, 20)
	if err != nil {
		t.Fatal(err)
	}
	tx := newTransport(t, Options{Local: true})
	tx.Connect(0, "", got, "")
	tx.Send(context.Background(), 0, [][]byte{[]byte("hello")}, false)
	ident, frames := recv(t, rx)
	if len(ident) != 5 || ident[0] != 0 || string(frames[0]) != "hello" {
		t.Fatalf("identity % x, frames %q", ident, frames)
	}
	if van.ParseIdentity([]byte(ident)) != van.ParseIdentity(nil) {
		t.Fatal("a made-up identity parses as a node id")
	}
	rx.Close()
	if _, err := os.Stat(fmt.Sprintf("/tmp/%d", got)); !os.IsNotExist(err) {
		t.Errorf("the socket file outlives Close: %v", err)
	}
}

// rawPeer connects to port over TCP and makes the handshake as a DEALER
// with identity, by hand.
func rawPeer(t *testing.T, port int, identity string) net.Conn {
	t.Helper()
	return rawPeerOf(t, port, identity, "")
}

// rawPeerOf is rawPeer presenting process as its incarnation.
func rawPeerOf(t *testing.T, port int, identity, process string) net.Conn {
	t.Helper()
	return rawDealer(t, port, identity, process, false, false)
}

// rawDealer is rawPeerOf that, with keyCache, asks for a key cache, and
// with keyCode, says it codes key lists.
func rawDealer(t *testing.T, port int, identity, process string, keyCache, keyCode bool) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(wait))
	c.Write(greeting())
	buf := make([]byte, greetingLen)
	if _, err := readFull(c, buf); err != nil {
		t.Fatal(err)
	}
	c.Write(ready("DEALER", identity, process, keyCache, keyCode))
	return c
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func TestBadInputIsDroppedAndServingGoesOn(t *testing.T) {
	rx, port := bound(t, Options{MaxFrames: 4, HandshakeTimeout: 2 * time.Second})
	// Garbage instead of a greeting.
	g, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.Write(bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 8))
	// A good handshake, then too many frames, then a frame with bad flags.
	bad := rawPeer(t, port, "ps11")
	bad.Write(appendMessage(nil, [][]byte{{1}, {2}, {3}, {4}, {5}}))
	bad.Write(appendMessage(nil, [][]byte{[]byte("fine")}))
	bad.Write([]byte{0xF0, 1, 'x'})
	// A well-behaved peer.
	good := newTransport(t, Options{})
	good.Connect(1, "127.0.0.1", port, "ps13")
	good.Send(context.Background(), 1, [][]byte{[]byte("from 13")}, false)

	seen := map[string]bool{}
	oversized := 0
	deadline := time.Now().Add(wait)
	for !(seen["ps11 fine"] && seen["ps13 from 13"] && oversized == 1) {
		if time.Now().After(deadline) {
			t.Fatalf("seen %v, oversized %d", seen, oversized)
		}
		ident, frames, err := rx.Recv()
		switch {
		case errors.Is(err, van.ErrRecvTimeout):
		case errors.Is(err, van.ErrOversized):
			oversized++
		case err != nil:
			t.Fatal(err)
		default:
			seen[string(ident)+" "+string(frames[0])] = true
		}
	}
	// The peer that sent bad flags was dropped, the garbage one too.
	for _, c := range []net.Conn{bad, g} {
		c.SetReadDeadline(time.Now().Add(wait))
		if _, err := c.Read(make([]byte, 256)); err == nil {
			// The greeting reply may come first for the garbage one.
			if _, err := c.Read(make([]byte, 256)); err == nil {
				t.Error("a peer that broke the protocol stays connected")
			}
		}
	}
}

func TestPingIsAnswered(t *testing.T) {
	_, port := bound(t, Options{})
	c := rawPeer(t, port, "ps5")
	// Read the ROUTER's READY first.
	fr := &frameReader{r: bufio.NewReader(c), maxFrames: 1, maxBytes: 1 << 16}
	if _, cmd, err := fr.readMessage(); err != nil || cmd == nil {
		t.Fatalf("READY: %v", err)
	}
	c.Write(command("PING", []byte{0, 0, 'h', 'i'}))
	_, cmd, err := fr.readMessage()
	if err != nil {
		t.Fatal(err)
	}
	if name, body, _ := parseCommand(cmd); name != "PONG" || string(body) != "hi" {
		t.Fatalf("reply %q %q", name, body)
	}
}

func TestHandover(t *testing.T) {
	rx, port := bound(t, Options{})
	first := rawPeer(t, port, "ps7")
	first.Write(appendMessage(nil, [][]byte{[]byte("a")}))
	if ident, frames := recv(t, rx); ident != "ps7" || string(frames[0]) != "a" {
		t.Fatalf("%q %q", ident, frames[0])
	}
	// A second connection with the same identity is not heard while the
	// first holds it...
	second := rawPeer(t, port, "ps7")
	second.Write(appendMessage(nil, [][]byte{[]byte("b")}))
	first.Write(appendMessage(nil, [][]byte{[]byte("c")}))
	if _, frames := recv(t, rx); string(frames[0]) != "c" {
		t.Fatalf("got %q, want c (b came from a connection without the identity)", frames[0])
	}
	// ...and takes it over with handover on.
	rx.SetHandover(true)
	second.Write(appendMessage(nil, [][]byte{[]byte("d")}))
	_, frames := recv(t, rx)
	if string(frames[0]) == "b" {
		// b was still unread when handover came on.
		_, frames = recv(t, rx)
	}
	if string(frames[0]) != "d" {
		t.Fatalf("got %q, want d", frames[0])
	}
	first.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 256)
	for {
		if _, err := first.Read(buf); err != nil {
			break // closed by the handover
		}
	}
}

// A connection accepted before the last one that held its identity never
// takes the identity back: the node closes it, and nothing it sends is
// delivered. (Its sender connected again since: were it heard once the
// newer connection went, messages it still carried would arrive after
// newer ones. A reader that falls behind on a starved CPU did that.)
func TestStaleConnectionNeverTakesItsIdentityBack(t *testing.T) {
	rx, port := bound(t, Options{RecvTimeout: 20 * time.Millisecond})
	first := rawPeer(t, port, "ps7")
	first.Write(appendMessage(nil, [][]byte{[]byte("first")}))
	if ident, frames := recv(t, rx); ident != "ps7" || string(frames[0]) != "first" {
		t.Fatalf("%q %q", ident, frames[0])
	}
	older := rawPeer(t, port, "ps7") // accepted before newer: rawPeer waits for the greeting
	newer := rawPeer(t, port, "ps7")
	// Once first goes, newer takes the identity (its messages are
	// dropped until the node has let first go).
	first.Close()
	heardFrom(t, rx, newer, "newer", "")
	newer.Close()
	older.Write(appendMessage(nil, [][]byte{[]byte("stale")}))
	older.SetReadDeadline(time.Now().Add(wait))
	for {
		_, err := older.Read(make([]byte, 256)) // the node's READY may come first
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a stale connection is still open after %v", wait)
		}
		if err != nil {
			break // closed by the node
		}
	}
	// The next connection is heard, and the stale message never was.
	heardFrom(t, rx, rawPeer(t, port, "ps7"), "last", "newer")
}

// heardFrom writes messages "what 0", "what 1", ... on c until one of them
// arrives at rx, within wait. Messages of an earlier call's, named
// earlier, are let pass (a call returns on the first of its own to
// arrive); any other message fails t.
func heardFrom(t *testing.T, rx *Transport, c net.Conn, what, earlier string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for i := 0; time.Now().Before(deadline); i++ {
		c.Write(appendMessage(nil, [][]byte{fmt.Appendf(nil, "%s %d", what, i)}))
		ident, frames, err := rx.Recv()
		if errors.Is(err, van.ErrRecvTimeout) {
			continue
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		name, _, _ := strings.Cut(string(frames[0]), " ")
		if earlier != "" && name == earlier {
			continue
		}
		if ident := string(ident); ident != "ps7" || name != what {
			t.Fatalf("got %q from %q, want a message %q sent", frames[0], ident, what)
		}
		return
	}
	t.Fatalf("no message %q arrived within %v", what, wait)
}

// events records what a connection handler reports.
type events struct {
	ch chan string
}

func (e *events) handler(id int, up bool) {
	e.ch <- fmt.Sprintf("%d %v", id, up)
}

func (e *events) next(t *testing.T) string {
	t.Helper()
	select {
	case ev := <-e.ch:
		return ev
	case <-time.After(wait):
		t.Fatal("no connection event")
		return ""
	}
}

// connect connects tx to node id at port, reporting connection events to
// the returned recorder, and waits until the connection is up.
func connect(t *testing.T, tx *Transport, id, port int, identity string) *events {
	t.Helper()
	ev := &events{ch: make(chan string, 16)}
	tx.SetConnectionHandler(ev.handler)
	tx.Connect(id, "127.0.0.1", port, identity)
	if e := ev.next(t); e != fmt.Sprintf("%d true", id) {
		t.Fatalf("event %q", e)
	}
	return ev
}

func TestReconnectKeepsWhatWasQueued(t *testing.T) {
	rx, port := bound(t, Options{})
	tx := newTransport(t, Options{})
	ev := connect(t, tx, 3, port, "ps1")
	tx.Send(context.Background(), 3, [][]byte{[]byte("before")}, false)
	if _, frames := recv(t, rx); string(frames[0]) != "before" {
		t.Fatalf("got %q", frames[0])
	}
	rx.Close()
	if e := ev.next(t); e != "3 false" {
		t.Fatalf("event %q", e)
	}
	// Sent while the peer is away: queued, then delivered on reconnection.
	for i := 0; i < 5; i++ {
		if _, err := tx.Send(context.Background(), 3, [][]byte{[]byte(strconv.Itoa(i))}, false); err != nil {
			t.Fatal(err)
		}
	}
	rx2 := newTransport(t, Options{})
	if _, err := rx2.Bind("127.0.0.1", port, 0); err != nil {
		t.Fatal(err)
	}
	if e := ev.next(t); e != "3 true" {
		t.Fatalf("event %q", e)
	}
	for i := 0; i < 5; i++ {
		if _, frames := recv(t, rx2); string(frames[0]) != strconv.Itoa(i) {
			t.Fatalf("message %d arrived as %q", i, frames[0])
		}
	}
}

func TestFullQueue(t *testing.T) {
	// Nobody listens: everything queues.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	tx := newTransport(t, Options{QueueLimit: 8})
	tx.Connect(1, "127.0.0.1", port, "ps1")
	msg := [][]byte{[]byte("x")}
	for i := 0; i < 8; i++ {
		if _, err := tx.Send(context.Background(), 1, msg, false); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := tx.Send(ctx, 1, msg, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send on a full queue: %v, want the context's error", err)
	}
	for i := 0; i < 8; i++ {
		if _, err := tx.TrySend(1, msg, false); err != nil {
			t.Fatalf("TrySend %d within twice the limit: %v", i, err)
		}
	}
	if _, err := tx.TrySend(1, msg, false); !errors.Is(err, van.ErrWouldBlock) {
		t.Fatalf("TrySend past twice the limit: %v", err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := tx.Send(context.Background(), 1, msg, false)
		res <- err
	}()
	p, _ := tx.peer(1)
	for deadline := time.Now().Add(wait); ; runtime.Gosched() {
		p.qMu.Lock()
		waiting := p.room.Waiters() > 0
		p.qMu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Send never waited for room")
		}
	}
	tx.Disconnect(1)
	select {
	case err := <-res:
		if !errors.Is(err, van.ErrPeerClosed) {
			t.Fatalf("waiting Send after Disconnect: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("a waiting Send outlived Disconnect")
	}
	if _, err := tx.Send(context.Background(), 1, msg, false); !errors.Is(err, van.ErrNoPeer) {
		t.Fatalf("Send after Disconnect: %v", err)
	}
}

func TestCloseIsBoundedWithAPeerThatDoesNotRead(t *testing.T) {
	// A peer that makes the handshake and then reads nothing: the writer's
	// write waits on a full TCP buffer when Close comes.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write(greeting())
		c.Write(ready("ROUTER", "", "", false, false))
		<-stop // holds the connection open, reading nothing
	}()
	linger := 200 * time.Millisecond
	tx, err := New(Options{Linger: linger})
	if err != nil {
		t.Fatal(err)
	}
	connect(t, tx, 1, l.Addr().(*net.TCPAddr).Port, "ps1")
	big := make([]byte, 4<<20)
	for i := 0; i < 16; i++ {
		if _, err := tx.TrySend(1, [][]byte{big}, false); err != nil {
			break
		}
	}
	start := time.Now()
	if err := tx.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > linger+5*time.Second {
		t.Fatalf("Close took %v with a linger of %v", took, linger)
	}
	if _, err := tx.Send(context.Background(), 1, [][]byte{{1}}, false); !errors.Is(err, van.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
}

func TestSilentPeersAreDropped(t *testing.T) {
	const timeout = 300 * time.Millisecond
	// A ROUTER that makes the handshake and then never answers a PING:
	// the DEALER drops the connection and reports it down.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			c.Write(greeting())
			c.Write(ready("ROUTER", "", "", false, false))
			go func() { // reads, so that nothing waits on a full buffer
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	tx := newTransport(t, Options{LinkTimeout: timeout})
	ev := &events{ch: make(chan string, 16)}
	tx.SetConnectionHandler(ev.handler)
	start := time.Now()
	tx.Connect(1, "127.0.0.1", l.Addr().(*net.TCPAddr).Port, "ps1")
	if e := ev.next(t); e != "1 true" {
		t.Fatalf("event %q", e)
	}
	if e := ev.next(t); e != "1 false" {
		t.Fatalf("event %q", e)
	}
	if took := time.Since(start); took < timeout {
		t.Fatalf("dropped after %v, before the link timeout %v", took, timeout)
	}

	// A DEALER that makes the handshake and then never answers a PING:
	// the ROUTER closes its connection.
	_, port := bound(t, Options{LinkTimeout: timeout})
	c := rawPeer(t, port, "ps3")
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 4096)
	pings := 0
	for {
		n, err := c.Read(buf)
		if err != nil {
			break
		}
		pings += bytes.Count(buf[:n], []byte("\x04PING"))
	}
	if pings == 0 {
		t.Fatal("the connection closed without a PING")
	}
}

func TestLargeFramesAreLentAndReused(t *testing.T) {
	for _, poison := range []bool{false, true} {
		t.Run(fmt.Sprintf("poison=%v", poison), func(t *testing.T) {
			rx, port := bound(t, Options{PoisonLent: poison})
			tx := newTransport(t, Options{})
			tx.Connect(1, "127.0.0.1", port, "ps1")
			big := pattern(lendMin+10, 1)
			send := func() {
				if _, err := tx.Send(context.Background(), 1, [][]byte{[]byte("meta"), big, {1}}, false); err != nil {
					t.Fatal(err)
				}
			}
			recvLent := func() ([][]byte, *message.Loan) {
				t.Helper()
				deadline := time.Now().Add(wait)
				for time.Now().Before(deadline) {
					_, frames, loan, err := rx.RecvLent()
					if errors.Is(err, van.ErrRecvTimeout) {
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					return frames, loan
				}
				t.Fatal("no message arrived")
				return nil, nil
			}
			send()
			frames, loan := recvLent()
			if loan == nil || loan.Mask() != 1<<1 || !bytes.Equal(frames[1], big) {
				t.Fatalf("loan %v (want one of frame 1), frame 1 intact %v", loan, bytes.Equal(frames[1], big))
			}
			kept := frames[1]
			// Whatever the receiver does to its list of frames (Own puts
			// copies in it), the loan gives back the buffer it lent.
			frames[1] = message.Clone(frames[1])
			loan.Drop()
			if poison && frames[1][0] == 0xDB {
				t.Fatal("the loan poisoned the receiver's copy, not the lent buffer")
			}
			send()
			frames, loan = recvLent()
			if !bytes.Equal(frames[1], big) {
				t.Fatal("the second large frame differs")
			}
			reused := &frames[1][0] == &kept[0]
			if reused == poison {
				t.Fatalf("with poison %v, the second large frame reused the first one's buffer: %v", poison, reused)
			}
			if poison && (kept[0] != 0xDB || kept[len(kept)-1] != 0xDB) {
				t.Fatalf("a view kept past its release reads %#x...%#x, want 0xDB", kept[0], kept[len(kept)-1])
			}
			loan.Drop()
			// Recv (not lent) gives the frames to the caller: nothing to give back.
			send()
			if _, frames := recv(t, rx); !bytes.Equal(frames[1], big) {
				t.Fatal("the frame differs")
			}
		})
	}
}

// TestPingsInterleaveWithMessages: heartbeat PINGs, and the PONGs that
// answer the peer's, go on a connection between the messages of a stream
// without corrupting any of them (the writer reuses its buffers, and sends
// the same PING again), and each side answers the other's PINGs while the
// stream flows, which is what keeps a busy link from being declared dead.
//
// Nothing here depends on timing: a tap between the two transports reads
// the ZMTP stream each way, and every syncEvery messages the sender waits
// until a PING and a PONG of its own have gone by, so PINGs and PONGs lie
// between messages however the CPU is scheduled. The link timeout is far
// beyond any stall of a loaded machine (a 24 ms one dropped the connection
// 2 runs in 5 under load); what is checked is counted, not timed.
func TestPingsInterleaveWithMessages(t *testing.T) {
	opts := Options{LinkTimeout: 30 * time.Second, pingEvery: 2 * time.Millisecond}
	rx, port := bound(t, opts)
	tap := newZMTPTap(t, port)
	tx := newTransport(t, opts)
	ev := connect(t, tx, 1, tap.port, "ps1")
	const (
		n         = 20000
		syncEvery = 100
		syncs     = (n - 1) / syncEvery // each with messages before and after it
	)
	// Message i: its number, then a small body, or a large one (written
	// from a queue of buffers of its own, not packed) every 1000th.
	body := func(i int) []byte {
		if i%1000 == 500 {
			return pattern(zeroCopyMin+i, byte(i))
		}
		return pattern(10+i%50, byte(i))
	}
	done := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			frames := [][]byte{[]byte(strconv.Itoa(i)), body(i)}
			if _, err := tx.Send(context.Background(), 1, frames, false); err != nil {
				done <- err
				return
			}
			if (i+1)%syncEvery == 0 && i+1 < n {
				// A PING and a PONG go by, written alone, before the
				// next message.
				pings, pongs := tap.count(toListener, 'P'), tap.count(toListener, 'O')
				if err := tap.waitFor(func() bool {
					return tap.count(toListener, 'P') > pings && tap.count(toListener, 'O') > pongs
				}); err != nil {
					done <- fmt.Errorf("after message %d: %w", i, err)
					return
				}
			}
		}
		done <- nil
	}()
	deadline := time.Now().Add(wait)
	for i := 0; i < n; {
		_, frames, err := rx.Recv()
		if errors.Is(err, van.ErrRecvTimeout) {
			select {
			case err := <-done: // the sender stopped short
				if err != nil {
					t.Fatal(err)
				}
				done <- nil
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("message %d did not arrive", i)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if len(frames) != 2 || string(frames[0]) != strconv.Itoa(i) || !bytes.Equal(frames[1], body(i)) {
			t.Fatalf("message %d arrived as %q", i, frames[0])
		}
		i++
		deadline = time.Now().Add(wait)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// What the sender sent: n messages (the tap reads what it has passed
	// on, so it may lag the receiver), and between the first and the last,
	// a PING and a PONG at least at each of the sender's waits.
	if err := tap.waitFor(func() bool { return tap.count(toListener, 'M') >= n }); err != nil {
		t.Fatalf("the tap read %d messages of %d: %v", tap.count(toListener, 'M'), n, err)
	}
	sent := tap.events(toListener)
	first, last := bytes.IndexByte(sent, 'M'), bytes.LastIndexByte(sent, 'M')
	within := sent[first:last]
	if m, p, o := bytes.Count(sent, []byte("M")), bytes.Count(within, []byte("P")), bytes.Count(within, []byte("O")); m != n || p < syncs || o < syncs {
		t.Fatalf("the sender's stream held %d messages (want %d), and between them %d PINGs and %d PONGs (want %d of each at least)", m, n, p, o, syncs)
	}
	// The receiver read every PING that came before the last message, and
	// answered each before reading on: the sender hears them all.
	pings := bytes.Count(within, []byte("P"))
	if err := tap.waitFor(func() bool { return tap.count(toDialer, 'O') >= pings }); err != nil {
		t.Fatalf("%d PINGs went before the last message, %d PONGs came back: %v", pings, tap.count(toDialer, 'O'), err)
	}
	if err := tap.failure(); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-ev.ch:
		t.Fatalf("the connection went %q", e)
	default:
	}
	t.Logf("%d messages; between them %d PINGs and %d PONGs from the sender; %d PONGs back", n, pings, bytes.Count(within, []byte("O")), tap.count(toDialer, 'O'))
}

// The directions of the stream a zmtpTap reads.
const (
	toListener = 0 // from the dialing transport to the bound one
	toDialer   = 1
)

// zmtpTap forwards one ZMTP connection to a bound transport and reads what
// goes by each way, after the greeting: 'M' for a message, 'R' for READY,
// 'P' for a PING, 'O' for a PONG, '?' for another command.
type zmtpTap struct {
	port    int
	mu      sync.Mutex
	seen    [2][]byte
	err     error         // a stream that did not parse
	changed chan struct{} // closed, and replaced, when seen or err changes
}

// newZMTPTap listens on loopback for one connection, which it forwards to
// port.
func newZMTPTap(t *testing.T, port int) *zmtpTap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tap := &zmtpTap{port: ln.Addr().(*net.TCPAddr).Port, changed: make(chan struct{})}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		in, err := ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			in.Close()
			tap.fail(err)
			return
		}
		mu.Lock()
		conns = append(conns, in, out)
		mu.Unlock()
		wg.Add(2)
		go func() { defer wg.Done(); tap.forward(toListener, in, out) }()
		go func() { defer wg.Done(); tap.forward(toDialer, out, in) }()
	}()
	return tap
}

// forward copies from src to dst, reading the frames as they go by, until
// either end closes.
func (tap *zmtpTap) forward(dir int, src, dst net.Conn) {
	defer src.Close()
	defer dst.Close()
	br := bufio.NewReaderSize(io.TeeReader(src, dst), readBuffer)
	if _, err := io.ReadFull(br, make([]byte, greetingLen)); err != nil {
		return
	}
	fr := &frameReader{r: br, maxFrames: defaultMaxFrames, maxBytes: defaultMaxMessageBytes}
	for {
		_, cmd, err := fr.readMessage()
		if err != nil {
			if errors.Is(err, errProtocol) || errors.Is(err, errTooLarge) {
				tap.fail(fmt.Errorf("direction %d: %w", dir, err))
			}
			return // a connection closed
		}
		what := byte('M')
		if cmd != nil {
			name, _, err := parseCommand(cmd)
			switch {
			case err != nil:
				tap.fail(fmt.Errorf("direction %d: %w", dir, err))
				return
			case name == "READY":
				what = 'R'
			case name == "PING":
				what = 'P'
			case name == "PONG":
				what = 'O'
			default:
				what = '?'
			}
		}
		tap.mu.Lock()
		tap.seen[dir] = append(tap.seen[dir], what)
		tap.notifyLocked()
		tap.mu.Unlock()
	}
}

func (tap *zmtpTap) notifyLocked() {
	close(tap.changed)
	tap.changed = make(chan struct{})
}

func (tap *zmtpTap) fail(err error) {
	tap.mu.Lock()
	if tap.err == nil {
		tap.err = err
	}
	tap.notifyLocked()
	tap.mu.Unlock()
}

// failure returns the error of a stream that did not parse, if any.
func (tap *zmtpTap) failure() error {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return tap.err
}

// events returns what went by in direction dir so far.
func (tap *zmtpTap) events(dir int) []byte {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return bytes.Clone(tap.seen[dir])
}

// count returns how many of what went by in direction dir so far.
func (tap *zmtpTap) count(dir int, what byte) int {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return bytes.Count(tap.seen[dir], []byte{what})
}

// waitFor waits until cond holds (it is checked whenever something goes
// by), for at most wait; it fails early on a stream that did not parse.
func (tap *zmtpTap) waitFor(cond func() bool) error {
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		tap.mu.Lock()
		ch, err := tap.changed, tap.err
		tap.mu.Unlock()
		if err != nil {
			return err
		}
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-timeout.C:
			return fmt.Errorf("not within %v", wait)
		}
	}
}

// TestIncarnationsRefuseAnotherProcess: once the node's incarnations are
// known, a connection that claims a node's identity from another process
// (a replaced node's woken predecessor) is refused at its handshake, with
// the reason, while the node's own process connects, taking the identity
// over from a connection of the old process.
func TestIncarnationsRefuseAnotherProcess(t *testing.T) {
	rx, port := bound(t, Options{})
	old := newTransport(t, Options{Process: "aaaa"})
	if err := old.Connect(1, "127.0.0.1", port, "ps9"); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Send(context.Background(), 1, [][]byte{[]byte("from the old process")}, false); err != nil {
		t.Fatal(err)
	}
	if _, frames := recv(t, rx); string(frames[0]) != "from the old process" {
		t.Fatalf("got %q", frames[0])
	}
	if got := rx.ProcessOf([]byte("ps9")); got != "aaaa" {
		t.Fatalf("ProcessOf = %q", got)
	}
	// Node 9 is now another process: the old one's connection is closed,
	// and so is every new one it makes.
	rx.SetIncarnations(map[int]string{9: "bbbb"})
	repl := newTransport(t, Options{Process: "bbbb"})
	if err := repl.Connect(1, "127.0.0.1", port, "ps9"); err != nil {
		t.Fatal(err)
	}
	if _, err := repl.Send(context.Background(), 1, [][]byte{[]byte("from the replacement")}, false); err != nil {
		t.Fatal(err)
	}
	if _, frames := recv(t, rx); string(frames[0]) != "from the replacement" {
		t.Fatalf("got %q", frames[0])
	}
	// The old process tries again: refused at each handshake, so nothing
	// it sends gets in.
	old.Send(context.Background(), 1, [][]byte{[]byte("from the old process again")}, false)
	deadline := time.Now().Add(wait)
	for old.refused.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the old process's handshakes were not refused")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ident, frames, err := rx.Recv(); err == nil {
		t.Fatalf("received %q from %q", frames[0], ident)
	}
	if got := rx.ProcessOf([]byte("ps9")); got != "bbbb" {
		t.Fatalf("ProcessOf = %q, want the replacement's", got)
	}
}
