package kv_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// Windowed traffic in a replicated job (PS_REPLICAS=1, 3 servers, 2
// workers), on every transport: each worker keeps 64 pushes in flight, of
// 1 to 8 keys, with and without lens (two values a key), and now and then
// one of 20,000 keys, so that servers pass small entries on in batches and
// large ones alone, both after each other to the same server. Every value
// of every server in every chain is checked: worker 0 pulls all keys from
// the heads, and each server's store is read directly once the job is
// over (every key on exactly two servers, both exact).
func TestReplicatedTrafficIsExact(t *testing.T) {
	ops := 3000
	if raceOn || testing.Short() {
		ops = 600
	}
	for _, van := range testcluster.Vans() {
		t.Run(van, func(t *testing.T) { replicatedTraffic(t, van, ops) })
	}
}

func replicatedTraffic(t *testing.T, van string, ops int) {
	c := testcluster.New(t, 3, 2, testcluster.Options{Van: van, Quiet: true, Tweak: func(cfg *postoffice.Config) {
		cfg.Replicas = 1
		cfg.MetricsAddr = "127.0.0.1:0"
	}})
	stores := make([]*kv.DefaultHandle[int64], len(c.Servers))
	for i, p := range c.Servers {
		s, err := kv.NewKVServer[int64](p, 0)
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = kv.NewDefaultHandle[int64]()
		if err := s.SetStore(stores[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Keys: two pools of 300 spread over the key space (every range has
	// some), the second pushed with lens; and 20,000 for the large pushes.
	spread := func(n int, off uint64) []uint64 {
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = message.MaxKey/uint64(n)*uint64(i) + off
		}
		return keys
	}
	pools := [2][]uint64{spread(300, 1), spread(300, 2)}
	large := spread(20000, 3)
	var mu sync.Mutex
	want := map[uint64][]int64{}
	add := func(keys []uint64, vals []int64, per int) {
		mu.Lock()
		defer mu.Unlock()
		for i, k := range keys {
			if want[k] == nil {
				want[k] = make([]int64, per)
			}
			for j := range per {
				want[k][j] += vals[i*per+j]
			}
		}
	}
	workers := make([]*kv.KVWorker[int64], len(c.Workers))
	for i, p := range c.Workers {
		w, err := kv.NewKVWorker[int64](p, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		workers[i] = w
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := testcluster.Each(c.Workers, func(p *postoffice.Postoffice) error {
		rank := p.MyRank()
		w := workers[rank]
		rng := rand.New(rand.NewPCG(uint64(rank), 99))
		var inFlight []int
		for op := range ops {
			var keys []uint64
			var vals []int64
			var lens []int32
			per := 1
			if op%150 == 149 {
				keys = large
				vals = make([]int64, len(keys))
				for i := range vals {
					vals[i] = int64(op)
				}
			} else {
				pool := rng.IntN(2)
				n := 1 + rng.IntN(8)
				picked := map[uint64]bool{}
				for len(picked) < n {
					picked[pools[pool][rng.IntN(len(pools[pool]))]] = true
				}
				keys = slices.Sorted(func(yield func(uint64) bool) {
					for k := range picked {
						if !yield(k) {
							return
						}
					}
				})
				if pool == 1 {
					per = 2
					lens = make([]int32, len(keys))
					for i := range lens {
						lens[i] = 2
					}
				}
				for range len(keys) * per {
					vals = append(vals, 1+rng.Int64N(1000))
				}
			}
			add(keys, vals, per)
			ts, err := w.Push(keys, vals, lens)
			if err != nil {
				return fmt.Errorf("push %d: %w", op, err)
			}
			inFlight = append(inFlight, ts)
			if len(inFlight) == 64 {
				if err := w.WaitContext(ctx, inFlight[0]); err != nil {
					return fmt.Errorf("push %d: %w", op, err)
				}
				inFlight = inFlight[1:]
			}
		}
		for _, ts := range inFlight {
			if err := w.WaitContext(ctx, ts); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every key, pulled from the heads.
	keys := slices.Sorted(func(yield func(uint64) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	})
	var vals []int64
	var lens []int32
	ts, err := workers[0].Pull(keys, &vals, &lens)
	if err == nil {
		err = workers[0].WaitContext(ctx, ts)
	}
	if err != nil {
		t.Fatal(err)
	}
	off := 0
	for i, k := range keys {
		n := 1
		if lens != nil {
			n = int(lens[i])
		}
		if !slices.Equal(vals[off:off+n], want[k]) {
			t.Fatalf("key %d holds %v at its head, want %v", k, vals[off:off+n], want[k])
		}
		off += n
	}
	// Every chain member holds the same: each key is on two servers.
	c.Finalize(t) // the stores are quiet from here on
	held := map[uint64]int{}
	for i, st := range stores {
		n := 0
		for _, k := range keys {
			if v := st.Get(k); v != nil {
				if !slices.Equal(v, want[k]) {
					t.Fatalf("server %d holds %v for key %d, want %v", i, v, k, want[k])
				}
				held[k]++
				n++
			}
		}
		if st.Len() != n {
			t.Errorf("server %d holds %d keys, %d of them pushed", i, st.Len(), n)
		}
	}
	for _, k := range keys {
		if held[k] != 2 {
			t.Fatalf("key %d is held by %d servers, want 2 (head and replica)", k, held[k])
		}
	}
	var batches, entries float64
	for _, p := range c.Servers {
		batches += p.Metrics().Value("pslite_replication_messages_total", map[string]string{"kind": "batch"})
		entries += p.Metrics().Value("pslite_replication_entries_total", nil)
	}
	t.Logf("%v entries passed on, %v batches", entries, batches)
	if batches == 0 {
		t.Errorf("no entries were batched")
	}
}
