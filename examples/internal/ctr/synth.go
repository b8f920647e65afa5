package ctr

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// SynthConfig describes a synthetic sparse binary classification problem of
// the kind parameter servers are built for: many feature ids, few of them in
// any example, their popularity skewed.
type SynthConfig struct {
	Rows, TestRows int     // training and test examples
	IDs            int     // feature ids are 1..IDs
	NNZ            int     // ids drawn per example (duplicates are dropped, so about NNZ distinct)
	Informative    float64 // fraction of the ids that carry a true weight
	Zipf           float64 // popularity exponent s > 1: the id of popularity rank r is drawn ∝ 1/(r+ZipfV)^s
	ZipfV          float64 // popularity offset v >= 1
	Scale          float64 // standard deviation of the true weights
	Seed           uint64
	// Fields, when positive, makes CTR-like libffm data instead: see
	// synthesizeFields. TrueFactors is the hidden FM's factor size.
	Fields      int
	TrueFactors int
}

// DefaultSynth is the data set of examples/lr/experiments.sh's "sparse"
// row: 150,000 training and 50,000 test examples over 1,000,000 ids, about
// 50 binary non-zeros per example, 5% of the ids informative.
var DefaultSynth = SynthConfig{
	Rows: 150000, TestRows: 50000, IDs: 1000000, NNZ: 50, Informative: 0.05,
	Zipf: 1.3, ZipfV: 20, Scale: 1, Seed: 1,
}

// Check reports a setting out of range.
func (c SynthConfig) Check() error {
	switch {
	case c.Rows < 1 || c.TestRows < 0:
		return fmt.Errorf("synth: need at least 1 training example and no negative test count")
	case c.IDs < 1 || c.IDs > 1<<31-1:
		return fmt.Errorf("synth: -ids must be in 1..%d", 1<<31-1)
	case c.NNZ < 1 || c.NNZ > c.IDs:
		return fmt.Errorf("synth: -nnz must be in 1..ids")
	case !(c.Informative > 0 && c.Informative <= 1):
		return fmt.Errorf("synth: -informative must be in (0, 1]")
	case !(c.Zipf > 1) || math.IsInf(c.Zipf, 0) || !(c.ZipfV >= 1) || math.IsInf(c.ZipfV, 0):
		return fmt.Errorf("synth: the popularity needs s > 1 and v >= 1")
	case !positive(c.Scale):
		return fmt.Errorf("synth: the weight scale must be positive")
	case c.Fields < 0 || c.Fields > maxFields || (c.Fields > 0 && c.IDs < c.Fields):
		return fmt.Errorf("synth: -fields must be in 0..%d and at most -ids", maxFields)
	case c.Fields > 0 && (c.TrueFactors < 1 || c.TrueFactors > maxFactors):
		return fmt.Errorf("synth: -true-factors must be in 1..%d", maxFactors)
	}
	return nil
}

// SynthStats is what Synthesize reports about the data it wrote.
type SynthStats struct {
	NNZ          int     // non-zeros written, training and test
	BayesTestAcc float64 // accuracy of the true model's prediction on the test examples
	BayesTestLL  float64 // its mean log-loss there
	Positive     float64 // fraction of positive examples
}

// Synthesize writes c.Rows training examples to train and c.TestRows test
// examples to test (nil for none) as LIBSVM text with labels -1/+1 and
// binary features. The true model gives each of a random c.Informative of
// the ids a weight drawn from N(0, c.Scale²) (the rest weigh 0); an example
// draws c.NNZ ids by popularity (a Zipf law over a random ranking of the
// ids), keeps the distinct ones, and is positive with probability σ(Σ w).
// The same c gives the same bytes.
func Synthesize(c SynthConfig, train, test io.Writer) (SynthStats, error) {
	var st SynthStats
	if err := c.Check(); err != nil {
		return st, err
	}
	if c.Fields > 0 {
		return synthesizeFields(c, train, test)
	}
	r := rand.New(rand.NewPCG(c.Seed, 0x5eed5eed))
	// rank -> id: the popular ids are spread over the id range (and so over
	// the servers' key ranges).
	byRank := make([]int32, c.IDs)
	for i := range byRank {
		byRank[i] = int32(i + 1)
	}
	r.Shuffle(len(byRank), func(i, j int) { byRank[i], byRank[j] = byRank[j], byRank[i] })
	weight := make(map[int32]float64, int(float64(c.IDs)*c.Informative)+1)
	for id := int32(1); id <= int32(c.IDs); id++ {
		if r.Float64() < c.Informative {
			weight[id] = r.NormFloat64() * c.Scale
		}
	}
	zipf := rand.NewZipf(r, c.Zipf, c.ZipfV, uint64(c.IDs-1))
	ids := make([]int32, 0, c.NNZ)
	return writeSets(c, train, test, func(buf []byte) ([]byte, float64, bool, int) {
		ids = ids[:0]
		for j := 0; j < c.NNZ; j++ {
			ids = append(ids, byRank[zipf.Uint64()])
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		m := 0.0
		for _, id := range ids {
			m += weight[id]
		}
		y := 1
		if r.Float64() >= sigmoid(m) {
			y = -1
		}
		buf = strconv.AppendInt(buf, int64(y), 10)
		for _, id := range ids {
			buf = append(buf, ' ')
			buf = strconv.AppendInt(buf, int64(id), 10)
			buf = append(buf, ":1"...)
		}
		return buf, m, y == 1, len(ids)
	})
}

// writeSets writes c.Rows examples drawn by draw to train, then c.TestRows
// to test (nil for none), a line each, and reports what they hold. draw
// appends an example's line (without its newline) to buf and returns it
// with the true model's margin, the example's class and its non-zeros.
func writeSets(c SynthConfig, train, test io.Writer, draw func(buf []byte) (line []byte, m float64, positive bool, nnz int)) (SynthStats, error) {
	var st SynthStats
	var buf []byte
	var pos, correct int
	var llSum float64
	write := func(w *bufio.Writer, n int, scored bool) error {
		for i := 0; i < n; i++ {
			var m float64
			var y bool
			var nnz int
			buf, m, y, nnz = draw(buf[:0])
			if y {
				pos++
			}
			if scored {
				l, right := logLoss(m, y)
				if right {
					correct++
				}
				llSum += l
			}
			st.NNZ += nnz
			buf = append(buf, '\n')
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		return w.Flush()
	}
	if err := write(bufio.NewWriterSize(train, 1<<20), c.Rows, false); err != nil {
		return st, err
	}
	written := c.Rows
	if test != nil && c.TestRows > 0 {
		if err := write(bufio.NewWriterSize(test, 1<<20), c.TestRows, true); err != nil {
			return st, err
		}
		st.BayesTestAcc = float64(correct) / float64(c.TestRows)
		st.BayesTestLL = llSum / float64(c.TestRows)
		written += c.TestRows
	}
	st.Positive = float64(pos) / float64(written)
	return st, nil
}

// synthesizeFields writes CTR-like libffm data ("label<TAB>field:id:1
// ...", labels 1 and 0, as xflow reads it): each example has one value in
// each of c.Fields fields, drawn by popularity (per field a Zipf law over
// its c.IDs/c.Fields ids, rank r drawn ∝ (1+r)^-c.Zipf, so that a field's
// most popular values are frequent, as in click logs; field f's ids come
// after field f-1's), and is positive with probability
// σ(m) for a hidden factorization machine
//
//	m = b + Σ_i w_i + Σ_{i<j} <v_i, v_j>
//
// over its values: a random c.Informative of the ids have a weight w_i
// from N(0, (c.Scale/2)²), every id has a factor vector v_i of
// c.TrueFactors values from N(0, σ²), σ chosen so that the pairwise part's
// standard deviation is about 2 (interactions carry more than the linear
// part), and b centres the positive rate near 25%. The weights and factors
// are functions of the id and seed, not stored: 10^7 ids cost nothing. The
// same c gives the same bytes.
func synthesizeFields(c SynthConfig, train, test io.Writer) (SynthStats, error) {
	r := rand.New(rand.NewPCG(c.Seed, 0xf1e1d5))
	F, K := c.Fields, c.TrueFactors
	per := c.IDs / F
	pairs := float64(F*(F-1)) / 2
	sigma := math.Pow(4/(math.Max(pairs, 1)*float64(K)), 0.25)
	seed := c.Seed * 0x9e3779b97f4a7c15
	weight := func(id uint64) float64 {
		h := splitmix(id ^ seed ^ 0x77)
		if float64(h>>11)/(1<<53) >= c.Informative {
			return 0
		}
		return initFactor(id, seed^0x55, c.Scale/2)
	}
	// A bijection of 0..per-1 spreads each field's popular ids over its
	// range: rank r has id offset (r·mult) mod per.
	mult := uint64(2654435761) % uint64(per)
	for mult == 0 || gcd(mult, uint64(per)) != 1 {
		mult++
	}
	zipfs := make([]*rand.Zipf, F)
	for f := range zipfs {
		zipfs[f] = rand.NewZipf(r, c.Zipf, 1, uint64(per-1))
	}
	ids := make([]uint64, F)
	sum := make([]float64, K)
	const bias = -1.5
	return writeSets(c, train, test, func(buf []byte) ([]byte, float64, bool, int) {
		m := bias
		clear(sum)
		sq := 0.0
		for f := range ids {
			id := uint64(f*per) + 1 + zipfs[f].Uint64()*mult%uint64(per)
			ids[f] = id
			m += weight(id)
			for j := 0; j < K; j++ {
				v := initFactor(id*uint64(K)+uint64(j), seed, sigma)
				sum[j] += v
				sq += v * v
			}
		}
		for _, s := range sum {
			m += s * s / 2
		}
		m -= sq / 2
		y := 0
		if r.Float64() < sigmoid(m) {
			y = 1
		}
		buf = strconv.AppendInt(buf, int64(y), 10)
		for f, id := range ids {
			// (A tab after the label, as xflow's reader needs.)
			if f == 0 {
				buf = append(buf, '\t')
			} else {
				buf = append(buf, ' ')
			}
			buf = strconv.AppendInt(buf, int64(f), 10)
			buf = append(buf, ':')
			buf = strconv.AppendUint(buf, id, 10)
			buf = append(buf, ":1"...)
		}
		return buf, m, y == 1, F
	})
}

// gcd returns the greatest common divisor of a and b.
func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// synth is -mode=synth: it writes the training set to -out and the test
// set to -test-out (gzipped when a name ends in .gz).
func synth(cfg *Config, out io.Writer) error {
	c := cfg.Synth
	c.Seed = cfg.Seed
	if cfg.TestOut == "" {
		c.TestRows = 0
	}
	var st SynthStats
	err := writeFileAtomic(cfg.Out, func(train io.Writer) error {
		train, closeTrain := maybeGzipWriter(cfg.Out, train)
		if cfg.TestOut == "" {
			var err error
			if st, err = Synthesize(c, train, nil); err != nil {
				return err
			}
			return closeTrain()
		}
		return writeFileAtomic(cfg.TestOut, func(test io.Writer) error {
			test, closeTest := maybeGzipWriter(cfg.TestOut, test)
			var err error
			if st, err = Synthesize(c, train, test); err != nil {
				return err
			}
			if err := closeTrain(); err != nil {
				return err
			}
			return closeTest()
		})
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %d training examples to %s", c.Rows, cfg.Out)
	if cfg.TestOut != "" {
		fmt.Fprintf(out, " and %d test examples to %s", c.TestRows, cfg.TestOut)
	}
	fmt.Fprintf(out, ": %d ids, %.1f non-zeros per example, %.1f%% positive\n",
		c.IDs, float64(st.NNZ)/float64(c.Rows+c.TestRows), 100*st.Positive)
	if cfg.TestOut != "" {
		fmt.Fprintf(out, "the true model on the test set: accuracy %.4f, log-loss %.4f\n", st.BayesTestAcc, st.BayesTestLL)
	}
	return nil
}

// maybeGzipWriter wraps w in a gzip writer when name ends in ".gz"; the
// returned function flushes it (a no-op otherwise).
func maybeGzipWriter(name string, w io.Writer) (io.Writer, func() error) {
	if !strings.HasSuffix(name, ".gz") {
		return w, func() error { return nil }
	}
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	return zw, zw.Close
}
