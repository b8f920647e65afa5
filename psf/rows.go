package psf

import (
	"context"
	"errors"
	"iter"
)

// GetRowAsync starts fetching the values of row.
func (m *Matrix) GetRowAsync(row int) *Future[[]float64] { return GetAsync(m, Pull(row)) }

// GetRow returns the values of row.
func (m *Matrix) GetRow(ctx context.Context, row int) ([]float64, error) {
	return m.GetRowAsync(row).Wait(ctx)
}

// GetRowsAsync starts fetching the values of rows, in one request.
func (m *Matrix) GetRowsAsync(rows []int) *Future[[][]float64] { return GetAsync(m, PullRows(rows)) }

// GetRows returns the values of rows (in the order given).
func (m *Matrix) GetRows(ctx context.Context, rows []int) ([][]float64, error) {
	return m.GetRowsAsync(rows).Wait(ctx)
}

// GetAtAsync starts fetching the values of row at columns cols.
func (m *Matrix) GetAtAsync(row int, cols []int) *Future[[]float64] {
	return GetAsync(m, PullAt(row, cols))
}

// GetAt returns the values of row at columns cols (any order, repeats
// allowed).
func (m *Matrix) GetAt(ctx context.Context, row int, cols []int) ([]float64, error) {
	return m.GetAtAsync(row, cols).Wait(ctx)
}

// GetAt64Async is GetAtAsync with int64 column indices.
func (m *Matrix) GetAt64Async(row int, cols []int64) *Future[[]float64] {
	return GetAsync(m, PullAt(row, cols))
}

// GetAt64 is GetAt with int64 column indices.
func (m *Matrix) GetAt64(ctx context.Context, row int, cols []int64) ([]float64, error) {
	return m.GetAt64Async(row, cols).Wait(ctx)
}

// RowBatch is one batch of GetRowsFlow: rows and their values.
type RowBatch struct {
	Rows   []int
	Values [][]float64
}

// flowWindow is how many batches GetRowsFlow keeps in flight.
const flowWindow = 4

// GetRowsFlow fetches rows in batches of batchSize (at most four batches in
// flight) and yields each batch as it arrives, so not necessarily in the
// order of rows. The iteration stops after the first error, which it
// yields, or when ctx is done; breaking out of the loop stops fetching.
//
//	for b, err := range m.GetRowsFlow(ctx, rows, 100) {
//		if err != nil { ... }
//		use(b.Rows, b.Values)
//	}
func (m *Matrix) GetRowsFlow(ctx context.Context, rows []int, batchSize int) iter.Seq2[RowBatch, error] {
	return func(yield func(RowBatch, error) bool) {
		if batchSize <= 0 {
			yield(RowBatch{}, errors.New("psf: batch size must be positive"))
			return
		}
		if err := m.meta.CheckRows(rows...); err != nil {
			yield(RowBatch{}, err)
			return
		}
		type arrival struct {
			rows []int
			vals [][]float64
			err  error
		}
		// Buffered for the whole window, so that the waiting goroutines of
		// batches still in flight finish even if the loop stops early.
		ch := make(chan arrival, flowWindow)
		next, inFlight := 0, 0
		start := func() {
			end := min(next+batchSize, len(rows))
			batch := append([]int(nil), rows[next:end]...)
			next = end
			inFlight++
			f := m.GetRowsAsync(batch)
			go func() {
				<-f.Done()
				ch <- arrival{rows: batch, vals: f.val, err: f.err}
			}()
		}
		for next < len(rows) && inFlight < flowWindow {
			start()
		}
		for inFlight > 0 {
			var a arrival
			select {
			case a = <-ch:
			case <-ctx.Done():
				yield(RowBatch{}, ctx.Err())
				return
			}
			inFlight--
			if a.err != nil {
				yield(RowBatch{Rows: a.rows}, a.err)
				return
			}
			if !yield(RowBatch{Rows: a.rows, Values: a.vals}, nil) {
				return
			}
			if next < len(rows) {
				start()
			}
		}
	}
}

// IncrementRowAsync starts adding vals (one per column) to row.
func (m *Matrix) IncrementRowAsync(row int, vals []float64) *Handle {
	return m.UpdateAsync(Increment(row, vals))
}

// IncrementRow adds vals (one per column) to row.
func (m *Matrix) IncrementRow(ctx context.Context, row int, vals []float64) error {
	return m.IncrementRowAsync(row, vals).Wait(ctx)
}

// IncrementRowsAsync starts adding vals[i] to rows[i].
func (m *Matrix) IncrementRowsAsync(rows []int, vals [][]float64) *Handle {
	return m.UpdateAsync(IncrementRows(rows, vals))
}

// IncrementRows adds vals[i] to rows[i], for each i, in one request.
func (m *Matrix) IncrementRows(ctx context.Context, rows []int, vals [][]float64) error {
	return m.IncrementRowsAsync(rows, vals).Wait(ctx)
}

// IncrementAtAsync starts adding vals[i] to row at column cols[i].
func (m *Matrix) IncrementAtAsync(row int, cols []int64, vals []float64) *Handle {
	return m.UpdateAsync(IncrementAt(row, cols, vals))
}

// IncrementAt adds vals[i] to row at column cols[i].
func (m *Matrix) IncrementAt(ctx context.Context, row int, cols []int64, vals []float64) error {
	return m.IncrementAtAsync(row, cols, vals).Wait(ctx)
}

// UpdateRowAsync starts setting row to vals.
func (m *Matrix) UpdateRowAsync(row int, vals []float64) *Handle {
	return m.UpdateAsync(Put(row, vals))
}

// UpdateRow sets row to vals.
func (m *Matrix) UpdateRow(ctx context.Context, row int, vals []float64) error {
	return m.UpdateRowAsync(row, vals).Wait(ctx)
}

// UpdateRowsAsync starts setting rows[i] to vals[i].
func (m *Matrix) UpdateRowsAsync(rows []int, vals [][]float64) *Handle {
	return m.UpdateAsync(PutRows(rows, vals))
}

// UpdateRows sets rows[i] to vals[i], for each i, in one request.
func (m *Matrix) UpdateRows(ctx context.Context, rows []int, vals [][]float64) error {
	return m.UpdateRowsAsync(rows, vals).Wait(ctx)
}

// UpdateAtAsync starts setting row at column cols[i] to vals[i].
func (m *Matrix) UpdateAtAsync(row int, cols []int64, vals []float64) *Handle {
	return m.UpdateAsync(PutAt(row, cols, vals))
}

// UpdateAt sets row at column cols[i] to vals[i].
func (m *Matrix) UpdateAt(ctx context.Context, row int, cols []int64, vals []float64) error {
	return m.UpdateAtAsync(row, cols, vals).Wait(ctx)
}
