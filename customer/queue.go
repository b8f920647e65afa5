package customer

import (
	"container/heap"
	"sync"

	"github.com/gopslite/pslite/message"
)

// Queue is a blocking queue of messages: higher Meta.Priority first, and
// first-in first-out among equal priorities. It is safe for concurrent use.
type Queue struct {
	mu     sync.Mutex
	cond   *sync.Cond // signalled when items arrive or the queue closes
	items  msgHeap
	seq    uint64
	closed bool
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
		q.cond.Wait()
	}
	it := heap.Pop(&q.items).(item)
	return it.msg, true
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
