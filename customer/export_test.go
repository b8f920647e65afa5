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
	return len(t.pending), len(t.failed), failOrder
}
