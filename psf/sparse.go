package psf

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
)

// MatrixType is the kind of a matrix: Dense or Sparse.
type MatrixType string

// The matrix types.
const (
	// Dense matrices hold Rows x Cols float64 values, every one in memory
	// once its row is written, partitioned by ranges of columns.
	Dense MatrixType = "dense"
	// Sparse matrices have a column for every int64 (negative ones
	// too) and hold only the entries that are not +0, in hash tables,
	// partitioned by a hash of the column (see MatrixMeta.ColBlockOf).
	Sparse MatrixType = "sparse"
)

// ErrSparse is the error of a function that is not defined on sparse
// matrices: one that would give a non-zero value to the 2^64 columns not
// stored (Exp, Log, AddS with s != 0, Div, RandomUniform, Fill with a
// non-zero value, ...), one that returns whole dense rows (GetRow, Pull),
// or Block.Row in a kernel. The error names the function and says why; use
// errors.Is to test for it.
var ErrSparse = errors.New("psf: not defined on sparse matrices")

// errSparse is the worker-side ErrSparse of function fn on matrix m.
func errSparse(fn string, m *MatrixMeta, format string, args ...any) error {
	return fmt.Errorf("%s on matrix %q: %w: %s", fn, m.Name, ErrSparse, fmt.Sprintf(format, args...))
}

// sparseColBlock returns the column block of column c among n (n > 0) of a
// sparse matrix: the high half of SplitMix64(c) times n, so that any
// distribution of ids, small, clustered or hashed already, spreads evenly.
func sparseColBlock(c int64, n int) int {
	hi, _ := bits.Mul64(mix64(uint64(c)), uint64(n))
	return int(hi)
}

// isPosZero reports whether v is +0, the value a sparse matrix does not
// store (-0 is stored, so that it reads back as -0).
func isPosZero(v float64) bool { return math.Float64bits(v) == 0 }

// SparseVector is a sparse row: Values[i] at column Indices[i], zeros at
// every other column. psf returns them, and takes them, with Indices
// strictly increasing (sorted, no repeats); NewSparseVector makes one from
// indices in any order.
type SparseVector struct {
	Indices []int64
	Values  []float64
}

// NewSparseVector returns the vector of values at indices, which may come
// in any order but not repeat; the slices are copied.
func NewSparseVector(indices []int64, values []float64) (SparseVector, error) {
	if len(indices) != len(values) {
		return SparseVector{}, fmt.Errorf("psf: sparse vector of %d indices and %d values", len(indices), len(values))
	}
	v := SparseVector{Indices: slices.Clone(indices), Values: slices.Clone(values)}
	sortEntries(v.Indices, v.Values)
	for i := 1; i < len(v.Indices); i++ {
		if v.Indices[i] == v.Indices[i-1] {
			return SparseVector{}, fmt.Errorf("psf: sparse vector: index %d given twice", v.Indices[i])
		}
	}
	return v, nil
}

// SparseVectorOf returns the entries of m as a sparse vector, sorted by
// column (the values as they are, zeros included).
func SparseVectorOf(m map[int64]float64) SparseVector {
	v := SparseVector{Indices: slices.Sorted(maps.Keys(m)), Values: make([]float64, 0, len(m))}
	for _, k := range v.Indices {
		v.Values = append(v.Values, m[k])
	}
	return v
}

// Len returns the number of entries.
func (v SparseVector) Len() int { return len(v.Indices) }

// Get returns the value at column col (0 if not stored), by binary search.
func (v SparseVector) Get(col int64) float64 {
	if i, ok := slices.BinarySearch(v.Indices, col); ok && i < len(v.Values) {
		return v.Values[i]
	}
	return 0
}

// Validate returns an error unless v has as many values as indices and its
// indices are strictly increasing.
func (v SparseVector) Validate() error {
	if len(v.Indices) != len(v.Values) {
		return fmt.Errorf("psf: sparse vector of %d indices and %d values", len(v.Indices), len(v.Values))
	}
	for i := 1; i < len(v.Indices); i++ {
		if v.Indices[i] <= v.Indices[i-1] {
			return fmt.Errorf("psf: sparse vector indices must be strictly increasing: %d follows %d at position %d", v.Indices[i], v.Indices[i-1], i)
		}
	}
	return nil
}

// SparseVector appends v: its length, its first index (varint) and the
// differences between consecutive indices (uvarints, so clustered ids take
// a byte or two), then the values (8 bytes each). v must be valid
// (Validate); an invalid one fails the encoding.
func (e *Encoder) SparseVector(v SparseVector) {
	if err := v.Validate(); err != nil {
		e.Fail(err)
		return
	}
	e.Uvarint(uint64(len(v.Indices)))
	for i, k := range v.Indices {
		if i == 0 {
			e.Varint(k)
		} else {
			e.Uvarint(uint64(k) - uint64(v.Indices[i-1]))
		}
	}
	e.buf = growBy(e.buf, 8*len(v.Values))
	for _, x := range v.Values {
		e.Float64(x)
	}
}

// SparseVector reads a vector written by Encoder.SparseVector; indices
// that do not increase strictly (a difference of 0, or past MaxInt64) are
// an error.
func (d *Decoder) SparseVector() SparseVector {
	n := d.length(9)
	if d.err != nil {
		return SparseVector{}
	}
	v := SparseVector{Indices: make([]int64, n), Values: make([]float64, n)}
	for i := range v.Indices {
		if i == 0 {
			v.Indices[0] = d.Varint()
			continue
		}
		prev := v.Indices[i-1]
		delta := d.Uvarint()
		if delta == 0 || delta > uint64(math.MaxInt64)-uint64(prev) {
			d.Fail(fmt.Errorf("psf: sparse vector indices do not increase at position %d", i))
		}
		v.Indices[i] = int64(uint64(prev) + delta)
	}
	for i := range v.Values {
		v.Values[i] = d.Float64()
	}
	if d.err != nil {
		return SparseVector{}
	}
	return v
}

// SparseVectorCodec encodes one SparseVector (Encoder.SparseVector).
var SparseVectorCodec Codec[SparseVector] = NewCodec((*Encoder).SparseVector, (*Decoder).SparseVector)

// sparseVectorsCodec encodes a list of SparseVectors.
var sparseVectorsCodec = NewCodec(func(e *Encoder, vs []SparseVector) {
	e.Uvarint(uint64(len(vs)))
	for _, v := range vs {
		e.SparseVector(v)
	}
}, func(d *Decoder) []SparseVector {
	n := d.length(1)
	if d.err != nil {
		return nil
	}
	vs := make([]SparseVector, n)
	for i := range vs {
		vs[i] = d.SparseVector()
	}
	if d.err != nil {
		return nil
	}
	return vs
})

// entry is a key and its value, for sorting.
type entry struct {
	k int64
	v float64
}

// sortEntries sorts keys, and vals along, by key: with pdqsort for short
// inputs, with an LSD radix sort on 16-bit digits (skipping the digits
// every key shares, such as the high ones of small ids) for long ones.
func sortEntries(keys []int64, vals []float64) {
	n := len(keys)
	if n < 2 {
		return
	}
	if n < 1<<14 {
		es := make([]entry, n)
		for i := range es {
			es[i] = entry{keys[i], vals[i]}
		}
		slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(a.k, b.k) })
		for i, e := range es {
			keys[i], vals[i] = e.k, e.v
		}
		return
	}
	counts := new([4][1 << 16]int)
	for _, k := range keys {
		u := uint64(k) ^ 1<<63 // signed order
		counts[0][u&0xffff]++
		counts[1][u>>16&0xffff]++
		counts[2][u>>32&0xffff]++
		counts[3][u>>48]++
	}
	src := make([]entry, n)
	for i := range src {
		src[i] = entry{keys[i], vals[i]}
	}
	dst := make([]entry, n)
	for pass := range 4 {
		c := &counts[pass]
		shift := 16 * pass
		if c[(uint64(keys[0])^1<<63)>>shift&0xffff] == n {
			continue // every key has this digit
		}
		sum := 0
		for d := range c {
			c[d], sum = sum, sum+c[d]
		}
		for _, e := range src {
			d := (uint64(e.k) ^ 1<<63) >> shift & 0xffff
			dst[c[d]] = e
			c[d]++
		}
		src, dst = dst, src
	}
	for i, e := range src {
		keys[i], vals[i] = e.k, e.v
	}
}

// mergeSparse merges vectors with sorted, pairwise disjoint indices into
// one; an index in two of them is an error (a server answered a column
// twice).
func mergeSparse(vs []SparseVector) (SparseVector, error) {
	switch len(vs) {
	case 0:
		return SparseVector{Indices: []int64{}, Values: []float64{}}, nil
	case 1:
		return vs[0], nil
	}
	a, err := mergeSparse(vs[:len(vs)/2])
	if err != nil {
		return a, err
	}
	b, err := mergeSparse(vs[len(vs)/2:])
	if err != nil {
		return b, err
	}
	n := len(a.Indices) + len(b.Indices)
	out := SparseVector{Indices: make([]int64, 0, n), Values: make([]float64, 0, n)}
	i, j := 0, 0
	for i < len(a.Indices) && j < len(b.Indices) {
		switch ka, kb := a.Indices[i], b.Indices[j]; {
		case ka < kb:
			out.Indices, out.Values = append(out.Indices, ka), append(out.Values, a.Values[i])
			i++
		case kb < ka:
			out.Indices, out.Values = append(out.Indices, kb), append(out.Values, b.Values[j])
			j++
		default:
			return SparseVector{}, fmt.Errorf("psf: column %d answered by two partitions", ka)
		}
	}
	out.Indices = append(append(out.Indices, a.Indices[i:]...), b.Indices[j:]...)
	out.Values = append(append(out.Values, a.Values[i:]...), b.Values[j:]...)
	return out, nil
}

// sortedEntries returns t's entries sorted by key, as a vector.
func sortedEntries(t *longTable[float64]) SparseVector {
	n := t.Len()
	v := SparseVector{Indices: make([]int64, 0, n), Values: make([]float64, 0, n)}
	for k, x := range t.All {
		v.Indices = append(v.Indices, k)
		v.Values = append(v.Values, x)
	}
	sortEntries(v.Indices, v.Values)
	return v
}
