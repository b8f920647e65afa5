package ctr

import (
	"bytes"
	"fmt"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"io"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// randomFieldBatch returns a batch of rows over nf features with values and
// fields (views 0..views-1, some rows missing some views), and random w
// (with a bias) and v for fc.
func randomFieldBatch(t *testing.T, r *rand.Rand, fc Factors, rows, nf int, ones bool) (*Batch, Weights, []float32, []float32) {
	t.Helper()
	v := NewVocab()
	d := newDataset(v)
	for i := 0; i < nf; i++ {
		v.index(uint64(i + 1))
	}
	for i := 0; i < rows; i++ {
		var idx []int32
		var val []float32
		var fld []int32
		for j := 0; j < 1+r.IntN(6); j++ {
			idx = append(idx, int32(r.IntN(nf)))
			if !ones {
				val = append(val, float32(r.NormFloat64()))
			}
			fld = append(fld, int32(r.IntN(max(fc.Views, 1))))
		}
		d.appendRow(float64(r.IntN(2)), idx, val, fld)
		d.Class = append(d.Class, int32(d.Label[i]))
	}
	b := NewBatch(d, seq(0, rows), newMark(nf))
	l := Weights{C: 1, Bias: 1}
	w := make([]float32, 1+len(b.Feats))
	for i := range w {
		w[i] = float32(r.NormFloat64() * 0.3)
	}
	vv := make([]float32, len(b.Feats)*fc.K)
	for i := range vv {
		vv[i] = float32(r.NormFloat64() * 0.3)
	}
	return b, l, w, vv
}

// TestFactorGradient checks FM's and MVM's gradients of the summed loss
// against central finite differences, for every weight and factor, with
// and without feature values.
func TestFactorGradient(t *testing.T) {
	for _, fc := range []Factors{{Kind: kindFM, K: 4}, {Kind: kindMVM, K: 3, Views: 3}} {
		for _, ones := range []bool{false, true} {
			r := rand.New(rand.NewPCG(7, uint64(fc.K)))
			b, l, w, v := randomFieldBatch(t, r, fc, 12, 9, ones)
			gw := make([]float32, len(w))
			gv := make([]float32, len(v))
			fc.LossGrad(b, 0, b.Len(), l, w, v, gw, gv)
			loss := func() float64 {
				s, _ := fc.LossGrad(b, 0, b.Len(), l, w, v, nil, nil)
				return s
			}
			check := func(name string, p []float32, g []float32) {
				for i := range p {
					const h = 1e-2
					old := p[i]
					p[i] = old + h
					up := loss()
					p[i] = old - h
					down := loss()
					p[i] = old
					num := (up - down) / (2 * h)
					if math.Abs(num-float64(g[i])) > 2e-3*math.Max(1, math.Abs(num)) {
						t.Errorf("%s ones=%v: %s[%d]: gradient %g, finite difference %g", fc.Kind, ones, name, i, g[i], num)
					}
				}
			}
			check("w", w, gw)
			check("v", v, gv)
		}
	}
}

// TestFactorMargins checks the O(K·n) forms against the definitions: FM's
// pairwise sum over i<j of <v_i,v_j> x_i x_j, and MVM's product over the
// views expanded as a sum over one choice per view (constant or entry).
func TestFactorMargins(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	fm := Factors{Kind: kindFM, K: 5}
	b, l, w, v := randomFieldBatch(t, r, fm, 20, 7, false)
	sc := fm.newScratch()
	for row := 0; row < b.Len(); row++ {
		s, e := b.Start[row], b.Start[row+1]
		want := float64(w[0])
		for i := s; i < e; i++ {
			want += float64(w[1+b.Pos[i]]) * entryX(b, i)
			for j := i + 1; j < e; j++ {
				dot := 0.0
				for f := 0; f < fm.K; f++ {
					dot += float64(v[int(b.Pos[i])*fm.K+f]) * float64(v[int(b.Pos[j])*fm.K+f])
				}
				want += dot * entryX(b, i) * entryX(b, j)
			}
		}
		if got := fm.margin(b, row, l, w, v, sc); math.Abs(got-want) > 1e-4*math.Max(1, math.Abs(want)) {
			t.Errorf("fm row %d: margin %g, by definition %g", row, got, want)
		}
	}

	mvm := Factors{Kind: kindMVM, K: 2, Views: 3}
	b, l, w, v = randomFieldBatch(t, r, mvm, 20, 7, false)
	sc = mvm.newScratch()
	for row := 0; row < b.Len(); row++ {
		s, e := b.Start[row], b.Start[row+1]
		want := float64(w[0])
		for i := s; i < e; i++ {
			want += float64(w[1+b.Pos[i]]) * entryX(b, i)
		}
		// Every choice of one term per view: the constant 1 or an entry
		// of that view.
		var expand func(p, f int, prod float64) float64
		expand = func(p, f int, prod float64) float64 {
			if p == mvm.Views {
				return prod
			}
			sum := expand(p+1, f, prod)
			for i := s; i < e; i++ {
				if int(b.Field[i]) == p {
					sum += expand(p+1, f, prod*float64(v[int(b.Pos[i])*mvm.K+f])*entryX(b, i))
				}
			}
			return sum
		}
		for f := 0; f < mvm.K; f++ {
			want += expand(0, f, 1) - 1
		}
		if got := mvm.margin(b, row, l, w, v, sc); math.Abs(got-want) > 1e-4*math.Max(1, math.Abs(want)) {
			t.Errorf("mvm row %d: margin %g, by definition %g", row, got, want)
		}
	}
}

// TestInitFactor checks that the factors' start is a function of the key
// (servers and replicas agree) with the asked-for spread.
func TestInitFactor(t *testing.T) {
	if initFactor(12345, 1, 0.1) != initFactor(12345, 1, 0.1) {
		t.Fatal("initFactor is not a function of its arguments")
	}
	var sum, sq float64
	const n = 100000
	for k := uint64(0); k < n; k++ {
		x := initFactor(k, 1, 0.1)
		sum += x
		sq += x * x
	}
	mean, std := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
	if math.Abs(mean) > 0.002 || math.Abs(std-0.1) > 0.002 {
		t.Errorf("mean %g, std %g: want about 0 and 0.1", mean, std)
	}
}

// TestReadLibFFM reads libffm lines: fields kept per entry, ids in any
// order, and bad fields refused with the line.
func TestReadLibFFM(t *testing.T) {
	d, err := ReadLIBSVM(strings.NewReader("1 0:5:1 1:3:0.5 2:9:1\n0 1:2:1 0:7:2\n"), "ffm", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 2 || len(d.Field) != 5 {
		t.Fatalf("%d rows, %d fields", d.Len(), len(d.Field))
	}
	wantF := []int32{0, 1, 2, 1, 0}
	wantID := []uint64{5, 3, 9, 2, 7}
	for i := range wantF {
		if d.Field[i] != wantF[i] || d.Vocab.IDs[d.Idx[i]] != wantID[i] {
			t.Errorf("entry %d: field %d id %d, want %d and %d", i, d.Field[i], d.Vocab.IDs[d.Idx[i]], wantF[i], wantID[i])
		}
	}
	if d.Val == nil || d.Val[1] != 0.5 || d.Val[4] != 2 {
		t.Errorf("values %v", d.Val)
	}
	h, err := ReadLIBSVM(strings.NewReader("1 3:abc:1 4:def:1\n"), "ffm", ReadOptions{HashBits: 20})
	if err != nil {
		t.Fatal(err)
	}
	if h.Vocab.IDs[h.Idx[0]] != HashFeature([]byte("abc"), 20) {
		t.Errorf("hashed id %d: the field is not part of the feature's name", h.Vocab.IDs[h.Idx[0]])
	}
	for _, bad := range []string{"1 -1:2:1\n", "1 x:2:1\n", "1 5000:2:1\n"} {
		if _, err := ReadLIBSVM(strings.NewReader(bad), "ffm", ReadOptions{}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// ctrData writes a small seeded CTR-like libffm set (10 fields, labels
// from a hidden factorization machine) and returns its paths.
func ctrData(t *testing.T) (train, test string) {
	t.Helper()
	dir := t.TempDir()
	train, test = filepath.Join(dir, "ctr.train"), filepath.Join(dir, "ctr.test")
	cfg, err := parseFlags([]string{"-mode=synth", "-fields=10", "-ids=200", "-rows=40000", "-test-rows=4000",
		"-out=" + train, "-test-out=" + test, "-seed=5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(cfg, io.Discard); err != nil {
		t.Fatal(err)
	}
	return train, test
}

// aucOf returns the test AUC of a job's final line.
func aucOf(t *testing.T, out string) float64 {
	t.Helper()
	line := finalLine(t, out)
	_, after, ok := strings.Cut(line, "AUC ")
	if !ok {
		t.Fatalf("no AUC in %q", line)
	}
	auc, err := strconv.ParseFloat(strings.Fields(after)[0], 64)
	if err != nil {
		t.Fatalf("AUC in %q: %v", line, err)
	}
	return auc
}

// TestFactorJobs trains lr, fm and mvm on data whose labels come from
// feature interactions, 3 servers and 2 workers under BSP (deterministic),
// and checks that the factor models learn what lr cannot: both well above
// lr. Each model file written, scored again by predict mode,
// gives the job's own test figures: what the servers hold on both apps is
// the model the workers evaluated.
func TestFactorJobs(t *testing.T) {
	train, test := ctrData(t)
	args := []string{"-train=" + train, "-test=" + test, "-opt=ftrl", "-alpha=1", "-beta=1", "-batch=200",
		"-sync=bsp", "-epochs=4", "-factors=4"}
	auc := map[string]float64{}
	for _, prog := range []string{kindLR, kindFM, kindMVM} {
		r := inProcessJob(t, 3, 2, append([]string{prog}, args...), nil, nil)
		auc[prog] = aucOf(t, r.out)
		t.Logf("%s: %s", prog, finalLine(t, r.out))

		m, err := ReadModel(bytes.NewReader(r.model))
		if err != nil {
			t.Fatalf("%s: read the model: %v", prog, err)
		}
		if (m.Factors != nil) != (prog != kindLR) {
			t.Fatalf("%s: model factors %v", prog, m.Factors)
		}
		met, err := ScoreFile(m, test, 0, nil)
		if err != nil {
			t.Fatalf("%s: score the model: %v", prog, err)
		}
		// The job scores with float32 weights as the model file has them:
		// the same AUC up to the margins' rounding at bin edges.
		if math.Abs(met.AUC()-auc[prog]) > 1e-3 {
			t.Errorf("%s: the model file scores AUC %.4f, the job %.4f", prog, met.AUC(), auc[prog])
		}
	}
	if auc[kindFM] < auc[kindLR]+0.07 || auc[kindFM] < 0.8 {
		t.Errorf("fm AUC %.4f, lr %.4f: the factorization machine should learn the interactions", auc[kindFM], auc[kindLR])
	}
	if auc[kindMVM] < auc[kindLR]+0.04 {
		t.Errorf("mvm AUC %.4f, lr %.4f: the multi-view machine should learn interactions too", auc[kindMVM], auc[kindLR])
	}
}

// BenchmarkStoreFactors measures a factor store's training pulls and
// pushes: FTRL on 10 values per key, keys drawn by popularity over 2^20,
// about 2,000 per request; ns/value counts a pull and a push of a value
// as two.
func BenchmarkStoreFactors(b *testing.B) {
	s := newStore(FTRL{Alpha: 1, Beta: 1}, ASP, 0, 2)
	s.SetInit(0.1, 1)
	s.SetDim(10)
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.1, 1, 1<<20)
	mk := func() []uint64 {
		var keys []uint64
		for range 2000 {
			keys = append(keys, z.Uint64())
		}
		slices.Sort(keys)
		return slices.Compact(keys)
	}
	var sets [][]uint64
	for range 64 {
		sets = append(sets, mk())
	}
	nop := func(kv.KVMeta, kv.KVPairs[float32]) error { return nil }
	b.ResetTimer()
	vals := 0
	for i := 0; i < b.N; i++ {
		keys := sets[i%len(sets)]
		s.Serve(kv.KVMeta{Cmd: command(kindTrain, 0), Pull: true, Sender: message.WorkerRankToID(0)}, kv.KVPairs[float32]{Keys: keys}, nop)
		pk := append(slices.Clone(keys), ctrlBase)
		g := make([]float32, 10*len(pk))
		for j := range g {
			g[j] = 0.01
		}
		g[10*len(keys)] = 1
		s.Serve(kv.KVMeta{Cmd: command(kindTrain, 0), Push: true, Sender: message.WorkerRankToID(0)}, kv.KVPairs[float32]{Keys: pk, Vals: g}, nop)
		vals += 20 * len(keys)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(vals), "ns/value")
}

// TestFactorManagedJobs checks that a factor model's two apps are kept like
// lr's one: under BSP with 3 servers, each range on two of them
// (PS_REPLICAS=1), the model is the one of the job without replication
// bit for bit, with a server killed mid-way too; with PS_CHECKPOINT_DIR a
// job launched again resumes both apps (on 2 servers and on 3).
func TestFactorManagedJobs(t *testing.T) {
	train, test := ctrData(t)
	args := func(epochs int) []string {
		return []string{kindFM, "-train=" + train, "-test=" + test, "-train-limit=6000", "-opt=ftrl", "-alpha=1",
			"-batch=200", "-sync=bsp", "-factors=4", fmt.Sprintf("-epochs=%d", epochs)}
	}
	plain := inProcessJob(t, 3, 2, args(2), nil, nil)
	managed := inProcessJob(t, 3, 2, args(2), replicas(1), nil)
	lost := inProcessJob(t, 3, 2, args(2), replicas(1), killAfterSteps(t, 1))
	if !bytes.Contains(plain.model, []byte("\nv ")) {
		t.Fatalf("a model without factors:\n%.500s", plain.model)
	}
	sameModel(t, plain, "the one without replication", map[string]jobResult{"PS_REPLICAS=1": managed, "PS_REPLICAS=1, server 1 killed": lost})

	dir := t.TempDir()
	first := inProcessJob(t, 2, 2, args(1), checkpointDir(dir), nil)
	more := copyDir(t, dir)
	resumed := inProcessJob(t, 2, 2, args(1), checkpointDir(dir), nil)
	wider := inProcessJob(t, 3, 2, args(1), both(checkpointDir(more), replicas(1)), nil)
	for name, r := range map[string]jobResult{"2 servers": resumed, "3 servers, PS_REPLICAS=1": wider} {
		if !strings.Contains(r.out, "fm: the servers resumed from snapshot 1") {
			t.Errorf("%s: no resume:\n%s", name, r.out)
		}
		if a, b := epochLoss(t, r.out), epochLoss(t, first.out); a >= b {
			t.Errorf("%s: the first epoch's test loss %.4f, from scratch %.4f: not a warm start", name, a, b)
		}
	}
	if !bytes.Equal(resumed.model, wider.model) {
		t.Error("resumed on 3 servers, the job trains another model than on 2")
	}
}

// TestFactorCluster trains fm and mvm as real processes through
// scripts/local.sh (2 servers, 2 workers, BSP, libffm data), then scores
// fm's model with the stand-alone predict mode: it must give the job's own
// test figures.
func TestFactorCluster(t *testing.T) {
	train, test := ctrData(t)
	model := filepath.Join(t.TempDir(), "fm.model")
	args := []string{"-train=" + train, "-test=" + test, "-train-limit=20000", "-opt=ftrl", "-alpha=1", "-batch=200",
		"-sync=bsp", "-epochs=3", "-factors=4"}
	aucs := map[string]float64{}
	for _, prog := range []string{kindLR, kindFM, kindMVM} {
		a := args
		if prog == kindFM {
			a = append(a, "-model="+model)
		}
		out := programJob(t, prog, nil, 2, 2, a...)
		aucs[prog] = aucOf(t, out)
		t.Logf("%s: %s", prog, finalLine(t, out))
		if prog == kindFM {
			final := finalLine(t, out)
			pred, err := exec.Command(programBinary(t, kindFM), "-mode=predict", "-model="+model, "-data="+test).CombinedOutput()
			if err != nil {
				t.Fatalf("predict: %v\n%s", err, pred)
			}
			_, want, _ := strings.Cut(final, "AUC ")
			want, _, _ = strings.Cut(want, " ")
			if !strings.Contains(string(pred), "AUC "+want) {
				t.Errorf("predict says %q, the job %q", strings.TrimSpace(string(pred)), final)
			}
		}
	}
	if aucs[kindFM] < aucs[kindLR]+0.05 || aucs[kindMVM] < aucs[kindLR]+0.02 {
		t.Errorf("AUC lr %.4f, fm %.4f, mvm %.4f: the factor models should learn the interactions", aucs[kindLR], aucs[kindFM], aucs[kindMVM])
	}
}

// TestFactorStoreRefusesWrappingKeys: a factor store refuses model keys
// whose values would wrap around the key space onto another key's.
func TestFactorStoreRefusesWrappingKeys(t *testing.T) {
	s := newStore(SGD{LR: 1}, ASP, 0, 1)
	s.SetDim(10)
	bad := statsBase/10 + 5
	r := &recorder{}
	vals := make([]float32, 20)
	vals[10] = 1 // the control key's rate
	s.Serve(kv.KVMeta{Cmd: command(kindTrain, 0), Push: true, Sender: message.WorkerRankToID(0)},
		kv.KVPairs[float32]{Keys: []uint64{bad, ctrlBase}, Vals: vals}, r.respond)
	s.Serve(kv.KVMeta{Cmd: command(kindTrain, 0), Pull: true, Sender: message.WorkerRankToID(0)}, kv.KVPairs[float32]{Keys: []uint64{bad}}, r.respond)
	_, errs := s.Stats()
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "beyond the key space") || !strings.Contains(errs[1].Error(), "beyond the key space") {
		t.Errorf("errors %v, want the push's and the pull's", errs)
	}
	if n := len(r.got); n != 0 {
		t.Errorf("%d answers to refused requests", n)
	}
}
