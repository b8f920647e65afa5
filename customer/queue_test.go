package customer_test

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gopslite/pslite/customer"
	"github.com/gopslite/pslite/message"
)

// msg returns a message with the given priority and Head as an id.
func msg(prio, id int) *message.Message {
	m := message.New()
	m.Meta.Priority = int32(prio)
	m.Meta.Head = int32(id)
	return m
}

// waitFor waits until cond holds, yielding between checks, and fails the
// test if it does not hold within 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func mustPop(t *testing.T, q *customer.Queue) *message.Message {
	t.Helper()
	m, ok := q.Pop()
	if !ok {
		t.Fatal("Pop: queue closed and empty")
	}
	return m
}

func TestQueuePriorityThenFIFO(t *testing.T) {
	q := customer.NewQueue()
	in := []struct{ prio, id int }{
		{0, 1}, {5, 2}, {0, 3}, {-3, 4}, {5, 5}, {1, 6}, {0, 7}, {5, 8}, {-3, 9},
	}
	for _, x := range in {
		if !q.Push(msg(x.prio, x.id)) {
			t.Fatal("Push on an open queue returned false")
		}
	}
	if q.Len() != len(in) {
		t.Fatalf("Len = %d, want %d", q.Len(), len(in))
	}
	want := []int{2, 5, 8, 6, 1, 3, 7, 4, 9}
	var got []int
	for range in {
		got = append(got, int(mustPop(t, q).Meta.Head))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pop order %v, want %v", got, want)
	}
	if q.Len() != 0 {
		t.Fatalf("Len = %d after draining", q.Len())
	}
}

// TestQueueRandomOrder checks the pop order against a stable sort by
// descending priority, with pushes and pops interleaved.
func TestQueueRandomOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	q := customer.NewQueue()
	type rec struct{ prio, id int }
	var model []rec // kept sorted: priority descending, then push order
	next := 0
	for step := 0; step < 5000; step++ {
		if len(model) == 0 || rng.IntN(3) != 0 {
			r := rec{rng.IntN(5) - 2, next}
			next++
			q.Push(msg(r.prio, r.id))
			i := 0
			for i < len(model) && model[i].prio >= r.prio {
				i++
			}
			model = slices.Insert(model, i, r)
			continue
		}
		m := mustPop(t, q)
		if int(m.Meta.Head) != model[0].id || int(m.Meta.Priority) != model[0].prio {
			t.Fatalf("step %d: popped (prio %d, id %d), want (prio %d, id %d)",
				step, m.Meta.Priority, m.Meta.Head, model[0].prio, model[0].id)
		}
		model = model[1:]
	}
	if q.Len() != len(model) {
		t.Fatalf("Len = %d, want %d", q.Len(), len(model))
	}
}

func TestQueuePopBlocksUntilPush(t *testing.T) {
	q := customer.NewQueue()
	got := make(chan *message.Message)
	go func() {
		m, _ := q.Pop()
		got <- m
	}()
	select {
	case <-got:
		t.Fatal("Pop returned on an empty queue")
	case <-time.After(30 * time.Millisecond):
	}
	want := msg(0, 42)
	q.Push(want)
	select {
	case m := <-got:
		if m != want {
			t.Fatalf("Pop returned %v, want the pushed message", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Pop did not return after Push")
	}
}

func TestQueueCloseWakesBlockedPops(t *testing.T) {
	q := customer.NewQueue()
	const n = 4
	res := make(chan bool, n)
	for range n {
		go func() {
			m, ok := q.Pop()
			if m != nil {
				t.Errorf("Pop after Close returned message %v", m)
			}
			res <- ok
		}()
	}
	// Close must wake Pops that wait, not just answer later ones: close
	// only once every Pop waits.
	waitFor(t, "every Pop to wait", func() bool { return q.Waiting() == n })
	q.Close()
	for range n {
		select {
		case ok := <-res:
			if ok {
				t.Error("Pop on a closed empty queue returned ok")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not wake a blocked Pop")
		}
	}
}

func TestQueueCloseDrainsRemaining(t *testing.T) {
	q := customer.NewQueue()
	q.Push(msg(0, 1))
	q.Push(msg(1, 2))
	q.Push(msg(0, 3))
	q.Close()
	q.Close() // idempotent
	if q.Push(msg(9, 4)) {
		t.Fatal("Push after Close returned true")
	}
	if q.Len() != 3 {
		t.Fatalf("Len = %d after a refused Push, want 3", q.Len())
	}
	var got []int
	for {
		m, ok := q.Pop()
		if !ok {
			break
		}
		got = append(got, int(m.Meta.Head))
	}
	if want := []int{2, 1, 3}; !slices.Equal(got, want) {
		t.Fatalf("drained %v, want %v", got, want)
	}
	if _, ok := q.Pop(); ok {
		t.Fatal("Pop on a closed drained queue returned ok")
	}
}

func TestQueueConcurrent(t *testing.T) {
	q := customer.NewQueue()
	const producers, consumers, perProducer = 8, 4, 2000
	var pwg, cwg sync.WaitGroup
	seen := make([][]int, consumers)
	for c := range consumers {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for {
				m, ok := q.Pop()
				if !ok {
					return
				}
				seen[c] = append(seen[c], int(m.Meta.Head))
			}
		}()
	}
	for p := range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for i := range perProducer {
				if !q.Push(msg(i%3, p*perProducer+i)) {
					t.Error("Push on an open queue returned false")
					return
				}
			}
		}()
	}
	pwg.Wait()
	q.Close()
	done := make(chan struct{})
	go func() { cwg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("consumers did not finish after Close")
	}
	count := make([]int, producers*perProducer)
	for _, s := range seen {
		for _, id := range s {
			count[id]++
		}
	}
	for id, c := range count {
		if c != 1 {
			t.Fatalf("message %d popped %d times", id, c)
		}
	}
}

// TestQueueSingleConsumerFIFOPerProducer: with one consumer, equal-priority
// messages of one producer come out in the order that producer pushed them.
func TestQueueSingleConsumerFIFOPerProducer(t *testing.T) {
	q := customer.NewQueue()
	const producers, per = 4, 1000
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				q.Push(msg(0, p*per+i))
			}
		}()
	}
	last := make([]int, producers)
	for i := range last {
		last[i] = -1
	}
	for range producers * per {
		id := int(mustPop(t, q).Meta.Head)
		p, i := id/per, id%per
		if i <= last[p] {
			t.Fatalf("producer %d: message %d after %d", p, i, last[p])
		}
		last[p] = i
	}
	wg.Wait()
}

func TestQueueHandlerSlot(t *testing.T) {
	q := customer.NewQueue()
	if !q.TryClaim() {
		t.Fatal("TryClaim on an empty idle queue failed")
	}
	if q.TryClaim() {
		t.Fatal("second TryClaim succeeded while the slot is taken")
	}
	q.Push(msg(0, 1))
	got := make(chan int)
	go func() {
		m, ok := q.Next()
		if !ok {
			got <- -1
			return
		}
		got <- int(m.Meta.Head)
	}()
	select {
	case id := <-got:
		t.Fatalf("Next returned %d while the slot was claimed", id)
	case <-time.After(20 * time.Millisecond):
	}
	q.Release()
	if id := <-got; id != 1 {
		t.Fatalf("Next returned %d, want 1", id)
	}
	// Next took the slot: nobody may claim it, and a queued message keeps
	// a later TryClaim from jumping ahead of it.
	if q.TryClaim() {
		t.Fatal("TryClaim succeeded while Next's message is being handled")
	}
	q.Push(msg(0, 2))
	q.Release()
	if q.TryClaim() {
		t.Fatal("TryClaim succeeded with a message queued")
	}
	if m, _ := q.Next(); m.Meta.Head != 2 {
		t.Fatalf("Next returned %d, want 2", m.Meta.Head)
	}
	q.Release()
	q.Close()
	if q.TryClaim() {
		t.Fatal("TryClaim succeeded on a closed queue")
	}
	if _, ok := q.Next(); ok {
		t.Fatal("Next on a closed empty queue returned a message")
	}
}
