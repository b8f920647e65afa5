package psf_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/psf"
)

// Kernels that fail half-way through a partition.
var (
	// kHalfPanic adds 1 to every value of the row, and panics at the
	// first value above its parameter.
	kHalfPanic = psf.MustRegister(psf.NewMap("psftest.HalfPanic", psf.Float64, func(limit, x float64) float64 {
		if x > limit {
			panic(fmt.Sprintf("value %v above %v", x, limit))
		}
		return x + 1
	}))
	// kHalfFail doubles rows 0 and 1 and writes row 2 (never written
	// before), then fails after half of row 1.
	kHalfFail = psf.MustRegister(psf.NewUpdateKernel("psftest.HalfFail", psf.None, func(b *psf.Block, _ struct{}) error {
		z, err := b.Row(2)
		if err != nil {
			return err
		}
		for i := range z {
			z[i] = 5
		}
		for _, r := range []int{0, 1} {
			x, err := b.Row(r)
			if err != nil {
				return err
			}
			for i := range x {
				if r == 1 && i == len(x)/2 {
					return errors.New("refused half-way")
				}
				x[i] *= 2
			}
		}
		return nil
	}))
	// kHalfPanicUpdate is kHalfFail with a panic.
	kHalfPanicUpdate = psf.MustRegister(psf.NewUpdateKernel("psftest.HalfPanicUpdate", psf.None, func(b *psf.Block, _ struct{}) error {
		x, err := b.Row(0)
		if err != nil {
			return err
		}
		for i := range x {
			if i == len(x)/2 {
				x = x[:i] // so the write below is out of range: a runtime panic
			}
			x[i] = -1
		}
		return nil
	}))
)

// An update whose kernel fails or panics in a partition leaves that
// partition exactly as it was.
func TestFailedUpdateChangesNothing(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	ctx := ctxT(t)
	const cols = 1001
	for li, meta := range []psf.MatrixMeta{
		{Rows: 3, Cols: cols},
		{Rows: 3, Cols: cols, RowBlock: 1, ColBlock: 100}, // rows reached across row blocks
	} {
		meta.Name = fmt.Sprintf("atomic%d", li)
		m, err := j.clients[0].CreateMatrix(ctx, meta)
		if err != nil {
			t.Fatal(err)
		}
		model := [][]float64{make([]float64, cols), make([]float64, cols), make([]float64, cols)}
		for c := range model[0] {
			model[0][c] = float64(c)
			model[1][c] = float64(-c)
		}
		if err := m.UpdateRows(ctx, []int{0, 1}, model[:2]); err != nil {
			t.Fatal(err)
		}
		// Values 0..1000: every partition holding a value above 834
		// fails after changing the values before it, and stays as it
		// was; the other partitions succeed (an update is not atomic
		// across partitions).
		if err := m.Update(ctx, psf.Map(kHalfPanic, 834, 0, 0)); err == nil {
			t.Error("a kernel that panics succeeded")
		}
		mm := m.Meta()
		for _, p := range mm.RowPartitions(0) {
			if p.ColEnd-1 > 834 {
				continue
			}
			for c := p.ColStart; c < p.ColEnd; c++ {
				model[0][c]++
			}
		}
		checkAll(t, ctx, m, model)
		if li == 0 {
			for _, f := range []psf.UpdateFunc{
				psf.NewUpdate(kHalfFail, func(m *psf.MatrixMeta) ([]psf.Part[struct{}], error) { return psf.SplitRows(m, struct{}{}, 0, 1, 2) }),
				psf.NewUpdate(kHalfPanicUpdate, func(m *psf.MatrixMeta) ([]psf.Part[struct{}], error) { return psf.SplitRows(m, struct{}{}, 0) }),
			} {
				if err := m.Update(ctx, f); err == nil {
					t.Errorf("%s succeeded", f.Name())
				}
				checkAll(t, ctx, m, model)
				if n := allocated(j, meta.Name); n != 4 {
					t.Errorf("%s: %d row segments allocated, want 4 (row 2 never written)", f.Name(), n)
				}
			}
		}
		// The matrix is usable afterwards.
		if err := m.Update(ctx, psf.Map(kHalfPanic, 1e9, 0, 0)); err != nil {
			t.Fatal(err)
		}
		for c := range model[0] {
			model[0][c]++
		}
		checkAll(t, ctx, m, model)
	}
}
