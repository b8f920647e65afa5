package psf

import (
	"context"
	"errors"
	"iter"
)

// GetRowAsync starts fetching the values of row of a dense matrix (see
// GetSparseRowAsync for a sparse one).
func (m *Matrix) GetRowAsync(row int) *Future[[]float64] { return GetAsync(m, Pull(row)) }

// GetRow returns the values of row of a dense matrix. On a sparse matrix it
// fails with ErrSparse: use GetSparseRow.
func (m *Matrix) GetRow(ctx context.Context, row int) ([]float64, error) {
	return m.GetRowAsync(row).Wait(ctx)
}

// GetRowsAsync starts fetching the values of rows, in one request.
func (m *Matrix) GetRowsAsync(rows []int) *Future[[][]float64] { return GetAsync(m, PullRows(rows)) }

// GetRows returns the values of rows (in the order given).
func (m *Matrix) GetRows(ctx context.Context, rows []int) ([][]float64, error) {
	return m.GetRowsAsync(rows).Wait(ctx)
}

// GetAtAsync starts fetching the values of row at columns cols (for a
// sparse matrix, any int64; see GetAt64).
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

// SparseRowBatch is one batch of GetSparseRowsFlow: rows and their
// entries.
type SparseRowBatch struct {
	Rows   []int
	Values []SparseVector
}

// flowWindow is how many batches GetRowsFlow keeps in flight.
const flowWindow = 4

// GetRowsFlow fetches rows in batches of batchSize (at most four batches in
// flight) and yields each batch as it arrives, so not necessarily in the
// order of rows. The iteration stops after the first error, which it
// yields, or when ctx is done; breaking out of the loop stops fetching.
// For the rows of a sparse matrix, use GetSparseRowsFlow.
//
//	for b, err := range m.GetRowsFlow(ctx, rows, 100) {
//		if err != nil { ... }
//		use(b.Rows, b.Values)
//	}
func (m *Matrix) GetRowsFlow(ctx context.Context, rows []int, batchSize int) iter.Seq2[RowBatch, error] {
	return rowsFlow(ctx, m, rows, batchSize, m.GetRowsAsync, func(rows []int, vals [][]float64) RowBatch {
		return RowBatch{Rows: rows, Values: vals}
	})
}

// GetSparseRowsFlow is GetRowsFlow for sparse rows: it yields batches of
// the rows' entries (as GetSparseRows), of a sparse or a dense matrix.
func (m *Matrix) GetSparseRowsFlow(ctx context.Context, rows []int, batchSize int) iter.Seq2[SparseRowBatch, error] {
	return rowsFlow(ctx, m, rows, batchSize, m.GetSparseRowsAsync, func(rows []int, vals []SparseVector) SparseRowBatch {
		return SparseRowBatch{Rows: rows, Values: vals}
	})
}

// rowsFlow is GetRowsFlow over fetch, which gets a batch of rows, making
// batches B of the rows and their values T with batch.
func rowsFlow[T, B any](ctx context.Context, m *Matrix, rows []int, batchSize int, fetch func([]int) *Future[[]T], batch func([]int, []T) B) iter.Seq2[B, error] {
	return func(yield func(B, error) bool) {
		var none B
		if batchSize <= 0 {
			yield(none, errors.New("psf: batch size must be positive"))
			return
		}
		if err := m.meta.CheckRows(rows...); err != nil {
			yield(none, err)
			return
		}
		type arrival struct {
			rows []int
			vals []T
			err  error
		}
		// Buffered for the whole window, so that the waiting goroutines of
		// batches still in flight finish even if the loop stops early.
		ch := make(chan arrival, flowWindow)
		next, inFlight := 0, 0
		start := func() {
			end := min(next+batchSize, len(rows))
			rs := append([]int(nil), rows[next:end]...)
			next = end
			inFlight++
			f := fetch(rs)
			go func() {
				<-f.Done()
				ch <- arrival{rows: rs, vals: f.val, err: f.err}
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
				yield(none, ctx.Err())
				return
			}
			inFlight--
			if a.err != nil {
				yield(batch(a.rows, nil), a.err)
				return
			}
			if !yield(batch(a.rows, a.vals), nil) {
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

// GetSparseRowAsync starts fetching the entries of row that are not +0.
func (m *Matrix) GetSparseRowAsync(row int) *Future[SparseVector] {
	return GetAsync(m, PullSparse(row))
}

// GetSparseRow returns the entries of row that are not +0, sorted by
// column: the stored entries of a sparse matrix's row, the non-zero values
// of a dense one's.
func (m *Matrix) GetSparseRow(ctx context.Context, row int) (SparseVector, error) {
	return m.GetSparseRowAsync(row).Wait(ctx)
}

// GetSparseRowsAsync starts fetching the entries of rows, in one request.
func (m *Matrix) GetSparseRowsAsync(rows []int) *Future[[]SparseVector] {
	return GetAsync(m, PullSparseRows(rows))
}

// GetSparseRows returns the entries of rows, as GetSparseRow does for each
// (in the order given; rows may repeat).
func (m *Matrix) GetSparseRows(ctx context.Context, rows []int) ([]SparseVector, error) {
	return m.GetSparseRowsAsync(rows).Wait(ctx)
}

// GetRowsAtAsync starts fetching the values of rows at columns cols.
func (m *Matrix) GetRowsAtAsync(rows []int, cols []int) *Future[[][]float64] {
	return GetAsync(m, PullRowsAt(rows, cols))
}

// GetRowsAt returns the values of rows at columns cols, of a dense or a
// sparse matrix, in one request: out[i][j] is row rows[i] at column
// cols[j]. Rows and columns may come in any order and repeat.
func (m *Matrix) GetRowsAt(ctx context.Context, rows []int, cols []int) ([][]float64, error) {
	return m.GetRowsAtAsync(rows, cols).Wait(ctx)
}

// GetRowsAt64Async is GetRowsAtAsync with int64 column indices.
func (m *Matrix) GetRowsAt64Async(rows []int, cols []int64) *Future[[][]float64] {
	return GetAsync(m, PullRowsAt(rows, cols))
}

// GetRowsAt64 is GetRowsAt with int64 column indices, as a sparse matrix
// takes.
func (m *Matrix) GetRowsAt64(ctx context.Context, rows []int, cols []int64) ([][]float64, error) {
	return m.GetRowsAt64Async(rows, cols).Wait(ctx)
}

// IncrementRowsAtAsync starts adding vecs[i] to rows[i] (IncrementRowsAt).
func (m *Matrix) IncrementRowsAtAsync(rows []int, vecs []SparseVector) *Handle {
	return m.UpdateAsync(IncrementRowsAt(rows, vecs))
}

// IncrementRowsAt adds vecs[i] to rows[i], for each i, at the vectors'
// columns, in one request: sparse increments of several rows, of a sparse
// or a dense matrix. The vectors' indices must be strictly increasing
// (NewSparseVector sorts them).
func (m *Matrix) IncrementRowsAt(ctx context.Context, rows []int, vecs []SparseVector) error {
	return m.IncrementRowsAtAsync(rows, vecs).Wait(ctx)
}

// UpdateRowsAtAsync starts setting rows[i] to vecs[i] at the vectors'
// columns (PutRowsAt).
func (m *Matrix) UpdateRowsAtAsync(rows []int, vecs []SparseVector) *Handle {
	return m.UpdateAsync(PutRowsAt(rows, vecs))
}

// UpdateRowsAt sets rows[i] to vecs[i] at the vectors' columns, leaving
// the other columns as they are.
func (m *Matrix) UpdateRowsAt(ctx context.Context, rows []int, vecs []SparseVector) error {
	return m.UpdateRowsAtAsync(rows, vecs).Wait(ctx)
}

// UpdateSparseRowAsync starts setting row to v (PutSparseRows).
func (m *Matrix) UpdateSparseRowAsync(row int, v SparseVector) *Handle {
	return m.UpdateAsync(PutSparseRows([]int{row}, []SparseVector{v}))
}

// UpdateSparseRow sets row to v: v's values at its columns, 0 elsewhere.
func (m *Matrix) UpdateSparseRow(ctx context.Context, row int, v SparseVector) error {
	return m.UpdateSparseRowAsync(row, v).Wait(ctx)
}

// UpdateSparseRowsAsync starts setting rows[i] to vecs[i].
func (m *Matrix) UpdateSparseRowsAsync(rows []int, vecs []SparseVector) *Handle {
	return m.UpdateAsync(PutSparseRows(rows, vecs))
}

// UpdateSparseRows sets rows[i] to vecs[i], for each i, in one request.
func (m *Matrix) UpdateSparseRows(ctx context.Context, rows []int, vecs []SparseVector) error {
	return m.UpdateSparseRowsAsync(rows, vecs).Wait(ctx)
}
