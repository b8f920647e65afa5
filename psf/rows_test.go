package psf_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/psf"
)

func TestRowsAndArrays(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true})
	ctx := ctxT(t)
	cl := j.clients[0]
	for li, meta := range libLayouts() {
		t.Run(fmt.Sprintf("layout%d", li), func(t *testing.T) {
			meta.Name = fmt.Sprintf("rows%d", li)
			m, err := cl.CreateMatrix(ctx, meta)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(uint64(li), 2))
			vec := func() []float64 {
				v := make([]float64, libCols)
				for i := range v {
					v[i] = float64(r.IntN(200) - 100)
				}
				return v
			}
			model := make([][]float64, libRows)
			for i := range model {
				model[i] = make([]float64, libCols)
			}
			checkAll(t, ctx, m, model) // a new matrix is all zeros

			// Whole rows, across row blocks (rows 1, 7 and 11 are in
			// different row blocks in layout 2).
			rows := []int{1, 7, 11}
			vals := [][]float64{vec(), vec(), vec()}
			if err := m.IncrementRows(ctx, rows, vals); err != nil {
				t.Fatal(err)
			}
			if err := m.IncrementRows(ctx, rows, vals); err != nil {
				t.Fatal(err)
			}
			for i, row := range rows {
				for c := range vals[i] {
					model[row][c] += 2 * vals[i][c]
				}
			}
			v := vec()
			if err := m.IncrementRow(ctx, 2, v); err != nil {
				t.Fatal(err)
			}
			for c := range v {
				model[2][c] += v[c]
			}
			v = vec()
			if err := m.UpdateRow(ctx, 7, v); err != nil {
				t.Fatal(err)
			}
			model[7] = v
			v1, v2 := vec(), vec()
			if err := m.UpdateRows(ctx, []int{3, 9}, [][]float64{v1, v2}); err != nil {
				t.Fatal(err)
			}
			model[3], model[9] = v1, v2
			v = vec()
			if err := m.Update(ctx, psf.MaxA(3, v)); err != nil {
				t.Fatal(err)
			}
			for c := range v {
				model[3][c] = math.Max(model[3][c], v[c])
			}
			v = vec()
			if err := m.Update(ctx, psf.MinA(9, v)); err != nil {
				t.Fatal(err)
			}
			for c := range v {
				model[9][c] = math.Min(model[9][c], v[c])
			}
			// Sparse, unsorted, with a repeated column.
			cols := []int64{22, 0, 5, 16, 5, 8}
			svals := []float64{1, 2, 3, 4, 5, 6}
			if err := m.IncrementAt(ctx, 4, cols, svals); err != nil {
				t.Fatal(err)
			}
			for i, c := range cols {
				model[4][c] += svals[i]
			}
			if err := m.UpdateAt(ctx, 10, cols, svals); err != nil {
				t.Fatal(err)
			}
			for i, c := range cols {
				model[10][c] = svals[i]
			}
			checkAll(t, ctx, m, model)

			// GetAt with int and int64 indices.
			icols := []int{22, 0, 5, 16, 5, 8, 1}
			got, err := m.GetAt(ctx, 4, icols)
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range icols {
				checkClose(t, fmt.Sprintf("GetAt col %d", c), got[i], model[4][c])
			}
			got, err = m.GetAt64(ctx, 10, cols)
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range cols {
				checkClose(t, fmt.Sprintf("GetAt64 col %d", c), got[i], model[10][c])
			}
			// GetRows with repeated rows, in any order.
			order := []int{11, 0, 7, 11, 3}
			all, err := m.GetRows(ctx, order)
			if err != nil {
				t.Fatal(err)
			}
			for i, row := range order {
				checkRow(t, fmt.Sprintf("GetRows[%d]", i), all[i], model[row])
			}
			// Flow: every row once, in batches.
			seen := map[int]bool{}
			wantRows := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
			batches := 0
			for b, err := range m.GetRowsFlow(ctx, wantRows, 5) {
				if err != nil {
					t.Fatal(err)
				}
				batches++
				for i, row := range b.Rows {
					seen[row] = true
					checkRow(t, fmt.Sprintf("flow row %d", row), b.Values[i], model[row])
				}
			}
			if len(seen) != libRows || batches != 3 {
				t.Errorf("flow saw %d rows in %d batches, want %d in 3", len(seen), batches, libRows)
			}
			// Breaking out early is fine.
			for range m.GetRowsFlow(ctx, wantRows, 1) {
				break
			}
			// Bad input fails before sending.
			if _, err := m.GetAt(ctx, 0, []int{libCols}); err == nil {
				t.Error("GetAt past the last column succeeded")
			}
			if err := m.IncrementRow(ctx, 0, make([]float64, libCols-1)); err == nil {
				t.Error("IncrementRow with too few values succeeded")
			}
			if _, err := m.GetRow(ctx, libRows); err == nil {
				t.Error("GetRow past the last row succeeded")
			}
			for _, err := range m.GetRowsFlow(ctx, []int{0, -1}, 1) {
				if err == nil {
					t.Error("flow over row -1 succeeded")
				}
			}
		})
	}
}

func TestAsync(t *testing.T) {
	j := newJob(t, 2, 2, testcluster.Options{Mem: true})
	ctx := ctxT(t)
	const cols = 1000
	m0, err := j.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "shared", Rows: 4, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	// The second worker creates the same matrix (no error) and opens it.
	if _, err := j.clients[1].CreateMatrix(ctx, psf.MatrixMeta{Name: "shared", Rows: 4, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.clients[1].CreateMatrix(ctx, psf.MatrixMeta{Name: "shared", Rows: 5, Cols: cols}); err == nil {
		t.Error("creating a matrix again with another shape succeeded")
	}
	m1, err := j.clients[1].OpenMatrix(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if m1.Meta() != m0.Meta() {
		t.Errorf("opened %+v, created %+v", m1.Meta(), m0.Meta())
	}
	ones := make([]float64, cols)
	for i := range ones {
		ones[i] = 1
	}
	const n = 50
	var hs []*psf.Handle
	for i := 0; i < n; i++ {
		hs = append(hs, m0.IncrementRowAsync(0, ones), m1.IncrementRowAsync(0, ones))
	}
	for _, h := range hs {
		if err := h.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	f := psf.GetAsync(m1, psf.Sum(0))
	select {
	case <-f.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("future not done")
	}
	if s, err := f.Wait(ctx); err != nil || s != 2*n*cols {
		t.Errorf("sum after %d increments by 2 workers: %v, %v", n, s, err)
	}
	// Wait gives up with its context; the call goes on.
	expired, cancel := context.WithCancel(ctx)
	cancel()
	f = psf.GetAsync(m0, psf.Sum(0))
	if _, err := f.Wait(expired); err == nil {
		// The call may have finished already; that is fine too.
		t.Log("call finished before the cancelled Wait looked")
	}
	if s, err := f.Wait(ctx); err != nil || s != 2*n*cols {
		t.Errorf("sum: %v, %v", s, err)
	}
	if got, err := m0.GetRowAsync(0).Wait(ctx); err != nil || slices.Max(got) != 2*n {
		t.Errorf("row: max %v, %v", slices.Max(got), err)
	}
}
