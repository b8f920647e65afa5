package psf

import (
	"errors"
	"fmt"
	"math"
)

// rowParam is the parameter of most built-in functions: the rows they work
// on, scalars, and a seed.
type rowParam struct {
	Rows    []int
	Scalars []float64
	Seed    uint64
}

var rowParamCodec = NewCodec(func(e *Encoder, p rowParam) {
	e.Ints(p.Rows)
	e.Float64s(p.Scalars)
	e.Uint64(p.Seed)
}, func(d *Decoder) rowParam {
	return rowParam{Rows: d.Ints(), Scalars: d.Float64s(), Seed: d.Uint64()}
})

// shape checks that a built-in function got the number of rows and scalars
// it needs (a worker of another version, or a forged request, may not).
func (p rowParam) shape(rows, scalars int) error {
	if len(p.Rows) != rows || len(p.Scalars) != scalars {
		return fmt.Errorf("%w: %d rows and %d scalars (want %d and %d)", ErrBadRequest, len(p.Rows), len(p.Scalars), rows, scalars)
	}
	return nil
}

// rowsOf returns the values of p's rows in b, after checking the shape.
func rowsOf(b *Block, p rowParam, rows, scalars int) ([][]float64, error) {
	if err := p.shape(rows, scalars); err != nil {
		return nil, err
	}
	return b.Rows(p.Rows...)
}

// acc is a compensated (Neumaier) sum. Once the running sum is not finite
// (an infinity or NaN was added, or the sum overflowed) the correction is
// dropped and the sum follows IEEE arithmetic: the correction term would
// compute Inf-Inf, a NaN that plain summation does not give.
type acc struct{ s, c float64 }

func (a *acc) add(x float64) {
	t := a.s + x
	if math.IsInf(t, 0) || math.IsNaN(t) {
		a.s, a.c = t, 0
		return
	}
	if math.Abs(a.s) >= math.Abs(x) {
		a.c += (a.s - t) + x
	} else {
		a.c += (x - t) + a.s
	}
	a.s = t
}

func (a *acc) sum() float64 {
	if math.IsInf(a.s, 0) || math.IsNaN(a.s) {
		return a.s
	}
	return a.s + a.c
}

// block is the number of terms summed plainly (four interleaved sums)
// before the block's sum joins the compensated total: the error stays
// within about block*eps of the sum of magnitudes, at the speed of a plain
// loop.
//
// The loops below are written out for each aggregate, not shared through
// a function value: a call per element would cost several times the
// arithmetic.
const block = 256

// sumOf returns the sum of x.
func sumOf(x []float64) float64 {
	var a acc
	for len(x) > 0 {
		n := min(block, len(x))
		xx := x[:n]
		var s0, s1, s2, s3 float64
		i := 0
		for ; i+4 <= n; i += 4 {
			s0 += xx[i]
			s1 += xx[i+1]
			s2 += xx[i+2]
			s3 += xx[i+3]
		}
		for ; i < n; i++ {
			s0 += xx[i]
		}
		a.add((s0 + s1) + (s2 + s3))
		x = x[n:]
	}
	return a.sum()
}

// asumOf returns the sum of |x[i]|.
func asumOf(x []float64) float64 {
	var a acc
	for len(x) > 0 {
		n := min(block, len(x))
		xx := x[:n]
		var s0, s1, s2, s3 float64
		i := 0
		for ; i+4 <= n; i += 4 {
			s0 += math.Abs(xx[i])
			s1 += math.Abs(xx[i+1])
			s2 += math.Abs(xx[i+2])
			s3 += math.Abs(xx[i+3])
		}
		for ; i < n; i++ {
			s0 += math.Abs(xx[i])
		}
		a.add((s0 + s1) + (s2 + s3))
		x = x[n:]
	}
	return a.sum()
}

// ssqOf returns the sum of x[i]^2 (which may overflow or underflow; see
// nrm2Partial).
func ssqOf(x []float64) float64 {
	var a acc
	for len(x) > 0 {
		n := min(block, len(x))
		xx := x[:n]
		var s0, s1, s2, s3 float64
		i := 0
		for ; i+4 <= n; i += 4 {
			s0 += xx[i] * xx[i]
			s1 += xx[i+1] * xx[i+1]
			s2 += xx[i+2] * xx[i+2]
			s3 += xx[i+3] * xx[i+3]
		}
		for ; i < n; i++ {
			s0 += xx[i] * xx[i]
		}
		a.add((s0 + s1) + (s2 + s3))
		x = x[n:]
	}
	return a.sum()
}

// dotOf returns the sum of x[i]*y[i], like sumOf; len(y) >= len(x).
func dotOf(x, y []float64) float64 {
	var a acc
	for len(x) > 0 {
		n := min(block, len(x))
		var s0, s1, s2, s3 float64
		xx, yy := x[:n], y[:n]
		i := 0
		for ; i+4 <= n; i += 4 {
			s0 += xx[i] * yy[i]
			s1 += xx[i+1] * yy[i+1]
			s2 += xx[i+2] * yy[i+2]
			s3 += xx[i+3] * yy[i+3]
		}
		for ; i < n; i++ {
			s0 += xx[i] * yy[i]
		}
		a.add((s0 + s1) + (s2 + s3))
		x, y = x[n:], y[n:]
	}
	return a.sum()
}

// dotZeros returns the dot product of x with a row of zeros: 0, or NaN if
// x holds an infinity or a NaN (0*Inf is NaN).
func dotZeros(x []float64) float64 {
	for _, v := range x {
		if v-v != 0 { // Inf-Inf and NaN-NaN are NaN
			return math.NaN()
		}
	}
	return 0
}

// The folds use the built-in max and min, which, unlike a comparison, give
// NaN if any value is NaN and order -0 below +0 (as math.Max and math.Min
// do, except that math.Max(+Inf, NaN) is +Inf).

// maxOf returns the largest value of x (-Inf for none).
func maxOf(x []float64) float64 {
	m0, m1, m2, m3 := math.Inf(-1), math.Inf(-1), math.Inf(-1), math.Inf(-1)
	i := 0
	for ; i+4 <= len(x); i += 4 {
		m0 = max(m0, x[i])
		m1 = max(m1, x[i+1])
		m2 = max(m2, x[i+2])
		m3 = max(m3, x[i+3])
	}
	for ; i < len(x); i++ {
		m0 = max(m0, x[i])
	}
	return max(m0, m1, m2, m3)
}

// minOf returns the smallest value of x (+Inf for none).
func minOf(x []float64) float64 {
	m0, m1, m2, m3 := math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)
	i := 0
	for ; i+4 <= len(x); i += 4 {
		m0 = min(m0, x[i])
		m1 = min(m1, x[i+1])
		m2 = min(m2, x[i+2])
		m3 = min(m3, x[i+3])
	}
	for ; i < len(x); i++ {
		m0 = min(m0, x[i])
	}
	return min(m0, m1, m2, m3)
}

// amaxOf returns the largest |x[i]| (0 for none; NaN if x holds one). It
// compares the bits shifted left by one, which drops the sign: for
// |x| these order like the values, and a NaN's are above +Inf's, so it
// wins, as with max. Integers are compared without branches and without
// moving each value between the float and integer registers for math.Abs.
func amaxOf(x []float64) float64 {
	var m0, m1, m2, m3 uint64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		m0 = max(m0, math.Float64bits(x[i])<<1)
		m1 = max(m1, math.Float64bits(x[i+1])<<1)
		m2 = max(m2, math.Float64bits(x[i+2])<<1)
		m3 = max(m3, math.Float64bits(x[i+3])<<1)
	}
	for ; i < len(x); i++ {
		m0 = max(m0, math.Float64bits(x[i])<<1)
	}
	return math.Float64frombits(max(m0, m1, m2, m3) >> 1)
}

// aminOf returns the smallest |x[i]| (+Inf for none).
func aminOf(x []float64) float64 {
	m0, m1, m2, m3 := math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)
	i := 0
	for ; i+4 <= len(x); i += 4 {
		m0 = min(m0, math.Abs(x[i]))
		m1 = min(m1, math.Abs(x[i+1]))
		m2 = min(m2, math.Abs(x[i+2]))
		m3 = min(m3, math.Abs(x[i+3]))
	}
	for ; i < len(x); i++ {
		m0 = min(m0, math.Abs(x[i]))
	}
	return min(m0, m1, m2, m3)
}

// nnzOf returns the number of non-zero values of x (NaN counts).
func nnzOf(x []float64) int64 {
	var n0, n1, n2, n3 int64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		if x[i] != 0 {
			n0++
		}
		if x[i+1] != 0 {
			n1++
		}
		if x[i+2] != 0 {
			n2++
		}
		if x[i+3] != 0 {
			n3++
		}
	}
	for ; i < len(x); i++ {
		if x[i] != 0 {
			n0++
		}
	}
	return n0 + n1 + n2 + n3
}

// peekRows returns the storage of p's rows in b, nil for rows never
// written, after checking the shape; a kernel must not change them.
func peekRows(b *Block, p rowParam, rows, scalars int) ([][]float64, error) {
	if err := p.shape(rows, scalars); err != nil {
		return nil, err
	}
	out := make([][]float64, rows)
	for i, r := range p.Rows {
		x, err := b.peek(r)
		if err != nil {
			return nil, err
		}
		out[i] = x
	}
	return out, nil
}

// rowAgg registers a get kernel computing f on one row, or returning zero
// (f's value on a row of zeros) for a row never written. On a sparse row
// it folds f with merge over the table's slots (sparseFold).
func rowAgg[Q any](name string, result Codec[Q], zero Q, f func(x []float64) Q, merge func(a, b Q) Q) *GetKernel[rowParam, Q] {
	return MustRegister(NewGetKernel(name, rowParamCodec, result, func(b *Block, p rowParam) (Q, error) {
		if err := p.shape(1, 0); err != nil {
			return zero, err
		}
		if b.sparse() {
			t, err := b.table(p.Rows[0])
			if err != nil || t == nil {
				return zero, err
			}
			return sparseFold(t, f, merge), nil
		}
		x, err := b.peek(p.Rows[0])
		if err != nil || x == nil {
			return zero, err
		}
		return f(x), nil
	}))
}

// oneZero is a column of a sparse partition that is not stored: a
// partition has 2^64/NumServers columns, so it always has some.
var oneZero = [1]float64{}

// sparseFold computes an aggregate f of a sparse row in one partition: f
// over the table's slots (the empty ones hold +0, values of columns not
// stored), over a 0 for the columns not stored (a table without slots
// has none to show), and over the entry of column 0 in its side slot,
// merged by merge. The specialised loops of the dense rows run on the
// slots.
func sparseFold[Q any](t *longTable[float64], f func([]float64) Q, merge func(a, b Q) Q) Q {
	q := merge(f(t.vals), f(oneZero[:]))
	if t.hasZero {
		q = merge(q, f([]float64{t.zeroVal}))
	}
	return q
}

func addF(a, b float64) float64 { return a + b }
func addI(a, b int64) int64     { return a + b }

func nrm2Fold(a, b []float64) []float64 {
	s, q := combineNrm2(a[0], a[1], b[0], b[1])
	return []float64{s, q}
}

// Kernels of the aggregates. Each computes a partial result on a block; the
// worker half merges the partials. A row never written is all zeros, known
// without reading it.
var (
	kSum  = rowAgg("psf.Sum", Float64, 0, sumOf, addF)
	kAsum = rowAgg("psf.Asum", Float64, 0, asumOf, addF)
	kMax  = rowAgg("psf.Max", Float64, 0, maxOf, maxMerge)
	kMin  = rowAgg("psf.Min", Float64, 0, minOf, minMerge)
	kAmax = rowAgg("psf.Amax", Float64, 0, amaxOf, maxMerge)
	kAmin = rowAgg("psf.Amin", Float64, 0, aminOf, minMerge)
	kNnz  = rowAgg("psf.Nnz", Int64, 0, nnzOf, addI)
	kNrm2 = rowAgg("psf.Nrm2", Float64s, []float64{0, 1}, func(x []float64) []float64 {
		scale, ssq := nrm2Partial(x)
		return []float64{scale, ssq}
	}, nrm2Fold)
	kDot = MustRegister(NewGetKernel("psf.Dot", rowParamCodec, Float64, func(b *Block, p rowParam) (float64, error) {
		if b.sparse() {
			ts, err := sparseRows(b, p, 2, 0)
			if err != nil {
				return 0, err
			}
			return sparseDot(ts[0], ts[1]), nil
		}
		xs, err := peekRows(b, p, 2, 0)
		if err != nil {
			return 0, err
		}
		switch x, y := xs[0], xs[1]; {
		case x == nil && y == nil:
			return 0, nil
		case x == nil:
			return dotZeros(y), nil
		case y == nil:
			return dotZeros(x), nil
		default:
			return dotOf(x, y), nil
		}
	}))
	kEqual = MustRegister(NewGetKernel("psf.Equal", rowParamCodec, Bool, func(b *Block, p rowParam) (bool, error) {
		if b.sparse() {
			ts, err := sparseRows(b, p, 2, 0)
			if err != nil {
				return false, err
			}
			return sparseEqual(ts[0], ts[1]), nil
		}
		xs, err := peekRows(b, p, 2, 0)
		if err != nil {
			return false, err
		}
		x, y := xs[0], xs[1]
		switch {
		case x == nil && y == nil:
			return true, nil
		case x == nil:
			x, y = y, nil
		}
		if y == nil {
			return nnzOf(x) == 0, nil
		}
		for i, v := range x {
			if v != y[i] {
				return false, nil
			}
		}
		return true, nil
	}))
	kSize = MustRegister(NewGetKernel("psf.Size", rowParamCodec, Int64, func(b *Block, p rowParam) (int64, error) {
		if b.sparse() {
			ts, err := sparseRows(b, p, 1, 0)
			if err != nil {
				return 0, err
			}
			return int64(ts[0].Len()), nil
		}
		if _, err := peekRows(b, p, 1, 0); err != nil {
			return 0, err
		}
		return int64(b.Partition().Width()), nil
	}))
	kPull = MustRegister(NewGetKernel("psf.Pull", rowParamCodec, Float64s, func(b *Block, p rowParam) ([]float64, error) {
		if b.sparse() {
			return nil, errPullSparse
		}
		xs, err := rowsOf(b, p, 1, 0)
		if err != nil {
			return nil, err
		}
		return xs[0], nil
	}))
	kPullRows = MustRegister(NewGetKernel("psf.PullRows", rowParamCodec, Float64s, func(b *Block, p rowParam) ([]float64, error) {
		if b.sparse() {
			return nil, errPullSparse
		}
		if len(p.Scalars) != 0 || len(p.Rows) == 0 {
			return nil, fmt.Errorf("%w: %d rows and %d scalars", ErrBadRequest, len(p.Rows), len(p.Scalars))
		}
		w := b.Partition().Width()
		if len(p.Rows) > maxPayload/8/w {
			return nil, fmt.Errorf("%w: %d rows of %d columns do not fit one message", ErrBadRequest, len(p.Rows), w)
		}
		out := make([]float64, 0, len(p.Rows)*w)
		for _, r := range p.Rows {
			x, err := b.Row(r)
			if err != nil {
				return nil, err
			}
			out = append(out, x...)
		}
		return out, nil
	}))
	// kPullAt returns the values of rows (one or more) at columns, row by
	// row.
	kPullAt = MustRegister(NewGetKernel("psf.PullAt", arrayParamCodec, Float64s, func(b *Block, p arrayParam) ([]float64, error) {
		if len(p.Rows) == 0 || len(p.Vals) != 0 {
			return nil, fmt.Errorf("%w: %d rows and %d values (want some rows and no values)", ErrBadRequest, len(p.Rows), len(p.Vals))
		}
		if len(p.Cols) > 0 && len(p.Rows) > maxPayload/8/len(p.Cols) {
			return nil, fmt.Errorf("%w: %d rows at %d columns do not fit one message", ErrBadRequest, len(p.Rows), len(p.Cols))
		}
		pm := b.Partition()
		for _, c := range p.Cols {
			if !pm.HasCol(c) {
				return nil, fmt.Errorf("%w: column %d is not in %s", ErrBadRequest, c, pm)
			}
		}
		out := make([]float64, 0, len(p.Rows)*len(p.Cols))
		for _, r := range p.Rows {
			if b.sparse() {
				t, err := b.table(r)
				if err != nil {
					return nil, err
				}
				for _, c := range p.Cols {
					v, _ := t.Get(c)
					out = append(out, v)
				}
				continue
			}
			x, err := b.peek(r)
			if err != nil {
				return nil, err
			}
			for _, c := range p.Cols {
				if x == nil {
					out = append(out, 0)
				} else {
					out = append(out, x[c-pm.ColStart])
				}
			}
		}
		return out, nil
	}))
	// kPullSparse returns the entries of rows that are not +0, sorted by
	// column, one vector per row.
	kPullSparse = MustRegister(NewGetKernel("psf.PullSparse", rowParamCodec, sparseVectorsCodec, func(b *Block, p rowParam) ([]SparseVector, error) {
		if len(p.Scalars) != 0 || len(p.Rows) == 0 {
			return nil, fmt.Errorf("%w: %d rows and %d scalars", ErrBadRequest, len(p.Rows), len(p.Scalars))
		}
		total := 0
		for _, r := range p.Rows {
			n := b.Partition().Width()
			if b.sparse() {
				t, err := b.table(r)
				if err != nil {
					return nil, err
				}
				n = t.Len()
			}
			if total += n; total > maxPayload/17 {
				return nil, fmt.Errorf("%w: %d rows of up to %d entries do not fit one message; ask for fewer rows", ErrBadRequest, len(p.Rows), total)
			}
		}
		out := make([]SparseVector, len(p.Rows))
		for j, r := range p.Rows {
			if b.sparse() {
				t, err := b.table(r)
				if err != nil {
					return nil, err
				}
				out[j] = sortedEntries(t)
				continue
			}
			x, err := b.peek(r)
			if err != nil {
				return nil, err
			}
			v := SparseVector{Indices: []int64{}, Values: []float64{}}
			c0 := b.Partition().ColStart
			for i, x := range x {
				if !isPosZero(x) {
					v.Indices = append(v.Indices, c0+int64(i))
					v.Values = append(v.Values, x)
				}
			}
			out[j] = v
		}
		return out, nil
	}))
)

// errPullSparse is the server's answer to Pull and PullRows on a sparse
// matrix.
var errPullSparse = fmt.Errorf("%w: its rows have 2^64 columns; use PullSparse (Matrix.GetSparseRow)", ErrSparse)

// sparseRows returns the tables of p's rows in a sparse block (nil for
// rows holding nothing), after checking the shape.
func sparseRows(b *Block, p rowParam, rows, scalars int) ([]*longTable[float64], error) {
	if err := p.shape(rows, scalars); err != nil {
		return nil, err
	}
	return b.tables(p.Rows)
}

// sparseDot returns the dot product of two sparse rows in one partition,
// like dotOf: over the entries of the smaller, looked up in the other,
// summed in blocks; a column where one row holds an infinity or NaN and the
// other nothing gives NaN (0*Inf), as for dense rows.
func sparseDot(x, y *longTable[float64]) float64 {
	if x.Len() > y.Len() {
		x, y = y, x
	}
	var a acc
	var s float64
	n := 0
	for k, v := range x.All {
		w, _ := y.Get(k)
		s += v * w
		if n++; n == block {
			a.add(s)
			s, n = 0, 0
		}
	}
	a.add(s)
	if y != nil && (!finite(y.vals) || y.hasZero && y.zeroVal-y.zeroVal != 0) {
		for k, w := range y.All {
			if w-w != 0 {
				if _, ok := x.Get(k); !ok {
					return math.NaN()
				}
			}
		}
	}
	return a.sum()
}

// finite reports whether every value of x is finite.
func finite(x []float64) bool {
	var s float64
	for _, v := range x {
		s += v - v // 0 for finite values, NaN otherwise
	}
	return s == 0
}

// sparseEqual reports whether two sparse rows hold the same values at every
// column (-0 equals 0, NaN equals nothing).
func sparseEqual(x, y *longTable[float64]) bool {
	for k, v := range x.All {
		if w, _ := y.Get(k); v != w {
			return false
		}
	}
	for k, w := range y.All {
		if v, _ := x.Get(k); v != w {
			return false
		}
	}
	return true
}

// nrm2Partial returns (scale, ssq) with sum(x^2) = scale^2 * ssq, computed
// directly when that neither overflows nor underflows, else with LAPACK's
// scaling. Like math.Hypot, an infinity gives +Inf even with NaNs around,
// and otherwise a NaN gives NaN.
func nrm2Partial(xs []float64) (float64, float64) {
	s := ssqOf(xs)
	if s > 0x1p-900 && s < 0x1p900 {
		return 1, s
	}
	var scale, ssq float64 = 0, 1
	nan := false
	for _, x := range xs {
		ax := math.Abs(x)
		switch {
		case ax == 0:
		case math.IsInf(ax, 1):
			return ax, 1
		case math.IsNaN(ax):
			nan = true
		case scale < ax:
			ssq = 1 + ssq*(scale/ax)*(scale/ax)
			scale = ax
		default:
			ssq += (ax / scale) * (ax / scale)
		}
	}
	if nan {
		return math.NaN(), 1
	}
	return scale, ssq
}

// combineNrm2 merges two (scale, ssq) partials.
func combineNrm2(s1, q1, s2, q2 float64) (float64, float64) {
	switch {
	case math.IsInf(s1, 1) || math.IsInf(s2, 1):
		return math.Inf(1), 1
	case math.IsNaN(s1) || math.IsNaN(s2):
		return math.NaN(), 1
	case s2 == 0:
		return s1, q1
	case s1 == 0:
		return s2, q2
	case s1 >= s2:
		return s1, q1 + q2*(s2/s1)*(s2/s1)
	default:
		return s2, q2 + q1*(s1/s2)*(s1/s2)
	}
}

// rowFunc is a get function over rows whose partials are merged by merge.
func rowFunc[Q, R any](k *GetKernel[rowParam, Q], p rowParam, merge func(parts []Part[Q]) (R, error)) GetFunc[R] {
	return NewGet(k, func(m *MatrixMeta) ([]Part[rowParam], error) {
		return SplitRows(m, p, p.Rows...)
	}, func(_ *MatrixMeta, parts []Part[Q]) (R, error) { return merge(parts) })
}

func sumMerge(parts []Part[float64]) (float64, error) {
	var a acc
	for _, p := range parts {
		a.add(p.Value)
	}
	return a.sum(), nil
}

func maxMerge(a, b float64) float64 { return max(a, b) }
func minMerge(a, b float64) float64 { return min(a, b) }

func foldMerge(f func(a, b float64) float64) func(parts []Part[float64]) (float64, error) {
	return func(parts []Part[float64]) (float64, error) {
		if len(parts) == 0 {
			return 0, nil
		}
		m := parts[0].Value
		for _, p := range parts[1:] {
			m = f(m, p.Value)
		}
		return m, nil
	}
}

func countMerge(parts []Part[int64]) (int64, error) {
	var n int64
	for _, p := range parts {
		n += p.Value
	}
	return n, nil
}

// Sum returns the sum of row's values (compensated summation).
func Sum(row int) GetFunc[float64] {
	return rowFunc(kSum, rowParam{Rows: []int{row}}, sumMerge)
}

// Asum returns the sum of the absolute values of row.
func Asum(row int) GetFunc[float64] {
	return rowFunc(kAsum, rowParam{Rows: []int{row}}, sumMerge)
}

// Max returns the largest value of row (NaN if it holds one; +0 is
// larger than -0). The columns a sparse row does not store count as 0: Max
// of a sparse row of negative values is 0.
func Max(row int) GetFunc[float64] {
	return rowFunc(kMax, rowParam{Rows: []int{row}}, foldMerge(maxMerge))
}

// Min returns the smallest value of row (NaN if it holds one; -0 is
// smaller than +0), counting the columns a sparse row does not store as 0.
func Min(row int) GetFunc[float64] {
	return rowFunc(kMin, rowParam{Rows: []int{row}}, foldMerge(minMerge))
}

// Amax returns the largest absolute value of row (0 for a row of zeros,
// NaN if it holds one).
func Amax(row int) GetFunc[float64] {
	return rowFunc(kAmax, rowParam{Rows: []int{row}}, foldMerge(maxMerge))
}

// Amin returns the smallest absolute value of row (NaN if it holds one; 0
// for a sparse row otherwise, which always has columns not stored).
func Amin(row int) GetFunc[float64] {
	return rowFunc(kAmin, rowParam{Rows: []int{row}}, foldMerge(minMerge))
}

// Nnz returns the number of non-zero values of row.
func Nnz(row int) GetFunc[int64] {
	return rowFunc(kNnz, rowParam{Rows: []int{row}}, countMerge)
}

// Size returns the number of values of row, counted by the partitions: the
// matrix's columns for a dense matrix, the entries stored (those that are
// not +0) for a sparse one, whose 2^64 columns do not fit an int64.
func Size(row int) GetFunc[int64] {
	return rowFunc(kSize, rowParam{Rows: []int{row}}, countMerge)
}

// Nrm2 returns the Euclidean norm of row, without overflow or underflow in
// the intermediate sums.
func Nrm2(row int) GetFunc[float64] {
	return rowFunc(kNrm2, rowParam{Rows: []int{row}}, func(parts []Part[[]float64]) (float64, error) {
		var scale, ssq float64 = 0, 1
		for _, p := range parts {
			if len(p.Value) != 2 {
				return 0, fmt.Errorf("psf: Nrm2: bad partial result from %s", p.Partition)
			}
			scale, ssq = combineNrm2(scale, ssq, p.Value[0], p.Value[1])
		}
		return scale * math.Sqrt(ssq), nil
	})
}

// Dot returns the dot product of rows a and b, which must be colocated
// (see MatrixMeta.Colocated).
func Dot(a, b int) GetFunc[float64] {
	return rowFunc(kDot, rowParam{Rows: []int{a, b}}, sumMerge)
}

// Equal reports whether rows a and b hold the same values (exactly; NaN
// equals nothing). They must be colocated.
func Equal(a, b int) GetFunc[bool] {
	return rowFunc(kEqual, rowParam{Rows: []int{a, b}}, func(parts []Part[bool]) (bool, error) {
		for _, p := range parts {
			if !p.Value {
				return false, nil
			}
		}
		return true, nil
	})
}

// Pull returns the values of row of a dense matrix (on a sparse one it
// fails with ErrSparse: use PullSparse).
func Pull(row int) GetFunc[[]float64] {
	return NewGet(kPull, func(m *MatrixMeta) ([]Part[rowParam], error) {
		if m.Type == Sparse {
			return nil, errSparse("psf.Pull", m, "its rows have 2^64 columns; use PullSparse (Matrix.GetSparseRow)")
		}
		return SplitRows(m, rowParam{Rows: []int{row}}, row)
	}, func(m *MatrixMeta, parts []Part[[]float64]) ([]float64, error) {
		out := make([]float64, m.Cols)
		if err := placeParts(m, parts, 1, func(_ int, p PartitionMeta) []float64 { return out[p.ColStart:p.ColEnd] }); err != nil {
			return nil, err
		}
		return out, nil
	})
}

// placeParts checks that every partition of a row is there once, with n
// rows of values, and copies row i of each into dst(i, partition).
func placeParts(m *MatrixMeta, parts []Part[[]float64], n int, dst func(i int, p PartitionMeta) []float64) error {
	seen := make(map[int64]bool)
	for _, p := range parts {
		pm := p.Partition
		w := pm.Width()
		if len(p.Value) != n*w {
			return fmt.Errorf("psf: %d values from %s, want %d", len(p.Value), pm, n*w)
		}
		for i := 0; i < n; i++ {
			copy(dst(i, pm), p.Value[i*w:(i+1)*w])
		}
		seen[pm.ColStart] = true
	}
	if int64(len(seen)) != m.NumColBlocks() {
		return fmt.Errorf("psf: got %d of %d column blocks", len(seen), m.NumColBlocks())
	}
	return nil
}

// PullRows returns the values of rows of a dense matrix (in the order
// given; rows may repeat and may lie in different row blocks). On a sparse
// matrix it fails with ErrSparse: use PullSparseRows.
func PullRows(rows []int) GetFunc[[][]float64] {
	rows = append([]int(nil), rows...)
	return NewGet(kPullRows, func(m *MatrixMeta) ([]Part[rowParam], error) {
		if m.Type == Sparse {
			return nil, errSparse("psf.PullRows", m, "its rows have 2^64 columns; use PullSparseRows (Matrix.GetSparseRows)")
		}
		return splitRowBlocks(m, rows)
	}, func(m *MatrixMeta, parts []Part[[]float64]) ([][]float64, error) {
		out := make([][]float64, len(rows))
		pos := make(map[int][]int) // row block -> positions in rows, in order
		for i, r := range rows {
			pos[r/m.RowBlock] = append(pos[r/m.RowBlock], i)
		}
		filled := 0
		for _, p := range parts {
			pm := p.Partition
			ps := pos[pm.RowStart/m.RowBlock]
			w := pm.Width()
			if len(p.Value) != len(ps)*w {
				return nil, fmt.Errorf("psf: %d values from %s, want %d", len(p.Value), pm, len(ps)*w)
			}
			for i, j := range ps {
				if out[j] == nil {
					out[j] = make([]float64, m.Cols)
				}
				copy(out[j][pm.ColStart:pm.ColEnd], p.Value[i*w:(i+1)*w])
				filled += w
			}
		}
		if int64(filled) != int64(len(rows))*m.Cols {
			return nil, fmt.Errorf("psf: pulled %d of %d values", filled, int64(len(rows))*m.Cols)
		}
		return out, nil
	})
}

// arrayParam is the parameter of functions with values from the worker:
// Rows, and either Vals for the partition's whole width per row (Cols nil)
// or one value per global column in Cols (one row).
type arrayParam struct {
	Rows []int
	Cols []int64
	Vals []float64
}

var arrayParamCodec = NewCodec(func(e *Encoder, p arrayParam) {
	e.Ints(p.Rows)
	e.Int64s(p.Cols)
	e.Float64s(p.Vals)
}, func(d *Decoder) arrayParam {
	return arrayParam{Rows: d.Ints(), Cols: d.Int64s(), Vals: d.Float64s()}
})

// splitRowBlocks is the split of functions over rows in any row blocks:
// for each row block, a part for each of its partitions with the rows of
// rows in that block, in order.
func splitRowBlocks(m *MatrixMeta, rows []int) ([]Part[rowParam], error) {
	if len(rows) == 0 {
		return nil, errors.New("psf: no rows")
	}
	if err := m.CheckRows(rows...); err != nil {
		return nil, err
	}
	groups := m.rowsByBlock(rows)
	var out []Part[rowParam]
	for _, rb := range sortedKeys(groups) {
		for _, p := range m.RowPartitions(groups[rb][0]) {
			out = append(out, Part[rowParam]{Partition: p, Value: rowParam{Rows: groups[rb]}})
		}
	}
	return out, nil
}

// splitCols groups global columns of row by partition: for each partition,
// the positions (in cols) of its columns.
func splitCols[I int | int64](m *MatrixMeta, row int, cols []I) (map[int][]int, error) {
	if err := m.CheckRows(row); err != nil {
		return nil, err
	}
	groups, err := colBlocks(m, cols)
	if err != nil {
		return nil, err
	}
	base := row / m.RowBlock * int(m.NumColBlocks())
	out := make(map[int][]int)
	for cb, pos := range groups {
		if len(pos) > 0 {
			out[base+cb] = pos
		}
	}
	return out, nil
}

// colBlocks groups columns by column block: for each block (index), the
// positions (in cols) of its columns, in order. Columns a dense matrix
// does not have are an error.
func colBlocks[I int | int64](m *MatrixMeta, cols []I) ([][]int, error) {
	groups := make([][]int, m.NumColBlocks())
	for i, c := range cols {
		if err := m.checkCol(int64(c)); err != nil {
			return nil, err
		}
		cb := m.ColBlockOf(int64(c))
		groups[cb] = append(groups[cb], i)
	}
	return groups, nil
}

// PullAt returns the values of row at columns cols (any order, repeats
// allowed).
func PullAt[I int | int64](row int, cols []I) GetFunc[[]float64] {
	cols = append([]I(nil), cols...)
	return NewGet(kPullAt, func(m *MatrixMeta) ([]Part[arrayParam], error) {
		groups, err := splitCols(m, row, cols)
		if err != nil {
			return nil, err
		}
		out := make([]Part[arrayParam], 0, len(groups))
		for _, id := range sortedKeys(groups) {
			pos := groups[id]
			cs := make([]int64, len(pos))
			for i, j := range pos {
				cs[i] = int64(cols[j])
			}
			out = append(out, Part[arrayParam]{Partition: m.Partition(id), Value: arrayParam{Rows: []int{row}, Cols: cs}})
		}
		return out, nil
	}, func(m *MatrixMeta, parts []Part[[]float64]) ([]float64, error) {
		groups, err := splitCols(m, row, cols)
		if err != nil {
			return nil, err
		}
		out := make([]float64, len(cols))
		n := 0
		for _, p := range parts {
			pos := groups[p.Partition.ID]
			if len(p.Value) != len(pos) {
				return nil, fmt.Errorf("psf: %d values from %s, want %d", len(p.Value), p.Partition, len(pos))
			}
			for i, j := range pos {
				out[j] = p.Value[i]
			}
			n += len(pos)
		}
		if n != len(cols) {
			return nil, fmt.Errorf("psf: got %d of %d values", n, len(cols))
		}
		return out, nil
	})
}

// PullRowsAt returns the values of rows at columns cols, of a dense or a
// sparse matrix: out[i][j] is row rows[i] at column cols[j]. Rows and
// columns may come in any order and repeat; rows may lie in different row
// blocks. Columns are [0, Cols) for a dense matrix, any int64 for a sparse
// one.
func PullRowsAt[I int | int64](rows []int, cols []I) GetFunc[[][]float64] {
	rows = append([]int(nil), rows...)
	cols = append([]I(nil), cols...)
	type plan struct {
		rowPos map[int][]int // row block -> positions in rows
		colPos [][]int       // column block -> positions in cols
	}
	makePlan := func(m *MatrixMeta) (plan, error) {
		if len(rows) == 0 {
			return plan{}, errors.New("psf: PullRowsAt: no rows")
		}
		if err := m.CheckRows(rows...); err != nil {
			return plan{}, err
		}
		colPos, err := colBlocks(m, cols)
		if err != nil {
			return plan{}, err
		}
		rowPos := make(map[int][]int)
		for i, r := range rows {
			rowPos[r/m.RowBlock] = append(rowPos[r/m.RowBlock], i)
		}
		return plan{rowPos, colPos}, nil
	}
	return NewGet(kPullAt, func(m *MatrixMeta) ([]Part[arrayParam], error) {
		pl, err := makePlan(m)
		if err != nil {
			return nil, err
		}
		ncb := int(m.NumColBlocks())
		var out []Part[arrayParam]
		for _, rb := range sortedKeys(pl.rowPos) {
			rs := make([]int, len(pl.rowPos[rb]))
			for i, j := range pl.rowPos[rb] {
				rs[i] = rows[j]
			}
			for cb, pos := range pl.colPos {
				if len(pos) == 0 {
					continue
				}
				cs := make([]int64, len(pos))
				for i, j := range pos {
					cs[i] = int64(cols[j])
				}
				out = append(out, Part[arrayParam]{Partition: m.Partition(rb*ncb + cb), Value: arrayParam{Rows: rs, Cols: cs}})
			}
		}
		return out, nil
	}, func(m *MatrixMeta, parts []Part[[]float64]) ([][]float64, error) {
		pl, err := makePlan(m)
		if err != nil {
			return nil, err
		}
		out := make([][]float64, len(rows))
		for i := range out {
			out[i] = make([]float64, len(cols))
		}
		n := 0
		for _, p := range parts {
			rp, cp := pl.rowPos[p.Partition.RowStart/m.RowBlock], pl.colPos[p.Partition.ColBlock]
			if len(p.Value) != len(rp)*len(cp) {
				return nil, fmt.Errorf("psf: %d values from %s, want %d", len(p.Value), p.Partition, len(rp)*len(cp))
			}
			for a, i := range rp {
				for b, j := range cp {
					out[i][j] = p.Value[a*len(cp)+b]
				}
			}
			n += len(p.Value)
		}
		if n != len(rows)*len(cols) {
			return nil, fmt.Errorf("psf: got %d of %d values", n, len(rows)*len(cols))
		}
		return out, nil
	})
}

// PullSparse returns the entries of row that are not +0, sorted by column:
// for a sparse matrix its stored entries, for a dense one its non-zero
// values (and -0s).
func PullSparse(row int) GetFunc[SparseVector] {
	merge := sparseRowsMerge([]int{row})
	return NewGet(kPullSparse, func(m *MatrixMeta) ([]Part[rowParam], error) {
		return splitRowBlocks(m, []int{row})
	}, func(m *MatrixMeta, parts []Part[[]SparseVector]) (SparseVector, error) {
		vs, err := merge(m, parts)
		if err != nil {
			return SparseVector{}, err
		}
		return vs[0], nil
	})
}

// PullSparseRows returns the entries of rows that are not +0, as
// PullSparse does for each (in the order given; rows may repeat and may
// lie in different row blocks).
func PullSparseRows(rows []int) GetFunc[[]SparseVector] {
	rows = append([]int(nil), rows...)
	return NewGet(kPullSparse, func(m *MatrixMeta) ([]Part[rowParam], error) {
		return splitRowBlocks(m, rows)
	}, sparseRowsMerge(rows))
}

// sparseRowsMerge returns the merge of PullSparseRows(rows): each row's
// sorted pieces, one per column block, merged into one vector.
func sparseRowsMerge(rows []int) func(m *MatrixMeta, parts []Part[[]SparseVector]) ([]SparseVector, error) {
	return func(m *MatrixMeta, parts []Part[[]SparseVector]) ([]SparseVector, error) {
		pos := make(map[int][]int) // row block -> positions in rows
		for i, r := range rows {
			pos[r/m.RowBlock] = append(pos[r/m.RowBlock], i)
		}
		pieces := make([][]SparseVector, len(rows))
		for _, p := range parts {
			pm := p.Partition
			ps := pos[pm.RowStart/m.RowBlock]
			if len(p.Value) != len(ps) {
				return nil, fmt.Errorf("psf: %d rows from %s, want %d", len(p.Value), pm, len(ps))
			}
			for i, j := range ps {
				pieces[j] = append(pieces[j], p.Value[i])
			}
		}
		out := make([]SparseVector, len(rows))
		ncb := int(m.NumColBlocks())
		for j := range rows {
			if len(pieces[j]) != ncb {
				return nil, fmt.Errorf("psf: got %d of %d column blocks of row %d", len(pieces[j]), ncb, rows[j])
			}
			v, err := mergeSparse(pieces[j])
			if err != nil {
				return nil, err
			}
			out[j] = v
		}
		return out, nil
	}
}
