package ctr

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// recorder collects a Store's responses and numbers the requests.
type recorder struct {
	mu  sync.Mutex
	got []kv.KVMeta
	res []kv.KVPairs[float32]
	ts  int // the last request's timestamp
}

func (r *recorder) respond(meta kv.KVMeta, res kv.KVPairs[float32]) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, meta)
	r.res = append(r.res, res)
	return nil
}

// pulls returns the timestamps of the pull responses so far.
func (r *recorder) pulls() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ts []int
	for _, m := range r.got {
		if m.Pull {
			ts = append(ts, m.Timestamp)
		}
	}
	return ts
}

// pullVals returns the values of the pull answered for timestamp ts.
func (r *recorder) pullVals(ts int) []float32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, m := range r.got {
		if m.Pull && m.Timestamp == ts {
			return r.res[i].Vals
		}
	}
	return nil
}

// pushTrain sends worker's gradient for step to s: keys with vals and the
// control key of server 0 with rate 1.
func pushTrain(s *Store, r *recorder, worker, step int, keys []uint64, vals []float32) {
	r.ts++
	meta := kv.KVMeta{Cmd: command(kindTrain, step), Push: true, Sender: message.WorkerRankToID(worker), Timestamp: r.ts}
	keys = append(slices.Clone(keys), ctrlBase)
	vals = append(slices.Clone(vals), 1)
	s.Serve(meta, kv.KVPairs[float32]{Keys: keys, Vals: vals}, r.respond)
}

// pull asks for keys as worker at step; it returns the request's timestamp.
func pull(s *Store, r *recorder, worker, kind, step int, keys []uint64) int {
	r.ts++
	meta := kv.KVMeta{Cmd: command(kind, step), Pull: true, Sender: message.WorkerRankToID(worker), Timestamp: r.ts}
	s.Serve(meta, kv.KVPairs[float32]{Keys: keys}, r.respond)
	return r.ts
}

// newStore returns a store told the layout of a one-server job of 2^40
// keys per fold, as the workers tell it before their first model key.
func newStore(opt Optimizer, mode SyncMode, staleness, workers int) *Store {
	s := NewStore(opt, mode, staleness, workers)
	vals := appendUint64(appendUint64(nil, 1<<40), 1)
	meta := kv.KVMeta{Cmd: command(kindJob, jobLayout), Push: true, Sender: message.WorkerRankToID(0)}
	s.Serve(meta, kv.KVPairs[float32]{Keys: []uint64{ctrlBase}, Vals: vals}, func(kv.KVMeta, kv.KVPairs[float32]) error { return nil })
	return s
}

func TestCommand(t *testing.T) {
	for _, c := range [][2]int{{kindTrain, 0}, {kindStats, 7}, {kindFinal, maxStep}, {kindDump, 3}} {
		k, s := splitCommand(command(c[0], c[1]))
		if k != c[0] || s != c[1] {
			t.Errorf("%v -> %d %d", c, k, s)
		}
	}
	if command(kindDump, maxStep) > math.MaxInt32 {
		t.Error("maxStep overflows the int32 head")
	}
}

func TestASPAppliesAtOnce(t *testing.T) {
	s := newStore(SGD{LR: 1}, ASP, 0, 2)
	r := &recorder{}
	pushTrain(s, r, 0, 0, []uint64{1, 2}, []float32{0.5, -1})
	pushTrain(s, r, 1, 0, []uint64{2}, []float32{0.25})
	ts := pull(s, r, 0, kindTrain, 9, []uint64{1, 2, 3})
	if got := r.pullVals(ts); !slices.Equal(got, []float32{-0.5, 0.75, 0}) {
		t.Errorf("pulled %v", got)
	}
	st, errs := s.Stats()
	// Key 3 was only pulled: it is not created.
	if st.Keys != 2 || st.Pushes != 2 || st.Held != 0 || len(errs) != 0 {
		t.Errorf("stats %+v, errors %v", st, errs)
	}
}

func TestBSPHoldsPullsUntilTheStepIsApplied(t *testing.T) {
	// FTRL makes the difference between one update with the summed
	// gradient and two updates visible.
	opt := FTRL{Alpha: 0.1, Beta: 1}
	s := newStore(opt, BSP, 0, 2)
	r := &recorder{}
	pull(s, r, 0, kindTrain, 0, []uint64{5})
	pull(s, r, 1, kindTrain, 0, []uint64{5})
	if len(r.pulls()) != 2 {
		t.Fatalf("step 0 pulls held: %v", r.pulls())
	}
	pushTrain(s, r, 0, 0, []uint64{5}, []float32{0.5})
	next0 := pull(s, r, 0, kindTrain, 1, []uint64{5})
	if s.HeldPulls() != 1 || s.Weight(5) != 0 {
		t.Fatalf("after one of two pushes: %d held, weight %v", s.HeldPulls(), s.Weight(5))
	}
	// A second push of the same worker for the same step does not count
	// as another worker.
	pushTrain(s, r, 0, 0, []uint64{5}, []float32{0})
	if s.HeldPulls() != 1 {
		t.Fatalf("a repeated push completed the step")
	}
	pushTrain(s, r, 1, 0, []uint64{5}, []float32{0.25})
	if s.HeldPulls() != 0 {
		t.Fatalf("step 1 pull still held")
	}
	var want Param
	opt.Update(&want, 0.75, 1, 1)
	if got := r.pullVals(next0); len(got) != 1 || got[0] != float32(want.W) {
		t.Errorf("step 1 pull got %v, want [%v]", got, want.W)
	}
	st, errs := s.Stats()
	if st.StepsApplied != 1 || st.Held != 1 || len(errs) != 0 {
		t.Errorf("stats %+v, errors %v", st, errs)
	}
	// A push for the applied step 0 is an error, not an update.
	pushTrain(s, r, 1, 0, []uint64{5}, []float32{100})
	if _, errs := s.Stats(); len(errs) != 1 || s.Weight(5) != want.W {
		t.Errorf("late push: errors %v, weight %v", errs, s.Weight(5))
	}
}

// TestBSPStepsAhead lets a worker push two steps of control keys only (its
// batches touched no key here) before the other worker's first push: both
// steps are applied once it arrives, in order.
func TestBSPStepsAhead(t *testing.T) {
	s := newStore(SGD{LR: 1}, BSP, 0, 2)
	r := &recorder{}
	pushTrain(s, r, 0, 0, nil, nil)
	pushTrain(s, r, 0, 1, nil, nil)
	pushTrain(s, r, 1, 0, []uint64{5}, []float32{1})
	pushTrain(s, r, 1, 1, []uint64{5}, []float32{2})
	st, errs := s.Stats()
	if st.StepsApplied != 2 || len(errs) != 0 || s.Weight(5) != -3 {
		t.Errorf("steps applied %d, errors %v, weight %v (want 2, none, -3)", st.StepsApplied, errs, s.Weight(5))
	}
}

// TestBSPModelKeysAhead: model keys pushed for a step before the step
// before it is applied join that step's sum: one update per step, as FTRL
// shows.
func TestBSPModelKeysAhead(t *testing.T) {
	opt := FTRL{Alpha: 0.1, Beta: 1}
	s := newStore(opt, BSP, 0, 2)
	r := &recorder{}
	pushTrain(s, r, 0, 0, []uint64{5}, []float32{0.5})
	pushTrain(s, r, 0, 1, []uint64{5}, []float32{0.25})
	pushTrain(s, r, 1, 0, []uint64{5}, []float32{0.5})
	pushTrain(s, r, 1, 1, []uint64{5}, []float32{0.125})
	var want Param
	opt.Update(&want, 1, 1, 1)
	opt.Update(&want, 0.375, 1, 1)
	if _, errs := s.Stats(); len(errs) != 0 || s.Weight(5) != want.W {
		t.Errorf("weight %v, want %v (errors %v)", s.Weight(5), want.W, errs)
	}
}

func TestSSPBoundsStaleness(t *testing.T) {
	s := newStore(SGD{LR: 1}, SSP, 1, 2)
	r := &recorder{}
	// Worker 0 runs ahead: steps 0 and 1 need nobody.
	for step := 0; step < 2; step++ {
		pull(s, r, 0, kindTrain, step, []uint64{1})
		pushTrain(s, r, 0, step, []uint64{1}, []float32{1})
	}
	// Step 2 needs every worker at clock >= 1.
	ts := pull(s, r, 0, kindTrain, 2, []uint64{1})
	if s.HeldPulls() != 1 {
		t.Fatal("step 2 ran 2 steps ahead of a worker at clock 0")
	}
	// Updates are applied at once under SSP.
	if s.Weight(1) != -2 {
		t.Errorf("weight %v, want -2", s.Weight(1))
	}
	pull(s, r, 1, kindTrain, 0, []uint64{1})
	pushTrain(s, r, 1, 0, []uint64{1}, []float32{1})
	if s.HeldPulls() != 0 {
		t.Fatal("step 2 still held once the slowest worker reached clock 1")
	}
	if got := r.pullVals(ts); !slices.Equal(got, []float32{-3}) {
		t.Errorf("pulled %v, want [-3]", got)
	}
}

func TestStatsPullWaitsForEveryReport(t *testing.T) {
	s := newStore(SGD{LR: 1}, ASP, 0, 2)
	r := &recorder{}
	keys := []uint64{statsKey(0, 0, 0), statsKey(0, 1, 0)}
	ts := pull(s, r, 0, kindStats, 0, keys)
	push := func(k uint64, v float32) {
		meta := kv.KVMeta{Cmd: command(kindStats, 0), Push: true, Sender: message.WorkerRankToID(0)}
		s.Serve(meta, kv.KVPairs[float32]{Keys: []uint64{k}, Vals: []float32{v}}, r.respond)
	}
	push(keys[0], 3)
	if s.HeldPulls() != 1 {
		t.Fatal("stats pull answered with a report missing")
	}
	push(keys[1], 4)
	if got := r.pullVals(ts); !slices.Equal(got, []float32{3, 4}) {
		t.Errorf("pulled %v", got)
	}
	// Reports are stored, not added, and are no model keys.
	if st, _ := s.Stats(); st.Keys != 0 {
		t.Errorf("%d model keys", st.Keys)
	}
}

func TestStoreRecordsFailedResponses(t *testing.T) {
	s := newStore(SGD{LR: 1}, ASP, 0, 1)
	s.Serve(kv.KVMeta{Push: true, Cmd: command(kindTrain, 0)}, kv.KVPairs[float32]{Keys: []uint64{1, ctrlBase}, Vals: []float32{1, 1}},
		func(kv.KVMeta, kv.KVPairs[float32]) error { return errors.New("gone") })
	if _, errs := s.Stats(); len(errs) != 1 {
		t.Errorf("errors %v", errs)
	}
}

func TestSlicer(t *testing.T) {
	r := keyRouter{numKeys: 10}
	ranges := make([]postoffice.Range, 3)
	// Fold 1's keys 10..19: server s holds local keys [ceil(10s/3), ceil(10(s+1)/3)).
	keys := []uint64{10, 13, 14, 16, 17, 19, statsBase + 2, ctrlBase, ctrlBase + 1, ctrlBase + 2}
	vals := []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	parts, err := r.Slicer(kv.KVPairs[float32]{Keys: keys, Vals: vals}, ranges)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]uint64{
		{10, 13, statsBase + 2, ctrlBase}, // local keys 0..3
		{14, 16, ctrlBase + 1},            // local keys 4..6
		{17, 19, ctrlBase + 2},            // local keys 7..9
	}
	wantVals := [][]float32{{0, 1, 6, 7}, {2, 3, 8}, {4, 5, 9}}
	for s := range parts {
		if !slices.Equal(parts[s].Keys, want[s]) || !slices.Equal(parts[s].Vals, wantVals[s]) {
			t.Errorf("server %d: %v %v, want %v %v", s, parts[s].Keys, parts[s].Vals, want[s], wantVals[s])
		}
	}
	// Every key lands on the server route names.
	for k := uint64(0); k < 40; k++ {
		s, next, err := r.route(k, 3)
		if err != nil || int((k%10)*3/10) != s || next <= k {
			t.Errorf("route(%d) = %d, %d, %v", k, s, next, err)
		}
		if s2, _, _ := r.route(next-1, 3); s2 != s {
			t.Errorf("route(%d): the run ends early at %d", k, next)
		}
		if next%10 != 0 {
			if s2, _, _ := r.route(next, 3); s2 == s {
				t.Errorf("route(%d): the run ends late at %d", k, next)
			}
		}
	}
	// A pull's parts share memory with its keys.
	pk := []uint64{0, 1, 5, 9}
	parts, err = r.Slicer(kv.KVPairs[float32]{Keys: pk}, ranges)
	if err != nil || &parts[0].Keys[0] != &pk[0] || len(parts[2].Keys) != 1 {
		t.Errorf("pull parts %v, %v", parts, err)
	}
	if _, err := r.Slicer(kv.KVPairs[float32]{Keys: []uint64{3, 2}, Vals: []float32{1, 1}}, ranges); !errors.Is(err, kv.ErrUnsortedKeys) {
		t.Errorf("unsorted keys: %v", err)
	}
	if _, err := r.Slicer(kv.KVPairs[float32]{Keys: []uint64{1, 17, 16}}, ranges); !errors.Is(err, kv.ErrUnsortedKeys) {
		t.Errorf("unsorted keys across servers: %v", err)
	}
	if _, err := r.Slicer(kv.KVPairs[float32]{Keys: []uint64{ctrlBase + 3}}, ranges); err == nil {
		t.Error("control key of a fourth server accepted")
	}
}

// TestStatsRoundsAreForgotten checks that the statistics of round r are
// dropped once round r+2 begins, when every worker has pulled them.
func TestStatsRoundsAreForgotten(t *testing.T) {
	s := newStore(SGD{LR: 1}, ASP, 0, 1)
	r := &recorder{}
	push := func(round int) {
		meta := kv.KVMeta{Cmd: command(kindStats, 0), Push: true, Sender: message.WorkerRankToID(0)}
		s.Serve(meta, kv.KVPairs[float32]{Keys: []uint64{statsKey(round, 0, 0), statsKey(round, 0, 1)}, Vals: []float32{1, 2}}, r.respond)
	}
	for round := 0; round < 5; round++ {
		push(round)
	}
	s.mu.Lock()
	var rounds []int
	for k := range s.stats {
		rounds = append(rounds, k)
	}
	s.mu.Unlock()
	slices.Sort(rounds)
	if !slices.Equal(rounds, []int{3, 4}) {
		t.Errorf("rounds kept %v, want [3 4]", rounds)
	}
	if statsRound(statsKey(maxStatsRound, 4095, 1<<statsFieldBits-1)) != maxStatsRound || statsKey(maxStatsRound, 4095, 0) >= ctrlBase {
		t.Error("the largest statistics key leaves its range")
	}
}

// TestSnapshotDumpInit saves the model, changes it, restores it, dumps it
// and loads it into another store.
func TestSnapshotDumpInit(t *testing.T) {
	opt := FTRL{Alpha: 0.1, Beta: 1}
	s := newStore(opt, ASP, 0, 1)
	r := &recorder{}
	pushTrain(s, r, 0, 0, []uint64{3, 7}, []float32{0.5, -0.25})
	snap := func(cmd int) {
		meta := kv.KVMeta{Cmd: command(kindSnapshot, cmd), Push: true, Sender: message.WorkerRankToID(0)}
		s.Serve(meta, kv.KVPairs[float32]{Keys: []uint64{ctrlBase}, Vals: []float32{0}}, r.respond)
	}
	snap(1)
	w3, w7 := s.Weight(3), s.Weight(7)
	pushTrain(s, r, 0, 1, []uint64{3, 9}, []float32{1, 1})
	snap(1) // a second request for the same round does not save again
	if s.Weight(3) == w3 || s.Weight(9) == 0 {
		t.Fatal("the push changed nothing")
	}
	snap(snapshotRestore)
	if s.Weight(3) != w3 || s.Weight(7) != w7 || s.Weight(9) != 0 {
		t.Errorf("restored %v %v %v, want %v %v 0", s.Weight(3), s.Weight(7), s.Weight(9), w3, w7)
	}
	r.ts++
	meta := kv.KVMeta{Cmd: command(kindDump, 0), Pull: true, Sender: message.WorkerRankToID(0), Timestamp: r.ts}
	s.Serve(meta, kv.KVPairs[float32]{Keys: []uint64{ctrlBase}}, r.respond)
	var dump kv.KVPairs[float32]
	for i, m := range r.got {
		if m.Timestamp == r.ts {
			dump = r.res[i]
		}
	}
	if len(dump.Vals) != 16 || !slices.Equal(dump.Lens, []int32{16}) || unpackUint64(dump.Vals[0:]) != 3 || unpackUint64(dump.Vals[8:]) != 7 {
		t.Fatalf("dump %+v", dump)
	}
	// A new store takes the dumped state and continues alike.
	s2 := newStore(opt, ASP, 0, 1)
	var keys []uint64
	var vals []float32
	for i := 0; i < len(dump.Vals); i += 8 {
		keys = append(keys, unpackUint64(dump.Vals[i:]))
		vals = append(vals, dump.Vals[i+2:i+8]...)
	}
	s2.Serve(kv.KVMeta{Cmd: command(kindInit, 0), Push: true}, kv.KVPairs[float32]{Keys: keys, Vals: vals}, r.respond)
	pushTrain(s, r, 0, 2, []uint64{3}, []float32{0.1})
	pushTrain(s2, r, 0, 2, []uint64{3}, []float32{0.1})
	if s.Weight(3) != s2.Weight(3) || s2.Weight(7) != w7 {
		t.Errorf("after init: %v %v, want %v %v", s2.Weight(3), s2.Weight(7), s.Weight(3), w7)
	}
	if _, errs := s2.Stats(); len(errs) != 0 {
		t.Errorf("errors %v", errs)
	}
}

// TestTable fills the hash table past several growths with sparse keys.
// TestTableRuns checks a table of runs (a factor store's): a key's run is
// created whole, each of its values found at its place, runs survive the
// table's growth, and a run never created is not found.
func TestTableRuns(t *testing.T) {
	tb := table{group: 10}
	r := rand.New(rand.NewPCG(2, 2))
	runs := map[uint64]bool{}
	for i := 0; i < 3000; i++ {
		run := r.Uint64() >> 8
		j := r.Uint64() % 10
		e, created := tb.get(run*10 + j)
		if created == runs[run] {
			t.Fatalf("run %d: created %v, seen before %v", run, created, runs[run])
		}
		runs[run] = true
		e.p.W += float64(j + 1)
	}
	if tb.n != 10*len(runs) || tb.runs != len(runs) {
		t.Errorf("%d entries in %d runs, want %d runs", tb.n, tb.runs, len(runs))
	}
	for run := range runs {
		es := tb.findRun(run)
		if len(es) != 10 {
			t.Fatalf("run %d: %d entries", run, len(es))
		}
		for j := range es {
			if es[j].key != run*10+uint64(j)+1 || tb.find(run*10+uint64(j)) != &es[j] {
				t.Fatalf("run %d value %d: key %d", run, j, es[j].key)
			}
		}
	}
	if tb.find(12345678901*10+3) != nil || tb.findRun(12345678901) != nil {
		t.Error("found a run never created")
	}
	n := 0
	tb.each(func(*entry) { n++ })
	if n != tb.n {
		t.Errorf("each visited %d of %d", n, tb.n)
	}
}

func TestTable(t *testing.T) {
	var tb table
	r := rand.New(rand.NewPCG(1, 1))
	want := map[uint64]float64{}
	for i := 0; i < 5000; i++ {
		k := r.Uint64() >> 3
		if i%3 == 0 {
			k = uint64(i) // dense ones too
		}
		e, created := tb.get(k)
		if _, ok := want[k]; ok == created {
			t.Fatalf("key %d: created %v, seen before %v", k, created, ok)
		}
		e.p.W = float64(i)
		want[k] = float64(i)
	}
	if tb.n != len(want) {
		t.Errorf("%d keys, want %d", tb.n, len(want))
	}
	for k, w := range want {
		if e := tb.find(k); e == nil || e.p.W != w {
			t.Fatalf("key %d: %v", k, e)
		}
	}
	if tb.find(1<<60) != nil {
		t.Error("found a key never added")
	}
	n := 0
	tb.each(func(*entry) { n++ })
	if n != len(want) {
		t.Errorf("each visited %d", n)
	}
}
