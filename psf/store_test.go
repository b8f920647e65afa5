package psf_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/psf"
)

func randomModel(rows, cols int, seed uint64) [][]float64 {
	r := rand.New(rand.NewPCG(seed, 3))
	model := make([][]float64, rows)
	for i := range model {
		model[i] = make([]float64, cols)
		if i == 1 {
			continue // a row never written
		}
		for j := range model[i] {
			model[i][j] = r.NormFloat64()
		}
	}
	return model
}

func fill(t *testing.T, ctx context.Context, m *psf.Matrix, model [][]float64) {
	t.Helper()
	for i, row := range model {
		if i == 1 {
			if err := m.Update(ctx, psf.Fill(1, 0)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := m.UpdateRow(ctx, i, row); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t)
	const rows, cols = 5, 17
	model := randomModel(rows, cols, 1)

	a := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	m, err := a.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "w", Rows: rows, Cols: cols, RowBlock: 2, ColBlock: 5})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, ctx, m, model)
	if err := m.Save(ctx, dir); err != nil {
		t.Fatal(err)
	}
	var mf struct {
		Format     int
		Partitions []struct{ File string }
	}
	b, err := os.ReadFile(filepath.Join(dir, "w", "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &mf); err != nil || mf.Format != 2 || len(mf.Partitions) != 3*4 {
		t.Fatalf("meta.json: %v %+v\n%s", err, mf, b)
	}
	for _, p := range mf.Partitions {
		if _, err := os.Stat(filepath.Join(dir, "w", p.File)); err != nil {
			t.Error(err)
		}
	}

	// Into a job of 3 servers, with the saved layout.
	b3 := newJob(t, 3, 1, testcluster.Options{Mem: true})
	m3, err := b3.clients[0].LoadMatrix(ctx, "w", dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := m3.Meta(); got.NumServers != 3 || got.RowBlock != 2 || got.ColBlock != 5 {
		t.Errorf("loaded meta %+v", got)
	}
	checkAll(t, ctx, m3, model)

	// Into an existing matrix with another layout.
	if err := a.clients[0].DeleteMatrix(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	m, err = a.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "w", Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Load(ctx, dir); err != nil {
		t.Fatal(err)
	}
	checkAll(t, ctx, m, model)

	// Saving again replaces the save.
	model2 := randomModel(rows, cols, 2)
	fill(t, ctx, m, model2)
	if err := m.Save(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if err := m3.Load(ctx, dir); err != nil {
		t.Fatal(err)
	}
	checkAll(t, ctx, m3, model2)

	// A corrupt part file fails the load and leaves the matrix as it was,
	// on every server: part 1 of m3's own layout is read by server 1 only.
	dir2 := t.TempDir()
	if err := m3.Save(ctx, dir2); err != nil {
		t.Fatal(err)
	}
	part := filepath.Join(dir2, "w", "part-00001.bin")
	raw, err := os.ReadFile(part)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x40
	if err := os.WriteFile(part, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	fill(t, ctx, m3, model)
	if err := m3.Load(ctx, dir2); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("loading a corrupt file: %v", err)
	}
	checkAll(t, ctx, m3, model)
	if err := os.Remove(part); err != nil {
		t.Fatal(err)
	}
	if err := m3.Load(ctx, dir2); err == nil {
		t.Error("loading with a part file missing succeeded")
	}
	checkAll(t, ctx, m3, model)

	// No save there; another shape.
	if _, err := a.clients[0].LoadMatrix(ctx, "nothing", dir); err == nil {
		t.Error("loading a matrix never saved succeeded")
	}
	other, err := a.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "x", Rows: rows + 1, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "w"), filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	if err := other.Load(ctx, dir); err == nil {
		t.Error("loading a save of another shape succeeded")
	}
	if err := m.Save(ctx, ""); err == nil {
		t.Error("saving to an empty path succeeded")
	}
}

func TestCheckpointRecover(t *testing.T) {
	ctx := ctxT(t)
	ckpt := t.TempDir()
	const rows, cols = 4, 30
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true}, psf.WithCheckpointDir(ckpt))
	m, err := j.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "ck", Rows: rows, Cols: cols, RowBlock: 2, ColBlock: 7})
	if err != nil {
		t.Fatal(err)
	}
	s1, s2, s3 := randomModel(rows, cols, 11), randomModel(rows, cols, 12), randomModel(rows, cols, 13)
	fill(t, ctx, m, s1)
	if err := m.Checkpoint(ctx, 1); err != nil {
		t.Fatal(err)
	}
	fill(t, ctx, m, s2)
	if err := m.Checkpoint(ctx, 2); err != nil {
		t.Fatal(err)
	}
	fill(t, ctx, m, s3)
	if err := m.Recover(ctx, 1); err != nil {
		t.Fatal(err)
	}
	checkAll(t, ctx, m, s1)
	if err := m.Recover(ctx, 2); err != nil {
		t.Fatal(err)
	}
	checkAll(t, ctx, m, s2)
	if err := m.Recover(ctx, 7); err == nil {
		t.Error("recovering a checkpoint never taken succeeded")
	}
	if b, err := os.ReadFile(filepath.Join(ckpt, "latest", "ck")); err != nil || strings.TrimSpace(string(b)) != "2" {
		t.Errorf("latest: %q, %v", b, err)
	}

	// A server "restarts": its psf state is gone, and a new Server restores
	// the latest checkpoint. Its partitions hold checkpoint 2, the other
	// server's keep what was written since.
	fill(t, ctx, m, s3)
	rank := j.c.Servers[1].MyRank()
	j.servers[1].Close()
	s, err := psf.NewServer(j.c.Servers[1], psf.WithCheckpointDir(ckpt))
	if err != nil {
		t.Fatal(err)
	}
	j.servers[1] = s
	if err := s.RestoreLatest(); err != nil {
		t.Fatal(err)
	}
	want := make([][]float64, rows)
	meta := m.Meta()
	for r := range want {
		want[r] = make([]float64, cols)
		for c := range want[r] {
			if meta.PartitionAt(r, int64(c)).Server == rank {
				want[r][c] = s2[r][c]
			} else {
				want[r][c] = s3[r][c]
			}
		}
	}
	checkAll(t, ctx, m, want)

	// Servers without a checkpoint directory refuse checkpoints.
	k := newJob(t, 1, 1, testcluster.Options{Mem: true, Quiet: true})
	mk, err := k.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "ck", Rows: 1, Cols: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := mk.Checkpoint(ctx, 1); err == nil {
		t.Error("checkpoint without a checkpoint directory succeeded")
	}
}

// A server process dies and a new one takes its place (heartbeats declare
// the old one dead): the new one restores its partitions from the latest
// checkpoint before answering anything.
func TestRestartedServerRestores(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a heartbeat timeout")
	}
	ctx := ctxT(t)
	ckpt := t.TempDir()
	hb := func(c *postoffice.Config) {
		c.HeartbeatInterval = 100 * time.Millisecond
		c.HeartbeatTimeout = 600 * time.Millisecond
	}
	j := newJob(t, 2, 1, testcluster.Options{Tweak: hb, Quiet: true}, psf.WithCheckpointDir(ckpt))
	j.clients[0].AcceptStateLoss() // the changes since the checkpoint are lost
	const rows, cols = 3, 40
	m, err := j.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "rs", Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := randomModel(rows, cols, 21), randomModel(rows, cols, 22)
	fill(t, ctx, m, s1)
	if err := m.Checkpoint(ctx, 5); err != nil {
		t.Fatal(err)
	}
	fill(t, ctx, m, s2)

	old := j.c.Servers[1]
	rank := old.MyRank()
	if err := old.Finalize(ctx, 0, false); err != nil {
		t.Fatal(err)
	}
	p := j.c.NewNode(message.RoleServer, nil)
	j.c.Servers[1] = p // finalized with the others
	if err := p.Start(ctx, 0, false); err != nil {
		t.Fatal(err)
	}
	if !p.IsRecovery() || p.MyRank() != rank {
		t.Fatalf("replacement: recovery %v, rank %d (want %d)", p.IsRecovery(), p.MyRank(), rank)
	}
	if _, err := psf.NewServer(p, psf.WithCheckpointDir(ckpt)); err != nil {
		t.Fatal(err)
	}
	want := make([][]float64, rows)
	meta := m.Meta()
	for r := range want {
		want[r] = make([]float64, cols)
		for c := range want[r] {
			if meta.PartitionAt(r, int64(c)).Server == rank {
				want[r][c] = s1[r][c]
			} else {
				want[r][c] = s2[r][c]
			}
		}
	}
	// The worker learns of the new server shortly after it started; a
	// request sent to the dead one fails or is not answered, so retry
	// (bounded).
	var got [][]float64
	for deadline := time.Now().Add(15 * time.Second); ; {
		short, cancel := context.WithTimeout(ctx, time.Second)
		got, err = m.GetRows(short, []int{0, 1, 2})
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	for r := range want {
		checkRow(t, "restored row", got[r], want[r])
	}
	if err := j.clients[0].StateLoss(); err == nil {
		t.Error("the client did not hear of the loss")
	}
	j.c.Finalize(t)
}

// A deleted matrix does not come back: DeleteMatrix removes its
// checkpoints, so a server that restarts and restores the latest
// checkpoints does not restore it, and it can be created again with
// another shape.
func TestDeleteRemovesCheckpoints(t *testing.T) {
	ctx := ctxT(t)
	ckpt := t.TempDir()
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true}, psf.WithCheckpointDir(ckpt))
	cl := j.clients[0]
	m, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "del", Rows: 3, Cols: 10})
	if err != nil {
		t.Fatal(err)
	}
	keep, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "keep", Rows: 2, Cols: 10})
	if err != nil {
		t.Fatal(err)
	}
	model := randomModel(3, 10, 41)
	fill(t, ctx, m, model)
	fill(t, ctx, keep, model[:2])
	for id := int64(1); id <= 2; id++ {
		if err := m.Checkpoint(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := keep.Checkpoint(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := cl.DeleteMatrix(ctx, "del"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"latest/del", "ckpt-1/del", "ckpt-2/del"} {
		if _, err := os.Stat(filepath.Join(ckpt, p)); !os.IsNotExist(err) {
			t.Errorf("%s after DeleteMatrix: %v", p, err)
		}
	}
	for _, p := range []string{"latest/keep", "ckpt-2/keep/meta.json"} {
		if _, err := os.Stat(filepath.Join(ckpt, p)); err != nil {
			t.Errorf("another matrix's checkpoint: %v", err)
		}
	}
	// Server 1 restarts and restores the latest checkpoints.
	j.servers[1].Close()
	s, err := psf.NewServer(j.c.Servers[1], psf.WithCheckpointDir(ckpt))
	if err != nil {
		t.Fatal(err)
	}
	j.servers[1] = s
	if err := s.RestoreLatest(); err != nil {
		t.Fatal(err)
	}
	for _, meta := range s.Matrices() {
		if meta.Name == "del" {
			t.Errorf("the restarted server restored the deleted matrix: %+v", meta)
		}
	}
	if _, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "del", Rows: 5, Cols: 7}); err != nil {
		t.Errorf("creating the deleted matrix again with another shape: %v", err)
	}
	// Deleting a matrix that has no checkpoint, or does not exist, is fine.
	if err := cl.DeleteMatrix(ctx, "del"); err != nil {
		t.Error(err)
	}
	if err := cl.DeleteMatrix(ctx, "never"); err != nil {
		t.Error(err)
	}
	checkAll(t, ctx, keep, model[:2])
}
