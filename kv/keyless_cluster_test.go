package kv_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/postoffice"
)

// copyingHandle answers like DefaultHandle, but with a copy of the keys: an
// answer with keys of its own, which must carry them.
func copyingHandle(h *kv.DefaultHandle[float32]) kv.ReqHandle[float32] {
	return func(meta kv.KVMeta, data kv.KVPairs[float32], s *kv.KVServer[float32]) {
		var res kv.KVPairs[float32]
		if meta.Push {
			h.Push(data)
		}
		if meta.Pull {
			res = h.PullLens(data.Keys, len(data.Lens) > 0)
			res.Keys = slices.Clone(res.Keys)
		}
		if err := s.Response(meta, res); err != nil {
			panic(err) // a test handle: the answer is well formed
		}
	}
}

// TestPullAnswersLeaveKeysOut: a Go worker's pulls and push-pulls are
// answered without their keys by DefaultHandle (the worker keeps the keys
// it asked for), and with them by a handle that answers with keys of its
// own; every value is exact either way, with and without lens, below and
// above the sizes at which the transports lend frames (512 KiB: 65,536
// keys, 131,072 float32 values a server), and the keys' bytes are what the
// worker no longer receives.
func TestPullAnswersLeaveKeysOut(t *testing.T) {
	for _, van := range testcluster.Vans() {
		for _, n := range []int{3, 100_000, 200_000, 600_000} {
			for _, withLens := range []bool{false, true} {
				if (van != "zmtp" && n > 200_000) || (withLens && n > 100_000 && n != 600_000) {
					continue // the default transport takes the large rows
				}
				t.Run(fmt.Sprintf("%s/keys=%d/lens=%v", van, n, withLens), func(t *testing.T) {
					keylessExact(t, van, n, withLens)
				})
			}
		}
	}
}

func keylessExact(t *testing.T, van string, n int, withLens bool) {
	c := testcluster.New(t, 2, 1, testcluster.Options{Van: van,
		Tweak: func(c *postoffice.Config) { c.MetricsAddr = "127.0.0.1:0" }})
	for _, p := range c.Servers {
		for app, keyless := range []bool{true, false} {
			s, err := kv.NewKVServer[float32](p, app)
			if err != nil {
				t.Fatal(err)
			}
			s.LendRequests(true)
			h := kv.NewDefaultHandle[float32]()
			handle := h.Handle
			if !keyless {
				handle = copyingHandle(h)
			}
			if err := s.SetRequestHandle(handle); err != nil {
				t.Fatal(err)
			}
		}
	}
	keys := spreadKeys(n, 3)
	var lens []int32
	var vals []float32
	for i := range keys {
		l := 1
		if withLens {
			l = i % 3 // includes keys of no values, which read back as one zero
			lens = append(lens, int32(l))
		}
		for j := range l {
			vals = append(vals, float32(i%1009)+float32(j)/4)
		}
	}
	// What a pull reads back: each key's values, one zero for a key of none.
	var want []float32
	var wantLens []int32
	for i, at := 0, 0; i < len(keys); i++ {
		l := 1
		if withLens {
			l = int(lens[i])
		}
		if l == 0 {
			want = append(want, 0)
			wantLens = append(wantLens, 1)
			continue
		}
		want = append(want, vals[at:at+l]...)
		wantLens = append(wantLens, int32(l))
		at += l
	}
	received := func() float64 {
		return c.Workers[0].Metrics().Value("pslite_bytes_received_total", map[string]string{"peer": "server"})
	}
	var got [2]float64 // bytes received by the pulls of app 0 (keyless) and app 1
	for app := range 2 {
		w, err := kv.NewKVWorker[float32](c.Workers[0], app, app)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Wait(must(w.Push(keys, vals, lens))); err != nil {
			t.Fatal(err)
		}
		var out []float32
		var outLens []int32
		var lensDest *[]int32
		if withLens {
			lensDest = &outLens
		}
		before := received()
		if err := w.Wait(must(w.Pull(keys, &out, lensDest))); err != nil {
			t.Fatal(err)
		}
		got[app] = received() - before
		checkPulled(t, fmt.Sprintf("app %d pull", app), out, want, outLens, wantLens, withLens)

		// A push-pull adds the values once more and reads the sums (its
		// lens go both ways).
		out, outLens = nil, slices.Clone(lens)
		if err := w.Wait(must(w.PushPull(keys, vals, &out, lensDest))); err != nil {
			t.Fatal(err)
		}
		twice := slices.Clone(want)
		for i, at, j := 0, 0, 0; i < len(keys); i++ {
			l := 1
			if withLens {
				l = int(lens[i])
			}
			if l == 0 {
				j++
				continue
			}
			for k := range l {
				twice[j+k] = 2 * vals[at+k]
			}
			at += l
			j += l
		}
		checkPulled(t, fmt.Sprintf("app %d push-pull", app), out, twice, outLens, wantLens, withLens)
	}
	// The keyless answers carry everything but the keys (8 bytes each) and
	// a few bytes of meta.
	if saved := got[1] - got[0]; saved < float64(8*n-64) || saved > float64(8*n+64) {
		t.Errorf("pulls answered without keys received %.0f bytes, with keys %.0f: %.0f fewer, want %d (the keys) within 64", got[0], got[1], saved, 8*n)
	}
	c.Finalize(t)
}

func must(ts int, err error) int {
	if err != nil {
		panic(err)
	}
	return ts
}

func checkPulled(t *testing.T, what string, got, want []float32, gotLens, wantLens []int32, withLens bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: value %d is %v, want %v", what, i, got[i], want[i])
		}
	}
	if withLens && !slices.Equal(gotLens, wantLens) {
		t.Fatalf("%s: lens differ", what)
	}
}
