package psf

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// testKeys returns n keys drawn from the distributions ids have: small,
// negative, clustered far away, random over all int64, and the extremes.
func testKeys(r *rand.Rand, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		switch r.IntN(6) {
		case 0:
			out[i] = int64(r.IntN(100))
		case 1:
			out[i] = -int64(r.IntN(100))
		case 2:
			out[i] = 1<<40 + int64(r.IntN(1000))
		case 3:
			out[i] = []int64{0, math.MinInt64, math.MaxInt64, -1, 1}[r.IntN(5)]
		default:
			out[i] = int64(r.Uint64())
		}
	}
	return out
}

// checkTable compares t with the map it should hold, and checks its
// invariants: every key findable from its home slot without crossing an
// empty slot, the load within its limits, empty slots holding 0.
func checkTable(t *testing.T, tb *longTable[float64], want map[int64]float64) {
	t.Helper()
	if tb.Len() != len(want) {
		t.Fatalf("Len %d, want %d", tb.Len(), len(want))
	}
	for k, v := range want {
		if got, ok := tb.Get(k); !ok || got != v {
			t.Fatalf("Get(%d) = %v, %v; want %v", k, got, ok, v)
		}
	}
	n := 0
	for k, v := range tb.All {
		n++
		if w, ok := want[k]; !ok || w != v {
			t.Fatalf("All yields %d: %v, want %v (%v)", k, v, w, ok)
		}
	}
	if n != len(want) {
		t.Fatalf("All yields %d entries, want %d", n, len(want))
	}
	c := len(tb.keys)
	for i, k := range tb.keys {
		if k == 0 {
			if tb.vals[i] != 0 {
				t.Fatalf("empty slot %d holds %v", i, tb.vals[i])
			}
			continue
		}
		for j := homeSlot(k, c); j != i; j = (j + 1) % c {
			if tb.keys[j] == 0 {
				t.Fatalf("key %d at slot %d is cut from its home slot by the empty slot %d", k, i, j)
			}
		}
	}
	if c > 0 && (float64(tb.n) > maxLoad*float64(c) || tb.n >= c) {
		t.Fatalf("load %d/%d", tb.n, c)
	}
}

// The table against a map, with inserts, updates and deletes of keys of
// every kind (0 in its side slot, negative ones, the extremes).
func TestLongTable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 30 {
		tb := newLongTable[float64](r.IntN(50))
		want := map[int64]float64{}
		keys := testKeys(r, 20+r.IntN(2000))
		for op := range 6000 {
			k := keys[r.IntN(len(keys))]
			switch r.IntN(4) {
			case 0:
				tb.Delete(k)
				delete(want, k)
			case 1:
				*tb.Ref(k) += 1
				want[k]++
			default:
				v := float64(op + 1)
				tb.Set(k, v)
				want[k] = v
			}
			if op%997 == 0 {
				checkTable(t, tb, want)
			}
		}
		checkTable(t, tb, want)
		c := tb.Clone()
		for k := range want {
			tb.Delete(k)
		}
		checkTable(t, tb, map[int64]float64{})
		checkTable(t, c, want) // the clone did not change
		if round == 0 && len(tb.keys) > 64 {
			t.Errorf("an emptied table keeps %d slots", len(tb.keys))
		}
	}
	var nilTable *longTable[float64]
	if v, ok := nilTable.Get(3); v != 0 || ok || nilTable.Len() != 0 || nilTable.Clone() != nil {
		t.Error("a nil table is not empty")
	}
}

// Memory per entry stays within 32 bytes (plus the fixed part) at every
// size, the load between the limits once grown.
func TestLongTableMemory(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	tb := newLongTable[float64](0)
	worst, sum, samples := 0.0, 0.0, 0
	for n := 1; n <= 200_000; n++ {
		tb.Set(int64(r.Uint64()|1), 1)
		if n >= 1000 {
			per := float64(len(tb.keys)*16) / float64(tb.Len())
			worst = max(worst, per)
			sum += per
			samples++
		}
	}
	if worst > 32.01 {
		t.Errorf("up to %.1f bytes per entry, want at most 32", worst)
	}
	t.Logf("slots: %.1f bytes per entry on average, %.1f at worst; Bytes %d for %d entries", sum/float64(samples), worst, tb.Bytes(), tb.Len())
	if b := newLongTable[float64](1000); len(b.keys)*16 > 32*1000 || b.limit < 1000 {
		t.Errorf("a table for 1000 entries has %d slots and room for %d", len(b.keys), b.limit)
	}
}

// Column blocks are balanced for any distribution of ids.
func TestSparseColBlockBalance(t *testing.T) {
	for _, n := range []int{2, 3, 7} {
		for name, gen := range map[string]func(i int) int64{
			"small":     func(i int) int64 { return int64(i) },
			"negative":  func(i int) int64 { return -int64(i) },
			"strided":   func(i int) int64 { return int64(i) << 32 },
			"clustered": func(i int) int64 { return 1<<62 + int64(i) },
		} {
			counts := make([]int, n)
			const total = 70_000
			for i := range total {
				cb := sparseColBlock(gen(i), n)
				if cb < 0 || cb >= n {
					t.Fatalf("block %d of %d", cb, n)
				}
				counts[cb]++
			}
			for _, c := range counts {
				if math.Abs(float64(c)-total/float64(n)) > 0.03*total/float64(n) {
					t.Errorf("%s ids over %d blocks: %v", name, n, counts)
					break
				}
			}
		}
	}
}

func TestSortEntries(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 2, 100, 1 << 14, 100_000} {
		for _, small := range []bool{false, true} {
			keys := make([]int64, n)
			for i := range keys {
				if small {
					keys[i] = int64(r.IntN(1 << 20)) // high digits all equal
				} else {
					keys[i] = testKeys(r, 1)[0]
				}
			}
			vals := make([]float64, n)
			for i, k := range keys {
				vals[i] = float64(k)
			}
			want := slices.Clone(keys)
			slices.Sort(want)
			sortEntries(keys, vals)
			if !slices.Equal(keys, want) {
				t.Fatalf("n=%d small=%v: not sorted", n, small)
			}
			for i, k := range keys {
				if vals[i] != float64(k) {
					t.Fatalf("n=%d: value of %d moved apart from it", n, k)
				}
			}
		}
	}
}

func TestMergeSparse(t *testing.T) {
	a := SparseVector{Indices: []int64{math.MinInt64, -5, 3}, Values: []float64{1, 2, 3}}
	b := SparseVector{Indices: []int64{-6, 0, math.MaxInt64}, Values: []float64{4, 5, 6}}
	c := SparseVector{Indices: []int64{}, Values: []float64{}}
	got, err := mergeSparse([]SparseVector{a, c, b})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{math.MinInt64, -6, -5, 0, 3, math.MaxInt64}; !slices.Equal(got.Indices, want) || !slices.Equal(got.Values, []float64{1, 4, 2, 5, 3, 6}) {
		t.Errorf("merged %v", got)
	}
	if _, err := mergeSparse([]SparseVector{a, a}); err == nil {
		t.Error("a column in two pieces merged")
	}
}

// SparseVectors round-trip, and hostile encodings fail without panics or
// big allocations.
func TestSparseVectorCodec(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 200 {
		keys := testKeys(r, r.IntN(300))
		slices.Sort(keys)
		keys = slices.Compact(keys)
		v := SparseVector{Indices: keys, Values: make([]float64, len(keys))}
		for i := range v.Values {
			v.Values[i] = r.NormFloat64()
		}
		b, err := encode(SparseVectorCodec, v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode(SparseVectorCodec, b)
		if err != nil || !slices.Equal(got.Indices, v.Indices) || !slices.Equal(got.Values, v.Values) {
			t.Fatalf("round trip of %v: %v, %v", v, got, err)
		}
	}
	// Clustered ids take about a byte each beside their value.
	v := SparseVector{Indices: make([]int64, 1000), Values: make([]float64, 1000)}
	for i := range v.Indices {
		v.Indices[i] = 1<<50 + int64(3*i)
	}
	if b, _ := encode(SparseVectorCodec, v); len(b) > 1000*9+20 {
		t.Errorf("1000 clustered entries take %d bytes", len(b))
	}
	for _, bad := range []SparseVector{
		{Indices: []int64{1, 1}, Values: []float64{1, 2}},
		{Indices: []int64{2, 1}, Values: []float64{1, 2}},
		{Indices: []int64{1}, Values: []float64{1, 2}},
	} {
		if _, err := encode(SparseVectorCodec, bad); err == nil {
			t.Errorf("%v encoded", bad)
		}
		if bad.Validate() == nil {
			t.Errorf("%v is valid", bad)
		}
	}
	for _, b := range [][]byte{
		{2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},                                                       // delta 0: a repeat
		{2, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, // past MaxInt64
		{0xff, 0xff, 0xff, 0xff, 0x0f},
		{1, 2},
	} {
		if v, err := decode(SparseVectorCodec, b); err == nil {
			t.Errorf("% x decoded as %v", b, v)
		}
	}
	if _, err := NewSparseVector([]int64{3, 1, 3}, []float64{1, 2, 3}); err == nil {
		t.Error("NewSparseVector took a repeated index")
	}
	if v, err := NewSparseVector([]int64{3, -1, 2}, []float64{1, 2, 3}); err != nil || !slices.Equal(v.Indices, []int64{-1, 2, 3}) ||
		!slices.Equal(v.Values, []float64{2, 3, 1}) || v.Get(2) != 3 || v.Get(5) != 0 {
		t.Errorf("NewSparseVector: %v, %v", v, err)
	}
}

// slotEntries encodes t's used slots as encodeTables does: slot, column
// and value, in slot order.
func slotEntries(t *longTable[float64]) []byte {
	var b []byte
	for i, k := range t.keys {
		if k != 0 {
			b = binary.LittleEndian.AppendUint64(b, uint64(i))
			b = binary.LittleEndian.AppendUint64(b, uint64(k))
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(t.vals[i]))
		}
	}
	return b
}

// probeRunsFull is checkSlots the slow way, on the slots themselves:
// slots within c, increasing, columns not 0, and every slot from a
// column's home to its own used.
func probeRunsFull(ents []byte, c int) bool {
	keys := make([]int64, c)
	prev := -1
	for j := 0; j < len(ents)/24; j++ {
		s := binary.LittleEndian.Uint64(ents[24*j:])
		k := int64(binary.LittleEndian.Uint64(ents[24*j+8:]))
		if s >= uint64(c) || int(s) <= prev || k == 0 {
			return false
		}
		prev = int(s)
		keys[s] = k
	}
	for s, k := range keys {
		if k == 0 {
			continue
		}
		for i := homeSlot(k, c); i != s; i = (i + 1) % c {
			if keys[i] == 0 {
				return false
			}
		}
	}
	return true
}

// TestCheckSlots checks that checkSlots accepts every table a server can
// hold (grown, presized, after deletes, with runs that wrap around) and
// refuses the same damaged ones as a check on the slots themselves.
func TestCheckSlots(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	refused := 0
	for round := range 3000 {
		var tb *longTable[float64]
		n := r.IntN(40)
		if round%3 == 0 {
			tb = newLongTable[float64](n + r.IntN(40))
		} else {
			tb = newLongTable[float64](0)
		}
		for _, k := range testKeys(r, n) {
			tb.Set(k, r.Float64())
		}
		for _, k := range testKeys(r, r.IntN(20)) {
			tb.Delete(k)
		}
		c := len(tb.keys)
		ents := slotEntries(tb)
		if err := checkSlots(ents, c); err != nil {
			t.Fatalf("round %d: a table of capacity %d with %d entries: %v", round, c, tb.n, err)
		}
		if len(ents) == 0 {
			continue
		}
		// One damaged field: a slot, a column, or the capacity.
		switch j := r.IntN(len(ents) / 24); r.IntN(3) {
		case 0:
			binary.LittleEndian.PutUint64(ents[24*j:], uint64(r.IntN(c+2)))
		case 1:
			binary.LittleEndian.PutUint64(ents[24*j+8:], uint64(testKeys(r, 1)[0]))
		default:
			c = max(1, c+r.IntN(2*c+1)-c)
		}
		want := probeRunsFull(ents, c)
		if err := checkSlots(ents, c); (err == nil) != want {
			t.Fatalf("round %d: capacity %d: checkSlots says %v, the slots say valid=%v", round, c, err, want)
		}
		if !want {
			refused++
		}
	}
	if refused < 1000 {
		t.Fatalf("only %d damaged tables of 3000 refused", refused)
	}
}
