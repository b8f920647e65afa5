package van

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// memPair returns a sender bound at a:1 and connected to b:2 as node 2, and
// the receiver bound at b:2.
func memPair(t *testing.T, n *MemNetwork) (send, recv Transport) {
	t.Helper()
	send, recv = n.Transport(), n.Transport()
	if _, err := send.Bind("a", 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := recv.Bind("b", 2, 0); err != nil {
		t.Fatal(err)
	}
	if err := send.Connect(2, "b", 2, "ps9"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { send.Close(); recv.Close() })
	return send, recv
}

func sendAll(t *testing.T, tr Transport, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := tr.Send(context.Background(), 2, [][]byte{[]byte(fmt.Sprint(i))}, false); err != nil {
			t.Fatal(err)
		}
	}
}

// drain returns the messages recv gets until it times out.
func drain(t *testing.T, recv Transport) []string {
	t.Helper()
	return receiveAll(t, func() ([][]byte, error) {
		_, frames, err := recv.Recv()
		return frames, err
	})
}

// tryAll returns what recv has waiting, without waiting.
func tryAll(t *testing.T, recv Transport) []string {
	t.Helper()
	return receiveAll(t, func() ([][]byte, error) {
		_, frames, _, err := recv.(Batcher).TryRecvLent()
		return frames, err
	})
}

// receiveAll returns the first frame of each message next gives until it
// reports ErrRecvTimeout.
func receiveAll(t *testing.T, next func() ([][]byte, error)) []string {
	t.Helper()
	var got []string
	for {
		frames, err := next()
		if errors.Is(err, ErrRecvTimeout) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(frames[0]))
	}
}

func TestMemDropIsSeeded(t *testing.T) {
	run := func() []string {
		n := NewMemNetworkClock(SystemClock(), 42)
		send, recv := memPair(t, n)
		n.Drop("a:1", "b:2", 0.3)
		sendAll(t, send, 200)
		return drain(t, recv)
	}
	a, b := run(), run()
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("the same seed dropped different messages")
	}
	if len(a) < 100 || len(a) > 180 {
		t.Errorf("%d of 200 messages through at 30%% loss", len(a))
	}
}

func TestMemCutHoldsAndHealDelivers(t *testing.T) {
	n := NewMemNetwork()
	send, recv := memPair(t, n)
	n.Cut([]string{"a:1"}, []string{"b:2"})
	sendAll(t, send, 5)
	if got := drain(t, recv); len(got) != 0 {
		t.Fatalf("a cut link delivered %v", got)
	}
	n.Heal()
	if got := drain(t, recv); fmt.Sprint(got) != "[0 1 2 3 4]" {
		t.Fatalf("after healing: %v", got)
	}
}

func TestMemDelayOnFakeClock(t *testing.T) {
	clock := NewFakeClock(time.Unix(0, 0))
	n := NewMemNetworkClock(clock, 1)
	send, recv := memPair(t, n)
	n.Delay("a:1", "b:2", time.Second)
	sendAll(t, send, 3)
	clock.Advance(999 * time.Millisecond)
	if got := drain(t, recv); len(got) != 0 {
		t.Fatalf("delivered before the delay: %v", got)
	}
	clock.Advance(time.Millisecond)
	if got := drain(t, recv); fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("after the delay: %v", got)
	}
}

func TestMemPauseAndKill(t *testing.T) {
	n := NewMemNetwork()
	send, recv := memPair(t, n)
	var mu sync.Mutex
	var events []string
	send.(ConnectionReporter).SetConnectionHandler(func(id int, up bool) {
		mu.Lock()
		events = append(events, fmt.Sprint(id, up))
		mu.Unlock()
	})
	if err := send.Connect(2, "b", 2, "ps9"); err != nil { // now watched
		t.Fatal(err)
	}
	n.Pause("b:2")
	sendAll(t, send, 2)
	if got := drain(t, recv); len(got) != 0 {
		t.Fatalf("a paused node received %v", got)
	}
	n.Resume("b:2")
	if got := drain(t, recv); len(got) != 2 {
		t.Fatalf("after resuming: %v", got)
	}
	n.Kill("b:2")
	if _, _, err := recv.Recv(); !errors.Is(err, ErrClosed) {
		t.Errorf("Recv on a killed node: %v", err)
	}
	if _, err := recv.TrySend(2, [][]byte{{1}}, false); !errors.Is(err, ErrClosed) {
		t.Errorf("TrySend from a killed node: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		mu.Lock()
		got := fmt.Sprint(events)
		mu.Unlock()
		if got == "[2 true 2 false]" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("connection events %s, want up then down", got)
		case <-time.After(time.Millisecond):
		}
	}
}

// A full receiver makes Send wait, until the receiver reads or the
// context ends; TrySend never waits.
func TestMemBackpressure(t *testing.T) {
	n := NewMemNetwork()
	send, recv := memPair(t, n)
	n.Pause("b:2") // the receiver does not read, and its queue is unbounded while paused
	n.Resume("b:2")
	for i := 0; i < memLimit; i++ {
		if _, err := send.TrySend(2, [][]byte{{1}}, false); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := send.Send(ctx, 2, [][]byte{{1}}, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send to a full queue: %v", err)
	}
	if _, err := send.TrySend(2, [][]byte{{1}}, false); err != nil {
		t.Fatalf("TrySend below the hard limit: %v", err)
	}
	if _, _, err := recv.Recv(); err != nil {
		t.Fatal(err)
	}
}

// Settle returns once every receiver has taken in what was sent to it and
// waits for more.
func TestMemSettle(t *testing.T) {
	n := NewMemNetwork()
	send, recv := memPair(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var mu sync.Mutex
	got := 0
	var wg sync.WaitGroup
	for _, tr := range []Transport{send, recv} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, _, err := tr.Recv(); err == nil {
					mu.Lock()
					got++
					mu.Unlock()
				}
			}
		}()
	}
	sendAll(t, send, 100)
	if err := n.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if got != 100 {
		t.Errorf("settled with %d of 100 received", got)
	}
	mu.Unlock()
	cancel()
	wg.Wait()
}

// The in-memory network holds what is sent to a held peer, in order, until
// Flush, and drops what was held for a connection replaced since.
func TestMemHoldAndFlush(t *testing.T) {
	n := NewMemNetwork()
	send, recv := memPair(t, n)
	b := send.(Batcher)
	b.Hold(2)
	sendAll(t, send, 5)
	if got := tryAll(t, recv); len(got) != 0 {
		t.Fatalf("received %q while held", got)
	}
	b.Flush()
	if got := fmt.Sprint(tryAll(t, recv)); got != "[0 1 2 3 4]" {
		t.Fatalf("after the flush: %s", got)
	}
	sendAll(t, send, 1) // not held any more
	if got := fmt.Sprint(tryAll(t, recv)); got != "[0]" {
		t.Fatalf("after the flush, a send: %s", got)
	}
	b.Hold(2)
	sendAll(t, send, 2)
	if err := send.Connect(2, "b", 2, "ps9"); err != nil { // replaced
		t.Fatal(err)
	}
	b.Flush()
	if got := tryAll(t, recv); len(got) != 0 {
		t.Fatalf("received %q held for the replaced connection", got)
	}
}
