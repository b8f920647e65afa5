package kv_test

import (
	"fmt"
	"testing"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/postoffice"
)

// BenchmarkDefaultSlicer splits a push of a million sorted keys (one value
// each) over 1, 2 and 8 servers.
func BenchmarkDefaultSlicer(b *testing.B) {
	const n = 1000000
	keys := spreadKeys(n, 0)
	vals := make([]float32, n)
	for _, servers := range []int{1, 2, 8} {
		b.Run(fmt.Sprintf("servers=%d", servers), func(b *testing.B) {
			ranges := postoffice.KeyRanges(servers)
			kvs := kv.KVPairs[float32]{Keys: keys, Vals: vals}
			b.ReportAllocs()
			b.SetBytes(int64(n * 12))
			for i := 0; i < b.N; i++ {
				if _, err := kv.DefaultSlicer(kvs, ranges); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSmallPush pushes one key and waits, in a 1x1 job inside the
// test process: over in-memory transports (the cost of the layers above
// the transport) and over ZeroMQ on loopback.
func BenchmarkSmallPush(b *testing.B) { benchPushes(b, 1) }

// BenchmarkWindowPush pushes one key at a time with 64 requests in flight,
// in a 1x1 job inside the test process (psbench's window measurement):
// over ZeroMQ, responses to a run of requests and the requests sent in
// answer to a run of responses travel together (van.Batcher).
func BenchmarkWindowPush(b *testing.B) { benchPushes(b, 64) }

// benchPushes pushes one key at a time to a server that answers at once,
// with at most window requests in flight, over both transports.
func benchPushes(b *testing.B, window int) {
	for _, mem := range []bool{true, false} {
		b.Run(fmt.Sprintf("mem=%v", mem), func(b *testing.B) {
			c := testcluster.New(b, 1, 1, testcluster.Options{Mem: mem})
			s, err := kv.NewKVServer[float32](c.Servers[0], 0)
			if err != nil {
				b.Fatal(err)
			}
			s.SetRequestHandle(func(meta kv.KVMeta, _ kv.KVPairs[float32], s *kv.KVServer[float32]) {
				s.Response(meta, kv.KVPairs[float32]{})
			})
			w, err := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
			if err != nil {
				b.Fatal(err)
			}
			keys, vals := []uint64{1}, []float32{1}
			ring := make([]int, 0, window)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if len(ring) == window {
					if err := w.Wait(ring[0]); err != nil {
						b.Fatal(err)
					}
					ring = ring[1:]
				}
				ts, err := w.ZPush(keys, vals, nil)
				if err != nil {
					b.Fatal(err)
				}
				ring = append(ring, ts)
			}
			for _, ts := range ring {
				if err := w.Wait(ts); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			c.Finalize(b)
		})
	}
}
