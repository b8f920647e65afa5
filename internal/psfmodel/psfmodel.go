// Package psfmodel is the local model of sparse psf rows that the tests
// (psf's own and tests/test_psf) check a sparse matrix against, and the
// column ids they draw.
package psfmodel

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/gopslite/pslite/psf"
)

// Row is the model of a sparse row: its entries that are not +0.
type Row map[int64]float64

// Get returns the value at column k (0 when not stored).
func (s Row) Get(k int64) float64 { return s[k] }

// Set stores v at k, dropping +0 as the servers do.
func (s Row) Set(k int64, v float64) {
	if math.Float64bits(v) == 0 {
		delete(s, k)
	} else {
		s[k] = v
	}
}

// Clone returns a copy of the row.
func (s Row) Clone() Row { return maps.Clone(s) }

// Vector returns the row's entries sorted by column.
func (s Row) Vector() psf.SparseVector { return psf.SparseVectorOf(s) }

// Values returns the row's values with one implicit zero: a sparse row
// always has columns not stored.
func (s Row) Values() []float64 {
	out := []float64{0}
	for _, v := range s {
		out = append(out, v)
	}
	return out
}

// Union returns the columns stored in any of rows, sorted.
func Union(rows ...Row) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, r := range rows {
		for k := range r {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return out
}

// IDs returns n distinct column ids drawn as ids come: small (below
// small), negative (above -small), clustered above 2^62 (within spread),
// one of extremes, or hashed over all int64.
func IDs(r *rand.Rand, n, small, spread int, extremes []int64) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for len(out) < n {
		var k int64
		switch r.IntN(5) {
		case 0:
			k = int64(r.IntN(small))
		case 1:
			k = -int64(r.IntN(small))
		case 2:
			k = 1<<62 + int64(r.IntN(spread))
		case 3:
			k = extremes[r.IntN(len(extremes))]
		default:
			k = int64(r.Uint64())
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
