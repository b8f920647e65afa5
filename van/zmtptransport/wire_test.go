package zmtptransport

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

func reader(b []byte, maxFrames int, maxBytes int64) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(bytes.NewReader(b), 16), maxFrames: maxFrames, maxBytes: maxBytes}
}

func TestFramesRoundTrip(t *testing.T) {
	msgs := [][][]byte{
		{[]byte("meta")},
		{{}, []byte("x")},
		{bytes.Repeat([]byte{7}, 255), bytes.Repeat([]byte{8}, 256), bytes.Repeat([]byte{9}, 70000)},
	}
	var wire []byte
	for _, m := range msgs {
		before := len(wire)
		wire = appendMessage(wire, m)
		if got := len(wire) - before; got != encodedLen(m) {
			t.Fatalf("encodedLen %d, encoded %d bytes", encodedLen(m), got)
		}
	}
	wire = append(wire, command("PING", []byte{0, 10, 'c'})...)
	fr := reader(wire, 8, 1<<20)
	for i, want := range msgs {
		got, cmd, err := fr.readMessage()
		if err != nil || cmd != nil {
			t.Fatalf("message %d: %v, command %q", i, err, cmd)
		}
		sameFrames(t, i, got, want)
	}
	_, cmd, err := fr.readMessage()
	if err != nil {
		t.Fatal(err)
	}
	if name, body, err := parseCommand(cmd); err != nil || name != "PING" || string(body) != "\x00\x0ac" {
		t.Fatalf("command %q %q %v", name, body, err)
	}
	if _, _, err := fr.readMessage(); !errors.Is(err, io.EOF) {
		t.Fatalf("at the end: %v, want EOF", err)
	}
}

func TestFramesBounds(t *testing.T) {
	var wire []byte
	wire = appendMessage(wire, [][]byte{{1}, {2}, {3}})                        // too many frames
	wire = appendMessage(wire, [][]byte{make([]byte, 300), make([]byte, 300)}) // too many bytes
	wire = appendMessage(wire, [][]byte{[]byte("ok"), {1, 2}})                 // fine
	wire = appendMessage(wire, [][]byte{make([]byte, 100), {1}})               // fine
	fr := reader(wire, 2, 512)
	var o *oversized
	if _, _, err := fr.readMessage(); !errors.As(err, &o) || o.frames != 3 {
		t.Fatalf("3 frames with 2 allowed: %v", err)
	}
	if _, _, err := fr.readMessage(); !errors.As(err, &o) || o.bytes != 600 {
		t.Fatalf("600 bytes with 512 allowed: %v", err)
	}
	for i := 0; i < 2; i++ {
		if m, _, err := fr.readMessage(); err != nil || len(m) != 2 {
			t.Fatalf("message after skipped ones: %v %v", m, err)
		}
	}

	// A frame larger than a whole message may be ends the connection.
	long := appendHeader(nil, 0, 1<<20)
	if _, _, err := reader(long, 8, 1<<10).readMessage(); !errors.Is(err, errTooLarge) {
		t.Fatalf("frame of 1 MiB with 1 KiB allowed: %v", err)
	}
	tooMany := []byte{flagMore, 1, 'x'}
	for i := 0; i <= maxInside; i++ {
		tooMany = append(tooMany, command("PONG", nil)...)
	}
	tooMany = append(tooMany, 0, 1, 'y')
	for _, bad := range [][]byte{
		{0x40, 1, 'x'},                      // unknown flag
		{flagCommand | flagMore, 1, 1, 'x'}, // a command with MORE
		tooMany,                             // more commands inside a message than heartbeats explain
	} {
		if _, _, err := reader(bad, 8, 1<<10).readMessage(); !errors.Is(err, errProtocol) {
			t.Errorf("% x: %v, want a protocol error", bad, err)
		}
	}
}

func TestGreetingAndReady(t *testing.T) {
	g := greeting()
	if err := checkGreeting(g); err != nil {
		t.Fatal(err)
	}
	v2 := append([]byte(nil), g...)
	v2[10] = 2
	curve := append([]byte(nil), g...)
	copy(curve[12:32], "CURVE\x00\x00\x00")
	notZMTP := append([]byte(nil), g...)
	notZMTP[0] = 0
	for name, bad := range map[string][]byte{"ZMTP 2": v2, "CURVE": curve, "not ZMTP": notZMTP, "short": g[:10]} {
		if err := checkGreeting(bad); !errors.Is(err, errProtocol) {
			t.Errorf("%s: %v, want a protocol error", name, err)
		}
	}

	fr := reader(ready("DEALER", "ps9", "", false, false), 1, 1<<16)
	_, cmd, err := fr.readMessage()
	if err != nil {
		t.Fatal(err)
	}
	name, body, err := parseCommand(cmd)
	if err != nil || name != "READY" {
		t.Fatalf("%q %v", name, err)
	}
	props, err := parseProperties(body)
	if err != nil || props["socket-type"] != "DEALER" || props["identity"] != "ps9" {
		t.Fatalf("properties %v %v", props, err)
	}
	for _, bad := range [][]byte{{0}, {5, 'a'}, {1, 'a', 0, 0, 0, 9, 'x'}} {
		if _, err := parseProperties(bad); !errors.Is(err, errProtocol) {
			t.Errorf("properties % x: %v, want a protocol error", bad, err)
		}
	}
	if _, _, err := parseCommand([]byte{9, 'a'}); !errors.Is(err, errProtocol) {
		t.Errorf("command with a name past its end: %v", err)
	}
	if !compatible("ROUTER", "DEALER") || !compatible("DEALER", "ROUTER") || compatible("ROUTER", "PUB") || compatible("DEALER", "SUB") {
		t.Error("socket type compatibility is wrong")
	}
	if p := pong([]byte{0, 1, 'a', 'b'}); !bytes.Equal(p, command("PONG", []byte("ab"))) {
		t.Errorf("PONG % x", p)
	}
}

// libzmq sends a heartbeat command as soon as it is due, between two frames
// of a message if it must: the message is read whole, the commands kept
// for the caller to answer; the next message starts with none.
func TestCommandsInsideAMessage(t *testing.T) {
	var wire []byte
	wire = appendHeader(wire, flagMore, 4)
	wire = append(wire, "meta"...)
	wire = append(wire, command("PONG", []byte("ctx"))...)
	wire = appendHeader(wire, flagMore, 300)
	wire = append(wire, bytes.Repeat([]byte{5}, 300)...)
	wire = append(wire, command("PING", []byte{0, 10, 'c'})...)
	wire = appendHeader(wire, 0, 1)
	wire = append(wire, 'v')
	wire = appendMessage(wire, [][]byte{[]byte("next")})
	fr := reader(wire, 8, 1<<20)
	got, cmd, err := fr.readMessage()
	if err != nil || cmd != nil || len(got) != 3 || string(got[0]) != "meta" || len(got[1]) != 300 || string(got[2]) != "v" {
		t.Fatalf("message: %d frames, %v, command %q", len(got), err, cmd)
	}
	if len(fr.inside) != 2 {
		t.Fatalf("%d commands inside, want 2", len(fr.inside))
	}
	for i, want := range []string{"PONG", "PING"} {
		if name, _, err := parseCommand(fr.inside[i]); err != nil || name != want {
			t.Errorf("command %d inside: %q %v, want %s", i, name, err, want)
		}
	}
	if reply := answer(fr.inside[1]); reply == nil {
		t.Error("the PING inside the message gets no PONG")
	}
	if got, _, err := fr.readMessage(); err != nil || string(got[0]) != "next" || len(fr.inside) != 0 {
		t.Fatalf("next message: %q %v, %d commands inside", got, err, len(fr.inside))
	}
}

// sameFrames fails the test unless message i's frames are want's.
func sameFrames(t *testing.T, i int, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("message %d: %d frames, want %d", i, len(got), len(want))
	}
	for j := range want {
		if !bytes.Equal(got[j], want[j]) {
			t.Fatalf("message %d frame %d differs", i, j)
		}
	}
}
