package ctr

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// randomData returns n examples over features 1..dim (about half of them
// set, values in [-1, 1], or all 1 when binaryValues) with classes 0..k-1.
func randomData(r *rand.Rand, n, dim, k int, binaryValues bool) *Dataset {
	v := NewVocab()
	for f := 1; f <= dim; f++ {
		v.index(uint64(f))
	}
	d := newDataset(v)
	var idx []int32
	var val []float32
	for i := 0; i < n; i++ {
		idx, val = idx[:0], val[:0]
		for f := 1; f <= dim; f++ {
			if r.IntN(2) == 0 {
				idx = append(idx, int32(f-1))
				val = append(val, float32(2*r.Float64()-1))
			}
		}
		if binaryValues {
			val = nil
		}
		d.appendRow(float64(r.IntN(k)), idx, val, nil)
		d.Class = append(d.Class, int32(d.Label[i]))
	}
	return d
}

// TestGradientMatchesNumerical compares LossGrad's gradient with central
// differences of its loss, for binary and softmax models, real and binary
// values, with and without a bias.
func TestGradientMatchesNumerical(t *testing.T) {
	for _, k := range []int{2, 4} {
		for _, binaryValues := range []bool{false, true} {
			for _, bias := range []float32{0, 1.5} {
				outputs := k
				if k == 2 {
					outputs = 1 // binary logistic regression
				}
				r := rand.New(rand.NewPCG(uint64(k), 7))
				const dim = 6
				d := randomData(r, 12, dim, k, binaryValues)
				b := NewBatch(d, seq(0, d.Len()), newMark(dim))
				l := Weights{C: outputs, Bias: bias}
				w := make([]float32, l.base()+len(b.Feats)*outputs)
				for i := range w {
					w[i] = float32(r.Float64() - 0.5)
				}
				grad := make([]float32, len(w))
				loss, _ := LossGrad(b, 0, b.Len(), l, w, grad)
				if loss <= 0 {
					t.Fatalf("k=%d: loss %v", k, loss)
				}
				const eps = 1e-2
				for i := range w {
					orig := w[i]
					w[i] = orig + eps
					lp, _ := LossGrad(b, 0, b.Len(), l, w, nil)
					w[i] = orig - eps
					lm, _ := LossGrad(b, 0, b.Len(), l, w, nil)
					w[i] = orig
					num := (lp - lm) / (2 * eps)
					if diff := math.Abs(num - float64(grad[i])); diff > 1e-3*(1+math.Abs(num)) {
						t.Errorf("k=%d binary=%v bias=%v: weight %d: gradient %v, numerical %v", k, binaryValues, bias, i, grad[i], num)
					}
				}
				// Evaluate agrees with LossGrad.
				m := EvaluateAll(b, l, w, outputs == 1)
				lossAll, correct := LossGrad(b, 0, b.Len(), l, w, nil)
				if math.Abs(m.LossSum-lossAll) > 1e-9 || int(m.Correct) != correct || int(m.N) != b.Len() {
					t.Errorf("k=%d: Evaluate %+v, LossGrad %v %d", k, m, lossAll, correct)
				}
			}
		}
	}
}

// TestBatchGradSplitsAlike checks that the gradient computed on all cores
// is the one computed on one.
func TestBatchGradSplitsAlike(t *testing.T) {
	for _, k := range []int{2, 10} {
		outputs := k
		if k == 2 {
			outputs = 1
		}
		r := rand.New(rand.NewPCG(3, uint64(k)))
		d := randomData(r, 3000, 40, k, false)
		b := NewBatch(d, seq(0, d.Len()), newMark(40))
		l := Weights{C: outputs, Bias: 1}
		w := make([]float32, l.base()+len(b.Feats)*outputs)
		for i := range w {
			w[i] = float32(r.Float64() - 0.5)
		}
		one := make([]float32, len(w))
		l1, c1 := LossGrad(b, 0, b.Len(), l, w, one)
		all := make([]float32, len(w))
		var scratch [][]float32
		l2, c2 := BatchGrad(b, l, w, all, &scratch)
		if c1 != c2 || math.Abs(l1-l2) > 1e-9*l1 {
			t.Errorf("k=%d: loss %v %v, correct %d %d", k, l1, l2, c1, c2)
		}
		for i := range one {
			if math.Abs(float64(one[i]-all[i])) > 1e-3*(1+math.Abs(float64(one[i]))) {
				t.Errorf("k=%d: gradient %d: %v on one core, %v on all", k, i, one[i], all[i])
				break
			}
		}
	}
}

func TestLossGradByHand(t *testing.T) {
	// One example x = (bias 1, x1 = 2), label +1, w = (0.5, -1):
	// margin -1.5, loss log(1+e^1.5), gradient (σ(-1.5) - 1)·x.
	d := readString(t, "1 1:2\n", ReadOptions{})
	d.Class = []int32{1}
	b := NewBatch(d, []int{0}, newMark(1))
	l := Weights{C: 1, Bias: 1}
	grad := make([]float32, 2)
	loss, correct := LossGrad(b, 0, 1, l, []float32{0.5, -1}, grad)
	s := 1 / (1 + math.Exp(1.5))
	if math.Abs(loss-math.Log1p(math.Exp(1.5))) > 1e-9 || correct != 0 {
		t.Errorf("loss %v correct %d", loss, correct)
	}
	if math.Abs(float64(grad[0])-(s-1)) > 1e-6 || math.Abs(float64(grad[1])-2*(s-1)) > 1e-6 {
		t.Errorf("gradient %v, want %v", grad, []float64{s - 1, 2 * (s - 1)})
	}
	// Extreme margins stay finite.
	loss, _ = LossGrad(b, 0, 1, l, []float32{0, -1e4}, nil)
	if math.IsInf(loss, 0) || math.Abs(loss-2e4) > 1e-6 {
		t.Errorf("loss at margin -2e4: %v", loss)
	}
}

// TestAUC checks the histogram AUC against the exact one (all pairs).
func TestAUC(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	m := newMetrics(true)
	type ex struct {
		z float64
		y bool
	}
	var exs []ex
	for i := 0; i < 2000; i++ {
		y := r.IntN(2) == 0
		z := r.NormFloat64()
		if y {
			z += 0.8
		}
		exs = append(exs, ex{z, y})
		m.add(z, y)
	}
	var pairs, wins float64
	for _, p := range exs {
		for _, n := range exs {
			if p.y && !n.y {
				pairs++
				switch {
				case p.z > n.z:
					wins++
				case p.z == n.z:
					wins += 0.5
				}
			}
		}
	}
	exact := wins / pairs
	if got := m.AUC(); math.Abs(got-exact) > 1e-3 {
		t.Errorf("AUC %v, exact %v", got, exact)
	}
	if !math.IsNaN(newMetrics(false).AUC()) {
		t.Error("softmax metrics have an AUC")
	}
	one := newMetrics(true)
	one.add(1, true)
	if !math.IsNaN(one.AUC()) {
		t.Error("AUC of one class")
	}
}

func TestModelWriteRead(t *testing.T) {
	m := &Model{Labels: Labels{Values: []float64{1, 2, 3}, Softmax: true}, Bias: 1,
		IDs: []uint64{0, 1, 5000000000}, W: []float32{0.25, 0, 0, 0, 0, -1.5e-7, 0, 0, 3}}
	var buf bytes.Buffer
	if err := m.Write(&buf); err != nil {
		t.Fatal(err)
	}
	want := "pslite-lr 2\nloss softmax\nlabels 1 2 3\noutputs 3\nfeatures 5000000001\nbias 1\nhash-bits 0\nstate none\nweights 3\n" +
		"w 0 0 0.25\nw 1 2 -1.5e-07\nw 5000000000 2 3\n"
	if buf.String() != want {
		t.Errorf("wrote\n%s\nwant\n%s", buf.String(), want)
	}
	got, err := ReadModel(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Bias != 1 || !got.Labels.Softmax || !slices.Equal(got.IDs, []uint64{0, 1, 5000000000}) || !slices.Equal(got.W, m.W) || got.Z != nil {
		t.Fatalf("read %+v", got)
	}
	// FTRL's state round-trips exactly, zero weights with state too.
	f := &Model{Labels: Labels{Values: []float64{-1, 1}}, Bias: 1, HashBits: 18,
		IDs: []uint64{0, 77}, W: []float32{0.5, 0}, Z: []float64{-0.1, 1.0 / 3}, N: []float64{2, 1e-300}}
	buf.Reset()
	if err := f.Write(&buf); err != nil {
		t.Fatal(err)
	}
	got, err = ReadModel(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.HashBits != 18 || !slices.Equal(got.W, f.W) || !slices.Equal(got.Z, f.Z) || !slices.Equal(got.N, f.N) {
		t.Errorf("ftrl model read back as %+v", got)
	}
	// Version 1 files still read.
	v1 := "pslite-lr 1\nloss logistic\nlabels -1 1\noutputs 1\nfeatures 3\nbias 1\nweights 2\nw 2 0 0.5\nw 0 0 -1\n"
	got, err = ReadModel(strings.NewReader(v1))
	if err != nil || !slices.Equal(got.IDs, []uint64{0, 2}) || !slices.Equal(got.W, []float32{-1, 0.5}) {
		t.Errorf("version 1: %+v %v", got, err)
	}
	bad := map[string]string{
		"":          `want "pslite-lr 2"`,
		"other 1\n": `want "pslite-lr 2"`,
		"pslite-lr 2\nloss logistic\nlabels -1 1\noutputs 1\nbias 1\nweights 1\nw 3 1 1\n":              "bad weight",
		"pslite-lr 2\nloss logistic\nlabels -1 1\noutputs 1\nbias 1\nweights 1\nw 17592186044416 0 1\n": "out of range",
		"pslite-lr 2\nloss logistic\nlabels -1 1\noutputs 1\nhash-bits 4\nweights 1\nw 16 0 1\n":        "out of range",
		"pslite-lr 2\nloss logistic\nlabels -1 1\noutputs 1\nstate ftrl\nweights 1\nw 1 0 1\n":          "Z N",
		"pslite-lr 2\nloss logistic\nlabels -1 1\noutputs 1\nstate ftrl\nweights 1\nw 1 0 1 0 -1\n":     "bad state",
		"pslite-lr 2\nloss logistic\nlabels -1 1\noutputs 1\nweights 2\nw 1 0 1\nw 1 0 2\n":             "a second weight",
		"pslite-lr 2\nloss logistic\nlabels -1 1\noutputs 2\nbias 1\nweights 0\n":                       "inconsistent header",
		"pslite-lr 2\nloss logistic\nlabels -1 1\noutputs 1\nbias 1\nweights 2\nw 1 0 1\n":              "1 weights but the header says 2",
		"pslite-lr 2\nloss logistic\nlabels -1 1\noutputs 1\nbias 1\n":                                  "no weights line",
		"pslite-lr 2\nloss logistic\nlabels -1 1\noutputs 1\nweights 0\nbias 2\n":                       "after the weights began",
		"pslite-lr 2\nloss hinge\n":   "unknown loss",
		"pslite-lr 2\ncolour blue\n":  "unknown key",
		"pslite-lr 2\nw 1 0 1\n":      "before the header",
		"pslite-lr 2\nfeatures x\n":   "bad features",
		"pslite-lr 2\nhash-bits 99\n": "out of range",
		"pslite-lr 2\nstate adam\n":   "unknown state",
	}
	for in, msg := range bad {
		if _, err := ReadModel(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: error %v, want %q", in, err, msg)
		}
	}
}

// TestScoreFile scores a model on a file: features the model lacks count
// zero, the predictions file lists each example's class probabilities.
func TestScoreFile(t *testing.T) {
	m := &Model{Labels: Labels{Values: []float64{-1, 1}}, Bias: 1, IDs: []uint64{0, 1}, W: []float32{0, 1}}
	p := filepath.Join(t.TempDir(), "d.svm")
	if err := os.WriteFile(p, []byte("1 1:1 5:-100\n-1 1:-1\n-1 1:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var pred bytes.Buffer
	met, err := ScoreFile(m, p, 0, &pred)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(met.Acc()-2.0/3) > 1e-9 || met.N != 3 {
		t.Errorf("accuracy %v of %v, want 2/3 of 3", met.Acc(), met.N)
	}
	s1 := sigmoid(1)
	want := fmt.Sprintf("labels -1 1\n1 %.6g %.6g\n-1 %.6g %.6g\n1 %.6g %.6g\n",
		1-s1, s1, s1, 1-s1, 1-sigmoid(2), sigmoid(2))
	if pred.String() != want {
		t.Errorf("predictions\n%s\nwant\n%s", pred.String(), want)
	}
	met, err = ScoreFile(m, p, 2, nil)
	if err != nil || met.N != 2 {
		t.Errorf("limit 2: %+v %v", met, err)
	}
	if err := os.WriteFile(p, []byte("1 1:1\n3 1:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ScoreFile(m, p, 0, nil); err == nil || !strings.Contains(err.Error(), "d.svm:2: label 3 is not one of the model's classes") {
		t.Errorf("unknown label: %v", err)
	}
}

func TestSGDByHand(t *testing.T) {
	o := SGD{LR: 0.1, L2: 0.01}
	p := Param{W: 0.5}
	o.Update(&p, 0.2, 1, 1)
	if want := 0.5 - 0.1*(0.2+0.01*0.5); math.Abs(p.W-want) > 1e-15 {
		t.Errorf("w = %v, want %v", p.W, want)
	}
	// Half the regularisation and half the rate.
	p = Param{W: 0.5}
	o.Update(&p, 0.2, 0.5, 0.5)
	if want := 0.5 - 0.05*(0.2+0.005*0.5); math.Abs(p.W-want) > 1e-15 {
		t.Errorf("w = %v, want %v", p.W, want)
	}
}

func TestFTRLByHand(t *testing.T) {
	o := FTRL{Alpha: 0.1, Beta: 1, L1: 0.01, L2: 0.1}
	var p Param
	// Worked out by hand from the update rule (see FTRL's doc comment):
	// g = 0.5: σ = 0.5/0.1 = 5, z = 0.5, n = 0.25,
	//          w = -(0.5-0.01)/((1+0.5)/0.1+0.1) = -0.49/15.1.
	o.Update(&p, 0.5, 1, 1)
	if math.Abs(p.W-(-0.49/15.1)) > 1e-15 || p.Z != 0.5 || p.N != 0.25 {
		t.Errorf("after step 1: %+v", p)
	}
	// g = -0.3: σ = (√0.34-0.5)/0.1, z = 0.2 - σ·w, n = 0.34.
	o.Update(&p, -0.3, 1, 1)
	const wantW, wantZ = -0.013619064671682692, 0.22696466413736405
	if math.Abs(p.W-wantW) > 1e-12 || math.Abs(p.Z-wantZ) > 1e-12 || math.Abs(p.N-0.34) > 1e-12 {
		t.Errorf("after step 2: %+v, want w %v z %v n 0.34", p, wantW, wantZ)
	}
	// |z| <= L1 gives an exact zero.
	p = Param{}
	FTRL{Alpha: 0.1, Beta: 1, L1: 1}.Update(&p, 0.5, 1, 1)
	if p.W != 0 || p.Z != 0.5 {
		t.Errorf("L1 did not zero the weight: %+v", p)
	}
}

func TestAdaGradByHand(t *testing.T) {
	o := AdaGrad{LR: 0.1, L2: 0.01}
	p := Param{W: 0.5}
	// g = 0.2 + 0.01·0.5 = 0.205, n = g², w = 0.5 - 0.1·g/(|g| + 1e-8).
	o.Update(&p, 0.2, 1, 1)
	g := 0.2 + 0.01*0.5
	if want := 0.5 - 0.1*g/(math.Sqrt(g*g)+1e-8); math.Abs(p.W-want) > 1e-15 || math.Abs(p.N-g*g) > 1e-15 {
		t.Errorf("after step 1: %+v, want w %v n %v", p, want, g*g)
	}
	// A second step of the same gradient moves less: its rate is 1/√2.
	w1 := p.W
	o.Update(&p, 0.2, 1, 1)
	g2 := 0.2 + 0.01*w1
	if want := w1 - 0.1*g2/(math.Sqrt(g*g+g2*g2)+1e-8); math.Abs(p.W-want) > 1e-15 {
		t.Errorf("after step 2: w %v, want %v", p.W, want)
	}
}

func TestNewOptimizer(t *testing.T) {
	if o, err := NewOptimizer("adagrad", 0.1, 0, 0, 0, 0.01); err != nil || o.(AdaGrad).LR != 0.1 {
		t.Errorf("adagrad: %v %v", o, err)
	}
	if o, err := NewOptimizer("sgd", 0.1, 0, 0, 0, 0.01); err != nil || o.(SGD).LR != 0.1 {
		t.Errorf("sgd: %v %v", o, err)
	}
	if o, err := NewOptimizer("ftrl", 0, 0.1, 1, 0.5, 0); err != nil || o.(FTRL).L1 != 0.5 {
		t.Errorf("ftrl: %v %v", o, err)
	}
	for _, c := range []struct {
		name          string
		lr, alpha, l1 float64
	}{{"sgd", 0, 0, 0}, {"sgd", 0.1, 0, 1}, {"ftrl", 0, 0, 0}, {"adam", 0.1, 0.1, 0}} {
		if _, err := NewOptimizer(c.name, c.lr, c.alpha, 1, c.l1, 0); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func TestWritePlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.png")
	var rs []EpochResult
	for e := 0; e < 5; e++ {
		rs = append(rs, EpochResult{Epoch: e, Loss: 1 / float64(e+1), TrainAcc: 0.5 + 0.05*float64(e),
			TestLoss: 1.1 / float64(e+1), TestAcc: 0.5 + 0.04*float64(e), TestN: 10, Time: time.Second})
	}
	if err := WritePlot(path, "test", rs, "test"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 500 {
		t.Errorf("image is %v", b)
	}
	if err := WritePlot(path, "empty", nil, "test"); err == nil {
		t.Error("no error for no epochs")
	}
}

func TestPerEpochMergesFolds(t *testing.T) {
	rs := []EpochResult{
		{Fold: 0, Epoch: 0, Loss: 1, Examples: 10, Test: &Metrics{Correct: 3, N: 4}, Time: time.Second},
		{Fold: 1, Epoch: 0, Loss: 2, Examples: 30, Test: &Metrics{Correct: 1, N: 4}, Time: time.Second},
	}
	m := PerEpoch(rs, true)
	if len(m) != 1 || m[0].Loss != 1.75 || m[0].TestAcc != 0.5 || m[0].Examples != 40 || m[0].Rate != 20 {
		t.Errorf("merged %+v", m)
	}
}
