package kv_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// refSlice is the naive reference: every key goes to the range that
// Contains it, with its values.
func refSlice[V message.Value](t *testing.T, kvs kv.KVPairs[V], ranges []postoffice.Range) []kv.KVPairs[V] {
	t.Helper()
	parts := make([]kv.KVPairs[V], len(ranges))
	k := 0
	if len(kvs.Lens) == 0 && len(kvs.Keys) > 0 {
		k = len(kvs.Vals) / len(kvs.Keys)
	}
	off := 0
	for i, key := range kvs.Keys {
		n := k
		if len(kvs.Lens) > 0 {
			n = int(kvs.Lens[i])
		}
		r := -1
		for j, rg := range ranges {
			if rg.Contains(key) {
				r = j
				break
			}
		}
		if r < 0 {
			t.Fatalf("key %d in no range", key)
		}
		p := &parts[r]
		p.Keys = append(p.Keys, key)
		p.Priority = kvs.Priority
		if len(kvs.Lens) > 0 {
			p.Lens = append(p.Lens, kvs.Lens[i])
		}
		if len(kvs.Vals) > 0 {
			p.Vals = append(p.Vals, kvs.Vals[off:off+n]...)
		}
		off += n
	}
	return parts
}

func equalParts[V message.Value](t *testing.T, got, want []kv.KVPairs[V]) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d parts, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if !slices.Equal(g.Keys, w.Keys) || !slices.Equal(g.Vals, w.Vals) || !slices.Equal(g.Lens, w.Lens) {
			t.Fatalf("part %d:\n got keys %v vals %v lens %v\nwant keys %v vals %v lens %v",
				i, g.Keys, g.Vals, g.Lens, w.Keys, w.Vals, w.Lens)
		}
		if len(w.Keys) > 0 && g.Priority != w.Priority {
			t.Fatalf("part %d: priority %d, want %d", i, g.Priority, w.Priority)
		}
		if len(g.Keys) == 0 && (len(g.Vals) != 0 || len(g.Lens) != 0) {
			t.Fatalf("part %d: no keys but %d vals, %d lens", i, len(g.Vals), len(g.Lens))
		}
	}
}

func slice[V message.Value](t *testing.T, kvs kv.KVPairs[V], ranges []postoffice.Range) []kv.KVPairs[V] {
	t.Helper()
	if err := kvs.Check(len(kvs.Vals) > 0); err != nil {
		t.Fatalf("test input fails Check: %v", err)
	}
	parts, err := kv.DefaultSlicer(kvs, ranges)
	if err != nil {
		t.Fatalf("DefaultSlicer: %v", err)
	}
	equalParts(t, parts, refSlice(t, kvs, ranges))
	return parts
}

func TestSlicerSpread(t *testing.T) {
	for n := 1; n <= 4; n++ {
		ranges := postoffice.KeyRanges(n)
		var keys []uint64
		for _, r := range ranges {
			keys = append(keys, r.Begin, r.Begin+1, r.Begin+r.Size()/2)
		}
		keys = append(keys, message.MaxKey-1, message.MaxKey)
		slices.Sort(keys)
		vals := make([]float32, len(keys))
		for i := range vals {
			vals[i] = float32(i)
		}
		parts := slice(t, kv.KVPairs[float32]{Keys: keys, Vals: vals, Priority: 3}, ranges)
		for i, p := range parts {
			for _, k := range p.Keys {
				if !ranges[i].Contains(k) {
					t.Errorf("n=%d: key %d sent to range %d %v", n, k, i, ranges[i])
				}
			}
			if p.Priority != 3 {
				t.Errorf("n=%d: part %d priority %d", n, i, p.Priority)
			}
		}
		lastKeys := parts[n-1].Keys
		if lastKeys[len(lastKeys)-1] != message.MaxKey {
			t.Errorf("n=%d: MaxKey not in the last part", n)
		}
	}
}

func TestSlicerBoundaries(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		ranges := postoffice.KeyRanges(n)
		var keys []uint64
		for _, r := range ranges[1:] {
			keys = append(keys, r.Begin-1, r.Begin) // just below and exactly on each boundary
		}
		vals := make([]int64, len(keys))
		for i := range vals {
			vals[i] = int64(i + 1)
		}
		parts := slice(t, kv.KVPairs[int64]{Keys: keys, Vals: vals}, ranges)
		for i := 1; i < n; i++ {
			b := ranges[i].Begin
			if !slices.Contains(parts[i-1].Keys, b-1) {
				t.Errorf("n=%d: key %d (boundary-1) not in part %d", n, b-1, i-1)
			}
			if !slices.Contains(parts[i].Keys, b) {
				t.Errorf("n=%d: boundary key %d not in part %d", n, b, i)
			}
		}
	}
}

func TestSlicerMaxKeyOnly(t *testing.T) {
	for n := 1; n <= 4; n++ {
		parts := slice(t, kv.KVPairs[float64]{Keys: []uint64{message.MaxKey}, Vals: []float64{7}}, postoffice.KeyRanges(n))
		for i, p := range parts {
			if (i == n-1) != (len(p.Keys) == 1) {
				t.Errorf("n=%d: part %d keys %v", n, i, p.Keys)
			}
		}
	}
}

func TestSlicerEmpty(t *testing.T) {
	for n := 0; n <= 4; n++ {
		parts, err := kv.DefaultSlicer(kv.KVPairs[float32]{}, postoffice.KeyRanges(n))
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if len(parts) != n {
			t.Fatalf("n=%d: %d parts", n, len(parts))
		}
		for i, p := range parts {
			if len(p.Keys) != 0 || len(p.Vals) != 0 || len(p.Lens) != 0 {
				t.Errorf("n=%d: part %d not empty: %+v", n, i, p)
			}
		}
	}
}

func TestSlicerNoServers(t *testing.T) {
	if _, err := kv.DefaultSlicer(kv.KVPairs[float32]{Keys: []uint64{1}, Vals: []float32{1}}, nil); err == nil {
		t.Fatal("slicing keys over no ranges succeeded")
	}
}

func TestSlicerKeyBelowRanges(t *testing.T) {
	ranges := []postoffice.Range{{Begin: 100, End: 200}, {Begin: 200, End: 300, Last: true}}
	if _, err := kv.DefaultSlicer(kv.KVPairs[float32]{Keys: []uint64{5, 150}}, ranges); err == nil {
		t.Fatal("key below every range accepted")
	}
}

func TestSlicerUnsorted(t *testing.T) {
	for _, keys := range [][]uint64{{2, 1}, {1, 5, 3}, {0, message.MaxKey, 0}} {
		vals := make([]float32, len(keys))
		_, err := kv.DefaultSlicer(kv.KVPairs[float32]{Keys: keys, Vals: vals}, postoffice.KeyRanges(2))
		if !errors.Is(err, kv.ErrUnsortedKeys) {
			t.Errorf("keys %v: err %v, want ErrUnsortedKeys", keys, err)
		}
	}
	// Equal neighbours are sorted.
	slice(t, kv.KVPairs[float32]{Keys: []uint64{1, 1, 2}, Vals: []float32{1, 2, 3}}, postoffice.KeyRanges(2))
}

func TestSlicerLens(t *testing.T) {
	ranges := postoffice.KeyRanges(3)
	b1, b2 := ranges[1].Begin, ranges[2].Begin
	kvs := kv.KVPairs[int32]{
		Keys: []uint64{0, 5, b1 - 1, b1, b1 + 1, b2, message.MaxKey},
		Lens: []int32{2, 0, 3, 1, 0, 0, 4},
	}
	for i, l := range kvs.Lens {
		for j := range l {
			kvs.Vals = append(kvs.Vals, int32(100*i+int(j)))
		}
	}
	parts := slice(t, kvs, ranges)
	if want := []int32{0, 1, 200, 201, 202}; !slices.Equal(parts[0].Vals, want) {
		t.Errorf("part 0 vals %v, want %v", parts[0].Vals, want)
	}
	if want := []int32{300}; !slices.Equal(parts[1].Vals, want) {
		t.Errorf("part 1 vals %v, want %v", parts[1].Vals, want)
	}
	if want := []int32{600, 601, 602, 603}; !slices.Equal(parts[2].Vals, want) {
		t.Errorf("part 2 vals %v, want %v", parts[2].Vals, want)
	}
	// Lens with every length zero: no values at all.
	slice(t, kv.KVPairs[int32]{Keys: []uint64{1, b1, b2}, Lens: []int32{0, 0, 0}}, ranges)
}

func TestSlicerKValuesPerKey(t *testing.T) {
	ranges := postoffice.KeyRanges(4)
	keys := []uint64{1, ranges[1].Begin, ranges[2].Begin + 9, message.MaxKey}
	for _, k := range []int{1, 2, 5} {
		vals := make([]float64, k*len(keys))
		for i := range vals {
			vals[i] = float64(i)
		}
		parts := slice(t, kv.KVPairs[float64]{Keys: keys, Vals: vals}, ranges)
		for i, p := range parts {
			if len(p.Vals) != k || p.Vals[0] != float64(i*k) {
				t.Errorf("k=%d: part %d vals %v", k, i, p.Vals)
			}
		}
	}
}

func TestSlicerPull(t *testing.T) {
	ranges := postoffice.KeyRanges(3)
	keys := []uint64{1, 2, ranges[1].Begin, message.MaxKey}
	parts := slice(t, kv.KVPairs[float32]{Keys: keys}, ranges)
	for i, p := range parts {
		if len(p.Vals) != 0 {
			t.Errorf("pull part %d has vals %v", i, p.Vals)
		}
	}
	// A pull with lens but no values keeps the lens.
	parts = slice(t, kv.KVPairs[float32]{Keys: keys, Lens: []int32{1, 2, 3, 4}}, ranges)
	if !slices.Equal(parts[0].Lens, []int32{1, 2}) || !slices.Equal(parts[2].Lens, []int32{4}) {
		t.Errorf("pull lens %v %v %v", parts[0].Lens, parts[1].Lens, parts[2].Lens)
	}
}

func TestSlicerSharesMemory(t *testing.T) {
	ranges := postoffice.KeyRanges(2)
	kvs := kv.KVPairs[float32]{
		Keys: []uint64{1, 2, ranges[1].Begin, ranges[1].Begin + 1},
		Vals: []float32{1, 2, 3, 4, 5, 6, 7, 8},
		Lens: []int32{2, 2, 2, 2},
	}
	parts, err := kv.DefaultSlicer(kvs, ranges)
	if err != nil {
		t.Fatal(err)
	}
	same := func(name string, a, b unsafe.Pointer) {
		if a != b {
			t.Errorf("%s is a copy, want it to share memory with the input", name)
		}
	}
	same("part 0 keys", unsafe.Pointer(&parts[0].Keys[0]), unsafe.Pointer(&kvs.Keys[0]))
	same("part 1 keys", unsafe.Pointer(&parts[1].Keys[0]), unsafe.Pointer(&kvs.Keys[2]))
	same("part 0 vals", unsafe.Pointer(&parts[0].Vals[0]), unsafe.Pointer(&kvs.Vals[0]))
	same("part 1 vals", unsafe.Pointer(&parts[1].Vals[0]), unsafe.Pointer(&kvs.Vals[4]))
	same("part 1 lens", unsafe.Pointer(&parts[1].Lens[0]), unsafe.Pointer(&kvs.Lens[2]))
	parts[1].Vals[1] = 99
	if kvs.Vals[5] != 99 {
		t.Error("writing a part's value did not change the input")
	}
}

func TestSlicerRandomAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	for iter := 0; iter < 2000; iter++ {
		n := 1 + rng.IntN(8)
		ranges := postoffice.KeyRanges(n)
		nkeys := rng.IntN(40)
		keys := make([]uint64, nkeys)
		for i := range keys {
			switch rng.IntN(4) {
			case 0: // on or next to a boundary
				b := ranges[rng.IntN(n)].Begin
				keys[i] = b + uint64(rng.IntN(3)) - 1
			case 1:
				keys[i] = message.MaxKey - uint64(rng.IntN(3))
			case 2:
				keys[i] = uint64(rng.IntN(100))
			default:
				keys[i] = rng.Uint64()
			}
		}
		slices.Sort(keys)
		kvs := kv.KVPairs[int32]{Keys: keys, Priority: rng.IntN(5)}
		switch rng.IntN(4) {
		case 0: // pull, no values
		case 1: // k values per key
			k := 1 + rng.IntN(3)
			kvs.Vals = make([]int32, k*nkeys)
		case 2: // lens with values
			kvs.Lens = make([]int32, nkeys)
			total := 0
			for i := range kvs.Lens {
				kvs.Lens[i] = int32(rng.IntN(4))
				total += int(kvs.Lens[i])
			}
			kvs.Vals = make([]int32, total)
		case 3: // lens without values (pull with lens)
			kvs.Lens = make([]int32, nkeys)
			for i := range kvs.Lens {
				kvs.Lens[i] = int32(rng.IntN(4))
			}
		}
		for i := range kvs.Vals {
			kvs.Vals[i] = int32(i)
		}
		parts, err := kv.DefaultSlicer(kvs, ranges)
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		want := refSlice(t, kvs, ranges)
		if len(parts) != len(want) {
			t.Fatalf("iter %d: %d parts, want %d", iter, len(parts), len(want))
		}
		for i := range want {
			g, w := parts[i], want[i]
			if !slices.Equal(g.Keys, w.Keys) || !slices.Equal(g.Vals, w.Vals) || !slices.Equal(g.Lens, w.Lens) ||
				(len(w.Keys) > 0 && g.Priority != w.Priority) {
				t.Fatalf("iter %d (n=%d, keys %v, lens %v): part %d\n got %+v\nwant %+v", iter, n, keys, kvs.Lens, i, g, w)
			}
		}
	}
}

func TestCheck(t *testing.T) {
	type kvp = kv.KVPairs[float32]
	ok := []struct {
		name     string
		kvs      kvp
		withVals bool
	}{
		{"empty", kvp{}, true},
		{"empty pull", kvp{}, false},
		{"one per key", kvp{Keys: []uint64{1, 2}, Vals: []float32{1, 2}}, true},
		{"three per key", kvp{Keys: []uint64{1, 2}, Vals: make([]float32, 6)}, true},
		{"pull ignores values", kvp{Keys: []uint64{1, 2}, Vals: make([]float32, 3)}, false},
		{"lens", kvp{Keys: []uint64{1, 2, 3}, Vals: make([]float32, 5), Lens: []int32{2, 0, 3}}, true},
		{"lens all zero", kvp{Keys: []uint64{1, 2}, Lens: []int32{0, 0}}, true},
		{"pull lens ignores values", kvp{Keys: []uint64{1}, Vals: make([]float32, 9), Lens: []int32{-4}}, false},
	}
	for _, c := range ok {
		if err := c.kvs.Check(c.withVals); err != nil {
			t.Errorf("%s: Check(%t) = %v, want nil", c.name, c.withVals, err)
		}
	}
	bad := []struct {
		name     string
		kvs      kvp
		withVals bool
		mention  string
	}{
		{"values without keys", kvp{Vals: []float32{1}}, true, "without keys"},
		{"keys without values", kvp{Keys: []uint64{1, 2}}, true, "no values"},
		{"not a multiple", kvp{Keys: []uint64{1, 2}, Vals: make([]float32, 3)}, true, "not a multiple"},
		{"fewer lens than keys", kvp{Keys: []uint64{1, 2}, Vals: make([]float32, 2), Lens: []int32{2}}, true, "lens"},
		{"more lens than keys", kvp{Keys: []uint64{1}, Vals: make([]float32, 2), Lens: []int32{1, 1}}, true, "lens"},
		{"lens count checked for pulls too", kvp{Keys: []uint64{1, 2}, Lens: []int32{1}}, false, "lens"},
		{"lens without keys", kvp{Lens: []int32{0}}, true, "lens"},
		{"negative length", kvp{Keys: []uint64{1, 2}, Vals: make([]float32, 1), Lens: []int32{2, -1}}, true, "negative"},
		{"lens sum too small", kvp{Keys: []uint64{1, 2}, Vals: make([]float32, 4), Lens: []int32{1, 2}}, true, "sum"},
		{"lens sum too large", kvp{Keys: []uint64{1, 2}, Vals: make([]float32, 2), Lens: []int32{1, 2}}, true, "sum"},
		{"lens sum does not overflow", kvp{Keys: []uint64{1, 2}, Vals: make([]float32, 2), Lens: []int32{1 << 30, 1 << 30}}, true, "sum"},
	}
	for _, c := range bad {
		err := c.kvs.Check(c.withVals)
		if err == nil {
			t.Errorf("%s: Check(%t) = nil, want an error", c.name, c.withVals)
			continue
		}
		if !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: error %q does not mention %q", c.name, err, c.mention)
		}
	}
}
