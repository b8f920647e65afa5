package ctr

import (
	"math"
	"testing"

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
