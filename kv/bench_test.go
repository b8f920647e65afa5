package kv_test

import (
	"fmt"
	"testing"

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
