package psf_test

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/psf"
)

// BenchmarkSparse runs a sparse matrix of 10,000,000 non-zeros (row 0) at
// ids drawn uniformly from [0, 2^62), on 2 servers and 1 worker over real
// ZeroMQ on loopback (-short: 100,000). Row 1 holds 1,000,000 entries
// (-short: 10,000), half of them at row 0's ids. The sub-benchmarks
// measure:
//
//   - Insert: filling row 0 with IncrementAt in batches of 100,000 new
//     ids (ns/op is per entry), and the servers' memory per entry: their
//     tables' slots and structs (table-B/entry), and the growth of the
//     process's live heap (heap-B/entry: servers and worker share the
//     process; the worker holds nothing then);
//   - Increment and Get: IncrementAt and GetAt64 of batches of 100,000
//     existing ids in random order (entries/s);
//   - Sum, Nrm2 and Dot(0, 1) computed by the servers, against pulling the
//     rows (GetSparseRow: the servers sort their entries, the worker merges
//     them) and computing on the worker.
func BenchmarkSparse(b *testing.B) {
	nnz, nnz1, batch := 10_000_000, 1_000_000, 100_000
	if testing.Short() {
		nnz, nnz1, batch = 100_000, 10_000, 10_000
	}
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	ids := make([]int64, nnz)
	seen := make(map[int64]struct{}, nnz)
	for i := range ids {
		for {
			k := int64(r.Uint64() >> 2) // [0, 2^62)
			if _, ok := seen[k]; !ok {
				seen[k] = struct{}{}
				ids[i] = k
				break
			}
		}
	}
	seen = nil
	vals := make([]float64, batch)
	for i := range vals {
		vals[i] = r.NormFloat64()
	}
	j := newJob(b, 2, 1, testcluster.Options{Quiet: true})
	m, err := j.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "sbig", Type: psf.Sparse, Rows: 2})
	if err != nil {
		b.Fatal(err)
	}
	// Insert: the first increments of row 0, each of a new id; run once
	// (later calls of the sub-benchmark report the same figures).
	var fill time.Duration
	var heap, entries, bytes int64
	b.Run("Insert", func(b *testing.B) {
		if fill == 0 {
			heap0 := heapInUse()
			start := time.Now()
			for lo := 0; lo < nnz; lo += batch {
				hi := min(lo+batch, nnz)
				if err := m.IncrementAt(ctx, 0, ids[lo:hi], vals[:hi-lo]); err != nil {
					b.Fatal(err)
				}
			}
			fill = time.Since(start)
			heap = heapInUse() - heap0
			for _, s := range j.servers {
				e, by := psf.SparseMemory(s, "sbig")
				entries += e
				bytes += by
			}
		}
		if entries != int64(nnz) {
			b.Fatalf("%d entries stored, want %d", entries, nnz)
		}
		b.ReportMetric(float64(fill.Nanoseconds())/float64(nnz), "ns/op") // an op is an entry here
		b.ReportMetric(float64(nnz)/fill.Seconds(), "entries/s")
		b.ReportMetric(float64(bytes)/float64(entries), "table-B/entry")
		b.ReportMetric(float64(heap)/float64(entries), "heap-B/entry")
	})
	if fill == 0 {
		return // -bench did not select Insert: the rest needs the entries
	}
	row1 := make([]int64, nnz1)
	for i := range row1 {
		if i%2 == 0 {
			row1[i] = ids[i*7%nnz]
		} else {
			row1[i] = -int64(r.Uint64() >> 2)
		}
	}
	v1vals := make([]float64, nnz1)
	for i := range v1vals {
		v1vals[i] = 1 + float64(i%10)
	}
	v1, err := psf.NewSparseVector(row1, v1vals)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.UpdateSparseRow(ctx, 1, v1); err != nil {
		b.Fatal(err)
	}
	perm := r.Perm(nnz)

	batches := func(b *testing.B, op func(cols []int64) error) {
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			lo := i * batch % (nnz - batch + 1)
			cols := make([]int64, batch)
			for k := range cols {
				cols[k] = ids[perm[lo+k]]
			}
			if err := op(cols); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(batch)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	}
	b.Run("Increment", func(b *testing.B) {
		batches(b, func(cols []int64) error { return m.IncrementAt(ctx, 0, cols, vals) })
	})
	b.Run("Get", func(b *testing.B) {
		batches(b, func(cols []int64) error {
			got, err := m.GetAt64(ctx, 0, cols)
			if err == nil && got[0] == 0 {
				b.Fatal("an entry read as 0")
			}
			return err
		})
	})

	server := func(name string, f psf.GetFunc[float64], local func() float64) {
		var onServers, onWorker float64
		b.Run(name+"/server", func(b *testing.B) {
			onServers = wireBytes(b, j, func() float64 {
				v, err := psf.Get(ctx, m, f)
				if err != nil {
					b.Fatal(err)
				}
				return v
			})
		})
		b.Run(name+"/pull", func(b *testing.B) { onWorker = wireBytes(b, j, local) })
		if onServers != 0 && onWorker != 0 && math.Abs(onServers-onWorker) > 1e-9*math.Max(1, math.Abs(onWorker)) {
			b.Errorf("%s: servers %v, worker %v", name, onServers, onWorker)
		}
	}
	pull := func(row int) psf.SparseVector {
		v, err := m.GetSparseRow(ctx, row)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	server("Sum", psf.Sum(0), func() float64 {
		var s float64
		for _, x := range pull(0).Values {
			s += x
		}
		return s
	})
	server("Nrm2", psf.Nrm2(0), func() float64 {
		var s float64
		for _, x := range pull(0).Values {
			s += x * x
		}
		return math.Sqrt(s)
	})
	server("Dot", psf.Dot(0, 1), func() float64 {
		x, y := pull(0), pull(1)
		var s float64
		for i, k := 0, 0; i < len(x.Indices) && k < len(y.Indices); {
			switch {
			case x.Indices[i] < y.Indices[k]:
				i++
			case x.Indices[i] > y.Indices[k]:
				k++
			default:
				s += x.Values[i] * y.Values[k]
				i++
				k++
			}
		}
		return s
	})
}

// heapInUse returns the bytes of live heap objects after a collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
