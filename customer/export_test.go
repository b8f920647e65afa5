package customer

// Test hooks into the Tracker's internals.

// MaxFailures is the number of unwaited failures a Tracker remembers.
const MaxFailures = maxFailures

// SetNext sets the timestamp the next NewRequest tries first.
func (t *Tracker) SetNext(n int32) {
	t.mu.Lock()
	t.next = n
	t.mu.Unlock()
}

// Sizes returns the sizes of the tracker's internal bookkeeping; failOrder
// counts the live (not stale) entries.
func (t *Tracker) Sizes() (pending, failed, failOrder int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ref := range t.failOrder {
		if f, ok := t.failed[ref.ts]; ok && f.seq == ref.seq {
			failOrder++
		}
	}
	return t.pending.Len(), len(t.failed), failOrder
}

// Waiting reports whether someone waits on the unfinished request ts: a
// Wait or WaitContext has found it unfinished and waits (or is about to
// wait) for it to finish.
func (t *Tracker) Waiting(ts int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.pending.Get(ts)
	return ok && r.done != nil
}

// Waited returns how many unfinished requests someone waits on.
func (t *Tracker) Waited() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, r := range t.pending.All() {
		if r.done != nil {
			n++
		}
	}
	return n
}

// Waiting returns how many goroutines wait in Pop or Next.
func (q *Queue) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting
}

// Queued returns how many messages wait in the customer's queue.
func (c *Customer) Queued() int { return c.queue.Len() }

// Waiting returns how many goroutines wait in the customer's queue.
func (c *Customer) Waiting() int { return c.queue.Waiting() }

// Stopping reports whether Stop has closed the customer's queue.
func (c *Customer) Stopping() bool {
	c.queue.mu.Lock()
	defer c.queue.mu.Unlock()
	return c.queue.closed
}

// SetYield replaces the CPU yield of a lone Wait with f until the
// returned function restores it; no Wait may run meanwhile.
func SetYield(f func()) (restore func()) {
	old := yieldCPU
	yieldCPU = f
	return func() { yieldCPU = old }
}
