package main

import (
	"bytes"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// randomData returns n examples over features 1..dim (about half of them
// set, values in [-1, 1]) with classes 0..k-1, the bias added.
func randomData(r *rand.Rand, n, dim, k int) *Dataset {
	d := newDataset()
	var idx []int32
	var val []float32
	for i := 0; i < n; i++ {
		idx, val = idx[:0], val[:0]
		for f := 1; f <= dim; f++ {
			if r.IntN(2) == 0 {
				idx = append(idx, int32(f))
				val = append(val, float32(2*r.Float64()-1))
			}
		}
		d.appendRow(float64(r.IntN(k)), idx, val)
		d.Class = append(d.Class, int32(d.Label[i]))
	}
	d.AddBias(1)
	return d
}

// TestGradientMatchesNumerical compares LossGrad's gradient with central
// differences of its loss.
func TestGradientMatchesNumerical(t *testing.T) {
	for _, k := range []int{2, 4} {
		outputs := k
		if k == 2 {
			outputs = 1 // binary logistic regression
		}
		r := rand.New(rand.NewPCG(uint64(k), 7))
		const dim = 6
		d := randomData(r, 12, dim, k)
		// The model: positions are the feature ids, with feature 4
		// absent (no weight, no gradient).
		mark := make([]int32, dim+1)
		for f := range mark {
			mark[f] = int32(f)
		}
		mark[4] = -1
		w := make([]float32, (dim+1)*outputs)
		for i := range w {
			w[i] = float32(r.Float64() - 0.5)
		}
		rows := seq(0, d.Len())
		grad := make([]float32, len(w))
		loss, _ := LossGrad(d, rows, outputs, mark, w, grad)
		if loss <= 0 {
			t.Fatalf("k=%d: loss %v", k, loss)
		}
		const eps = 1e-2
		for i := range w {
			orig := w[i]
			w[i] = orig + eps
			lp, _ := LossGrad(d, rows, outputs, mark, w, nil)
			w[i] = orig - eps
			lm, _ := LossGrad(d, rows, outputs, mark, w, nil)
			w[i] = orig
			num := (lp - lm) / (2 * eps)
			if i/outputs == 4 {
				if grad[i] != 0 || num != 0 {
					t.Errorf("k=%d: absent feature has gradient %v (numerical %v)", k, grad[i], num)
				}
				continue
			}
			if diff := math.Abs(num - float64(grad[i])); diff > 1e-3*(1+math.Abs(num)) {
				t.Errorf("k=%d: weight %d: gradient %v, numerical %v", k, i, grad[i], num)
			}
		}
	}
}

func TestLossGradByHand(t *testing.T) {
	// One example x = (bias 1, x1 = 2), label +1, w = (0.5, -1):
	// margin -1.5, loss log(1+e^1.5), gradient (σ(-1.5) - 1)·x.
	d, err := ReadLIBSVM(strings.NewReader("1 1:2\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	d.Class = []int32{1}
	d.AddBias(1)
	grad := make([]float32, 2)
	loss, correct := LossGrad(d, []int{0}, 1, []int32{0, 1}, []float32{0.5, -1}, grad)
	s := 1 / (1 + math.Exp(1.5))
	if math.Abs(loss-math.Log1p(math.Exp(1.5))) > 1e-9 || correct != 0 {
		t.Errorf("loss %v correct %d", loss, correct)
	}
	if math.Abs(float64(grad[0])-(s-1)) > 1e-6 || math.Abs(float64(grad[1])-2*(s-1)) > 1e-6 {
		t.Errorf("gradient %v, want %v", grad, []float64{s - 1, 2 * (s - 1)})
	}
	// Extreme margins stay finite.
	loss, _ = LossGrad(d, []int{0}, 1, []int32{0, 1}, []float32{0, -1e4}, nil)
	if math.IsInf(loss, 0) || math.Abs(loss-2e4) > 1e-6 {
		t.Errorf("loss at margin -2e4: %v", loss)
	}
}

// TestReadModelBoundsTheHeader feeds headers whose sizes would overflow or
// exhaust memory: an error, not a panic or an allocation.
func TestReadModelBoundsTheHeader(t *testing.T) {
	for _, features := range []string{"4611686018427387904", "67108865", "20000000"} {
		in := "pslite-lr 1\nloss softmax\nlabels 0 1 2 3\noutputs 4\nfeatures " + features + "\nbias 1\nweights 1\nw 1 0 1\n"
		if _, err := ReadModel(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), "more than") {
			t.Errorf("features %s: error %v", features, err)
		}
	}
}

func TestModelWriteRead(t *testing.T) {
	m := NewModel(Labels{Values: []float64{1, 2, 3}, Softmax: true}, 4, 1)
	m.W[0], m.W[5], m.W[11] = 0.25, -1.5e-7, 3
	var buf bytes.Buffer
	if err := m.Write(&buf); err != nil {
		t.Fatal(err)
	}
	want := "pslite-lr 1\nloss softmax\nlabels 1 2 3\noutputs 3\nfeatures 4\nbias 1\nweights 3\n" +
		"w 0 0 0.25\nw 1 2 -1.5e-07\nw 3 2 3\n"
	if buf.String() != want {
		t.Errorf("wrote\n%s\nwant\n%s", buf.String(), want)
	}
	got, err := ReadModel(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Features != 4 || got.Bias != 1 || !got.Labels.Softmax || len(got.W) != 12 {
		t.Fatalf("read %+v", got)
	}
	for i := range m.W {
		if got.W[i] != m.W[i] {
			t.Errorf("weight %d: %v, want %v", i, got.W[i], m.W[i])
		}
	}
	bad := map[string]string{
		"":          `want "pslite-lr 1"`,
		"other 1\n": `want "pslite-lr 1"`,
		"pslite-lr 1\nloss logistic\nlabels -1 1\noutputs 1\nfeatures 3\nbias 1\nweights 1\nw 3 0 1\n": "bad weight",
		"pslite-lr 1\nloss logistic\nlabels -1 1\noutputs 2\nfeatures 3\nbias 1\nweights 0\n":          "inconsistent header",
		"pslite-lr 1\nloss logistic\nlabels -1 1\noutputs 1\nfeatures 3\nbias 1\nweights 2\nw 1 0 1\n": "1 weights but the header says 2",
		"pslite-lr 1\nloss logistic\nlabels -1 1\noutputs 1\nfeatures 3\nbias 1\n":                     "no weights line",
		"pslite-lr 1\nloss hinge\n":  "unknown loss",
		"pslite-lr 1\ncolour blue\n": "unknown key",
		"pslite-lr 1\nw 1 0 1\n":     "before the header",
		"pslite-lr 1\nfeatures x\n":  "bad features",
	}
	for in, msg := range bad {
		if _, err := ReadModel(strings.NewReader(in)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: error %v, want %q", in, err, msg)
		}
	}
}

func TestEvaluateSkipsUnknownFeatures(t *testing.T) {
	// A binary model over features 0..1; the data has feature 5 too.
	m := NewModel(Labels{Values: []float64{-1, 1}}, 2, 1)
	m.W[1] = 1
	d, err := ReadLIBSVM(strings.NewReader("1 1:1 5:-100\n-1 1:-1\n-1 1:2\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Labels.Assign(d); err != nil {
		t.Fatal(err)
	}
	d.AddBias(1)
	_, acc := m.Evaluate(d)
	if math.Abs(acc-2.0/3) > 1e-9 {
		t.Errorf("accuracy %v, want 2/3", acc)
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

func TestNewOptimizer(t *testing.T) {
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
		{Fold: 0, Epoch: 0, Loss: 1, Examples: 10, TestCorrect: 3, TestN: 4, Time: time.Second},
		{Fold: 1, Epoch: 0, Loss: 2, Examples: 30, TestCorrect: 1, TestN: 4, Time: time.Second},
	}
	m := PerEpoch(rs, true)
	if len(m) != 1 || m[0].Loss != 1.75 || m[0].TestAcc != 0.5 || m[0].Examples != 40 || m[0].Rate != 20 {
		t.Errorf("merged %+v", m)
	}
}
