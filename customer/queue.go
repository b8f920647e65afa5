package customer

import (
	"container/heap"
	"sync"

	"github.com/gopslite/pslite/message"
)

// Queue is a blocking queue of messages: higher Meta.Priority first, and
// first-in first-out among equal priorities. It is safe for concurrent use.
//
// Besides Pop, a queue offers a handler slot for a consumer that handles one
// message at a time but lets other goroutines handle a message at once when
// it is idle: Next pops and takes the slot, TryClaim takes the slot when the
// queue is empty and the slot free, and Release frees it. Messages then
// reach the handler one at a time and in queue order, whoever runs it.
type Queue struct {
	mu      sync.Mutex
	cond    *sync.Cond // signalled when items arrive, the slot frees or the queue closes
	items   msgHeap
	seq     uint64
	closed  bool
	claimed bool // the handler slot is taken
	waiting int  // goroutines waiting in Pop or Next (read by tests)
}

// NewQueue returns an empty queue.
func NewQueue() *Queue {
	q := &Queue{}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Push adds a message. It reports false if the queue is closed.
func (q *Queue) Push(m *message.Message) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.seq++
	heap.Push(&q.items, item{msg: m, seq: q.seq})
	q.mu.Unlock()
	q.cond.Signal()
	return true
}

// Pop removes and returns the first message, blocking while the queue is
// empty. It returns false once the queue is closed and drained.
func (q *Queue) Pop() (*message.Message, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 {
		if q.closed {
			return nil, false
		}
		q.wait()
	}
	it := heap.Pop(&q.items).(item)
	return it.msg, true
}

// Next is Pop for the owner of the handler slot: it waits until a message is
// queued and the slot is free, then pops the message and takes the slot. It
// returns false once the queue is closed and empty.
func (q *Queue) Next() (*message.Message, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 || q.claimed {
		if q.closed && len(q.items) == 0 {
			return nil, false
		}
		q.wait()
	}
	q.claimed = true
	return heap.Pop(&q.items).(item).msg, true
}

// TryClaim takes the handler slot when the queue is open, empty and the
// slot free, so the caller may handle a message that would otherwise be
// queued behind nothing. The caller must Release the slot.
func (q *Queue) TryClaim() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.claimed || len(q.items) > 0 {
		return false
	}
	q.claimed = true
	return true
}

// Release frees the handler slot taken by Next or TryClaim.
func (q *Queue) Release() {
	q.mu.Lock()
	q.claimed = false
	wake := len(q.items) > 0
	q.mu.Unlock()
	if wake {
		q.cond.Signal()
	}
}

// wait waits on cond, counted in waiting; q.mu is held.
func (q *Queue) wait() {
	q.waiting++
	q.cond.Wait()
	q.waiting--
}

// Idle reports whether nothing is queued and nobody holds the handler slot.
func (q *Queue) Idle() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) == 0 && !q.claimed
}

// Len returns the number of queued messages.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Close wakes every Pop; queued messages can still be popped.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

type item struct {
	msg *message.Message
	seq uint64
}

type msgHeap []item

func (h msgHeap) Len() int { return len(h) }
func (h msgHeap) Less(i, j int) bool {
	pi, pj := h[i].msg.Meta.Priority, h[j].msg.Meta.Priority
	if pi != pj {
		return pi > pj
	}
	return h[i].seq < h[j].seq
}
func (h msgHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *msgHeap) Push(x any)   { *h = append(*h, x.(item)) }
func (h *msgHeap) Pop() any {
	old := *h
	n := len(old)
	it := old[n-1]
	old[n-1] = item{}
	*h = old[:n-1]
	return it
}
