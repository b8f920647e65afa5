package kv_test

import (
	"slices"
	"testing"

	"github.com/gopslite/pslite/kv"
)

// All walks keys with their values, by lens or evenly, and caps each
// key's values so that appending to them leaves the next key's alone.
func TestKVPairsAll(t *testing.T) {
	type kv1 struct {
		k uint64
		v []int32
	}
	walk := func(p kv.KVPairs[int32], stop int) []kv1 {
		var got []kv1
		for k, v := range p.All() {
			got = append(got, kv1{k, v})
			if len(got) == stop {
				break
			}
		}
		return got
	}
	lens := kv.KVPairs[int32]{Keys: []uint64{1, 2, 3}, Vals: []int32{10, 11, 12}, Lens: []int32{2, 0, 1}}
	got := walk(lens, -1)
	want := []kv1{{1, []int32{10, 11}}, {2, []int32{}}, {3, []int32{12}}}
	if !slices.EqualFunc(got, want, func(a, b kv1) bool { return a.k == b.k && slices.Equal(a.v, b.v) }) {
		t.Fatalf("with lens: %v, want %v", got, want)
	}
	_ = append(got[0].v, 99)
	if lens.Vals[2] != 12 {
		t.Fatal("appending to a key's values overwrote the next key's")
	}
	even := kv.KVPairs[int32]{Keys: []uint64{5, 6}, Vals: []int32{1, 2, 3, 4}}
	if got := walk(even, 1); len(got) != 1 || got[0].k != 5 || !slices.Equal(got[0].v, []int32{1, 2}) {
		t.Fatalf("two values a key, stopped after one: %v", got)
	}
	if got := walk(kv.KVPairs[int32]{}, -1); len(got) != 0 {
		t.Fatalf("no keys: %v", got)
	}
}
