package kv

import "testing"

// unsortedAt finds the first inversion wherever it lies, in and past the
// eight-pair blocks, and passes sorted keys with equal neighbours.
func TestUnsortedAtFindsTheFirstInversion(t *testing.T) {
	for n := 0; n <= 40; n++ {
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = uint64(10*(i/2) + 10) // equal neighbours
		}
		if got := unsortedAt(keys); got != 0 {
			t.Fatalf("n=%d sorted: %d", n, got)
		}
		for at := 1; at < n; at++ {
			bad := append([]uint64(nil), keys...)
			bad[at] = bad[at-1] - 1 // below its left neighbour
			if at+5 < n {
				bad[at+5] = 0 // a later inversion too
			}
			if got := unsortedAt(bad); got != at {
				t.Fatalf("n=%d, inversion at %d: got %d", n, at, got)
			}
		}
	}
}
