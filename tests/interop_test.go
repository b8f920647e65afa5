package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
)

// cppDir returns where C++ ps-lite's test programs are, built by the
// developer (this project does not build upstream code), from
// PSLITE_CPP_BUILD. Tests that mix Go and C++ nodes need it.
func cppDir(t *testing.T) string {
	dir := os.Getenv("PSLITE_CPP_BUILD")
	if dir == "" {
		t.Skip("set PSLITE_CPP_BUILD to a C++ ps-lite checkout or build directory to run mixed Go/C++ jobs")
	}
	return dir
}

// cppProgram finds C++ ps-lite's test program name (e.g. "test_kv_app") in
// dir, in either upstream build layout: its Makefile's tests/test_kv_app
// (dir is the checkout, or its tests/), CMake's tests/kv_app_test (dir is
// the build directory, or its tests/).
func cppProgram(t *testing.T, dir, name string) string {
	t.Helper()
	cmake := strings.TrimPrefix(name, "test_") + "_test"
	var tried []string
	for _, sub := range []string{"", "tests"} {
		for _, n := range []string{name, cmake} {
			p := filepath.Join(dir, sub, n)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return p
			}
			tried = append(tried, p)
		}
	}
	t.Fatalf("C++ ps-lite's %s is not in PSLITE_CPP_BUILD=%s (tried %s)", name, dir, strings.Join(tried, ", "))
	return ""
}

// cppStartAbort is what a C++ ps-lite server prints when it aborts at the
// start because a worker's request reached it before it had created its
// customer: a race of C++ ps-lite's own, in all-C++ jobs too
// (docs/LIBRARY.md), which a loaded machine makes likelier.
const cppStartAbort = "to wait App 0 customer 0 ready"

// mixedJob runs one scheduler, len(servers) servers and len(workers) worker
// processes, each from the command given (a binary and space-separated
// arguments), with the role appended to the arguments when roleArg is set;
// it fails the test unless every process exits 0 and returns the combined
// output. A job that fails because a C++ server aborted at the start
// (cppStartAbort) is run again, at most twice, saying so.
func mixedJob(t *testing.T, sched string, servers, workers []string, numWorkers int, roleArg bool, extraEnv ...string) string {
	t.Helper()
	for try := 1; ; try++ {
		out, failed := runMixedJob(t, sched, servers, workers, numWorkers, roleArg, extraEnv...)
		if len(failed) == 0 {
			return out
		}
		if try < 3 && strings.Contains(out, cppStartAbort) {
			t.Logf("try %d: a C++ server aborted at the start (C++ ps-lite's own race); running the job again:\n%s", try, strings.Join(failed, "\n"))
			continue
		}
		t.Fatalf("%s\n%s", strings.Join(failed, "\n"), out)
	}
}

// runMixedJob runs mixedJob's job once and returns the combined output and
// the processes that did not exit 0.
func runMixedJob(t *testing.T, sched string, servers, workers []string, numWorkers int, roleArg bool, extraEnv ...string) (string, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env := append(os.Environ(),
		fmt.Sprintf("DMLC_NUM_SERVER=%d", len(servers)),
		fmt.Sprintf("DMLC_NUM_WORKER=%d", numWorkers),
		"DMLC_PS_ROOT_URI=127.0.0.1",
		fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", testcluster.FreePort(t)),
		"DMLC_NODE_HOST=127.0.0.1")
	env = append(env, extraEnv...)
	var out bytes.Buffer
	var mu sync.Mutex
	type proc struct {
		name string
		cmd  *exec.Cmd
	}
	var procs []proc
	start := func(name, role, command string) {
		args := strings.Fields(command)
		bin := args[0]
		args = args[1:]
		if roleArg {
			args = append(args, role)
		}
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(env, "DMLC_ROLE="+role)
		w := &lockedWriter{mu: &mu, w: &out}
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, proc{name, cmd})
	}
	start("scheduler "+filepath.Base(filepath.Dir(sched)), "scheduler", sched)
	for i, b := range servers {
		start(fmt.Sprintf("server %d (%s)", i, b), "server", b)
	}
	for i, b := range workers {
		start(fmt.Sprintf("worker %d (%s)", i, b), "worker", b)
	}
	var failed []string
	for _, p := range procs {
		if err := p.cmd.Wait(); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", p.name, err))
		}
	}
	return out.String(), failed
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestInteropWithCpp(t *testing.T) {
	cpp := cppDir(t)
	g := func(name string) string { return bin(name) }
	c := func(name string) string { return cppProgram(t, cpp, name) }
	// Both test_kv_apps check their sums and exit non-zero when they are
	// wrong; each worker then prints "error: 0, 0" (C++ workers of one
	// process may interleave their lines, so only the prefix is counted).
	kvOK := func(t *testing.T, out string, n int) {
		if got := strings.Count(out, "error: "); got != n {
			t.Errorf("%d of %d workers reported exact results:\n%s", got, n, out)
		}
	}
	t.Run("go scheduler and servers, C++ workers", func(t *testing.T) {
		kvOK(t, mixedJob(t, g("test_kv_app"), []string{g("test_kv_app"), g("test_kv_app")},
			[]string{c("test_kv_app"), c("test_kv_app")}, 2, false), 2)
	})
	t.Run("C++ scheduler and servers, go workers", func(t *testing.T) {
		kvOK(t, mixedJob(t, c("test_kv_app"), []string{c("test_kv_app"), c("test_kv_app")},
			[]string{g("test_kv_app"), g("test_kv_app")}, 2, false), 2)
	})
	t.Run("mixed servers and workers", func(t *testing.T) {
		kvOK(t, mixedJob(t, g("test_kv_app"), []string{c("test_kv_app"), g("test_kv_app")},
			[]string{g("test_kv_app"), c("test_kv_app")}, 2, false), 2)
	})
	// Heartbeats: the Go scheduler answers C++ heartbeats, C++ nodes answer
	// and ignore what Go nodes add to theirs; with a Go and a C++
	// scheduler. (PS_RESEND is left out: C++ ps-lite's own resending aborts
	// now and then, in all-C++ jobs too; see docs/LIBRARY.md.)
	for _, env := range [][]string{{"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=5"}} {
		t.Run("mixed servers and workers, "+strings.Join(env, " "), func(t *testing.T) {
			kvOK(t, mixedJob(t, g("test_kv_app"), []string{c("test_kv_app"), g("test_kv_app")},
				[]string{g("test_kv_app"), c("test_kv_app")}, 2, false, env...), 2)
		})
		t.Run("C++ scheduler, "+strings.Join(env, " "), func(t *testing.T) {
			kvOK(t, mixedJob(t, c("test_kv_app"), []string{g("test_kv_app"), c("test_kv_app")},
				[]string{c("test_kv_app"), g("test_kv_app")}, 2, false, env...), 2)
		})
	}
	t.Run("simple app, C++ scheduler", func(t *testing.T) {
		out := mixedJob(t, c("test_simple_app"), []string{g("test_simple_app")},
			[]string{g("test_simple_app"), c("test_simple_app")}, 2, false)
		if n := strings.Count(out, "handled 100 requests"); n != 2 {
			t.Errorf("%d Go nodes handled all requests:\n%s", n, out)
		}
	})
	t.Run("C++ multi-worker process, go scheduler and servers", func(t *testing.T) {
		kvOK(t, mixedJob(t, g("test_kv_app_multi_workers"),
			[]string{g("test_kv_app_multi_workers"), g("test_kv_app_multi_workers")},
			[]string{c("test_kv_app_multi_workers")}, 2, true), 2)
	})
	// Frames of megabytes go through the zero-copy paths both ways.
	t.Run("large frames, C++ scheduler and servers, go workers", func(t *testing.T) {
		gw := g("test_kv_app") + " -keys=1000000 -repeat=3"
		kvOK(t, mixedJob(t, c("test_kv_app"), []string{c("test_kv_app"), c("test_kv_app")},
			[]string{gw, gw}, 2, false), 2)
	})
	// With the ZMTP key cache on, Go nodes cache key lists between
	// themselves and send C++ nodes plain frames, both ways.
	t.Run("large frames, key cache, mixed servers and workers", func(t *testing.T) {
		gw := g("test_kv_app") + " -keys=1000000 -repeat=3"
		kvOK(t, mixedJob(t, g("test_kv_app"), []string{c("test_kv_app"), gw},
			[]string{gw, c("test_kv_app")}, 2, false, "PS_KEY_CACHE_MB=128"), 2)
	})
	// libzmq puts its PONG to a Go node's PING between two frames of a
	// message when it is sending one: with a PING every 250 ms, many fall
	// inside the C++ servers' large answers.
	t.Run("large frames, C++ scheduler and servers, go workers pinging", func(t *testing.T) {
		gw := g("test_kv_app") + " -keys=200000 -repeat=60"
		kvOK(t, mixedJob(t, c("test_kv_app"), []string{c("test_kv_app"), c("test_kv_app")},
			[]string{gw, gw}, 2, false, "PS_LINK_TIMEOUT=3"), 2)
	})
	t.Run("large frames, go scheduler and servers, C++ workers", func(t *testing.T) {
		out := mixedJob(t, g("test_kv_app_benchmark"), []string{g("test_kv_app_benchmark")},
			[]string{c("test_kv_app_benchmark")}, 1, false)
		if !strings.Contains(out, "Pull average time cost") {
			t.Errorf("the C++ worker did not finish its pull:\n%s", out)
		}
	})
	// The Go nodes on the ZeroMQ transport (libzmq, as the C++ nodes), with
	// C++ nodes and Go nodes on the default ZMTP transport.
	q := onZMQ
	t.Run("zmq scheduler and servers, C++ workers", func(t *testing.T) {
		kvOK(t, mixedJob(t, q("test_kv_app"), []string{q("test_kv_app"), q("test_kv_app")},
			[]string{c("test_kv_app"), c("test_kv_app")}, 2, false, "PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=5"), 2)
	})
	t.Run("C++ scheduler, zmq, zmtp and C++ servers and workers", func(t *testing.T) {
		kvOK(t, mixedJob(t, c("test_kv_app"), []string{q("test_kv_app"), c("test_kv_app")},
			[]string{g("test_kv_app"), q("test_kv_app")}, 2, false), 2)
	})
	t.Run("large frames, C++ scheduler and servers, zmq workers", func(t *testing.T) {
		qw := q("test_kv_app") + " -keys=1000000 -repeat=3"
		kvOK(t, mixedJob(t, c("test_kv_app"), []string{c("test_kv_app"), c("test_kv_app")},
			[]string{qw, qw}, 2, false), 2)
	})
	t.Run("large frames, zmq scheduler and servers, C++ workers", func(t *testing.T) {
		out := mixedJob(t, q("test_kv_app_benchmark"), []string{q("test_kv_app_benchmark")},
			[]string{c("test_kv_app_benchmark")}, 1, false)
		if !strings.Contains(out, "Pull average time cost") {
			t.Errorf("the C++ worker did not finish its pull:\n%s", out)
		}
	})
	t.Run("go multi-worker process, C++ scheduler and servers", func(t *testing.T) {
		kvOK(t, mixedJob(t, c("test_kv_app_multi_workers"),
			[]string{c("test_kv_app_multi_workers"), c("test_kv_app_multi_workers")},
			[]string{g("test_kv_app_multi_workers")}, 2, true), 2)
	})
}
