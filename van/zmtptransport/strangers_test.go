package zmtptransport

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
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
	first := append(ready("DEALER", "ps9"), appendMessage(nil, [][]byte{[]byte("small")})...)
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
