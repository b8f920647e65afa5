package psf

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/postoffice"
)

// local runs psf requests through Server.Apply by hand, as the framework
// of a managed job does: each key range has its servers (the first is the
// head), and a request is applied by every server of its range when it
// changes matrices (Changes), by the head alone otherwise.
type local struct {
	t       *testing.T
	po      *postoffice.Postoffice
	holders [][]*Server // by range
	ts      int
	push    bool // the Push of the requests sent (true unless a test says)
}

// localPostoffice returns the postoffice of a server of a started
// 3-server job: only its ranges and number of servers are used.
func localPostoffice(t *testing.T) *postoffice.Postoffice {
	t.Helper()
	c := testcluster.New(t, 3, 1, testcluster.Options{Mem: true, Quiet: true})
	return c.Servers[0]
}

func newLocal(t *testing.T, po *postoffice.Postoffice, holders ...[]*Server) *local {
	return &local{t: t, po: po, holders: holders, push: true}
}

// part returns range r of the job as a store part.
func (l *local) part(r int) kv.Part {
	return kv.Part{Index: r, Of: l.po.NumServers(), Keys: l.po.ServerKeyRanges()[r]}
}

// send sends reqs as one request of command cmd and returns the answer of
// each (in the order of reqs): its result, or its error. Every server
// applying a part must answer the same.
func (l *local) send(cmd int, reqs []request) ([][]byte, []error) {
	l.t.Helper()
	l.ts++
	ranges := l.po.ServerKeyRanges()
	results := make([][]byte, len(reqs))
	errs := make([]error, len(reqs))
	for r := range ranges {
		var idx []int
		for i, q := range reqs {
			if ranges[r].Contains(q.key) {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			continue
		}
		slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(reqs[a].key, reqs[b].key) })
		var data kv.KVPairs[uint8]
		for _, i := range idx {
			data.Keys = append(data.Keys, reqs[i].key)
			data.Lens = append(data.Lens, int32(len(reqs[i].payload)))
			data.Vals = append(data.Vals, reqs[i].payload...)
		}
		meta := kv.KVMeta{Cmd: cmd, Push: l.push, Pull: true, Sender: 9, CustomerID: 0, Timestamp: l.ts, AppID: DefaultAppID}
		servers := l.holders[r]
		if len(servers) == 0 {
			l.t.Fatalf("range %d has no server", r)
		}
		changes := servers[0].Changes(meta, data)
		for _, s := range servers[1:] {
			if s.Changes(meta, data) != changes {
				l.t.Fatalf("servers disagree on whether a request changes range %d", r)
			}
		}
		if !changes {
			servers = servers[:1]
		}
		var first kv.KVPairs[uint8]
		for j, s := range servers {
			ans, err := s.Apply(meta, data)
			if err != nil {
				l.t.Fatalf("Apply: %v", err)
			}
			if j == 0 {
				first = ans
			} else if !slices.Equal(ans.Vals, first.Vals) || !slices.Equal(ans.Lens, first.Lens) {
				l.t.Fatalf("range %d: the servers applying a request answer differently", r)
			}
		}
		if len(first.Lens) != len(idx) {
			l.t.Fatalf("range %d: %d answers for %d keys", r, len(first.Lens), len(idx))
		}
		off := 0
		for j, i := range idx {
			n := int(first.Lens[j])
			results[i], errs[i] = decodeResponse(first.Vals[off:off+n], r, reqs[i].part.ID)
			off += n
		}
	}
	return results, errs
}

// must fails the test on the first error.
func must(t *testing.T, errs []error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// sys runs a matrix operation on every range and returns the answers.
func (l *local) sys(op uint8, name string, args []byte) ([][]byte, []error) {
	l.t.Helper()
	var reqs []request
	for s, rg := range l.po.ServerKeyRanges() {
		reqs = append(reqs, request{key: rg.Begin, payload: encodeSysRequest(sysRequest{op: op, matrix: name, args: args}),
			part: PartitionMeta{ID: -1, Server: s}})
	}
	return l.send(CmdSystem, reqs)
}

// create creates a matrix and returns a handle for building requests.
func (l *local) create(meta MatrixMeta) *Matrix {
	l.t.Helper()
	meta, err := meta.withDefaults(l.po.NumServers())
	if err != nil {
		l.t.Fatal(err)
	}
	args, err := encode(metaCodec, meta)
	if err != nil {
		l.t.Fatal(err)
	}
	_, errs := l.sys(opCreate, meta.Name, args)
	must(l.t, errs)
	return &Matrix{c: &Client{po: l.po}, meta: meta}
}

func (l *local) update(m *Matrix, f UpdateFunc) {
	l.t.Helper()
	meta := m.meta
	parts, err := f.Split(&meta)
	if err != nil {
		l.t.Fatal(err)
	}
	reqs, err := m.funcRequests(kindUpdate, f.Name(), parts)
	if err != nil {
		l.t.Fatal(err)
	}
	_, errs := l.send(CmdFunc, reqs)
	must(l.t, errs)
}

func localGet[R any](l *local, m *Matrix, f GetFunc[R]) (R, error) {
	l.t.Helper()
	meta := m.meta
	parts, err := f.Split(&meta)
	if err != nil {
		return *new(R), err
	}
	reqs, err := m.funcRequests(kindGet, f.Name(), parts)
	if err != nil {
		return *new(R), err
	}
	results, errs := l.send(CmdFunc, reqs)
	if err := errors.Join(errs...); err != nil {
		return *new(R), err
	}
	out := make([]Part[[]byte], len(reqs))
	for i, r := range reqs {
		out[i] = Part[[]byte]{Partition: r.part, Value: results[i]}
	}
	sortParts(out)
	return f.Merge(&meta, out)
}

// model is what a worker expects a dense and a sparse matrix to hold.
type model struct {
	dense  [][]float64
	sparse []map[int64]float64
}

const (
	nDenseRows, nDenseCols = 6, 10
	nSparseRows            = 5
)

// setup creates a dense matrix "d" of several row blocks and a sparse one
// "s" and fills them with rounds of random increments.
func (l *local) setup(rnd *rand.Rand, rounds int) (d, s *Matrix, want *model) {
	l.t.Helper()
	d = l.create(MatrixMeta{Name: "d", Rows: nDenseRows, Cols: nDenseCols, RowBlock: 2})
	s = l.create(MatrixMeta{Name: "s", Type: Sparse, Rows: nSparseRows, RowBlock: 2})
	want = &model{dense: make([][]float64, nDenseRows), sparse: make([]map[int64]float64, nSparseRows)}
	for r := range want.dense {
		want.dense[r] = make([]float64, nDenseCols)
	}
	for r := range want.sparse {
		want.sparse[r] = map[int64]float64{}
	}
	l.more(rnd, d, s, want, rounds)
	return d, s, want
}

// more applies rounds of random changes to d and s, and to the model.
func (l *local) more(rnd *rand.Rand, d, s *Matrix, want *model, rounds int) {
	l.t.Helper()
	for range rounds {
		rows := []int{rnd.IntN(nDenseRows), rnd.IntN(nDenseRows)}
		if rows[0] == rows[1] {
			rows = rows[:1]
		}
		vals := make([][]float64, len(rows))
		for i, r := range rows {
			vals[i] = make([]float64, nDenseCols)
			for c := range vals[i] {
				if rnd.IntN(3) > 0 {
					vals[i][c] = float64(rnd.IntN(9) - 4)
				}
				want.dense[r][c] += vals[i][c]
			}
		}
		l.update(d, IncrementRows(rows, vals))
		if r := rnd.IntN(nDenseRows); rnd.IntN(4) == 0 {
			l.update(d, Scale(r, 2))
			for c := range want.dense[r] {
				want.dense[r][c] *= 2
			}
		}
		// Sparse: a few columns out of a small set (so that entries come
		// back to 0 and are deleted), column 0 and negative ones included.
		srows := []int{rnd.IntN(nSparseRows)}
		m := map[int64]float64{}
		for range 1 + rnd.IntN(8) {
			m[int64(rnd.IntN(41)-20)] = float64(rnd.IntN(5) - 2)
		}
		row := want.sparse[srows[0]]
		for k, v := range m {
			row[k] += v
			if row[k] == 0 {
				delete(row, k)
			}
		}
		l.update(s, IncrementRowsAt(srows, []SparseVector{SparseVectorOf(m)}))
	}
}

// check reads every row of d and s and compares them with the model,
// exactly.
func (l *local) check(d, s *Matrix, want *model) {
	l.t.Helper()
	rows := make([]int, nDenseRows)
	for i := range rows {
		rows[i] = i
	}
	got, err := localGet(l, d, PullRows(rows))
	if err != nil {
		l.t.Fatal(err)
	}
	for r := range rows {
		if !slices.Equal(got[r], want.dense[r]) {
			l.t.Fatalf("dense row %d: got %v, want %v", r, got[r], want.dense[r])
		}
	}
	srows := make([]int, nSparseRows)
	for i := range srows {
		srows[i] = i
	}
	sgot, err := localGet(l, s, PullSparseRows(srows))
	if err != nil {
		l.t.Fatal(err)
	}
	for r := range srows {
		if w := SparseVectorOf(want.sparse[r]); !slices.Equal(sgot[r].Indices, w.Indices) || !slices.Equal(sgot[r].Values, w.Values) {
			l.t.Fatalf("sparse row %d: got %v, want %v", r, sgot[r], w)
		}
	}
}

// snapshot returns what s writes of range r.
func (l *local) snapshot(s *Server, r int) []byte {
	l.t.Helper()
	var buf bytes.Buffer
	if err := s.Snapshot(&buf, l.part(r)); err != nil {
		l.t.Fatal(err)
	}
	return buf.Bytes()
}

// sameRanges fails unless every server of each range writes the same
// snapshot of it, byte for byte.
func (l *local) sameRanges() {
	l.t.Helper()
	for r, servers := range l.holders {
		first := l.snapshot(servers[0], r)
		for _, s := range servers[1:] {
			if !bytes.Equal(l.snapshot(s, r), first) {
				l.t.Fatalf("the servers of range %d hold different state", r)
			}
		}
	}
}

func TestStoreChanges(t *testing.T) {
	po := localPostoffice(t)
	s := NewHandler(po)
	key := po.ServerKeyRanges()[1].Begin
	one := func(cmd int, payload []byte) bool {
		return s.Changes(kv.KVMeta{Cmd: cmd, Push: true, Pull: true}, kv.KVPairs[uint8]{Keys: []uint64{key}, Vals: payload, Lens: []int32{int32(len(payload))}})
	}
	fn := func(kind uint8) []byte {
		return encodeFuncRequest(funcHeader{kind: kind, matrix: "m", fn: "psf.Increment"})
	}
	if !one(CmdFunc, fn(kindUpdate)) || one(CmdFunc, fn(kindGet)) {
		t.Error("an update kernel must change the store, a get kernel not")
	}
	for op, want := range map[uint8]bool{
		opCreate: true, opDrop: true, opDelete: true, opLoad: true, opLoadCommit: true, opLoadAbort: true,
		opMeta: false, opSave: false, opCommit: false, 200: false,
	} {
		if got := one(CmdSystem, encodeSysRequest(sysRequest{op: op, matrix: "m"})); got != want {
			t.Errorf("operation %d (%s): Changes %v, want %v", op, opNames[op], got, want)
		}
	}
	if one(CmdSystem+1, fn(kindUpdate)) || one(7, fn(kindUpdate)) || one(CmdFunc, []byte{9, kindUpdate}) || one(CmdFunc, nil) {
		t.Error("other commands, other wire versions and empty payloads change nothing")
	}
	// Two keys: one update is enough.
	a, b := fn(kindGet), fn(kindUpdate)
	data := kv.KVPairs[uint8]{Keys: []uint64{key, key + 1}, Vals: append(slices.Clone(a), b...), Lens: []int32{int32(len(a)), int32(len(b))}}
	if !s.Changes(kv.KVMeta{Cmd: CmdFunc, Push: true, Pull: true}, data) {
		t.Error("a request with an update among gets must change the store")
	}
	data.Lens = []int32{1}
	if s.Changes(kv.KVMeta{Cmd: CmdFunc, Push: true, Pull: true}, data) {
		t.Error("a malformed request changes nothing")
	}
}

// Servers holding a range, several ranges each, that apply the same
// requests hold the same, byte for byte, and answer the model exactly.
func TestStoreReplicasAgree(t *testing.T) {
	po := localPostoffice(t)
	a, b, c := NewHandler(po), NewHandler(po), NewHandler(po)
	l := newLocal(t, po, []*Server{a, b}, []*Server{b, c, a}, []*Server{c, a})
	rnd := rand.New(rand.NewPCG(1, 2))
	d, s, want := l.setup(rnd, 40)
	l.check(d, s, want)
	l.sameRanges()
	// a holds all three ranges: it alone answers everything.
	alone := newLocal(t, po, []*Server{a}, []*Server{a}, []*Server{a})
	alone.ts = 1000
	alone.check(d, s, want)
	if got := a.Matrices(); len(got) != 2 || got[0].Name != "d" || got[1].Name != "s" {
		t.Errorf("Matrices: %+v", got)
	}
}

// A snapshot of a range restored into a fresh server gives the same state,
// byte for byte, which then changes as the original's does.
func TestStoreSnapshotRestore(t *testing.T) {
	po := localPostoffice(t)
	a := NewHandler(po)
	l := newLocal(t, po, []*Server{a}, []*Server{a}, []*Server{a})
	rnd := rand.New(rand.NewPCG(3, 4))
	d, s, want := l.setup(rnd, 60)
	// A load staged (phase one, not committed) is part of the state.
	dir := t.TempDir()
	args, _ := encode(storeArgsCodec, storeArgs{dir: dir})
	_, errs := l.sys(opSave, "d", args)
	must(t, errs)
	_, errs = l.sys(opCommit, "d", args)
	must(t, errs)
	_, errs = l.sys(opLoad, "d", args)
	must(t, errs)

	fresh := NewHandler(po)
	for r := range 3 {
		snap := l.snapshot(a, r)
		if err := fresh.Restore([]io.Reader{bytes.NewReader(snap)}, l.part(r)); err != nil {
			t.Fatal(err)
		}
		if again := l.snapshot(fresh, r); !bytes.Equal(again, snap) {
			t.Fatalf("range %d: the restored server writes another snapshot (%d bytes, %d before)", r, len(again), len(snap))
		}
	}
	// The fresh server answers alone, and goes on as the original.
	both := newLocal(t, po, []*Server{fresh, a}, []*Server{a, fresh}, []*Server{fresh, a})
	both.ts = l.ts
	both.check(d, s, want)
	both.more(rnd, d, s, want, 30)
	both.check(d, s, want)
	both.sameRanges()
	// The staged load came along: commit it on both.
	_, errs = both.sys(opLoadCommit, "d", nil)
	must(t, errs)
	both.sameRanges()

	// Restoring what another server held replaces: a matrix the snapshot
	// does not have is gone from that range, not from the others.
	extra := newLocal(t, po, []*Server{fresh}, []*Server{fresh}, []*Server{fresh})
	extra.ts = 5000
	extra.create(MatrixMeta{Name: "x", Rows: 2, Cols: 3})
	snap0 := l.snapshot(a, 0)
	if err := fresh.Restore([]io.Reader{bytes.NewReader(snap0)}, l.part(0)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(l.snapshot(fresh, 0), snap0) {
		t.Fatal("range 0 is not what was restored")
	}
	_, errs = extra.sys(opMeta, "x", nil)
	if !errors.Is(errs[0], ErrNoMatrix) || errs[1] != nil || errs[2] != nil {
		t.Fatalf("matrix x after restoring range 0 without it: %v", errs)
	}

	// No reader: the range holds nothing.
	if err := fresh.Restore(nil, l.part(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := localGet(extra, d, Pull(0)); !errors.Is(err, ErrNoMatrix) {
		t.Fatalf("a range restored from nothing answers %v", err)
	}
	var empty bytes.Buffer
	if err := fresh.Snapshot(&empty, l.part(1)); err != nil || empty.Len() != snapHeaderSize {
		t.Fatalf("snapshot of an empty range: %d bytes, %v", empty.Len(), err)
	}
	if names := fresh.Matrices(); len(names) != 3 {
		t.Fatalf("the other ranges keep their matrices: %+v", names)
	}
}

// Snapshots of another layout, or damaged, are refused with the reason, and
// change nothing.
// maxDamagedRestoreAlloc bounds what restoring a damaged snapshot of
// TestStoreRestoreRefuses may allocate (its whole snapshot restores in less).
const maxDamagedRestoreAlloc = 64 << 20

func TestStoreRestoreRefuses(t *testing.T) {
	po := localPostoffice(t)
	a := NewHandler(po)
	l := newLocal(t, po, []*Server{a}, []*Server{a}, []*Server{a})
	rnd := rand.New(rand.NewPCG(5, 6))
	l.setup(rnd, 10)
	snap := l.snapshot(a, 1)

	fresh := NewHandler(po)
	other := kv.Part{Index: 1, Of: 4, Keys: postoffice.KeyRanges(4)[1]}
	err := fresh.Restore([]io.Reader{bytes.NewReader(snap)}, other)
	if err == nil || !strings.Contains(err.Error(), "psf matrices are laid out for 3 servers") ||
		!strings.Contains(err.Error(), "use Matrix.Save and Client.LoadMatrix to move them to another number of servers") {
		t.Fatalf("restoring into 4 servers: %v", err)
	}
	// A snapshot of another layout without matrices has nothing to move.
	var empty bytes.Buffer
	if err := NewHandler(po).Snapshot(&empty, kv.Part{Index: 0, Of: 5}); err != nil {
		t.Fatal(err)
	}
	if err := a.Restore([]io.Reader{bytes.NewReader(empty.Bytes())}, l.part(2)); err != nil {
		t.Fatalf("an empty snapshot of 5 servers: %v", err)
	}
	if len(l.snapshot(a, 2)) != snapHeaderSize {
		t.Fatal("an empty snapshot of 5 servers must empty the range")
	}
	// A snapshot of another range of this layout holds nothing of this one.
	if err := fresh.Restore([]io.Reader{bytes.NewReader(snap)}, l.part(0)); err != nil {
		t.Fatal(err)
	}
	if len(l.snapshot(fresh, 0)) != snapHeaderSize {
		t.Fatal("a snapshot of range 1 restored range 0")
	}
	// Two snapshots of a range holding the same matrix.
	if err := fresh.Restore([]io.Reader{bytes.NewReader(snap), bytes.NewReader(snap)}, l.part(1)); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("the same matrix twice: %v", err)
	}

	// A matrix laid out for other servers in a snapshot that says 3.
	bad := slices.Clone(snap)
	metaAt := snapHeaderSize + 5
	n := int(bad[metaAt-4])
	mm, err := decode(metaCodec, bad[metaAt:metaAt+n])
	if err != nil {
		t.Fatal(err)
	}
	mm.NumServers = 2
	raw, _ := encode(metaCodec, mm)
	if len(raw) != n {
		t.Fatalf("the meta takes %d bytes, %d re-encoded", n, len(raw))
	}
	copy(bad[metaAt:], raw)
	if err := fresh.Restore([]io.Reader{bytes.NewReader(bad)}, l.part(1)); err == nil || !strings.Contains(err.Error(), "laid out for 2 servers") {
		t.Fatalf("a matrix of 2 servers: %v", err)
	}

	// Damage: every truncation and a few flipped bytes fail or restore
	// something valid, and never panic; a failure changes nothing.
	before := l.snapshot(a, 1)
	finer, flips := 16, 300
	if testing.Short() {
		finer, flips = 4, 40
	}
	for cut := 0; cut < len(snap); cut += 1 + cut/finer {
		if err := a.Restore([]io.Reader{bytes.NewReader(snap[:cut])}, l.part(1)); err == nil {
			t.Fatalf("a snapshot cut at %d of %d bytes restored", cut, len(snap))
		}
	}
	// Nor does a damaged snapshot make a restore allocate what its bytes
	// claim before they are checked (one flip once asked for 15 GB).
	var ms runtime.MemStats
	for i := range flips {
		d := slices.Clone(snap)
		at := rnd.IntN(len(d))
		d[at] ^= byte(1 + i%255)
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc
		_ = fresh.Restore([]io.Reader{bytes.NewReader(d)}, l.part(1))
		runtime.ReadMemStats(&ms)
		if n := ms.TotalAlloc - before; n > maxDamagedRestoreAlloc {
			t.Errorf("flip %d (byte %d of %d): the restore allocated %d MiB", i, at, len(d), n>>20)
		}
	}
	if !bytes.Equal(l.snapshot(a, 1), before) {
		t.Fatal("failed restores changed the range")
	}
	wrong := slices.Clone(snap)
	copy(wrong, "PSFSNAP9")
	if err := a.Restore([]io.Reader{bytes.NewReader(wrong)}, l.part(1)); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("another format version: %v", err)
	}
	if err := a.Restore([]io.Reader{strings.NewReader("PSKVDEF1 something else")}, l.part(1)); err == nil || !strings.Contains(err.Error(), "not a psf snapshot") {
		t.Fatalf("not a psf snapshot: %v", err)
	}
}

// Every server applying a create makes the same generation, so that the
// drop undoing it works on each; another create's drop does not.
func TestStoreCreateGen(t *testing.T) {
	po := localPostoffice(t)
	a, b := NewHandler(po), NewHandler(po)
	l := newLocal(t, po, []*Server{a, b}, []*Server{b, a}, []*Server{a, b})
	meta, _ := MatrixMeta{Name: "g", Rows: 3, Cols: 9}.withDefaults(3)
	args, _ := encode(metaCodec, meta)
	res, errs := l.sys(opCreate, "g", args)
	must(t, errs)
	gens := make([]uint64, len(res))
	for i, r := range res {
		if gens[i], _ = decode(genCodec, r); gens[i] == 0 {
			t.Fatalf("range %d: generation 0 for a new matrix", i)
		}
	}
	if gens[0] == gens[1] {
		t.Error("two ranges' creates share a generation")
	}
	l.sameRanges()
	// Created again: 0, nothing to undo.
	res, errs = l.sys(opCreate, "g", args)
	must(t, errs)
	for i, r := range res {
		if g, _ := decode(genCodec, r); g != 0 {
			t.Errorf("range %d: a create of an existing matrix answers generation %d", i, g)
		}
	}
	// A drop naming another generation leaves it; its own drops it.
	other, _ := encode(genCodec, gens[0]+1)
	_, errs = l.sys(opDrop, "g", other)
	must(t, errs)
	if len(a.Matrices()) != 1 || len(b.Matrices()) != 1 {
		t.Fatal("a drop of another create dropped the matrix")
	}
	for r := range 3 {
		arg, _ := encode(genCodec, gens[r])
		q := request{key: po.ServerKeyRanges()[r].Begin, payload: encodeSysRequest(sysRequest{op: opDrop, matrix: "g", args: arg}), part: PartitionMeta{ID: -1, Server: r}}
		_, errs = l.send(CmdSystem, []request{q})
		must(t, errs)
	}
	if len(a.Matrices()) != 0 || len(b.Matrices()) != 0 {
		t.Fatal("the drops of the create did not undo it")
	}
	l.sameRanges()
	if createGen(kv.KVMeta{Sender: 9, Timestamp: 1}, 0, "g") == createGen(kv.KVMeta{Sender: 9, Timestamp: 2}, 0, "g") {
		t.Error("two requests make the same generation")
	}
}

// A request without push changes nothing: an update is not run again, a
// create is refused.
func TestStoreApplyWithoutPush(t *testing.T) {
	po := localPostoffice(t)
	a := NewHandler(po)
	l := newLocal(t, po, []*Server{a}, []*Server{a}, []*Server{a})
	d := l.create(MatrixMeta{Name: "d", Rows: 2, Cols: 6})
	l.update(d, IncrementRows([]int{1}, [][]float64{{1, 2, 3, 4, 5, 6}}))
	before := [3][]byte{l.snapshot(a, 0), l.snapshot(a, 1), l.snapshot(a, 2)}
	l.push = false
	l.update(d, IncrementRows([]int{1}, [][]float64{{1, 1, 1, 1, 1, 1}}))
	meta, _ := MatrixMeta{Name: "e", Rows: 2, Cols: 6}.withDefaults(3)
	args, _ := encode(metaCodec, meta)
	if _, errs := l.sys(opCreate, "e", args); errs[0] == nil || !strings.Contains(errs[0].Error(), "not run again") {
		t.Fatalf("a create without push: %v", errs)
	}
	for r := range before {
		if !bytes.Equal(l.snapshot(a, r), before[r]) {
			t.Fatalf("a request without push changed range %d", r)
		}
	}
	got, err := localGet(l, d, Pull(1))
	if err != nil || !slices.Equal(got, []float64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("row 1: %v, %v", got, err)
	}
	// Handle, outside managed jobs, runs what it is given, as before.
	var res kv.KVPairs[uint8]
	meta2 := kv.KVMeta{Cmd: CmdFunc, Push: false, Pull: true}
	parts, _ := IncrementRows([]int{1}, [][]float64{{1, 1, 1, 1, 1, 1}}).Split(&d.meta)
	reqs, _ := d.funcRequests(kindUpdate, kIncrement.Name(), parts)
	for _, q := range reqs {
		res = a.apply(meta2, kv.KVPairs[uint8]{Keys: []uint64{q.key}, Vals: q.payload, Lens: []int32{int32(len(q.payload))}}, false)
		if _, err := decodeResponse(res.Vals, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	got, err = localGet(l, d, Pull(1))
	if err != nil || !slices.Equal(got, []float64{2, 3, 4, 5, 6, 7}) {
		t.Fatalf("row 1 after Handle's update: %v, %v", got, err)
	}
}

// Sparse tables come back slot for slot: a table built by inserts and
// deletes in some order restores with the same slots, so that walking it
// goes the same way.
func TestStoreTablesExact(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	meta, _ := MatrixMeta{Name: "t", Type: Sparse, Rows: 3, NumServers: 1}.withDefaults(1)
	p := newPartition(meta.Partition(0))
	for range 5000 {
		k := int64(rnd.IntN(3000) - 1500)
		i := rnd.IntN(3)
		if rnd.IntN(3) == 0 {
			p.table(i).Delete(k)
		} else {
			p.table(i).Set(k, rnd.NormFloat64())
		}
	}
	p.srows[2] = nil
	var buf bytes.Buffer
	if err := encodeTables(&buf, p); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != tablesSize(p) {
		t.Fatalf("%d bytes written, %d announced", buf.Len(), tablesSize(p))
	}
	rows, err := parseTables(buf.Bytes(), p.meta)
	if err != nil {
		t.Fatal(err)
	}
	for i, t0 := range p.srows {
		t1 := rows[i]
		if (t0 == nil) != (t1 == nil) {
			t.Fatalf("row %d: nil %v, restored nil %v", i, t0 == nil, t1 == nil)
		}
		if t0 == nil {
			continue
		}
		if !slices.Equal(t0.keys, t1.keys) || t0.n != t1.n || t0.limit != t1.limit || t0.hasZero != t1.hasZero ||
			math.Float64bits(t0.zeroVal) != math.Float64bits(t1.zeroVal) || len(t0.vals) != len(t1.vals) {
			t.Fatalf("row %d: the restored table differs", i)
		}
		for j := range t0.vals {
			if math.Float64bits(t0.vals[j]) != math.Float64bits(t1.vals[j]) {
				t.Fatalf("row %d: slot %d differs", i, j)
			}
		}
	}
	// A slot where lookups do not find its column is refused.
	b := buf.Bytes()
	hdr := partHeaderSize + tableRowSize
	if b[partHeaderSize] == 1 && len(b) >= hdr+48 {
		bad := slices.Clone(b)
		copy(bad[hdr+8:hdr+16], b[hdr+32:hdr+40]) // the second slot's column in the first slot
		if _, err := parseTables(bad, p.meta); err == nil {
			t.Fatal("a table with a column twice restored")
		}
	}

	// A table presized for more entries than it got, holding column 0
	// only, keeps no slots; a snapshot stating such a table with 2^30
	// slots restores it without them.
	big := newLongTable[float64](1000)
	big.Set(0, 2.5)
	q := newPartition(meta.Partition(0))
	q.setTable(0, big)
	if q.srows[0].keys != nil || q.srows[0].Len() != 1 {
		t.Fatalf("a presized table holding column 0 only keeps %d slots", len(q.srows[0].keys))
	}
	buf.Reset()
	if err := encodeTables(&buf, q); err != nil {
		t.Fatal(err)
	}
	b = buf.Bytes()
	binary.LittleEndian.PutUint64(b[partHeaderSize+1:], 1<<30)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	rows, err = parseTables(b, q.meta)
	runtime.ReadMemStats(&ms)
	if err != nil || rows[0] == nil || rows[0].keys != nil || ms.TotalAlloc-before > 1<<20 {
		t.Fatalf("an empty table of 2^30 slots: %v, allocating %d bytes", err, ms.TotalAlloc-before)
	}
	if v, ok := rows[0].Get(0); !ok || v != 2.5 {
		t.Fatalf("an empty table of 2^30 slots: column 0 holds %v, %v", v, ok)
	}
}
