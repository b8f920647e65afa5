package main

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/gopslite/pslite/psf"
)

// largeCols makes a row of the large matrix 3.2 MB: each server's part of
// it (1.6 MB with 2 servers, 1.07 MB with 3) crosses the transports'
// lending threshold (frames of 512 KiB), where the rest of test_psf's
// matrices (8 KB rows) stay below it.
const largeCols = 400000

// largeVal is the value column c of row r holds after UpdateRows: any
// float64 bit pattern in rows 0 and 3, so that moved bytes must arrive
// exactly, and integers below 2^24 in rows 1 and 2, which are incremented
// (integers, so that the servers' sums are exact).
func largeVal(rank, r, c int) float64 {
	h := uint64(c)*0x9E3779B97F4A7C15 ^ uint64(r)<<48 ^ uint64(rank)<<56
	if r == 1 || r == 2 {
		return float64(h >> 40)
	}
	return float64(int64(h>>11)) / 3
}

// exact fails unless got equals want value for value.
func (w *worker) exact(what string, got, want []float64) {
	w.checks++
	if len(got) != len(want) {
		fail("%s: %d values, want %d", what, len(got), len(want))
	}
	wrong, first := 0, -1
	for i := range want {
		if got[i] != want[i] {
			if first < 0 {
				first = i
			}
			wrong++
		}
	}
	if wrong > 0 {
		fail("%s: %d of %d values wrong (the first, column %d: got %v, want %v)", what, wrong, len(want), first, got[first], want[first])
	}
}

// large moves rows of a matrix whose server parts are lent, and checks
// every value it gets back exactly: rows set and read, rows incremented
// (integers, so the sums are exact) while other requests are in flight,
// values at random columns, and the rows through a row flow.
func (w *worker) large(ctx context.Context) {
	const rows = 4
	m, err := w.c.CreateMatrix(ctx, psf.MatrixMeta{Name: fmt.Sprintf("w%d-large", w.rank), Rows: rows, Cols: largeCols})
	check(err, "create large")
	model := make([][]float64, rows)
	for r := range model {
		model[r] = make([]float64, largeCols)
		for c := range model[r] {
			model[r][c] = largeVal(w.rank, r, c)
		}
	}
	check(m.UpdateRows(ctx, []int{0, 1, 2, 3}, model), "large UpdateRows")
	got, err := m.GetRows(ctx, []int{0, 1, 2, 3})
	check(err, "large GetRows")
	for r := range model {
		w.exact(fmt.Sprintf("large row %d after UpdateRows", r), got[r], model[r])
	}
	// Increments of rows 1 and 2, all in flight at once, with a read of
	// row 0 among them.
	inc := make([]float64, largeCols)
	for c := range inc {
		inc[c] = float64(c%1000 - 500)
	}
	var hs []*psf.Handle
	for range 3 {
		hs = append(hs, m.IncrementRowsAsync([]int{1, 2}, [][]float64{inc, inc}))
	}
	row0 := m.GetRowAsync(0)
	for _, h := range hs {
		check(h.Wait(ctx), "large IncrementRows")
	}
	v0, err := row0.Wait(ctx)
	check(err, "large GetRow")
	w.exact("large row 0 read among increments", v0, model[0])
	for _, r := range []int{1, 2} {
		for c := range model[r] {
			model[r][c] += 3 * inc[c]
		}
	}
	rng := rand.New(rand.NewPCG(uint64(w.rank), 5))
	cols := make([]int, 100000)
	want := make([]float64, len(cols))
	for i := range cols {
		cols[i] = rng.IntN(largeCols)
		want[i] = model[2][cols[i]]
	}
	at, err := m.GetAt(ctx, 2, cols)
	check(err, "large GetAt")
	w.exact("large row 2 at random columns", at, want)
	seen := 0
	for b, err := range m.GetRowsFlow(ctx, []int{3, 2, 1, 0}, 2) {
		check(err, "large GetRowsFlow")
		for i, r := range b.Rows {
			w.exact(fmt.Sprintf("large row %d in a flow", r), b.Values[i], model[r])
			seen++
		}
	}
	if seen != rows {
		fail("large row flow gave %d rows, want %d", seen, rows)
	}
	check(w.c.DeleteMatrix(ctx, m.Name()), "delete large")
}
