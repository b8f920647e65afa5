package ctr

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/gopslite/pslite/kv"
)

// EpochResult is what the workers agree on after an epoch.
type EpochResult struct {
	Fold, Epoch int
	Loss        float64 // mean training loss over the epoch's batches (before each update)
	TrainAcc    float64 // accuracy on those batches
	// Test: the test set (or the held-out fold); Valid: the validation
	// split (nil without one).
	Test, Valid *Metrics
	TestLoss    float64
	TestAcc     float64
	TestAUC     float64 // NaN for softmax models
	TestN       int
	TestCorrect int
	Examples    int           // examples processed by all workers
	Time        time.Duration // slowest worker's time for the epoch
	Rate        float64       // examples per second (Examples / Time)
}

// setTest fills the flat test fields from m.
func (r *EpochResult) setTest(m *Metrics) {
	r.Test = m
	r.TestLoss, r.TestAcc, r.TestAUC = m.Loss(), m.Acc(), m.AUC()
	r.TestN, r.TestCorrect = int(m.N), int(m.Correct)
}

// trainer runs the worker side of training.
type trainer struct {
	cfg     *Config
	kvw     *kv.KVWorker[float32]
	rank    int
	workers int
	servers int
	labels  *Labels
	layout  Weights
	vocab   *Vocab
	numKeys uint64 // model keys per fold
	out     io.Writer
	// checkpoint, when set (worker 0 of a job with PS_CHECKPOINT_DIR), has
	// the servers write a snapshot (postoffice.Postoffice.Checkpoint).
	checkpoint func(meta string) error
	step       int // training steps done, over all folds
	round      int // statistics rounds used (the census is round 0)
	quiet      int // epochs ended without an evaluation (-eval-every)
	scratch    [][]float32

	// A factor model's (fac not nil): the worker of its factors (app 1)
	// and their keys per fold.
	fac      *Factors
	kvv      *kv.KVWorker[float32]
	vNumKeys uint64
}

// apps returns the KV workers of the model's apps: the weights', then a
// factor model's factors'.
func (t *trainer) apps() []*kv.KVWorker[float32] {
	if t.kvv != nil {
		return []*kv.KVWorker[float32]{t.kvw, t.kvv}
	}
	return []*kv.KVWorker[float32]{t.kvw}
}

// control pushes a command to every server's control key on every app,
// vals(app) the values, and waits for all.
func (t *trainer) control(kind, step int, vals func(app int) []float32) error {
	var ts []int
	for app, w := range t.apps() {
		id, err := w.ZPush(t.ctrlKeys(), vals(app), nil, kv.WithCmd(command(kind, step)))
		if err != nil {
			return err
		}
		ts = append(ts, id)
	}
	for app, w := range t.apps() {
		if err := w.Wait(ts[app]); err != nil {
			return err
		}
	}
	return nil
}

// same returns vals for every app, for control.
func same(vals []float32) func(int) []float32 { return func(int) []float32 { return vals } }

// appendVKeys appends the factor keys of feats for fold, one per feature
// (each with K values).
func (t *trainer) appendVKeys(keys []uint64, feats []int32, fold int) []uint64 {
	return Weights{C: 1}.appendKeys(keys, feats, t.vocab.IDs, uint64(fold)*t.vNumKeys)
}

// binary reports whether the model is binary logistic regression.
func (t *trainer) binary() bool { return t.layout.C == 1 }

// pull fetches the values of keys into dst (resized) and waits.
func (t *trainer) pull(keys []uint64, dst []float32, kind, step int) ([]float32, error) {
	dst = slices.Grow(dst[:0], len(keys))[:len(keys)]
	// ZPull: keys stay unchanged until Wait returns.
	ts, err := t.kvw.ZPull(keys, &dst, nil, kv.WithCmd(command(kind, step)))
	if err != nil {
		return dst, err
	}
	return dst, t.kvw.Wait(ts)
}

// push sends vals for keys and waits until every server has them.
func (t *trainer) push(keys []uint64, vals []float32, kind, step int) error {
	// ZPush: keys and vals stay unchanged until Wait returns.
	ts, err := t.kvw.ZPush(keys, vals, nil, kv.WithCmd(command(kind, step)))
	if err != nil {
		return err
	}
	return t.kvw.Wait(ts)
}

// allGather pushes this worker's vals as the next round's statistics and
// returns every worker's (all of the same length), once all are in. Every
// worker must call it the same number of times with as many values.
func (t *trainer) allGather(vals []float32) ([][]float32, error) {
	r := t.round
	t.round++
	if r > maxStatsRound {
		return nil, fmt.Errorf("more than %d statistics rounds", maxStatsRound)
	}
	n := len(vals)
	if n >= 1<<statsFieldBits {
		return nil, fmt.Errorf("%d statistics values, more than %d", n, 1<<statsFieldBits)
	}
	keys := make([]uint64, n)
	for f := range keys {
		keys[f] = statsKey(r, t.rank, f)
	}
	if err := t.push(keys, vals, kindStats, 0); err != nil {
		return nil, err
	}
	all := make([]uint64, 0, n*t.workers)
	for w := 0; w < t.workers; w++ {
		for f := 0; f < n; f++ {
			all = append(all, statsKey(r, w, f))
		}
	}
	got, err := t.pull(all, nil, kindStats, 0)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, t.workers)
	for w := range out {
		out[w] = got[w*n : (w+1)*n]
	}
	return out, nil
}

// perWorker returns the rows of a step on each worker: ceil(batch / W).
func (t *trainer) perWorker() int { return (t.cfg.Batch + t.workers - 1) / t.workers }

// evalSet is data a worker scores after every epoch: its rows as one batch
// and the keys of their weights.
type evalSet struct {
	batch *Batch
	keys  []uint64
	w     []float32
	vkeys []uint64 // a factor model's
	v     []float32
}

// newEvalSet prepares d (nil or empty: an empty set) for fold's model.
func (t *trainer) newEvalSet(d *Dataset, fold int) *evalSet {
	e := &evalSet{}
	if d == nil {
		d = newDataset(t.vocab)
	}
	e.batch = NewBatch(d, seq(0, d.Len()), newMark(t.vocab.Len()))
	e.keys = t.layout.appendKeys(nil, e.batch.Feats, t.vocab.IDs, uint64(fold)*t.numKeys)
	if t.fac != nil {
		e.vkeys = t.appendVKeys(nil, e.batch.Feats, fold)
	}
	return e
}

// score pulls the weights of e's keys and scores its rows.
func (t *trainer) score(e *evalSet) (*Metrics, error) {
	if e.batch.Len() == 0 {
		return newMetrics(t.binary()), nil
	}
	if t.fac == nil {
		var err error
		if e.w, err = t.pull(e.keys, e.w, kindFinal, 0); err != nil {
			return nil, err
		}
		return EvaluateAll(e.batch, t.layout, e.w, t.binary()), nil
	}
	e.w = slices.Grow(e.w[:0], len(e.keys))[:len(e.keys)]
	e.v = slices.Grow(e.v[:0], len(e.vkeys)*t.fac.K)[:len(e.vkeys)*t.fac.K]
	tw, err := t.kvw.ZPull(e.keys, &e.w, nil, kv.WithCmd(command(kindFinal, 0)))
	if err != nil {
		return nil, err
	}
	tv, err := t.kvv.ZPull(e.vkeys, &e.v, nil, kv.WithCmd(command(kindFinal, 0)))
	if err != nil {
		return nil, err
	}
	if err := t.kvw.Wait(tw); err != nil {
		return nil, err
	}
	if err := t.kvv.Wait(tv); err != nil {
		return nil, err
	}
	fc := *t.fac
	return evaluateAll(e.batch, true, func(lo, hi int, m *Metrics) {
		fc.Evaluate(e.batch, lo, hi, t.layout, e.w, e.v, m)
	}), nil
}

// encodeMetrics appends m: N, Correct and LossSum exactly (two float32s
// each), then the AUC histograms' counts (a worker's counts per bin stay
// well below 2^24, exact in a float32).
func encodeMetrics(dst []float32, m *Metrics) []float32 {
	dst = appendFloat64(dst, m.N)
	dst = appendFloat64(dst, m.Correct)
	dst = appendFloat64(dst, m.LossSum)
	for i := range m.Pos {
		dst = append(dst, float32(m.Pos[i]), float32(m.Neg[i]))
	}
	return dst
}

// decodeMetrics reads what encodeMetrics wrote and returns the rest.
func decodeMetrics(v []float32, binary bool) (*Metrics, []float32) {
	m := newMetrics(binary)
	m.N, m.Correct, m.LossSum = unpackFloat64(v[0:2]), unpackFloat64(v[2:4]), unpackFloat64(v[4:6])
	v = v[6:]
	for i := range m.Pos {
		m.Pos[i], m.Neg[i] = float64(v[2*i]), float64(v[2*i+1])
	}
	return m, v[2*len(m.Pos):]
}

// slot is one step in flight: its batch's keys, the pulled weights and the
// gradient being pushed.
type slot struct {
	keys    []uint64
	w, grad []float32
	batch   *Batch
	step    int
	pullTS  int
	pushTS  int
	pushing bool
	// A factor model's factors: keys, pulled values, requests.
	vkeys   []uint64
	v       []float32
	vPullTS int
	vPushTS int
}

// waitPush waits for the slot's pushes in flight.
func (t *trainer) waitPush(sl *slot) error {
	if !sl.pushing {
		return nil
	}
	sl.pushing = false
	if err := t.kvw.Wait(sl.pushTS); err != nil {
		return fmt.Errorf("step %d: push: %w", sl.step, err)
	}
	if t.fac != nil {
		if err := t.kvv.Wait(sl.vPushTS); err != nil {
			return fmt.Errorf("step %d: push of the factors: %w", sl.step, err)
		}
	}
	return nil
}

// foldPlan is what a fold trains on.
type foldPlan struct {
	fold     int
	train    *Dataset // this worker's training rows
	maxTrain int      // the most training rows of any worker
	test     *Dataset // scored after every epoch (the held-out fold with -cv)
	valid    *Dataset // the validation split, or nil
}

// trainFold trains fold's model on this worker's rows for cfg.Epochs
// epochs (fewer when early stopping ends it), and returns the epochs'
// results, which every worker computes alike from the gathered statistics.
func (t *trainer) trainFold(p foldPlan) ([]EpochResult, error) {
	cfg := t.cfg
	bw := t.perWorker()
	steps := (p.maxTrain + bw - 1) / bw
	scale := float32(1 / float64(bw*t.workers))
	off := uint64(p.fold) * t.numKeys
	ids := t.vocab.IDs

	// Fixed batches: the rows are shuffled once, cut into batches whose
	// keys are deduplicated now, and each epoch visits the batches in a new
	// order (wrapping around when another worker has more).
	rows := Permutation(p.train.Len(), cfg.Seed^uint64(1+t.rank)<<20^uint64(p.fold)<<44)
	mark := newMark(t.vocab.Len())
	var batches []*Batch
	for lo := 0; lo < len(rows); lo += bw {
		batches = append(batches, NewBatch(p.train, rows[lo:min(lo+bw, len(rows))], mark))
	}
	test := t.newEvalSet(p.test, p.fold)
	var valid *evalSet
	if p.valid != nil {
		valid = t.newEvalSet(p.valid, p.fold)
	}
	depth := max(1, cfg.Pipeline)
	ring := make([]slot, 2*depth) // depth pulls and up to depth pushes in flight

	var results []EpochResult
	bestLoss, bestEpoch := math.Inf(1), -1
	// The training figures since the last evaluation.
	start := time.Now()
	var lossSum float64
	var correct, n int
	for epoch := 0; epoch < cfg.Epochs; epoch++ {
		order := Permutation(len(batches), cfg.Seed^uint64(1+t.rank)<<20^uint64(t.round+t.quiet)<<40)
		first := t.step
		if first+steps > maxStep {
			return nil, fmt.Errorf("more than %d steps", maxStep)
		}
		// issue sends the pull of step s (0-based in the epoch).
		issue := func(s int) error {
			sl := &ring[s%len(ring)]
			if err := t.waitPush(sl); err != nil {
				return err
			}
			sl.batch = batches[order[s%len(order)]]
			sl.step = first + s
			sl.keys = t.layout.appendKeys(sl.keys[:0], sl.batch.Feats, ids, off)
			sl.w = slices.Grow(sl.w[:0], len(sl.keys))[:len(sl.keys)]
			ts, err := t.kvw.ZPull(sl.keys, &sl.w, nil, kv.WithCmd(command(kindTrain, sl.step)))
			if err != nil {
				return fmt.Errorf("step %d: pull: %w", sl.step, err)
			}
			sl.pullTS = ts
			if t.fac != nil {
				sl.vkeys = t.appendVKeys(sl.vkeys[:0], sl.batch.Feats, p.fold)
				sl.v = slices.Grow(sl.v[:0], len(sl.vkeys)*t.fac.K)[:len(sl.vkeys)*t.fac.K]
				if sl.vPullTS, err = t.kvv.ZPull(sl.vkeys, &sl.v, nil, kv.WithCmd(command(kindTrain, sl.step))); err != nil {
					return fmt.Errorf("step %d: pull of the factors: %w", sl.step, err)
				}
			}
			return nil
		}
		next := 0
		for ; next < min(depth, steps); next++ {
			if err := issue(next); err != nil {
				return nil, err
			}
		}
		for s := 0; s < steps; s++ {
			sl := &ring[s%len(ring)]
			if err := t.kvw.Wait(sl.pullTS); err != nil {
				return nil, fmt.Errorf("step %d: pull: %w", sl.step, err)
			}
			// The gradient buffer: the weights' gradient, room for a
			// learning-rate value per server, then (a factor model) the
			// factors' gradient and their control keys' K values per
			// server (the rate first), so that each push sends a part of
			// it as it is.
			S := t.servers
			nk, nv, K := len(sl.keys), 0, 1
			if t.fac != nil {
				if err := t.kvv.Wait(sl.vPullTS); err != nil {
					return nil, fmt.Errorf("step %d: pull of the factors: %w", sl.step, err)
				}
				K = t.fac.K
				nv = (len(sl.vkeys) + S) * K
			}
			sl.grad = slices.Grow(sl.grad[:0], nk+S+nv)[:nk+S+nv]
			clear(sl.grad)
			var l float64
			var c int
			if t.fac == nil {
				l, c = BatchGrad(sl.batch, t.layout, sl.w, sl.grad[:nk], &t.scratch)
			} else {
				fc, b, w, v := *t.fac, sl.batch, sl.w, sl.v
				l, c = splitGrad(b, len(b.Pos)*fc.K, sl.grad, &t.scratch, func(lo, hi int, g []float32) (float64, int) {
					return fc.LossGrad(b, lo, hi, t.layout, w, v, g[:nk], g[nk+S:nk+S+len(v)])
				})
			}
			lossSum += l
			correct += c
			n += sl.batch.Len()
			for i := range sl.grad {
				sl.grad[i] *= scale
			}
			// The learning-rate scale, for every server (see ctrlBase).
			rate := float32(1 / (1 + cfg.LRDecay*(float64(epoch)+float64(s)/float64(steps))))
			for sv := 0; sv < S; sv++ {
				sl.keys = append(sl.keys, ctrlBase+uint64(sv))
				sl.grad[nk+sv] = rate
				if t.fac != nil {
					sl.vkeys = append(sl.vkeys, ctrlBase+uint64(sv))
					sl.grad[nk+S+nv-(S-sv)*K] = rate
				}
			}
			ts, err := t.kvw.ZPush(sl.keys, sl.grad[:nk+S], nil, kv.WithCmd(command(kindTrain, sl.step)))
			if err != nil {
				return nil, fmt.Errorf("step %d: push: %w", sl.step, err)
			}
			sl.pushTS, sl.pushing = ts, true
			if t.fac != nil {
				if sl.vPushTS, err = t.kvv.ZPush(sl.vkeys, sl.grad[nk+S:], nil, kv.WithCmd(command(kindTrain, sl.step))); err != nil {
					return nil, fmt.Errorf("step %d: push of the factors: %w", sl.step, err)
				}
			}
			if next < steps {
				if err := issue(next); err != nil {
					return nil, err
				}
				next++
			}
		}
		for i := range ring {
			if err := t.waitPush(&ring[i]); err != nil {
				return nil, err
			}
		}
		t.step += steps
		if cfg.EvalEvery > 1 && (epoch+1)%cfg.EvalEvery != 0 && epoch != cfg.Epochs-1 {
			// No evaluation after this epoch: the workers go on at once.
			t.quiet++
			continue
		}
		elapsed := time.Since(start)

		// Every worker's pushes are in once all reports are: then score.
		var report []float32
		report = appendFloat64(report, lossSum)
		report = appendFloat64(report, float64(n))
		report = appendFloat64(report, float64(correct))
		report = appendFloat64(report, elapsed.Seconds())
		reports, err := t.allGather(report)
		if err != nil {
			return nil, fmt.Errorf("epoch %d: gather reports: %w", epoch+1, err)
		}
		if t.checkpoint != nil {
			// Every push of the epoch is in, and no worker pushes again
			// before this one's scores: the snapshot holds the epoch's model.
			meta := fmt.Sprintf("fold %d epoch %d", p.fold+1, epoch+1)
			if err := t.checkpoint(meta); err != nil {
				fmt.Fprintf(t.out, "lr: no snapshot after %s: %v\n", meta, err)
			}
		}
		r := EpochResult{Fold: p.fold, Epoch: epoch}
		var loss, secs, ex, corr float64
		for _, v := range reports {
			loss += unpackFloat64(v[0:2])
			ex += unpackFloat64(v[2:4])
			corr += unpackFloat64(v[4:6])
			secs = max(secs, unpackFloat64(v[6:8]))
		}
		if ex > 0 {
			r.Loss, r.TrainAcc = loss/ex, corr/ex
		}
		r.Examples = int(ex)
		r.Time = time.Duration(secs * float64(time.Second))
		if secs > 0 {
			r.Rate = ex / secs
		}
		mt, err := t.score(test)
		if err != nil {
			return nil, fmt.Errorf("epoch %d: score: %w", epoch+1, err)
		}
		evals := encodeMetrics(nil, mt)
		if valid != nil {
			mv, err := t.score(valid)
			if err != nil {
				return nil, fmt.Errorf("epoch %d: score: %w", epoch+1, err)
			}
			evals = encodeMetrics(evals, mv)
		}
		// Once everyone's scores are in, every worker has scored: the model
		// may change again.
		gathered, err := t.allGather(evals)
		if err != nil {
			return nil, fmt.Errorf("epoch %d: gather scores: %w", epoch+1, err)
		}
		mt, mv := newMetrics(t.binary()), (*Metrics)(nil)
		if valid != nil {
			mv = newMetrics(t.binary())
		}
		for _, v := range gathered {
			m, rest := decodeMetrics(v, t.binary())
			mt.Merge(m)
			if valid != nil {
				m, _ := decodeMetrics(rest, t.binary())
				mv.Merge(m)
			}
		}
		r.setTest(mt)
		r.Valid = mv
		results = append(results, r)
		start, lossSum, correct, n = time.Now(), 0, 0, 0
		if t.rank == 0 {
			t.printEpoch(r)
		}
		if mv != nil && cfg.EarlyStop > 0 {
			if mv.Loss() < bestLoss {
				bestLoss, bestEpoch = mv.Loss(), epoch
				// Save before this worker's next push; the first worker to
				// ask saves, before any worker pushed the next epoch.
				if err := t.control(kindSnapshot, t.round, same(make([]float32, t.servers))); err != nil {
					return nil, fmt.Errorf("epoch %d: save the model: %w", epoch+1, err)
				}
			} else if epoch-bestEpoch >= cfg.EarlyStop && epoch < cfg.Epochs-1 {
				if t.rank == 0 {
					fmt.Fprintf(t.out, "early stop: the validation loss has not improved for %d epochs; keeping epoch %d's model\n",
						cfg.EarlyStop, bestEpoch+1)
				}
				break
			}
		}
	}
	return results, nil
}

// perServer returns the values of a push of every server's control key:
// vals, each uint64 in two float32s, for each server.
func (t *trainer) perServer(vals ...uint64) []float32 {
	out := make([]float32, 0, 2*len(vals)*t.servers)
	for range t.servers {
		for _, v := range vals {
			out = appendUint64(out, v)
		}
	}
	return out
}

// ctrlKeys returns the control key of every server.
func (t *trainer) ctrlKeys() []uint64 {
	keys := make([]uint64, t.servers)
	for s := range keys {
		keys[s] = ctrlBase + uint64(s)
	}
	return keys
}

// printEpoch prints rank 0's progress line for an epoch.
func (t *trainer) printEpoch(r EpochResult) {
	fold := ""
	test := "test"
	if t.cfg.CV > 0 {
		fold = fmt.Sprintf("fold %d/%d ", r.Fold+1, t.cfg.CV)
		test = "heldout"
	}
	valid := ""
	if r.Valid != nil {
		valid = fmt.Sprintf("  valid-loss %.4f  valid-acc %.4f", r.Valid.Loss(), r.Valid.Acc())
	}
	auc := ""
	if !math.IsNaN(r.TestAUC) {
		auc = fmt.Sprintf("  %s-auc %.4f", test, r.TestAUC)
	}
	fmt.Fprintf(t.out, "%sepoch %*d/%d  loss %.4f  train-acc %.4f%s  %s-loss %.4f  %s-acc %.4f%s  %6.2fs  %8.0f ex/s\n",
		fold, len(fmt.Sprint(t.cfg.Epochs)), r.Epoch+1, t.cfg.Epochs, r.Loss, r.TrainAcc, valid,
		test, r.TestLoss, test, r.TestAcc, auc, r.Time.Seconds(), r.Rate)
}

// dumpModel fetches fold 0's whole model from the servers, with the
// optimiser state when withState.
func (t *trainer) dumpModel(withState bool) (*Model, error) {
	vals, err := t.dump(t.kvw)
	if err != nil {
		return nil, err
	}
	C := uint64(t.layout.C)
	m := &Model{Labels: *t.labels, Bias: t.cfg.Bias, HashBits: t.cfg.HashBits, Binary: t.cfg.Binary}
	if withState {
		m.Z, m.N = []float64{}, []float64{}
	}
	for i := 0; i+8 <= len(vals); i += 8 {
		k := unpackUint64(vals[i:])
		if k >= t.numKeys {
			continue // another fold's
		}
		id, c := k/C, int(k%C)
		if len(m.IDs) == 0 || m.IDs[len(m.IDs)-1] != id {
			if len(m.IDs) > 0 && m.IDs[len(m.IDs)-1] > id {
				return nil, fmt.Errorf("the servers' keys are not in order")
			}
			m.IDs = append(m.IDs, id)
			m.W = append(m.W, make([]float32, C)...)
			if withState {
				m.Z = append(m.Z, make([]float64, C)...)
				m.N = append(m.N, make([]float64, C)...)
			}
		}
		p := (len(m.IDs)-1)*int(C) + c
		m.W[p] = float32(unpackFloat64(vals[i+2:]))
		if withState {
			m.Z[p], m.N[p] = unpackFloat64(vals[i+4:]), unpackFloat64(vals[i+6:])
		}
	}
	if t.fac != nil {
		if err := t.dumpFactors(m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// dump fetches every model key of every server's range on an app, with
// its state: per key, the key and W, Z, N (each two float32s), by key.
func (t *trainer) dump(w *kv.KVWorker[float32]) ([]float32, error) {
	var vals []float32
	var lens []int32
	ts, err := w.ZPull(t.ctrlKeys(), &vals, &lens, kv.WithCmd(command(kindDump, 0)))
	if err != nil {
		return nil, err
	}
	return vals, w.Wait(ts)
}

// dumpFactors adds fold 0's factors to m, whose weights are in: a
// feature with factors but no weight joins m with weight 0.
func (t *trainer) dumpFactors(m *Model) error {
	vals, err := t.dump(t.kvv)
	if err != nil {
		return err
	}
	fc := *t.fac
	K := uint64(fc.K)
	m.Factors = &fc
	m.InitStd, m.InitSeed = t.cfg.InitStd, t.cfg.Seed
	factors := make(map[uint64][]float32)
	for i := 0; i+8 <= len(vals); i += 8 {
		k := unpackUint64(vals[i:])
		v := float32(unpackFloat64(vals[i+2:]))
		if k >= t.vNumKeys*K {
			continue // another fold's
		}
		id := k / K
		f := factors[id]
		if f == nil {
			f = make([]float32, K)
			for j := range f {
				f[j] = float32(initFactor(id*K+uint64(j), t.cfg.Seed, t.cfg.InitStd))
			}
			factors[id] = f
		}
		f[k%K] = v
	}
	// The features of either app, in order, each with its weight (0 when
	// it has none) and factors (their start when never pushed).
	ids := slices.Clone(m.IDs)
	for id := range factors {
		if m.pos(id) < 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	w := make([]float32, len(ids))
	var z, n []float64
	if m.Z != nil {
		z, n = make([]float64, len(ids)), make([]float64, len(ids))
	}
	m.V = make([]float32, 0, len(ids)*fc.K)
	for i, id := range ids {
		if p := m.pos(id); p >= 0 {
			w[i] = m.W[p]
			if z != nil {
				z[i], n[i] = m.Z[p], m.N[p]
			}
		}
		f := factors[id]
		if f == nil {
			for j := uint64(0); j < K; j++ {
				f = append(f, float32(initFactor(id*K+j, t.cfg.Seed, t.cfg.InitStd)))
			}
		}
		m.V = append(m.V, f...)
	}
	m.IDs, m.W, m.Z, m.N, m.lookup = ids, w, z, n, nil
	return nil
}

// initModel pushes a saved model's weights and state to the servers (warm
// start); its features become fold 0's keys.
func (t *trainer) initModel(m *Model) error {
	C := t.layout.C
	keys := make([]uint64, 0, len(m.W))
	vals := make([]float32, 0, 6*len(m.W))
	for i, id := range m.IDs {
		for c := 0; c < C; c++ {
			p := i*C + c
			var z, n float64
			if m.Z != nil {
				z, n = m.Z[p], m.N[p]
			}
			if m.W[p] == 0 && z == 0 && n == 0 {
				continue
			}
			keys = append(keys, id*uint64(C)+uint64(c))
			vals = appendFloat64(vals, float64(m.W[p]))
			vals = appendFloat64(vals, z)
			vals = appendFloat64(vals, n)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	return t.push(keys, vals, kindInit, 0)
}
