package psf

import (
	"context"
	"errors"
	"testing"
)

// A finished future returns its result even when Wait's context is done
// already: both channels are ready then, and the result must win every
// time, not half of them.
func TestFutureWaitFinishedWithCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok := newFuture[int]()
	ok.resolve(7, nil)
	bad := failed[int](errors.New("refused"))
	h := &Handle{newFuture[struct{}]()}
	h.f.resolve(struct{}{}, nil)
	for i := 0; i < 2000; i++ {
		if v, err := ok.Wait(ctx); v != 7 || err != nil {
			t.Fatalf("iteration %d: Wait of a finished future = %v, %v; want 7, nil", i, v, err)
		}
		if _, err := bad.Wait(ctx); err == nil || err.Error() != "refused" {
			t.Fatalf("iteration %d: Wait of a failed future = %v; want its error", i, err)
		}
		if err := h.Wait(ctx); err != nil {
			t.Fatalf("iteration %d: Wait of a finished handle = %v", i, err)
		}
	}
	// An unfinished future gives up with the context.
	if _, err := newFuture[int]().Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait of an unfinished future with a cancelled context: %v", err)
	}
}
