package psf

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkAggKernel runs each aggregate's kernel on one partition of
// 2^22 columns, on the server side only (no network), and reports the
// time per element (per element of each row for Dot).
func BenchmarkAggKernel(b *testing.B) {
	const cols = 1 << 22
	meta, err := MatrixMeta{Name: "agg", Rows: 2, Cols: cols}.withDefaults(1)
	if err != nil {
		b.Fatal(err)
	}
	m := newServerMatrix(meta, 0)
	part := m.parts[0]
	r := rand.New(rand.NewPCG(1, 2))
	for row := 0; row < 2; row++ {
		x := part.row(row)
		for i := range x {
			x[i] = r.NormFloat64()
		}
	}
	one, err := encode(rowParamCodec, rowParam{Rows: []int{0}})
	if err != nil {
		b.Fatal(err)
	}
	two, err := encode(rowParamCodec, rowParam{Rows: []int{0, 1}})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		k     Kernel
		param []byte
	}{
		{kSum, one}, {kAsum, one}, {kNrm2, one}, {kDot, two},
		{kMax, one}, {kMin, one}, {kAmax, one}, {kAmin, one}, {kNnz, one},
	} {
		b.Run(c.k.Name()[len("psf."):], func(b *testing.B) {
			blk := &Block{m: m, part: part}
			for i := 0; i < b.N; i++ {
				if err := c.k.serve(blk, c.param, NewEncoder(nil)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/cols, "ns/elem")
		})
	}
}
