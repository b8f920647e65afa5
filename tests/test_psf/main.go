// Command test_psf exercises the whole psf library (package psf) in a real
// job: every worker creates matrices in three layouts whose partitions
// straddle the servers, runs every function against a local copy of the
// matrix, checks rows, values at indices, row flows, async calls, errors,
// save and load, checkpoints and recovery, does the same on sparse
// matrices (int64 column ids hashed over the servers), moves rows of a
// large matrix whose server parts are lent by the transports and checks
// each value exactly, and adds to a dense and a sparse matrix shared by
// all workers. It exits non-zero on the first wrong value.
//
//	scripts/local.sh 2 2 build/test_psf
//
// Saves and checkpoints go to PSF_TEST_DIR (default: a directory under
// $TMPDIR named after the scheduler port), which worker 0 removes at the end.
package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gopslite/pslite/ps"
	"github.com/gopslite/pslite/psf"
)

const (
	rows = 10
	cols = 1001
)

// User kernels, registered in every process of the job.
var (
	kClip  = psf.MustRegister(psf.NewMap("test_psf.Clip", psf.Float64s, func(b []float64, x float64) float64 { return min(max(x, b[0]), b[1]) }))
	kRamp  = psf.MustRegister(psf.NewMapWithIndex("test_psf.Ramp", psf.Float64, func(s float64, c int64, x float64) float64 { return x + s*float64(c) }))
	kHypot = psf.MustRegister(psf.NewZip2Map("test_psf.Hypot", psf.None, func(_ struct{}, x, y float64) float64 { return math.Hypot(x, y) }))
	kMix   = psf.MustRegister(psf.NewZip2MapWithIndex("test_psf.Mix", psf.Int64, func(n int64, c int64, x, y float64) float64 {
		if c%n == 0 {
			return x
		}
		return y
	}))
	kFma    = psf.MustRegister(psf.NewZip3Map("test_psf.Fma", psf.None, func(_ struct{}, x, y, z float64) float64 { return math.FMA(x, y, z) }))
	kSelect = psf.MustRegister(psf.NewZip3MapWithIndex("test_psf.Select", psf.None, func(_ struct{}, c int64, x, y, z float64) float64 {
		if c%2 == 0 {
			return x - z
		}
		return y
	}))
	// Deliberately not registered: calling it must fail with ErrUnknownFunction.
	kMissing = psf.NewGetKernel("test_psf.Missing", psf.None, psf.Float64, func(*psf.Block, struct{}) (float64, error) { return 0, nil })
)

func main() {
	check(ps.Start(0), "start")
	node, err := ps.Node()
	check(err, "node")
	dir := os.Getenv("PSF_TEST_DIR")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "test_psf-"+os.Getenv("DMLC_PS_ROOT_PORT"))
	}
	if ps.IsServer() {
		s, err := psf.NewServer(node, psf.WithCheckpointDir(filepath.Join(dir, "checkpoints")))
		check(err, "psf server")
		ps.RegisterExitCallback(s.Close)
	}
	if ps.IsWorker() {
		c, err := psf.NewClient(node)
		check(err, "psf client")
		w := &worker{c: c, rank: ps.MyRank(), dir: dir}
		w.run()
		fmt.Printf("test_psf worker %d: all %d checks passed\n", w.rank, w.checks)
	}
	check(ps.Finalize(0, true), "finalize")
	if ps.IsWorker() && ps.MyRank() == 0 {
		os.RemoveAll(dir)
	}
}

func check(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL [%s %d]: %s\n", os.Getenv("DMLC_ROLE"), ps.MyRank(), fmt.Sprintf(format, args...))
	os.Exit(1)
}

type worker struct {
	c      *psf.Client
	rank   int
	dir    string
	checks int
}

// matrix is a psf matrix and its local copy.
type matrix struct {
	w     *worker
	ctx   context.Context
	m     *psf.Matrix
	model [][]float64
}

func closeTo(got, want float64) bool {
	switch {
	case math.IsNaN(want):
		return math.IsNaN(got)
	case math.IsInf(want, 0):
		return got == want
	}
	return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))
}

func (w *worker) value(what string, got, want float64) {
	w.checks++
	if !closeTo(got, want) {
		fail("%s: got %v, want %v", what, got, want)
	}
}

func (w *worker) row(what string, got, want []float64) {
	w.checks++
	if len(got) != len(want) {
		fail("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !closeTo(got[i], want[i]) {
			fail("%s: column %d: got %v, want %v", what, i, got[i], want[i])
		}
	}
}

// verify compares every row with the model.
func (x *matrix) verify(what string) {
	all := make([]int, rows)
	for i := range all {
		all[i] = i
	}
	got, err := x.m.GetRows(x.ctx, all)
	check(err, what+": GetRows")
	for r := range all {
		x.w.row(fmt.Sprintf("%s: %s row %d", what, x.m.Name(), r), got[r], x.model[r])
	}
}

// update runs f on the servers and local on the model when the rows are
// colocated; otherwise it expects ErrNotColocated and no change.
func (x *matrix) update(f psf.UpdateFunc, local func(), rowsUsed ...int) {
	meta := x.m.Meta()
	err := x.m.Update(x.ctx, f)
	if meta.Colocated(rowsUsed...) != nil {
		x.w.checks++
		if !errors.Is(err, psf.ErrNotColocated) {
			fail("%s over rows %v not colocated in %s: %v, want ErrNotColocated", f.Name(), rowsUsed, x.m.Name(), err)
		}
		return
	}
	check(err, f.Name())
	local()
}

func mapInto(dst, src []float64, f func(c int, v float64) float64) {
	for i, v := range src {
		dst[i] = f(i, v)
	}
}

func (w *worker) run() {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	layouts := []psf.MatrixMeta{
		{Rows: rows, Cols: cols},                               // each row cut over all servers
		{Rows: rows, Cols: cols, RowBlock: rows, ColBlock: 97}, // many partitions per server
		{Rows: rows, Cols: cols, RowBlock: 5, ColBlock: 150},   // two row blocks
	}
	for li, meta := range layouts {
		meta.Name = fmt.Sprintf("w%d-layout%d", w.rank, li)
		m, err := w.c.CreateMatrix(ctx, meta)
		check(err, "create "+meta.Name)
		x := &matrix{w: w, ctx: ctx, m: m, model: make([][]float64, rows)}
		for r := range x.model {
			x.model[r] = make([]float64, cols)
		}
		x.verify("new matrix")
		x.library(uint64(w.rank*10 + li))
		x.rowsAndArrays(uint64(w.rank*10 + li))
		x.userKernels()
		x.errorsAndAsync()
		x.saveAndCheckpoint(w.dir, int64(li+1))
		check(w.c.DeleteMatrix(ctx, meta.Name), "delete")
	}
	w.sparse(ctx)
	w.large(ctx)
	w.shared(ctx)
}

func (x *matrix) library(seed uint64) {
	ctx, m, md := x.ctx, x.m, x.model
	// Data: row 0 uniform, row 1 zeros, row 2 normal, row 3 a pattern with
	// zeros, halves and negatives, row 4 positive.
	x.update(psf.RandomUniform(0, -5, 5, seed), func() {
		mapInto(md[0], md[0], func(c int, _ float64) float64 { return -5 + 10*psf.UniformAt(seed, int64(c)) })
	}, 0)
	x.update(psf.RandomNormal(2, 1, 3, seed+1), func() {
		mapInto(md[2], md[2], func(c int, _ float64) float64 { return 1 + 3*psf.NormalAt(seed+1, int64(c)) })
	}, 2)
	pattern := make([]float64, cols)
	mapInto(pattern, pattern, func(c int, _ float64) float64 { return float64(c%7-3) / 2 })
	check(m.UpdateRow(ctx, 3, pattern), "UpdateRow")
	copy(md[3], pattern)
	x.update(psf.Abs(2, 4), func() { mapInto(md[4], md[2], func(_ int, v float64) float64 { return math.Abs(v) + 0 }) }, 2, 4)
	x.update(psf.AddS(4, 4, 0.5), func() { mapInto(md[4], md[4], func(_ int, v float64) float64 { return v + 0.5 }) }, 4)
	x.verify("data")

	for r := 0; r < 5; r++ {
		v := md[r]
		var sum, asum, ssq float64
		var nnz int64
		for _, e := range v {
			sum += e
			asum += math.Abs(e)
			ssq += e * e
			if e != 0 {
				nnz++
			}
		}
		abs := make([]float64, cols)
		mapInto(abs, v, func(_ int, e float64) float64 { return math.Abs(e) })
		get := func(f psf.GetFunc[float64]) float64 {
			got, err := psf.Get(ctx, m, f)
			check(err, f.Name())
			return got
		}
		name := func(f string) string { return fmt.Sprintf("%s %s(%d)", m.Name(), f, r) }
		x.w.value(name("Sum"), get(psf.Sum(r)), sum)
		x.w.value(name("Asum"), get(psf.Asum(r)), asum)
		x.w.value(name("Max"), get(psf.Max(r)), slices.Max(v))
		x.w.value(name("Min"), get(psf.Min(r)), slices.Min(v))
		x.w.value(name("Amax"), get(psf.Amax(r)), slices.Max(abs))
		x.w.value(name("Amin"), get(psf.Amin(r)), slices.Min(abs))
		x.w.value(name("Nrm2"), get(psf.Nrm2(r)), math.Sqrt(ssq))
		n, err := psf.Get(ctx, m, psf.Nnz(r))
		check(err, "Nnz")
		x.w.value(name("Nnz"), float64(n), float64(nnz))
		n, err = psf.Get(ctx, m, psf.Size(r))
		check(err, "Size")
		x.w.value(name("Size"), float64(n), cols)
		got, err := psf.Get(ctx, m, psf.Pull(r))
		check(err, "Pull")
		x.w.row(name("Pull"), got, v)
		for r2 := 0; r2 < 5; r2++ {
			var dot float64
			for i := range v {
				dot += v[i] * md[r2][i]
			}
			x.w.value(fmt.Sprintf("%s Dot(%d,%d)", m.Name(), r, r2), get(psf.Dot(r, r2)), dot)
			eq, err := psf.Get(ctx, m, psf.Equal(r, r2))
			check(err, "Equal")
			x.w.checks++
			if eq != slices.Equal(v, md[r2]) {
				fail("%s Equal(%d,%d) = %v", m.Name(), r, r2, eq)
			}
		}
	}

	unary := []struct {
		f func(from, to int) psf.UpdateFunc
		g func(float64) float64
	}{
		{psf.Abs, math.Abs}, {psf.Ceil, math.Ceil}, {psf.Floor, math.Floor}, {psf.Round, math.Round},
		{psf.Signum, func(v float64) float64 {
			switch {
			case v > 0:
				return 1
			case v < 0:
				return -1
			}
			return v
		}},
		{psf.Sqrt, math.Sqrt}, {psf.Exp, math.Exp}, {psf.Expm1, math.Expm1}, {psf.Log, math.Log},
		{psf.Log10, math.Log10}, {psf.Log1p, math.Log1p}, {psf.Copy, func(v float64) float64 { return v }},
	}
	for _, u := range unary {
		for _, from := range []int{0, 3, 4} {
			x.update(u.f(from, 5), func() { mapInto(md[5], md[from], func(_ int, v float64) float64 { return u.g(v) }) }, from, 5)
			x.verify(u.f(0, 0).Name())
		}
	}
	scalar := []struct {
		f func(from, to int, s float64) psf.UpdateFunc
		g func(v, s float64) float64
	}{
		{psf.AddS, func(v, s float64) float64 { return v + s }},
		{psf.SubS, func(v, s float64) float64 { return v - s }},
		{psf.MulS, func(v, s float64) float64 { return v * s }},
		{psf.DivS, func(v, s float64) float64 { return v / s }},
		{psf.Pow, math.Pow},
	}
	for _, s := range scalar {
		x.update(s.f(4, 6, 1.5), func() { mapInto(md[6], md[4], func(_ int, v float64) float64 { return s.g(v, 1.5) }) }, 4, 6)
	}
	x.verify("scalar")
	binary := []struct {
		f func(a, b, to int) psf.UpdateFunc
		g func(a, b float64) float64
	}{
		{psf.Add, func(a, b float64) float64 { return a + b }},
		{psf.Sub, func(a, b float64) float64 { return a - b }},
		{psf.Mul, func(a, b float64) float64 { return a * b }},
		{psf.Div, func(a, b float64) float64 { return a / b }},
		{psf.MaxV, math.Max}, {psf.MinV, math.Min},
	}
	for _, b := range binary {
		for _, out := range []int{7, 5} { // 7 is in the second row block of layout 2
			x.update(b.f(0, 4, out), func() {
				for i := range md[out] {
					md[out][i] = b.g(md[0][i], md[4][i])
				}
			}, 0, 4, out)
		}
		x.verify(b.f(0, 0, 0).Name())
	}
	x.update(psf.Axpy(-0.75, 0, 4), func() {
		for i := range md[4] {
			md[4][i] += -0.75 * md[0][i]
		}
	}, 0, 4)
	x.update(psf.Scale(2, 3), func() { mapInto(md[2], md[2], func(_ int, v float64) float64 { return v * 3 }) }, 2)
	x.update(psf.Fill(8, -2), func() { mapInto(md[8], md[8], func(int, float64) float64 { return -2 }) }, 8)
	x.update(psf.Copy(8, 1), func() { copy(md[1], md[8]) }, 8, 1)
	x.verify("in place")
	x.update(psf.Fill(1, 0), func() { clear(md[1]) }, 1)
	amax, err := psf.Get(ctx, m, psf.Amax(1))
	check(err, "Amax")
	x.w.value("Amax of a zero row", amax, 0)
}

func (x *matrix) rowsAndArrays(seed uint64) {
	ctx, m, md := x.ctx, x.m, x.model
	r := rand.New(rand.NewPCG(seed, 9))
	vec := func() []float64 {
		v := make([]float64, cols)
		for i := range v {
			v[i] = float64(r.IntN(2001)-1000) / 8
		}
		return v
	}
	add := func(dst, v []float64) {
		for i := range v {
			dst[i] += v[i]
		}
	}
	a, b, c := vec(), vec(), vec()
	check(m.IncrementRows(ctx, []int{1, 6, 9}, [][]float64{a, b, c}), "IncrementRows")
	add(md[1], a)
	add(md[6], b)
	add(md[9], c)
	a = vec()
	check(m.IncrementRow(ctx, 6, a), "IncrementRow")
	add(md[6], a)
	a, b = vec(), vec()
	check(m.UpdateRows(ctx, []int{2, 8}, [][]float64{a, b}), "UpdateRows")
	copy(md[2], a)
	copy(md[8], b)
	a = vec()
	check(m.Update(ctx, psf.MaxA(2, a)), "MaxA")
	mapInto(md[2], md[2], func(i int, v float64) float64 { return math.Max(v, a[i]) })
	a = vec()
	check(m.Update(ctx, psf.MinA(8, a)), "MinA")
	mapInto(md[8], md[8], func(i int, v float64) float64 { return math.Min(v, a[i]) })
	a = vec()
	check(m.Update(ctx, psf.Put(3, a)), "Put")
	copy(md[3], a)
	cols64 := []int64{cols - 1, 0, 500, 149, 150, 500, 96, 97}
	vals := []float64{1, 2, 3, 4, 5, 6, 7, 8}
	check(m.IncrementAt(ctx, 9, cols64, vals), "IncrementAt")
	for i, c := range cols64 {
		md[9][c] += vals[i]
	}
	check(m.UpdateAt(ctx, 7, cols64, vals), "UpdateAt")
	for i, c := range cols64 {
		md[7][c] = vals[i]
	}
	x.verify("arrays")

	got, err := m.GetAt64(ctx, 9, cols64)
	check(err, "GetAt64")
	for i, c := range cols64 {
		x.w.value(fmt.Sprintf("GetAt64 col %d", c), got[i], md[9][c])
	}
	icols := []int{3, 1000, 150, 3}
	got, err = m.GetAt(ctx, 6, icols)
	check(err, "GetAt")
	for i, c := range icols {
		x.w.value(fmt.Sprintf("GetAt col %d", c), got[i], md[6][c])
	}
	order := []int{9, 0, 6, 9, 2}
	all, err := m.GetRows(ctx, order)
	check(err, "GetRows")
	for i, row := range order {
		x.w.row(fmt.Sprintf("GetRows row %d", row), all[i], md[row])
	}
	row, err := m.GetRow(ctx, 6)
	check(err, "GetRow")
	x.w.row("GetRow", row, md[6])
	seen := 0
	want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	for batch, err := range m.GetRowsFlow(ctx, want, 3) {
		check(err, "GetRowsFlow")
		for i, r := range batch.Rows {
			x.w.row(fmt.Sprintf("flow row %d", r), batch.Values[i], md[r])
			seen++
		}
	}
	if seen != len(want) {
		fail("GetRowsFlow yielded %d rows, want %d", seen, len(want))
	}
}

func (x *matrix) userKernels() {
	md := x.model
	x.update(psf.Map(kClip, []float64{-1, 2}, 0, 5), func() {
		mapInto(md[5], md[0], func(_ int, v float64) float64 { return min(max(v, -1), 2) })
	}, 0, 5)
	x.update(psf.Map(kRamp, 0.01, 5, 5), func() {
		mapInto(md[5], md[5], func(c int, v float64) float64 { return v + 0.01*float64(c) })
	}, 5)
	x.update(psf.Zip2Map(kHypot, struct{}{}, 0, 4, 6), func() {
		mapInto(md[6], md[0], func(c int, v float64) float64 { return math.Hypot(v, md[4][c]) })
	}, 0, 4, 6)
	x.update(psf.Zip2Map(kMix, 3, 0, 4, 7), func() {
		mapInto(md[7], md[0], func(c int, v float64) float64 {
			if c%3 == 0 {
				return v
			}
			return md[4][c]
		})
	}, 0, 4, 7)
	x.update(psf.Zip3Map(kFma, struct{}{}, 0, 2, 4, 3), func() {
		mapInto(md[3], md[0], func(c int, v float64) float64 { return math.FMA(v, md[2][c], md[4][c]) })
	}, 0, 2, 4, 3)
	x.update(psf.Zip3Map(kSelect, struct{}{}, 0, 2, 4, 8), func() {
		mapInto(md[8], md[0], func(c int, v float64) float64 {
			if c%2 == 0 {
				return v - md[4][c]
			}
			return md[2][c]
		})
	}, 0, 2, 4, 8)
	x.verify("user kernels")
}

func (x *matrix) errorsAndAsync() {
	ctx, m, md := x.ctx, x.m, x.model
	_, err := psf.Get(ctx, m, psf.NewGet(kMissing,
		func(mm *psf.MatrixMeta) ([]psf.Part[struct{}], error) { return psf.SplitRows(mm, struct{}{}, 0) },
		func(*psf.MatrixMeta, []psf.Part[float64]) (float64, error) { return 0, nil }))
	x.w.checks++
	if !errors.Is(err, psf.ErrUnknownFunction) {
		fail("unregistered function: %v, want ErrUnknownFunction", err)
	}
	if _, err := m.GetRow(ctx, rows); err == nil {
		fail("GetRow past the last row succeeded")
	}
	ones := make([]float64, cols)
	for i := range ones {
		ones[i] = 1
	}
	var hs []*psf.Handle
	for i := 0; i < 20; i++ {
		hs = append(hs, m.IncrementRowAsync(9, ones))
	}
	for _, h := range hs {
		check(h.Wait(ctx), "async increment")
	}
	for i := range md[9] {
		md[9][i] += 20
	}
	f := psf.GetAsync(m, psf.Sum(9))
	row, err := m.GetRowAsync(9).Wait(ctx)
	check(err, "GetRowAsync")
	x.w.row("GetRowAsync", row, md[9])
	s, err := f.Wait(ctx)
	check(err, "GetAsync")
	var want float64
	for _, v := range md[9] {
		want += v
	}
	x.w.value("async Sum", s, want)
	x.verify("after errors")
}

func (x *matrix) saveAndCheckpoint(dir string, id int64) {
	ctx, m, md := x.ctx, x.m, x.model
	snapshot := func() [][]float64 {
		s := make([][]float64, len(md))
		for i := range md {
			s[i] = slices.Clone(md[i])
		}
		return s
	}
	saveDir := filepath.Join(dir, "saves")
	check(m.Save(ctx, saveDir), "Save")
	saved := snapshot()
	check(m.Update(ctx, psf.Fill(0, 42)), "Fill")
	check(m.Load(ctx, saveDir), "Load")
	x.verify("loaded")
	check(m.Checkpoint(ctx, id), "Checkpoint")
	check(m.Update(ctx, psf.Scale(9, -1)), "Scale")
	mapInto(md[9], md[9], func(_ int, v float64) float64 { return -v })
	x.verify("after checkpoint")
	check(m.Recover(ctx, id), "Recover")
	x.model = saved
	x.verify("recovered")
	// Loaded afresh under its name, after a delete.
	check(x.w.c.DeleteMatrix(ctx, m.Name()), "delete")
	lm, err := x.w.c.LoadMatrix(ctx, m.Name(), saveDir)
	check(err, "LoadMatrix")
	x.m = lm
	x.verify("LoadMatrix")
}

// shared: every worker adds (rank+1) to every value of one matrix, ten
// times; after a barrier of the workers, each checks the total.
func (w *worker) shared(ctx context.Context) {
	m, err := w.c.CreateMatrix(ctx, psf.MatrixMeta{Name: "shared", Rows: 2, Cols: cols})
	check(err, "create shared")
	inc := make([]float64, cols)
	for i := range inc {
		inc[i] = float64(w.rank + 1)
	}
	for i := 0; i < 10; i++ {
		check(m.IncrementRow(ctx, 1, inc), "shared increment")
	}
	check(ps.Barrier(0, ps.WorkerGroup), "barrier")
	n := ps.NumWorkers()
	want := float64(10*n*(n+1)/2) * cols
	s, err := psf.Get(ctx, m, psf.Sum(1))
	check(err, "shared sum")
	w.value("shared sum", s, want)
	mx, err := psf.Get(ctx, m, psf.Max(1))
	check(err, "shared max")
	w.value("shared max", mx, want/cols)
}
