package psf

import "fmt"

// elemParam is the parameter of an element-wise user kernel: its rows
// (inputs, then the output) and the user's parameters.
type elemParam[P any] struct {
	Rows   []int
	Params P
}

func elemCodec[P any](c Codec[P]) Codec[elemParam[P]] {
	return NewCodec(func(e *Encoder, p elemParam[P]) {
		e.Ints(p.Rows)
		c.Encode(e, p.Params)
	}, func(d *Decoder) elemParam[P] {
		return elemParam[P]{Rows: d.Ints(), Params: c.Decode(d)}
	})
}

// elemKernel registers nothing: it builds the update kernel of an
// element-wise function of n input rows. On dense rows it runs loop; the
// user's function may panic half-way through the output row: the kernel
// saves that row first (guardOutput), and the server puts it back then.
//
// On sparse rows it runs at(params, col, x) at every column where an
// input stores an entry, x holding the inputs' values there, and makes
// the results the output row, replacing it only once all are computed
// (so a panic changes nothing). The other columns stay 0: when the
// function does not take the column (indexed false), the kernel first
// checks that at(params, 0, zeros) is 0 and fails with ErrSparse if not.
func elemKernel[P any](name string, c Codec[P], n int, indexed bool, loop func(p P, c0 int64, in [][]float64, out []float64), at func(p P, col int64, x []float64) float64) *UpdateKernel[elemParam[P]] {
	k := NewUpdateKernel(name, elemCodec(c), func(b *Block, p elemParam[P]) error {
		if len(p.Rows) != n+1 {
			return fmt.Errorf("%w: %d rows (want %d)", ErrBadRequest, len(p.Rows), n+1)
		}
		if b.sparse() {
			return sparseElem(b, p, n, indexed, at)
		}
		in := make([][]float64, n)
		for i, r := range p.Rows[:n] {
			x, err := b.input(r)
			if err != nil {
				return err
			}
			in[i] = x
		}
		to := p.Rows[n]
		if err := b.protect(to); err != nil {
			return err
		}
		out, err := b.Row(to)
		if err != nil {
			return err
		}
		loop(p.Params, b.Partition().ColStart, in, out)
		return nil
	})
	k.g = guardOutput
	return k
}

// sparseElem is elemKernel on sparse rows.
func sparseElem[P any](b *Block, p elemParam[P], n int, indexed bool, at func(p P, col int64, x []float64) float64) error {
	in, err := b.tables(p.Rows[:n])
	if err != nil {
		return err
	}
	part, row, err := b.locate(p.Rows[n])
	if err != nil {
		return err
	}
	x := make([]float64, n)
	if !indexed {
		if v := at(p.Params, 0, x); v != 0 {
			return fmt.Errorf("%w: the function of zeros is %v, not 0, which every column not stored would take", ErrSparse, v)
		}
	}
	size := 0
	for _, t := range in {
		size = max(size, t.Len())
	}
	out := newLongTable[float64](size)
	for i, t := range in {
		for k := range t.All {
			seen := false
			for _, u := range in[:i] {
				if _, ok := u.Get(k); ok {
					seen = true
					break
				}
			}
			if seen {
				continue
			}
			for j, u := range in {
				x[j], _ = u.Get(k)
			}
			if v := at(p.Params, k, x); !isPosZero(v) {
				out.Set(k, v)
			}
		}
	}
	part.setTable(row, out) // all computed: nothing to undo
	return nil
}

// MapKernel is the server half of a Map function: a named function applied
// to every value of a row, with parameters of type P. It is a Kernel:
// register it in every process.
type MapKernel[P any] struct{ *UpdateKernel[elemParam[P]] }

// Zip2Kernel is the server half of a Zip2Map function: a named function of
// the values of two rows at each column.
type Zip2Kernel[P any] struct{ *UpdateKernel[elemParam[P]] }

// Zip3Kernel is the server half of a Zip3Map function: a named function of
// the values of three rows at each column.
type Zip3Kernel[P any] struct{ *UpdateKernel[elemParam[P]] }

// NewMap returns a Map kernel computing f(params, x) for every value x.
// On a sparse matrix it computes f at the stored entries, and refuses
// (ErrSparse) when f(params, 0) is not 0.
func NewMap[P any](name string, params Codec[P], f func(params P, x float64) float64) *MapKernel[P] {
	return &MapKernel[P]{elemKernel(name, params, 1, false, func(p P, _ int64, in [][]float64, out []float64) {
		for i, x := range in[0] {
			out[i] = f(p, x)
		}
	}, func(p P, _ int64, x []float64) float64 { return f(p, x[0]) })}
}

// NewMapWithIndex returns a Map kernel computing f(params, col, x) for the
// value x at every global column index col. On a sparse matrix it computes
// f at the stored entries only: the other columns stay 0, which f must
// give there (the server cannot check it for 2^64 columns).
func NewMapWithIndex[P any](name string, params Codec[P], f func(params P, col int64, x float64) float64) *MapKernel[P] {
	return &MapKernel[P]{elemKernel(name, params, 1, true, func(p P, c0 int64, in [][]float64, out []float64) {
		for i, x := range in[0] {
			out[i] = f(p, c0+int64(i), x)
		}
	}, func(p P, col int64, x []float64) float64 { return f(p, col, x[0]) })}
}

// NewZip2Map returns a Zip2Map kernel computing f(params, x, y) for the
// values x and y of two rows at every column. On a sparse matrix it
// computes f at the columns where either row stores an entry, and refuses
// (ErrSparse) when f(params, 0, 0) is not 0.
func NewZip2Map[P any](name string, params Codec[P], f func(params P, x, y float64) float64) *Zip2Kernel[P] {
	return &Zip2Kernel[P]{elemKernel(name, params, 2, false, func(p P, _ int64, in [][]float64, out []float64) {
		y := in[1]
		for i, x := range in[0] {
			out[i] = f(p, x, y[i])
		}
	}, func(p P, _ int64, x []float64) float64 { return f(p, x[0], x[1]) })}
}

// NewZip2MapWithIndex returns a Zip2Map kernel computing
// f(params, col, x, y) at every global column index col. On a sparse
// matrix, only at the columns where either row stores an entry (see
// NewMapWithIndex).
func NewZip2MapWithIndex[P any](name string, params Codec[P], f func(params P, col int64, x, y float64) float64) *Zip2Kernel[P] {
	return &Zip2Kernel[P]{elemKernel(name, params, 2, true, func(p P, c0 int64, in [][]float64, out []float64) {
		y := in[1]
		for i, x := range in[0] {
			out[i] = f(p, c0+int64(i), x, y[i])
		}
	}, func(p P, col int64, x []float64) float64 { return f(p, col, x[0], x[1]) })}
}

// NewZip3Map returns a Zip3Map kernel computing f(params, x, y, z) for the
// values of three rows at every column. On a sparse matrix, at the columns
// where any of the rows stores an entry, when f(params, 0, 0, 0) is 0
// (see NewZip2Map).
func NewZip3Map[P any](name string, params Codec[P], f func(params P, x, y, z float64) float64) *Zip3Kernel[P] {
	return &Zip3Kernel[P]{elemKernel(name, params, 3, false, func(p P, _ int64, in [][]float64, out []float64) {
		y, z := in[1], in[2]
		for i, x := range in[0] {
			out[i] = f(p, x, y[i], z[i])
		}
	}, func(p P, _ int64, x []float64) float64 { return f(p, x[0], x[1], x[2]) })}
}

// NewZip3MapWithIndex returns a Zip3Map kernel computing
// f(params, col, x, y, z) at every global column index col. On a sparse
// matrix, only at the columns where any of the rows stores an entry (see
// NewMapWithIndex).
func NewZip3MapWithIndex[P any](name string, params Codec[P], f func(params P, col int64, x, y, z float64) float64) *Zip3Kernel[P] {
	return &Zip3Kernel[P]{elemKernel(name, params, 3, true, func(p P, c0 int64, in [][]float64, out []float64) {
		y, z := in[1], in[2]
		for i, x := range in[0] {
			out[i] = f(p, c0+int64(i), x, y[i], z[i])
		}
	}, func(p P, col int64, x []float64) float64 { return f(p, col, x[0], x[1], x[2]) })}
}

func elemUpdate[P any](k *UpdateKernel[elemParam[P]], params P, rows ...int) UpdateFunc {
	p := elemParam[P]{Rows: rows, Params: params}
	return NewUpdate(k, func(m *MatrixMeta) ([]Part[elemParam[P]], error) {
		return SplitRows(m, p, rows...)
	})
}

// Map sets row to to k's function of row from (with or without index,
// depending on how k was made), with params. The rows must be colocated;
// they may be the same row.
func Map[P any](k *MapKernel[P], params P, from, to int) UpdateFunc {
	return elemUpdate(k.UpdateKernel, params, from, to)
}

// Zip2Map sets row to to k's function of rows a and b.
func Zip2Map[P any](k *Zip2Kernel[P], params P, a, b, to int) UpdateFunc {
	return elemUpdate(k.UpdateKernel, params, a, b, to)
}

// Zip3Map sets row to to k's function of rows a, b and c.
func Zip3Map[P any](k *Zip3Kernel[P], params P, a, b, c, to int) UpdateFunc {
	return elemUpdate(k.UpdateKernel, params, a, b, c, to)
}
