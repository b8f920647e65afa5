package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/gopslite/pslite/ps"
)

// Config holds the command line.
type Config struct {
	Mode string

	Train, Test           string
	TrainLimit, TestLimit int
	Holdout               float64
	CV                    int
	Loss                  string
	Bias                  float32

	Epochs, Batch int
	Opt           string
	LR, L2        float64
	LRDecay       float64
	Alpha, Beta   float64
	L1            float64
	SyncName      string
	Sync          SyncMode
	Staleness     int
	Seed          uint64

	ModelPath, PlotPath string
	Data, Out           string
	Limit               int
}

// errUsage is returned after the flag package has printed the usage.
var errUsage = errors.New("usage")

// parseFlags reads args into a Config.
func parseFlags(args []string, stderr io.Writer) (*Config, error) {
	c := &Config{}
	fs := flag.NewFlagSet("lr", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage:
  scripts/local.sh S W lr -train=F [-test=F | -holdout=0.2 | -cv=5] [flags]   train
  lr -mode=predict -model=F -data=F                                           score a model
  lr -mode=convert -data=IMAGES-IDX -out=F.libsvm                             IDX to LIBSVM
Data files are LIBSVM text, or IDX images (gzipped or not) with their labels
found by name (train-images-idx3-ubyte.gz -> train-labels-idx1-ubyte.gz) or
given as IMAGES,LABELS.
flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.Mode, "mode", "train", "train (in a ps-lite job), predict or convert")
	fs.StringVar(&c.Train, "train", "", "training data")
	fs.StringVar(&c.Test, "test", "", "test data (default: -holdout of the training data)")
	fs.IntVar(&c.TrainLimit, "train-limit", 0, "use only the first N training examples (0: all)")
	fs.IntVar(&c.TestLimit, "test-limit", 0, "use only the first N test examples (0: all)")
	fs.Float64Var(&c.Holdout, "holdout", 0.2, "without -test: fraction of the training data held out for testing")
	fs.IntVar(&c.CV, "cv", 0, "k-fold cross-validation on the training data instead of a test set (k >= 2)")
	fs.StringVar(&c.Loss, "loss", "auto", "auto, logistic (binary) or softmax")
	bias := fs.Float64("bias", 1, "value of the bias feature 0 (0: no bias)")
	fs.IntVar(&c.Epochs, "epochs", 10, "passes over the training data")
	fs.IntVar(&c.Batch, "batch", 100, "examples per step over all workers (each worker takes ceil(batch/workers))")
	fs.StringVar(&c.Opt, "opt", "sgd", "server optimiser: sgd or ftrl")
	fs.Float64Var(&c.LR, "lr", 0.1, "sgd learning rate")
	fs.Float64Var(&c.LRDecay, "lr-decay", 0, "sgd: the learning rate after e epochs is lr/(1+lr-decay·e)")
	fs.Float64Var(&c.L2, "l2", 0, "L2 regularisation (sgd and ftrl)")
	fs.Float64Var(&c.L1, "l1", 0, "L1 regularisation (ftrl)")
	fs.Float64Var(&c.Alpha, "alpha", 0.1, "ftrl alpha")
	fs.Float64Var(&c.Beta, "beta", 1, "ftrl beta")
	fs.StringVar(&c.SyncName, "sync", "asp", "consistency model: asp, bsp or ssp")
	fs.IntVar(&c.Staleness, "staleness", 2, "ssp: steps a worker may run ahead of the slowest")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the shuffles")
	fs.StringVar(&c.ModelPath, "model", "", "train: write the model here; predict: read it")
	fs.StringVar(&c.PlotPath, "plot", "", "train: draw loss and accuracy per epoch into this PNG")
	fs.StringVar(&c.Data, "data", "", "predict, convert: input data")
	fs.StringVar(&c.Out, "out", "", "convert: output LIBSVM file")
	fs.IntVar(&c.Limit, "limit", 0, "predict, convert: use only the first N examples (0: all)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errUsage
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c.Bias = float32(*bias)
	var err error
	if c.Sync, err = ParseSyncMode(c.SyncName); err != nil {
		return nil, err
	}
	switch c.Mode {
	case "train":
		switch {
		case c.Train == "":
			return nil, fmt.Errorf("-train is required")
		case c.Epochs < 1:
			return nil, fmt.Errorf("-epochs must be at least 1")
		case c.Batch < 1:
			return nil, fmt.Errorf("-batch must be at least 1")
		case c.CV == 1 || c.CV < 0:
			return nil, fmt.Errorf("-cv must be 0 or at least 2")
		case !(c.Holdout >= 0 && c.Holdout < 1):
			return nil, fmt.Errorf("-holdout must be in [0, 1)")
		case c.Staleness < 0:
			return nil, fmt.Errorf("-staleness must not be negative")
		case c.CV > 0 && c.Test != "":
			return nil, fmt.Errorf("-cv and -test exclude each other")
		case !nonNegative(c.LRDecay):
			return nil, fmt.Errorf("-lr-decay must be a number >= 0")
		case math.IsNaN(*bias) || math.IsInf(*bias, 0):
			return nil, fmt.Errorf("-bias must be a finite number")
		case c.LRDecay > 0 && c.Opt != "sgd":
			return nil, fmt.Errorf("-lr-decay is for -opt=sgd (ftrl's rates decay by themselves)")
		}
		if _, err := c.optimizer(); err != nil {
			return nil, err
		}
	case "predict":
		if c.ModelPath == "" || c.Data == "" {
			return nil, fmt.Errorf("predict needs -model and -data")
		}
	case "convert":
		if c.Data == "" || c.Out == "" {
			return nil, fmt.Errorf("convert needs -data and -out")
		}
	default:
		return nil, fmt.Errorf("unknown -mode %q (want train, predict or convert)", c.Mode)
	}
	return c, nil
}

func (c *Config) optimizer() (Optimizer, error) {
	return NewOptimizer(c.Opt, c.LR, c.Alpha, c.Beta, c.L1, c.L2)
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err == nil {
		err = run(cfg, os.Stdout)
	}
	if err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(os.Stderr, "lr: %v\n", err)
		}
		os.Exit(1)
	}
}

// run carries out cfg.Mode.
func run(cfg *Config, out io.Writer) error {
	switch cfg.Mode {
	case "predict":
		return predict(cfg, out)
	case "convert":
		return convert(cfg, out)
	}
	return runJob(cfg, out)
}

// runJob is one node of a training job. A worker or server that fails
// returns at once, without the final barrier, so that the launcher stops
// the job.
func runJob(cfg *Config, out io.Writer) error {
	if err := ps.Start(0); err != nil {
		return err
	}
	var store *Store
	switch {
	case ps.IsServer():
		var err error
		if store, err = serve(cfg); err != nil {
			return err
		}
	case ps.IsWorker():
		if err := work(cfg, out); err != nil {
			return fmt.Errorf("worker %d: %w", ps.MyRank(), err)
		}
	}
	if err := ps.Finalize(0, true); err != nil {
		return err
	}
	if store != nil {
		st, errs := store.Stats()
		fmt.Fprintf(out, "[server %d] %s\n", ps.MyRank(), st.Summary(cfg.Sync))
		if len(errs) > 0 {
			return fmt.Errorf("server %d: %d bad requests or failed responses, first: %w", ps.MyRank(), len(errs), errs[0])
		}
	}
	return nil
}

// serve installs the server's request handle.
func serve(cfg *Config) (*Store, error) {
	opt, err := cfg.optimizer()
	if err != nil {
		return nil, err
	}
	store := NewStore(opt, cfg.Sync, cfg.Staleness, ps.NumWorkers())
	srv, err := ps.NewKVServer[float32](0)
	if err != nil {
		return nil, err
	}
	if err := srv.SetRequestHandle(store.Handle); err != nil {
		return nil, err
	}
	ps.RegisterExitCallback(srv.Close)
	return store, nil
}

// loadTrainTest reads the training data and the test data (nil without
// -test), both with class indices and, unless -bias=0, the bias feature.
// It returns the labels and the number of feature ids (0 included).
func loadTrainTest(cfg *Config) (train, test *Dataset, labels *Labels, features int, err error) {
	if train, err = loadFile(cfg.Train, cfg.TrainLimit); err != nil {
		return
	}
	if cfg.Test != "" {
		if test, err = loadFile(cfg.Test, cfg.TestLimit); err != nil {
			return
		}
	}
	if labels, err = InferLabels(cfg.Loss, train, test); err != nil {
		err = fmt.Errorf("labels: %w", err)
		return
	}
	features = int(train.MaxFeature) + 1
	for _, d := range []*Dataset{train, test} {
		if d == nil {
			continue
		}
		features = max(features, int(d.MaxFeature)+1)
		if err = labels.Assign(d); err != nil {
			return
		}
		if cfg.Bias != 0 {
			d.AddBias(cfg.Bias)
		}
	}
	return
}

// work is a worker's part of the job: load and shard the data, train, and
// on rank 0 report, evaluate and write the model and the plot.
func work(cfg *Config, out io.Writer) error {
	rank, workers := ps.MyRank(), ps.NumWorkers()
	logf := func(format string, args ...any) {
		if rank == 0 {
			fmt.Fprintf(out, format+"\n", args...)
		}
	}
	train, test, labels, features, err := loadTrainTest(cfg)
	if err != nil {
		return err
	}
	if keys := int64(features) * int64(labels.Outputs()); keys > maxModelKeys {
		return fmt.Errorf("%d features × %d outputs make %d model keys, more than %d", features, labels.Outputs(), keys, maxModelKeys)
	}
	if folds := uint64(max(cfg.CV, 1)); uint64(features)*uint64(labels.Outputs())*folds >= statsBase {
		return fmt.Errorf("%d features × %d outputs × %d folds do not fit below key %d", features, labels.Outputs(), folds, statsBase)
	}
	kvw, err := ps.NewKVWorker[float32](0, 0)
	if err != nil {
		return err
	}
	t := &trainer{
		cfg: cfg, kvw: kvw, rank: rank, workers: workers, servers: ps.NumServers(),
		labels: labels, outputs: labels.Outputs(), features: features,
		numKeys: uint64(features * labels.Outputs()), out: out,
	}
	if err := kvw.SetSlicer(keyRouter{numKeys: t.numKeys}.Slicer); err != nil {
		return err
	}
	opt := optName(cfg)
	bw := t.perWorker()
	kind := "binary logistic regression"
	if labels.Softmax {
		kind = fmt.Sprintf("softmax regression over %d classes", labels.K())
	}
	perm := Permutation(train.Len(), cfg.Seed)
	begin := time.Now()
	var results []EpochResult
	var final *Model
	if cfg.CV > 0 {
		k := cfg.CV
		if train.Len() < k {
			return fmt.Errorf("%d examples for %d folds", train.Len(), k)
		}
		logf("lr: %s, %d examples, %d-fold cross-validation, %d features, %d keys per fold on %d servers",
			kind, train.Len(), k, features, t.numKeys, t.servers)
		logf("lr: %d workers, batch %d (%d per worker), %s, %s, %d epochs per fold",
			workers, cfg.Batch, bw, opt, syncName(cfg), cfg.Epochs)
		for fold := 0; fold < k; fold++ {
			var trainRows, testRows []int
			for i, r := range perm {
				if i%k == fold {
					testRows = append(testRows, r)
				} else {
					trainRows = append(trainRows, r)
				}
			}
			if len(trainRows) < workers { // every worker sees this, none waits for an empty one
				return fmt.Errorf("fold %d: %d training examples for %d workers", fold+1, len(trainRows), workers)
			}
			maxShard := (len(trainRows) + workers - 1) / workers
			shard := train.Subset(Shard(trainRows, rank, workers))
			var held *Dataset
			if rank == 0 {
				held = train.Subset(testRows)
			}
			rs, err := t.trainFold(fold, shard, maxShard, held)
			if err != nil {
				return err
			}
			results = append(results, rs...)
		}
	} else {
		if test == nil {
			if cfg.Holdout <= 0 {
				return fmt.Errorf("no test data: give -test, -holdout or -cv")
			}
			nt := int(math.Round(cfg.Holdout * float64(train.Len())))
			if nt < 1 || nt >= train.Len() {
				return fmt.Errorf("-holdout %g of %d examples leaves no test or no training examples", cfg.Holdout, train.Len())
			}
			test = train.Subset(perm[:nt])
			perm = perm[nt:]
		}
		logf("lr: %s, %d training and %d test examples, %d features, %d keys on %d servers",
			kind, len(perm), test.Len(), features, t.numKeys, t.servers)
		if len(perm) < workers {
			return fmt.Errorf("%d training examples for %d workers", len(perm), workers)
		}
		maxShard := (len(perm) + workers - 1) / workers
		logf("lr: %d workers, batch %d (%d per worker, %d steps per epoch), %s, %s, %d epochs",
			workers, cfg.Batch, bw, t.steps(maxShard), opt, syncName(cfg), cfg.Epochs)
		shard := train.Subset(Shard(perm, rank, workers))
		train = nil // only the shard is needed from here on
		if results, err = t.trainFold(0, shard, maxShard, test); err != nil {
			return err
		}
	}
	// Every worker's last push is in once all have passed the barrier.
	if err := ps.Barrier(0, ps.WorkerGroup); err != nil {
		return err
	}
	wall := time.Since(begin)
	if rank != 0 {
		return nil
	}
	examples := 0
	for _, r := range results {
		examples += r.Examples
	}
	rate := float64(examples) / wall.Seconds()
	if cfg.CV > 0 {
		correct, n := 0, 0
		for _, r := range results {
			if r.Epoch == cfg.Epochs-1 {
				correct += r.TestCorrect
				n += r.TestN
			}
		}
		logf("final: %d-fold cv accuracy %.4f (%d/%d) after %d epochs; %d examples in %.2fs, %.0f examples/s overall",
			cfg.CV, float64(correct)/float64(n), correct, n, cfg.Epochs, examples, wall.Seconds(), rate)
	} else {
		if final, err = t.pullModel(0, kindFinal, 0); err != nil {
			return fmt.Errorf("pull the final model: %w", err)
		}
		loss, acc := final.Evaluate(test)
		logf("final: test accuracy %.4f (%d/%d), test loss %.4f after %d epochs; %d examples in %.2fs, %.0f examples/s overall",
			acc, int(math.Round(acc*float64(test.Len()))), test.Len(), loss, cfg.Epochs, examples, wall.Seconds(), rate)
		if cfg.ModelPath != "" {
			if err := writeFileAtomic(cfg.ModelPath, final.Write); err != nil {
				return fmt.Errorf("write the model: %w", err)
			}
			logf("model written to %s", cfg.ModelPath)
		}
	}
	if cfg.PlotPath != "" {
		title := fmt.Sprintf("%s: %d workers, %s, %s", baseName(cfg.Train), workers, syncName(cfg), opt)
		test := "test"
		if cfg.CV > 0 {
			test = "held-out folds"
		}
		if err := WritePlot(cfg.PlotPath, title, PerEpoch(results, cfg.CV > 0), test); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		logf("plot written to %s", cfg.PlotPath)
	}
	return nil
}

// printEpoch prints rank 0's progress line for an epoch.
func (t *trainer) printEpoch(r EpochResult) {
	fold := ""
	if t.cfg.CV > 0 {
		fold = fmt.Sprintf("fold %d/%d ", r.Fold+1, t.cfg.CV)
	}
	test := "test-acc"
	if t.cfg.CV > 0 {
		test = "heldout-acc"
	}
	fmt.Fprintf(t.out, "%sepoch %*d/%d  loss %.4f  train-acc %.4f  %s %.4f  %6.2fs  %8.0f ex/s\n",
		fold, len(fmt.Sprint(t.cfg.Epochs)), r.Epoch+1, t.cfg.Epochs, r.Loss, r.TrainAcc, test, r.TestAcc,
		r.Time.Seconds(), r.Rate)
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
// training loss and accuracy and the held-out accuracy over all folds.
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
		m.TestLoss += r.TestLoss * float64(r.TestN)
		m.Examples += r.Examples
		m.TestCorrect += r.TestCorrect
		m.TestN += r.TestN
		m.Time += r.Time
	}
	for i := range merged {
		m := &merged[i]
		if m.Examples > 0 {
			m.Loss /= float64(m.Examples)
			m.TrainAcc /= float64(m.Examples)
		}
		if m.TestN > 0 {
			m.TestLoss /= float64(m.TestN)
			m.TestAcc = float64(m.TestCorrect) / float64(m.TestN)
		}
		if m.Time > 0 {
			m.Rate = float64(m.Examples) / m.Time.Seconds()
		}
	}
	return merged
}

// predict scores a model file on a data set.
func predict(cfg *Config, out io.Writer) error {
	f, err := os.Open(cfg.ModelPath)
	if err != nil {
		return err
	}
	m, err := ReadModel(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.ModelPath, err)
	}
	d, err := loadFile(cfg.Data, cfg.Limit)
	if err != nil {
		return err
	}
	if err := m.Labels.Assign(d); err != nil {
		return fmt.Errorf("%s: %w", cfg.Data, err)
	}
	if m.Bias != 0 {
		d.AddBias(m.Bias)
	}
	loss, acc := m.Evaluate(d)
	fmt.Fprintf(out, "accuracy %.4f (%d/%d), loss %.4f\n", acc, int(math.Round(acc*float64(d.Len()))), d.Len(), loss)
	return nil
}

// convert writes a data set (e.g. IDX images) as LIBSVM text.
func convert(cfg *Config, out io.Writer) error {
	d, err := loadFile(cfg.Data, cfg.Limit)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(cfg.Out, func(w io.Writer) error { return WriteLIBSVM(w, d) }); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %d examples (%d features, %d non-zero values) to %s\n", d.Len(), d.MaxFeature, d.NNZ(), cfg.Out)
	return nil
}
