package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"

	"github.com/gopslite/pslite/internal/psfmodel"
	"github.com/gopslite/pslite/ps"
	"github.com/gopslite/pslite/psf"
)

// srow is the local copy of a sparse row: its entries that are not +0.
type srow = psfmodel.Row

// smatrix is a sparse psf matrix and its local copy.
type smatrix struct {
	w     *worker
	ctx   context.Context
	m     *psf.Matrix
	model []srow
}

// ids returns n distinct column ids as they come: small, negative,
// clustered near 2^62, hashed over all int64, and the extremes.
func ids(r *rand.Rand, n int) []int64 {
	return psfmodel.IDs(r, n, 500, 10_000, []int64{0, math.MinInt64, math.MaxInt64})
}

// verify compares every row, entry by entry, with the local copy.
func (x *smatrix) verify(what string) {
	all := make([]int, len(x.model))
	for i := range all {
		all[i] = i
	}
	got, err := x.m.GetSparseRows(x.ctx, all)
	check(err, what+": GetSparseRows")
	for r := range all {
		x.w.vector(fmt.Sprintf("%s: %s row %d", what, x.m.Name(), r), got[r], x.model[r].Vector())
	}
}

func (w *worker) vector(what string, got, want psf.SparseVector) {
	w.checks++
	if !slices.Equal(got.Indices, want.Indices) {
		fail("%s: %d columns stored, want %d", what, len(got.Indices), len(want.Indices))
	}
	for i := range want.Values {
		if !closeTo(got.Values[i], want.Values[i]) {
			fail("%s: column %d: got %v, want %v", what, want.Indices[i], got.Values[i], want.Values[i])
		}
	}
}

func (x *smatrix) update(f psf.UpdateFunc, local func()) {
	check(x.m.Update(x.ctx, f), f.Name())
	local()
}

// sparse exercises a sparse matrix spread over every server: with one row
// block, and with row blocks of 3 rows.
func (w *worker) sparse(ctx context.Context) {
	for li, meta := range []psf.MatrixMeta{
		{Type: psf.Sparse, Rows: rows},
		{Type: psf.Sparse, Rows: rows, RowBlock: 3},
	} {
		meta.Name = fmt.Sprintf("w%d-sparse%d", w.rank, li)
		m, err := w.c.CreateMatrix(ctx, meta)
		check(err, "create "+meta.Name)
		x := &smatrix{w: w, ctx: ctx, m: m, model: make([]srow, rows)}
		for r := range x.model {
			x.model[r] = srow{}
		}
		x.verify("new sparse matrix")
		x.fill(uint64(100*w.rank + li))
		x.library()
		x.arrays(uint64(100*w.rank + li))
		x.kernels()
		x.refusals()
		x.store(w.dir, int64(10+li))
		check(w.c.DeleteMatrix(ctx, x.m.Name()), "delete")
	}
	w.sharedSparse(ctx)
}

// fill writes rows 0 (mixed), 2 (positive), 3 (negative) and 4 (halves,
// some of them 0) through increments, puts and whole sparse rows.
func (x *smatrix) fill(seed uint64) {
	r := rand.New(rand.NewPCG(seed, 5))
	keys := ids(r, 600)
	vals := make([]float64, len(keys))
	for i := range vals {
		vals[i] = r.NormFloat64() * 10
	}
	check(x.m.IncrementAt(x.ctx, 0, keys[:400], vals[:400]), "IncrementAt")
	for i, k := range keys[:400] {
		x.model[0].Set(k, vals[i])
	}
	v2, v3, v4 := srow{}, srow{}, srow{}
	for i, k := range keys {
		if i%3 == 0 {
			v2[k] = 0.5 + r.Float64()
		}
		if i%4 == 1 {
			v3[k] = -0.5 - r.Float64()
		}
		if i%2 == 0 {
			v4.Set(k, float64(i%5-2)/2)
		}
	}
	check(x.m.UpdateSparseRows(x.ctx, []int{2, 4}, []psf.SparseVector{v2.Vector(), v4.Vector()}), "UpdateSparseRows")
	vec := v3.Vector()
	check(x.m.UpdateAt(x.ctx, 3, vec.Indices, vec.Values), "UpdateAt")
	x.model[2], x.model[3], x.model[4] = v2, v3, v4
	x.verify("sparse data")
}

func (x *smatrix) library() {
	ctx, m, md := x.ctx, x.m, x.model
	get := func(f psf.GetFunc[float64]) float64 {
		v, err := psf.Get(ctx, m, f)
		check(err, f.Name())
		return v
	}
	for r := 0; r < 5; r++ {
		vals := []float64{0} // a sparse row always has columns not stored
		for _, v := range md[r] {
			vals = append(vals, v)
		}
		var sum, asum, ssq float64
		mx, mn, amx, amn := math.Inf(-1), math.Inf(1), 0.0, math.Inf(1)
		var nnz int64
		for _, v := range vals {
			sum += v
			asum += math.Abs(v)
			ssq += v * v
			mx, mn = max(mx, v), min(mn, v)
			amx, amn = max(amx, math.Abs(v)), min(amn, math.Abs(v))
			if v != 0 {
				nnz++
			}
		}
		name := func(f string) string { return fmt.Sprintf("%s %s(%d)", m.Name(), f, r) }
		x.w.value(name("Sum"), get(psf.Sum(r)), sum)
		x.w.value(name("Asum"), get(psf.Asum(r)), asum)
		x.w.value(name("Nrm2"), get(psf.Nrm2(r)), math.Sqrt(ssq))
		x.w.value(name("Max"), get(psf.Max(r)), mx)
		x.w.value(name("Min"), get(psf.Min(r)), mn)
		x.w.value(name("Amax"), get(psf.Amax(r)), amx)
		x.w.value(name("Amin"), get(psf.Amin(r)), amn)
		n, err := psf.Get(ctx, m, psf.Nnz(r))
		check(err, "Nnz")
		x.w.value(name("Nnz"), float64(n), float64(nnz))
		n, err = psf.Get(ctx, m, psf.Size(r))
		check(err, "Size")
		x.w.value(name("Size"), float64(n), float64(len(md[r])))
		for r2 := 0; r2 < 5; r2++ {
			var dot float64
			eq := true
			for _, k := range psfmodel.Union(md[r], md[r2]) {
				dot += md[r][k] * md[r2][k]
				eq = eq && md[r][k] == md[r2][k]
			}
			x.w.value(fmt.Sprintf("%s Dot(%d,%d)", m.Name(), r, r2), get(psf.Dot(r, r2)), dot)
			got, err := psf.Get(ctx, m, psf.Equal(r, r2))
			check(err, "Equal")
			x.w.checks++
			if got != eq {
				fail("%s Equal(%d,%d) = %v", m.Name(), r, r2, got)
			}
		}
	}
	signum := func(v float64) float64 {
		switch {
		case v > 0:
			return 1
		case v < 0:
			return -1
		}
		return v
	}
	unary := []struct {
		f func(from, to int) psf.UpdateFunc
		g func(float64) float64
	}{
		{psf.Abs, math.Abs}, {psf.Ceil, math.Ceil}, {psf.Floor, math.Floor}, {psf.Round, math.Round},
		{psf.Signum, signum}, {psf.Sqrt, math.Sqrt}, {psf.Expm1, math.Expm1}, {psf.Log1p, math.Log1p},
		{psf.Copy, func(v float64) float64 { return v }},
		{func(a, b int) psf.UpdateFunc { return psf.MulS(a, b, -1.5) }, func(v float64) float64 { return v * -1.5 }},
		{func(a, b int) psf.UpdateFunc { return psf.DivS(a, b, 3) }, func(v float64) float64 { return v / 3 }},
		{func(a, b int) psf.UpdateFunc { return psf.Pow(a, b, 3) }, func(v float64) float64 { return math.Pow(v, 3) }},
	}
	for _, u := range unary {
		for _, from := range []int{0, 3, 4} {
			src := md[from].Clone()
			x.update(u.f(from, 5), func() {
				md[5] = srow{}
				for k, v := range src {
					md[5].Set(k, u.g(v))
				}
			})
		}
		x.verify(u.f(0, 0).Name())
	}
	binary := []struct {
		f func(a, b, to int) psf.UpdateFunc
		g func(a, b float64) float64
	}{
		{psf.Add, func(a, b float64) float64 { return a + b }},
		{psf.Sub, func(a, b float64) float64 { return a - b }},
		{psf.Mul, func(a, b float64) float64 { return a * b }},
		{psf.MaxV, math.Max}, {psf.MinV, math.Min},
	}
	for _, b := range binary {
		for _, out := range []int{7, 4} { // 7 is in another row block of the second layout
			a, c := md[0].Clone(), md[4].Clone()
			x.update(b.f(0, 4, out), func() {
				md[out] = srow{}
				for _, k := range psfmodel.Union(a, c) {
					md[out].Set(k, b.g(a[k], c[k]))
				}
			})
		}
		x.verify(b.f(0, 0, 0).Name())
	}
	x.update(psf.Axpy(-0.75, 0, 2), func() {
		for k, v := range md[0] {
			md[2].Set(k, md[2][k]+-0.75*v)
		}
	})
	x.update(psf.Scale(3, 2), func() {
		for k, v := range md[3] {
			md[3].Set(k, 2*v)
		}
	})
	x.update(psf.Fill(7, 0), func() { md[7] = srow{} })
	x.verify("in place")
}

func (x *smatrix) arrays(seed uint64) {
	ctx, m, md := x.ctx, x.m, x.model
	r := rand.New(rand.NewPCG(seed, 6))
	vecs := make([]psf.SparseVector, 3)
	for i := range vecs {
		ks := ids(r, 100)
		vs := make([]float64, len(ks))
		for j := range vs {
			vs[j] = float64(r.IntN(2001)-1000) / 8
		}
		v, err := psf.NewSparseVector(ks, vs)
		check(err, "NewSparseVector")
		vecs[i] = v
	}
	rowsAt := []int{1, 6, 9}
	check(m.IncrementRowsAt(ctx, rowsAt, vecs), "IncrementRowsAt")
	check(m.IncrementRowsAt(ctx, rowsAt, vecs), "IncrementRowsAt")
	for i, row := range rowsAt {
		for j, k := range vecs[i].Indices {
			md[row].Set(k, md[row][k]+2*vecs[i].Values[j])
		}
	}
	check(m.UpdateRowsAt(ctx, []int{8}, vecs[:1]), "UpdateRowsAt")
	for j, k := range vecs[0].Indices {
		md[8].Set(k, vecs[0].Values[j])
	}
	cols := append(slices.Clone(vecs[1].Indices[:30]), vecs[1].Indices[0], 77, -77)
	vals := make([]float64, len(cols))
	for i := range vals {
		vals[i] = float64(i) - 10
	}
	check(m.Update(ctx, psf.MaxAt(6, cols, vals)), "MaxAt")
	for i, k := range cols {
		md[6].Set(k, math.Max(md[6][k], vals[i]))
	}
	check(m.Update(ctx, psf.MinAt(9, cols, vals)), "MinAt")
	for i, k := range cols {
		md[9].Set(k, math.Min(md[9][k], vals[i]))
	}
	x.verify("sparse arrays")

	got, err := m.GetAt64(ctx, 6, cols)
	check(err, "GetAt64")
	for i, k := range cols {
		x.w.value(fmt.Sprintf("GetAt64 col %d", k), got[i], md[6][k])
	}
	icols := []int{0, 77, -77, 5, 0}
	got, err = m.GetAt(ctx, 6, icols)
	check(err, "GetAt")
	for i, k := range icols {
		x.w.value(fmt.Sprintf("GetAt col %d", k), got[i], md[6][int64(k)])
	}
	qrows := []int{9, 0, 6, 9, 2}
	all, err := m.GetRowsAt64(ctx, qrows, cols)
	check(err, "GetRowsAt64")
	for i, row := range qrows {
		for j, k := range cols {
			x.w.value(fmt.Sprintf("GetRowsAt64 row %d col %d", row, k), all[i][j], md[row][k])
		}
	}
	all, err = m.GetRowsAtAsync(qrows, icols).Wait(ctx)
	check(err, "GetRowsAtAsync")
	for i, row := range qrows {
		for j, k := range icols {
			x.w.value(fmt.Sprintf("GetRowsAt row %d col %d", row, k), all[i][j], md[row][int64(k)])
		}
	}
	v, err := m.GetSparseRowAsync(6).Wait(ctx)
	check(err, "GetSparseRowAsync")
	x.w.vector("GetSparseRowAsync", v, md[6].Vector())
	seen := 0
	for b, err := range m.GetSparseRowsFlow(ctx, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 3) {
		check(err, "GetSparseRowsFlow")
		for i, row := range b.Rows {
			x.w.vector(fmt.Sprintf("flow row %d", row), b.Values[i], md[row].Vector())
			seen++
		}
	}
	if seen != rows {
		fail("GetSparseRowsFlow yielded %d rows, want %d", seen, rows)
	}
	// Many increments in flight at once.
	var hs []*psf.Handle
	for i := 0; i < 20; i++ {
		hs = append(hs, m.IncrementRowsAtAsync([]int{5}, vecs[2:]))
	}
	for _, h := range hs {
		check(h.Wait(ctx), "async IncrementRowsAt")
	}
	for j, k := range vecs[2].Indices {
		md[5].Set(k, md[5][k]+20*vecs[2].Values[j])
	}
	x.verify("async increments")
}

func (x *smatrix) kernels() {
	md := x.model
	clipped := func(v float64) float64 { return min(max(v, -1), 2) }
	src := md[0].Clone()
	x.update(psf.Map(kClip, []float64{-1, 2}, 0, 5), func() {
		md[5] = srow{}
		for k, v := range src {
			md[5].Set(k, clipped(v))
		}
	})
	a, b, c := md[0].Clone(), md[2].Clone(), md[4].Clone()
	x.update(psf.Zip2Map(kHypot, struct{}{}, 0, 4, 6), func() {
		md[6] = srow{}
		for _, k := range psfmodel.Union(a, c) {
			md[6].Set(k, math.Hypot(a[k], c[k]))
		}
	})
	x.update(psf.Zip2Map(kMix, 3, 0, 4, 7), func() {
		md[7] = srow{}
		for _, k := range psfmodel.Union(a, c) {
			if k%3 == 0 {
				md[7].Set(k, a[k])
			} else {
				md[7].Set(k, c[k])
			}
		}
	})
	x.update(psf.Zip3Map(kFma, struct{}{}, 0, 2, 4, 3), func() {
		md[3] = srow{}
		for _, k := range psfmodel.Union(a, b, c) {
			md[3].Set(k, math.FMA(a[k], b[k], c[k]))
		}
	})
	x.update(psf.Zip3Map(kSelect, struct{}{}, 0, 2, 4, 8), func() {
		md[8] = srow{}
		for _, k := range psfmodel.Union(a, b, c) {
			if k%2 == 0 {
				md[8].Set(k, a[k]-c[k])
			} else {
				md[8].Set(k, b[k])
			}
		}
	})
	x.verify("sparse user kernels")
}

// refusals: functions that would change the 2^64 columns not stored fail
// with ErrSparse and change nothing.
func (x *smatrix) refusals() {
	for _, f := range []psf.UpdateFunc{
		psf.Exp(0, 5), psf.Log(0, 5), psf.AddS(0, 5, 1), psf.DivS(0, 5, 0), psf.Div(0, 2, 5),
		psf.Fill(0, 1), psf.RandomNormal(0, 0, 1, 1), psf.Increment(0, []float64{1}),
		psf.Map(kRamp, 0.5, 0, 5), // f(0) is 0 but it takes the index: run at the stored entries
	} {
		err := x.m.Update(x.ctx, f)
		if f.Name() == "test_psf.Ramp" {
			check(err, "Ramp") // documented: computed at the entries of row 0
			src := x.model[0].Clone()
			x.model[5] = srow{}
			for k, v := range src {
				x.model[5].Set(k, v+0.5*float64(k))
			}
			continue
		}
		x.w.checks++
		if !errors.Is(err, psf.ErrSparse) {
			fail("%s on a sparse matrix: %v, want ErrSparse", f.Name(), err)
		}
	}
	_, err := x.m.GetRow(x.ctx, 0)
	x.w.checks++
	if !errors.Is(err, psf.ErrSparse) {
		fail("GetRow of a sparse matrix: %v, want ErrSparse", err)
	}
	x.verify("after refusals")
}

func (x *smatrix) store(dir string, id int64) {
	ctx, m := x.ctx, x.m
	snapshot := func() []srow {
		s := make([]srow, len(x.model))
		for i := range x.model {
			s[i] = x.model[i].Clone()
		}
		return s
	}
	saveDir := filepath.Join(dir, "saves")
	check(m.Save(ctx, saveDir), "Save")
	saved := snapshot()
	check(m.Update(ctx, psf.Scale(0, -1)), "Scale")
	check(m.Load(ctx, saveDir), "Load")
	x.verify("sparse loaded")
	check(m.Checkpoint(ctx, id), "Checkpoint")
	check(m.IncrementAt(ctx, 9, []int64{1, 2, 3}, []float64{1, 1, 1}), "IncrementAt")
	check(m.Recover(ctx, id), "Recover")
	x.model = saved
	x.verify("sparse recovered")
	check(x.w.c.DeleteMatrix(ctx, m.Name()), "delete")
	lm, err := x.w.c.LoadMatrix(ctx, m.Name(), saveDir)
	check(err, "LoadMatrix")
	x.m = lm
	x.verify("sparse LoadMatrix")
}

// sharedSparse: every worker adds (rank+1) at the same 1000 columns of one
// sparse matrix, five times; after a barrier each checks the totals.
func (w *worker) sharedSparse(ctx context.Context) {
	m, err := w.c.CreateMatrix(ctx, psf.MatrixMeta{Name: "shared-sparse", Type: psf.Sparse, Rows: 2})
	check(err, "create shared-sparse")
	cols := ids(rand.New(rand.NewPCG(77, 7)), 1000)
	inc := make([]float64, len(cols))
	for i := range inc {
		inc[i] = float64(w.rank + 1)
	}
	for i := 0; i < 5; i++ {
		check(m.IncrementAt(ctx, 1, cols, inc), "shared sparse increment")
	}
	check(ps.Barrier(0, ps.WorkerGroup), "barrier")
	n := ps.NumWorkers()
	each := float64(5 * n * (n + 1) / 2)
	s, err := psf.Get(ctx, m, psf.Sum(1))
	check(err, "shared sparse sum")
	w.value("shared sparse sum", s, each*float64(len(cols)))
	size, err := psf.Get(ctx, m, psf.Size(1))
	check(err, "shared sparse size")
	w.value("shared sparse size", float64(size), float64(len(cols)))
	got, err := m.GetAt64(ctx, 1, cols)
	check(err, "shared sparse GetAt64")
	for i, v := range got {
		w.value(fmt.Sprintf("shared sparse col %d", cols[i]), v, each)
	}
}
