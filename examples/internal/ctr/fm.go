package ctr

import (
	"fmt"
	"math"
)

// Model kinds (-model).
const (
	kindLR  = "lr"  // logistic regression: w only
	kindFM  = "fm"  // factorization machine: w and a factor vector per feature
	kindMVM = "mvm" // multi-view machine: w and a factor vector per feature, views from the fields
)

// Factors describes the interaction part of a binary factorization model,
// whose factor vectors live on the job's second KV app (app 1), as xflow
// keeps them: one key per feature, feature id f's key f carrying its K
// factors, beside its weight on app 0 (also key f). The servers keep each
// factor as its own parameter with its own optimiser state (FTRL's z and
// n, per coordinate as FTRL is meant to run; Store.SetDim), a key's K
// values side by side. One key of K values against K keys per feature (the
// first version), measured: K = 10, 200,000 CTR rows of 20 fields, 2
// epochs, 2 servers and 2 workers, 5 runs alternated, median launch to
// exit 3.00 s against 3.97 s; the keys' cost (slicing, sending, searching)
// is paid once per feature instead of K times.
//
// A factorization machine (Rendle, 2010) scores a row x with
//
//	m = b + Σ_i w_i x_i + Σ_{i<j} <v_i, v_j> x_i x_j
//
// computing the pairwise sum as ½ Σ_f [(Σ_i v_if x_i)² - Σ_i v_if² x_i²],
// in O(K·n) for n entries. A multi-view machine (Cao et al., 2016) takes
// the row's fields as views p = 0..Views-1 and scores
//
//	m = b + Σ_i w_i x_i + Σ_f [Π_p (1 + Σ_{i in view p} v_if x_i) - 1]
//
// in O(K·(n+Views)): each view has a constant feature of value 1, so the
// product holds every interaction of up to one feature per view, lower
// orders included, and a row missing a view still scores its other views;
// the -1, a constant the bias would absorb, keeps the margin of the
// starting model near b + Σ w x instead of K. The constants' factors are
// fixed at 1, not learned: learned, they duplicate the bias, the loss
// drives them down with it, and the products vanish (measured: constants
// near 0.4 after 5 epochs over 10 views, the factors where they started,
// AUC no better than lr's). Both models use the logistic loss.
type Factors struct {
	Kind  string // kindFM or kindMVM
	K     int    // factor size
	Views int    // kindMVM: views 0..Views-1 (the data's fields)
}

// fmScratch holds a row's per-factor sums.
type fmScratch struct {
	s    []float64 // FM: Σ_i v_if x_i; MVM: per view and factor, s[p·K+f]
	excl []float64 // MVM: Π_{q≠p} s_qf, per view and factor
}

func (fc Factors) newScratch() *fmScratch {
	if fc.Kind == kindMVM {
		return &fmScratch{s: make([]float64, fc.Views*fc.K), excl: make([]float64, fc.Views*fc.K)}
	}
	return &fmScratch{s: make([]float64, fc.K)}
}

// entryX returns entry e's value.
func entryX(b *Batch, e int32) float64 {
	if b.Val == nil {
		return 1
	}
	return float64(b.Val[e])
}

// margin scores row r of b: w laid out by l (the bias first when it has
// one), v holding K factors per batch feature. It leaves in sc what the
// gradient needs.
func (fc Factors) margin(b *Batch, r int, l Weights, w, v []float32, sc *fmScratch) float64 {
	K := fc.K
	s, e := b.Start[r], b.Start[r+1]
	m := 0.0
	if l.Bias != 0 {
		m = float64(w[0]) * float64(l.Bias)
	}
	ws := w[l.base():]
	for i := s; i < e; i++ {
		m += float64(ws[b.Pos[i]]) * entryX(b, i)
	}
	if fc.Kind == kindFM {
		clear(sc.s)
		sq := 0.0
		for i := s; i < e; i++ {
			x := entryX(b, i)
			vi := v[int(b.Pos[i])*K : int(b.Pos[i])*K+K]
			for f, vf := range vi {
				t := float64(vf) * x
				sc.s[f] += t
				sq += t * t
			}
		}
		pair := 0.0
		for _, sf := range sc.s {
			pair += sf * sf
		}
		return m + (pair-sq)/2
	}
	// MVM: per view the constant 1 plus the view's entries.
	for i := range sc.s {
		sc.s[i] = 1
	}
	for i := s; i < e; i++ {
		p := int(b.Field[i])
		x := entryX(b, i)
		vi := v[int(b.Pos[i])*K : int(b.Pos[i])*K+K]
		sp := sc.s[p*K : p*K+K]
		for f, vf := range vi {
			sp[f] += float64(vf) * x
		}
	}
	// Products of the other views: prefix products forward, suffix back.
	P := fc.Views
	for f := 0; f < K; f++ {
		acc := 1.0
		for p := 0; p < P; p++ {
			sc.excl[p*K+f] = acc
			acc *= sc.s[p*K+f]
		}
		m += acc - 1
		acc = 1
		for p := P - 1; p >= 0; p-- {
			sc.excl[p*K+f] *= acc
			acc *= sc.s[p*K+f]
		}
	}
	return m
}

// addGrad adds g·∂m/∂θ of row r to gw and gv (laid out as w and v), after
// margin filled sc for that row.
func (fc Factors) addGrad(b *Batch, r int, l Weights, v []float32, g float64, sc *fmScratch, gw, gv []float32) {
	K := fc.K
	s, e := b.Start[r], b.Start[r+1]
	if l.Bias != 0 {
		gw[0] += float32(g * float64(l.Bias))
	}
	gs := gw[l.base():]
	for i := s; i < e; i++ {
		x := entryX(b, i)
		p := int(b.Pos[i])
		gs[p] += float32(g * x)
		vi := v[p*K : p*K+K]
		gi := gv[p*K : p*K+K]
		if fc.Kind == kindFM {
			for f, vf := range vi {
				gi[f] += float32(g * x * (sc.s[f] - float64(vf)*x))
			}
			continue
		}
		ex := sc.excl[int(b.Field[i])*K:]
		for f := range gi {
			gi[f] += float32(g * x * ex[f])
		}
	}
}

// LossGrad computes, for rows lo..hi-1 of b, the summed log-loss and the
// rows predicted correctly; with gw and gv not nil it adds the gradient of
// the summed loss to them (laid out as w and v).
func (fc Factors) LossGrad(b *Batch, lo, hi int, l Weights, w, v, gw, gv []float32) (loss float64, correct int) {
	sc := fc.newScratch()
	for r := lo; r < hi; r++ {
		m := fc.margin(b, r, l, w, v, sc)
		y := b.Class[r] == 1
		lr, right := logLoss(m, y)
		loss += lr
		if right {
			correct++
		}
		if gw == nil {
			continue
		}
		fc.addGrad(b, r, l, v, logLossGrad(m, y), sc, gw, gv)
	}
	return loss, correct
}

// Evaluate scores rows lo..hi-1 of b into m.
func (fc Factors) Evaluate(b *Batch, lo, hi int, l Weights, w, v []float32, m *Metrics) {
	sc := fc.newScratch()
	for r := lo; r < hi; r++ {
		z := fc.margin(b, r, l, w, v, sc)
		m.addBinary(z, b.Class[r] == 1)
	}
}

// check reports data a factor model cannot use: MVM needs fields, and the
// fields must be views 0..Views-1.
func (fc Factors) check(d *Dataset, name string) error {
	if fc.Kind != kindMVM || d == nil || d.Len() == 0 {
		return nil
	}
	if d.Field == nil {
		return fmt.Errorf("%s: -model=mvm takes the views from the fields of libffm input (label field:feature:value ...); this data has none", name)
	}
	for _, f := range d.Field {
		if int(f) >= fc.Views {
			return fmt.Errorf("%s: field %d, but the job has views 0..%d", name, f, fc.Views-1)
		}
	}
	return nil
}

// initFactor returns the initial value of factor key k: a normal draw of
// standard deviation std, a function of k and seed alone, so that every
// server (and every replica of a range) starts a key alike without storing
// the keys never pushed.
func initFactor(k, seed uint64, std float64) float64 {
	a := splitmix(k ^ seed*0x9e3779b97f4a7c15)
	c := splitmix(a)
	u1 := (float64(a>>11) + 0.5) / (1 << 53)
	u2 := float64(c>>11) / (1 << 53)
	return std * math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// splitmix is the splitmix64 finaliser.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
