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
// element-wise function of n input rows. The user's function may panic
// half-way through the output row: the kernel saves that row first
// (guardOutput), and the server puts it back then.
func elemKernel[P any](name string, c Codec[P], n int, loop func(p P, c0 int64, in [][]float64, out []float64)) *UpdateKernel[elemParam[P]] {
	k := NewUpdateKernel(name, elemCodec(c), func(b *Block, p elemParam[P]) error {
		if len(p.Rows) != n+1 {
			return fmt.Errorf("%w: %d rows (want %d)", ErrBadRequest, len(p.Rows), n+1)
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
func NewMap[P any](name string, params Codec[P], f func(params P, x float64) float64) *MapKernel[P] {
	return &MapKernel[P]{elemKernel(name, params, 1, func(p P, _ int64, in [][]float64, out []float64) {
		for i, x := range in[0] {
			out[i] = f(p, x)
		}
	})}
}

// NewMapWithIndex returns a Map kernel computing f(params, col, x) for the
// value x at every global column index col.
func NewMapWithIndex[P any](name string, params Codec[P], f func(params P, col int64, x float64) float64) *MapKernel[P] {
	return &MapKernel[P]{elemKernel(name, params, 1, func(p P, c0 int64, in [][]float64, out []float64) {
		for i, x := range in[0] {
			out[i] = f(p, c0+int64(i), x)
		}
	})}
}

// NewZip2Map returns a Zip2Map kernel computing f(params, x, y) for the
// values x and y of two rows at every column.
func NewZip2Map[P any](name string, params Codec[P], f func(params P, x, y float64) float64) *Zip2Kernel[P] {
	return &Zip2Kernel[P]{elemKernel(name, params, 2, func(p P, _ int64, in [][]float64, out []float64) {
		y := in[1]
		for i, x := range in[0] {
			out[i] = f(p, x, y[i])
		}
	})}
}

// NewZip2MapWithIndex returns a Zip2Map kernel computing
// f(params, col, x, y) at every global column index col.
func NewZip2MapWithIndex[P any](name string, params Codec[P], f func(params P, col int64, x, y float64) float64) *Zip2Kernel[P] {
	return &Zip2Kernel[P]{elemKernel(name, params, 2, func(p P, c0 int64, in [][]float64, out []float64) {
		y := in[1]
		for i, x := range in[0] {
			out[i] = f(p, c0+int64(i), x, y[i])
		}
	})}
}

// NewZip3Map returns a Zip3Map kernel computing f(params, x, y, z) for the
// values of three rows at every column.
func NewZip3Map[P any](name string, params Codec[P], f func(params P, x, y, z float64) float64) *Zip3Kernel[P] {
	return &Zip3Kernel[P]{elemKernel(name, params, 3, func(p P, _ int64, in [][]float64, out []float64) {
		y, z := in[1], in[2]
		for i, x := range in[0] {
			out[i] = f(p, x, y[i], z[i])
		}
	})}
}

// NewZip3MapWithIndex returns a Zip3Map kernel computing
// f(params, col, x, y, z) at every global column index col.
func NewZip3MapWithIndex[P any](name string, params Codec[P], f func(params P, col int64, x, y, z float64) float64) *Zip3Kernel[P] {
	return &Zip3Kernel[P]{elemKernel(name, params, 3, func(p P, c0 int64, in [][]float64, out []float64) {
		y, z := in[1], in[2]
		for i, x := range in[0] {
			out[i] = f(p, c0+int64(i), x, y[i], z[i])
		}
	})}
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
