package psf_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gopslite/pslite/internal/psfmodel"
	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/psf"
)

// srow is the model of a sparse row: its entries that are not +0.
type srow = psfmodel.Row

// sparseKeys returns n distinct ids drawn as ids come: small, negative,
// clustered far away, hashed over all int64, and the extremes.
func sparseKeys(r *rand.Rand, n int) []int64 {
	return psfmodel.IDs(r, n, 200, 5000, []int64{0, math.MinInt64, math.MaxInt64, -1, 1})
}

// sparseData returns the model of a matrix's rows: row 0 mixed values,
// row 1 empty, row 2 positive, row 3 all negative, row 4 small integers
// and halves on many of row 0's columns; the other rows empty.
func sparseData(seed uint64, rows int) []srow {
	r := rand.New(rand.NewPCG(seed, 17))
	model := make([]srow, rows)
	for i := range model {
		model[i] = srow{}
	}
	keys := sparseKeys(r, 300)
	for i, k := range keys {
		if i < 200 {
			model[0][k] = r.NormFloat64() * 10
		}
		if i%3 == 0 {
			model[2][k] = 0.5 + 3*r.Float64()
		}
		if i%4 == 1 {
			model[3][k] = -0.25 - r.Float64()
		}
		if i%2 == 0 {
			model[4].Set(k, float64(i%7-3)/2) // some of these are 0: not stored
		}
	}
	return model
}

// sparseSetup creates a sparse matrix and writes the model's rows.
func sparseSetup(t *testing.T, ctx context.Context, cl *psf.Client, meta psf.MatrixMeta, model []srow) *psf.Matrix {
	t.Helper()
	m, err := cl.CreateMatrix(ctx, meta)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]int, len(model))
	vecs := make([]psf.SparseVector, len(model))
	for i := range model {
		rows[i], vecs[i] = i, model[i].Vector()
	}
	if err := m.UpdateSparseRows(ctx, rows, vecs); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkSparse compares every row of m with the model, entry by entry (the
// same columns stored, the same values).
func checkSparse(t *testing.T, ctx context.Context, m *psf.Matrix, model []srow) {
	t.Helper()
	rows := make([]int, len(model))
	for i := range rows {
		rows[i] = i
	}
	got, err := m.GetSparseRows(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range model {
		checkVector(t, fmt.Sprintf("%s row %d", m.Name(), i), got[i], want.Vector())
	}
}

func checkVector(t *testing.T, what string, got, want psf.SparseVector) {
	t.Helper()
	if !slices.Equal(got.Indices, want.Indices) {
		t.Errorf("%s: %d columns stored %v, want %d: %v", what, len(got.Indices), head(got.Indices), len(want.Indices), head(want.Indices))
		return
	}
	for i := range want.Values {
		if !closeTo(got.Values[i], want.Values[i]) || math.Signbit(got.Values[i]) != math.Signbit(want.Values[i]) && !math.IsNaN(want.Values[i]) {
			t.Errorf("%s: column %d: got %v, want %v", what, want.Indices[i], got.Values[i], want.Values[i])
			return
		}
	}
}

func head(x []int64) []int64 { return x[:min(len(x), 8)] }

// sparseLayouts: the default (one row block), and row blocks of 2 rows.
func sparseLayouts() []psf.MatrixMeta {
	return []psf.MatrixMeta{
		{Type: psf.Sparse, Rows: 8},
		{Type: psf.Sparse, Rows: 8, RowBlock: 2},
	}
}

func TestSparseAggregates(t *testing.T) {
	for _, servers := range []int{2, 3} {
		j := newJob(t, servers, 1, testcluster.Options{Mem: true, Quiet: true})
		ctx := ctxT(t)
		for li, meta := range sparseLayouts() {
			meta.Name = fmt.Sprintf("sagg%d", li)
			model := sparseData(uint64(li), meta.Rows)
			model[5] = srow{3: math.Inf(1), -7: 2}
			model[6] = srow{11: math.NaN(), 3: 1}
			model[7] = srow{0: -3} // column 0 only, in its side slot
			m := sparseSetup(t, ctx, j.clients[0], meta, model)
			if mm := m.Meta(); mm.Type != psf.Sparse || mm.NumColBlocks() != int64(servers) || len(mm.RowPartitions(7)) != servers {
				t.Fatalf("meta %+v", mm)
			}
			for r := range model {
				x := model[r].Values()
				var sum, asum, ssq float64
				var nnz int64
				for _, v := range x {
					sum += v
					asum += math.Abs(v)
					ssq += v * v
					if v != 0 {
						nnz++
					}
				}
				abs := mapRow(x, math.Abs)
				name := func(f string) string { return fmt.Sprintf("%d servers, layout %d: %s(%d)", servers, li, f, r) }
				checkClose(t, name("Sum"), get0(t, ctx, m, psf.Sum(r)), sum)
				checkClose(t, name("Asum"), get0(t, ctx, m, psf.Asum(r)), asum)
				checkClose(t, name("Nrm2"), get0(t, ctx, m, psf.Nrm2(r)), math.Sqrt(ssq))
				checkClose(t, name("Max"), get0(t, ctx, m, psf.Max(r)), maxNaN(x))
				checkClose(t, name("Min"), get0(t, ctx, m, psf.Min(r)), minNaN(x))
				checkClose(t, name("Amax"), get0(t, ctx, m, psf.Amax(r)), maxNaN(abs))
				checkClose(t, name("Amin"), get0(t, ctx, m, psf.Amin(r)), minNaN(abs))
				if n := get0(t, ctx, m, psf.Nnz(r)); n != nnz {
					t.Errorf("%s = %d, want %d", name("Nnz"), n, nnz)
				}
				if n := get0(t, ctx, m, psf.Size(r)); n != int64(len(model[r])) {
					t.Errorf("%s = %d, want %d (the entries stored)", name("Size"), n, len(model[r]))
				}
				for r2 := range model {
					var dot float64
					for _, k := range psfmodel.Union(model[r], model[r2]) {
						dot += model[r].Get(k) * model[r2].Get(k)
					}
					checkClose(t, name(fmt.Sprintf("Dot(.,%d)", r2)), get0(t, ctx, m, psf.Dot(r, r2)), dot)
					eq := true
					for _, k := range psfmodel.Union(model[r], model[r2]) {
						eq = eq && model[r].Get(k) == model[r2].Get(k)
					}
					if got := get0(t, ctx, m, psf.Equal(r, r2)); got != eq {
						t.Errorf("%s = %v, want %v", name(fmt.Sprintf("Equal(.,%d)", r2)), got, eq)
					}
				}
			}
			// The row of negative values has Max 0: columns not stored are 0.
			if v := get0(t, ctx, m, psf.Max(3)); v != 0 {
				t.Errorf("Max of a row of negative values = %v, want 0", v)
			}
			checkSparse(t, ctx, m, model)
		}
	}
}

func maxNaN(x []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

func minNaN(x []float64) float64 {
	m := math.Inf(1)
	for _, v := range x {
		m = min(m, v)
	}
	return m
}

func TestSparseElementWise(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	ctx := ctxT(t)
	signum := func(x float64) float64 {
		switch {
		case x > 0:
			return 1
		case x < 0:
			return -1
		}
		return x
	}
	keep := []struct {
		f     psf.UpdateFunc // from row 0... set per use below
		make  func(from, to int) psf.UpdateFunc
		local func(float64) float64
	}{
		{make: psf.Abs, local: math.Abs}, {make: psf.Ceil, local: math.Ceil}, {make: psf.Floor, local: math.Floor},
		{make: psf.Round, local: math.Round}, {make: psf.Signum, local: signum}, {make: psf.Sqrt, local: math.Sqrt},
		{make: psf.Expm1, local: math.Expm1}, {make: psf.Log1p, local: math.Log1p}, {make: psf.Copy, local: func(x float64) float64 { return x }},
		{make: func(a, b int) psf.UpdateFunc { return psf.MulS(a, b, -2.5) }, local: func(x float64) float64 { return x * -2.5 }},
		{make: func(a, b int) psf.UpdateFunc { return psf.DivS(a, b, 4) }, local: func(x float64) float64 { return x / 4 }},
		{make: func(a, b int) psf.UpdateFunc { return psf.Pow(a, b, 2) }, local: func(x float64) float64 { return x * x }},
		{make: func(a, b int) psf.UpdateFunc { return psf.AddS(a, b, 0) }, local: func(x float64) float64 { return x }},
		{make: func(a, b int) psf.UpdateFunc { return psf.MulS(a, b, 0) }, local: func(x float64) float64 { return x * 0 }},
	}
	binary := []struct {
		make  func(a, b, to int) psf.UpdateFunc
		local func(x, y float64) float64
	}{
		{psf.Add, func(x, y float64) float64 { return x + y }},
		{psf.Sub, func(x, y float64) float64 { return x - y }},
		{psf.Mul, func(x, y float64) float64 { return x * y }},
		{psf.MaxV, math.Max}, {psf.MinV, math.Min},
	}
	for li, meta := range sparseLayouts() {
		meta.Name = fmt.Sprintf("sew%d", li)
		model := sparseData(uint64(10+li), meta.Rows)
		m := sparseSetup(t, ctx, j.clients[0], meta, model)
		update := func(f psf.UpdateFunc) {
			t.Helper()
			if err := m.Update(ctx, f); err != nil {
				t.Fatalf("%s: %v", f.Name(), err)
			}
		}
		for _, u := range keep {
			for _, from := range []int{0, 1, 2, 3, 4} {
				for _, to := range []int{5, from} { // into another row, and in place
					f := u.make(from, to)
					src := model[from].Clone()
					update(f)
					next := srow{}
					for k, v := range src {
						next.Set(k, u.local(v))
					}
					model[to] = next
					checkSparse(t, ctx, m, model)
					if t.Failed() {
						t.Fatalf("after %s(%d, %d)", f.Name(), from, to)
					}
				}
			}
			model = sparseData(uint64(10+li), meta.Rows)
			if err := m.UpdateSparseRows(ctx, []int{0, 1, 2, 3, 4, 5}, []psf.SparseVector{
				model[0].Vector(), model[1].Vector(), model[2].Vector(), model[3].Vector(), model[4].Vector(), model[5].Vector()}); err != nil {
				t.Fatal(err)
			}
		}
		for _, b := range binary {
			for _, args := range [][3]int{{0, 4, 6}, {0, 2, 0}, {3, 3, 7}, {1, 2, 7}, {4, 0, 4}} {
				f := b.make(args[0], args[1], args[2])
				x, y := model[args[0]].Clone(), model[args[1]].Clone()
				update(f)
				next := srow{}
				for _, k := range psfmodel.Union(x, y) {
					next.Set(k, b.local(x.Get(k), y.Get(k)))
				}
				model[args[2]] = next
				checkSparse(t, ctx, m, model)
			}
		}
		update(psf.Axpy(-1.5, 0, 2))
		for k, v := range model[0] {
			model[2].Set(k, model[2].Get(k)+-1.5*v)
		}
		update(psf.Axpy(2, 2, 2))
		for k, v := range model[2] {
			model[2].Set(k, v+2*v)
		}
		update(psf.Axpy(-1, 2, 2)) // y - y: every entry becomes 0 and goes
		model[2] = srow{}
		update(psf.Scale(0, 0.25))
		for k, v := range model[0] {
			model[0].Set(k, v*0.25)
		}
		update(psf.Fill(4, 0))
		model[4] = srow{}
		checkSparse(t, ctx, m, model)
		if n := get0(t, ctx, m, psf.Size(2)); n != 0 {
			t.Errorf("Axpy(-1, 2, 2) left %d entries", n)
		}

		// Functions that would change the columns not stored are refused,
		// before anything is sent, and by the servers (a request made by
		// hand).
		for _, f := range []psf.UpdateFunc{
			psf.Exp(0, 5), psf.Log(0, 5), psf.Log10(0, 5), psf.AddS(0, 5, 1), psf.SubS(0, 5, -1),
			psf.DivS(0, 5, 0), psf.MulS(0, 5, math.Inf(1)), psf.Pow(0, 5, 0), psf.Pow(0, 5, -1),
			psf.Div(0, 2, 5), psf.Fill(0, 1), psf.RandomUniform(0, 0, 1, 1), psf.RandomNormal(0, 0, 1, 1),
			psf.Axpy(math.NaN(), 0, 2), psf.Scale(0, math.Inf(-1)),
			psf.Increment(0, []float64{1}), psf.Put(0, []float64{1}), psf.MaxA(0, nil),
			psf.IncrementRows([]int{0}, [][]float64{{1}}),
		} {
			err := m.Update(ctx, f)
			if !errors.Is(err, psf.ErrSparse) {
				t.Errorf("%s on a sparse matrix: %v, want ErrSparse", f.Name(), err)
			}
			t.Logf("%s: %v", f.Name(), err)
		}
		for _, c := range []struct {
			name    string
			rows    []int
			scalars []float64
		}{
			{"psf.Exp", []int{0, 5}, nil}, {"psf.AddS", []int{0, 5}, []float64{1}}, {"psf.Div", []int{0, 2, 5}, nil},
			{"psf.Fill", []int{0}, []float64{3}}, {"psf.RandomUniform", []int{0}, []float64{0, 1}}, {"psf.Scale", []int{0}, []float64{math.NaN()}},
		} {
			e := psf.NewEncoder(nil)
			e.Ints(c.rows)
			e.Float64s(c.scalars)
			e.Uint64(0)
			err := m.Update(ctx, rawUpdate{name: c.name, param: e.Bytes()})
			if !errors.Is(err, psf.ErrSparse) {
				t.Errorf("%s sent by hand: %v, want ErrSparse", c.name, err)
			}
		}
		for _, f := range []psf.GetFunc[[]float64]{psf.Pull(0)} {
			if _, err := psf.Get(ctx, m, f); !errors.Is(err, psf.ErrSparse) {
				t.Errorf("%s: %v, want ErrSparse", f.Name(), err)
			}
		}
		if _, err := m.GetRow(ctx, 0); !errors.Is(err, psf.ErrSparse) {
			t.Errorf("GetRow of a sparse matrix: %v, want ErrSparse", err)
		}
		if _, err := m.GetRows(ctx, []int{0}); !errors.Is(err, psf.ErrSparse) {
			t.Errorf("GetRows of a sparse matrix: %v, want ErrSparse", err)
		}
		checkSparse(t, ctx, m, model) // and nothing changed
	}
}

// rawUpdate is an UpdateFunc at the byte level, sent to every partition.
type rawUpdate struct {
	name  string
	param []byte
}

func (f rawUpdate) Name() string { return f.name }

func (f rawUpdate) Split(m *psf.MatrixMeta) ([]psf.Part[[]byte], error) {
	var out []psf.Part[[]byte]
	for _, p := range m.Partitions() {
		out = append(out, psf.Part[[]byte]{Partition: p, Value: f.param})
	}
	return out, nil
}

func TestSparseRowsAndArrays(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	ctx := ctxT(t)
	cl := j.clients[0]
	r := rand.New(rand.NewPCG(3, 4))
	for li, meta := range sparseLayouts() {
		meta.Name = fmt.Sprintf("srows%d", li)
		m, err := cl.CreateMatrix(ctx, meta)
		if err != nil {
			t.Fatal(err)
		}
		model := make([]srow, meta.Rows)
		for i := range model {
			model[i] = srow{}
		}
		checkSparse(t, ctx, m, model)

		// IncrementAt: unsorted, repeated, negative and extreme columns.
		cols := append(sparseKeys(r, 50), 5, 5, math.MinInt64, 0, 0)
		vals := make([]float64, len(cols))
		for i := range vals {
			vals[i] = float64(r.IntN(20) - 10)
		}
		if err := m.IncrementAt(ctx, 1, cols, vals); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols {
			model[1].Set(c, model[1].Get(c)+vals[i])
		}
		// Increments that cancel remove the entries.
		neg := mapRow(vals, func(v float64) float64 { return -v })
		if err := m.IncrementAt(ctx, 2, cols, vals); err != nil {
			t.Fatal(err)
		}
		if err := m.IncrementAt(ctx, 2, cols, neg); err != nil {
			t.Fatal(err)
		}
		if err := m.UpdateAt(ctx, 3, cols, vals); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols {
			model[3].Set(c, vals[i])
		}
		if err := m.Update(ctx, psf.MaxAt(3, cols[:20], neg[:20])); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols[:20] {
			model[3].Set(c, math.Max(model[3].Get(c), neg[i]))
		}
		if err := m.Update(ctx, psf.MinAt(1, cols[10:30], neg[10:30])); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols[10:30] {
			model[1].Set(c, math.Min(model[1].Get(c), neg[10+i]))
		}
		checkSparse(t, ctx, m, model)
		if n := get0(t, ctx, m, psf.Size(2)); n != 0 {
			t.Errorf("increments that cancel left %d entries", n)
		}

		// Several rows at once, sparse vectors.
		rows := []int{4, 7, 4, 0}
		vecs := make([]psf.SparseVector, len(rows))
		for i := range vecs {
			ks := sparseKeys(r, 40)
			vs := make([]float64, len(ks))
			for k := range vs {
				vs[k] = float64(r.IntN(9) - 4)
			}
			if vecs[i], err = psf.NewSparseVector(ks, vs); err != nil {
				t.Fatal(err)
			}
		}
		if err := m.IncrementRowsAt(ctx, rows, vecs); err != nil {
			t.Fatal(err)
		}
		for i, row := range rows {
			for k, c := range vecs[i].Indices {
				model[row].Set(c, model[row].Get(c)+vecs[i].Values[k])
			}
		}
		if err := m.UpdateRowsAt(ctx, []int{1, 5}, vecs[:2]); err != nil {
			t.Fatal(err)
		}
		for i, row := range []int{1, 5} {
			for k, c := range vecs[i].Indices {
				model[row].Set(c, vecs[i].Values[k])
			}
		}
		if err := m.UpdateSparseRow(ctx, 6, vecs[3]); err != nil {
			t.Fatal(err)
		}
		if err := m.UpdateSparseRows(ctx, []int{6, 3}, []psf.SparseVector{vecs[2], {}}); err != nil {
			t.Fatal(err)
		}
		model[6], model[3] = srow{}, srow{}
		for k, c := range vecs[2].Indices {
			model[6].Set(c, vecs[2].Values[k])
		}
		checkSparse(t, ctx, m, model)

		// Reads: one row, values at columns, several rows at columns, a flow.
		got, err := m.GetSparseRow(ctx, 4)
		if err != nil {
			t.Fatal(err)
		}
		checkVector(t, "GetSparseRow", got, model[4].Vector())
		ask := append(slices.Clone(cols), 12345, -98765) // and columns never written
		at, err := m.GetAt64(ctx, 1, ask)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range ask {
			checkClose(t, fmt.Sprintf("GetAt64 col %d", c), at[i], model[1].Get(c))
		}
		icols := []int{5, 0, 3, 5, -4}
		if at, err = m.GetAt(ctx, 1, icols); err != nil {
			t.Fatal(err)
		}
		for i, c := range icols {
			checkClose(t, fmt.Sprintf("GetAt col %d", c), at[i], model[1].Get(int64(c)))
		}
		qrows := []int{7, 1, 4, 1}
		all, err := m.GetRowsAt64(ctx, qrows, ask)
		if err != nil {
			t.Fatal(err)
		}
		for i, row := range qrows {
			for j, c := range ask {
				checkClose(t, fmt.Sprintf("GetRowsAt64 row %d col %d", row, c), all[i][j], model[row].Get(c))
			}
		}
		if all, err = m.GetRowsAt(ctx, qrows, icols); err != nil {
			t.Fatal(err)
		}
		for i, row := range qrows {
			for j, c := range icols {
				checkClose(t, fmt.Sprintf("GetRowsAt row %d col %d", row, c), all[i][j], model[row].Get(int64(c)))
			}
		}
		seen := 0
		for b, err := range m.GetSparseRowsFlow(ctx, []int{0, 1, 2, 3, 4, 5, 6, 7}, 3) {
			if err != nil {
				t.Fatal(err)
			}
			for i, row := range b.Rows {
				checkVector(t, fmt.Sprintf("flow row %d", row), b.Values[i], model[row].Vector())
				seen++
			}
		}
		if seen != 8 {
			t.Errorf("GetSparseRowsFlow yielded %d rows", seen)
		}
		// Async forms.
		h := m.IncrementRowsAtAsync([]int{0}, vecs[:1])
		fv := m.GetSparseRowAsync(0)
		if err := h.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := fv.Wait(ctx); err != nil { // before or after the increment
			t.Fatal(err)
		}
		for k, c := range vecs[0].Indices {
			model[0].Set(c, model[0].Get(c)+vecs[0].Values[k])
		}
		fr := m.GetRowsAt64Async([]int{0}, vecs[0].Indices)
		rs, err := fr.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for j, c := range vecs[0].Indices {
			checkClose(t, "GetRowsAt64Async", rs[0][j], model[0].Get(c))
		}
		checkSparse(t, ctx, m, model)

		// Bad arguments.
		bad := []struct {
			name string
			err  error
		}{
			{"unsorted vector", m.IncrementRowsAt(ctx, []int{0}, []psf.SparseVector{{Indices: []int64{3, 1}, Values: []float64{1, 2}}})},
			{"repeated index", m.UpdateRowsAt(ctx, []int{0}, []psf.SparseVector{{Indices: []int64{1, 1}, Values: []float64{1, 2}}})},
			{"lengths", m.IncrementRowsAt(ctx, []int{0}, []psf.SparseVector{{Indices: []int64{1}, Values: nil}})},
			{"rows and vectors", m.IncrementRowsAt(ctx, []int{0, 1}, vecs[:1])},
			{"row out of range", m.IncrementRowsAt(ctx, []int{8}, vecs[:1])},
			{"IncrementAt lengths", m.IncrementAt(ctx, 0, []int64{1, 2}, []float64{1})},
			{"IncrementAt row", m.IncrementAt(ctx, -1, []int64{1}, []float64{1})},
		}
		_, err = m.GetRowsAt64(ctx, []int{9}, []int64{1})
		bad = append(bad, struct {
			name string
			err  error
		}{"GetRowsAt64 row", err})
		_, err = m.GetSparseRow(ctx, 8)
		bad = append(bad, struct {
			name string
			err  error
		}{"GetSparseRow row", err})
		for _, b := range bad {
			if b.err == nil {
				t.Errorf("%s: no error", b.name)
			}
			t.Logf("%s: %v", b.name, b.err)
		}
		checkSparse(t, ctx, m, model)
	}
}

// The multi-row reads and sparse writes work on dense matrices too.
func TestDenseRowsAt(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	ctx := ctxT(t)
	for li, meta := range libLayouts() {
		meta.Name = fmt.Sprintf("drat%d", li)
		model := libData(uint64(40 + li))
		m := setup(t, ctx, j.clients[0], meta, model)
		rows, cols := []int{3, 0, 11, 3, 6}, []int{22, 0, 5, 16, 5}
		got, err := m.GetRowsAt(ctx, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range rows {
			for k, c := range cols {
				checkClose(t, fmt.Sprintf("GetRowsAt(%d, %d)", r, c), got[i][k], model[r][c])
			}
		}
		v, _ := psf.NewSparseVector([]int64{22, 0, 7}, []float64{1, -2, 3})
		if err := m.IncrementRowsAt(ctx, []int{0, 7, 0}, []psf.SparseVector{v, v, v}); err != nil {
			t.Fatal(err)
		}
		for _, r := range []int{0, 7, 0} {
			for i, c := range v.Indices {
				model[r][c] += v.Values[i]
			}
		}
		if err := m.UpdateRowsAt(ctx, []int{2}, []psf.SparseVector{v}); err != nil {
			t.Fatal(err)
		}
		for i, c := range v.Indices {
			model[2][c] = v.Values[i]
		}
		if err := m.UpdateSparseRow(ctx, 3, v); err != nil {
			t.Fatal(err)
		}
		model[3] = make([]float64, libCols)
		for i, c := range v.Indices {
			model[3][c] = v.Values[i]
		}
		checkAll(t, ctx, m, model)
		sv, err := m.GetSparseRow(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		checkVector(t, "GetSparseRow of a dense row", sv, v)
		for _, c := range [][]int64{{-1}, {libCols}} {
			if _, err := m.GetRowsAt64(ctx, []int{0}, c); err == nil {
				t.Errorf("GetRowsAt64 at column %d of a dense matrix succeeded", c[0])
			}
			w := psf.SparseVector{Indices: c, Values: []float64{1}}
			if err := m.IncrementRowsAt(ctx, []int{0}, []psf.SparseVector{w}); err == nil {
				t.Errorf("IncrementRowsAt at column %d of a dense matrix succeeded", c[0])
			}
		}
		checkAll(t, ctx, m, model)
	}
}

// User kernels on sparse rows.
var (
	kSparseClip = psf.MustRegister(psf.NewMap("psftest.SparseClip", psf.Float64, func(lim, x float64) float64 { return max(min(x, lim), -lim) }))
	kSparseInc  = psf.MustRegister(psf.NewMap("psftest.SparseInc", psf.Float64, func(s, x float64) float64 { return x + s }))
	kSparseOdd  = psf.MustRegister(psf.NewMapWithIndex("psftest.SparseOdd", psf.None, func(_ struct{}, col int64, x float64) float64 {
		if col%2 != 0 {
			return 0
		}
		return x
	}))
	kSparseHypot = psf.MustRegister(psf.NewZip2Map("psftest.SparseHypot", psf.None, func(_ struct{}, x, y float64) float64 { return math.Hypot(x, y) }))
	kSparseFma   = psf.MustRegister(psf.NewZip3Map("psftest.SparseFma", psf.None, func(_ struct{}, x, y, z float64) float64 { return math.FMA(x, y, z) }))
	kSparsePanic = psf.MustRegister(psf.NewZip2Map("psftest.SparsePanic", psf.Float64, func(lim, x, y float64) float64 {
		if x > lim {
			panic("too big")
		}
		return x - y
	}))
	// kSparseCount counts the entries of a row above a threshold, with
	// Block.SparseRow in a get kernel.
	kSparseCount = psf.MustRegister(psf.NewGetKernel("psftest.SparseCount", psf.Float64s, psf.Int64, func(b *psf.Block, p []float64) (int64, error) {
		row, err := b.SparseRow(int(p[0]))
		if err != nil {
			return 0, err
		}
		var n int64
		for _, v := range row.All() {
			if v > p[1] {
				n++
			}
		}
		if err := row.Set(1, 1); err == nil {
			return 0, errors.New("a get kernel could change a row")
		}
		return n, nil
	}))
	// kSparseDouble doubles the entries of rows 0 and 1, sets column 42
	// to 7 and removes column 1 (in the partition that holds them), then
	// fails if told to, after the changes.
	kSparseDouble = psf.MustRegister(psf.NewUpdateKernel("psftest.SparseDouble", psf.Bool, func(b *psf.Block, fail bool) error {
		for _, r := range []int{0, 1} {
			row, err := b.SparseRow(r)
			if err != nil {
				return err
			}
			var cols []int64
			for c := range row.All() {
				cols = append(cols, c)
			}
			for _, c := range cols {
				if err := row.Add(c, row.Get(c)); err != nil {
					return err
				}
			}
			for c, v := range map[int64]float64{42: 7, 1: 0} {
				err := row.Set(c, v)
				if in := b.Partition().HasCol(c); in != (err == nil) {
					return fmt.Errorf("Set(%d): %v (column in the partition: %v)", c, err, in)
				}
			}
		}
		if fail {
			return errors.New("refused after the changes")
		}
		return nil
	}))
	kDenseRowOnSparse = psf.MustRegister(psf.NewGetKernel("psftest.DenseRowOnSparse", psf.None, psf.Float64, func(b *psf.Block, _ struct{}) (float64, error) {
		_, err := b.Row(0)
		return 0, err
	}))
)

func TestSparseUserKernels(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	ctx := ctxT(t)
	meta := psf.MatrixMeta{Name: "suser", Type: psf.Sparse, Rows: 8}
	model := sparseData(31, meta.Rows)
	m := sparseSetup(t, ctx, j.clients[0], meta, model)
	update := func(f psf.UpdateFunc) {
		t.Helper()
		if err := m.Update(ctx, f); err != nil {
			t.Fatalf("%s: %v", f.Name(), err)
		}
	}
	zip := func(to int, f func(xs ...float64) float64, from ...int) {
		rows := make([]srow, len(from))
		for i, r := range from {
			rows[i] = model[r].Clone()
		}
		next := srow{}
		for _, k := range psfmodel.Union(rows...) {
			xs := make([]float64, len(rows))
			for i, r := range rows {
				xs[i] = r.Get(k)
			}
			next.Set(k, f(xs...))
		}
		model[to] = next
	}
	update(psf.Map(kSparseClip, 2, 0, 5))
	zip(5, func(x ...float64) float64 { return max(min(x[0], 2), -2) }, 0)
	update(psf.Map(kSparseOdd, struct{}{}, 0, 0))
	zip(0, func(x ...float64) float64 { return x[0] }, 0)
	for k := range model[0] {
		if k%2 != 0 {
			delete(model[0], k)
		}
	}
	update(psf.Zip2Map(kSparseHypot, struct{}{}, 2, 3, 6))
	zip(6, func(x ...float64) float64 { return math.Hypot(x[0], x[1]) }, 2, 3)
	update(psf.Zip3Map(kSparseFma, struct{}{}, 2, 3, 4, 4))
	zip(4, func(x ...float64) float64 { return math.FMA(x[0], x[1], x[2]) }, 2, 3, 4)
	checkSparse(t, ctx, m, model)

	// A function whose value at zeros is not 0 is refused.
	if err := m.Update(ctx, psf.Map(kSparseInc, 1, 0, 0)); !errors.Is(err, psf.ErrSparse) {
		t.Errorf("a Map with f(0) = 1: %v, want ErrSparse", err)
	}
	if err := m.Update(ctx, psf.Map(kSparseInc, 0, 0, 7)); err != nil {
		t.Errorf("a Map with f(0) = 0: %v", err)
	}
	model[7] = model[0].Clone()
	// A panic half-way changes nothing in its partition.
	if err := m.Update(ctx, psf.Zip2Map(kSparsePanic, 1, 2, 3, 2)); err == nil {
		t.Error("a panicking kernel succeeded")
	}
	checkSparse(t, ctx, m, model)

	// A get kernel reads sparse rows through SparseRow.
	var above int64
	for _, v := range model[2] {
		if v > 2 {
			above++
		}
	}
	n, err := psf.Get(ctx, m, psf.NewGet(kSparseCount,
		func(mm *psf.MatrixMeta) ([]psf.Part[[]float64], error) { return psf.SplitRows(mm, []float64{2, 2}, 2) },
		func(_ *psf.MatrixMeta, parts []psf.Part[int64]) (int64, error) {
			var n int64
			for _, p := range parts {
				n += p.Value
			}
			return n, nil
		}))
	if err != nil || n != above {
		t.Errorf("SparseCount = %d, %v; want %d", n, err, above)
	}
	// An update kernel that fails after changing rows 0 and 1 leaves them
	// as they were; the same kernel without failing changes them.
	double := func(fail bool) psf.UpdateFunc {
		return psf.NewUpdate(kSparseDouble, func(mm *psf.MatrixMeta) ([]psf.Part[bool], error) { return psf.SplitRows(mm, fail, 0) })
	}
	if err := m.Update(ctx, double(true)); err == nil {
		t.Error("a failing kernel succeeded")
	}
	checkSparse(t, ctx, m, model)
	update(double(false))
	for _, r := range []int{0, 1} {
		for c, v := range model[r] {
			model[r].Set(c, 2*v)
		}
		model[r].Set(42, 7)
		model[r].Set(1, 0)
	}
	checkSparse(t, ctx, m, model)
	if _, err := psf.Get(ctx, m, psf.NewGet(kDenseRowOnSparse,
		func(mm *psf.MatrixMeta) ([]psf.Part[struct{}], error) { return psf.SplitRows(mm, struct{}{}, 0) },
		func(*psf.MatrixMeta, []psf.Part[float64]) (float64, error) { return 0, nil })); !errors.Is(err, psf.ErrSparse) {
		t.Errorf("Block.Row on a sparse matrix: %v, want ErrSparse", err)
	}
}

// Sparse saves hold the stored entries only, and load into any number of
// servers and row blocks; checkpoints and recovery work the same.
func TestSparseSaveLoad(t *testing.T) {
	ctx := ctxT(t)
	dir, ckpt := t.TempDir(), t.TempDir()
	a := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true}, psf.WithCheckpointDir(ckpt))
	meta := psf.MatrixMeta{Name: "ss", Type: psf.Sparse, Rows: 6, RowBlock: 4}
	model := sparseData(51, meta.Rows)
	model[5][math.MinInt64] = math.Copysign(0, -1) // -0 is stored, and survives
	m := sparseSetup(t, ctx, a.clients[0], meta, model)
	if err := m.Save(ctx, dir); err != nil {
		t.Fatal(err)
	}
	entries := 0
	for _, r := range model {
		entries += len(r)
	}
	// 4 part files (2 row blocks x 2 column blocks): header, counts, 16
	// bytes per entry, checksum.
	if n, want := partBytes(t, filepath.Join(dir, "ss")), int64(16*entries+4*(40+4)+8*12); n != want {
		t.Errorf("part files of %d entries take %d bytes, want %d", entries, n, want)
	}
	var mf struct {
		Format int
		Type   string
	}
	raw, err := os.ReadFile(filepath.Join(dir, "ss", "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &mf); err != nil || mf.Format != 3 || mf.Type != "sparse" {
		t.Errorf("meta.json: %v %+v", err, mf)
	}
	for _, servers := range []int{1, 3} {
		b := newJob(t, servers, 1, testcluster.Options{Mem: true, Quiet: true})
		mb, err := b.clients[0].LoadMatrix(ctx, "ss", dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := mb.Meta(); got.Type != psf.Sparse || got.NumServers != servers || got.RowBlock != 4 {
			t.Errorf("loaded meta %+v", got)
		}
		checkSparse(t, ctx, mb, model)
		got, err := mb.GetSparseRow(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		if v := got.Values[0]; got.Indices[0] != math.MinInt64 || v != 0 || !math.Signbit(v) {
			t.Errorf("-0 loaded as %v at %d", v, got.Indices[0])
		}
		// Into an existing matrix of another row block.
		other, err := b.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "ss2", Type: psf.Sparse, Rows: 6, RowBlock: 1})
		if err != nil {
			t.Fatal(err)
		}
		copyDir(t, filepath.Join(dir, "ss"), filepath.Join(dir, "ss2"), "ss2")
		if err := other.Load(ctx, dir); err != nil {
			t.Fatal(err)
		}
		checkSparse(t, ctx, other, model)
		if err := b.clients[0].DeleteMatrix(ctx, "ss2"); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(filepath.Join(dir, "ss2"))
	}

	// Checkpoints.
	if err := m.Checkpoint(ctx, 1); err != nil {
		t.Fatal(err)
	}
	saved := make([]srow, len(model))
	for i := range model {
		saved[i] = model[i].Clone()
	}
	if err := m.IncrementAt(ctx, 0, []int64{7, -7}, []float64{1, 1}); err != nil {
		t.Fatal(err)
	}
	if err := m.Update(ctx, psf.Fill(2, 0)); err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx, 1); err != nil {
		t.Fatal(err)
	}
	checkSparse(t, ctx, m, saved)
	// A server restarts and restores its partitions from the checkpoint;
	// the other keeps what was written since.
	if err := m.Update(ctx, psf.Scale(0, 2)); err != nil {
		t.Fatal(err)
	}
	a.servers[1].Close()
	s, err := psf.NewServer(a.c.Servers[1], psf.WithCheckpointDir(ckpt))
	if err != nil {
		t.Fatal(err)
	}
	a.servers[1] = s
	if err := s.RestoreLatest(); err != nil {
		t.Fatal(err)
	}
	rank, mm := a.c.Servers[1].MyRank(), m.Meta()
	want := make([]srow, len(saved))
	for i := range saved {
		want[i] = saved[i].Clone()
	}
	for c, v := range saved[0] {
		if mm.PartitionAt(0, c).Server != rank {
			want[0].Set(c, 2*v)
		}
	}
	checkSparse(t, ctx, m, want)

	// A corrupt part file fails the load, changing nothing; a sparse save
	// does not load into a dense matrix, nor a dense one into a sparse.
	part := filepath.Join(dir, "ss", "part-00001.bin")
	raw, err = os.ReadFile(part)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 1
	if err := os.WriteFile(part, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.Load(ctx, dir); err == nil {
		t.Error("loading a corrupt save succeeded")
	}
	checkSparse(t, ctx, m, want)
	dense, err := a.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "ssd", Rows: 6, Cols: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Checkpoint(ctx, 2); err != nil {
		t.Fatal(err)
	}
	copyDir(t, filepath.Join(ckpt, "ckpt-2", "ss"), filepath.Join(dir, "ssd"), "ssd")
	if err := dense.Load(ctx, dir); err == nil {
		t.Error("a sparse save loaded into a dense matrix")
	}
	if err := dense.Save(ctx, dir); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, "ss"))
	copyDir(t, filepath.Join(dir, "ssd"), filepath.Join(dir, "ss"), "ss")
	if err := m.Load(ctx, dir); err == nil {
		t.Error("a dense save loaded into a sparse matrix")
	}
	checkSparse(t, ctx, m, want)
}

// copyDir copies a saved matrix's directory under another name.
func copyDir(t *testing.T, from, to, name string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "meta.json" {
			b = []byte(replaceName(t, b, name))
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Reading sparse rows allocates nothing on the servers, and a row whose
// entries all go back to 0 takes no memory again.
func TestSparseRowsTakeMemoryForEntries(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	ctx := ctxT(t)
	m, err := j.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "smem", Type: psf.Sparse, Rows: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []psf.GetFunc[float64]{psf.Sum(0), psf.Max(0), psf.Min(0), psf.Amin(0), psf.Nrm2(0), psf.Dot(0, 1)} {
		if v := get0(t, ctx, m, f); v != 0 {
			t.Errorf("%s of an empty row = %v", f.Name(), v)
		}
	}
	if v, err := m.GetSparseRow(ctx, 0); err != nil || v.Len() != 0 {
		t.Errorf("GetSparseRow of an empty row: %v, %v", v, err)
	}
	if _, err := m.GetRowsAt64(ctx, []int{0, 1}, []int64{1, -1, 0}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []psf.UpdateFunc{psf.Copy(0, 1), psf.Add(0, 1, 2), psf.Scale(0, 3), psf.Axpy(2, 0, 1), psf.Fill(2, 0)} {
		if err := m.Update(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if n := allocated(j, "smem"); n != 0 {
		t.Errorf("%d rows allocated by reads and updates of empty rows", n)
	}
	cols := []int64{1, 2, 3, math.MaxInt64, -4, 0}
	ones := []float64{1, 1, 1, 1, 1, 1}
	if err := m.IncrementAt(ctx, 1, cols, ones); err != nil {
		t.Fatal(err)
	}
	if n := allocated(j, "smem"); n != 2 {
		t.Errorf("%d row segments allocated, want 2 (row 1 on both servers)", n)
	}
	if err := m.IncrementAt(ctx, 1, cols, mapRow(ones, func(v float64) float64 { return -v })); err != nil {
		t.Fatal(err)
	}
	if n := allocated(j, "smem"); n != 0 {
		t.Errorf("%d row segments allocated after every entry went back to 0", n)
	}
}
