package ctr

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/postoffice"

	"github.com/gopslite/pslite/kv"
	"github.com/rs/zerolog"
)

// TestXflowApp checks the xflow-compatible server's apps against xflow's
// handle, computed here by hand: FTRL-proximal in float32 with xflow's
// parameters, w starting at 0 with its values per key set by the pushes,
// v starting at a draw that every pull of the key repeats, z and n at 0.
func TestXflowApp(t *testing.T) {
	cfg, err := parseFlags([]string{"-mode=xflow-server"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Alpha != xflowAlpha || cfg.Beta != xflowBeta || cfg.L1 != xflowLambda1 || cfg.L2 != xflowLambda2 {
		t.Fatalf("xflow-server's FTRL settings %g %g %g %g, want xflow's", cfg.Alpha, cfg.Beta, cfg.L1, cfg.L2)
	}
	push := kv.KVMeta{Push: true}
	pull := kv.KVMeta{Pull: true}

	// ftrl is xflow's update of one value.
	ftrl := func(w, n, z, g float32) (float32, float32, float32) {
		a, b, l1, l2 := float32(xflowAlpha), float32(xflowBeta), float32(xflowLambda1), float32(xflowLambda2)
		nn := n + g*g
		z += g - (sqrt32(nn)-sqrt32(n))/a*w
		if abs32(z) <= l1 {
			return 0, nn, z
		}
		r := z - l1
		if z < 0 {
			r = z + l1
		}
		return r / -((b+sqrt32(nn))/a + l2), nn, z
	}

	w := newXflowApp(false, cfg, zerolog.Nop())
	res, err := w.apply(pull, kv.KVPairs[float32]{Keys: []uint64{7, 1 << 60}})
	if err != nil || len(res.Vals) != 2 || res.Vals[0] != 0 || res.Vals[1] != 0 {
		t.Fatalf("pull of unseen w keys: %v %v", res.Vals, err)
	}
	if len(w.keys) != 0 {
		t.Errorf("a pull stored %d keys", len(w.keys))
	}
	var ew, en, ez float32
	for _, g := range []float32{0.5, -0.25, 0.125} {
		if _, err := w.apply(push, kv.KVPairs[float32]{Keys: []uint64{7}, Vals: []float32{g}}); err != nil {
			t.Fatal(err)
		}
		ew, en, ez = ftrl(ew, en, ez, g)
	}
	res, _ = w.apply(pull, kv.KVPairs[float32]{Keys: []uint64{7}})
	if res.Vals[0] != ew || ew == 0 {
		t.Errorf("w after three pushes %v, xflow's formula gives %v", res.Vals[0], ew)
	}

	v := newXflowApp(true, cfg, zerolog.Nop())
	first, _ := v.apply(pull, kv.KVPairs[float32]{Keys: []uint64{3, 9}})
	again, _ := v.apply(pull, kv.KVPairs[float32]{Keys: []uint64{3, 9}})
	if len(first.Vals) != 2*xflowVDim {
		t.Fatalf("%d values for 2 keys", len(first.Vals))
	}
	var sq float64
	for i := range first.Vals {
		if first.Vals[i] != again.Vals[i] {
			t.Fatalf("value %d changed between pulls: %v, %v", i, first.Vals[i], again.Vals[i])
		}
		sq += float64(first.Vals[i]) * float64(first.Vals[i])
	}
	if rms := math.Sqrt(sq / float64(len(first.Vals))); rms < 0.002 || rms > 0.03 {
		t.Errorf("v starts with rms %g, xflow draws N(0, 0.01²)", rms)
	}
	g := make([]float32, xflowVDim)
	for j := range g {
		g[j] = float32(j) / 10
	}
	if _, err := v.apply(push, kv.KVPairs[float32]{Keys: []uint64{3}, Vals: g}); err != nil {
		t.Fatal(err)
	}
	res, _ = v.apply(pull, kv.KVPairs[float32]{Keys: []uint64{3, 9}})
	for j := 0; j < xflowVDim; j++ {
		want, _, _ := ftrl(first.Vals[j], 0, 0, g[j])
		if res.Vals[j] != want {
			t.Errorf("v[3][%d] = %v after a push, xflow's formula gives %v", j, res.Vals[j], want)
		}
		if res.Vals[xflowVDim+j] != first.Vals[xflowVDim+j] {
			t.Errorf("v[9][%d] changed without a push", j)
		}
	}
	// A push of the wrong length changes nothing and is counted.
	if _, err := v.apply(push, kv.KVPairs[float32]{Keys: []uint64{3}, Vals: g[:3]}); err == nil {
		t.Error("a push of 3 values per key on v: no error")
	}
	if v.stats.Bad != 1 {
		t.Errorf("%d bad requests counted", v.stats.Bad)
	}
}

// TestXflowServerJob drives the xflow-compatible servers as xflow's
// workers do, through a job (2 servers, in process): w on app 0 with one
// value per key, v on app 1 (customer 1) with ten, keys spread over both
// servers' ranges, pushes answered, pulls in key order.
func TestXflowServerJob(t *testing.T) {
	cfg, err := parseFlags([]string{"-mode=xflow-server"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	apps := make([][]*xflowApp, 2)
	for i, p := range c.Servers {
		if apps[i], err = installXflow(p, cfg); err != nil {
			t.Fatal(err)
		}
	}
	p := c.Workers[0]
	kw, err := kv.NewKVWorker[float32](p, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	kvv, err := kv.NewKVWorker[float32](p, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	keys := []uint64{3, 1 << 40, 1<<63 + 7, math.MaxUint64 - 1}
	pull := func(w *kv.KVWorker[float32]) []float32 {
		var vals []float32
		ts, err := w.Pull(keys, &vals, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Wait(ts); err != nil {
			t.Fatal(err)
		}
		return vals
	}
	push := func(w *kv.KVWorker[float32], vals []float32) {
		ts, err := w.Push(keys, vals, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Wait(ts); err != nil {
			t.Fatal(err)
		}
	}
	v0 := pull(kvv)
	if len(v0) != len(keys)*xflowVDim {
		t.Fatalf("%d values of v for %d keys", len(v0), len(keys))
	}
	for i, k := range keys {
		for j := 0; j < xflowVDim; j++ {
			if want := float32(initFactor(k*xflowVDim+uint64(j), cfg.Seed, xflowVStd)); v0[i*xflowVDim+j] != want {
				t.Fatalf("v[%d][%d] starts at %v, want %v", k, j, v0[i*xflowVDim+j], want)
			}
		}
	}
	g := make([]float32, len(keys)*xflowVDim)
	for i := range g {
		g[i] = 0.1
	}
	push(kvv, g)
	push(kw, []float32{0.5, 0.5, 0.5, 0.5})
	ref := newXflowApp(true, cfg, zerolog.Nop())
	if _, err := ref.apply(kv.KVMeta{Push: true}, kv.KVPairs[float32]{Keys: keys, Vals: g}); err != nil {
		t.Fatal(err)
	}
	want, _ := ref.apply(kv.KVMeta{Pull: true}, kv.KVPairs[float32]{Keys: keys})
	if got := pull(kvv); !slices.Equal(got, want.Vals) {
		t.Errorf("v after a push: %v, want %v", got, want.Vals)
	}
	if w := pull(kw); len(w) != len(keys) || w[0] == 0 || w[0] != w[3] {
		t.Errorf("w after a push of 0.5 each: %v", w)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all := append(append([]*postoffice.Postoffice{c.Scheduler}, c.Servers...), c.Workers...)
	if err := testcluster.Each(all, func(p *postoffice.Postoffice) error { return p.Finalize(ctx, 0, true) }); err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, a := range apps {
		held += len(a[1].keys)
		if a[0].stats.Bad+a[1].stats.Bad != 0 {
			t.Errorf("bad requests: %+v %+v", a[0].stats, a[1].stats)
		}
	}
	if held != len(keys) {
		t.Errorf("the servers hold %d v keys, want %d (one per key pushed)", held, len(keys))
	}
}
