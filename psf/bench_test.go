package psf_test

import (
	"context"
	"math"
	"testing"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/psf"
)

const benchCols = 10_000_000

// benchJob is a 2-server, 1-worker job over real ZeroMQ sockets with a
// 2 x 10,000,000 matrix of random values.
func benchJob(b *testing.B) (*job, *psf.Matrix) {
	j := newJob(b, 2, 1, testcluster.Options{Quiet: true})
	ctx := context.Background()
	m, err := j.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "big", Rows: 2, Cols: benchCols})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Update(ctx, psf.RandomUniform(0, -1, 1, 1)); err != nil {
		b.Fatal(err)
	}
	if err := m.Update(ctx, psf.RandomNormal(1, 0, 1, 2)); err != nil {
		b.Fatal(err)
	}
	return j, m
}

// wireBytes runs f b.N times and reports the bytes the worker sent and
// received per run.
func wireBytes(b *testing.B, j *job, f func() float64) float64 {
	v := j.c.Workers[0].Van()
	s0, r0 := v.Stats()
	b.ResetTimer()
	var last float64
	for i := 0; i < b.N; i++ {
		last = f()
	}
	b.StopTimer()
	s1, r1 := v.Stats()
	b.ReportMetric(float64(s1-s0)/float64(b.N), "sent-B/op")
	b.ReportMetric(float64(r1-r0)/float64(b.N), "recv-B/op")
	return last
}

// BenchmarkNrm2 compares the norm of a 10,000,000-column row computed by
// the servers (each on its half) with pulling the row and computing it on
// the worker.
func BenchmarkNrm2(b *testing.B) {
	j, m := benchJob(b)
	ctx := context.Background()
	var server, local float64
	b.Run("server", func(b *testing.B) {
		server = wireBytes(b, j, func() float64 {
			v, err := psf.Get(ctx, m, psf.Nrm2(0))
			if err != nil {
				b.Fatal(err)
			}
			return v
		})
	})
	b.Run("pull", func(b *testing.B) {
		local = wireBytes(b, j, func() float64 {
			x, err := m.GetRow(ctx, 0)
			if err != nil {
				b.Fatal(err)
			}
			var s float64
			for _, v := range x {
				s += v * v
			}
			return math.Sqrt(s)
		})
	})
	if ran := server != 0 && local != 0; ran && math.Abs(server-local) > 1e-9*local { // both sub-benchmarks ran
		b.Errorf("server %v, local %v", server, local)
	}
}

// BenchmarkDot compares the dot product of two 10,000,000-column rows
// computed by the servers with pulling both rows.
func BenchmarkDot(b *testing.B) {
	j, m := benchJob(b)
	ctx := context.Background()
	var server, local float64
	b.Run("server", func(b *testing.B) {
		server = wireBytes(b, j, func() float64 {
			v, err := psf.Get(ctx, m, psf.Dot(0, 1))
			if err != nil {
				b.Fatal(err)
			}
			return v
		})
	})
	b.Run("pull", func(b *testing.B) {
		local = wireBytes(b, j, func() float64 {
			rows, err := m.GetRows(ctx, []int{0, 1})
			if err != nil {
				b.Fatal(err)
			}
			var s float64
			for i, v := range rows[0] {
				s += v * rows[1][i]
			}
			return s
		})
	})
	if ran := server != 0 && local != 0; ran && math.Abs(server-local) > 1e-9*math.Max(1, math.Abs(local)) { // both ran
		b.Errorf("server %v, local %v", server, local)
	}
}

// BenchmarkAgg runs each aggregate on a 10,000,000-column row held by two
// servers and reports the time per element.
func BenchmarkAgg(b *testing.B) {
	_, m := benchJob(b)
	ctx := context.Background()
	for _, f := range []psf.GetFunc[float64]{
		psf.Sum(0), psf.Asum(0), psf.Nrm2(0), psf.Dot(0, 1),
		psf.Max(0), psf.Min(0), psf.Amax(0), psf.Amin(0),
	} {
		b.Run(f.Name()[len("psf."):], func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := psf.Get(ctx, m, f); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchCols, "ns/elem")
		})
	}
	b.Run("Nnz", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := psf.Get(ctx, m, psf.Nnz(0)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchCols, "ns/elem")
	})
}
