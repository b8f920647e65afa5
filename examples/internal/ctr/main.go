package ctr

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"

	"github.com/gopslite/pslite/internal/prog"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/ps"
)

// Config holds the command line.
type Config struct {
	Mode string
	// Program is the model trained: lr, fm or mvm (the program's name).
	Program string
	// Factors is the factor model's (nil for lr): -factors, the views
	// once the workers know the data's fields.
	Factors *Factors
	InitStd float64 // fm, mvm: spread of the factors' start
	// XflowVDim is -mode=xflow-server's values per key of app 1 (xflow's
	// v_dim).
	XflowVDim int

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

	HashBits  int     // hash feature ids to this many bits (0: no hashing)
	Binary    bool    // read every non-zero feature value as 1
	Valid     float64 // fraction of the training data held out for validation
	EarlyStop int     // stop when the validation loss has not improved for this many epochs
	Pipeline  int     // steps in flight per worker
	EvalEvery int     // evaluate after every EvalEvery-th epoch (and the last)
	InitModel string  // warm start from this model file
	PredOut   string  // write per-example predictions here

	// -mode=synth
	TestOut string
	Synth   SynthConfig
}

// errUsage is returned after the flag package has printed the usage.
var errUsage = errors.New("usage")

// parseFlags reads the command line of lr into a Config.
func parseFlags(args []string, stderr io.Writer) (*Config, error) {
	return parseProgramFlags(kindLR, args, stderr)
}

// maxFactors bounds -factors.
const maxFactors = 1 << 10

// parseProgramFlags reads the command line of program (lr, fm or mvm) into
// a Config.
func parseProgramFlags(program string, args []string, stderr io.Writer) (*Config, error) {
	if program != kindLR && program != kindFM && program != kindMVM {
		return nil, fmt.Errorf("unknown program %q (want lr, fm or mvm)", program)
	}
	c := &Config{Program: program}
	fs := flag.NewFlagSet(program, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage:
  scripts/local.sh S W %[1]s -train=F [-test=F | -holdout=0.2 | -cv=5] [flags]   train
  %[1]s -mode=predict -model=F -data=F [-pred-out=F]                             score a model
  %[1]s -mode=convert -data=IMAGES-IDX -out=F.libsvm                             IDX to LIBSVM
  %[1]s -mode=synth -out=TRAIN -test-out=TEST [-rows=N ...]                      sparse synthetic data
Data files are LIBSVM or libffm text (gzipped or not; "-" is standard input
for predict, convert and one-worker jobs), or IDX images (gzipped or not)
with their labels found by name (train-images-idx3-ubyte.gz ->
train-labels-idx1-ubyte.gz) or given as IMAGES,LABELS. lr trains logistic
regression, fm a factorization machine, mvm a multi-view machine (views:
the fields of libffm data).
flags:
`, program)
		fs.PrintDefaults()
	}
	factors := fs.Int("factors", 8, "fm, mvm: factor size K (keys per feature on app 1)")
	fs.Float64Var(&c.InitStd, "init-std", 0.1, "fm, mvm: standard deviation of the factors' start (a seeded normal draw per key)")
	fs.StringVar(&c.Mode, "mode", "train", "train (in a ps-lite job), predict, convert, synth, or xflow-server (the scheduler and servers of a job of xflow's workers)")
	fs.IntVar(&c.XflowVDim, "xflow-v-dim", xflowVDim, "xflow-server: values per key of app 1 (xflow's v_dim)")
	fs.StringVar(&c.Train, "train", "", "training data")
	fs.StringVar(&c.Test, "test", "", "test data (default: -holdout of the training data)")
	fs.IntVar(&c.TrainLimit, "train-limit", 0, "use only the first N training examples (0: all)")
	fs.IntVar(&c.TestLimit, "test-limit", 0, "use only the first N test examples (0: all)")
	fs.Float64Var(&c.Holdout, "holdout", 0.2, "without -test: fraction of the training data held out for testing")
	fs.IntVar(&c.CV, "cv", 0, "k-fold cross-validation on the training data instead of a test set (k >= 2)")
	fs.StringVar(&c.Loss, "loss", "auto", "auto (binary logistic: the data must have two labels), logistic, or softmax (multinomial over classes 0..K-1)")
	bias := fs.Float64("bias", 1, "value of the bias feature 0 (0: no bias)")
	fs.IntVar(&c.Epochs, "epochs", 10, "passes over the training data")
	fs.IntVar(&c.Batch, "batch", 100, "examples per step over all workers (each worker takes ceil(batch/workers))")
	fs.StringVar(&c.Opt, "opt", "sgd", "server optimiser: sgd, adagrad or ftrl")
	fs.Float64Var(&c.LR, "lr", 0.1, "sgd learning rate")
	fs.Float64Var(&c.LRDecay, "lr-decay", 0, "sgd: the learning rate after e epochs is lr/(1+lr-decay·e)")
	fs.Float64Var(&c.L2, "l2", 0, "L2 regularisation (sgd and ftrl)")
	fs.Float64Var(&c.L1, "l1", 0, "L1 regularisation (ftrl)")
	fs.Float64Var(&c.Alpha, "alpha", 0.1, "ftrl alpha")
	fs.Float64Var(&c.Beta, "beta", 1, "ftrl beta")
	fs.StringVar(&c.SyncName, "sync", "asp", "consistency model: asp, bsp or ssp")
	fs.IntVar(&c.Staleness, "staleness", 2, "ssp: steps a worker may run ahead of the slowest")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the shuffles (synth: of the data)")
	fs.StringVar(&c.ModelPath, "model", "", "train: write the model here; predict: read it")
	fs.StringVar(&c.PlotPath, "plot", "", "train: draw loss and accuracy per epoch into this PNG")
	fs.StringVar(&c.Data, "data", "", "predict, convert: input data")
	fs.StringVar(&c.Out, "out", "", "convert: output LIBSVM file")
	fs.IntVar(&c.Limit, "limit", 0, "predict, convert: use only the first N examples (0: all)")
	fs.BoolVar(&c.Binary, "binary", false, "read every non-zero feature value as 1 (as xflow does); the model file keeps it for predict")
	fs.IntVar(&c.HashBits, "hash-bits", 0, "hash feature ids (numbers or any string) to 1..2^N-1 (0: ids are integers, used as they are)")
	fs.Float64Var(&c.Valid, "valid", 0, "fraction of the training data held out for validation (scored every epoch)")
	fs.IntVar(&c.EarlyStop, "early-stop", 0, "stop when the validation loss has not improved for N epochs and keep the best epoch's model (needs -valid)")
	fs.IntVar(&c.EvalEvery, "eval-every", 1, "evaluate (and print, checkpoint, plot) after every N-th epoch and the last; the epochs between run without a pause")
	fs.IntVar(&c.Pipeline, "pipeline", 2, "training steps a worker keeps in flight (pulls issued ahead of the gradient)")
	fs.StringVar(&c.InitModel, "init-model", "", "train: start from this model file (with FTRL's state when it has it)")
	fs.StringVar(&c.PredOut, "pred-out", "", "train (with -test), predict: write each example's predicted label and class probabilities here")
	c.Synth = DefaultSynth
	fs.StringVar(&c.TestOut, "test-out", "", "synth: write the test examples here")
	fs.IntVar(&c.Synth.Rows, "rows", DefaultSynth.Rows, "synth: training examples")
	fs.IntVar(&c.Synth.TestRows, "test-rows", DefaultSynth.TestRows, "synth: test examples")
	fs.IntVar(&c.Synth.IDs, "ids", DefaultSynth.IDs, "synth: feature ids 1..N")
	fs.IntVar(&c.Synth.NNZ, "nnz", DefaultSynth.NNZ, "synth: ids drawn per example")
	fs.Float64Var(&c.Synth.Informative, "informative", DefaultSynth.Informative, "synth: fraction of the ids with a true weight")
	fs.Float64Var(&c.Synth.Zipf, "zipf", DefaultSynth.Zipf, "synth: popularity exponent s > 1")
	fs.IntVar(&c.Synth.Fields, "fields", 0, "synth: write CTR-like libffm data with one value in each of N fields and labels from a hidden factorization machine (0: LIBSVM from a linear model)")
	fs.IntVar(&c.Synth.TrueFactors, "true-factors", 4, "synth -fields: the hidden factorization machine's factor size")
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
	if program != kindLR {
		if *factors < 1 || *factors > maxFactors {
			return nil, fmt.Errorf("-factors must be in 1..%d", maxFactors)
		}
		if !nonNegative(c.InitStd) {
			return nil, fmt.Errorf("-init-std must be a number >= 0")
		}
		c.Factors = &Factors{Kind: program, K: *factors}
	}
	var err error
	if c.Sync, err = ParseSyncMode(c.SyncName); err != nil {
		return nil, err
	}
	if c.HashBits < 0 || c.HashBits > maxHashBits {
		return nil, fmt.Errorf("-hash-bits must be in 0..%d", maxHashBits)
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
		case !(c.Valid >= 0 && c.Valid < 1) || (c.Test == "" && c.CV == 0 && c.Holdout+c.Valid >= 1):
			return nil, fmt.Errorf("-valid must be in [0, 1) and leave training data next to -holdout")
		case c.EvalEvery < 1:
			return nil, fmt.Errorf("-eval-every must be at least 1")
		case c.EvalEvery > 1 && c.EarlyStop > 0:
			return nil, fmt.Errorf("-early-stop counts epochs, each evaluated: it needs -eval-every=1")
		case c.EarlyStop < 0:
			return nil, fmt.Errorf("-early-stop must not be negative")
		case c.EarlyStop > 0 && c.Valid == 0:
			return nil, fmt.Errorf("-early-stop needs a validation split: give -valid (e.g. -valid=0.1)")
		case c.CV > 0 && (c.Valid > 0 || c.InitModel != "" || c.PredOut != "" || c.ModelPath != ""):
			return nil, fmt.Errorf("-cv trains one model per fold: -valid, -early-stop, -init-model, -model and -pred-out are for a single model")
		case c.PredOut != "" && c.Test == "":
			return nil, fmt.Errorf("-pred-out needs -test (the predictions are for its examples, in order)")
		case c.Pipeline < 1 || c.Pipeline > 64:
			return nil, fmt.Errorf("-pipeline must be in 1..64")
		case c.TrainLimit < 0 || c.TestLimit < 0:
			return nil, fmt.Errorf("-train-limit and -test-limit must not be negative")
		case c.Loss != "auto" && c.Loss != "logistic" && c.Loss != "softmax":
			return nil, fmt.Errorf("unknown -loss %q (want auto, logistic or softmax)", c.Loss)
		case c.Factors != nil && c.Loss == "softmax":
			return nil, fmt.Errorf("%s is a binary model: -loss=softmax is for lr", program)
		case c.Factors != nil && c.InitModel != "":
			return nil, fmt.Errorf("-init-model is for lr (a warm start of fm and mvm is not built)")
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
	case "xflow-server":
		// xflow's FTRL settings, unless given.
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, p := range map[string]*float64{"alpha": &c.Alpha, "beta": &c.Beta, "l1": &c.L1, "l2": &c.L2} {
			if !set[name] {
				*p = map[string]float64{"alpha": xflowAlpha, "beta": xflowBeta, "l1": xflowLambda1, "l2": xflowLambda2}[name]
			}
		}
		if _, err := NewOptimizer("ftrl", c.LR, c.Alpha, c.Beta, c.L1, c.L2); err != nil {
			return nil, err
		}
		if c.XflowVDim < 1 || c.XflowVDim > maxFactors {
			return nil, fmt.Errorf("-xflow-v-dim must be in 1..%d", maxFactors)
		}
	case "synth":
		if c.Out == "" {
			return nil, fmt.Errorf("synth needs -out (and -test-out for a test set)")
		}
		if err := c.Synth.Check(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown -mode %q (want train, predict, convert, synth or xflow-server)", c.Mode)
	}
	return c, nil
}

func (c *Config) optimizer() (Optimizer, error) {
	return NewOptimizer(c.Opt, c.LR, c.Alpha, c.Beta, c.L1, c.L2)
}

// Main runs the command line args of program lr, fm or mvm (the model it
// trains) and returns its exit status.
func Main(program string, args []string) int {
	stopProfile := prog.Profile() // PS_CPUPROFILE=prefix writes prefix.<role>.<pid>
	cfg, err := parseProgramFlags(program, args, os.Stderr)
	if err == nil {
		err = run(cfg, os.Stdout)
	}
	stopProfile()
	if err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(os.Stderr, "%s: %v\n", program, err)
		}
		return 1
	}
	return 0
}

// run carries out cfg.Mode.
func run(cfg *Config, out io.Writer) error {
	switch cfg.Mode {
	case "predict":
		return predict(cfg, out)
	case "convert":
		return convert(cfg, out)
	case "synth":
		return synth(cfg, out)
	case "xflow-server":
		return serveXflow(cfg, out)
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
	po, err := ps.Node()
	if err != nil {
		return err
	}
	var stores []*Store
	switch {
	case po.IsServer():
		if stores, err = serve(po, cfg); err != nil {
			return err
		}
	case po.IsWorker():
		if err := work(po, cfg, out); err != nil {
			return fmt.Errorf("worker %d: %w", po.MyRank(), err)
		}
	}
	if err := ps.Finalize(0, true); err != nil {
		return err
	}
	for app, store := range stores {
		if err := serverReport(store, cfg, po.MyRank(), app, out); err != nil {
			return err
		}
	}
	return nil
}

// serverReport prints a server's last line for an app and returns the
// first bad request or failed response it saw.
func serverReport(store *Store, cfg *Config, rank, app int, out io.Writer) error {
	st, errs := store.Stats()
	what := ""
	if app == factorApp {
		what = " factors"
	}
	fmt.Fprintf(out, "[server %d%s] %s\n", rank, what, st.Summary(cfg.Sync))
	if len(errs) > 0 {
		return fmt.Errorf("server %d%s: %d bad requests or failed responses, first: %w", rank, what, len(errs), errs[0])
	}
	return nil
}

// factorApp is the KV app of a factor model's factors (the weights are on
// app 0), as xflow keeps them.
const factorApp = 1

// serve installs the server's stores, one per KV app (the weights, and a
// factor model's factors): in a job with PS_REPLICAS they are kept on
// several servers, with PS_CHECKPOINT_DIR written to disk (kv.Store).
func serve(po *postoffice.Postoffice, cfg *Config) ([]*Store, error) {
	opt, err := cfg.optimizer()
	if err != nil {
		return nil, err
	}
	apps := 1
	if cfg.Factors != nil {
		apps = 2
	}
	if os.Getenv("GOGC") == "" {
		// A server's heap is mostly its tables, which hold no pointers: a
		// collection costs little, and collecting at half the live heap
		// of garbage instead of all of it keeps the pull answers' garbage
		// from doubling the process (fm, 200,000 CTR rows: 180 MB RSS at
		// the default, 140 at 50, the same time).
		debug.SetGCPercent(50)
	}
	var stores []*Store
	for app := 0; app < apps; app++ {
		store := NewStore(opt, cfg.Sync, cfg.Staleness, po.NumWorkers())
		if app == factorApp {
			store.SetInit(cfg.InitStd, cfg.Seed)
			store.SetDim(cfg.Factors.K)
		}
		srv, err := kv.NewKVServer[float32](po, app)
		if err != nil {
			return nil, err
		}
		if err := srv.SetStore(store); err != nil {
			return nil, err
		}
		po.RegisterExitCallback(srv.Close)
		stores = append(stores, store)
	}
	return stores, nil
}
