package faults_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/snapshot"
	"github.com/gopslite/pslite/van"
)

// Snapshots to disk (PS_CHECKPOINT_DIR): a job killed whole and launched
// again with the same directory resumes from its last snapshot, exactly.

// snapJob is a job whose workers push ones to a key of their own on every
// range, round by round.
type snapJob struct {
	t       *testing.T
	c       *testcluster.Cluster
	net     *van.MemNetwork
	workers []*kv.KVWorker[int64]
	keys    [][]uint64 // per worker
}

func startSnapJob(t *testing.T, dir string, servers, workers, replicas int) *snapJob {
	t.Helper()
	net := van.NewMemNetwork()
	c := testcluster.New(t, servers, workers, testcluster.Options{Network: net, Quiet: true, Tweak: func(cfg *postoffice.Config) {
		cfg.CheckpointDir = dir
		cfg.Replicas = replicas
		cfg.MetricsAddr = "127.0.0.1:0" // collect metrics (and serve them on a port of the kernel's choice)
	}})
	for _, p := range c.Servers {
		s, err := kv.NewKVServer[int64](p, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetStore(kv.NewDefaultHandle[int64]()); err != nil {
			t.Fatal(err)
		}
	}
	j := &snapJob{t: t, c: c, net: net}
	for i, p := range c.Workers {
		w, err := kv.NewKVWorker[int64](p, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		j.workers = append(j.workers, w)
		var keys []uint64
		// A key in the middle of each range of a job of 2, 3 and 5 servers,
		// so that a relaunch with another number of servers moves them.
		for _, r := range postoffice.KeyRanges(7) {
			keys = append(keys, r.Begin+uint64(i))
		}
		j.keys = append(j.keys, keys)
	}
	return j
}

// rounds has every worker push ones rounds times.
func (j *snapJob) rounds(n int) {
	j.t.Helper()
	for range n {
		err := testcluster.Each(j.c.Workers, func(p *postoffice.Postoffice) error {
			i := p.MyRank()
			w := j.workers[i]
			ones := make([]int64, len(j.keys[i]))
			for k := range ones {
				ones[k] = 1
			}
			ts, err := w.Push(j.keys[i], ones, nil)
			if err != nil {
				return err
			}
			return w.Wait(ts)
		})
		if err != nil {
			j.t.Fatal(err)
		}
	}
}

// check pulls every worker's keys and expects want in each.
func (j *snapJob) check(want int64) {
	j.t.Helper()
	for i, w := range j.workers {
		var got []int64
		ts, err := w.Pull(j.keys[i], &got, nil)
		if err == nil {
			err = w.Wait(ts)
		}
		if err != nil {
			j.t.Fatal(err)
		}
		for k, v := range got {
			if v != want {
				j.t.Fatalf("worker %d's key %d holds %d, want %d", i, k, v, want)
			}
		}
	}
}

// checkpoint has worker 0 take a snapshot, all workers being at a barrier.
func (j *snapJob) checkpoint(meta string) uint64 {
	j.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := testcluster.Each(j.c.Workers, func(p *postoffice.Postoffice) error {
		return p.Barrier(ctx, 0, message.WorkerGroup)
	}); err != nil {
		j.t.Fatal(err)
	}
	gen, err := j.c.Workers[0].Checkpoint(ctx, meta)
	if err != nil {
		j.t.Fatal(err)
	}
	return gen
}

// killAll ends every process of the job at once, as a whole job killed.
func (j *snapJob) killAll() {
	for _, p := range j.c.All() {
		j.net.Kill(testcluster.Addr(p))
	}
}

func TestSnapshotResume(t *testing.T) {
	for _, c := range []struct {
		name              string
		servers, replicas int
		again             int // servers of the relaunched job
	}{
		{"2 servers", 2, 0, 2},
		{"3 servers, replicas 1", 3, 1, 3},
		{"2 servers, relaunched with 3", 2, 0, 3},
		{"3 servers replicated, relaunched with 2", 3, 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			j := startSnapJob(t, dir, c.servers, 2, c.replicas)
			j.rounds(4)
			gen := j.checkpoint("round=4")
			j.rounds(3)
			gen2 := j.checkpoint("round=7")
			if gen2 <= gen {
				t.Fatalf("second snapshot %d after %d", gen2, gen)
			}
			j.rounds(2) // lost with the job
			j.killAll()

			k := startSnapJob(t, dir, c.again, 2, c.replicas)
			for _, p := range append(k.c.Workers, k.c.Servers...) {
				if g, meta := p.Restored(); g != gen2 || meta != "round=7" {
					t.Fatalf("%s resumed from %d %q, want %d \"round=7\"", name(p), g, meta, gen2)
				}
			}
			k.check(7)
			k.rounds(1)
			k.check(8)
			k.c.Finalize(t)
		})
	}
}

// TestSnapshotFiles checks what a snapshot leaves on disk: a description
// with the program's meta, every range written by every server holding
// it, the mark of a complete snapshot, and old snapshots pruned.
func TestSnapshotFiles(t *testing.T) {
	dir := t.TempDir()
	j := startSnapJob(t, dir, 3, 2, 1)
	j.rounds(1)
	var gens []uint64
	for i := range 5 {
		gens = append(gens, j.checkpoint(fmt.Sprintf("round=%d", i)))
	}
	committed, err := snapshot.Committed(dir)
	if err != nil || len(committed) != 3 || committed[2] != gens[4] {
		t.Fatalf("complete snapshots %v (%v), want the last 3 of %v", committed, err, gens)
	}
	m, err := snapshot.ReadMeta(dir, gens[4])
	if err != nil || m.Meta != "round=4" || m.Servers != 3 || m.Replicas != 1 {
		t.Fatalf("meta %+v, %v", m, err)
	}
	for r := 0; r < 3; r++ {
		files, _ := filepath.Glob(filepath.Join(snapshot.GenDir(dir, gens[4]), "app-0", fmt.Sprintf("range-%d-of-3.s*.snap", r)))
		if len(files) != 2 {
			t.Errorf("range %d written by %d servers, want 2 (head and replica): %v", r, len(files), files)
		}
	}
	if _, err := os.Stat(snapshot.GenDir(dir, gens[0])); !os.IsNotExist(err) {
		t.Errorf("snapshot %d not pruned: %v", gens[0], err)
	}
	// The metrics say so: every server wrote its two ranges (head and
	// replica) of each snapshot and marked the last complete.
	for _, p := range j.c.Servers {
		m := p.Metrics()
		if ok, bad := m.Value("pslite_snapshot_write_seconds", map[string]string{"outcome": "ok"}), m.Value("pslite_snapshot_write_seconds", map[string]string{"outcome": "error"}); ok != 2*5 || bad != 0 {
			t.Errorf("%s: %v range writes, %v failed, want 10 and 0", name(p), ok, bad)
		}
		if g := m.Value("pslite_snapshot_committed_generation", nil); g != float64(gens[4]) {
			t.Errorf("%s: committed generation %v, want %d", name(p), g, gens[4])
		}
	}
	j.c.Finalize(t)
}
