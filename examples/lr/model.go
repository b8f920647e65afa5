package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// modelFormat is the first line of a model file.
const modelFormat = "pslite-lr 1"

// Model is a trained linear classifier. With C = Labels.Outputs() outputs
// per feature, W[f*C+c] is the weight of feature f (0 the bias, 1.. the data
// set's ids) for output c. Binary logistic regression has one output, the
// log-odds of class 1; softmax regression one per class.
type Model struct {
	Labels   Labels
	Features int     // feature ids 0..Features-1 have weights
	Bias     float32 // value of the bias feature 0 (0: no bias)
	W        []float32
}

// NewModel returns an all-zero model.
func NewModel(l Labels, features int, bias float32) *Model {
	return &Model{Labels: l, Features: features, Bias: bias, W: make([]float32, features*l.Outputs())}
}

// positions returns the mark slice that maps every feature id up to maxID to
// its position in m.W (ids the model lacks map to -1).
func (m *Model) positions(maxID int32) []int32 {
	mark := make([]int32, max(int(maxID)+1, m.Features))
	for f := range mark {
		mark[f] = -1
		if f < m.Features {
			mark[f] = int32(f)
		}
	}
	return mark
}

// Evaluate returns the mean loss and the accuracy of m on d (d.Class set).
func (m *Model) Evaluate(d *Dataset) (loss, acc float64) {
	if d.Len() == 0 {
		return 0, 0
	}
	mark := m.positions(d.MaxFeature)
	sum, correct := LossGrad(d, seq(0, d.Len()), m.Labels.Outputs(), mark, m.W, nil)
	return sum / float64(d.Len()), float64(correct) / float64(d.Len())
}

// LossGrad computes, for the given rows of d, the summed loss and the number
// of rows predicted correctly; when grad is not nil it adds the summed
// gradient of the loss to it. outputs is 1 for binary logistic regression
// (class 1 positive) or the number of classes for softmax regression.
// mark[f] is the position of feature f's weights: w[mark[f]*outputs+c] for
// output c (grad alike); features with mark[f] < 0 have weight zero and no
// gradient.
//
// Logistic: loss = log(1+exp(-s·m)) with margin m = w·x and s = ±1, and
// gradient (σ(m) - y)·x. Softmax: loss = log Σ_c exp(m_c) - m_y, gradient
// (p_c - [c = y])·x for output c with p = softmax(m).
func LossGrad(d *Dataset, rows []int, outputs int, mark []int32, w, grad []float32) (loss float64, correct int) {
	z := make([]float64, outputs)
	for _, r := range rows {
		idx, val := d.Row(r)
		for c := range z {
			z[c] = 0
		}
		for j, f := range idx {
			p := mark[f]
			if p < 0 {
				continue
			}
			x := float64(val[j])
			ws := w[int(p)*outputs : int(p)*outputs+outputs]
			for c, wc := range ws {
				z[c] += float64(wc) * x
			}
		}
		y := int(d.Class[r])
		if outputs == 1 {
			m := z[0]
			s := -1.0
			if y == 1 {
				s = 1
			}
			loss += softplus(-s * m)
			if (m > 0) == (y == 1) {
				correct++
			}
			z[0] = sigmoid(m) - float64(y)
		} else {
			best := 0
			zmax := z[0]
			for c, v := range z {
				if v > zmax {
					zmax, best = v, c
				}
			}
			if best == y {
				correct++
			}
			var se float64
			for _, v := range z {
				se += math.Exp(v - zmax)
			}
			lse := zmax + math.Log(se)
			loss += lse - z[y]
			for c := range z {
				z[c] = math.Exp(z[c] - lse)
			}
			z[y] -= 1
		}
		if grad == nil {
			continue
		}
		for j, f := range idx {
			p := mark[f]
			if p < 0 {
				continue
			}
			x := float64(val[j])
			gs := grad[int(p)*outputs : int(p)*outputs+outputs]
			for c := range gs {
				gs[c] += float32(z[c] * x)
			}
		}
	}
	return loss, correct
}

// sigmoid returns 1/(1+e^-x) without overflow.
func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

// softplus returns log(1+e^x) without overflow.
func softplus(x float64) float64 {
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

// Write stores m as text: a header of "key value" lines, then "w FEATURE
// OUTPUT WEIGHT" for every non-zero weight (see README.md).
func (m *Model) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	loss := "logistic"
	if m.Labels.Softmax {
		loss = "softmax"
	}
	labels := make([]string, len(m.Labels.Values))
	for i, v := range m.Labels.Values {
		labels[i] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	c := m.Labels.Outputs()
	fmt.Fprintf(bw, "%s\nloss %s\nlabels %s\noutputs %d\nfeatures %d\nbias %s\n",
		modelFormat, loss, strings.Join(labels, " "), c, m.Features,
		strconv.FormatFloat(float64(m.Bias), 'g', -1, 32))
	nnz := 0
	for _, v := range m.W {
		if v != 0 {
			nnz++
		}
	}
	fmt.Fprintf(bw, "weights %d\n", nnz)
	for i, v := range m.W {
		if v != 0 {
			fmt.Fprintf(bw, "w %d %d %s\n", i/c, i%c, strconv.FormatFloat(float64(v), 'g', -1, 32))
		}
	}
	return bw.Flush()
}

// ReadModel parses a model written by Model.Write.
func ReadModel(r io.Reader) (*Model, error) {
	sc := bufio.NewScanner(r)
	line := 0
	fail := func(format string, args ...any) (*Model, error) {
		return nil, fmt.Errorf("model line %d: %s", line, fmt.Sprintf(format, args...))
	}
	if !sc.Scan() || sc.Text() != modelFormat {
		line = 1
		if err := sc.Err(); err != nil {
			return nil, err
		}
		return fail("want %q", modelFormat)
	}
	line = 1
	m := &Model{Features: -1}
	outputs, weights, seen := -1, -1, 0
	haveLoss := false
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == "w" {
			if m.W == nil {
				return fail("weights before the header is complete")
			}
			if len(f) != 4 {
				return fail("want: w FEATURE OUTPUT WEIGHT")
			}
			feat, err1 := strconv.Atoi(f[1])
			out, err2 := strconv.Atoi(f[2])
			v, err3 := strconv.ParseFloat(f[3], 32)
			if err1 != nil || err2 != nil || err3 != nil || feat < 0 || feat >= m.Features || out < 0 || out >= outputs {
				return fail("bad weight %q", sc.Text())
			}
			m.W[feat*outputs+out] = float32(v)
			seen++
			continue
		}
		if len(f) < 2 {
			return fail("want a key and a value")
		}
		var err error
		switch f[0] {
		case "loss":
			haveLoss = true
			switch f[1] {
			case "softmax":
				m.Labels.Softmax = true
			case "logistic":
			default:
				return fail("unknown loss %q", f[1])
			}
		case "labels":
			for _, s := range f[1:] {
				v, err := strconv.ParseFloat(s, 64)
				if err != nil {
					return fail("bad label %q", s)
				}
				m.Labels.Values = append(m.Labels.Values, v)
			}
		case "outputs":
			outputs, err = strconv.Atoi(f[1])
		case "features":
			m.Features, err = strconv.Atoi(f[1])
		case "bias":
			var b float64
			b, err = strconv.ParseFloat(f[1], 32)
			m.Bias = float32(b)
		case "weights":
			weights, err = strconv.Atoi(f[1])
			if err == nil {
				if !haveLoss || len(m.Labels.Values) < 2 || outputs != m.Labels.Outputs() || m.Features < 1 || weights < 0 {
					return fail("incomplete or inconsistent header")
				}
				if m.Features > maxFeatureID+1 || int64(m.Features)*int64(outputs) > maxModelKeys {
					return fail("%d features × %d outputs: more than %d weights", m.Features, outputs, maxModelKeys)
				}
				m.W = make([]float32, m.Features*outputs)
			}
		default:
			return fail("unknown key %q", f[0])
		}
		if err != nil {
			return fail("bad %s %q", f[0], f[1])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if m.W == nil {
		return fail("no weights line")
	}
	if seen != weights {
		return fail("%d weights but the header says %d", seen, weights)
	}
	return m, nil
}
