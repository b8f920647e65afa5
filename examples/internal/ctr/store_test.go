package ctr

import (
	"bytes"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// simReq is a request to one part of a job.
type simReq struct {
	part int
	meta kv.KVMeta
	data kv.KVPairs[float32]
}

// simJob makes the requests that the workers of a job send its servers:
// the key layout, a warm start, statistics rounds, training steps of every
// worker in a random interleaving (each worker's in order, some workers
// steps ahead of others), saves of the model and a restore of it at the
// end. The training keys are spread over folds; some steps have no key on
// some server (control keys only).
type simJob struct {
	rng              *rand.Rand
	workers, servers int
	numKeys          uint64
	folds            int
	ts               int
	reqs             []simReq
}

func newSimJob(seed uint64, workers, servers int, numKeys uint64, folds int) *simJob {
	return &simJob{rng: rand.New(rand.NewPCG(seed, 7)), workers: workers, servers: servers, numKeys: numKeys, folds: folds}
}

// send slices a request of worker as the workers' slicer does and adds a
// request per part.
func (j *simJob) send(t *testing.T, worker, kind, step int, push bool, keys []uint64, vals []float32) {
	t.Helper()
	parts, err := keyRouter{numKeys: j.numKeys}.Slicer(kv.KVPairs[float32]{Keys: keys, Vals: vals}, make([]postoffice.Range, j.servers))
	if err != nil {
		t.Fatal(err)
	}
	for p, kvs := range parts {
		if len(kvs.Keys) == 0 {
			continue
		}
		j.ts++
		meta := kv.KVMeta{Cmd: command(kind, step), Push: push, Pull: !push, Sender: message.WorkerRankToID(worker), Timestamp: j.ts}
		j.reqs = append(j.reqs, simReq{p, meta, kv.KVPairs[float32]{Keys: slices.Clone(kvs.Keys), Vals: slices.Clone(kvs.Vals)}})
	}
}

func (j *simJob) ctrl() []uint64 {
	keys := make([]uint64, j.servers)
	for s := range keys {
		keys[s] = ctrlBase + uint64(s)
	}
	return keys
}

func (j *simJob) perServer(vals ...uint64) []float32 {
	var out []float32
	for range j.servers {
		for _, v := range vals {
			out = appendUint64(out, v)
		}
	}
	return out
}

// modelKeys returns up to n distinct sorted keys of fold.
func (j *simJob) modelKeys(fold, n int) []uint64 {
	seen := map[uint64]bool{}
	var keys []uint64
	for range n {
		k := uint64(fold)*j.numKeys + j.rng.Uint64N(j.numKeys)
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// stats pushes worker's statistics of round.
func (j *simJob) stats(t *testing.T, worker, round int) {
	keys := []uint64{statsKey(round, worker, 0), statsKey(round, worker, 1)}
	j.send(t, worker, kindStats, 0, true, keys, []float32{float32(j.rng.NormFloat64()), float32(round)})
}

// run makes the job's requests: steps steps of every worker.
func (j *simJob) run(t *testing.T, steps int) []simReq {
	t.Helper()
	for w := range j.workers {
		j.send(t, w, kindJob, jobLayout, true, j.ctrl(), j.perServer(j.numKeys, uint64(j.servers)))
	}
	// A warm start of a few keys of fold 0 (W, Z, N).
	init := j.modelKeys(0, 6)
	var vals []float32
	for range init {
		vals = appendFloat64(vals, j.rng.NormFloat64())
		vals = appendFloat64(vals, j.rng.NormFloat64())
		vals = appendFloat64(vals, math.Abs(j.rng.NormFloat64())) // n >= 0
	}
	j.send(t, 0, kindInit, 0, true, init, vals)
	for w := range j.workers {
		j.stats(t, w, 0)
	}
	next := make([]int, j.workers)
	round := 1
	for {
		var ready []int
		for w := range j.workers {
			if next[w] < steps {
				ready = append(ready, w)
			}
		}
		if len(ready) == 0 {
			break
		}
		w := ready[j.rng.IntN(len(ready))]
		step := next[w]
		next[w]++
		fold := step * j.folds / steps
		var keys []uint64
		if j.rng.IntN(5) > 0 {
			keys = j.modelKeys(fold, 1+j.rng.IntN(8))
		}
		grads := make([]float32, len(keys))
		for i := range grads {
			grads[i] = float32(j.rng.NormFloat64() * 0.5)
		}
		rate := float32(1 / (1 + 0.1*float64(step)))
		for s := range j.servers {
			keys = append(keys, ctrlBase+uint64(s))
			grads = append(grads, rate)
		}
		j.send(t, w, kindTrain, step, true, keys, grads)
		switch j.rng.IntN(12) {
		case 0:
			j.stats(t, w, round)
			round++
		case 1:
			j.send(t, w, kindSnapshot, round, true, j.ctrl(), make([]float32, j.servers))
		}
	}
	j.send(t, 0, kindSnapshot, snapshotRestore, true, j.ctrl(), make([]float32, j.servers))
	return j.reqs
}

// feed serves reqs, each with the store of its part.
func feed(t *testing.T, store func(part int) *Store, reqs []simReq) {
	t.Helper()
	nop := func(kv.KVMeta, kv.KVPairs[float32]) error { return nil }
	for _, r := range reqs {
		if s := store(r.part); s != nil {
			s.Serve(r.meta, r.data, nop)
		}
	}
}

// noErrors fails the test when a store refused a request.
func noErrors(t *testing.T, stores ...*Store) {
	t.Helper()
	for i, s := range stores {
		if _, errs := s.Stats(); len(errs) > 0 {
			t.Fatalf("store %d: %d errors, first %v", i, len(errs), errs[0])
		}
	}
}

func snapshotOf(t *testing.T, s *Store, p kv.Part) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := s.Snapshot(&b, p); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// paramsOf returns every model key's state.
func paramsOf(s *Store) map[uint64]Param {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[uint64]Param{}
	s.params.each(func(e *entry) { m[e.key-1] = e.p })
	return m
}

func restore(t *testing.T, s *Store, p kv.Part, snaps ...[]byte) {
	t.Helper()
	var rs []io.Reader
	for _, b := range snaps {
		rs = append(rs, bytes.NewReader(b))
	}
	if err := s.Restore(rs, p); err != nil {
		t.Fatal(err)
	}
}

var storeConfigs = []struct {
	name string
	opt  Optimizer
	mode SyncMode
}{
	{"sgd-asp", SGD{LR: 0.1, L2: 0.01}, ASP},
	{"sgd-bsp", SGD{LR: 0.1, L2: 0.01}, BSP},
	{"sgd-ssp", SGD{LR: 0.1, L2: 0.01}, SSP},
	{"ftrl-asp", FTRL{Alpha: 0.1, Beta: 1, L1: 0.01, L2: 0.1}, ASP},
	{"ftrl-bsp", FTRL{Alpha: 0.1, Beta: 1, L1: 0.01, L2: 0.1}, BSP},
	{"ftrl-ssp", FTRL{Alpha: 0.1, Beta: 1, L1: 0.01, L2: 0.1}, SSP},
}

func part(i, of int) kv.Part { return kv.Part{Index: i, Of: of} }

// TestStoreSnapshotRoundTrip snapshots a store in the middle of a job (BSP
// steps pending, SSP clocks apart, statistics, a saved model), restores it
// into a fresh store, and feeds both the rest of the job: they stay alike,
// byte for byte.
func TestStoreSnapshotRoundTrip(t *testing.T) {
	for _, c := range storeConfigs {
		t.Run(c.name, func(t *testing.T) {
			reqs := newSimJob(1, 3, 1, 40, 2).run(t, 30)
			a := NewStore(c.opt, c.mode, 1, 3)
			half := len(reqs) / 2
			feed(t, func(int) *Store { return a }, reqs[:half])
			snap := snapshotOf(t, a, part(0, 1))
			b := NewStore(c.opt, c.mode, 1, 3)
			restore(t, b, part(0, 1), snap)
			if got := snapshotOf(t, b, part(0, 1)); !bytes.Equal(got, snap) {
				t.Fatalf("the restored store's snapshot differs (%d bytes, %d)", len(got), len(snap))
			}
			if pa, pb := paramsOf(a), paramsOf(b); len(pa) == 0 || !mapsEqual(pa, pb) {
				t.Fatalf("restored %d keys, want %d", len(pb), len(pa))
			}
			if c.mode == BSP {
				a.mu.Lock()
				pending := len(a.parts[0].pending)
				a.mu.Unlock()
				if pending == 0 {
					t.Error("no BSP step pending at the snapshot: the test does not cover it")
				}
			}
			feed(t, func(int) *Store { return a }, reqs[half:])
			feed(t, func(int) *Store { return b }, reqs[half:])
			noErrors(t, a, b)
			if sa, sb := snapshotOf(t, a, part(0, 1)), snapshotOf(t, b, part(0, 1)); !bytes.Equal(sa, sb) {
				t.Error("after the same requests, the restored store differs")
			}
			if !mapsEqual(paramsOf(a), paramsOf(b)) {
				t.Error("after the same requests, the weights differ")
			}
		})
	}
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestStoreDeterministic feeds two stores the same requests: their
// snapshots are the same bytes (map iteration orders differ from store to
// store). And a store holding every part (a head that took over another
// server's range) keeps each part as the part's own store does, whatever
// the order of requests across parts.
func TestStoreDeterministic(t *testing.T) {
	for _, c := range storeConfigs {
		t.Run(c.name, func(t *testing.T) {
			const servers, workers = 3, 2
			for seed := uint64(1); seed <= 3; seed++ {
				reqs := newSimJob(seed, workers, servers, 25, 3).run(t, 40)
				var own, own2 [servers]*Store
				for p := range own {
					own[p] = NewStore(c.opt, c.mode, 2, workers)
					own2[p] = NewStore(c.opt, c.mode, 2, workers)
				}
				feed(t, func(p int) *Store { return own[p] }, reqs)
				feed(t, func(p int) *Store { return own2[p] }, reqs)
				all := NewStore(c.opt, c.mode, 2, workers)
				feed(t, func(int) *Store { return all }, reqs)
				// Another order across parts: part 2's requests first, then
				// 1's, then 0's (each part's in order).
				rev := NewStore(c.opt, c.mode, 2, workers)
				for p := servers - 1; p >= 0; p-- {
					feed(t, func(q int) *Store {
						if q == p {
							return rev
						}
						return nil
					}, reqs)
				}
				noErrors(t, append(append(own[:], own2[:]...), all, rev)...)
				for p := range servers {
					want := snapshotOf(t, own[p], part(p, servers))
					for name, s := range map[string]*Store{"same requests": own2[p], "every part": all, "parts in another order": rev} {
						if got := snapshotOf(t, s, part(p, servers)); !bytes.Equal(got, want) {
							t.Errorf("seed %d, part %d: %s: the snapshot differs", seed, p, name)
						}
					}
				}
			}
		})
	}
}

// TestStoreRestoreOtherLayouts restores the snapshots of a 2-server job
// into 3 servers and into 1: every model key lands on the server the
// workers route it to, with its state; the statistics on server 0; the
// consistency state starts over.
func TestStoreRestoreOtherLayouts(t *testing.T) {
	for _, c := range storeConfigs {
		t.Run(c.name, func(t *testing.T) {
			const numKeys = 31
			reqs := newSimJob(5, 2, 2, numKeys, 2).run(t, 30)
			var old [2]*Store
			var snaps [][]byte
			want := map[uint64]Param{}
			for p := range old {
				old[p] = NewStore(c.opt, c.mode, 1, 2)
			}
			// Stop before the final restore command: the saved model and the
			// model differ.
			feed(t, func(p int) *Store { return old[p] }, reqs[:len(reqs)-2])
			noErrors(t, old[:]...)
			for p := range old {
				snaps = append(snaps, snapshotOf(t, old[p], part(p, 2)))
				for k, v := range paramsOf(old[p]) {
					want[k] = v
				}
			}
			wantSaved := savedOf(old[0], 0)
			for k, v := range savedOf(old[1], 1) {
				wantSaved[k] = v
			}
			if len(wantSaved) == 0 {
				t.Fatal("no model saved: the test does not cover it")
			}
			wantStats := statsOf(old[0])
			for _, of := range []int{3, 1} {
				got, gotSaved := map[uint64]Param{}, map[uint64]Param{}
				r := keyRouter{numKeys: numKeys}
				for p := range of {
					s := NewStore(c.opt, c.mode, 1, 2)
					restore(t, s, part(p, of), snaps...)
					for k, v := range paramsOf(s) {
						if q, _, _ := r.route(k, of); q != p {
							t.Errorf("%d servers: key %d restored on server %d, routed to %d", of, k, p, q)
						}
						got[k] = v
					}
					for k, v := range savedOf(s, p) {
						gotSaved[k] = v
					}
					st := statsOf(s)
					if p == 0 && !mapsEqual(st, wantStats) || p > 0 && len(st) > 0 {
						t.Errorf("%d servers: server %d holds %d statistics, want %d on server 0", of, p, len(st), len(wantStats))
					}
					s.mu.Lock()
					ps := s.parts[p]
					fresh := ps.applied == 0 && len(ps.pending) == 0 && minClock(ps.clock) == 0
					s.mu.Unlock()
					if !fresh {
						t.Errorf("%d servers: server %d kept the consistency state of another layout", of, p)
					}
					// Training goes on: a store of another layout takes
					// steps from 0 again.
					s.Serve(kv.KVMeta{Cmd: command(kindJob, jobLayout), Push: true}, kv.KVPairs[float32]{Keys: []uint64{ctrlBase + uint64(p)},
						Vals: appendUint64(appendUint64(nil, numKeys), uint64(of))}, func(kv.KVMeta, kv.KVPairs[float32]) error { return nil })
					pushTrain(s, &recorder{}, 0, 0, nil, nil)
					noErrors(t, s)
				}
				if !mapsEqual(got, want) {
					t.Errorf("%d servers: restored %d keys (or other values), want %d", of, len(got), len(want))
				}
				if !mapsEqual(gotSaved, wantSaved) {
					t.Errorf("%d servers: restored %d saved keys (or other values), want %d", of, len(gotSaved), len(wantSaved))
				}
			}
			// Both snapshots into a part of the same layout: the part's keys
			// and its own consistency state, as it was.
			s := NewStore(c.opt, c.mode, 1, 2)
			restore(t, s, part(1, 2), snaps...)
			if got := snapshotOf(t, s, part(1, 2)); !bytes.Equal(got, snaps[1]) {
				t.Error("part 1 restored from both parts' snapshots differs from its own")
			}
		})
	}
}

// savedOf returns part's saved model.
func savedOf(s *Store, part int) map[uint64]Param {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[uint64]Param{}
	if ps := s.parts[part]; ps != nil {
		for _, sp := range ps.saved {
			m[sp.key] = sp.p
		}
	}
	return m
}

func statsOf(s *Store) map[uint64]float32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[uint64]float32{}
	for _, r := range s.stats {
		for k, v := range r {
			m[k] = v
		}
	}
	return m
}

// TestStoreRestoreNothing: no reader empties a part, and only it.
func TestStoreRestoreNothing(t *testing.T) {
	reqs := newSimJob(2, 2, 2, 20, 1).run(t, 20)
	s := NewStore(FTRL{Alpha: 0.1, Beta: 1}, BSP, 0, 2)
	feed(t, func(int) *Store { return s }, reqs)
	noErrors(t, s)
	before0 := snapshotOf(t, s, part(0, 2))
	for _, p := range []int{1, 0} {
		restore(t, s, part(p, 2))
		sn, err := readSnap(bytes.NewReader(snapshotOf(t, s, part(p, 2))))
		if err != nil {
			t.Fatal(err)
		}
		if len(sn.model) != 0 || len(sn.stats) != 0 || sn.savedAt != 0 || sn.applied != 0 || len(sn.pending) != 0 {
			t.Errorf("part %d restored from nothing holds %d keys, %d statistics, saved %d, %d steps", p, len(sn.model), len(sn.stats), sn.savedAt, sn.applied)
		}
		if p == 1 {
			if got := snapshotOf(t, s, part(0, 2)); !bytes.Equal(got, before0) {
				t.Error("emptying part 1 changed part 0")
			}
		}
	}
	if n := len(paramsOf(s)); n != 0 {
		t.Errorf("%d keys left", n)
	}
}

// TestStoreRestoreRefuses: what is no snapshot of this store, or of another
// model, is refused, and the store is left as it was.
func TestStoreRestoreRefuses(t *testing.T) {
	reqs := newSimJob(3, 2, 1, 20, 1).run(t, 10)
	s := NewStore(SGD{LR: 0.1}, BSP, 0, 2)
	feed(t, func(int) *Store { return s }, reqs)
	before := snapshotOf(t, s, part(0, 1))

	other := NewStore(SGD{LR: 0.1}, BSP, 0, 2)
	feed(t, func(int) *Store { return other }, newSimJob(3, 2, 1, 21, 1).run(t, 10)) // 21 keys per fold
	var dh bytes.Buffer
	if err := kv.NewDefaultHandle[float32]().Snapshot(&dh, part(0, 1)); err != nil {
		t.Fatal(err)
	}
	future := slices.Clone(before)
	future[8] = 2 // version 2
	cases := map[string][]byte{
		"not a snapshot of lr's server": dh.Bytes(),
		"unexpected EOF":                before[:len(before)-3],
		"format version 2":              future,
		"21 keys per fold":              snapshotOf(t, other, part(0, 1)),
		"without its end mark":          append(slices.Clone(before[:len(before)-8]), "PSLR.XXX"...),
	}
	for want, b := range cases {
		err := s.Restore([]io.Reader{bytes.NewReader(before), bytes.NewReader(b)}, part(0, 1))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v", want, err)
		}
		if got := snapshotOf(t, s, part(0, 1)); !bytes.Equal(got, before) {
			t.Errorf("%s: the refused restore changed the store", want)
		}
	}
	if err := s.Restore(nil, part(2, 2)); err == nil {
		t.Error("restore of part 2 of 2 accepted")
	}
	// A layout the server's model does not have is refused.
	r := &recorder{}
	s.Serve(kv.KVMeta{Cmd: command(kindJob, jobLayout), Push: true}, kv.KVPairs[float32]{Keys: []uint64{ctrlBase},
		Vals: appendUint64(appendUint64(nil, 99), 1)}, r.respond)
	if _, errs := s.Stats(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "model has 20 keys per fold, the workers lay out 99") || len(r.got) != 0 {
		t.Errorf("a layout of another model: errors %v, answers %d", errs, len(r.got))
	}
}

// TestStoreBeginRun: a run resumed from a snapshot (jobBegin with another
// run) keeps the model and starts the steps, clocks, statistics and saved
// model over; the same run again changes nothing.
func TestStoreBeginRun(t *testing.T) {
	for _, mode := range []SyncMode{BSP, SSP} {
		reqs := newSimJob(4, 2, 1, 20, 1).run(t, 15)
		s := NewStore(SGD{LR: 0.1}, mode, 1, 2)
		feed(t, func(int) *Store { return s }, reqs[:len(reqs)-1])
		// Leave step 15 pending under BSP: one worker pushed it.
		pushTrain(s, &recorder{}, 0, 15, []uint64{3}, []float32{1})
		noErrors(t, s)
		weights := paramsOf(s)
		begin := func(run uint64) {
			s.Serve(kv.KVMeta{Cmd: command(kindJob, jobBegin), Push: true}, kv.KVPairs[float32]{Keys: []uint64{ctrlBase}, Vals: appendUint64(nil, run)},
				func(kv.KVMeta, kv.KVPairs[float32]) error { return nil })
		}
		begin(7)
		sn, err := readSnap(bytes.NewReader(snapshotOf(t, s, part(0, 1))))
		if err != nil {
			t.Fatal(err)
		}
		if sn.run != 7 || sn.applied != 0 || len(sn.pending) != 0 || minClock(sn.clock) != 0 || sn.clock[0] != 0 || len(sn.stats) != 0 || sn.savedAt != 0 {
			t.Errorf("%v: after a new run: run %d, applied %d, %d pending, clocks %v, %d statistics, saved %d", mode, sn.run, sn.applied, len(sn.pending), sn.clock, len(sn.stats), sn.savedAt)
		}
		for _, m := range sn.model {
			if m.inStep || m.g != 0 {
				t.Errorf("%v: key %d keeps a sum of the old run", mode, m.key)
			}
		}
		if !mapsEqual(paramsOf(s), weights) {
			t.Errorf("%v: a new run changed the model", mode)
		}
		before := snapshotOf(t, s, part(0, 1))
		begin(7)
		if !bytes.Equal(snapshotOf(t, s, part(0, 1)), before) {
			t.Errorf("%v: the same run began twice", mode)
		}
		// Step 0 again.
		pushTrain(s, &recorder{}, 0, 0, []uint64{3}, []float32{1})
		pushTrain(s, &recorder{}, 1, 0, []uint64{3}, []float32{1})
		noErrors(t, s)
	}
}

// TestStoreReadLater: a held pull is answered once, from the push that
// makes it ready; Apply answers a push-pull at once.
func TestStoreReadLater(t *testing.T) {
	s := newStore(SGD{LR: 1}, BSP, 0, 2)
	var got [][]float32
	answer := func(res kv.KVPairs[float32], err error) {
		if err != nil {
			t.Error(err)
		}
		got = append(got, res.Vals)
	}
	pullMeta := kv.KVMeta{Cmd: command(kindTrain, 1), Pull: true, Sender: message.WorkerRankToID(0)}
	s.Read(pullMeta, kv.KVPairs[float32]{Keys: []uint64{4}}, answer)
	if len(got) != 0 {
		t.Fatal("a pull of step 1 answered before step 0")
	}
	push := func(w int) (kv.KVPairs[float32], error) {
		meta := kv.KVMeta{Cmd: command(kindTrain, 0), Push: true, Sender: message.WorkerRankToID(w)}
		if !s.Changes(meta, kv.KVPairs[float32]{}) {
			t.Fatal("a push is no change")
		}
		return s.Apply(meta, kv.KVPairs[float32]{Keys: []uint64{4, ctrlBase}, Vals: []float32{1, 1}})
	}
	push(0)
	if len(got) != 0 {
		t.Fatal("answered after one of two pushes")
	}
	if _, err := push(1); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !slices.Equal(got[0], []float32{-2}) {
		t.Fatalf("answers %v, want [[-2]]", got)
	}
	if s.Changes(pullMeta, kv.KVPairs[float32]{}) {
		t.Error("a pull changes the store")
	}
	// A push-pull is answered at once, even of a step to come.
	res, err := s.Apply(kv.KVMeta{Cmd: command(kindTrain, 1), Push: true, Pull: true, Sender: message.WorkerRankToID(0)},
		kv.KVPairs[float32]{Keys: []uint64{4, ctrlBase}, Vals: []float32{1, 1}})
	if err != nil || !slices.Equal(res.Vals, []float32{-2, 0}) {
		t.Errorf("push-pull answered %v, %v", res.Vals, err)
	}
	// A pull of a kind that has none is refused.
	s.Read(kv.KVMeta{Cmd: command(kindInit, 0), Pull: true}, kv.KVPairs[float32]{Keys: []uint64{4}}, func(_ kv.KVPairs[float32], err error) {
		if err == nil {
			t.Error("pull of kind init answered")
		}
	})
}
