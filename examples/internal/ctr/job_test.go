package ctr

// In-process jobs (internal/testcluster, over the in-memory network): the
// servers' stores installed with SetStore as the program does, workers
// training as the program does, with and without replication.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/postoffice"
)

// synthData writes a small seeded training and test set and returns their
// paths.
func synthData(t *testing.T) (train, test string) {
	t.Helper()
	dir := t.TempDir()
	train, test = filepath.Join(dir, "train.svm"), filepath.Join(dir, "test.svm")
	cfg, err := parseFlags([]string{"-mode=synth", "-out=" + train, "-test-out=" + test, "-rows=1200", "-test-rows=300",
		"-ids=300", "-nnz=12", "-informative=0.3", "-seed=4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(cfg, io.Discard); err != nil {
		t.Fatal(err)
	}
	return train, test
}

// jobResult is what an in-process job leaves.
type jobResult struct {
	out   string // worker 0's output
	model []byte // the model file
	c     *testcluster.Cluster
}

// inProcessJob trains with args on servers and workers in this process
// (args[0] may name the program, lr, fm or mvm; lr when it is a flag);
// tweak edits every node's configuration, during (if set) runs beside the
// workers (with each server's store of app 0) and may kill servers, whose
// ranks it returns.
func inProcessJob(t *testing.T, servers, workers int, args []string, tweak func(*postoffice.Config),
	during func(c *testcluster.Cluster, stores []*Store) []int) jobResult {
	t.Helper()
	model := filepath.Join(t.TempDir(), "model")
	program := kindLR
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		program, args = args[0], args[1:]
	}
	cfg, err := parseProgramFlags(program, append(args, "-model="+model), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, servers, workers, testcluster.Options{Mem: true, Tweak: tweak, Quiet: true})
	stores := make([]*Store, servers)
	apps := make([][]*Store, servers)
	for i, p := range c.Servers {
		if apps[i], err = serve(p, cfg); err != nil {
			t.Fatal(err)
		}
		stores[i] = apps[i][0]
	}
	outs := make([]bytes.Buffer, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i, p := range c.Workers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = work(p, cfg, &outs[i]) }()
	}
	var killed []int
	if during != nil {
		killed = during(c, stores)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the job did not end within 2 minutes")
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, outs[0].String())
		}
	}
	// Finalize the nodes still alive, then check what each server saw.
	alive := []*postoffice.Postoffice{c.Scheduler}
	for i, p := range c.Servers {
		if !containsInt(killed, i) {
			alive = append(alive, p)
		}
	}
	alive = append(alive, c.Workers...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := testcluster.Each(alive, func(p *postoffice.Postoffice) error { return p.Finalize(ctx, 0, true) }); err != nil {
		t.Fatalf("finalize: %v", err)
	}
	for i, ss := range apps {
		if containsInt(killed, i) {
			continue
		}
		for app, s := range ss {
			var line bytes.Buffer
			if err := serverReport(s, cfg, i, app, &line); err != nil {
				t.Errorf("%v\n%s", err, line.String())
			}
		}
	}
	b, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	return jobResult{out: outs[0].String(), model: b, c: c}
}

func containsInt(s []int, x int) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

func replicas(k int) func(*postoffice.Config) {
	return func(c *postoffice.Config) { c.Replicas = k }
}

// finalLine returns the output's final line without its timings.
func finalLine(t *testing.T, out string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "final: ") {
			l, _, _ = strings.Cut(l, ";")
			return l
		}
	}
	t.Fatalf("no final line:\n%s", out)
	return ""
}

// bspArgs trains FTRL under BSP on the synthetic set: with two workers a
// BSP run is deterministic, whatever the number of servers.
func bspArgs(t *testing.T, epochs int) []string {
	train, test := synthData(t)
	return []string{"-train=" + train, "-test=" + test, "-opt=ftrl", "-alpha=0.1", "-beta=0.1", "-batch=40",
		"-sync=bsp", fmt.Sprintf("-epochs=%d", epochs)}
}

// TestManagedJobSameModel trains under BSP with 3 servers, each range on
// two of them (PS_REPLICAS=1): the model is the one of the job without
// replication, bit for bit, and of a job of 2 servers.
func TestManagedJobSameModel(t *testing.T) {
	args := bspArgs(t, 3)
	plain := inProcessJob(t, 3, 2, args, nil, nil)
	managed := inProcessJob(t, 3, 2, args, replicas(1), nil)
	two := inProcessJob(t, 2, 2, args, nil, nil)
	if !strings.Contains(string(plain.model), "state ftrl") {
		t.Fatalf("a model without FTRL state:\n%s", plain.model)
	}
	sameModel(t, plain, "the one of 3 servers without replication", map[string]jobResult{"PS_REPLICAS=1": managed, "2 servers": two})
	t.Log(finalLine(t, plain.out))
}

// sameModel checks that every job of runs ended with want's model, bit for
// bit, and its final line; what names want in the messages.
func sameModel(t *testing.T, want jobResult, what string, runs map[string]jobResult) {
	t.Helper()
	for name, r := range runs {
		if !bytes.Equal(r.model, want.model) {
			t.Errorf("%s: the model differs from %s", name, what)
		}
		if a, b := finalLine(t, r.out), finalLine(t, want.out); a != b {
			t.Errorf("%s: %q, %s %q", name, a, what, b)
		}
	}
}

// killAfterSteps is an inProcessJob's during: once server victim applied
// 8 BSP steps, its node is killed.
func killAfterSteps(t *testing.T, victim int) func(c *testcluster.Cluster, stores []*Store) []int {
	return func(c *testcluster.Cluster, stores []*Store) []int {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if st, _ := stores[victim].Stats(); st.StepsApplied >= 8 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the job does not train")
			}
			time.Sleep(time.Millisecond)
		}
		c.Network.Kill(testcluster.Addr(c.Servers[victim]))
		return []int{victim}
	}
}

// TestManagedJobServerLost kills a server in the middle of a BSP job with
// PS_REPLICAS=1: the job goes on on the other two, and ends with the model
// of a job that lost nothing.
func TestManagedJobServerLost(t *testing.T) {
	if testing.Short() {
		t.Skip("a job with a server killed")
	}
	args := bspArgs(t, 4)
	plain := inProcessJob(t, 3, 2, args, nil, nil)
	for victim := range 3 {
		t.Run(fmt.Sprintf("server%d", victim), func(t *testing.T) {
			// Once the victim applied some steps of the first epoch.
			r := inProcessJob(t, 3, 2, args, replicas(1), killAfterSteps(t, victim))
			v := r.c.Scheduler.View()
			for rg := range v.Ranges {
				if v.Ranges[rg].Holds(victim) {
					t.Errorf("the killed server still holds range %d: %+v", rg, v.Ranges[rg])
				}
			}
			if !bytes.Equal(r.model, plain.model) {
				t.Errorf("the model differs from the one of a job without a loss")
			}
			if a, b := finalLine(t, r.out), finalLine(t, plain.out); a != b {
				t.Errorf("%q, without a loss %q", a, b)
			}
		})
	}
}

func checkpointDir(dir string) func(*postoffice.Config) {
	return func(c *postoffice.Config) { c.CheckpointDir = dir }
}

// copyDir copies the files under src to a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestCheckpointResume: with PS_CHECKPOINT_DIR worker 0 has the servers
// write a snapshot after every epoch; a job launched again on it starts
// from the last one's model, on as many servers as before or on more
// (the same model either way, under BSP), and not from scratch.
func TestCheckpointResume(t *testing.T) {
	args := bspArgs(t, 2)
	dir := t.TempDir()
	first := inProcessJob(t, 2, 2, args, checkpointDir(dir), nil)
	same, more := copyDir(t, dir), copyDir(t, dir)
	resumed := inProcessJob(t, 2, 2, args, checkpointDir(same), nil)
	wider := inProcessJob(t, 3, 2, args, both(checkpointDir(more), replicas(1)), nil)
	for name, r := range map[string]jobResult{"2 servers": resumed, "3 servers, PS_REPLICAS=1": wider} {
		if !strings.Contains(r.out, "lr: the servers resumed from snapshot 2 (fold 1 epoch 2): training starts from its model") {
			t.Errorf("%s: no resume:\n%s", name, r.out)
		}
		if bytes.Equal(r.model, first.model) {
			t.Errorf("%s: the model of a job that trained twice as long is the first job's", name)
		}
		if a, b := epochLoss(t, r.out), epochLoss(t, first.out); a >= b {
			t.Errorf("%s: the first epoch's test loss %.4f, from scratch %.4f: not a warm start", name, a, b)
		}
	}
	if !bytes.Equal(resumed.model, wider.model) {
		t.Error("resumed on 3 servers, the job trains another model than on 2")
	}
}

func both(fs ...func(*postoffice.Config)) func(*postoffice.Config) {
	return func(c *postoffice.Config) {
		for _, f := range fs {
			f(c)
		}
	}
}

// epochLoss returns the test loss of the first epoch line of out.
func epochLoss(t *testing.T, out string) float64 {
	t.Helper()
	i := strings.Index(out, "test-loss ")
	if i < 0 {
		t.Fatalf("no epoch line:\n%s", out)
	}
	var loss float64
	if _, err := fmt.Sscanf(out[i:], "test-loss %g", &loss); err != nil {
		t.Fatal(err)
	}
	return loss
}
