package zmtptransport

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzFrameReader feeds any bytes to the frame reader, as a connection
// would after its handshake. It must never panic, never pass on a message
// over its caps (frames, bytes) or a command over 64 KiB, and never hold
// much more memory for a frame than the bytes that arrived for it.
func FuzzFrameReader(f *testing.F) {
	f.Add(appendMessage(nil, [][]byte{[]byte("meta"), {}, bytes.Repeat([]byte{1}, 300)}))
	f.Add(command("PING", []byte{0, 10, 'c'}))
	f.Add(appendMessage(nil, [][]byte{{1}, {2}, {3}, {4}, {5}}))
	// A long frame announcing far more than it brings.
	f.Add(append(appendHeader(nil, 0, 1<<30), 1, 2, 3))
	f.Add(append(appendHeader(nil, flagMore, 3*growStep), make([]byte, growStep+10)...))
	f.Add([]byte{flagCommand | flagLong, 0, 0, 0, 0, 0, 1, 0, 1})
	f.Add([]byte{0xff, 0, 0})
	f.Add(append(append([]byte{flagMore, 1, 'x'}, command("PONG", nil)...), 0, 1, 'y'))
	f.Fuzz(func(t *testing.T, b []byte) {
		const maxFrames, maxBytes = 4, 8 << 20
		cr := &countingReader{r: bytes.NewReader(b)}
		fr := &frameReader{r: bufio.NewReaderSize(cr, 4096), maxFrames: maxFrames, maxBytes: maxBytes, pool: &bufPool{}}
		for range 64 {
			frames, cmd, err := fr.readMessage()
			if len(fr.inside) > maxInside {
				t.Fatalf("%d commands inside a message, cap %d", len(fr.inside), maxInside)
			}
			for _, c := range fr.inside {
				if len(c) > 1<<16 {
					t.Fatalf("a command of %d bytes inside a message", len(c))
				}
			}
			var o *oversized
			switch {
			case errors.As(err, &o):
				continue
			case err != nil:
				return
			case cmd != nil:
				if len(cmd) > 1<<16 {
					t.Fatalf("a command of %d bytes", len(cmd))
				}
				continue
			}
			if len(frames) > maxFrames {
				t.Fatalf("%d frames, cap %d", len(frames), maxFrames)
			}
			total, held := 0, 0
			for _, fr := range frames {
				total += len(fr)
				held += cap(fr)
			}
			if total > maxBytes {
				t.Fatalf("%d bytes, cap %d", total, maxBytes)
			}
			if held > 2*cr.n+growStep {
				t.Fatalf("frames hold %d bytes after %d received", held, cr.n)
			}
			fr.giveBack(frames)
		}
	})
}

// TestFrameMemoryFollowsBytes: a frame that announces 1 GiB and brings
// 3 MiB before the connection ends has cost a few MiB, not the GiB.
func TestFrameMemoryFollowsBytes(t *testing.T) {
	wire := append(appendHeader(nil, 0, 1<<30), make([]byte, 3<<20)...)
	fr := &frameReader{r: bufio.NewReader(bytes.NewReader(wire)), maxFrames: 4, maxBytes: 1 << 30, pool: &bufPool{}}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := fr.readMessage()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut frame: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
		t.Fatalf("a frame cut after 3 MiB allocated %d MiB", got>>20)
	}
	// With an upfront budget: a frame within it gets its buffer whole, one
	// past it grows; the budget comes back either way.
	var up atomic.Int64
	up.Store(4 << 20)
	wire = appendMessage(nil, [][]byte{make([]byte, 3<<20)})
	wire = append(wire, append(appendHeader(nil, 0, 1<<30), make([]byte, 3<<20)...)...)
	fr = &frameReader{r: bufio.NewReader(bytes.NewReader(wire)), maxFrames: 4, maxBytes: 1 << 30, pool: &bufPool{}, upfront: &up}
	if frames, _, err := fr.readMessage(); err != nil || len(frames[0]) != 3<<20 || cap(frames[0]) != 3<<20 {
		t.Fatalf("a frame within the budget: %v", err)
	}
	runtime.ReadMemStats(&before)
	_, _, err = fr.readMessage()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut frame past the budget: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
		t.Fatalf("a frame past the budget, cut after 3 MiB, allocated %d MiB", got>>20)
	}
	if up.Load() != 4<<20 {
		t.Fatalf("the budget is %d after the frames, want %d", up.Load(), 4<<20)
	}
	// A whole frame larger than growStep arrives intact.
	want := make([]byte, 5*growStep+3)
	for i := range want {
		want[i] = byte(i * 7)
	}
	got, err := (&frameReader{r: bufio.NewReader(bytes.NewReader(want)), pool: &bufPool{}}).readFrame(len(want), true)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("a grown frame: %v, equal %v", err, bytes.Equal(got, want))
	}
}

// FuzzHandshake plays any bytes as the peer of a handshake, as a ROUTER
// that admits it and as a DEALER. It must never panic and must return
// within its timeout, whatever the peer sends (or fails to send).
func FuzzHandshake(f *testing.F) {
	g := greeting()
	f.Add(append(append([]byte{}, g...), ready("DEALER", "ps9", "p1", false, false)...), true)
	f.Add(append(append([]byte{}, g...), ready("ROUTER", "", "", false, false)...), false)
	f.Add(append(append([]byte{}, g...), errorCommand("no")...), false)
	f.Add(append(append([]byte{}, g...), command("PING", nil)...), true)
	f.Add(g[:10], true)
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, peer []byte, router bool) {
		tr := &Transport{opts: Options{HandshakeTimeout: 200 * time.Millisecond}}
		ours, theirs := net.Pipe()
		defer ours.Close()
		go func() {
			defer theirs.Close()
			theirs.SetDeadline(time.Now().Add(time.Second))
			go io.Copy(io.Discard, theirs) // what our side writes
			theirs.Write(peer)
			// then silence: the handshake must give up on its own
		}()
		var admit func(map[string]string) error
		sock := "DEALER"
		if router {
			sock = "ROUTER"
			admit = func(props map[string]string) error {
				if props["identity"] == "stranger" {
					return errors.New("not a member")
				}
				return nil
			}
		}
		start := time.Now()
		props, err := tr.handshake(ours, bufio.NewReader(ours), sock, "ps1", admit)
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("the handshake took %v, timeout 200ms", took)
		}
		if err == nil && !compatible(sock, props["socket-type"]) {
			t.Fatalf("a handshake with a %q peer succeeded", props["socket-type"])
		}
	})
}

// FuzzKeyCacheReader feeds any bytes to the frame reader of a connection
// that has a key cache, from a peer that took its offer. It must never
// panic, never keep more than it offered, and never pass on a message over
// its caps.
func FuzzKeyCacheReader(f *testing.F) {
	meta := appendHeader(nil, flagMore, 1)
	meta = append(meta, 'm')
	put := append(append(append([]byte{}, meta...), putCommand(1, 7, 0)...), appendMessage(nil, [][]byte{[]byte("keys!"), []byte("vals")})...)
	f.Add(put)
	f.Add(append(append([]byte{}, put...), append(append([]byte{}, meta...), refCommand(1, 7, 5, true)...)...))
	f.Add(append(append([]byte{}, put...), append(append([]byte{}, meta...), refCommand(1, 7, 5, false)...)...))
	f.Add(append(append([]byte{}, meta...), refCommand(3, 1, 5, true)...))
	f.Add(append(append([]byte{}, put...), append(append([]byte{}, meta...), putCommand(1, 8, 0xff)...)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		const maxFrames, maxBytes, limit = 4, 8 << 20, 1 << 20
		cr := &countingReader{r: bytes.NewReader(b)}
		fr := &frameReader{r: bufio.NewReaderSize(cr, 4096), maxFrames: maxFrames, maxBytes: maxBytes, pool: &bufPool{},
			kc: &recvCache{limit: limit}}
		readBounded(t, fr, maxFrames, maxBytes, func() {
			kept := int64(0)
			for _, s := range fr.kc.slots {
				kept += int64(len(s.data))
			}
			if kept > limit || fr.kc.used != kept {
				t.Fatalf("the cache keeps %d bytes, counts %d, offered %d", kept, fr.kc.used, limit)
			}
		})
	})
}

// readBounded reads up to 64 messages from fr, until an error that is not
// a skipped message, and fails t when one holds more than maxFrames frames
// or maxBytes bytes; check, when not nil, runs after each read.
func readBounded(t *testing.T, fr *frameReader, maxFrames int, maxBytes int64, check func()) {
	t.Helper()
	for range 64 {
		frames, _, err := fr.readMessage()
		if check != nil {
			check()
		}
		var o *oversized
		if errors.As(err, &o) {
			continue
		}
		if err != nil {
			return
		}
		total := 0
		for _, f := range frames {
			total += len(f)
		}
		if len(frames) > maxFrames || int64(total) > maxBytes {
			t.Fatalf("%d frames of %d bytes, caps %d and %d", len(frames), total, maxFrames, maxBytes)
		}
		fr.giveBack(frames)
	}
}
