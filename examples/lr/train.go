package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/gopslite/pslite/kv"
)

// EpochResult is what rank 0 reports after an epoch.
type EpochResult struct {
	Fold, Epoch int
	Loss        float64 // mean training loss over the epoch's batches (before each update)
	TrainAcc    float64 // accuracy on those batches
	TestLoss    float64
	TestAcc     float64
	TestCorrect int
	TestN       int
	Examples    int           // examples processed by all workers
	Time        time.Duration // slowest worker's time for the epoch
	Rate        float64       // examples per second (Examples / Time)
}

// trainer runs the worker side of training.
type trainer struct {
	cfg      *Config
	kvw      *kv.KVWorker[float32]
	rank     int
	workers  int
	servers  int
	labels   *Labels
	outputs  int
	features int    // feature ids 0..features-1
	numKeys  uint64 // model keys per fold
	out      io.Writer
	step     int // training steps done, over all folds
	round    int // epochs done, over all folds
}

// pull fetches the values of keys into dst (resized).
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

// modelKeys returns every key of fold's model.
func (t *trainer) modelKeys(fold int) []uint64 {
	keys := make([]uint64, t.numKeys)
	off := uint64(fold) * t.numKeys
	for i := range keys {
		keys[i] = off + uint64(i)
	}
	return keys
}

// pullModel fetches fold's whole model.
func (t *trainer) pullModel(fold, kind, step int) (*Model, error) {
	w, err := t.pull(t.modelKeys(fold), nil, kind, step)
	if err != nil {
		return nil, err
	}
	m := NewModel(*t.labels, t.features, t.cfg.Bias)
	copy(m.W, w)
	return m, nil
}

// perWorker returns the rows of a step on each worker: ceil(batch / W).
func (t *trainer) perWorker() int { return (t.cfg.Batch + t.workers - 1) / t.workers }

// steps returns the steps of an epoch when the largest shard has maxShard
// rows; every worker runs that many, wrapping around its own shard.
func (t *trainer) steps(maxShard int) int {
	bw := t.perWorker()
	return (maxShard + bw - 1) / bw
}

// trainFold trains fold's model on this worker's shard (rows of data),
// where the largest shard has maxShard rows, for cfg.Epochs epochs. Rank 0
// evaluates on test after each epoch and returns the epochs' results;
// the other ranks return nil.
func (t *trainer) trainFold(fold int, shard *Dataset, maxShard int, test *Dataset) ([]EpochResult, error) {
	if shard.Len() == 0 {
		return nil, fmt.Errorf("worker %d has no training examples (%d workers for %d examples?)", t.rank, t.workers, maxShard)
	}
	C := t.outputs
	bw := t.perWorker()
	steps := t.steps(maxShard)
	scale := float32(1 / float64(bw*t.workers))
	keyOff := uint64(fold) * t.numKeys
	mark := make([]int32, max(int(shard.MaxFeature)+1, t.features))
	for i := range mark {
		mark[i] = -1
	}
	var (
		feats   []int32
		keys    []uint64
		w, grad []float32
		rows    = make([]int, bw)
		results []EpochResult
	)
	for epoch := 0; epoch < t.cfg.Epochs; epoch++ {
		order := Permutation(shard.Len(), t.cfg.Seed^uint64(1+t.rank)<<20^uint64(t.round)<<40)
		start := time.Now()
		var lossSum float64
		var correct, n int
		for s := 0; s < steps; s++ {
			if t.step > maxStep {
				return nil, fmt.Errorf("more than %d steps", maxStep)
			}
			for i := range rows {
				rows[i] = order[(s*bw+i)%len(order)]
			}
			feats = uniqueFeatures(shard, rows, mark, feats)
			keys = keys[:0]
			for _, f := range feats {
				for c := 0; c < C; c++ {
					keys = append(keys, keyOff+uint64(int(f)*C+c))
				}
			}
			var err error
			if w, err = t.pull(keys, w, kindTrain, t.step); err != nil {
				return nil, fmt.Errorf("step %d: pull: %w", t.step, err)
			}
			nk := len(keys)
			grad = slices.Grow(grad[:0], nk+t.servers)[:nk]
			clear(grad)
			l, c := LossGrad(shard, rows, C, mark, w, grad)
			lossSum += l
			correct += c
			n += len(rows)
			for i := range grad {
				grad[i] *= scale
			}
			// The learning-rate scale, for every server (see ctrlBase).
			rate := float32(1 / (1 + t.cfg.LRDecay*(float64(epoch)+float64(s)/float64(steps))))
			for sv := 0; sv < t.servers; sv++ {
				keys = append(keys, ctrlBase+uint64(sv))
				grad = append(grad, rate)
			}
			if err := t.push(keys, grad, kindTrain, t.step); err != nil {
				return nil, fmt.Errorf("step %d: push: %w", t.step, err)
			}
			for _, f := range feats {
				mark[f] = -1
			}
			t.step++
		}
		elapsed := time.Since(start)
		report := []float32{float32(lossSum), float32(n), float32(correct), float32(elapsed.Seconds())}
		skeys := make([]uint64, statsFields)
		for f := range skeys {
			skeys[f] = statsKey(t.round, t.rank, t.workers, f)
		}
		if err := t.push(skeys, report, kindStats, 0); err != nil {
			return nil, fmt.Errorf("epoch %d: report: %w", epoch+1, err)
		}
		if t.rank == 0 {
			r, err := t.evaluate(fold, epoch, test)
			if err != nil {
				return nil, err
			}
			results = append(results, r)
			t.printEpoch(r)
		}
		t.round++
	}
	return results, nil
}

// evaluate gathers every worker's report for the epoch, then pulls the
// model as a worker at the current step would see it and scores test. The
// reports come first: each worker sends its report only once its last push
// of the epoch was acknowledged, so under ASP and SSP too the model pulled
// after them holds every update of the epoch.
func (t *trainer) evaluate(fold, epoch int, test *Dataset) (EpochResult, error) {
	r := EpochResult{Fold: fold, Epoch: epoch}
	keys := make([]uint64, 0, t.workers*statsFields)
	for w := 0; w < t.workers; w++ {
		for f := 0; f < statsFields; f++ {
			keys = append(keys, statsKey(t.round, w, t.workers, f))
		}
	}
	vals, err := t.pull(keys, nil, kindStats, 0)
	if err != nil {
		return r, fmt.Errorf("epoch %d: gather reports: %w", epoch+1, err)
	}
	if test != nil && test.Len() > 0 {
		m, err := t.pullModel(fold, kindTrain, t.step)
		if err != nil {
			return r, fmt.Errorf("epoch %d: pull model: %w", epoch+1, err)
		}
		r.TestLoss, r.TestAcc = m.Evaluate(test)
		r.TestN = test.Len()
		r.TestCorrect = int(math.Round(r.TestAcc * float64(r.TestN)))
	}
	var loss, n, correct, secs float64
	for w := 0; w < t.workers; w++ {
		v := vals[w*statsFields:]
		loss += float64(v[0])
		n += float64(v[1])
		correct += float64(v[2])
		secs = max(secs, float64(v[3]))
	}
	if n > 0 {
		r.Loss = loss / n
		r.TrainAcc = correct / n
	}
	r.Examples = int(n)
	r.Time = time.Duration(secs * float64(time.Second))
	if secs > 0 {
		r.Rate = n / secs
	}
	return r, nil
}
