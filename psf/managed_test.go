package psf_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/psf"
	"github.com/gopslite/pslite/van"
)

// managedModel is what the worker expects a dense and a sparse matrix to
// hold.
type managedModel struct {
	dense  [][]float64
	sparse []map[int64]float64
}

// managedRounds applies rounds of random changes to d and s, and to the
// model: increments of small integers and doublings, whose results are
// exact.
func managedRounds(t *testing.T, ctx context.Context, rnd *rand.Rand, d, s *psf.Matrix, want *managedModel, rounds int) {
	t.Helper()
	rows, cols := len(want.dense), len(want.dense[0])
	for range rounds {
		rs := []int{rnd.IntN(rows), rnd.IntN(rows)}
		if rs[0] == rs[1] {
			rs = rs[:1]
		}
		vals := make([][]float64, len(rs))
		for i, r := range rs {
			vals[i] = make([]float64, cols)
			for c := range vals[i] {
				if rnd.IntN(3) > 0 {
					vals[i][c] = float64(rnd.IntN(9) - 4)
				}
				want.dense[r][c] += vals[i][c]
			}
		}
		if err := d.IncrementRows(ctx, rs, vals); err != nil {
			t.Fatal(err)
		}
		if r := rnd.IntN(rows); rnd.IntN(4) == 0 {
			if err := d.Update(ctx, psf.Scale(r, 2)); err != nil {
				t.Fatal(err)
			}
			for c := range want.dense[r] {
				want.dense[r][c] *= 2
			}
		}
		sr := rnd.IntN(len(want.sparse))
		m := map[int64]float64{}
		for range 1 + rnd.IntN(8) {
			m[int64(rnd.IntN(61)-30)*1_000_003] = float64(rnd.IntN(5) - 2)
		}
		for k, v := range m {
			if want.sparse[sr][k] += v; want.sparse[sr][k] == 0 {
				delete(want.sparse[sr], k)
			}
		}
		if err := s.IncrementRowsAt(ctx, []int{sr}, []psf.SparseVector{psf.SparseVectorOf(m)}); err != nil {
			t.Fatal(err)
		}
	}
}

// managedCheck reads every row of d and s and compares them with the model,
// exactly.
func managedCheck(t *testing.T, ctx context.Context, d, s *psf.Matrix, want *managedModel) {
	t.Helper()
	rows := make([]int, len(want.dense))
	for i := range rows {
		rows[i] = i
	}
	got, err := d.GetRows(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	for r := range rows {
		if !slices.Equal(got[r], want.dense[r]) {
			t.Fatalf("dense row %d: got %v, want %v", r, got[r], want.dense[r])
		}
	}
	srows := make([]int, len(want.sparse))
	for i := range srows {
		srows[i] = i
	}
	sgot, err := s.GetSparseRows(ctx, srows)
	if err != nil {
		t.Fatal(err)
	}
	for r := range srows {
		w := psf.SparseVectorOf(want.sparse[r])
		if !slices.Equal(sgot[r].Indices, w.Indices) || !slices.Equal(sgot[r].Values, w.Values) {
			t.Fatalf("sparse row %d: got %v, want %v", r, sgot[r], w)
		}
	}
}

// In a managed job (PS_REPLICAS=1) every key range is on two servers: a
// server killed takes no matrix value with it, and the job goes on.
func TestManagedJob(t *testing.T) {
	ctx := ctxT(t)
	net := van.NewMemNetwork()
	c := testcluster.New(t, 3, 1, testcluster.Options{Network: net, Quiet: true,
		Tweak: func(cfg *postoffice.Config) { cfg.Replicas = 1 }})
	for _, p := range c.Servers {
		if !p.Managed() {
			t.Fatal("not a managed job")
		}
		if _, err := psf.NewServer(p); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := psf.NewClient(c.Workers[0])
	if err != nil {
		t.Fatal(err)
	}
	const rows, cols, srows = 6, 30, 5
	d, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "dense", Rows: rows, Cols: cols, RowBlock: 2})
	if err != nil {
		t.Fatal(err)
	}
	s, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "sparse", Type: psf.Sparse, Rows: srows, RowBlock: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := &managedModel{dense: make([][]float64, rows), sparse: make([]map[int64]float64, srows)}
	for r := range want.dense {
		want.dense[r] = make([]float64, cols)
	}
	for r := range want.sparse {
		want.sparse[r] = map[int64]float64{}
	}
	rnd := rand.New(rand.NewPCG(11, 12))
	managedRounds(t, ctx, rnd, d, s, want, 30)
	managedCheck(t, ctx, d, s, want)

	victim := c.Servers[1]
	net.Kill(testcluster.Addr(victim))
	managedRounds(t, ctx, rnd, d, s, want, 30)
	managedCheck(t, ctx, d, s, want)
	gone := victim.MyRank()
	for r, rv := range c.Scheduler.View().Ranges {
		if slices.Contains(rv.Chain, gone) {
			t.Fatalf("range %d is still on the server killed: %v", r, rv.Chain)
		}
	}
	// The matrices are whole: every range answers their meta.
	if _, err := cl.OpenMatrix(ctx, "dense"); err != nil {
		t.Fatal(err)
	}
	// A matrix created after the loss is on every range too.
	e, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "late", Rows: 2, Cols: 7})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.IncrementRow(ctx, 1, []float64{1, 2, 3, 4, 5, 6, 7}); err != nil {
		t.Fatal(err)
	}
	if got, err := e.GetRow(ctx, 1); err != nil || !slices.Equal(got, []float64{1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("late row 1: %v, %v", got, err)
	}
	if testing.Short() {
		return
	}

	// A replacement copies its ranges (Snapshot, Restore) and takes its
	// own back; then another server dies, whose ranges the replacement
	// holds copies of.
	repl := c.NewNode(message.RoleServer, nil)
	if err := repl.Start(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	rs, err := psf.NewServer(repl)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "every range back home", func() bool {
		v := c.Scheduler.View()
		for r, rv := range v.Ranges {
			if rv.Head() != r || len(rv.Joining) > 0 || rv.Draining || len(rv.Chain) != v.Replicas+1 {
				return false
			}
		}
		return true
	})
	if got := rs.Matrices(); len(got) != 3 {
		t.Fatalf("the replacement holds %d matrices, want 3 (copied with its ranges)", len(got))
	}
	managedRounds(t, ctx, rnd, d, s, want, 20)
	managedCheck(t, ctx, d, s, want)
	net.Kill(testcluster.Addr(c.Servers[2]))
	managedRounds(t, ctx, rnd, d, s, want, 20)
	managedCheck(t, ctx, d, s, want)
}

// waitFor polls cond until it holds, failing the test when ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A fallback handle cannot be replicated: a managed job refuses it.
func TestManagedRefusesFallback(t *testing.T) {
	c := testcluster.New(t, 2, 1, testcluster.Options{Mem: true, Quiet: true,
		Tweak: func(cfg *postoffice.Config) { cfg.Replicas = 1 }})
	fallback := psf.WithFallback(func(kv.KVMeta, kv.KVPairs[uint8], *kv.KVServer[uint8]) {})
	_, err := psf.NewServer(c.Servers[0], fallback)
	if err == nil || !strings.Contains(err.Error(), "WithFallback") {
		t.Fatalf("NewServer with a fallback in a managed job: %v", err)
	}
	for _, p := range c.Servers {
		if _, err := psf.NewServer(p); err != nil {
			t.Fatal(err)
		}
	}
}

// startSnapshotJob starts a managed job writing snapshots to dir, with psf
// on every server.
func startSnapshotJob(t *testing.T, dir string, servers int) (*testcluster.Cluster, *van.MemNetwork) {
	t.Helper()
	net := van.NewMemNetwork()
	c := testcluster.New(t, servers, 1, testcluster.Options{Network: net, Quiet: true,
		Tweak: func(cfg *postoffice.Config) { cfg.CheckpointDir = dir }})
	for _, p := range c.Servers {
		if _, err := psf.NewServer(p); err != nil {
			t.Fatal(err)
		}
	}
	return c, net
}

// A job killed whole and launched again with its snapshot directory
// (PS_CHECKPOINT_DIR) gets its matrices back as of the last snapshot; with
// another number of servers it stops, saying why.
func TestManagedSnapshotResume(t *testing.T) {
	if testing.Short() {
		t.Skip("relaunches jobs")
	}
	ctx := ctxT(t)
	dir := t.TempDir()
	c, net := startSnapshotJob(t, dir, 3)
	cl, err := psf.NewClient(c.Workers[0])
	if err != nil {
		t.Fatal(err)
	}
	const rows, cols, srows = 4, 12, 3
	d, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "dense", Rows: rows, Cols: cols, RowBlock: 2})
	if err != nil {
		t.Fatal(err)
	}
	s, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "sparse", Type: psf.Sparse, Rows: srows})
	if err != nil {
		t.Fatal(err)
	}
	want := &managedModel{dense: make([][]float64, rows), sparse: make([]map[int64]float64, srows)}
	for r := range want.dense {
		want.dense[r] = make([]float64, cols)
	}
	for r := range want.sparse {
		want.sparse[r] = map[int64]float64{}
	}
	rnd := rand.New(rand.NewPCG(13, 14))
	managedRounds(t, ctx, rnd, d, s, want, 20)
	if _, err := c.Workers[0].Checkpoint(ctx, "psf"); err != nil {
		t.Fatal(err)
	}
	lost := &managedModel{dense: make([][]float64, rows), sparse: make([]map[int64]float64, srows)}
	for r := range want.dense {
		lost.dense[r] = slices.Clone(want.dense[r])
	}
	for r := range want.sparse {
		lost.sparse[r] = map[int64]float64{}
		for k, v := range want.sparse[r] {
			lost.sparse[r][k] = v
		}
	}
	managedRounds(t, ctx, rnd, d, s, lost, 5) // after the snapshot: lost with the job
	for _, p := range c.All() {
		net.Kill(testcluster.Addr(p))
	}

	c2, _ := startSnapshotJob(t, dir, 3)
	cl2, err := psf.NewClient(c2.Workers[0])
	if err != nil {
		t.Fatal(err)
	}
	d2, err := cl2.OpenMatrix(ctx, "dense")
	if err != nil {
		t.Fatal(err)
	}
	s2, err := cl2.OpenMatrix(ctx, "sparse")
	if err != nil {
		t.Fatal(err)
	}
	managedCheck(t, ctx, d2, s2, want)
	managedRounds(t, ctx, rnd, d2, s2, want, 5)
	managedCheck(t, ctx, d2, s2, want)
	c2.Finalize(t)

	// Two servers cannot take matrices laid out for three.
	net3 := van.NewMemNetwork()
	c3 := testcluster.New(t, 2, 1, testcluster.Options{Network: net3, Quiet: true,
		Tweak: func(cfg *postoffice.Config) { cfg.CheckpointDir = dir }})
	for _, p := range c3.Servers {
		if _, err := psf.NewServer(p); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, ctx, "the job to fail", func() bool {
		select {
		case <-c3.Scheduler.Failed():
			return true
		default:
			return false
		}
	})
	if err := c3.Scheduler.Err(); err == nil || !strings.Contains(err.Error(), "psf matrices are laid out for 3 servers") {
		t.Fatalf("the job of 2 servers failed with %v", err)
	}
}
