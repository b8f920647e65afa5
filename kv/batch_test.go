package kv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
)

// The receive loop holds back what is sent to the senders of the messages
// it handles until nothing more has arrived (van.Batcher, on both
// transports). A handle that answers and then blocks must not keep its
// answer back: once it has run for van.HandlerStall on the receive
// goroutine, the loop moves to a new goroutine, which sends what was held.
// (Over ZeroMQ this test hangs without that; over the in-memory network
// the handle may run on its customer's goroutine instead.)
func TestAnswerOfABlockedHandleIsSent(t *testing.T) {
	for _, mem := range []bool{true, false} {
		t.Run(fmt.Sprintf("mem=%v", mem), func(t *testing.T) {
			c := testcluster.New(t, 1, 1, testcluster.Options{Mem: mem})
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
		})
	}
}
