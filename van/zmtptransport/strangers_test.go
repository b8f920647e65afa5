package zmtptransport

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// lockedBuffer is a log destination for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Connections that fail their handshake are each dropped, but what they
// make the transport log is limited to a burst a second: 200 of them,
// opened within a second or two, log a few dozen lines at most.
func TestStrangersCannotFloodTheLog(t *testing.T) {
	var log lockedBuffer
	_, port := bound(t, Options{Log: zerolog.New(&log), HandshakeTimeout: 5 * time.Second})
	const strangers = 200
	var wg sync.WaitGroup
	for range strangers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(wait))
			c.Write(bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 8))
			io.Copy(io.Discard, c) // until the transport drops it
		}()
	}
	wg.Wait()
	lines := strings.Count(log.String(), "handshake failed")
	if lines == 0 || lines > 40 {
		t.Errorf("%d strangers made %d log lines, want 1 to 40", strangers, lines)
	}
}

// A peer may send its first messages in the same write as its READY: they
// reach the receiver whole, small and large.
func TestMessagesWithTheReady(t *testing.T) {
	rx, port := bound(t, Options{})
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(wait))
	c.Write(greeting())
	if _, err := readFull(c, make([]byte, greetingLen)); err != nil {
		t.Fatal(err)
	}
	big := pattern(3<<20, 9)
	first := append(ready("DEALER", "ps9", "", false, false), appendMessage(nil, [][]byte{[]byte("small")})...)
	first = append(first, appendMessage(nil, [][]byte{[]byte("large"), big})...)
	if _, err := c.Write(first); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"small", "large"} {
		ident, frames := recv(t, rx)
		if ident != "ps9" || string(frames[0]) != want {
			t.Fatalf("got %q from %q, want %q from ps9", frames[0], ident, want)
		}
		if want == "large" && !bytes.Equal(frames[1], big) {
			t.Fatal("the large frame sent with the READY arrived changed")
		}
	}
}

// A connection that is not a member of the job, by its identity or for
// want of one, may send small messages only: one that announces a large
// frame is dropped at the header, before its bytes arrive (and before
// anything is allocated for them), while members keep sending large ones.
func TestStrangersSendSmallMessagesOnly(t *testing.T) {
	member := func(id string) bool { return id == "ps9" }
	rx, port := bound(t, Options{IsMember: member, StrangerMaxBytes: 4 << 10})
	big := pattern(2<<20, 3)
	for _, c := range []struct {
		name, identity string
	}{{"no identity", ""}, {"not a member", "ps10"}} {
		t.Run(c.name, func(t *testing.T) {
			s := rawPeer(t, port, c.identity)
			// A small message passes.
			s.Write(appendMessage(nil, [][]byte{[]byte("small " + c.name)}))
			if _, frames := recv(t, rx); string(frames[0]) != "small "+c.name {
				t.Fatalf("got %q", frames[0])
			}
			// A header announcing 1 GiB - 1 KiB: dropped with no byte sent.
			s.Write(appendHeader(nil, 0, 1<<30-1<<10))
			s.SetReadDeadline(time.Now().Add(wait))
			var ne net.Error
			if _, err := io.Copy(io.Discard, s); errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the connection was not closed")
			}
		})
	}
	m := rawPeer(t, port, "ps9")
	m.Write(appendMessage(nil, [][]byte{[]byte("large"), big}))
	if ident, frames := recv(t, rx); ident != "ps9" || !bytes.Equal(frames[1], big) {
		t.Fatalf("a member's large message: %q from %q", frames[0], ident)
	}
}

// Idle and half-open connections cannot pile up: past MaxStrangers the
// one longest in its handshake is closed, with a log line at most a burst
// a second, and the strangers kept hold a small read buffer each. A member
// still connects (its handshake is quick) and sends large messages, and
// closed strangers free their places.
func TestStrangerConnectionsAreCapped(t *testing.T) {
	var log lockedBuffer
	const max, conns = 40, 400
	member := func(id string) bool { return id == "ps9" }
	rx, port := bound(t, Options{Log: zerolog.New(&log), MaxStrangers: max, IsMember: member})
	idle := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range conns {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	// Once all are accepted, all but the newest max are closed: reading
	// one ends (EOF or reset) rather than waiting.
	deadline := time.Now().Add(wait)
	for {
		rx.mu.Lock()
		accepted := rx.accepted
		rx.mu.Unlock()
		if accepted >= conns {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections accepted", accepted, conns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var closed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(time.Second))
			_, err := io.Copy(io.Discard, c) // the greeting, then EOF if closed
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) {
				closed.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := closed.Load(); n != conns-max {
		t.Fatalf("%d of %d idle connections closed with a cap of %d, want %d", n, conns, max, conns-max)
	}
	if n := strings.Count(log.String(), "too many connections"); n == 0 || n > 60 {
		t.Errorf("%d closed connections made %d log lines, want 1 to 60", conns-max, n)
	}
	// A member is no stranger: it connects past the cap.
	m := rawPeer(t, port, "ps9")
	big := pattern(2<<20, 5)
	m.Write(appendMessage(nil, [][]byte{[]byte("large"), big}))
	if ident, frames := recv(t, rx); ident != "ps9" || !bytes.Equal(frames[1], big) {
		t.Fatalf("a member's large message: %q from %q", frames[0], ident)
	}
	// The strangers gone, their places are free again.
	for _, c := range idle {
		c.Close()
	}
	idle = idle[:0]
	deadline = time.Now().Add(wait)
	for rx.strangers.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d strangers still counted after they closed", rx.strangers.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := rawPeer(t, port, "")
	s.Write(appendMessage(nil, [][]byte{[]byte("hello")}))
	if _, frames := recv(t, rx); string(frames[0]) != "hello" {
		t.Fatalf("a stranger after the others left: %q", frames[0])
	}
}

// A second connection claiming a member's identity while the member holds
// it is heard no more than a stranger: a large frame's header drops it,
// before its bytes cost memory, and the member is not disturbed.
func TestIdentityClaimerSendsSmallMessagesOnly(t *testing.T) {
	member := func(id string) bool { return id == "ps9" }
	rx, port := bound(t, Options{IsMember: member, StrangerMaxBytes: 4 << 10})
	m := rawPeer(t, port, "ps9")
	m.Write(appendMessage(nil, [][]byte{[]byte("first")}))
	if ident, frames := recv(t, rx); ident != "ps9" || string(frames[0]) != "first" {
		t.Fatalf("got %q from %q", frames[0], ident)
	}
	c := rawPeer(t, port, "ps9")
	c.Write(appendHeader(nil, 0, 1<<30-1<<10))
	c.SetReadDeadline(time.Now().Add(wait))
	var ne net.Error
	if _, err := io.Copy(io.Discard, c); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the claimer's connection was not closed")
	}
	big := pattern(2<<20, 7)
	m.Write(appendMessage(nil, [][]byte{[]byte("large"), big}))
	if ident, frames := recv(t, rx); ident != "ps9" || !bytes.Equal(frames[1], big) {
		t.Fatalf("the member's large message: %q from %q", frames[0], ident)
	}
}

// A connection that claims a member's identity before the node knows the
// job's members (AwaitMembers) is not read: a stranger that connects early
// under the id of a node that has not joined cannot make this node hold a
// member's large frame. Once the members are known, the claim is checked
// against the identity's incarnation: the stranger is closed and the real
// member served. The scheduler's connection, which brings the member list,
// is served at once; a claim nobody confirms is closed after MemberWait.
func TestEarlyClaimsOfMembersWait(t *testing.T) {
	member := func(id string) bool { return id == "ps1" || id == "ps9" || id == "ps11" }
	rx, port := bound(t, Options{IsMember: member, AwaitMembers: true, SchedulerIdentity: "ps1", MemberWait: wait})
	sched := rawPeerOf(t, port, "ps1", "sched")
	sched.Write(appendMessage(nil, [][]byte{[]byte("node list")}))
	if ident, frames := recv(t, rx); ident != "ps1" || string(frames[0]) != "node list" {
		t.Fatalf("the scheduler's message: %q from %q", frames[0], ident)
	}

	// A stranger under worker 9's id starts a frame of 1 GiB - 1 KiB: the
	// node does not read it, so its writes stall once the sockets' buffers
	// are full.
	intruder := rawPeerOf(t, port, "ps9", "intruder")
	intruder.Write(appendHeader(nil, 0, 1<<30-1<<10))
	intruder.SetWriteDeadline(time.Now().Add(2 * time.Second))
	chunk := make([]byte, 1<<20)
	sent := 0
	for ; sent < 64; sent++ {
		if _, err := intruder.Write(chunk); err != nil {
			break
		}
	}
	if sent == 64 {
		t.Fatalf("the node read 64 MB of a frame from a claim of a member's id before it knew the members")
	}
	// Worker 11, early too, sends a large message: it waits as well.
	worker := rawPeerOf(t, port, "ps11", "worker11")
	big := pattern(2<<20, 5)
	worker.Write(appendMessage(nil, [][]byte{[]byte("large"), big}))
	if ident, frames, err := rx.Recv(); err == nil {
		t.Fatalf("%q from %q delivered before the members were known", frames[0], ident)
	}

	rx.SetIncarnations(map[int]string{9: "worker9", 11: "worker11"})
	rx.MembersKnown()
	if ident, frames := recv(t, rx); ident != "ps11" || len(frames) != 2 || !bytes.Equal(frames[1], big) {
		t.Fatalf("worker 11's large message: %q from %q", frames[0], ident)
	}
	intruder.SetReadDeadline(time.Now().Add(wait))
	var ne net.Error
	if _, err := io.Copy(io.Discard, intruder); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the stranger under worker 9's id was not closed once the members were known")
	}

	// Nobody says who the members are: the claim is closed after the wait.
	quiet, qport := bound(t, Options{IsMember: member, AwaitMembers: true, SchedulerIdentity: "ps1", MemberWait: 200 * time.Millisecond})
	early := rawPeerOf(t, qport, "ps9", "")
	early.Write(appendMessage(nil, [][]byte{[]byte("hello")}))
	early.SetReadDeadline(time.Now().Add(wait))
	if _, err := io.Copy(io.Discard, early); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("a claim of a member's id was not closed after MemberWait")
	}
	if ident, frames, err := quiet.Recv(); err == nil {
		t.Fatalf("%q from %q delivered though the members were never known", frames[0], ident)
	}
}
