package ctr

import (
	"math"
	"runtime"
	"slices"
	"sync"
)

// Batch is a fixed set of rows with their features deduplicated once: the
// step that trains on it pulls and pushes the keys of Feats (and of the
// bias), and finds each entry's weights at its position Pos. Batches are
// built when a fold starts and reused every epoch.
type Batch struct {
	// Feats holds the distinct local feature indices of the rows, ascending
	// (so their keys are ascending too).
	Feats []int32
	// Row r's entries are Pos[Start[r]:Start[r+1]], each the position in
	// Feats of the entry's feature, with values Val[...] (nil: all 1).
	Start []int32
	Pos   []int32
	Val   []float32
	// Field holds each entry's field (nil: the data has none).
	Field []int32
	Class []int32
}

// Len returns the number of rows.
func (b *Batch) Len() int { return len(b.Class) }

// NewBatch builds the batch of the given rows of d. mark is scratch space
// with an entry per local feature of d, all -1; it is left that way.
func NewBatch(d *Dataset, rows []int, mark []int32) *Batch {
	b := &Batch{Start: make([]int32, 1, len(rows)+1), Class: make([]int32, 0, len(rows))}
	nnz := 0
	for _, r := range rows {
		nnz += d.Start[r+1] - d.Start[r]
	}
	b.Pos = make([]int32, 0, nnz)
	if d.Val != nil {
		b.Val = make([]float32, 0, nnz)
	}
	if d.Field != nil {
		b.Field = make([]int32, 0, nnz)
	}
	for _, r := range rows {
		idx, val := d.Row(r)
		for _, f := range idx {
			if mark[f] < 0 {
				mark[f] = 0
				b.Feats = append(b.Feats, f)
			}
		}
		b.Pos = append(b.Pos, idx...) // local indices for now
		if d.Val != nil {
			b.Val = append(b.Val, val...)
		}
		if d.Field != nil {
			b.Field = append(b.Field, d.Field[d.Start[r]:d.Start[r+1]]...)
		}
		b.Start = append(b.Start, int32(len(b.Pos)))
		b.Class = append(b.Class, d.Class[r])
	}
	slices.Sort(b.Feats)
	for i, f := range b.Feats {
		mark[f] = int32(i)
	}
	for i, f := range b.Pos {
		b.Pos[i] = mark[f]
	}
	for _, f := range b.Feats {
		mark[f] = -1
	}
	return b
}

// newMark returns scratch space for NewBatch over n features.
func newMark(n int) []int32 {
	m := make([]int32, n)
	for i := range m {
		m[i] = -1
	}
	return m
}

// Weights lays out the weights of a batch: with C outputs per feature and a
// bias (bias != 0), the bias's C weights come first, then C per feature of
// Feats. Its keys are built by appendKeys in the same order.
type Weights struct {
	C    int
	Bias float32
}

// base returns the position of Feats[0]'s first weight.
func (l Weights) base() int {
	if l.Bias != 0 {
		return l.C
	}
	return 0
}

// appendKeys appends the keys of b's weights: feature id f's output c has
// key off + f·C + c, the bias's id is 0.
func (l Weights) appendKeys(keys []uint64, feats []int32, ids []uint64, off uint64) []uint64 {
	C := uint64(l.C)
	if l.Bias != 0 {
		for c := uint64(0); c < C; c++ {
			keys = append(keys, off+c)
		}
	}
	for _, f := range feats {
		k := off + ids[f]*C
		for c := uint64(0); c < C; c++ {
			keys = append(keys, k+c)
		}
	}
	return keys
}

// LossGrad computes, for rows lo..hi-1 of b with the weights w (laid out by
// l), the summed log-loss and the number of rows predicted correctly; when
// grad is not nil it adds the summed gradient of the loss to it (same
// layout). One output is binary logistic regression (class 1 positive),
// more are softmax regression over that many classes.
//
// Logistic: loss = log(1+exp(-s·m)) with margin m = w·x and s = ±1, and
// gradient (σ(m) - y)·x. Softmax: loss = log Σ_c exp(m_c) - m_y, gradient
// (p_c - [c = y])·x for output c with p = softmax(m).
func LossGrad(b *Batch, lo, hi int, l Weights, w, grad []float32) (loss float64, correct int) {
	if l.C == 1 {
		return lossGradBinary(b, lo, hi, l, w, grad)
	}
	C := l.C
	base := l.base()
	z := make([]float64, C)
	bias := float64(l.Bias)
	for r := lo; r < hi; r++ {
		s, e := b.Start[r], b.Start[r+1]
		pos := b.Pos[s:e]
		for c := range z {
			z[c] = 0
		}
		if bias != 0 {
			for c := range z {
				z[c] = float64(w[c]) * bias
			}
		}
		if b.Val == nil {
			for _, p := range pos {
				ws := w[base+int(p)*C : base+int(p)*C+C]
				for c, wc := range ws {
					z[c] += float64(wc)
				}
			}
		} else {
			val := b.Val[s:e]
			for j, p := range pos {
				x := float64(val[j])
				ws := w[base+int(p)*C : base+int(p)*C+C]
				for c, wc := range ws {
					z[c] += float64(wc) * x
				}
			}
		}
		y := int(b.Class[r])
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
		if grad == nil {
			continue
		}
		for c := range z {
			z[c] = math.Exp(z[c] - lse)
		}
		z[y] -= 1
		if bias != 0 {
			for c := range z {
				grad[c] += float32(z[c] * bias)
			}
		}
		for j, p := range pos {
			x := 1.0
			if b.Val != nil {
				x = float64(b.Val[int(s)+j])
			}
			gs := grad[base+int(p)*C : base+int(p)*C+C]
			for c := range gs {
				gs[c] += float32(z[c] * x)
			}
		}
	}
	return loss, correct
}

// lossGradBinary is LossGrad for one output.
func lossGradBinary(b *Batch, lo, hi int, l Weights, w, grad []float32) (loss float64, correct int) {
	base := l.base()
	bias := float64(l.Bias)
	var wb float64
	if bias != 0 {
		wb = float64(w[0]) * bias
	}
	ws := w[base:]
	var gs []float32
	if grad != nil {
		gs = grad[base:]
	}
	for r := lo; r < hi; r++ {
		s, e := b.Start[r], b.Start[r+1]
		pos := b.Pos[s:e]
		m := wb
		if b.Val == nil {
			for _, p := range pos {
				m += float64(ws[p])
			}
		} else {
			val := b.Val[s:e]
			for j, p := range pos {
				m += float64(ws[p]) * float64(val[j])
			}
		}
		y := b.Class[r] == 1
		l, right := logLoss(m, y)
		loss += l
		if right {
			correct++
		}
		if grad == nil {
			continue
		}
		g := logLossGrad(m, y)
		if bias != 0 {
			grad[0] += float32(g * bias)
		}
		if b.Val == nil {
			g32 := float32(g)
			for _, p := range pos {
				gs[p] += g32
			}
		} else {
			val := b.Val[s:e]
			for j, p := range pos {
				gs[p] += float32(g * float64(val[j]))
			}
		}
	}
	return loss, correct
}

// parallelWork is the work (entries × outputs) from which a batch's
// gradient is split over the cores.
const parallelWork = 1 << 15

// BatchGrad is LossGrad over the whole batch, split over the cores (one
// part per core, each into its own gradient buffer, summed at the end) when
// the batch is large enough for that to pay; scratch keeps those buffers
// between calls.
func BatchGrad(b *Batch, l Weights, w, grad []float32, scratch *[][]float32) (float64, int) {
	return splitGrad(b, len(b.Pos)*l.C, grad, scratch, func(lo, hi int, g []float32) (float64, int) {
		return LossGrad(b, lo, hi, l, w, g)
	})
}

// splitGrad runs lossGrad over rows of b (work: their entries × outputs)
// with the gradient summed into grad, in one part per core, each into its
// own buffer, when the batch is large enough for that to pay; scratch
// keeps the buffers between calls.
func splitGrad(b *Batch, work int, grad []float32, scratch *[][]float32,
	lossGrad func(lo, hi int, grad []float32) (float64, int)) (float64, int) {
	n := b.Len()
	parts := min(runtime.GOMAXPROCS(0), n)
	// Summing a part's buffer costs about as much as len(grad) entries of
	// work; split only when each part's share is well above that.
	if parts < 2 || work < parallelWork || work/parts < 2*len(grad) {
		return lossGrad(0, n, grad)
	}
	for len(*scratch) < parts-1 {
		*scratch = append(*scratch, nil)
	}
	losses := make([]float64, parts)
	corrects := make([]int, parts)
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		lo, hi := p*n/parts, (p+1)*n/parts
		g := grad
		if p > 0 {
			buf := slices.Grow((*scratch)[p-1][:0], len(grad))[:len(grad)]
			clear(buf)
			(*scratch)[p-1] = buf
			g = buf
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			losses[p], corrects[p] = lossGrad(lo, hi, g)
		}()
	}
	wg.Wait()
	var loss float64
	var correct int
	for p := 0; p < parts; p++ {
		loss += losses[p]
		correct += corrects[p]
		if p > 0 {
			for i, v := range (*scratch)[p-1] {
				grad[i] += v
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

// AUC histograms: a binary model's margins are counted in aucBins bins over
// [-aucRange, aucRange] (outside: the end bins), separately for positive
// and negative examples. Workers add up their counts, and the area under
// the ROC curve comes from the sums, pairs in the same bin counting half.
// The bins are 0.01 wide in the margin; a model whose margins spread over
// more than a few hundredths loses well under 0.001 of AUC to them.
const (
	aucBins  = 4096
	aucRange = 20.0
)

// Metrics sums what an evaluation measures.
type Metrics struct {
	N, Correct float64
	LossSum    float64
	// Pos and Neg are the AUC histograms (binary models only).
	Pos, Neg []float64
}

// newMetrics returns empty metrics; with histograms for a binary model.
func newMetrics(binary bool) *Metrics {
	m := &Metrics{}
	if binary {
		m.Pos = make([]float64, aucBins)
		m.Neg = make([]float64, aucBins)
	}
	return m
}

// Loss returns the mean log-loss.
func (m *Metrics) Loss() float64 {
	if m.N == 0 {
		return 0
	}
	return m.LossSum / m.N
}

// Acc returns the accuracy.
func (m *Metrics) Acc() float64 {
	if m.N == 0 {
		return 0
	}
	return m.Correct / m.N
}

// AUC returns the area under the ROC curve from the histograms, or NaN
// without them or without examples of both classes.
func (m *Metrics) AUC() float64 {
	if m.Pos == nil {
		return math.NaN()
	}
	var pos, neg, area float64
	// Walk from the lowest margin up: each positive ranks above every
	// negative counted before it, and ties with those of its own bin.
	for i := range m.Pos {
		area += m.Pos[i] * (neg + m.Neg[i]/2)
		neg += m.Neg[i]
		pos += m.Pos[i]
	}
	if pos == 0 || neg == 0 {
		return math.NaN()
	}
	return area / (pos * neg)
}

// add counts a binary example with margin z and class y into the
// histograms.
func (m *Metrics) add(z float64, y bool) {
	i := int((z + aucRange) / (2 * aucRange) * aucBins)
	i = max(0, min(aucBins-1, i))
	if y {
		m.Pos[i]++
	} else {
		m.Neg[i]++
	}
}

// Merge adds o into m.
func (m *Metrics) Merge(o *Metrics) {
	m.N += o.N
	m.Correct += o.Correct
	m.LossSum += o.LossSum
	if m.Pos != nil && o.Pos != nil {
		for i := range m.Pos {
			m.Pos[i] += o.Pos[i]
			m.Neg[i] += o.Neg[i]
		}
	}
}

// Evaluate scores rows lo..hi-1 of b with w (laid out by l) into m.
func Evaluate(b *Batch, lo, hi int, l Weights, w []float32, m *Metrics) {
	if l.C > 1 {
		loss, correct := LossGrad(b, lo, hi, l, w, nil)
		m.LossSum += loss
		m.Correct += float64(correct)
		m.N += float64(hi - lo)
		return
	}
	base := l.base()
	var wb float64
	if l.Bias != 0 {
		wb = float64(w[0]) * float64(l.Bias)
	}
	ws := w[base:]
	for r := lo; r < hi; r++ {
		s, e := b.Start[r], b.Start[r+1]
		z := wb
		if b.Val == nil {
			for _, p := range b.Pos[s:e] {
				z += float64(ws[p])
			}
		} else {
			for j, p := range b.Pos[s:e] {
				z += float64(ws[p]) * float64(b.Val[int(s)+j])
			}
		}
		m.addBinary(z, b.Class[r] == 1)
	}
}

// addBinary counts a binary example with margin z and class y: its loss,
// whether it was predicted right, and its place in the histograms.
func (m *Metrics) addBinary(z float64, y bool) {
	l, right := logLoss(z, y)
	m.LossSum += l
	if right {
		m.Correct++
	}
	m.N++
	m.add(z, y)
}

// logLoss returns the logistic loss log(1+exp(-s·m)) of margin m for class
// y (s = ±1), and whether m predicts y.
func logLoss(m float64, y bool) (loss float64, right bool) {
	sign := -1.0
	if y {
		sign = 1
	}
	return softplus(-sign * m), (m > 0) == y
}

// logLossGrad returns the derivative of logLoss in the margin: σ(m) - y.
func logLossGrad(m float64, y bool) float64 {
	g := sigmoid(m)
	if y {
		g--
	}
	return g
}

// EvaluateAll is Evaluate over the whole batch, split over the cores.
func EvaluateAll(b *Batch, l Weights, w []float32, binary bool) *Metrics {
	return evaluateAll(b, binary, func(lo, hi int, m *Metrics) { Evaluate(b, lo, hi, l, w, m) })
}

// evaluateAll runs eval over the rows of b, split over the cores.
func evaluateAll(b *Batch, binary bool, eval func(lo, hi int, m *Metrics)) *Metrics {
	n := b.Len()
	parts := max(1, min(runtime.GOMAXPROCS(0), n/1024))
	ms := make([]*Metrics, parts)
	var wg sync.WaitGroup
	for p := range ms {
		ms[p] = newMetrics(binary)
		wg.Add(1)
		go func() {
			defer wg.Done()
			eval(p*n/parts, (p+1)*n/parts, ms[p])
		}()
	}
	wg.Wait()
	for _, m := range ms[1:] {
		ms[0].Merge(m)
	}
	return ms[0]
}
