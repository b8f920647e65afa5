package kv_test

import (
	"slices"
	"testing"

	"github.com/gopslite/pslite/kv"
)

func TestDefaultHandlePushAdds(t *testing.T) {
	h := kv.NewDefaultHandle[float32]()
	keys := []uint64{1, 5, 9}
	h.Push(kv.KVPairs[float32]{Keys: keys, Vals: []float32{1, 2, 3}})
	if h.Len() != 3 {
		t.Fatalf("Len = %d", h.Len())
	}
	h.Push(kv.KVPairs[float32]{Keys: keys, Vals: []float32{10, 20, 30}})
	h.Push(kv.KVPairs[float32]{Keys: []uint64{5}, Vals: []float32{100}})
	res := h.Pull(keys)
	if !slices.Equal(res.Keys, keys) || !slices.Equal(res.Vals, []float32{11, 122, 33}) || res.Lens != nil {
		t.Fatalf("pull %+v, want vals [11 122 33] and no lens", res)
	}
	if g := h.Get(5); !slices.Equal(g, []float32{122}) {
		t.Fatalf("Get(5) = %v", g)
	}
}

func TestDefaultHandleFirstPushStoresCopy(t *testing.T) {
	h := kv.NewDefaultHandle[int64]()
	vals := []int64{4, 5}
	h.Push(kv.KVPairs[int64]{Keys: []uint64{7}, Vals: vals})
	vals[0] = 999 // the store must not alias the request
	if g := h.Get(7); !slices.Equal(g, []int64{4, 5}) {
		t.Fatalf("Get = %v, want [4 5]", g)
	}
	g := h.Get(7)
	g[0] = -1 // nor hand out its own memory
	if g := h.Get(7); !slices.Equal(g, []int64{4, 5}) {
		t.Fatalf("Get after modifying a copy = %v", g)
	}
}

func TestDefaultHandleKPerKey(t *testing.T) {
	h := kv.NewDefaultHandle[float64]()
	keys := []uint64{1, 2}
	h.Push(kv.KVPairs[float64]{Keys: keys, Vals: []float64{1, 2, 3, 4, 5, 6}})
	h.Push(kv.KVPairs[float64]{Keys: keys, Vals: []float64{1, 1, 1, 1, 1, 1}})
	res := h.Pull(keys)
	if !slices.Equal(res.Vals, []float64{2, 3, 4, 5, 6, 7}) || !slices.Equal(res.Lens, []int32{3, 3}) {
		t.Fatalf("pull %+v, want vals [2..7] lens [3 3]", res)
	}
}

func TestDefaultHandleLens(t *testing.T) {
	h := kv.NewDefaultHandle[int32]()
	keys := []uint64{1, 2, 3}
	h.Push(kv.KVPairs[int32]{Keys: keys, Vals: []int32{1, 2, 3, 4, 5, 6}, Lens: []int32{1, 2, 3}})
	h.Push(kv.KVPairs[int32]{Keys: keys, Vals: []int32{10, 10, 10, 10, 10, 10}, Lens: []int32{1, 2, 3}})
	res := h.Pull(keys)
	if !slices.Equal(res.Vals, []int32{11, 12, 13, 14, 15, 16}) || !slices.Equal(res.Lens, []int32{1, 2, 3}) {
		t.Fatalf("pull %+v", res)
	}
	// A push of another length replaces the stored values.
	h.Push(kv.KVPairs[int32]{Keys: []uint64{2, 3}, Vals: []int32{7, 8, 9}, Lens: []int32{1, 2}})
	if g := h.Get(2); !slices.Equal(g, []int32{7}) {
		t.Errorf("Get(2) = %v, want [7]", g)
	}
	if g := h.Get(3); !slices.Equal(g, []int32{8, 9}) {
		t.Errorf("Get(3) = %v, want [8 9]", g)
	}
	// Zero-length entries in lens consume no values.
	h.Push(kv.KVPairs[int32]{Keys: []uint64{4, 5, 6}, Vals: []int32{1, 2}, Lens: []int32{0, 2, 0}})
	if g := h.Get(5); !slices.Equal(g, []int32{1, 2}) {
		t.Errorf("Get(5) = %v, want [1 2]", g)
	}
	res = h.Pull([]uint64{1, 3, 5})
	if !slices.Equal(res.Vals, []int32{11, 8, 9, 1, 2}) || !slices.Equal(res.Lens, []int32{1, 2, 2}) {
		t.Fatalf("pull %+v", res)
	}
}

func TestDefaultHandlePullUnknown(t *testing.T) {
	h := kv.NewDefaultHandle[float32]()
	res := h.Pull([]uint64{3, 4})
	if !slices.Equal(res.Vals, []float32{0, 0}) || res.Lens != nil {
		t.Fatalf("pull of unknown keys %+v, want one zero each and no lens", res)
	}
	if h.Len() != 0 {
		t.Fatalf("pull stored keys: Len = %d", h.Len())
	}
	// Mixed with a multi-value key: lens are returned, unknown key has len 1.
	h.Push(kv.KVPairs[float32]{Keys: []uint64{4}, Vals: []float32{1, 2}, Lens: []int32{2}})
	res = h.Pull([]uint64{3, 4})
	if !slices.Equal(res.Vals, []float32{0, 1, 2}) || !slices.Equal(res.Lens, []int32{1, 2}) {
		t.Fatalf("pull %+v, want vals [0 1 2] lens [1 2]", res)
	}
	if err := res.Check(true); err != nil {
		t.Fatalf("pull result fails Check: %v", err)
	}
}

func TestDefaultHandleLensOnlyWhenNeeded(t *testing.T) {
	h := kv.NewDefaultHandle[uint8]()
	// Lens in the push, but every length 1: the pull returns no lens.
	h.Push(kv.KVPairs[uint8]{Keys: []uint64{1, 2}, Vals: []uint8{5, 6}, Lens: []int32{1, 1}})
	res := h.Pull([]uint64{1, 2, 3})
	if res.Lens != nil || !slices.Equal(res.Vals, []uint8{5, 6, 0}) {
		t.Fatalf("pull %+v, want no lens", res)
	}
	res = h.Pull(nil)
	if len(res.Keys) != 0 || len(res.Vals) != 0 || res.Lens != nil {
		t.Fatalf("empty pull %+v", res)
	}
}

func TestDefaultHandlePushEmpty(t *testing.T) {
	h := kv.NewDefaultHandle[float32]()
	h.Push(kv.KVPairs[float32]{})
	if h.Len() != 0 {
		t.Fatalf("Len = %d", h.Len())
	}
}

func TestDefaultHandleDuplicateKeysInOnePush(t *testing.T) {
	h := kv.NewDefaultHandle[int64]()
	h.Push(kv.KVPairs[int64]{Keys: []uint64{1, 1, 1}, Vals: []int64{1, 2, 3}})
	if g := h.Get(1); !slices.Equal(g, []int64{6}) {
		t.Fatalf("Get(1) = %v, want [6]", g)
	}
}

// A pull that carries lens is answered with lens even when every key holds
// one value; one without gets none then.
func TestDefaultHandleLensWhenAsked(t *testing.T) {
	h := kv.NewDefaultHandle[float32]()
	keys := []uint64{1, 5, 9}
	h.Push(kv.KVPairs[float32]{Keys: keys, Vals: []float32{1, 2, 3}})
	if res := h.PullLens(keys, true); !slices.Equal(res.Lens, []int32{1, 1, 1}) {
		t.Errorf("pull with lens answered lens %v, want [1 1 1]", res.Lens)
	}
	if res := h.PullLens(keys, false); res.Lens != nil {
		t.Errorf("pull without lens answered lens %v", res.Lens)
	}
}
