package psf

import (
	"fmt"
	"math"
)

// ioRows returns, after checking the shape (nIn+1 rows, nScalars
// scalars) and that every row is reachable, the values of p's first nIn
// rows for reading (zeros that are not stored for rows never written) and
// the storage of the last row, which the kernel writes (allocated if
// never written).
func ioRows(b *Block, p rowParam, nIn, nScalars int) ([][]float64, []float64, error) {
	if _, err := peekRows(b, p, nIn+1, nScalars); err != nil {
		return nil, nil, err
	}
	in := make([][]float64, nIn)
	for i, r := range p.Rows[:nIn] {
		x, err := b.input(r)
		if err != nil {
			return nil, nil, err
		}
		in[i] = x
	}
	out, err := b.Row(p.Rows[nIn])
	return in, out, err
}

// sparseChecks holds, by kernel name, the library update functions' checks
// that they are defined on sparse rows with parameter p: the reason they
// are not, or "". The worker half checks before sending, the kernel again.
// Written at package initialization only.
var sparseChecks = map[string]func(p rowParam) string{}

// zeroReason returns why a function whose value at columns not stored
// would be v cannot run on sparse rows, or "" if v is a zero.
func zeroReason(what string, v float64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf("%s is %v, not 0, which every column not stored would take", what, v)
}

// checkSparse returns the ErrSparse of kernel name with p, if any.
func checkSparse(name string, p rowParam) error {
	if chk := sparseChecks[name]; chk != nil {
		if reason := chk(p); reason != "" {
			return fmt.Errorf("%w: %s", ErrSparse, reason)
		}
	}
	return nil
}

// mapEntries sets every entry (k, v) of t to f(k, v), and removes those
// that become +0.
func mapEntries(t *longTable[float64], f func(k int64, v float64) float64) {
	if t == nil {
		return
	}
	var zeros []int64
	for i, k := range t.keys {
		if k != 0 {
			v := f(k, t.vals[i])
			t.vals[i] = v
			if isPosZero(v) {
				zeros = append(zeros, k)
			}
		}
	}
	if t.hasZero {
		t.zeroVal = f(0, t.zeroVal)
		if isPosZero(t.zeroVal) {
			zeros = append(zeros, 0)
		}
	}
	for _, k := range zeros {
		t.Delete(k)
	}
}

// unaryKernel registers an update kernel computing row to = f(row from),
// element by element, with nScalars scalars s passed to f. On sparse rows
// f runs on the stored entries, when f(0, s) is 0.
func unaryKernel(name string, nScalars int, f func(x float64, s []float64) float64) *UpdateKernel[rowParam] {
	sparseChecks[name] = func(p rowParam) string { return zeroReason(name+" of 0", f(0, p.Scalars)) }
	return MustRegister(newLibUpdateKernel(name, rowParamCodec, func(b *Block, p rowParam) error {
		if b.sparse() {
			ts, err := sparseRows(b, p, 2, nScalars)
			if err != nil {
				return err
			}
			if err := checkSparse(name, p); err != nil {
				return err
			}
			out := ts[0]
			if p.Rows[0] != p.Rows[1] {
				out = out.Clone()
			} // else in place: nothing can fail from here on
			mapEntries(out, func(_ int64, v float64) float64 { return f(v, p.Scalars) })
			return b.setTable(p.Rows[1], out)
		}
		xs, err := peekRows(b, p, 2, nScalars)
		if err != nil {
			return err
		}
		x := xs[0]
		y, err := b.Row(p.Rows[1])
		if err != nil {
			return err
		}
		if x == nil { // from was never written: f(0) everywhere
			v := f(0, p.Scalars)
			for i := range y {
				y[i] = v
			}
			return nil
		}
		for i, v := range x {
			y[i] = f(v, p.Scalars)
		}
		return nil
	}))
}

// binaryKernel registers an update kernel computing row to = f(a, b). On
// sparse rows f runs at the columns where a or b stores an entry, when
// f(0, 0) is 0.
func binaryKernel(name string, f func(x, y float64) float64) *UpdateKernel[rowParam] {
	sparseChecks[name] = func(rowParam) string { return zeroReason(name+" of 0 and 0", f(0, 0)) }
	return MustRegister(newLibUpdateKernel(name, rowParamCodec, func(b *Block, p rowParam) error {
		if b.sparse() {
			ts, err := sparseRows(b, p, 3, 0)
			if err != nil {
				return err
			}
			if err := checkSparse(name, p); err != nil {
				return err
			}
			return b.setTable(p.Rows[2], sparseZip(ts[0], ts[1], f))
		}
		in, z, err := ioRows(b, p, 2, 0)
		if err != nil {
			return err
		}
		x, y := in[0], in[1]
		for i := range z {
			z[i] = f(x[i], y[i])
		}
		return nil
	}))
}

// sparseZip returns the table of f(x, y) at the columns where x or y
// stores an entry (f(0, 0) must be 0), without its +0 results.
func sparseZip(x, y *longTable[float64], f func(x, y float64) float64) *longTable[float64] {
	out := x.Clone()
	if out == nil {
		out = newLongTable[float64](y.Len())
	}
	mapEntries(out, func(k int64, v float64) float64 {
		w, _ := y.Get(k)
		return f(v, w)
	})
	for k, w := range y.All {
		if _, ok := x.Get(k); !ok {
			if v := f(0, w); !isPosZero(v) {
				out.Set(k, v)
			}
		}
	}
	return out
}

func signum(x float64) float64 {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return x // 0, -0 or NaN
}

var (
	kAbs   = unaryKernel("psf.Abs", 0, func(x float64, _ []float64) float64 { return math.Abs(x) })
	kCeil  = unaryKernel("psf.Ceil", 0, func(x float64, _ []float64) float64 { return math.Ceil(x) })
	kFloor = unaryKernel("psf.Floor", 0, func(x float64, _ []float64) float64 { return math.Floor(x) })
	kRound = unaryKernel("psf.Round", 0, func(x float64, _ []float64) float64 { return math.Round(x) })
	kSign  = unaryKernel("psf.Signum", 0, func(x float64, _ []float64) float64 { return signum(x) })
	kSqrt  = unaryKernel("psf.Sqrt", 0, func(x float64, _ []float64) float64 { return math.Sqrt(x) })
	kExp   = unaryKernel("psf.Exp", 0, func(x float64, _ []float64) float64 { return math.Exp(x) })
	kExpm1 = unaryKernel("psf.Expm1", 0, func(x float64, _ []float64) float64 { return math.Expm1(x) })
	kLog   = unaryKernel("psf.Log", 0, func(x float64, _ []float64) float64 { return math.Log(x) })
	kLog10 = unaryKernel("psf.Log10", 0, func(x float64, _ []float64) float64 { return math.Log10(x) })
	kLog1p = unaryKernel("psf.Log1p", 0, func(x float64, _ []float64) float64 { return math.Log1p(x) })
	kCopy  = unaryKernel("psf.Copy", 0, func(x float64, _ []float64) float64 { return x })

	kAddS = unaryKernel("psf.AddS", 1, func(x float64, s []float64) float64 { return x + s[0] })
	kSubS = unaryKernel("psf.SubS", 1, func(x float64, s []float64) float64 { return x - s[0] })
	kMulS = unaryKernel("psf.MulS", 1, func(x float64, s []float64) float64 { return x * s[0] })
	kDivS = unaryKernel("psf.DivS", 1, func(x float64, s []float64) float64 { return x / s[0] })
	kPow  = unaryKernel("psf.Pow", 1, func(x float64, s []float64) float64 { return math.Pow(x, s[0]) })

	kAdd  = binaryKernel("psf.Add", func(x, y float64) float64 { return x + y })
	kSub  = binaryKernel("psf.Sub", func(x, y float64) float64 { return x - y })
	kMul  = binaryKernel("psf.Mul", func(x, y float64) float64 { return x * y })
	kDiv  = binaryKernel("psf.Div", func(x, y float64) float64 { return x / y })
	kMaxV = binaryKernel("psf.MaxV", math.Max)
	kMinV = binaryKernel("psf.MinV", math.Min)

	kAxpy = MustRegister(newLibUpdateKernel("psf.Axpy", rowParamCodec, func(b *Block, p rowParam) error {
		if b.sparse() {
			ts, err := sparseRows(b, p, 2, 1)
			if err != nil {
				return err
			}
			if err := checkSparse("psf.Axpy", p); err != nil {
				return err
			}
			a, x := p.Scalars[0], ts[0]
			if x == nil {
				return nil // y + a*0 = y for a finite a
			}
			if p.Rows[0] == p.Rows[1] {
				mapEntries(x, func(_ int64, v float64) float64 { return v + a*v })
				return b.setTable(p.Rows[1], x)
			}
			y := ts[1]
			if y == nil {
				y = newLongTable[float64](x.Len())
			}
			for k, v := range x.All {
				r := y.Ref(k)
				if *r += a * v; isPosZero(*r) {
					y.Delete(k)
				}
			}
			return b.setTable(p.Rows[1], y)
		}
		in, y, err := ioRows(b, p, 1, 1)
		if err != nil {
			return err
		}
		a, x := p.Scalars[0], in[0]
		for i, v := range x {
			y[i] += a * v
		}
		return nil
	}))
	kScale = MustRegister(newLibUpdateKernel("psf.Scale", rowParamCodec, func(b *Block, p rowParam) error {
		if b.sparse() {
			ts, err := sparseRows(b, p, 1, 1)
			if err != nil {
				return err
			}
			if err := checkSparse("psf.Scale", p); err != nil {
				return err
			}
			a := p.Scalars[0]
			mapEntries(ts[0], func(_ int64, v float64) float64 { return v * a })
			return b.setTable(p.Rows[0], ts[0])
		}
		xs, err := peekRows(b, p, 1, 1)
		if err != nil {
			return err
		}
		a := p.Scalars[0]
		if xs[0] == nil && a >= 0 && !math.Signbit(a) && !math.IsInf(a, 1) {
			return nil // zeros times a finite a >= +0 stay +0
		}
		x, err := b.Row(p.Rows[0])
		if err != nil {
			return err
		}
		for i := range x {
			x[i] *= a
		}
		return nil
	}))
	kFill = MustRegister(newLibUpdateKernel("psf.Fill", rowParamCodec, func(b *Block, p rowParam) error {
		if b.sparse() {
			if _, err := sparseRows(b, p, 1, 1); err != nil {
				return err
			}
			if err := checkSparse("psf.Fill", p); err != nil {
				return err
			}
			return b.clearRow(p.Rows[0])
		}
		if _, err := peekRows(b, p, 1, 1); err != nil {
			return err
		}
		v := p.Scalars[0]
		if math.Float64bits(v) == 0 { // +0: the row becomes one never written
			return b.clearRow(p.Rows[0])
		}
		x, err := b.Row(p.Rows[0])
		if err != nil {
			return err
		}
		for i := range x {
			x[i] = v
		}
		return nil
	}))
	kUniform = MustRegister(newLibUpdateKernel("psf.RandomUniform", rowParamCodec, func(b *Block, p rowParam) error {
		if b.sparse() {
			return errRandomSparse
		}
		xs, err := rowsOf(b, p, 1, 2)
		if err != nil {
			return err
		}
		lo, hi, x, c0 := p.Scalars[0], p.Scalars[1], xs[0], b.Partition().ColStart
		for i := range x {
			x[i] = lo + (hi-lo)*UniformAt(p.Seed, c0+int64(i))
		}
		return nil
	}))
	kNormal = MustRegister(newLibUpdateKernel("psf.RandomNormal", rowParamCodec, func(b *Block, p rowParam) error {
		if b.sparse() {
			return errRandomSparse
		}
		xs, err := rowsOf(b, p, 1, 2)
		if err != nil {
			return err
		}
		mean, std, x, c0 := p.Scalars[0], p.Scalars[1], xs[0], b.Partition().ColStart
		for i := range x {
			x[i] = mean + std*NormalAt(p.Seed, c0+int64(i))
		}
		return nil
	}))

	kIncrement = arrayKernel("psf.Increment", addF)
	kMaxA      = arrayKernel("psf.MaxA", math.Max)
	kMinA      = arrayKernel("psf.MinA", math.Min)
	kPut       = arrayKernel("psf.Put", putF)

	kIncrementRowsAt = vecKernel("psf.IncrementRowsAt", addF, false)
	kPutRowsAt       = vecKernel("psf.PutRowsAt", putF, false)
	kPutSparseRows   = vecKernel("psf.PutSparseRows", putF, true)
)

func putF(_, v float64) float64 { return v }

// errRandomSparse is the answer of RandomUniform and RandomNormal on a
// sparse matrix.
var errRandomSparse = fmt.Errorf("%w: random values would fill the 2^64 columns; put values at chosen columns (PutAt, with UniformAt or NormalAt)", ErrSparse)

func init() {
	sparseChecks["psf.Axpy"] = func(p rowParam) string { return zeroReason("a*0 for a = "+fmt.Sprint(p.Scalars[0]), p.Scalars[0]*0) }
	sparseChecks["psf.Scale"] = func(p rowParam) string { return zeroReason("0*a for a = "+fmt.Sprint(p.Scalars[0]), p.Scalars[0]*0) }
	sparseChecks["psf.Fill"] = func(p rowParam) string { return zeroReason("the value", p.Scalars[0]) }
	random := func(rowParam) string {
		return "random values would fill the 2^64 columns; put values at chosen columns (PutAt, with UniformAt or NormalAt)"
	}
	sparseChecks["psf.RandomUniform"] = random
	sparseChecks["psf.RandomNormal"] = random
}

// arrayKernel registers an update kernel setting y = f(y, v) for values v
// sent by the worker, either for whole rows or at given columns.
func arrayKernel(name string, f func(y, v float64) float64) *UpdateKernel[arrayParam] {
	return MustRegister(newLibUpdateKernel(name, arrayParamCodec, func(b *Block, p arrayParam) error {
		pm := b.Partition()
		w := pm.Width()
		if len(p.Cols) > 0 {
			if len(p.Rows) != 1 || len(p.Vals) != len(p.Cols) {
				return fmt.Errorf("%w: %d rows, %d columns and %d values", ErrBadRequest, len(p.Rows), len(p.Cols), len(p.Vals))
			}
			for _, c := range p.Cols {
				if !pm.HasCol(c) {
					return fmt.Errorf("%w: column %d is not in %s", ErrBadRequest, c, pm)
				}
			}
			if b.sparse() {
				t, err := b.table(p.Rows[0])
				if err != nil {
					return err
				}
				if t == nil {
					t = newLongTable[float64](len(p.Cols))
				}
				for i, c := range p.Cols {
					r := t.Ref(c)
					if *r = f(*r, p.Vals[i]); isPosZero(*r) {
						t.Delete(c)
					}
				}
				return b.setTable(p.Rows[0], t)
			}
			y, err := b.Row(p.Rows[0])
			if err != nil {
				return err
			}
			for i, c := range p.Cols {
				y[c-pm.ColStart] = f(y[c-pm.ColStart], p.Vals[i])
			}
			return nil
		}
		if b.sparse() {
			return fmt.Errorf("%w: whole rows have 2^64 columns; give columns (the ...At functions)", ErrSparse)
		}
		if len(p.Vals) != len(p.Rows)*w {
			return fmt.Errorf("%w: %d values for %d rows of %d columns", ErrBadRequest, len(p.Vals), len(p.Rows), w)
		}
		ys, err := b.Rows(p.Rows...)
		if err != nil {
			return err
		}
		for k, y := range ys {
			v := p.Vals[k*w : (k+1)*w]
			for i := range y {
				y[i] = f(y[i], v[i])
			}
		}
		return nil
	}))
}

// rowUpdate is an update function over colocated rows. On a sparse
// matrix it first checks that the function is defined there.
func rowUpdate(k *UpdateKernel[rowParam], p rowParam) UpdateFunc {
	return NewUpdate(k, func(m *MatrixMeta) ([]Part[rowParam], error) {
		if m.Type == Sparse {
			if chk := sparseChecks[k.Name()]; chk != nil {
				if reason := chk(p); reason != "" {
					return nil, errSparse(k.Name(), m, "%s", reason)
				}
			}
		}
		return SplitRows(m, p, p.Rows...)
	})
}

func fromTo(k *UpdateKernel[rowParam], from, to int, scalars ...float64) UpdateFunc {
	return rowUpdate(k, rowParam{Rows: []int{from, to}, Scalars: scalars})
}

// Abs sets row to to |from|. Like every function over several rows, from
// and to must be colocated (MatrixMeta.Colocated); they may be the same row.
func Abs(from, to int) UpdateFunc { return fromTo(kAbs, from, to) }

// Ceil sets row to to ceil(from).
func Ceil(from, to int) UpdateFunc { return fromTo(kCeil, from, to) }

// Floor sets row to to floor(from).
func Floor(from, to int) UpdateFunc { return fromTo(kFloor, from, to) }

// Round sets row to to from rounded to the nearest integer, halves away
// from zero (math.Round).
func Round(from, to int) UpdateFunc { return fromTo(kRound, from, to) }

// Signum sets row to to the sign of from: -1, 0 or 1 (0 stays ±0, NaN stays NaN).
func Signum(from, to int) UpdateFunc { return fromTo(kSign, from, to) }

// Sqrt sets row to to sqrt(from).
func Sqrt(from, to int) UpdateFunc { return fromTo(kSqrt, from, to) }

// Exp sets row to to exp(from).
func Exp(from, to int) UpdateFunc { return fromTo(kExp, from, to) }

// Expm1 sets row to to exp(from)-1.
func Expm1(from, to int) UpdateFunc { return fromTo(kExpm1, from, to) }

// Log sets row to to ln(from).
func Log(from, to int) UpdateFunc { return fromTo(kLog, from, to) }

// Log10 sets row to to log10(from).
func Log10(from, to int) UpdateFunc { return fromTo(kLog10, from, to) }

// Log1p sets row to to ln(1+from).
func Log1p(from, to int) UpdateFunc { return fromTo(kLog1p, from, to) }

// Copy sets row to to row from.
func Copy(from, to int) UpdateFunc { return fromTo(kCopy, from, to) }

// AddS sets row to to from + s.
func AddS(from, to int, s float64) UpdateFunc { return fromTo(kAddS, from, to, s) }

// SubS sets row to to from - s.
func SubS(from, to int, s float64) UpdateFunc { return fromTo(kSubS, from, to, s) }

// MulS sets row to to from * s.
func MulS(from, to int, s float64) UpdateFunc { return fromTo(kMulS, from, to, s) }

// DivS sets row to to from / s.
func DivS(from, to int, s float64) UpdateFunc { return fromTo(kDivS, from, to, s) }

// Pow sets row to to from raised to the power p.
func Pow(from, to int, p float64) UpdateFunc { return fromTo(kPow, from, to, p) }

func binaryOp(k *UpdateKernel[rowParam], a, b, to int) UpdateFunc {
	return rowUpdate(k, rowParam{Rows: []int{a, b, to}})
}

// Add sets row to to a + b (element-wise; the three rows must be colocated).
func Add(a, b, to int) UpdateFunc { return binaryOp(kAdd, a, b, to) }

// Sub sets row to to a - b.
func Sub(a, b, to int) UpdateFunc { return binaryOp(kSub, a, b, to) }

// Mul sets row to to a * b, element-wise.
func Mul(a, b, to int) UpdateFunc { return binaryOp(kMul, a, b, to) }

// Div sets row to to a / b, element-wise.
func Div(a, b, to int) UpdateFunc { return binaryOp(kDiv, a, b, to) }

// MaxV sets row to to max(a, b), element-wise.
func MaxV(a, b, to int) UpdateFunc { return binaryOp(kMaxV, a, b, to) }

// MinV sets row to to min(a, b), element-wise.
func MinV(a, b, to int) UpdateFunc { return binaryOp(kMinV, a, b, to) }

// Axpy sets row y to a*x + y.
func Axpy(a float64, x, y int) UpdateFunc {
	return rowUpdate(kAxpy, rowParam{Rows: []int{x, y}, Scalars: []float64{a}})
}

// Scale multiplies row by a in place.
func Scale(row int, a float64) UpdateFunc {
	return rowUpdate(kScale, rowParam{Rows: []int{row}, Scalars: []float64{a}})
}

// Fill sets every value of row to v.
func Fill(row int, v float64) UpdateFunc {
	return rowUpdate(kFill, rowParam{Rows: []int{row}, Scalars: []float64{v}})
}

// RandomUniform sets row to values drawn uniformly from [lo, hi): the value
// of column c is lo + (hi-lo)*UniformAt(seed, c), so it depends on the seed
// and the global column only, not on the partitioning, the servers or the
// row.
func RandomUniform(row int, lo, hi float64, seed uint64) UpdateFunc {
	return rowUpdate(kUniform, rowParam{Rows: []int{row}, Scalars: []float64{lo, hi}, Seed: seed})
}

// RandomNormal sets row to normally distributed values: column c gets
// mean + std*NormalAt(seed, c), independent of the partitioning.
func RandomNormal(row int, mean, std float64, seed uint64) UpdateFunc {
	return rowUpdate(kNormal, rowParam{Rows: []int{row}, Scalars: []float64{mean, std}, Seed: seed})
}

// mix64 is SplitMix64's finalizer, a bijective hash of 64 bits.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// UniformAt returns the uniform [0, 1) number RandomUniform uses for global
// column col: the top 53 bits of a SplitMix64 hash of seed and col.
func UniformAt(seed uint64, col int64) float64 {
	return float64(mix64(mix64(seed)+uint64(col))>>11) * 0x1p-53
}

// NormalAt returns the standard normal number RandomNormal uses for global
// column col: Box-Muller on two uniforms hashed from seed and col.
func NormalAt(seed uint64, col int64) float64 {
	h := mix64(mix64(seed ^ 0x6a09e667f3bcc909))
	u1 := (float64(mix64(h+2*uint64(col))>>11) + 1) * 0x1p-53 // (0, 1]
	u2 := float64(mix64(h+2*uint64(col)+1)>>11) * 0x1p-53
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// arrayRows is an update of whole rows with values from the worker.
func arrayRows(k *UpdateKernel[arrayParam], rows []int, vals [][]float64) UpdateFunc {
	return NewUpdate(k, func(m *MatrixMeta) ([]Part[arrayParam], error) {
		if m.Type == Sparse {
			return nil, errSparse(k.Name(), m, "whole rows have 2^64 columns; give columns (IncrementAt, IncrementRowsAt, PutAt, PutRowsAt, PutSparseRows, MaxAt, MinAt)")
		}
		if len(rows) != len(vals) {
			return nil, fmt.Errorf("psf: %s: %d rows but %d value vectors", k.Name(), len(rows), len(vals))
		}
		if err := m.CheckRows(rows...); err != nil {
			return nil, err
		}
		for i, v := range vals {
			if int64(len(v)) != m.Cols {
				return nil, fmt.Errorf("psf: %s: %d values for row %d of %d columns", k.Name(), len(v), rows[i], m.Cols)
			}
		}
		pos := make(map[int][]int) // row block -> positions in rows
		for i, r := range rows {
			pos[r/m.RowBlock] = append(pos[r/m.RowBlock], i)
		}
		var out []Part[arrayParam]
		for _, rb := range sortedKeys(pos) {
			ps := pos[rb]
			for _, pm := range m.RowPartitions(rows[ps[0]]) {
				p := arrayParam{Rows: make([]int, len(ps)), Vals: make([]float64, 0, len(ps)*pm.Width())}
				for i, j := range ps {
					p.Rows[i] = rows[j]
					p.Vals = append(p.Vals, vals[j][pm.ColStart:pm.ColEnd]...)
				}
				out = append(out, Part[arrayParam]{Partition: pm, Value: p})
			}
		}
		return out, nil
	})
}

// arrayAt is an update of row at columns cols with values from the worker.
func arrayAt(k *UpdateKernel[arrayParam], row int, cols []int64, vals []float64) UpdateFunc {
	return NewUpdate(k, func(m *MatrixMeta) ([]Part[arrayParam], error) {
		if len(cols) != len(vals) {
			return nil, fmt.Errorf("psf: %s: %d columns but %d values", k.Name(), len(cols), len(vals))
		}
		groups, err := splitCols(m, row, cols)
		if err != nil {
			return nil, err
		}
		out := make([]Part[arrayParam], 0, len(groups))
		for _, id := range sortedKeys(groups) {
			pos := groups[id]
			p := arrayParam{Rows: []int{row}, Cols: make([]int64, len(pos)), Vals: make([]float64, len(pos))}
			for i, j := range pos {
				p.Cols[i], p.Vals[i] = cols[j], vals[j]
			}
			out = append(out, Part[arrayParam]{Partition: m.Partition(id), Value: p})
		}
		return out, nil
	})
}

// vecParam is the parameter of functions with sparse vectors from the
// worker: one per row, each holding the row's entries in the partition's
// columns.
type vecParam struct {
	Rows []int
	Vecs []SparseVector
}

var vecParamCodec = NewCodec(func(e *Encoder, p vecParam) {
	e.Ints(p.Rows)
	sparseVectorsCodec.Encode(e, p.Vecs)
}, func(d *Decoder) vecParam {
	return vecParam{Rows: d.Ints(), Vecs: sparseVectorsCodec.Decode(d)}
})

// vecKernel registers an update kernel setting y = f(y, v) at the columns
// of the vectors v sent by the worker; with replace, the rows are first
// cleared (the row becomes v).
func vecKernel(name string, f func(y, v float64) float64, replace bool) *UpdateKernel[vecParam] {
	return MustRegister(newLibUpdateKernel(name, vecParamCodec, func(b *Block, p vecParam) error {
		if len(p.Rows) != len(p.Vecs) {
			return fmt.Errorf("%w: %d rows and %d vectors", ErrBadRequest, len(p.Rows), len(p.Vecs))
		}
		pm := b.Partition()
		for j, r := range p.Rows {
			if _, _, err := b.locate(r); err != nil {
				return err
			}
			for _, c := range p.Vecs[j].Indices {
				if !pm.HasCol(c) {
					return fmt.Errorf("%w: column %d is not in %s", ErrBadRequest, c, pm)
				}
			}
		}
		for j, r := range p.Rows {
			v := p.Vecs[j]
			if b.sparse() {
				var t *longTable[float64]
				if !replace {
					t, _ = b.table(r)
				}
				if t == nil {
					t = newLongTable[float64](v.Len())
				}
				for i, c := range v.Indices {
					x := t.Ref(c)
					if *x = f(*x, v.Values[i]); isPosZero(*x) {
						t.Delete(c)
					}
				}
				if err := b.setTable(r, t); err != nil {
					return err
				}
				continue
			}
			if replace {
				if err := b.clearRow(r); err != nil {
					return err
				}
				if allZero(v.Values) {
					continue
				}
			}
			y, err := b.Row(r)
			if err != nil {
				return err
			}
			for i, c := range v.Indices {
				y[c-pm.ColStart] = f(y[c-pm.ColStart], v.Values[i])
			}
		}
		return nil
	}))
}

// vecRows is an update of rows at the columns of vectors from the worker.
// With all, every partition of each row gets a part (an empty vector if
// none of its columns is in the partition), for functions that change the
// columns not given.
func vecRows(k *UpdateKernel[vecParam], rows []int, vecs []SparseVector, all bool) UpdateFunc {
	return NewUpdate(k, func(m *MatrixMeta) ([]Part[vecParam], error) {
		if len(rows) != len(vecs) {
			return nil, fmt.Errorf("psf: %s: %d rows but %d vectors", k.Name(), len(rows), len(vecs))
		}
		if err := m.CheckRows(rows...); err != nil {
			return nil, err
		}
		ncb := int(m.NumColBlocks())
		parts := make(map[int]*vecParam)
		for i, r := range rows {
			v := vecs[i]
			if err := v.Validate(); err != nil {
				return nil, fmt.Errorf("psf: %s: row %d: %w", k.Name(), r, err)
			}
			pieces := make([]SparseVector, ncb)
			for j, c := range v.Indices {
				if err := m.checkCol(c); err != nil {
					return nil, fmt.Errorf("psf: %s: %w", k.Name(), err)
				}
				cb := m.ColBlockOf(c)
				pieces[cb].Indices = append(pieces[cb].Indices, c)
				pieces[cb].Values = append(pieces[cb].Values, v.Values[j])
			}
			base := r / m.RowBlock * ncb
			for cb, piece := range pieces {
				if piece.Len() == 0 && !all {
					continue
				}
				p := parts[base+cb]
				if p == nil {
					p = &vecParam{}
					parts[base+cb] = p
				}
				p.Rows = append(p.Rows, r)
				p.Vecs = append(p.Vecs, piece)
			}
		}
		out := make([]Part[vecParam], 0, len(parts))
		for _, id := range sortedKeys(parts) {
			out = append(out, Part[vecParam]{Partition: m.Partition(id), Value: *parts[id]})
		}
		return out, nil
	})
}

// IncrementRowsAt adds vecs[i] to rows[i], for each i, at the vectors'
// columns: a sparse gradient of several rows in one request. It works on
// dense matrices (columns in [0, Cols)) and sparse ones (any int64).
// Each vector's indices must be strictly increasing (NewSparseVector sorts
// them); rows may repeat.
func IncrementRowsAt(rows []int, vecs []SparseVector) UpdateFunc {
	return vecRows(kIncrementRowsAt, rows, vecs, false)
}

// PutRowsAt sets rows[i] to vecs[i] at the vectors' columns, leaving the
// other columns as they are.
func PutRowsAt(rows []int, vecs []SparseVector) UpdateFunc {
	return vecRows(kPutRowsAt, rows, vecs, false)
}

// PutSparseRows sets rows[i] to vecs[i]: the vectors' values at their
// columns, 0 everywhere else.
func PutSparseRows(rows []int, vecs []SparseVector) UpdateFunc {
	return vecRows(kPutSparseRows, rows, vecs, true)
}

// Increment adds vals (one per column) to row.
func Increment(row int, vals []float64) UpdateFunc {
	return arrayRows(kIncrement, []int{row}, [][]float64{vals})
}

// IncrementRows adds vals[i] to rows[i], for each i (rows may lie in
// different row blocks).
func IncrementRows(rows []int, vals [][]float64) UpdateFunc { return arrayRows(kIncrement, rows, vals) }

// IncrementAt adds vals[i] to row at column cols[i] (a column given twice is
// added twice): columns in [0, Cols) for a dense matrix, any int64 for a
// sparse one, in any order.
func IncrementAt(row int, cols []int64, vals []float64) UpdateFunc {
	return arrayAt(kIncrement, row, cols, vals)
}

// MaxA sets row to max(row, vals), element-wise.
func MaxA(row int, vals []float64) UpdateFunc {
	return arrayRows(kMaxA, []int{row}, [][]float64{vals})
}

// MinA sets row to min(row, vals), element-wise.
func MinA(row int, vals []float64) UpdateFunc {
	return arrayRows(kMinA, []int{row}, [][]float64{vals})
}

// Put sets row to vals.
func Put(row int, vals []float64) UpdateFunc { return arrayRows(kPut, []int{row}, [][]float64{vals}) }

// PutRows sets rows[i] to vals[i], for each i.
func PutRows(rows []int, vals [][]float64) UpdateFunc { return arrayRows(kPut, rows, vals) }

// PutAt sets row at column cols[i] to vals[i] (for a column given twice,
// the last value wins).
func PutAt(row int, cols []int64, vals []float64) UpdateFunc { return arrayAt(kPut, row, cols, vals) }

// MaxAt sets row at column cols[i] to max(row, vals[i]).
func MaxAt(row int, cols []int64, vals []float64) UpdateFunc { return arrayAt(kMaxA, row, cols, vals) }

// MinAt sets row at column cols[i] to min(row, vals[i]).
func MinAt(row int, cols []int64, vals []float64) UpdateFunc { return arrayAt(kMinA, row, cols, vals) }
