package tests

// State that survives: replicated key ranges (PS_REPLICAS), snapshots
// (PS_CHECKPOINT_DIR) and no silent loss of state, with real processes
// (test_recovery jobs) on loopback or in network namespaces. test_recovery
// checks every key itself: each holds every round pushed, less exactly
// the pushes its worker was told were lost; these tests check how every
// process ended and what was lost.

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// replicaEnv is the production setting with one replica of each range.
var replicaEnv = append([]string{"PS_REPLICAS=1"}, heartbeatEnv...)

// lostReports returns, per worker report, the pushes it lost per server
// ("(lost [0 4 0])").
func lostReports(out string) [][]int {
	var all [][]int
	for _, m := range regexp.MustCompile(`after \d+ rounds: .* \(lost \[([0-9 ]*)\]\)`).FindAllStringSubmatch(out, -1) {
		var l []int
		for _, f := range strings.Fields(m[1]) {
			n, _ := strconv.Atoi(f)
			l = append(l, n)
		}
		all = append(all, l)
	}
	return all
}

// expectNoneLost checks that workers reports came, each with nothing lost
// (test_recovery checked every key against that).
func expectNoneLost(t *testing.T, out string, workers int) {
	t.Helper()
	reports := lostReports(out)
	if len(reports) != workers {
		t.Fatalf("%d worker reports, want %d:\n%s", len(reports), workers, lastLines(out, 20))
	}
	for _, l := range reports {
		for s, n := range l {
			if n != 0 {
				t.Errorf("a worker lost %d pushes on server %d: %v", n, s, reports)
			}
		}
	}
}

// Row: a server killed, no replacement, PS_REPLICAS=1: its ranges fail over
// to their replicas at once and the job completes, no push lost.
func TestReplicationServerKilled(t *testing.T) {
	const rounds = 60
	r := startRow(t, false, 3, 2, rounds, replicaEnv)
	victim := r.j.servers[1]
	ref := time.Now()
	victim.kill()
	rs := r.h.wait(t, ref, 90*time.Second)
	t.Logf("killed %s:%s", victim.name, summary(rs))
	expectCompleted(t, rs, victim)
	expectNoneLost(t, r.h.output(), 2)
}

// Row: a server killed and a replacement started, PS_REPLICAS=1: the
// replacement copies its ranges, takes its own back, and the job completes,
// no push lost.
func TestReplicationServerReplaced(t *testing.T) {
	const rounds = 80
	r := startRow(t, false, 3, 2, rounds, replicaEnv)
	victim := r.j.servers[1]
	ref := time.Now()
	victim.kill()
	repl := r.h.start(t, r.h.n-1, "server", replicaEnv, bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "100ms")
	repl.waitOutput(t, "serving (recovery=true)", modelBound)
	rs := r.h.wait(t, ref, 90*time.Second)
	t.Logf("killed %s, replaced by %s:%s", victim.name, repl.name, summary(rs))
	expectCompleted(t, rs, victim)
	expectNoneLost(t, r.h.output(), 2)
	if !strings.Contains(repl.output(), "serving (recovery=true)") {
		t.Errorf("the replacement did not take the dead server's place:\n%s", repl.output())
	}
}

// Row: a server stopped past PS_HEARTBEAT_TIMEOUT, then continued,
// PS_REPLICAS=1: it is found dead and its ranges fail over; when it runs
// again it finds it did not run for longer than the timeout and stops,
// saying so, without disturbing the job, which completes, no push lost.
func TestReplicationServerStopped(t *testing.T) {
	const rounds = 100
	r := startRow(t, false, 3, 2, rounds, replicaEnv)
	victim := r.j.servers[1]
	if err := victim.stop(); err != nil {
		t.Fatal(err)
	}
	ref := time.Now()
	r.j.workers[0].waitOutput(t, "round 40 done", 60*time.Second) // the job went on without it
	if err := victim.cont(); err != nil {
		t.Fatal(err)
	}
	rs := r.h.wait(t, ref, 90*time.Second)
	t.Logf("stopped %s, continued it later:%s", victim.name, summary(rs))
	expectCompleted(t, rs, victim)
	expectNoneLost(t, r.h.output(), 2)
	v := find(rs, victim.name)
	if v.ok() || !strings.Contains(v.out, "did not run for") {
		t.Errorf("the continued server: %s, want a non-zero exit saying it did not run:\n%s", v.status(), lastLines(v.out, 5))
	}
}

// Rows: a server cut off (its link down for good, or 27 s) and a
// replacement started on another host, PS_REPLICAS=1: the job completes,
// no push lost; the cut-off server stops on its own (it lost the
// scheduler), and what it says when its link returns changes nothing.
func TestReplicationServerCutOff(t *testing.T) {
	// Parallel: it mostly waits (for a fault's timeouts), so it runs beside the other waiting rows once the package's sequential tests are done (make test's -parallel).
	t.Parallel()
	for _, c := range []struct {
		name string
		for_ time.Duration // 0: for good
	}{{"for good", 0}, {"27s", 27 * time.Second}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const rounds = 150
			r := startRow(t, true, 3, 2, rounds, replicaEnv)
			victim := r.j.servers[1]
			r.h.linkDown(t, victim.host)
			ref := time.Now()
			repl := r.h.start(t, r.h.n-1, "server", replicaEnv, bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "100ms")
			repl.waitOutput(t, "serving (recovery=true)", modelBound+10*time.Second)
			if c.for_ > 0 {
				time.Sleep(c.for_ - time.Since(ref)) // the fault's length, not a synchronisation
				r.h.linkUp(t, victim.host)
			}
			rs := r.h.wait(t, ref, 120*time.Second)
			t.Logf("cut %s off %s, replaced by %s:%s", victim.name, c.name, repl.name, summary(rs))
			expectCompleted(t, rs, victim)
			expectNoneLost(t, r.h.output(), 2)
			if v := find(rs, victim.name); v.ok() || v.running {
				t.Errorf("the cut-off server: %s, want it to stop on its own", v.status())
			}
		})
	}
}

// Row (the failure model without replicas): a server cut off for good and
// a replacement started on another host, without PS_RESEND: the workers
// send the replacement what its predecessor left unanswered, and the job
// completes; the replacement started empty, so each worker says exactly
// what it lost (test_recovery accepts losses and checks each key against
// them). It hung every process before.
func TestFaultServerCutOffReplaced(t *testing.T) {
	const rounds = 100
	r := startRow(t, true, 2, 2, rounds, heartbeatEnv)
	victim := r.j.servers[1]
	r.h.linkDown(t, victim.host)
	ref := time.Now()
	repl := r.h.start(t, r.h.n-1, "server", heartbeatEnv, bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "100ms")
	repl.waitOutput(t, "serving (recovery=true)", modelBound+10*time.Second)
	rs := r.h.wait(t, ref, 90*time.Second)
	t.Logf("cut %s off, replaced by %s:%s", victim.name, repl.name, summary(rs))
	expectCompleted(t, rs, victim)
	reports := lostReports(r.h.output())
	if len(reports) != 2 {
		t.Fatalf("worker reports %v", reports)
	}
	for _, l := range reports {
		if len(l) != 2 || l[0] != 0 || l[1] < 1 {
			t.Errorf("lost %v, want nothing on server 0 and what server 1 had", l)
		}
	}
}

// Row (the failure model without replicas): a server killed and a
// replacement started, in a program that does not accept losing state
// (test_recovery -strict): the job stops, every process naming the server,
// its keys and the pushes lost. Never a plain success.
func TestFaultServerRestartedStrict(t *testing.T) {
	env := append([]string{"PS_RESEND=1"}, heartbeatEnv...)
	const rounds = 100
	r := row{h: newHostsOrLoopback(t, 5)}
	r.j = r.h.startJob(t, 2, 1, env, bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "100ms", "-strict")
	r.j.workers[0].waitOutput(t, "round 3 done", 30*time.Second)
	victim := r.j.servers[1]
	victim.kill()
	ref := time.Now()
	repl := r.h.start(t, r.h.n-1, "server", env, bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "100ms", "-strict")
	rs := r.h.wait(t, ref, modelBound+30*time.Second)
	t.Logf("killed %s, replaced by %s:%s", victim.name, repl.name, summary(rs))
	// The worker finds the loss as soon as the replacement is registered,
	// and the job stops while the replacement may still be joining: then
	// the scheduler's notice can miss it, and it says, as truly, that it
	// lost the scheduler before it joined. Every other process names the
	// loss.
	expectFailed(t, rs, modelBound+10*time.Second, "server 1's state was lost", victim, repl)
	if rr := find(rs, repl.name); !strings.Contains(rr.out, "server 1's state was lost") {
		expectFailed(t, []result{rr}, modelBound+10*time.Second, "before this node at")
	}
	if w := find(rs, r.j.workers[0].name); !regexp.MustCompile(`\d+ pushes this worker made to it`).MatchString(w.out) ||
		!strings.Contains(w.out, "key range 1 [") {
		t.Errorf("the worker does not name the keys and the pushes lost:\n%s", lastLines(w.out, 5))
	}
}

// Row (the failure model): a worker stopped past PS_HEARTBEAT_TIMEOUT, a
// replacement started while it is stopped, then the stopped one
// continued: the recovered job completes, and the woken predecessor stops,
// saying it did not run (its connections, claiming the replacement's
// identity from another process, are refused). It stopped the recovered
// job in 5 of 12 runs before.
func TestFaultStoppedWorkerReplacedThenContinued(t *testing.T) {
	// Parallel: it mostly waits (for the stop and the rounds' pauses), so it runs beside the other waiting rows once the package's sequential tests are done (make test's -parallel).
	t.Parallel()
	for i := range 2 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			const rounds = 150
			r := startRow(t, false, 2, 2, rounds, heartbeatEnv)
			victim := r.j.workers[1]
			if err := victim.stop(); err != nil {
				t.Fatal(err)
			}
			ref := time.Now()
			repl := r.h.start(t, r.h.n-1, "worker", heartbeatEnv, bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "100ms")
			repl.waitOutput(t, "working (recovery=true)", modelBound+5*time.Second)
			repl.waitOutput(t, "round 20 done", 30*time.Second)
			if err := victim.cont(); err != nil {
				t.Fatal(err)
			}
			rs := r.h.wait(t, ref, 90*time.Second)
			t.Logf("stopped %s, replaced by %s, continued it:%s", victim.name, repl.name, summary(rs))
			expectCompleted(t, rs, victim)
			v := find(rs, victim.name)
			if v.ok() || !strings.Contains(v.out, "did not run for") || !strings.Contains(v.out, "may have replaced it") {
				t.Errorf("the woken predecessor: %s, want a non-zero exit saying it was stopped and may be replaced:\n%s", v.status(), lastLines(v.out, 5))
			}
		})
	}
}

// Row: a job killed whole (every process) and launched again with the same
// PS_CHECKPOINT_DIR resumes after the last snapshot's round, says so, and
// ends with every key exact; also into another number of servers.
func TestSnapshotRelaunch(t *testing.T) {
	for _, c := range []struct {
		name           string
		servers, again int
		env            []string
	}{
		{"2 servers", 2, 2, nil},
		{"3 servers replicated, relaunched with 2", 3, 2, []string{"PS_REPLICAS=1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			env := append([]string{"PS_CHECKPOINT_DIR=" + dir}, c.env...)
			const rounds = 40
			args := []string{"-rounds", strconv.Itoa(rounds), "-pause", "50ms", "-checkpoint", "10", "-key-layout", "6"}
			h := newHostsOrLoopback(t, 1+c.servers+2)
			j := h.startJob(t, c.servers, 2, env, bin("test_recovery"), args...)
			j.workers[0].waitOutput(t, "round 25 done", 60*time.Second)
			ref := time.Now()
			for _, p := range append(append([]*proc{j.sched}, j.servers...), j.workers...) {
				p.kill()
			}
			h.wait(t, ref, 10*time.Second)

			h2 := newHostsOrLoopback(t, 1+c.again+2)
			j2 := h2.startJob(t, c.again, 2, env, bin("test_recovery"), args...)
			rs := h2.wait(t, time.Now(), 90*time.Second)
			t.Logf("killed the job at round 25, launched it again with %d servers:%s", c.again, summary(rs))
			expectCompleted(t, rs)
			for _, w := range j2.workers {
				if !strings.Contains(w.output(), "after round 20") {
					t.Errorf("%s did not resume after round 20:\n%s", w.name, lastLines(w.output(), 5))
				}
			}
			expectNoneLost(t, h2.output(), 2)
			for _, w := range counts(h2.output()) {
				for s, n := range w {
					if n != rounds {
						t.Errorf("server %d holds %d, want %d", s, n, rounds)
					}
				}
			}
		})
	}
}
