package tests

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
)

// A request in flight to a server that goes away fails with ErrServerLost.
func TestPendingRequestFailsWhenServerStops(t *testing.T) {
	c := testcluster.New(t, 2, 1, testcluster.Options{})
	reached := make(chan struct{})
	var once sync.Once
	for _, p := range c.Servers {
		s, _ := kv.NewKVServer[float32](p, 0)
		if p.MyRank() == 0 {
			s.SetRequestHandle(func(meta kv.KVMeta, data kv.KVPairs[float32], s *kv.KVServer[float32]) {
				once.Do(func() { close(reached) }) // and never answers
			})
		} else {
			s.SetRequestHandle(kv.NewDefaultHandle[float32]().Handle)
		}
	}
	w, _ := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
	ts, err := w.Push([]uint64{1}, []float32{1}, nil) // key 1 is server 0's
	if err != nil {
		t.Fatal(err)
	}
	select { // the request is in flight: server 0 has it and will not answer
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached server 0")
	}
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
