package customer_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopslite/pslite/customer"
)

func newReq(t *testing.T, tr *customer.Tracker, expected int) int {
	t.Helper()
	ts, err := tr.NewRequest(expected)
	if err != nil {
		t.Fatalf("NewRequest(%d): %v", expected, err)
	}
	return ts
}

// waitDone runs Wait(ts) and fails the test if it does not return in time.
func waitDone(t *testing.T, tr *customer.Tracker, ts int) error {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- tr.Wait(ts) }()
	select {
	case err := <-ch:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("Wait(%d) did not return", ts)
		return nil
	}
}

func TestTrackerTimestampsIncreaseFromZero(t *testing.T) {
	tr := customer.NewTracker()
	for i := range 100 {
		expected := i%3 - 1 // -1, 0, 1: every request takes a timestamp
		if ts := newReq(t, tr, expected); ts != i {
			t.Fatalf("request %d got timestamp %d", i, ts)
		}
	}
}

func TestTrackerNonPositiveExpectedFinishesAtOnce(t *testing.T) {
	tr := customer.NewTracker()
	for _, exp := range []int{0, -1, math.MinInt} {
		ts := newReq(t, tr, exp)
		if tr.Pending(ts) {
			t.Errorf("expected=%d: request pending", exp)
		}
		if err := waitDone(t, tr, ts); err != nil {
			t.Errorf("expected=%d: Wait = %v", exp, err)
		}
		if _, _, ok := tr.NumResponse(ts); ok {
			t.Errorf("expected=%d: NumResponse ok for a finished request", exp)
		}
	}
	if tr.Len() != 0 {
		t.Fatalf("Len = %d", tr.Len())
	}
}

func TestTrackerAddResponseCompletes(t *testing.T) {
	tr := customer.NewTracker()
	ts := newReq(t, tr, 3)
	if !tr.Pending(ts) || tr.Len() != 1 {
		t.Fatalf("new request: Pending=%t Len=%d", tr.Pending(ts), tr.Len())
	}
	if got, exp, ok := tr.NumResponse(ts); got != 0 || exp != 3 || !ok {
		t.Fatalf("NumResponse = %d, %d, %t; want 0, 3, true", got, exp, ok)
	}
	waited := make(chan error, 1)
	go func() { waited <- tr.Wait(ts) }()

	if !tr.AddResponse(ts, 1) {
		t.Fatal("AddResponse on a pending request returned false")
	}
	if got, exp, ok := tr.NumResponse(ts); got != 1 || exp != 3 || !ok {
		t.Fatalf("NumResponse = %d, %d, %t; want 1, 3, true", got, exp, ok)
	}
	if !tr.AddResponse(ts, 1) {
		t.Fatal("AddResponse returned false")
	}
	select {
	case err := <-waited:
		t.Fatalf("Wait returned (%v) with 2 of 3 responses", err)
	case <-time.After(20 * time.Millisecond):
	}
	if !tr.Pending(ts) {
		t.Fatal("request finished with 2 of 3 responses")
	}
	if !tr.AddResponse(ts, 1) {
		t.Fatal("AddResponse returned false")
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("Wait = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after the last response")
	}
	if tr.Pending(ts) || tr.Len() != 0 {
		t.Fatalf("finished request: Pending=%t Len=%d", tr.Pending(ts), tr.Len())
	}
	if got, exp, ok := tr.NumResponse(ts); got != 0 || exp != 0 || ok {
		t.Fatalf("NumResponse of finished = %d, %d, %t; want 0, 0, false", got, exp, ok)
	}
	if tr.AddResponse(ts, 1) {
		t.Fatal("late AddResponse returned true")
	}
	if tr.AddResponse(12345, 1) {
		t.Fatal("AddResponse of an unknown timestamp returned true")
	}
}

func TestTrackerAddResponseManyAtOnce(t *testing.T) {
	tr := customer.NewTracker()
	ts := newReq(t, tr, 4)
	tr.AddResponse(ts, 10) // overshoot still finishes
	if tr.Pending(ts) {
		t.Fatal("request pending after more responses than expected")
	}
	if err := waitDone(t, tr, ts); err != nil {
		t.Fatal(err)
	}
}

func TestTrackerWaitFinishedOrUnknownReturnsAtOnce(t *testing.T) {
	tr := customer.NewTracker()
	ts := newReq(t, tr, 1)
	tr.AddResponse(ts, 1)
	for _, x := range []int{ts, 999, 0} {
		if err := waitDone(t, tr, x); err != nil {
			t.Errorf("Wait(%d) = %v", x, err)
		}
	}
	for _, bad := range []int{-1, math.MaxInt32, math.MaxInt32 + 1} {
		if err := tr.Wait(bad); err == nil {
			t.Errorf("Wait(%d) = nil, want an invalid-timestamp error", bad)
		}
	}
}

func TestTrackerWaitContextCancel(t *testing.T) {
	tr := customer.NewTracker()
	ts := newReq(t, tr, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := tr.WaitContext(ctx, ts); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitContext = %v, want DeadlineExceeded", err)
	}
	if !tr.Pending(ts) {
		t.Fatal("cancelling a wait finished the request")
	}

	// Cancel a wait that waits already (not one that would find its
	// context done on entry). ts has been waited on before, which Waiting
	// cannot tell from a new wait: use a fresh request.
	ts2 := newReq(t, tr, 1)
	ctx2, cancel2 := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- tr.WaitContext(ctx2, ts2) }()
	waitFor(t, "WaitContext to wait", func() bool { return tr.Waiting(ts2) })
	cancel2()
	select {
	case err := <-ch:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitContext = %v, want Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not wake WaitContext")
	}
	if !tr.Pending(ts2) {
		t.Fatal("cancelling a wait finished the request")
	}

	// The requests can still finish and be waited on normally.
	for _, x := range []int{ts, ts2} {
		tr.AddResponse(x, 1)
		if err := waitDone(t, tr, x); err != nil {
			t.Fatal(err)
		}
	}
	// An already cancelled context on a finished request: nothing to wait for.
	ctx3, cancel3 := context.WithCancel(context.Background())
	cancel3()
	if err := tr.WaitContext(ctx3, ts); err != nil {
		t.Fatalf("WaitContext on finished request = %v, want nil", err)
	}
}

func TestTrackerFail(t *testing.T) {
	tr := customer.NewTracker()
	boom := errors.New("boom")

	// Fail before anyone waits: the next Wait gets the error, once.
	ts := newReq(t, tr, 2)
	tr.AddResponse(ts, 1)
	if !tr.Fail(ts, boom) {
		t.Fatal("Fail on a pending request returned false")
	}
	if tr.Pending(ts) || tr.Len() != 0 {
		t.Fatal("failed request still pending")
	}
	if tr.Fail(ts, boom) {
		t.Fatal("second Fail returned true")
	}
	if tr.AddResponse(ts, 1) {
		t.Fatal("AddResponse after Fail returned true")
	}
	if err := waitDone(t, tr, ts); !errors.Is(err, boom) {
		t.Fatalf("Wait = %v, want %v", err, boom)
	}
	if err := waitDone(t, tr, ts); err != nil {
		t.Fatalf("second Wait = %v, want nil", err)
	}

	// Fail while someone waits.
	ts2 := newReq(t, tr, 1)
	ch := make(chan error, 1)
	go func() { ch <- tr.Wait(ts2) }()
	waitFor(t, "Wait to wait", func() bool { return tr.Waiting(ts2) })
	tr.Fail(ts2, boom)
	select {
	case err := <-ch:
		if !errors.Is(err, boom) {
			t.Fatalf("blocked Wait = %v, want %v", err, boom)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Fail did not wake Wait")
	}
	if err := waitDone(t, tr, ts2); err != nil {
		t.Fatalf("Wait after the failure was reported = %v", err)
	}
	if tr.Fail(777, boom) {
		t.Fatal("Fail of an unknown timestamp returned true")
	}
	if _, f, o := tr.Sizes(); f != 0 || o != 0 {
		t.Fatalf("failure bookkeeping not emptied: failed=%d failOrder=%d", f, o)
	}
}

func TestTrackerFailAll(t *testing.T) {
	tr := customer.NewTracker()
	down := errors.New("node down")
	var tss []int
	for range 10 {
		tss = append(tss, newReq(t, tr, 2))
	}
	done := newReq(t, tr, 1)
	tr.AddResponse(done, 1)

	var wg sync.WaitGroup
	errs := make([]error, len(tss))
	for i, ts := range tss[:5] { // half are waited on while failing
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = tr.Wait(ts) }()
	}
	waitFor(t, "the waits to wait", func() bool { return tr.Waited() == 5 })
	tr.FailAll(down)
	wg.Wait()
	if tr.Len() != 0 {
		t.Fatalf("Len = %d after FailAll", tr.Len())
	}
	for i, ts := range tss[5:] {
		errs[5+i] = tr.Wait(ts)
	}
	for i, err := range errs {
		if !errors.Is(err, down) {
			t.Errorf("request %d: Wait = %v, want %v", tss[i], err, down)
		}
	}
	if err := tr.Wait(done); err != nil {
		t.Errorf("request finished before FailAll: Wait = %v", err)
	}
	tr.FailAll(down) // nothing pending: no-op
	if p, f, o := tr.Sizes(); p != 0 || f != 0 || o != 0 {
		t.Fatalf("internal sizes %d/%d/%d, want 0/0/0", p, f, o)
	}
}

func TestTrackerMemoryBounded(t *testing.T) {
	tr := customer.NewTracker()
	boom := errors.New("boom")
	const n = 100_000
	for i := range n {
		ts := newReq(t, tr, 2)
		switch i % 4 {
		case 0:
			tr.AddResponse(ts, 2)
		case 1:
			tr.AddResponse(ts, 1)
			tr.AddResponse(ts, 1)
			if err := tr.Wait(ts); err != nil {
				t.Fatal(err)
			}
		case 2:
			tr.Fail(ts, boom)
			if err := tr.Wait(ts); !errors.Is(err, boom) {
				t.Fatalf("Wait = %v", err)
			}
		case 3:
			tr.Fail(ts, boom) // never waited on
		}
	}
	if tr.Len() != 0 {
		t.Fatalf("Len = %d after %d finished requests", tr.Len(), n)
	}
	p, f, o := tr.Sizes()
	if p != 0 {
		t.Fatalf("pending map holds %d entries", p)
	}
	if f > customer.MaxFailures || o > customer.MaxFailures || f != o {
		t.Fatalf("failure bookkeeping: failed=%d failOrder=%d, want equal and <= %d", f, o, customer.MaxFailures)
	}
	if f != customer.MaxFailures {
		t.Fatalf("remembered %d unwaited failures, want the last %d", f, customer.MaxFailures)
	}
	// Waiting on the remembered ones empties it.
	for ts := n - 1; ts >= 0; ts -= 4 {
		tr.Wait(ts)
	}
	if p, f, o := tr.Sizes(); p != 0 || f != 0 || o != 0 {
		t.Fatalf("internal sizes %d/%d/%d after waiting, want 0/0/0", p, f, o)
	}
}

// TestTrackerFailureEviction: past MaxFailures unwaited failures, the oldest
// is forgotten (Wait returns nil) and the newer ones are kept.
func TestTrackerFailureEviction(t *testing.T) {
	tr := customer.NewTracker()
	var tss []int
	for range customer.MaxFailures + 1 {
		ts := newReq(t, tr, 1)
		tr.Fail(ts, errors.New("e"))
		tss = append(tss, ts)
	}
	if err := tr.Wait(tss[0]); err != nil {
		t.Errorf("oldest failure should have been evicted, Wait = %v", err)
	}
	for _, ts := range tss[1:] {
		if err := tr.Wait(ts); err == nil {
			t.Fatalf("failure of %d was lost", ts)
		}
	}
}

func TestTrackerWrapAround(t *testing.T) {
	tr := customer.NewTracker()
	tr.SetNext(math.MaxInt32 - 3)
	var got []int
	for range 5 {
		got = append(got, newReq(t, tr, 0))
	}
	want := []int{math.MaxInt32 - 3, math.MaxInt32 - 2, math.MaxInt32 - 1, 0, 1}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("timestamps %v, want %v", got, want)
		}
	}
}

func TestTrackerWrapAroundSkipsPending(t *testing.T) {
	tr := customer.NewTracker()
	busy0 := newReq(t, tr, 1) // 0
	busy1 := newReq(t, tr, 1) // 1
	tr.SetNext(math.MaxInt32 - 1)
	a := newReq(t, tr, 1)
	b := newReq(t, tr, 1)
	if a != math.MaxInt32-1 || b != 2 {
		t.Fatalf("got %d, %d; want %d, 2 (0 and 1 are in use, MaxInt32 is never used)", a, b, math.MaxInt32-1)
	}
	for _, ts := range []int{busy0, busy1, a, b} {
		if !tr.Pending(ts) {
			t.Errorf("%d not pending", ts)
		}
		tr.AddResponse(ts, 1)
	}
	if tr.Len() != 0 {
		t.Fatalf("Len = %d", tr.Len())
	}
}

func TestTrackerNeverReturnsMaxInt32(t *testing.T) {
	tr := customer.NewTracker()
	tr.SetNext(math.MaxInt32 - 100)
	for range 300 {
		ts := newReq(t, tr, 1)
		if ts == math.MaxInt32 || ts < 0 {
			t.Fatalf("timestamp %d", ts)
		}
		tr.AddResponse(ts, 1)
	}
}

// TestTrackerReusedTimestampForgetsOldFailure: a timestamp reused after
// wrap-around must not report the failure of its previous use.
func TestTrackerReusedTimestampForgetsOldFailure(t *testing.T) {
	tr := customer.NewTracker()
	ts := newReq(t, tr, 1)
	tr.Fail(ts, errors.New("old"))
	tr.SetNext(int32(ts))
	if again := newReq(t, tr, 1); again != ts {
		t.Fatalf("reuse got %d, want %d", again, ts)
	}
	tr.AddResponse(ts, 1)
	if err := tr.Wait(ts); err != nil {
		t.Fatalf("Wait on reused timestamp = %v, want nil", err)
	}
}

// TestTrackerReusedTimestampFailureBookkeeping: when a timestamp whose
// failure was never waited on is reused (after wrap-around), NewRequest drops
// the old error from failed but leaves its entry in failOrder. That stale
// entry later evicts the *new* failure of the same timestamp early, while far
// fewer than MaxFailures failures are remembered.
func TestTrackerReusedTimestampFailureBookkeeping(t *testing.T) {
	tr := customer.NewTracker()
	old := newReq(t, tr, 1) // ts 0
	tr.Fail(old, errors.New("old failure, never waited on"))
	for range customer.MaxFailures - 2 { // ts 1..4094
		tr.Fail(newReq(t, tr, 1), errors.New("other"))
	}
	// Wrap around onto ts 0 and fail it again.
	tr.SetNext(int32(old))
	if ts := newReq(t, tr, 1); ts != old {
		t.Fatalf("reuse got %d, want %d", ts, old)
	}
	recent := errors.New("recent failure")
	tr.Fail(old, recent)
	if _, f, o := tr.Sizes(); f != o {
		t.Errorf("failed has %d entries but failOrder has %d", f, o)
	}
	// One more failure elsewhere: only MaxFailures-1 distinct failures are
	// remembered so far, so nothing needs evicting.
	tr.SetNext(100_000)
	tr.Fail(newReq(t, tr, 1), errors.New("newest"))
	if err := tr.Wait(old); !errors.Is(err, recent) {
		t.Fatalf("Wait(%d) = %v, want %q (the second most recent failure was evicted)", old, err, recent)
	}
}

// TestTrackerOutOfRangeTimestamps: timestamps are int32 on the wire. An int
// outside [0, MaxInt32) is not a request; it must not alias one by
// truncation (1<<32 truncates to 0). WaitContext rejects such values, the
// other methods should not act on request 0.
func TestTrackerOutOfRangeTimestamps(t *testing.T) {
	if math.MaxInt == math.MaxInt32 {
		t.Log("32-bit int: no value truncates")
		return
	}
	tr := customer.NewTracker()
	ts := newReq(t, tr, 2) // 0
	alias := ts + 1<<32
	if tr.Pending(alias) {
		t.Errorf("Pending(%d) = true: aliases request %d", alias, ts)
	}
	if _, _, ok := tr.NumResponse(alias); ok {
		t.Errorf("NumResponse(%d) ok: aliases request %d", alias, ts)
	}
	if tr.AddResponse(alias, 1) {
		t.Errorf("AddResponse(%d) = true: counted against request %d", alias, ts)
	}
	if tr.Fail(alias, errors.New("x")) {
		t.Errorf("Fail(%d) = true: failed request %d", alias, ts)
	}
}

func TestTrackerConcurrent(t *testing.T) {
	tr := customer.NewTracker()
	const goroutines, per, expected = 8, 500, 3
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				ts, err := tr.NewRequest(expected)
				if err != nil {
					t.Error(err)
					return
				}
				var rwg sync.WaitGroup
				for range expected {
					rwg.Add(1)
					go func() { defer rwg.Done(); tr.AddResponse(ts, 1) }()
				}
				if err := tr.Wait(ts); err != nil {
					t.Error(err)
				}
				rwg.Wait()
				if tr.Pending(ts) {
					t.Errorf("%d pending after Wait", ts)
				}
			}
		}()
	}
	wg.Wait()
	if p, f, o := tr.Sizes(); p != 0 || f != 0 || o != 0 {
		t.Fatalf("internal sizes %d/%d/%d", p, f, o)
	}
}

// TestTrackerManyInFlight keeps more requests unfinished than the tracker's
// array of slots holds (a long-running request shares its slot with later
// ones), finishes them in a seeded random order, some with a wait already
// on them, and checks each finishes once and nothing is left behind.
func TestTrackerManyInFlight(t *testing.T) {
	tr := customer.NewTracker()
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 1000
	tss := make([]int, n)
	for i := range tss {
		tss[i] = newReq(t, tr, 2)
	}
	var wg sync.WaitGroup
	for _, ts := range tss[:n/10] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := tr.Wait(ts); err != nil {
				t.Errorf("Wait(%d) = %v", ts, err)
			}
		}()
	}
	waitFor(t, "the waits to wait", func() bool { return tr.Waited() == n/10 })
	for _, i := range rng.Perm(n) {
		ts := tss[i]
		if got, exp, ok := tr.NumResponse(ts); !ok || got != 0 || exp != 2 {
			t.Fatalf("NumResponse(%d) = %d, %d, %v", ts, got, exp, ok)
		}
		if !tr.AddResponse(ts, 1) || !tr.Pending(ts) || !tr.AddResponse(ts, 1) || tr.Pending(ts) {
			t.Fatalf("request %d did not finish on its second response", ts)
		}
		if tr.AddResponse(ts, 1) {
			t.Fatalf("request %d took a response after finishing", ts)
		}
	}
	wg.Wait()
	if p, f, o := tr.Sizes(); p != 0 || f != 0 || o != 0 {
		t.Fatalf("internal sizes %d/%d/%d, want 0/0/0", p, f, o)
	}
}

// A Wait that is about to block yields the CPU first only when its request
// is the only one in flight (see WaitContext); one that need not block, or
// waits with others in flight, does not.
func TestTrackerYieldsOnlyBeforeALoneWait(t *testing.T) {
	var yields atomic.Int32
	defer customer.SetYield(func() { yields.Add(1) })()
	tr := customer.NewTracker()

	finished := newReq(t, tr, 1)
	tr.AddResponse(finished, 1)
	if err := waitDone(t, tr, finished); err != nil {
		t.Fatal(err)
	}
	if n := yields.Load(); n != 0 {
		t.Fatalf("a Wait on a finished request yielded %d times", n)
	}

	// yieldsOf waits on ts in a goroutine, answers it once the goroutine
	// waits, and returns the yields the Wait made.
	yieldsOf := func(ts int) int32 {
		before := yields.Load()
		ch := make(chan error, 1)
		go func() { ch <- tr.Wait(ts) }()
		waitFor(t, "Wait to wait", func() bool { return tr.Waiting(ts) })
		tr.AddResponse(ts, 1)
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Wait(%d) did not return", ts)
		}
		return yields.Load() - before
	}
	if n := yieldsOf(newReq(t, tr, 1)); n != 1 {
		t.Fatalf("a Wait on the only request in flight yielded %d times, want 1", n)
	}
	first, second := newReq(t, tr, 1), newReq(t, tr, 1)
	if n := yieldsOf(first); n != 0 {
		t.Fatalf("a Wait with two requests in flight yielded %d times, want 0", n)
	}
	tr.AddResponse(second, 1)
}
