package customer_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/customer"
	"github.com/gopslite/pslite/message"
)

func request(prio, id int) *message.Message {
	m := msg(prio, id)
	m.Meta.Request = true
	return m
}

func response(ts, id int) *message.Message {
	m := message.New()
	m.Meta.Request = false
	m.Meta.Timestamp = int32(ts)
	m.Meta.Head = int32(id)
	return m
}

// recorder is a handler that records the Head of every message it sees.
type recorder struct {
	mu   sync.Mutex
	seen []int
	ch   chan int // every handled Head, when non-nil
}

func (r *recorder) handle(m *message.Message) {
	r.mu.Lock()
	r.seen = append(r.seen, int(m.Meta.Head))
	r.mu.Unlock()
	if r.ch != nil {
		r.ch <- int(m.Meta.Head)
	}
}

func (r *recorder) got() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

func TestCustomerIDs(t *testing.T) {
	c := customer.New(3, 7, func(*message.Message) {}, zerolog.Nop())
	defer c.Stop()
	if c.AppID() != 3 || c.CustomerID() != 7 {
		t.Fatalf("ids %d/%d, want 3/7", c.AppID(), c.CustomerID())
	}
	if c.Tracker() == nil {
		t.Fatal("nil tracker")
	}
}

func TestCustomerPriorityOrder(t *testing.T) {
	prios := []int{0, 3, -1, 3, 1, 0, 7}
	r := recorder{ch: make(chan int, len(prios))}
	var resumed atomic.Bool
	c := customer.New(0, 0, func(m *message.Message) {
		if !resumed.Load() {
			t.Errorf("paused customer handled message %d", m.Meta.Head)
		}
		r.handle(m)
	}, zerolog.Nop(), customer.StartPaused())
	for i, p := range prios {
		if !c.Accept(request(p, i)) {
			t.Fatal("Accept returned false")
		}
	}
	// Paused: every message waits in the queue, and none is handled. That
	// the customer's goroutine does not take one later has no event to wait
	// for: give it a bounded chance to (a correct customer never handles
	// one, so no run depends on the length), and the handler's check above
	// also catches any handled before Resume.
	if n := c.Queued(); n != len(prios) {
		t.Fatalf("paused customer has %d of %d messages queued", n, len(prios))
	}
	select {
	case id := <-r.ch:
		t.Fatalf("paused customer handled message %d", id)
	case <-time.After(10 * time.Millisecond):
	}
	resumed.Store(true)
	c.Resume()
	c.Resume() // idempotent
	c.Stop()
	want := []int{6, 1, 3, 4, 0, 5, 2}
	if got := r.got(); !slices.Equal(got, want) {
		t.Fatalf("handled %v, want %v", got, want)
	}
}

func TestCustomerDropsUnknownResponses(t *testing.T) {
	r := recorder{ch: make(chan int, 10)}
	c := customer.New(0, 0, r.handle, zerolog.Nop())
	defer c.Stop()
	c.Accept(response(12345, 1))         // never issued
	c.Accept(response(message.Empty, 2)) // no timestamp
	c.Accept(request(0, 3))              // sentinel
	select {
	case id := <-r.ch:
		if id != 3 {
			t.Fatalf("handler got message %d, want only the sentinel 3", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("sentinel not handled")
	}

	// A late response, after its request finished, is dropped too.
	ts, _ := c.NewRequest(1)
	c.Accept(response(ts, 4))
	if err := c.WaitRequest(ts); err != nil {
		t.Fatal(err)
	}
	<-r.ch
	c.Accept(response(ts, 5)) // late
	c.Accept(request(0, 6))
	if id := <-r.ch; id != 6 {
		t.Fatalf("handler got late response %d", id)
	}
	if got := r.got(); !slices.Equal(got, []int{3, 4, 6}) {
		t.Fatalf("handled %v, want [3 4 6]", got)
	}
}

func TestCustomerResponsesCompleteRequest(t *testing.T) {
	// seen is written by the handler without locking: Wait returning must
	// happen after the handler ran for every response (checked by -race).
	var seen []int
	c := customer.New(0, 0, func(m *message.Message) { seen = append(seen, int(m.Meta.Head)) }, zerolog.Nop())
	defer c.Stop()
	ts, err := c.NewRequest(3)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.WaitRequest(ts) }()
	c.Accept(response(ts, 1))
	c.Accept(response(ts, 2))
	select {
	case err := <-done:
		t.Fatalf("WaitRequest returned (%v) before the third response", err)
	case <-time.After(20 * time.Millisecond):
	}
	c.Accept(response(ts, 3))
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitRequest did not return")
	}
	if !slices.Equal(seen, []int{1, 2, 3}) {
		t.Fatalf("handler saw %v, want [1 2 3]", seen)
	}
	if n := c.NumResponse(ts); n != 0 {
		t.Fatalf("NumResponse of finished = %d, want 0", n)
	}
}

func TestCustomerAddResponseAndNumResponse(t *testing.T) {
	c := customer.New(0, 0, func(*message.Message) {}, zerolog.Nop())
	defer c.Stop()
	ts, _ := c.NewRequest(3)
	c.AddResponse(ts, 1)
	if n := c.NumResponse(ts); n != 1 {
		t.Fatalf("NumResponse = %d, want 1", n)
	}
	c.AddResponse(ts, 2)
	if err := c.WaitRequest(ts); err != nil {
		t.Fatal(err)
	}
	if n := c.NumResponse(999); n != 0 {
		t.Fatalf("NumResponse(unknown) = %d", n)
	}
	c.AddResponse(999, 1) // unknown: no-op, no panic
}

func TestCustomerWaitRequestContext(t *testing.T) {
	c := customer.New(0, 0, func(*message.Message) {}, zerolog.Nop())
	defer c.Stop()
	ts, _ := c.NewRequest(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := c.WaitRequestContext(ctx, ts); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitRequestContext = %v", err)
	}
	c.Accept(response(ts, 0))
	if err := c.WaitRequestContext(context.Background(), ts); err != nil {
		t.Fatal(err)
	}
}

func TestCustomerStopDrains(t *testing.T) {
	var n int // only the handler writes it; read after Stop
	entered, release := make(chan struct{}), make(chan struct{})
	c := customer.New(0, 0, func(m *message.Message) {
		if m.Meta.Head == 0 {
			close(entered)
			<-release // hold the handler until Stop has closed the queue
		}
		n++
	}, zerolog.Nop())
	const total = 200
	accepted := make(chan bool, 1)
	// The customer is idle: message 0 is handled on this goroutine, and
	// blocks there.
	go func() { accepted <- c.Accept(request(0, 0)) }()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("message 0 not handled")
	}
	for i := 1; i < total; i++ { // the handler is busy: these are queued
		if !c.Accept(request(i%4, i)) {
			t.Fatal("Accept returned false before Stop")
		}
	}
	if q := c.Queued(); q != total-1 {
		t.Fatalf("%d messages queued behind the blocked one, want %d", q, total-1)
	}
	stopped := make(chan struct{})
	go func() { c.Stop(); close(stopped) }()
	waitFor(t, "Stop to close the queue", c.Stopping)
	close(release)
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return")
	}
	if !<-accepted {
		t.Fatal("Accept of message 0 returned false")
	}
	if n != total {
		t.Fatalf("handled %d of %d queued messages before Stop returned", n, total)
	}
	if c.Accept(request(0, 0)) {
		t.Fatal("Accept after Stop returned true")
	}
	c.Stop() // idempotent
}

func TestCustomerStopPausedDrains(t *testing.T) {
	var r recorder
	c := customer.New(0, 0, r.handle, zerolog.Nop(), customer.StartPaused())
	c.Accept(request(0, 1))
	c.Accept(request(0, 2))
	done := make(chan struct{})
	go func() { c.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop of a paused customer did not return")
	}
	if got := r.got(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("handled %v, want [1 2]", got)
	}
}

func TestCustomerConcurrentRequests(t *testing.T) {
	c := customer.New(0, 0, func(*message.Message) {}, zerolog.Nop())
	defer c.Stop()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				ts, err := c.NewRequest(2)
				if err != nil {
					t.Error(err)
					return
				}
				c.Accept(response(ts, 0))
				c.Accept(response(ts, 0))
				if err := c.WaitRequest(ts); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := c.Tracker().Len(); n != 0 {
		t.Fatalf("tracker Len = %d", n)
	}
}

// TestCustomerHandlesIdleMessagesOnCaller checks that Accept handles a
// message itself when the customer is idle, queues it while the handler is
// busy, and that messages are handled one at a time, in order, either way.
func TestCustomerHandlesIdleMessagesOnCaller(t *testing.T) {
	r := recorder{ch: make(chan int, 5)}
	entered, release := make(chan struct{}), make(chan struct{})
	var running atomic.Int32
	c := customer.New(0, 0, func(m *message.Message) {
		if running.Add(1) != 1 {
			t.Error("two messages handled at once")
		}
		if m.Meta.Head == 2 {
			close(entered)
			<-release
		}
		r.handle(m)
		running.Add(-1)
	}, zerolog.Nop())
	defer c.Stop()

	c.Accept(request(0, 1))
	if got := r.got(); !slices.Equal(got, []int{1}) {
		t.Fatalf("after Accept on an idle customer, handled %v, want [1] already", got)
	}
	accepted := make(chan struct{})
	go func() { c.Accept(request(0, 2)); close(accepted) }() // blocks in the handler
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("message 2 not handled")
	}
	for i := 3; i <= 5; i++ {
		c.Accept(request(0, i)) // the handler is busy: queued, Accept returns
	}
	if got := r.got(); !slices.Equal(got, []int{1}) {
		t.Fatalf("handled %v while message 2 blocks, want [1]", got)
	}
	// The customer's goroutine waits for the slot: freeing it must wake it.
	waitFor(t, "the customer's goroutine to wait", func() bool { return c.Waiting() == 1 })
	close(release)
	<-accepted
	for range 5 { // 1 was handled already; 2 just now; 3 to 5 are on their way
		select {
		case <-r.ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("handled only %v", r.got())
		}
	}
	if got := r.got(); !slices.Equal(got, []int{1, 2, 3, 4, 5}) {
		t.Fatalf("handled %v, want [1 2 3 4 5]", got)
	}
}

// TestCustomerRecycles checks that a customer set to recycle gives each
// message back once handled, lent frames first, and that one not set to
// leaves the message as it was.
func TestCustomerRecycles(t *testing.T) {
	for _, on := range []bool{false, true} {
		var handled *message.Message
		c := customer.New(0, 0, func(m *message.Message) { handled = m }, zerolog.Nop())
		c.SetRecycles(on)
		m := request(0, 7)
		m.AddData(message.Uint64, make([]byte, 8))
		released := 0
		m.Lend(1, message.NewLoan(m.Data, 1, func([][]byte) { released++ }))
		if !c.Accept(m) { // an idle customer handles it before Accept returns
			t.Fatal("not accepted")
		}
		c.Stop()
		if handled != m || released != 1 {
			t.Fatalf("recycles=%v: handled %p (sent %p), lent frames given back %d times, want once", on, handled, m, released)
		}
		// (Nothing else in this test asks the pool for messages, so m,
		// recycled or not, is still this test's to look at.)
		if recycled := m.Meta.Head == 0 && m.Data == nil && m.Meta.Timestamp == 0; recycled != on {
			t.Errorf("recycles=%v: after handling, message reads %+v", on, m.Meta)
		}
	}
}
