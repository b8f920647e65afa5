package psf_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/psf"
)

const (
	libRows = 12
	libCols = 23
)

// libLayouts: the default (one row block, each row over both servers),
// narrow column blocks (several partitions per server), and two row blocks
// whose partitions sit on different servers (rows 0-5 and 6-11 are not
// colocated with 2 servers).
func libLayouts() []psf.MatrixMeta {
	return []psf.MatrixMeta{
		{Rows: libRows, Cols: libCols},
		{Rows: libRows, Cols: libCols, RowBlock: libRows, ColBlock: 5},
		{Rows: libRows, Cols: libCols, RowBlock: 6, ColBlock: 8},
	}
}

// libData fills rows 0-3 of a model: mixed signs, zeros (never written),
// positive, and values with exact zeros, halves and negatives.
func libData(seed uint64) [][]float64 {
	r := rand.New(rand.NewPCG(seed, 1))
	model := make([][]float64, libRows)
	for i := range model {
		model[i] = make([]float64, libCols)
	}
	for j := 0; j < libCols; j++ {
		model[0][j] = r.NormFloat64() * 10
		model[2][j] = 0.5 + 3*r.Float64()
		model[3][j] = float64(j%5-2) / 2 // -1, -0.5, 0, 0.5, 1
	}
	return model
}

// setup creates a matrix and writes rows 0, 2 and 3 of model into it.
func setup(t *testing.T, ctx context.Context, cl *psf.Client, meta psf.MatrixMeta, model [][]float64) *psf.Matrix {
	t.Helper()
	m, err := cl.CreateMatrix(ctx, meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.UpdateRows(ctx, []int{0, 2, 3}, [][]float64{model[0], model[2], model[3]}); err != nil {
		t.Fatal(err)
	}
	return m
}

func sum(x []float64) (s float64) {
	for _, v := range x {
		s += v
	}
	return s
}

func mapRow(x []float64, f func(float64) float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = f(v)
	}
	return out
}

func TestAggregates(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true})
	ctx := ctxT(t)
	cl := j.clients[0]
	for li, meta := range libLayouts() {
		t.Run(fmt.Sprintf("layout%d", li), func(t *testing.T) {
			meta.Name = fmt.Sprintf("agg%d", li)
			model := libData(uint64(li))
			m := setup(t, ctx, cl, meta, model)
			for r := 0; r < 4; r++ {
				x := model[r]
				var asum, ssq float64
				nnz := int64(0)
				for _, v := range x {
					asum += math.Abs(v)
					ssq += v * v
					if v != 0 {
						nnz++
					}
				}
				absx := mapRow(x, math.Abs)
				get := func(f psf.GetFunc[float64]) float64 {
					v, err := psf.Get(ctx, m, f)
					if err != nil {
						t.Fatalf("%s row %d: %v", f.Name(), r, err)
					}
					return v
				}
				checkClose(t, fmt.Sprintf("Sum(%d)", r), get(psf.Sum(r)), sum(x))
				checkClose(t, fmt.Sprintf("Asum(%d)", r), get(psf.Asum(r)), asum)
				checkClose(t, fmt.Sprintf("Max(%d)", r), get(psf.Max(r)), slices.Max(x))
				checkClose(t, fmt.Sprintf("Min(%d)", r), get(psf.Min(r)), slices.Min(x))
				checkClose(t, fmt.Sprintf("Amax(%d)", r), get(psf.Amax(r)), slices.Max(absx))
				checkClose(t, fmt.Sprintf("Amin(%d)", r), get(psf.Amin(r)), slices.Min(absx))
				checkClose(t, fmt.Sprintf("Nrm2(%d)", r), get(psf.Nrm2(r)), math.Sqrt(ssq))
				if n, err := psf.Get(ctx, m, psf.Nnz(r)); err != nil || n != nnz {
					t.Errorf("Nnz(%d) = %d, %v; want %d", r, n, err, nnz)
				}
				if n, err := psf.Get(ctx, m, psf.Size(r)); err != nil || n != libCols {
					t.Errorf("Size(%d) = %d, %v; want %d", r, n, err, libCols)
				}
				got, err := psf.Get(ctx, m, psf.Pull(r))
				if err != nil {
					t.Fatal(err)
				}
				checkRow(t, fmt.Sprintf("Pull(%d)", r), got, x)
				for r2 := 0; r2 < 4; r2++ {
					var dot float64
					for i := range x {
						dot += x[i] * model[r2][i]
					}
					checkClose(t, fmt.Sprintf("Dot(%d,%d)", r, r2), get(psf.Dot(r, r2)), dot)
					eq, err := psf.Get(ctx, m, psf.Equal(r, r2))
					if want := slices.Equal(x, model[r2]); err != nil || eq != want {
						t.Errorf("Equal(%d,%d) = %v, %v; want %v", r, r2, eq, err, want)
					}
				}
			}
			// The row of zeros (row 1, never written) has Amax 0 and Amin 0.
			if v := get0(t, ctx, m, psf.Amax(1)); v != 0 {
				t.Errorf("Amax of zeros = %v", v)
			}
			// A huge row does not overflow Nrm2.
			big := mapRow(model[0], func(v float64) float64 { return v * 1e300 })
			if err := m.UpdateRow(ctx, 5, big); err != nil {
				t.Fatal(err)
			}
			var ssq float64
			for _, v := range model[0] {
				ssq += v * v
			}
			checkClose(t, "Nrm2(huge)", get0(t, ctx, m, psf.Nrm2(5))/1e300, math.Sqrt(ssq))
			if li == 2 { // rows 0 and 6 are on different servers
				if _, err := psf.Get(ctx, m, psf.Dot(0, 6)); !errors.Is(err, psf.ErrNotColocated) {
					t.Errorf("Dot over row blocks on different servers: %v, want ErrNotColocated", err)
				}
			}
		})
	}
}

func get0[R any](t *testing.T, ctx context.Context, m *psf.Matrix, f psf.GetFunc[R]) R {
	t.Helper()
	v, err := psf.Get(ctx, m, f)
	if err != nil {
		t.Fatalf("%s: %v", f.Name(), err)
	}
	return v
}

func TestElementWise(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true})
	ctx := ctxT(t)
	cl := j.clients[0]
	unary := []struct {
		f     func(from, to int) psf.UpdateFunc
		local func(float64) float64
	}{
		{psf.Abs, math.Abs}, {psf.Ceil, math.Ceil}, {psf.Floor, math.Floor}, {psf.Round, math.Round},
		{psf.Signum, func(x float64) float64 {
			if x > 0 {
				return 1
			} else if x < 0 {
				return -1
			}
			return x
		}},
		{psf.Sqrt, math.Sqrt}, {psf.Exp, math.Exp}, {psf.Expm1, math.Expm1}, {psf.Log, math.Log},
		{psf.Log10, math.Log10}, {psf.Log1p, math.Log1p}, {psf.Copy, func(x float64) float64 { return x }},
	}
	scalar := []struct {
		f     func(from, to int, s float64) psf.UpdateFunc
		local func(x, s float64) float64
	}{
		{psf.AddS, func(x, s float64) float64 { return x + s }},
		{psf.SubS, func(x, s float64) float64 { return x - s }},
		{psf.MulS, func(x, s float64) float64 { return x * s }},
		{psf.DivS, func(x, s float64) float64 { return x / s }},
		{psf.Pow, math.Pow},
	}
	binary := []struct {
		f     func(a, b, to int) psf.UpdateFunc
		local func(x, y float64) float64
	}{
		{psf.Add, func(x, y float64) float64 { return x + y }},
		{psf.Sub, func(x, y float64) float64 { return x - y }},
		{psf.Mul, func(x, y float64) float64 { return x * y }},
		{psf.Div, func(x, y float64) float64 { return x / y }},
		{psf.MaxV, math.Max}, {psf.MinV, math.Min},
	}
	for li, meta := range libLayouts() {
		t.Run(fmt.Sprintf("layout%d", li), func(t *testing.T) {
			meta.Name = fmt.Sprintf("ew%d", li)
			model := libData(uint64(10 + li))
			m := setup(t, ctx, cl, meta, model)
			update := func(f psf.UpdateFunc) {
				t.Helper()
				if err := m.Update(ctx, f); err != nil {
					t.Fatalf("%s: %v", f.Name(), err)
				}
			}
			for _, u := range unary {
				for _, from := range []int{0, 1, 2, 3} {
					update(u.f(from, 4))
					model[4] = mapRow(model[from], u.local)
					got, err := m.GetRow(ctx, 4)
					if err != nil {
						t.Fatal(err)
					}
					checkRow(t, fmt.Sprintf("%s(%d)", u.f(0, 0).Name(), from), got, model[4])
				}
			}
			// In place: from == to.
			update(psf.Abs(3, 3))
			model[3] = mapRow(model[3], math.Abs)
			for _, s := range scalar {
				for _, from := range []int{0, 2} {
					update(s.f(from, 5, 1.5))
					model[5] = mapRow(model[from], func(x float64) float64 { return s.local(x, 1.5) })
					got, _ := m.GetRow(ctx, 5)
					checkRow(t, fmt.Sprintf("%s(%d)", s.f(0, 0, 0).Name(), from), got, model[5])
				}
			}
			for _, b := range binary {
				update(b.f(0, 2, 4))
				for i := range model[4] {
					model[4][i] = b.local(model[0][i], model[2][i])
				}
				got, _ := m.GetRow(ctx, 4)
				checkRow(t, b.f(0, 0, 0).Name(), got, model[4])
			}
			update(psf.Axpy(-2.5, 0, 2))
			for i := range model[2] {
				model[2][i] += -2.5 * model[0][i]
			}
			update(psf.Scale(0, 0.25))
			model[0] = mapRow(model[0], func(x float64) float64 { return x * 0.25 })
			update(psf.Fill(1, 7))
			model[1] = mapRow(model[1], func(float64) float64 { return 7 })
			checkAll(t, ctx, m, model)
			if li == 2 {
				for _, f := range []psf.UpdateFunc{psf.Copy(0, 6), psf.Add(0, 1, 7), psf.Axpy(1, 6, 0)} {
					if err := m.Update(ctx, f); !errors.Is(err, psf.ErrNotColocated) {
						t.Errorf("%s over row blocks on different servers: %v, want ErrNotColocated", f.Name(), err)
					}
				}
				checkAll(t, ctx, m, model) // and nothing changed
			}
		})
	}
}

func TestRandom(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true})
	ctx := ctxT(t)
	cl := j.clients[0]
	const cols = 20001
	var first [2][]float64
	for li, meta := range []psf.MatrixMeta{
		{Rows: 2, Cols: cols},
		{Rows: 2, Cols: cols, RowBlock: 1, ColBlock: 777},
		{Rows: 2, Cols: cols, RowBlock: 2, ColBlock: cols},
	} {
		meta.Name = fmt.Sprintf("rnd%d", li)
		m, err := cl.CreateMatrix(ctx, meta)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Update(ctx, psf.RandomUniform(0, -1, 3, 42)); err != nil {
			t.Fatal(err)
		}
		if err := m.Update(ctx, psf.RandomNormal(1, 2, 0.5, 42)); err != nil {
			t.Fatal(err)
		}
		got, err := m.GetRows(ctx, []int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		// Identical whatever the layout, and the documented formula.
		for r := range got {
			if first[r] == nil {
				first[r] = got[r]
			} else if !slices.Equal(first[r], got[r]) {
				t.Errorf("layout %d: row %d differs from layout 0", li, r)
			}
		}
		for c := int64(0); c < cols; c += 997 {
			checkClose(t, "uniform", got[0][c], -1+4*psf.UniformAt(42, c))
			checkClose(t, "normal", got[1][c], 2+0.5*psf.NormalAt(42, c))
		}
	}
	mean := func(x []float64) float64 { return sum(x) / float64(len(x)) }
	std := func(x []float64) float64 {
		mu, s := mean(x), 0.0
		for _, v := range x {
			s += (v - mu) * (v - mu)
		}
		return math.Sqrt(s / float64(len(x)))
	}
	if mu, lo, hi := mean(first[0]), slices.Min(first[0]), slices.Max(first[0]); math.Abs(mu-1) > 0.05 || lo < -1 || hi >= 3 {
		t.Errorf("uniform [-1,3): mean %v, min %v, max %v", mu, lo, hi)
	}
	if mu, sd := mean(first[1]), std(first[1]); math.Abs(mu-2) > 0.02 || math.Abs(sd-0.5) > 0.02 {
		t.Errorf("normal(2, 0.5): mean %v, std %v", mu, sd)
	}
	// Another seed gives other values.
	m, _ := cl.OpenMatrix(ctx, "rnd0")
	if err := m.Update(ctx, psf.RandomUniform(0, -1, 3, 43)); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.GetRow(ctx, 0); slices.Equal(got, first[0]) {
		t.Error("seed 43 gave the values of seed 42")
	}
}

// Sums follow IEEE arithmetic with infinities: an infinity or an overflow
// gives ±Inf (never NaN, which the compensation term Inf-Inf would give),
// +Inf and -Inf together or a NaN give NaN; on any number of servers, so
// that the infinity arrives in the servers' partial sums and in the
// worker's merge of them.
func TestAggregatesInf(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	rows := [][]float64{
		{1, inf, 2, 3, 4, 5, 6},
		{1e308, 1e308, 0, 0, 0, 0, 0},
		{-1e308, -1e308, -1e308, 1, 0, 0, 0},
		{1, inf, 2, -inf, 4, 5, 6},
		{1, 2, 3, 4, nan, 5, 6},
		{1, 2, 3, 4, 5, 6, inf},
		{2, 2, 2, 2, 2, 2, 2},
	}
	type want struct{ sum, asum, nrm2, max, min, amax, amin float64 }
	wants := []want{
		{inf, inf, inf, inf, 1, inf, 1},
		{inf, inf, math.Sqrt2 * 1e308, 1e308, 0, 1e308, 0},
		{-inf, inf, math.Sqrt(3) * 1e308, 1, -1e308, 1e308, 0},
		{nan, inf, inf, inf, -inf, inf, 1},
		{nan, nan, nan, nan, nan, nan, nan},
		{inf, inf, inf, inf, 1, inf, 1},
		{14, 14, math.Sqrt(28), 2, 2, 2, 2},
	}
	// Dot of row i with the last row (all 2): 2*Sum.
	for _, servers := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("%dservers", servers), func(t *testing.T) {
			j := newJob(t, servers, 1, testcluster.Options{Mem: true, Quiet: true})
			ctx := ctxT(t)
			for li, meta := range []psf.MatrixMeta{
				{Rows: len(rows), Cols: 7},
				{Rows: len(rows), Cols: 7, ColBlock: 1},
			} {
				meta.Name = fmt.Sprintf("inf%d", li)
				m, err := j.clients[0].CreateMatrix(ctx, meta)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.UpdateRows(ctx, []int{0, 1, 2, 3, 4, 5, 6}, rows); err != nil {
					t.Fatal(err)
				}
				for r, w := range wants {
					name := func(f string) string { return fmt.Sprintf("layout %d: %s(%v)", li, f, rows[r]) }
					checkClose(t, name("Sum"), get0(t, ctx, m, psf.Sum(r)), w.sum)
					checkClose(t, name("Asum"), get0(t, ctx, m, psf.Asum(r)), w.asum)
					checkClose(t, name("Nrm2"), get0(t, ctx, m, psf.Nrm2(r)), w.nrm2)
					checkClose(t, name("Max"), get0(t, ctx, m, psf.Max(r)), w.max)
					checkClose(t, name("Min"), get0(t, ctx, m, psf.Min(r)), w.min)
					checkClose(t, name("Amax"), get0(t, ctx, m, psf.Amax(r)), w.amax)
					checkClose(t, name("Amin"), get0(t, ctx, m, psf.Amin(r)), w.amin)
					checkClose(t, name("Dot"), get0(t, ctx, m, psf.Dot(r, 6)), 2*w.sum)
				}
			}
		})
	}
}
