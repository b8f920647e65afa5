package kv_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// How the server handles of TestRandomTrafficIsExact treat what they are
// given: one app each.
const (
	keepHandle = iota // keeps views of the pushed values, uncopied; answers with a view of the request's keys
	copyHandle        // copies the pushed values; answers with copies (Response)
	lendHandle        // takes lent requests (LendRequests), copies what it keeps; answers with a view of the lent keys
	numHandles
)

// trafficStore is a server handle that stores each key's values as last
// pushed (with lens, any number of them) and answers pulls with them.
type trafficStore struct {
	t    *testing.T
	mode int
	vals map[uint64][]uint32 // only the handle's goroutine uses it
}

func (h *trafficStore) handle(meta kv.KVMeta, data kv.KVPairs[uint32], s *kv.KVServer[uint32]) {
	if meta.Push {
		for k, v := range data.All() {
			if h.mode != keepHandle {
				v = slices.Clone(v)
			}
			h.vals[k] = v
		}
	}
	if !meta.Pull {
		s.Response(meta, kv.KVPairs[uint32]{})
		return
	}
	res := kv.KVPairs[uint32]{Keys: data.Keys, Lens: make([]int32, len(data.Keys))}
	for i, k := range data.Keys {
		res.Vals = append(res.Vals, h.vals[k]...)
		res.Lens[i] = int32(len(h.vals[k]))
	}
	var err error
	if h.mode == copyHandle {
		err = s.Response(meta, res)
	} else {
		err = s.ZResponse(meta, res)
	}
	if err != nil {
		h.t.Error(err)
	}
}

// trafficSlots is how many keys a client uses: each request takes every
// (trafficSlots/n)th of them, so the servers' stores stay bounded.
const trafficSlots = 2 << 20

// trafficKeys returns n sorted keys spread over the key space, all with
// low bits tag: clients use distinct tags, so no two share a key.
func trafficKeys(n int, tag uint64) []uint64 {
	keys := make([]uint64, n)
	stride := uint64(trafficSlots / n)
	for i := range keys {
		keys[i] = (message.MaxKey/trafficSlots*(uint64(i)*stride))&^15 | tag
	}
	return keys
}

// trafficVals returns the values a client pushes to keys in its op number
// ver: with lens, 0 to 3 values a key (else one), every value a hash of
// (key, ver, index) so that values from another request, another key or
// another client read wrong.
func trafficVals(keys []uint64, ver int, withLens bool) ([]uint32, []int32) {
	var lens []int32
	vals := make([]uint32, 0, len(keys))
	for _, k := range keys {
		n := 1
		if withLens {
			n = int((k>>20 ^ uint64(ver)) % 4)
			lens = append(lens, int32(n))
		}
		for j := range n {
			h := k*0x9E3779B97F4A7C15 ^ uint64(ver)<<32 ^ uint64(j)
			vals = append(vals, uint32(h>>29))
		}
	}
	return vals, lens
}

// trafficSize draws a request size: log-uniform from 1 to 2 million keys,
// so that most requests are small and some lend every frame.
func trafficSize(rng *rand.Rand) int {
	const maxKeys = trafficSlots
	n := 1
	for e := rng.IntN(22); e > 0; e-- {
		n *= 2
	}
	return min(n+rng.IntN(n), maxKeys)
}

// Random traffic from two worker processes with two customers each, to
// three handles that keep, copy or take lent requests: pushes, pulls and
// push-pulls of 1 to 2 million keys, half with lens, on every transport,
// with lent memory poisoned once given back (the in-memory transport
// always poisons it). Every value pulled is checked, and at the end every
// client pulls the keys it pushed first again, which the keeping handle
// holds as views of its oldest requests.
//
// Under the race detector, and with -short, each client makes 3 requests
// (the first of them 2 million keys), else 12; -short runs the in-memory
// transport only (make check), make test every one.
func TestRandomTrafficIsExact(t *testing.T) {
	ops, vans := 12, testcluster.Vans()
	if raceOn || testing.Short() {
		ops = 3
	}
	if testing.Short() {
		vans = []string{"mem"}
	}
	for _, van := range vans {
		t.Run(van, func(t *testing.T) { randomTraffic(t, van, ops) })
	}
}

func randomTraffic(t *testing.T, van string, ops int) {
	c := testcluster.New(t, 2, 2, testcluster.Options{Van: van, Tweak: func(cfg *postoffice.Config) {
		cfg.PoisonLent = true
	}})
	for _, p := range c.Servers {
		for app := range numHandles {
			s, err := kv.NewKVServer[uint32](p, app)
			if err != nil {
				t.Fatal(err)
			}
			s.LendRequests(app == lendHandle)
			h := &trafficStore{t: t, mode: app, vals: map[uint64][]uint32{}}
			if err := s.SetRequestHandle(h.handle); err != nil {
				t.Fatal(err)
			}
		}
	}
	const customers = 2
	var wg sync.WaitGroup
	for rank, p := range c.Workers {
		for cust := range customers {
			var ws [numHandles]*kv.KVWorker[uint32]
			for app := range numHandles {
				w, err := kv.NewKVWorker[uint32](p, app, cust)
				if err != nil {
					t.Fatal(err)
				}
				ws[app] = w
			}
			client := rank*customers + cust
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := trafficClient(ws, client, ops); err != nil {
					t.Errorf("worker %d, customer %d: %v", rank, cust, err)
				}
			}()
		}
	}
	wg.Wait()
	if n := message.LoanMisuses(); n != 0 {
		t.Errorf("%d loans dropped without a hold", n)
	}
	c.Finalize(t)
	// Pulls answered by two servers hold the first answer's loan until
	// they are assembled: every loan must be back.
	if n := message.LiveLoans(); n != 0 {
		t.Errorf("%d loans not given back after the job", n)
	}
}

// trafficClient runs ops random requests of one client and checks every
// value they return.
func trafficClient(ws [numHandles]*kv.KVWorker[uint32], client, ops int) error {
	rng := rand.New(rand.NewPCG(uint64(client), 33))
	// The first keys pushed to each handle, with tag client+8: pulled again
	// at the end.
	first := trafficKeys(200000, uint64(client+8)) // lent: 800 KB of keys a server
	firstVals, firstLens := trafficVals(first, -1, true)
	for _, w := range ws {
		if err := waitFor(w, func() (int, error) { return w.Push(first, firstVals, firstLens) }); err != nil {
			return fmt.Errorf("first push: %w", err)
		}
	}
	for ver := range ops {
		n := trafficSize(rng)
		if ver == 0 && client == 0 {
			n = 2 << 20 // the largest, at least once
		}
		keys := trafficKeys(n, uint64(client))
		withLens := rng.IntN(2) == 0
		vals, lens := trafficVals(keys, ver, withLens)
		app := rng.IntN(numHandles)
		w := ws[app]
		var got []uint32
		var gotLens []int32
		lensOut := &gotLens
		if !withLens {
			lensOut = nil
		}
		what := "push-pull"
		var err error
		if rng.IntN(2) == 0 {
			what = "push then pull"
			err = waitFor(w, func() (int, error) { return w.Push(keys, vals, lens) })
			if err == nil {
				err = waitFor(w, func() (int, error) { return w.Pull(keys, &got, lensOut) })
			}
		} else {
			err = waitFor(w, func() (int, error) {
				if withLens {
					gotLens = slices.Clone(lens)
				}
				return w.PushPull(keys, vals, &got, lensOut)
			})
		}
		if err != nil {
			return fmt.Errorf("op %d (%s of %d keys, handle %d): %w", ver, what, n, app, err)
		}
		if bad := countWrong(got, vals); bad > 0 {
			return fmt.Errorf("op %d (%s of %d keys, lens %t, handle %d): %d of %d values wrong", ver, what, n, withLens, app, bad, len(vals))
		}
		if withLens && countWrong(gotLens, lens) > 0 {
			return fmt.Errorf("op %d (%s of %d keys, handle %d): lens wrong", ver, what, n, app)
		}
	}
	for app, w := range ws {
		var got []uint32
		var gotLens []int32
		if err := waitFor(w, func() (int, error) { return w.Pull(first, &got, &gotLens) }); err != nil {
			return fmt.Errorf("last pull: %w", err)
		}
		if bad := countWrong(got, firstVals); bad > 0 || countWrong(gotLens, firstLens) > 0 {
			return fmt.Errorf("handle %d: %d of the %d values pushed first changed", app, bad, len(firstVals))
		}
	}
	return nil
}

// waitFor sends a request and waits for it.
func waitFor(w *kv.KVWorker[uint32], send func() (int, error)) error {
	ts, err := send()
	if err != nil {
		return err
	}
	return w.Wait(ts)
}
