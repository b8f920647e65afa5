package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
)

// A request in flight to a server that goes away fails with ErrServerLost.
func TestPendingRequestFailsWhenServerStops(t *testing.T) {
	c := testcluster.New(t, 2, 1, testcluster.Options{})
	for _, p := range c.Servers {
		s, _ := kv.NewKVServer[float32](p, 0)
		if p.MyRank() == 0 {
			s.SetRequestHandle(func(meta kv.KVMeta, data kv.KVPairs[float32], s *kv.KVServer[float32]) {}) // never answers
		} else {
			s.SetRequestHandle(kv.NewDefaultHandle[float32]().Handle)
		}
	}
	w, _ := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
	ts, _ := w.Push([]uint64{1}, []float32{1}, nil)
	time.Sleep(200 * time.Millisecond)
	for _, p := range c.Servers {
		if p.MyRank() == 0 {
			p.Van().Stop()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.WaitContext(ctx, ts); !errors.Is(err, kv.ErrServerLost) {
		t.Errorf("Wait on a request to a stopped server = %v, want ErrServerLost", err)
	}
}
