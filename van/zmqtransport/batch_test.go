package zmqtransport

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"
	"unsafe"

	zmq "github.com/pebbe/zmq4"

	"github.com/gopslite/pslite/van"
)

// batchMessages returns n messages of one to three small frames, each
// telling its index, and one large frame in every tenth when large.
func batchMessages(n int, large bool) [][][]byte {
	msgs := make([][][]byte, n)
	for i := range msgs {
		m := [][]byte{[]byte(fmt.Sprint(i))}
		for j := 0; j < i%3; j++ {
			m = append(m, pattern(1+i*j%500, byte(i)))
		}
		if large && i%10 == 9 {
			m = append(m, pattern(zeroCopyMin+i, byte(i)))
		}
		msgs[i] = m
	}
	return msgs
}

func sameFrames(got, want [][]byte) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d frames, want %d", len(got), len(want))
	}
	for j := range want {
		if string(got[j]) != string(want[j]) {
			return fmt.Errorf("frame %d differs (%d bytes, want %d)", j, len(got[j]), len(want[j]))
		}
	}
	return nil
}

// Sends to a held peer wait, in order, until Flush: small messages packed
// together, large ones queued between the packs, from Send and TrySend
// alike; the receiver then gets all of them in the order sent.
func TestHoldQueuesUntilFlush(t *testing.T) {
	send, bind := zmqPair(t)
	recv := bind()
	msgs := batchMessages(60, true)
	send.Hold(1)
	for i, m := range msgs {
		var err error
		if i%2 == 0 {
			_, err = send.Send(context.Background(), 1, m, false)
		} else {
			_, err = send.TrySend(1, m, i%4 == 1)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := send.queued(1); got != len(msgs) {
		t.Fatalf("%d messages queued for the held peer, want %d", got, len(msgs))
	}
	send.Flush()
	for i, want := range msgs {
		_, got := recvWithin(t, recv, 10*time.Second)
		if err := sameFrames(got, want); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	// Not held any more: a send goes out at once.
	if _, err := send.Send(context.Background(), 1, [][]byte{[]byte("after")}, false); err != nil {
		t.Fatal(err)
	}
	if _, got := recvWithin(t, recv, 10*time.Second); string(got[0]) != "after" {
		t.Fatalf("got %q after the flush", got[0])
	}
}

// A large message to a held peer with nothing queued goes at once (it
// would gain nothing from company, and lent frames would be copied in the
// queue).
func TestHoldLetsLargeMessagesThrough(t *testing.T) {
	send, bind := zmqPair(t)
	recv := bind()
	send.Hold(1)
	big := pattern(zeroCopyMin+100, 3)
	if _, err := send.Send(context.Background(), 1, [][]byte{[]byte("big"), big}, true); err != nil {
		t.Fatal(err)
	}
	if n := send.queued(1); n != 0 {
		t.Fatalf("%d messages queued", n)
	}
	if _, got := recvWithin(t, recv, 10*time.Second); string(got[0]) != "big" || string(got[1]) != string(big) {
		t.Fatalf("got %q and %d bytes", got[0], len(got[1]))
	}
	send.Flush()
}

// A held peer's queue is sent by its writer once maxHeld messages wait,
// without a Flush.
func TestHoldSendsAFullQueue(t *testing.T) {
	send, bind := zmqPair(t)
	recv := bind()
	send.Hold(1)
	msgs := batchMessages(maxHeld, false)
	for _, m := range msgs {
		if _, err := send.Send(context.Background(), 1, m, false); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range msgs {
		_, got := recvWithin(t, recv, 10*time.Second)
		if err := sameFrames(got, want); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	send.Flush()
}

// inprocReader returns a DEALER connected to a ROUTER over inproc (a
// message sent is in the ROUTER's queue when the send returns) and a
// frameReader on the ROUTER.
func inprocReader(t *testing.T, maxFrames int, maxBytes int64) (*zmq.Socket, *frameReader) {
	t.Helper()
	ctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	router, err := ctx.NewSocket(zmq.ROUTER)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := fmt.Sprintf("inproc://batch-%p", t)
	if err := router.Bind(endpoint); err != nil {
		t.Fatal(err)
	}
	dealer, err := ctx.NewSocket(zmq.DEALER)
	if err != nil {
		t.Fatal(err)
	}
	dealer.SetIdentity("ps9")
	if err := dealer.Connect(endpoint); err != nil {
		t.Fatal(err)
	}
	h := rawSocket(router)
	if h == nil {
		t.Skip("no libzmq handle")
	}
	r := newFrameReader(h, maxFrames, maxBytes)
	t.Cleanup(func() {
		r.close()
		dealer.Close()
		router.Close()
		ctx.Term()
	})
	return dealer, r
}

// Messages that have arrived already are received in batches, each
// message intact and in order: small ones many to a batch, a message with
// a large frame ending its batch (its large frame lent when asked), and an
// oversized message in the middle of a batch dropped alone.
func TestRecvBatches(t *testing.T) {
	dealer, r := inprocReader(t, 8, 4<<20)
	msgs := batchMessages(100, true)
	// One frame more than accepted: kept whole, so it does not end its
	// batch, and dropped.
	tooMany := make([][]byte, 9)
	for i := range tooMany {
		tooMany[i] = []byte{byte(i)}
	}
	const bad = 20 // index of the oversized message
	msgs = append(msgs[:bad], append([][][]byte{tooMany}, msgs[bad:]...)...)
	for _, m := range msgs {
		if _, err := dealer.SendMessage(m); err != nil {
			t.Fatal(err)
		}
	}
	largest := 0
	for i, want := range msgs {
		queued := len(r.queued)
		frames, mask, release, _, err := r.recv(zmq.DONTWAIT, true, false)
		if queued == 0 {
			largest = max(largest, len(r.queued)+1)
		}
		if i == bad {
			if !errors.Is(err, van.ErrOversized) {
				t.Fatalf("message %d: %v, want ErrOversized", i, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if string(frames[0]) != "ps9" {
			t.Fatalf("message %d from %q", i, frames[0])
		}
		if err := sameFrames(frames[1:], want); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		for j, f := range frames {
			// Packed frames start 8-aligned, so keys and values are read
			// in place (the pack itself is a Go allocation of 16 bytes
			// or more, which is 8-aligned).
			if len(f) > 0 && mask&(1<<j) == 0 && uintptr(unsafe.Pointer(unsafe.SliceData(f)))%8 != 0 {
				t.Fatalf("message %d: frame %d of %d bytes not 8-aligned", i, j, len(f))
			}
		}
		last := len(frames) - 1
		if lent := mask&(1<<last) != 0; lent != (len(frames[last]) >= zeroCopyMin) {
			t.Fatalf("message %d: frame %d of %d bytes lent=%v", i, last, len(frames[last]), lent)
		}
		if release != nil {
			release()
		}
	}
	if largest < 5 {
		t.Errorf("largest batch %d messages; 9 small ones wait between large ones", largest)
	}
	if _, _, _, _, err := r.recv(zmq.DONTWAIT, true, false); !errors.Is(err, zmq.Errno(syscall.EAGAIN)) {
		t.Errorf("receive with nothing waiting: %v, want EAGAIN", err)
	}
}
