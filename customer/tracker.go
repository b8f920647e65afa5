package customer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/gopslite/pslite/internal/tsmap"
)

// ErrTooManyRequests is returned by NewRequest when every timestamp is in use.
var ErrTooManyRequests = errors.New("customer: every timestamp is in use by an unfinished request")

// maxFailures bounds how many failed requests are remembered for a later Wait.
const maxFailures = 4096

// Tracker counts responses per request timestamp. It keeps state only for
// unfinished requests (and a bounded number of failed ones not yet waited
// on), so its memory does not grow over a long job. It is safe for
// concurrent use.
type Tracker struct {
	mu      sync.Mutex
	next    int32
	source  func() int32 // hands out timestamps; nil: next
	pending tsmap.Map[request]
	// failed remembers errors of failed requests until someone waits on
	// them; failOrder lists them oldest first for eviction past maxFailures.
	// An entry of failOrder whose seq no longer matches failed is stale.
	failed    map[int32]failure
	failOrder []failRef
	failSeq   uint64
	// nfailed is len(failed), for a Wait to skip the lock when no request
	// failed.
	nfailed atomic.Int32
}

type failure struct {
	err error
	seq uint64
}

type failRef struct {
	ts  int32
	seq uint64
}

type request struct {
	expected int
	got      int
	done     chan struct{} // created on first wait, closed when finished
}

// NewTracker returns an empty tracker whose first timestamp is 0.
func NewTracker() *Tracker {
	return &Tracker{failed: make(map[int32]failure)}
}

// NewSharedTracker returns an empty tracker that draws its timestamps from
// source, which the trackers of every customer of a process share (with
// the van's control messages), so that no two requests of the process carry
// the same timestamp. With PS_RESEND that matters: a resend signature has
// no customer id, so two customers' requests with one timestamp would look
// like one message resent. source must return values in [0, MaxInt32).
func NewSharedTracker(source func() int32) *Tracker {
	t := NewTracker()
	t.source = source
	return t
}

// NewRequest starts tracking a request that expects the given number of
// responses and returns its timestamp.
func (t *Tracker) NewRequest(expected int) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for tries := 0; tries < math.MaxInt32; tries++ {
		ts := t.next
		if t.source != nil {
			ts = t.source()
		} else {
			t.next++
			if t.next == math.MaxInt32 { // MaxInt32 means "absent" on the wire
				t.next = 0
			}
		}
		if t.pending.Ref(int(ts)) != nil { // busy
			continue
		}
		if len(t.failed) > 0 {
			delete(t.failed, ts) // a failure of an earlier use of ts is forgotten
			t.nfailed.Store(int32(len(t.failed)))
		}
		if expected <= 0 {
			return int(ts), nil // nothing to wait for: finished already
		}
		t.pending.Put(int(ts), request{expected: expected})
		return int(ts), nil
	}
	return 0, ErrTooManyRequests
}

// Pending reports whether ts is an unfinished request.
func (t *Tracker) Pending(ts int) bool {
	if !valid(ts) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pending.Ref(ts) != nil
}

// NumResponse returns how many responses ts has received and how many it
// expects. ok is false when ts is not an unfinished request.
func (t *Tracker) NumResponse(ts int) (got, expected int, ok bool) {
	if !valid(ts) {
		return 0, 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.pending.Get(ts)
	if !ok {
		return 0, 0, false
	}
	return r.got, r.expected, true
}

// AddResponse records num more responses for ts; the request finishes once
// it has all it expects. It reports false when ts is not an unfinished
// request (a late or unknown response).
func (t *Tracker) AddResponse(ts, num int) bool {
	if !valid(ts) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.pending.Ref(ts)
	if r == nil {
		return false
	}
	r.got += num
	if r.got >= r.expected {
		t.finishLocked(int32(ts), *r)
	}
	return true
}

// Fail finishes ts with an error, which the next Wait on ts returns. It
// reports false when ts is not an unfinished request.
func (t *Tracker) Fail(ts int, err error) bool {
	if !valid(ts) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.pending.Get(ts)
	if !ok {
		return false
	}
	for len(t.failed) >= maxFailures && len(t.failOrder) > 0 {
		old := t.failOrder[0]
		t.failOrder = t.failOrder[1:]
		if f, ok := t.failed[old.ts]; ok && f.seq == old.seq {
			delete(t.failed, old.ts)
		}
	}
	if len(t.failOrder) > 4*maxFailures { // drop stale entries
		live := t.failOrder[:0]
		for _, ref := range t.failOrder {
			if f, ok := t.failed[ref.ts]; ok && f.seq == ref.seq {
				live = append(live, ref)
			}
		}
		t.failOrder = live
	}
	t.failSeq++
	t.failed[int32(ts)] = failure{err: err, seq: t.failSeq}
	t.nfailed.Store(int32(len(t.failed)))
	t.failOrder = append(t.failOrder, failRef{ts: int32(ts), seq: t.failSeq})
	t.finishLocked(int32(ts), r)
	return true
}

// FailAll finishes every unfinished request with err.
func (t *Tracker) FailAll(err error) {
	t.mu.Lock()
	tss := make([]int, 0, t.pending.Len())
	for ts := range t.pending.All() {
		tss = append(tss, ts)
	}
	t.mu.Unlock()
	for _, ts := range tss {
		t.Fail(ts, err)
	}
}

func (t *Tracker) finishLocked(ts int32, r request) {
	t.pending.Delete(int(ts))
	if r.done != nil {
		close(r.done)
	}
}

// Wait blocks until ts has finished and returns its error, if it failed.
// A timestamp that is not unfinished returns at once.
func (t *Tracker) Wait(ts int) error {
	return t.WaitContext(context.Background(), ts)
}

// WaitContext is Wait that gives up when ctx is done, returning ctx's error.
func (t *Tracker) WaitContext(ctx context.Context, ts int) error {
	if !valid(ts) {
		return fmt.Errorf("customer: invalid timestamp %d", ts)
	}
	t.mu.Lock()
	r := t.pending.Ref(ts)
	if r == nil {
		err := t.takeFailureLocked(int32(ts))
		t.mu.Unlock()
		return err
	}
	if r.done == nil {
		r.done = make(chan struct{})
	}
	done := r.done
	lone := t.pending.Len() == 1
	t.mu.Unlock()
	if lone {
		// A caller that has nothing else in flight is about to block.
		// Its request was most likely handed to a transport thread just
		// now (libzmq's I/O thread), which the kernel queues on this CPU
		// behind the caller: give the CPU away first, so that the request
		// leaves now rather than once the Go scheduler has found nothing
		// else to run on this thread. With more in flight the transport
		// is busy anyway, and yielding per request only costs.
		yieldCPU()
	}
	if stop := ctx.Done(); stop == nil {
		<-done // (a select costs more)
	} else {
		select {
		case <-done:
		case <-stop:
			return ctx.Err()
		}
	}
	if t.nfailed.Load() == 0 { // (stored before done was closed)
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.takeFailureLocked(int32(ts))
}

// takeFailureLocked returns and forgets ts's failure; its failOrder entry
// goes stale.
func (t *Tracker) takeFailureLocked(ts int32) error {
	f, ok := t.failed[ts]
	if !ok {
		return nil
	}
	delete(t.failed, ts)
	t.nfailed.Store(int32(len(t.failed)))
	return f.err
}

// valid reports whether ts can be a timestamp.
func valid(ts int) bool { return ts >= 0 && ts < math.MaxInt32 }

// Len returns the number of unfinished requests.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pending.Len()
}
