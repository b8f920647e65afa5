package zmqtransport

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gopslite/pslite/van"
)

// recvNext receives the next message, skipping receive timeouts.
func recvNext(t *testing.T, tr *Transport) ([]byte, [][]byte, error) {
	t.Helper()
	for i := 0; i < 100; i++ {
		ident, frames, err := tr.Recv()
		if !errors.Is(err, van.ErrRecvTimeout) {
			return ident, frames, err
		}
	}
	t.Fatal("nothing received")
	return nil, nil, nil
}

// Messages with too many frames or bytes are dropped with ErrOversized
// (naming the sender), and the messages after them are received intact.
func TestOversizedMessagesAreDropped(t *testing.T) {
	recv, err := New(Options{MaxFrames: 8, MaxMessageBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	port, err := recv.Bind("127.0.0.1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	send, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer send.Close()
	if err := send.Connect(1, "127.0.0.1", port, van.Identity(13)); err != nil {
		t.Fatal(err)
	}
	many := make([][]byte, 20000) // empty frames: few bytes, many frames
	for i := range many {
		many[i] = []byte{}
	}
	big := [][]byte{make([]byte, 600<<10), make([]byte, 600<<10)} // each frame fits, the sum does not
	ok := [][]byte{[]byte("meta"), []byte("data")}
	for _, m := range [][][]byte{many, ok, big, ok} {
		if _, err := send.Send(context.Background(), 1, m, false); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []string{"oversized", "ok", "oversized", "ok"} {
		ident, frames, err := recvNext(t, recv)
		switch want {
		case "oversized":
			if !errors.Is(err, van.ErrOversized) || !strings.Contains(err.Error(), `"ps13"`) {
				t.Errorf("message %d: got %d frames, error %v; want ErrOversized naming ps13", i, len(frames), err)
			}
		case "ok":
			if err != nil || string(ident) != "ps13" || len(frames) != 2 || string(frames[1]) != "data" {
				t.Errorf("message %d: got %q %q %v, want the small message", i, ident, frames, err)
			}
		}
	}
}
