package ctr

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// census is what a worker tells the others about its data before training,
// so that all of them choose the same classes and key layout.
type census struct {
	train, test, valid int    // rows of each part
	maxID              uint64 // largest feature id (the init model's included)
	labels             []LabelCount
	maxField           int // largest field of libffm data (-1: none)
}

// maxFieldOf returns the largest field of the data sets (-1: none).
func maxFieldOf(sets ...*Dataset) int {
	m := -1
	for _, d := range sets {
		if d != nil {
			for _, f := range d.Field {
				m = max(m, int(f))
			}
		}
	}
	return m
}

// maxCensusLabels bounds the distinct labels a worker reports.
const maxCensusLabels = 256

// encode lays c out in a fixed number of values.
func (c census) encode() []float32 {
	var v []float32
	v = appendFloat64(v, float64(c.train))
	v = appendFloat64(v, float64(c.test))
	v = appendFloat64(v, float64(c.valid))
	v = appendUint64(v, c.maxID)
	v = appendFloat64(v, float64(len(c.labels)))
	for i := 0; i < maxCensusLabels; i++ {
		var l LabelCount
		if i < len(c.labels) {
			l = c.labels[i]
		}
		v = appendFloat64(v, l.Value)
		v = appendFloat64(v, float64(l.Train))
		v = appendFloat64(v, float64(l.Test))
	}
	return appendFloat64(v, float64(c.maxField))
}

// decodeCensus is the inverse of census.encode.
func decodeCensus(v []float32) census {
	c := census{
		train: int(unpackFloat64(v[0:])),
		test:  int(unpackFloat64(v[2:])),
		valid: int(unpackFloat64(v[4:])),
		maxID: unpackUint64(v[6:]),
	}
	n := int(unpackFloat64(v[8:]))
	for i := 0; i < n; i++ {
		e := v[10+6*i:]
		c.labels = append(c.labels, LabelCount{
			Value: unpackFloat64(e[0:]), Train: int(unpackFloat64(e[2:])), Test: int(unpackFloat64(e[4:])),
		})
	}
	c.maxField = int(unpackFloat64(v[10+6*maxCensusLabels:]))
	return c
}

// heldOut returns how many of n rows fold i of k holds: the rows at
// positions p < n with p mod k = i.
func heldOut(n, i, k int) int { return (n - i + k - 1) / k }

// work is a worker's part of the job: read its shard, agree with the other
// workers on the classes and keys, train, and on rank 0 report and write
// the model, the predictions and the plot.
func work(po *postoffice.Postoffice, cfg *Config, out io.Writer) error {
	rank, workers := po.MyRank(), po.NumWorkers()
	if workers > 1<<statsRankBits {
		return fmt.Errorf("%d workers: at most %d", workers, 1<<statsRankBits)
	}
	logf := func(format string, args ...any) {
		if rank == 0 {
			fmt.Fprintf(out, format+"\n", args...)
		}
	}
	begin := time.Now()
	vocab := NewVocab()
	o := ReadOptions{Rank: rank, Workers: workers, HashBits: cfg.HashBits, Vocab: vocab, Limit: cfg.TrainLimit, Binary: cfg.Binary}
	train, err := LoadData(cfg.Train, o)
	if err != nil {
		return err
	}
	var test *Dataset
	if cfg.Test != "" {
		o.Limit = cfg.TestLimit
		if test, err = LoadData(cfg.Test, o); err != nil {
			return err
		}
	}
	var init *Model
	if cfg.InitModel != "" && rank == 0 {
		if init, err = readModelFile(cfg.InitModel); err != nil {
			return err
		}
		if init.HashBits != cfg.HashBits || init.Bias != cfg.Bias || init.Binary != cfg.Binary {
			return fmt.Errorf("%s: a model of -hash-bits=%d -bias=%g -binary=%v cannot start a run of -hash-bits=%d -bias=%g -binary=%v",
				cfg.InitModel, init.HashBits, init.Bias, init.Binary, cfg.HashBits, cfg.Bias, cfg.Binary)
		}
		if cfg.Opt == "ftrl" && init.Z == nil && len(init.W) > 0 {
			return fmt.Errorf("%s: the model has no FTRL state (trained with sgd?); FTRL would start it from zero", cfg.InitModel)
		}
	}
	vocab.Sort(train, test)
	loadTime := time.Since(begin)

	// This worker's parts: the training rows, held-out test rows (without
	// -test), validation rows.
	n := train.Len()
	perm := Permutation(n, cfg.Seed^uint64(1+rank)*0x9e3779b97f4a7c15)
	var trainRows, testRows, validRows []int
	if cfg.CV > 0 {
		trainRows = perm
	} else {
		nTest := 0
		if test == nil {
			nTest = int(math.Round(cfg.Holdout * float64(n)))
		}
		nValid := int(math.Round(cfg.Valid * float64(n)))
		nValid = min(nValid, n-nTest)
		testRows, validRows, trainRows = perm[:nTest], perm[nTest:nTest+nValid], perm[nTest+nValid:]
	}
	me := census{train: len(trainRows), valid: len(validRows), labels: CountLabels([]*Dataset{train}, []*Dataset{test}),
		maxField: maxFieldOf(train, test)}
	if test != nil {
		me.test = test.Len()
	} else {
		me.test = len(testRows)
	}
	if vocab.Len() > 0 {
		me.maxID = vocab.IDs[vocab.Len()-1]
	}
	if init != nil {
		me.maxID = max(me.maxID, init.MaxID())
	}
	if len(me.labels) > maxCensusLabels {
		return fmt.Errorf("%d distinct labels in this worker's data, more than %d classes: is this classification data?", len(me.labels), maxCensusLabels)
	}

	kvw, err := kv.NewKVWorker[float32](po, 0, 0)
	if err != nil {
		return err
	}
	t := &trainer{cfg: cfg, kvw: kvw, rank: rank, workers: workers, servers: po.NumServers(), vocab: vocab, out: out}
	// The census goes through server 0's statistics keys, whose routing
	// does not depend on the key layout still to be chosen (nor does the
	// control keys').
	if err := kvw.SetSlicer(keyRouter{numKeys: 1}.Slicer); err != nil {
		return err
	}
	if cfg.Factors != nil {
		if t.kvv, err = kv.NewKVWorker[float32](po, factorApp, 0); err != nil {
			return err
		}
		if err := t.kvv.SetSlicer(keyRouter{numKeys: 1}.Slicer); err != nil {
			return err
		}
	}
	if gen, meta := po.Restored(); gen != 0 {
		// The servers were restored from a snapshot of an earlier run: they
		// start this one over from its model.
		if err := t.control(kindJob, jobBegin, same(t.perServer(gen))); err != nil {
			return fmt.Errorf("begin the run: %w", err)
		}
		if meta != "" {
			meta = " (" + meta + ")"
		}
		logf(cfg.Program+": the servers resumed from snapshot %d%s: training starts from its model", gen, meta)
	}
	if rank == 0 && po.Config().CheckpointDir != "" {
		t.checkpoint = func(meta string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			_, err := po.Checkpoint(ctx, meta)
			return err
		}
	}
	gathered, err := t.allGather(me.encode())
	if err != nil {
		return fmt.Errorf("census: %w", err)
	}
	all := make([]census, workers)
	var lists [][]LabelCount
	total := census{maxField: -1}
	minTrain := math.MaxInt
	for w, v := range gathered {
		all[w] = decodeCensus(v)
		lists = append(lists, all[w].labels)
		total.train += all[w].train
		total.test += all[w].test
		total.valid += all[w].valid
		total.maxID = max(total.maxID, all[w].maxID)
		total.maxField = max(total.maxField, all[w].maxField)
		minTrain = min(minTrain, all[w].train)
	}
	total.labels = MergeLabelCounts(lists...)
	labels, err := InferLabels(cfg.Loss, total.labels)
	if err != nil {
		return fmt.Errorf("labels: %w", err)
	}
	if init != nil && (init.Labels.Softmax != labels.Softmax || !slicesEqual(init.Labels.Values, labels.Values)) {
		return fmt.Errorf("%s: the model's classes %v (softmax %v) are not the data's %v (softmax %v)",
			cfg.InitModel, init.Labels.Values, init.Labels.Softmax, labels.Values, labels.Softmax)
	}
	for _, d := range []*Dataset{train, test} {
		if d != nil {
			if err := labels.Assign(d); err != nil {
				return err
			}
		}
	}
	t.labels = labels
	t.layout = Weights{C: labels.Outputs(), Bias: cfg.Bias}
	C := uint64(labels.Outputs())
	maxID := total.maxID
	if cfg.HashBits > 0 {
		maxID = uint64(1)<<cfg.HashBits - 1
	}
	folds := uint64(max(cfg.CV, 1))
	if (maxID + 1) > statsBase/C/folds {
		return fmt.Errorf("feature ids up to %d × %d outputs × %d folds do not fit below key %d", maxID, C, folds, statsBase)
	}
	t.numKeys = (maxID + 1) * C
	if err := kvw.SetSlicer(keyRouter{numKeys: t.numKeys}.Slicer); err != nil {
		return err
	}
	if cfg.Factors != nil {
		if labels.Softmax {
			return fmt.Errorf("%s is a binary model, and the data has %d classes (use lr -loss=softmax)", cfg.Program, labels.K())
		}
		fc := *cfg.Factors
		if fc.Kind == kindMVM {
			if total.maxField < 0 {
				return fmt.Errorf("mvm takes its views from the fields of libffm input (label field:feature:value ...); the data has none")
			}
			fc.Views = total.maxField + 1
			if err := fc.check(train, cfg.Train); err != nil {
				return err
			}
			if err := fc.check(test, cfg.Test); err != nil {
				return err
			}
		}
		t.fac = &fc
		t.vNumKeys = maxID + 1
		if t.vNumKeys > statsBase/folds/uint64(fc.K) {
			return fmt.Errorf("feature ids up to %d × %d factors × %d folds do not fit below key %d", maxID, fc.K, folds, statsBase)
		}
		if err := t.kvv.SetSlicer(keyRouter{numKeys: t.vNumKeys}.Slicer); err != nil {
			return err
		}
	}
	// The servers learn the layout before any model key (it says which
	// keys each one's range holds, for their snapshots).
	err = t.control(kindJob, jobLayout, func(app int) []float32 {
		if app == factorApp {
			return t.perServer(t.vNumKeys, uint64(t.servers))
		}
		return t.perServer(t.numKeys, uint64(t.servers))
	})
	if err != nil {
		return fmt.Errorf("key layout: %w", err)
	}

	// Checks every worker makes alike, from the census.
	bw := t.perWorker()
	if cfg.CV > 0 {
		for w, c := range all {
			if c.train < cfg.CV {
				return fmt.Errorf("worker %d has %d examples for %d folds", w, c.train, cfg.CV)
			}
			minTrain = min(minTrain, c.train-heldOut(c.train, 0, cfg.CV))
		}
	}
	for w, c := range all {
		if c.train == 0 {
			return fmt.Errorf("worker %d has no training examples (%d for %d workers)", w, total.train, workers)
		}
	}
	if bw > minTrain {
		return fmt.Errorf("-batch=%d takes %d examples per step on each of the %d workers, but a worker has only %d training examples: a step would repeat examples; use -batch=%d or less",
			cfg.Batch, bw, workers, minTrain, minTrain*workers)
	}
	if total.test == 0 && cfg.CV == 0 {
		return fmt.Errorf("no test examples: give -test, -holdout or -cv")
	}
	if cfg.Valid > 0 && total.valid == 0 {
		return fmt.Errorf("-valid=%g leaves no validation examples", cfg.Valid)
	}

	if cfg.InitModel != "" {
		if rank == 0 {
			if err := t.initModel(init); err != nil {
				return fmt.Errorf("warm start: %w", err)
			}
		}
		if err := po.Barrier(context.Background(), 0, message.WorkerGroup); err != nil {
			return err
		}
	}

	kind := "binary logistic regression"
	switch {
	case t.fac != nil && t.fac.Kind == kindFM:
		kind = fmt.Sprintf("factorization machine (%d factors per feature on app %d)", t.fac.K, factorApp)
	case t.fac != nil:
		kind = fmt.Sprintf("multi-view machine (%d views, %d factors per feature on app %d)", t.fac.Views, t.fac.K, factorApp)
	case labels.Softmax:
		kind = fmt.Sprintf("softmax regression over %d classes", labels.K())
	}
	opt := optName(cfg)
	hash := ""
	if cfg.HashBits > 0 {
		hash = fmt.Sprintf(", ids hashed to %d bits", cfg.HashBits)
	}
	var results []EpochResult
	if cfg.CV > 0 {
		logf(cfg.Program+": %s, %d examples, %d-fold cross-validation, ids up to %d%s, %d keys per fold on %d servers",
			kind, total.train, cfg.CV, maxID, hash, t.numKeys, t.servers)
		logf(cfg.Program+": %d workers, batch %d (%d per worker), %s, %s, pipeline %d, %d epochs per fold; data read in %.2fs",
			workers, cfg.Batch, bw, opt, syncName(cfg), cfg.Pipeline, cfg.Epochs, loadTime.Seconds())
		if len(labels.Missing) > 0 {
			logf(cfg.Program+": note: no training example has class %v", labels.Missing)
		}
		begin = time.Now()
		for fold := 0; fold < cfg.CV; fold++ {
			var tr, held []int
			for i, r := range perm {
				if i%cfg.CV == fold {
					held = append(held, r)
				} else {
					tr = append(tr, r)
				}
			}
			maxTrain := 0
			for _, c := range all {
				maxTrain = max(maxTrain, c.train-heldOut(c.train, fold, cfg.CV))
			}
			rs, err := t.trainFold(foldPlan{fold: fold, train: train.Subset(tr), maxTrain: maxTrain, test: train.Subset(held)})
			if err != nil {
				return err
			}
			results = append(results, rs...)
		}
	} else {
		valid := ""
		if total.valid > 0 {
			valid = fmt.Sprintf(", %d validation", total.valid)
		}
		logf(cfg.Program+": %s, %d training, %d test%s examples, ids up to %d%s, %d keys on %d servers",
			kind, total.train, total.test, valid, maxID, hash, t.numKeys, t.servers)
		maxTrain := 0
		for _, c := range all {
			maxTrain = max(maxTrain, c.train)
		}
		logf(cfg.Program+": %d workers, batch %d (%d per worker, %d steps per epoch), %s, %s, pipeline %d, %d epochs; data read in %.2fs",
			workers, cfg.Batch, bw, (maxTrain+bw-1)/bw, opt, syncName(cfg), cfg.Pipeline, cfg.Epochs, loadTime.Seconds())
		if len(labels.Missing) > 0 {
			logf(cfg.Program+": note: no training example has class %v", labels.Missing)
		}
		plan := foldPlan{maxTrain: maxTrain, train: train.Subset(trainRows)}
		if test != nil {
			plan.test = test
		} else {
			plan.test = train.Subset(testRows)
		}
		if len(validRows) > 0 || cfg.Valid > 0 {
			plan.valid = train.Subset(validRows)
		}
		train = nil // the parts are copies
		begin = time.Now()
		if results, err = t.trainFold(plan); err != nil {
			return err
		}
	}
	wall := time.Since(begin)
	if rank != 0 {
		return nil
	}
	return t.finish(results, wall)
}

// finish is rank 0's end of a job: the final line, a hint when the model
// may underfit, and the model, predictions and plot files.
func (t *trainer) finish(results []EpochResult, wall time.Duration) error {
	cfg, out := t.cfg, t.out
	examples := 0
	for _, r := range results {
		examples += r.Examples
	}
	rate := float64(examples) / wall.Seconds()
	last := results[len(results)-1]
	if cfg.CV > 0 {
		pooled := newMetrics(t.binary())
		for _, r := range results {
			if r.Epoch == cfg.Epochs-1 {
				pooled.Merge(r.Test)
			}
		}
		fmt.Fprintf(out, "final: %d-fold cv accuracy %.4f (%d/%d), log-loss %.4f%s after %s; %d examples in %.2fs, %.0f examples/s overall\n",
			cfg.CV, pooled.Acc(), int(pooled.Correct), int(pooled.N), pooled.Loss(), aucText(pooled), epochsText(cfg.Epochs), examples, wall.Seconds(), rate)
	} else {
		final := last
		which := "after " + epochsText(last.Epoch+1)
		if cfg.EarlyStop > 0 && last.Valid != nil {
			best := 0
			for i, r := range results {
				if r.Valid.Loss() < results[best].Valid.Loss() {
					best = i
				}
			}
			final = results[best]
			which = fmt.Sprintf("at epoch %d of %d (the best validation loss)", best+1, len(results))
			if best != len(results)-1 {
				if err := t.control(kindSnapshot, snapshotRestore, same(make([]float32, t.servers))); err != nil {
					return fmt.Errorf("restore the best model: %w", err)
				}
			}
		}
		fmt.Fprintf(out, "final: test accuracy %.4f (%d/%d), test loss %.4f%s %s; %d examples in %.2fs, %.0f examples/s overall\n",
			final.TestAcc, final.TestCorrect, final.TestN, final.TestLoss, aucText(final.Test), which, examples, wall.Seconds(), rate)
	}
	if hint := underfitHint(PerEpoch(results, cfg.CV > 0), cfg); hint != "" {
		fmt.Fprintln(out, hint)
	}
	if cfg.ModelPath != "" || cfg.PredOut != "" {
		m, err := t.dumpModel(cfg.Opt == "ftrl")
		if err != nil {
			return fmt.Errorf("fetch the model: %w", err)
		}
		if cfg.ModelPath != "" {
			if err := writeFileAtomic(cfg.ModelPath, m.Write); err != nil {
				return fmt.Errorf("write the model: %w", err)
			}
			fmt.Fprintf(out, "model written to %s (%d features)\n", cfg.ModelPath, len(m.IDs))
		}
		if cfg.PredOut != "" {
			var met *Metrics
			err := writeFileAtomic(cfg.PredOut, func(w io.Writer) error {
				var err error
				met, err = ScoreFile(m, cfg.Test, cfg.TestLimit, w)
				return err
			})
			if err != nil {
				return fmt.Errorf("predictions: %w", err)
			}
			fmt.Fprintf(out, "predictions for %d test examples written to %s\n", int(met.N), cfg.PredOut)
		}
	}
	if cfg.PlotPath != "" {
		title := fmt.Sprintf("%s on %s: %d workers, %s, %s", cfg.Program, baseName(cfg.Train), t.workers, syncName(cfg), optName(cfg))
		test := "test"
		if cfg.CV > 0 {
			test = "held-out folds"
		}
		if err := WritePlot(cfg.PlotPath, title, PerEpoch(results, cfg.CV > 0), test); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		fmt.Fprintf(out, "plot written to %s\n", cfg.PlotPath)
	}
	return nil
}

// epochsText returns "1 epoch" or "n epochs".
func epochsText(n int) string {
	if n == 1 {
		return "1 epoch"
	}
	return fmt.Sprintf("%d epochs", n)
}

// aucText formats m's AUC for the final line (empty for softmax models).
func aucText(m *Metrics) string {
	if m == nil || math.IsNaN(m.AUC()) {
		return ""
	}
	return fmt.Sprintf(", AUC %.4f", m.AUC())
}

// underfitHint returns a hint when the run may have stopped too early: the
// training loss still fell clearly in the last epoch (more than 1%
// relative) and so did the held-out loss (validation, else test), so the
// model was not yet overfitting. A run that stopped early has none.
func underfitHint(perEpoch []EpochResult, cfg *Config) string {
	n := len(perEpoch)
	if n < 2 || n < cfg.Epochs {
		return ""
	}
	prev, last := perEpoch[n-2].Loss, perEpoch[n-1].Loss
	if !(prev > 0) || (prev-last)/prev <= 0.01 {
		return ""
	}
	heldPrev, heldLast := perEpoch[n-2].TestLoss, perEpoch[n-1].TestLoss
	if v := perEpoch[n-1].Valid; v != nil {
		heldPrev, heldLast = perEpoch[n-2].Valid.Loss(), v.Loss()
	}
	if heldLast >= heldPrev {
		return ""
	}
	rate := "-lr"
	if cfg.Opt == "ftrl" {
		rate = "-alpha"
	}
	return fmt.Sprintf("hint: the training loss still fell %.1f%% in the last epoch (%.4f -> %.4f): more -epochs or a larger %s would likely fit better",
		100*(prev-last)/prev, prev, last, rate)
}

// slicesEqual reports whether two float slices hold the same values.
func slicesEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// optName describes the optimiser, with its learning-rate schedule.
func optName(cfg *Config) string {
	opt, err := cfg.optimizer()
	if err != nil {
		return cfg.Opt
	}
	if cfg.LRDecay > 0 {
		return fmt.Sprintf("%v, lr-decay %g", opt, cfg.LRDecay)
	}
	return opt.String()
}

func syncName(cfg *Config) string {
	if cfg.Sync == SSP {
		return fmt.Sprintf("ssp(staleness=%d)", cfg.Staleness)
	}
	return cfg.Sync.String()
}

// baseName shortens a data path for a title: its last two elements (the
// directory often names the data set).
func baseName(path string) string {
	path, _, _ = strings.Cut(path, ",")
	parts := strings.Split(path, "/")
	if len(parts) > 2 {
		parts = parts[len(parts)-2:]
	}
	return strings.Join(parts, "/")
}

// PerEpoch merges results into one row per epoch: with folds, the mean
// training loss and accuracy and the held-out metrics over all folds.
func PerEpoch(results []EpochResult, folds bool) []EpochResult {
	if !folds {
		return results
	}
	var merged []EpochResult
	for _, r := range results {
		for len(merged) <= r.Epoch {
			merged = append(merged, EpochResult{Epoch: len(merged)})
		}
		m := &merged[r.Epoch]
		m.Loss += r.Loss * float64(r.Examples)
		m.TrainAcc += r.TrainAcc * float64(r.Examples)
		m.Examples += r.Examples
		m.Time += r.Time
		if r.Test != nil {
			if m.Test == nil {
				m.Test = newMetrics(r.Test.Pos != nil)
			}
			m.Test.Merge(r.Test)
		}
	}
	for i := range merged {
		m := &merged[i]
		if m.Examples > 0 {
			m.Loss /= float64(m.Examples)
			m.TrainAcc /= float64(m.Examples)
		}
		if m.Test != nil {
			m.setTest(m.Test)
		}
		if m.Time > 0 {
			m.Rate = float64(m.Examples) / m.Time.Seconds()
		}
	}
	return merged
}

// predict scores a model file on a data set, streaming through it, and
// writes the predictions with -pred-out.
func predict(cfg *Config, out io.Writer) error {
	m, err := readModelFile(cfg.ModelPath)
	if err != nil {
		return err
	}
	var met *Metrics
	score := func(w io.Writer) error {
		met, err = ScoreFile(m, cfg.Data, cfg.Limit, w)
		return err
	}
	if cfg.PredOut != "" {
		err = writeFileAtomic(cfg.PredOut, score)
	} else {
		err = score(nil)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "accuracy %.4f (%d/%d), loss %.4f%s\n", met.Acc(), int(met.Correct), int(met.N), met.Loss(), aucText(met))
	return nil
}

// convert writes a data set (e.g. IDX images) as LIBSVM text.
func convert(cfg *Config, out io.Writer) error {
	d, err := LoadData(cfg.Data, ReadOptions{Limit: cfg.Limit, HashBits: cfg.HashBits, Binary: cfg.Binary})
	if err != nil {
		return err
	}
	d.Vocab.Sort(d)
	if err := writeFileAtomic(cfg.Out, func(w io.Writer) error { return WriteLIBSVM(w, d) }); err != nil {
		return err
	}
	if cfg.Out != "-" {
		fmt.Fprintf(out, "wrote %d examples (%d features, %d non-zero values) to %s\n", d.Len(), d.Vocab.Len(), d.NNZ(), cfg.Out)
	}
	return nil
}
