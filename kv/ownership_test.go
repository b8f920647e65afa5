package kv_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/postoffice"
)

// keptSizes are request sizes in keys on both sides of the transports'
// lending threshold (frames of 512 KiB: 65,536 keys of 8 bytes), so that
// the copies a handle keeps are made from both copied and lent frames.
var keptSizes = []int{1, 1000, 60000, 65535, 65536, 70000, 200000, 3}

// keptVal is the value a worker of rank pushes for key in its push i:
// distinct for every push, so that a kept copy overwritten by any later
// message reads wrong.
func keptVal(rank, i int, key uint64) float64 {
	return float64(key%1000003)*16 + float64(rank*len(keptSizes)+i) + 0.25
}

// A handle that does not take lent requests owns what it is given and may
// keep it: every push it kept must still read as sent after every later
// push and pull, on every transport, with given-back memory poisoned or
// reused. On ZMTP a kept copy was overwritten by later pushes (the clone
// that Message.Own made was given back to the transport's pool in place of
// the lent buffer). Pulls are answered with a view of the request's keys,
// which must reach the worker intact too.
func TestKeptRequestsStayIntact(t *testing.T) {
	for _, van := range testcluster.Vans() {
		for _, poison := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/poison=%t", van, poison), func(t *testing.T) {
				keptRequests(t, van, poison)
			})
		}
	}
}

type keptPush struct {
	rank, i    int
	keys       []uint64
	vals       []float64
	keysAtPush []uint64 // a copy, to tell a changed key from a changed value
}

func keptRequests(t *testing.T, van string, poison bool) {
	c := testcluster.New(t, 1, 2, testcluster.Options{Van: van, Tweak: func(cfg *postoffice.Config) {
		cfg.PoisonLent = poison
	}})
	var mu sync.Mutex
	var kept []keptPush
	s, err := kv.NewKVServer[float64](c.Servers[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	err = s.SetRequestHandle(func(meta kv.KVMeta, data kv.KVPairs[float64], s *kv.KVServer[float64]) {
		if meta.Push {
			// The push's round is in its command; the handle keeps the
			// slices it was given, without copying them.
			mu.Lock()
			kept = append(kept, keptPush{rank: meta.Sender, i: meta.Cmd, keys: data.Keys, vals: data.Vals,
				keysAtPush: append([]uint64(nil), data.Keys...)})
			mu.Unlock()
			s.Response(meta, kv.KVPairs[float64]{})
			return
		}
		vals := make([]float64, len(data.Keys))
		for j, k := range data.Keys {
			vals[j] = keptVal(meta.Cmd>>8, meta.Cmd&0xff, k)
		}
		if err := s.ZResponse(meta, kv.KVPairs[float64]{Keys: data.Keys, Vals: vals}); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for rank, p := range c.Workers {
		w, err := kv.NewKVWorker[float64](p, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var inFlight []int
			for i, n := range keptSizes {
				keys := spreadKeys(n, uint64(rank))
				vals := make([]float64, n)
				for j, k := range keys {
					vals[j] = keptVal(rank, i, k)
				}
				ts, err := w.Push(keys, vals, nil, kv.WithCmd(i))
				if err != nil {
					t.Error(err)
					return
				}
				var pulled []float64
				pt, err := w.Pull(keys, &pulled, nil, kv.WithCmd(rank<<8|i))
				if err != nil {
					t.Error(err)
					return
				}
				inFlight = append(inFlight, ts)
				if err := w.Wait(pt); err != nil {
					t.Error(err)
					return
				}
				if bad := countWrong(pulled, vals); bad > 0 {
					t.Errorf("worker %d: pull %d of %d keys: %d values wrong", rank, i, n, bad)
				}
			}
			for _, ts := range inFlight {
				if err := w.Wait(ts); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(kept) != len(keptSizes)*len(c.Workers) {
		t.Fatalf("the handle kept %d pushes, want %d", len(kept), len(keptSizes)*len(c.Workers))
	}
	for _, k := range kept {
		rank := senderRank(t, c, k.rank)
		if bad := countWrong(k.keys, k.keysAtPush); bad > 0 {
			t.Errorf("worker %d's push %d (%d keys): %d kept keys changed since the handle got them", rank, k.i, len(k.keys), bad)
		}
		want := make([]float64, len(k.keysAtPush))
		for j, key := range k.keysAtPush {
			want[j] = keptVal(rank, k.i, key)
		}
		if bad := countWrong(k.vals, want); bad > 0 {
			t.Errorf("worker %d's push %d (%d keys): %d of the kept values changed since the handle got them", rank, k.i, len(k.keys), bad)
		}
	}
	c.Finalize(t)
}

// senderRank returns the rank of the worker whose node id is id.
func senderRank(t *testing.T, c *testcluster.Cluster, id int) int {
	for _, w := range c.Workers {
		if w.MyID() == id {
			return w.MyRank()
		}
	}
	t.Fatalf("no worker has id %d", id)
	return -1
}

// countWrong returns how many of got differ from want (all of them when
// the lengths differ).
func countWrong[V comparable](got, want []V) int {
	if len(got) != len(want) {
		return max(len(got), len(want))
	}
	bad := 0
	for i := range got {
		if got[i] != want[i] {
			bad++
		}
	}
	return bad
}
