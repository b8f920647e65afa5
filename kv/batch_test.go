package kv_test

import (
	"context"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
)

// Over ZeroMQ the receive loop holds back what is sent to the senders of
// the messages it handles until nothing more has arrived. A handle that
// answers and then blocks must not keep its answer back: once it has run
// for van.HandlerStall, the loop moves to a new goroutine, which sends what
// was held.
func TestAnswerOfABlockedHandleIsSent(t *testing.T) {
	c := testcluster.New(t, 1, 1, testcluster.Options{})
	if c.Network != nil {
		t.Skip("needs the ZeroMQ transport (cgo)")
	}
	release := make(chan struct{})
	defer close(release)
	s, err := kv.NewKVServer[float32](c.Servers[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	err = s.SetRequestHandle(func(meta kv.KVMeta, data kv.KVPairs[float32], s *kv.KVServer[float32]) {
		s.Response(meta, kv.KVPairs[float32]{})
		if meta.Cmd == 1 {
			<-release // blocks the receive goroutine it runs on
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys, vals := []uint64{1}, []float32{1}
	blocked, err := w.ZPush(keys, vals, nil, kv.WithCmd(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WaitContext(ctx, blocked); err != nil {
		t.Fatalf("the answer of the handle that blocks: %v", err)
	}
}
