package kv_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// TestLentRequests runs servers with LendRequests over real sockets, with given
// back memory poisoned (PS_POISON_LENT), requests large enough to be lent
// (800 KB of keys and of values per server), with and without resending:
//   - the handle sees the pushed keys and values;
//   - a pull answered with a view of the request's keys (ZResponse) reaches
//     the worker intact, though the handle returns before it is sent;
//   - pulled values lent to the worker are its own: they stay intact
//     through later pulls, from both servers (the last answer is assembled
//     from a view, the first from a copy) or from one (a view, copied out);
//   - an empty destination with room is filled in place;
//   - a view the handle keeps past its return reads the poison.
func TestLentRequests(t *testing.T) {
	for _, resend := range []bool{false, true} {
		t.Run(map[bool]string{false: "resend off", true: "resend on"}[resend], func(t *testing.T) {
			c := testcluster.New(t, 2, 1, testcluster.Options{Tweak: func(cfg *postoffice.Config) {
				cfg.PoisonLent = true
				cfg.Resend = resend
			}})
			if c.Network != nil {
				t.Skip("needs a real transport (cgo build)")
			}
			val := func(k uint64) float64 { return float64(k%1000003) + 0.5 }
			var mu sync.Mutex
			var kept []float64 // a view a (wrong) handle keeps
			pushed := 0
			for _, p := range c.Servers {
				s, err := kv.NewKVServer[float64](p, 0)
				if err != nil {
					t.Fatal(err)
				}
				s.LendRequests(true)
				err = s.SetRequestHandle(func(meta kv.KVMeta, data kv.KVPairs[float64], s *kv.KVServer[float64]) {
					if meta.Push {
						for i, k := range data.Keys {
							if data.Vals[i] != val(k) {
								t.Errorf("pushed value of key %d reads %v", k, data.Vals[i])
								break
							}
						}
						mu.Lock()
						kept = data.Vals
						pushed += len(data.Keys)
						mu.Unlock()
						s.Response(meta, kv.KVPairs[float64]{})
						return
					}
					vals := make([]float64, len(data.Keys))
					for i, k := range data.Keys {
						vals[i] = val(k)
					}
					if err := s.ZResponse(meta, kv.KVPairs[float64]{Keys: data.Keys, Vals: vals}); err != nil {
						t.Error(err)
					}
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			w, err := kv.NewKVWorker[float64](c.Workers[0], 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			const n = 200000
			keys := spreadKeys(n, 3)
			vals := make([]float64, n)
			for i, k := range keys {
				vals[i] = val(k)
			}
			pull := func(keys []uint64, dst *[]float64) {
				t.Helper()
				ts, err := w.Pull(keys, dst, nil)
				if err == nil {
					err = w.Wait(ts)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			check := func(what string, keys []uint64, got []float64) {
				t.Helper()
				if len(got) != len(keys) {
					t.Fatalf("%s: %d values for %d keys", what, len(got), len(keys))
				}
				for i, k := range keys {
					if got[i] != val(k) {
						t.Fatalf("%s: pulled %v for key %d, want %v", what, got[i], k, val(k))
					}
				}
			}
			var results [][]float64
			for round := range 3 {
				ts, err := w.Push(keys, vals, nil)
				if err == nil {
					err = w.Wait(ts)
				}
				if err != nil {
					t.Fatal(err)
				}
				var got, one []float64
				pull(keys, &got)
				check(fmt.Sprintf("round %d", round), keys, got)
				pull(keys[:n/2], &one) // the first server's keys only
				check(fmt.Sprintf("round %d, one server", round), keys[:n/2], one)
				results = append(results, got, one)
			}
			for i, got := range results {
				check(fmt.Sprintf("result %d after the last pull", i), [][]uint64{keys, keys[:n/2]}[i%2], got)
			}
			buf := make([]float64, 0, n)
			for _, ks := range [][]uint64{keys, keys[:n/2]} {
				got := buf[:0]
				pull(ks, &got)
				check("into a buffer with room", ks, got)
				if &got[0] != &buf[:1][0] {
					t.Errorf("an empty destination with room for %d values was not filled in place", len(ks))
				}
			}
			// Lent memory is given back once its handle returns and every
			// send of it is written, on goroutines of the transport: only
			// after the job is finalized does the test read what a wrong
			// handle kept.
			c.Finalize(t)
			mu.Lock()
			defer mu.Unlock()
			if pushed != 3*n {
				t.Fatalf("handles saw %d pushed keys, want %d", pushed, 3*n)
			}
			poison := math.Float64frombits(0xDBDBDBDBDBDBDBDB)
			if len(kept) == 0 || kept[0] != poison || kept[len(kept)-1] != poison {
				t.Fatalf("a view kept past the handle reads %v...%v, want the poison", kept[0], kept[len(kept)-1])
			}
		})
	}
}

// A pull answered by one server and then failed by the loss of the other
// gives back the lent memory the first answer held: the worker keeps a
// non-final answer's lent values (no copy) until the pull is assembled or
// fails. Values of 300,000 keys a server are lent on every transport.
func TestFailedPullGivesBackHeldAnswer(t *testing.T) {
	for _, van := range testcluster.Vans() {
		t.Run(van, func(t *testing.T) {
			before := message.LiveLoans()
			c := testcluster.New(t, 2, 1, testcluster.Options{Van: van})
			reached := make(chan struct{})
			var once sync.Once
			for _, p := range c.Servers {
				s, err := kv.NewKVServer[float32](p, 0)
				if err != nil {
					t.Fatal(err)
				}
				h := kv.NewDefaultHandle[float32]().Handle
				if p.MyRank() == 0 {
					h = func(kv.KVMeta, kv.KVPairs[float32], *kv.KVServer[float32]) {
						once.Do(func() { close(reached) }) // and never answers
					}
				}
				if err := s.SetRequestHandle(h); err != nil {
					t.Fatal(err)
				}
			}
			w, err := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			keys := make([]uint64, 600000)
			for i := range keys {
				keys[i] = message.MaxKey / uint64(len(keys)) * uint64(i)
			}
			var vals []float32
			ts, err := w.Pull(keys, &vals, nil)
			if err != nil {
				t.Fatal(err)
			}
			<-reached
			// Server 1's answer is held once the worker has taken it.
			deadline := time.Now().Add(20 * time.Second)
			for message.LiveLoans() <= before {
				if time.Now().After(deadline) {
					t.Fatal("server 1's answer never held a loan at the worker")
				}
				time.Sleep(time.Millisecond) // polls a condition, with a deadline
			}
			c.Servers[0].Van().Stop()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := w.WaitContext(ctx, ts); !errors.Is(err, kv.ErrServerLost) {
				t.Fatalf("Wait = %v, want ErrServerLost", err)
			}
			if n := message.LiveLoans(); n != before {
				t.Errorf("%d loans live after the failed pull, %d before it", n, before)
			}
		})
	}
}
