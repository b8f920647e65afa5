package tests

// The failure model (docs/FAILURES.md's table) with real processes: test_recovery
// jobs, each node a process in a host of its own (network namespaces made
// by scripts/netns.sh), or on loopback where namespaces cannot be made (the
// rows that need no link cut). Every row checks how every process ended
// and when, measured from the fault (a link cut for good, a kill: from the
// fault; a cut that heals: from the healing), and logs one line per process
// for the failure-model table.

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The production setting: heartbeats every second, a node silent for 5 s
// is dead. The promise: every surviving process ends, in completion or a
// non-zero exit naming the fault, within PS_HEARTBEAT_TIMEOUT + 10 s of the
// fault becoming permanent.
var heartbeatEnv = []string{"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=5"}

const (
	modelBound = 15 * time.Second // PS_HEARTBEAT_TIMEOUT + 10 s
	// slack covers process exit and the reaping of the test's children on
	// a loaded machine.
	slack = 3 * time.Second
	// rowRounds is enough rounds (of 100 ms) that no job finishes before
	// its fault has played out.
	rowRounds = 150
)

// row is one failure-model job of test_recovery.
type row struct {
	h *hosts
	j *job
}

// startRow starts a job of servers and workers with env, in namespaces
// (netns) or wherever it can (loopback), and waits until every worker has
// done a few rounds.
func startRow(t *testing.T, netns bool, servers, workers, rounds int, env []string) *row {
	t.Helper()
	var h *hosts
	if netns {
		h = newHosts(t, 1+servers+workers+1) // one host to spare for a replacement
	} else {
		h = newHostsOrLoopback(t, 1+servers+workers+1)
	}
	r := &row{h: h}
	r.j = h.startJob(t, servers, workers, env, bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "100ms")
	for _, w := range r.j.workers {
		w.waitOutput(t, "round 3 done", 30*time.Second)
	}
	return r
}

// killForGood kills victim, a server or a worker, and checks that every
// other process exits non-zero within the bound, naming it.
func (r *row) killForGood(t *testing.T, victim *proc) {
	t.Helper()
	lost := nodeName(victim.role, rank(t, victim))
	ref := time.Now()
	victim.kill()
	rs := r.h.wait(t, ref, modelBound+10*time.Second)
	t.Logf("killed %s (%s):%s", victim.name, lost, summary(rs))
	expectFailed(t, rs, modelBound, lost, victim)
}

// rank returns the rank a node printed ("[worker 1] working ...").
func rank(t *testing.T, p *proc) int {
	t.Helper()
	m := regexp.MustCompile(`\[(?:worker|server) (\d+)\]`).FindStringSubmatch(p.output())
	if m == nil {
		t.Fatalf("%s printed no rank:\n%s", p.name, p.output())
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// nodeName is how errors name a node: "worker 1 (node 11)".
func nodeName(role string, rank int) string {
	id := 2*rank + 8
	if role == "worker" {
		id++
	}
	return fmt.Sprintf("%s %d (node %d)", role, rank, id)
}

// expectFailed checks that every process but those skipped ended with a
// non-zero exit within bound of the fault, saying that the job lost lost.
// It logs each one's last words.
func expectFailed(t *testing.T, rs []result, bound time.Duration, lost string, skip ...*proc) {
	t.Helper()
	for _, r := range rs {
		if skipped(r.name, skip) {
			continue
		}
		if l := lastLines(r.out, 1); testing.Verbose() {
			t.Logf("%s: %s", r.name, l)
		}
		switch {
		case r.running:
			t.Errorf("%s still running %v after the fault: a hang", r.name, r.at)
		case r.code == 0:
			t.Errorf("%s exited 0 although the job lost %s", r.name, lost)
		case r.at > bound+slack:
			t.Errorf("%s ended %v after the fault, past the bound %v", r.name, r.at.Round(100*time.Millisecond), bound)
		case !strings.Contains(r.out, lost):
			t.Errorf("%s failed without naming %s:\n%s", r.name, lost, lastLines(r.out, 5))
		}
	}
}

// expectCompleted checks that every process but those skipped exited 0.
func expectCompleted(t *testing.T, rs []result, skip ...*proc) {
	t.Helper()
	for _, r := range rs {
		if !skipped(r.name, skip) && !r.ok() {
			t.Errorf("%s: %s, want exit 0:\n%s", r.name, r.status(), lastLines(r.out, 5))
		}
	}
}

func skipped(name string, skip []*proc) bool {
	for _, p := range skip {
		if p.name == name {
			return true
		}
	}
	return false
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// counts returns each worker's per-server counts from test_recovery's
// reports ("after N rounds: server0=.. server1=..").
func counts(out string) [][]int {
	var all [][]int
	for _, m := range regexp.MustCompile(`after \d+ rounds: (.*)`).FindAllStringSubmatch(out, -1) {
		var c []int
		for _, f := range strings.Fields(m[1]) {
			if _, v, ok := strings.Cut(f, "="); ok {
				n, _ := strconv.Atoi(v)
				c = append(c, n)
			}
		}
		all = append(all, c)
	}
	return all
}

// Row: a worker killed, no replacement. The scheduler finds it dead (its
// connection closed, or with heartbeats its silence), gives a replacement
// PS_RECOVERY_WAIT (5 s) to come, then stops the job: every other process
// exits non-zero naming the worker. With heartbeats off, the closed
// connection alone tells.
func TestFaultWorkerKilled(t *testing.T) {
	// Parallel: it mostly waits (for a fault's timeouts), so it runs beside the other waiting rows once the package's sequential tests are done (make test's -parallel).
	t.Parallel()
	for _, c := range []struct {
		name string
		env  []string
	}{
		{"heartbeats", heartbeatEnv},
		{"heartbeats and resend", append([]string{"PS_RESEND=1"}, heartbeatEnv...)},
		{"heartbeats off", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := startRow(t, false, 2, 2, rowRounds, c.env)
			r.killForGood(t, r.j.workers[1])
		})
	}
}

// Row: a worker killed and a replacement started: it takes the dead
// worker's id and the job completes; its keys hold its predecessor's
// rounds and its own.
func TestFaultWorkerReplaced(t *testing.T) {
	env := append([]string{"PS_RESEND=1"}, heartbeatEnv...)
	const rounds = 40
	r := startRow(t, false, 2, 2, rounds, env)
	victim := r.j.workers[1]
	victimRank := rank(t, victim)
	victim.kill()
	ref := time.Now()
	repl := r.h.start(t, r.h.n-1, "worker", env, bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "100ms")
	repl.waitOutput(t, "working (recovery=true)", modelBound)
	if got := rank(t, repl); got != victimRank {
		t.Errorf("the replacement has rank %d, want %d", got, victimRank)
	}
	rs := r.h.wait(t, ref, 60*time.Second)
	t.Logf("killed %s, replaced by %s:%s", victim.name, repl.name, summary(rs))
	expectCompleted(t, rs, victim)
	for _, c := range counts(repl.output()) {
		for s, n := range c {
			if n <= rounds {
				t.Errorf("the replacement's key on server %d holds %d: its predecessor's rounds are missing", s, n)
			}
		}
	}
}

// Row: a worker frozen (SIGSTOP, its connections left open) and a
// replacement started: the scheduler finds the frozen one dead by its
// silence, the replacement takes its id, and its connections take over
// the frozen one's identity at the scheduler and the servers (ZeroMQ's
// ROUTER handover, on for a while after a replacement). The job completes.
func TestFaultFrozenWorkerReplaced(t *testing.T) {
	env := append([]string{"PS_RESEND=1"}, heartbeatEnv...)
	const rounds = 60
	r := startRow(t, false, 2, 2, rounds, env)
	victim := r.j.workers[1]
	victimRank := rank(t, victim)
	if err := victim.stop(); err != nil {
		t.Fatal(err)
	}
	defer victim.kill()
	ref := time.Now()
	repl := r.h.start(t, r.h.n-1, "worker", env, bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "100ms")
	repl.waitOutput(t, "working (recovery=true)", modelBound)
	if got := rank(t, repl); got != victimRank {
		t.Errorf("the replacement has rank %d, want %d", got, victimRank)
	}
	repl.waitOutput(t, fmt.Sprintf("after %d rounds", rounds), 60*time.Second)
	victim.kill()
	rs := r.h.wait(t, ref, 60*time.Second)
	t.Logf("froze %s, replaced by %s:%s", victim.name, repl.name, summary(rs))
	expectCompleted(t, rs, victim)
}

// Row: a server killed, no replacement: the workers' requests fail naming
// the server (once its connection has been closed for 1 s without
// resending, on the job's failure with it), and every process exits
// non-zero within the bound.
func TestFaultServerKilled(t *testing.T) {
	for _, resend := range []bool{false, true} {
		t.Run(fmt.Sprintf("resend=%v", resend), func(t *testing.T) {
			env := heartbeatEnv
			if resend {
				env = append([]string{"PS_RESEND=1"}, env...)
			}
			r := startRow(t, false, 2, 1, rowRounds, env)
			r.killForGood(t, r.j.servers[1])
		})
	}
}

// Row: a server killed and restarted: the replacement takes its id (its
// store starts empty), the worker's requests are resent to it, and the job
// completes; the server that lived holds every round exactly once.
func TestFaultServerRestarted(t *testing.T) {
	env := append([]string{"PS_RESEND=1"}, heartbeatEnv...)
	const rounds = 40
	r := startRow(t, false, 2, 1, rounds, env)
	victim := r.j.servers[1]
	victim.kill()
	ref := time.Now()
	repl := r.h.start(t, r.h.n-1, "server", env, bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "100ms")
	repl.waitOutput(t, "serving (recovery=true)", modelBound)
	rs := r.h.wait(t, ref, 60*time.Second)
	t.Logf("killed %s, replaced by %s:%s", victim.name, repl.name, summary(rs))
	expectCompleted(t, rs, victim)
	c := counts(r.h.output())
	if len(c) != 1 || len(c[0]) != 2 {
		t.Fatalf("counts %v", c)
	}
	full, partial := max(c[0][0], c[0][1]), min(c[0][0], c[0][1])
	if full != rounds || partial < 1 || partial >= rounds {
		t.Errorf("server counts %v, want one %d and one in [1, %d)", c[0], rounds, rounds)
	}
}

// Row: the scheduler killed: every process exits non-zero naming the
// scheduler, within the bound (its connections close at once).
func TestFaultSchedulerKilled(t *testing.T) {
	r := startRow(t, false, 2, 2, rowRounds, heartbeatEnv)
	ref := time.Now()
	r.j.sched.kill()
	rs := r.h.wait(t, ref, modelBound+10*time.Second)
	t.Logf("killed the scheduler:%s", summary(rs))
	expectFailed(t, rs, modelBound, "scheduler (node 1)", r.j.sched)
}

// Rows: short faults complete with exact counts: a server's link down 5 s
// (heartbeat timeout 30 s, and heartbeats off), a server stopped 20 s
// (heartbeat timeout 30 s, and heartbeats off). A silence shorter than
// PS_HEARTBEAT_TIMEOUT is no fault.
//
// A link down d seconds leaves a longer silence than d: TCP retransmits a
// lost segment 0.2, 0.6, 1.4, 3.0, 6.2, 12.6 s after sending it (its
// timeout doubles), so the first packet through after the link returns
// can come up to about 2d later. The cut here lasts 5 s plus the time
// netns.sh takes to bring the link down and up, over 6.2 s on a loaded
// machine, and the next retransmission is then 12.6 s after the cut: with
// a 10 s timeout this row failed (burner run 29: both ends of the
// scheduler's link to the server timed out together).
func TestFaultShortFaultsComplete(t *testing.T) {
	// Parallel: it mostly waits (for a fault's timeouts), so it runs beside the other waiting rows once the package's sequential tests are done (make test's -parallel).
	t.Parallel()
	cases := []struct {
		name  string
		netns bool
		env   []string
		fault func(t *testing.T, r *row, p *proc)
		heal  func(t *testing.T, r *row, p *proc)
		for_  time.Duration
	}{
		{"link down 5s", true, []string{"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=30"}, linkDown, linkUp, 5 * time.Second},
		{"link down 5s, heartbeats off, resend", true, []string{"PS_RESEND=1"}, linkDown, linkUp, 5 * time.Second},
		{"stopped 20s", false, []string{"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=30"}, stop, cont, 20 * time.Second},
		{"stopped 20s, heartbeats off", false, nil, stop, cont, 20 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const rounds = 60
			r := startRow(t, c.netns, 2, 1, rounds, c.env)
			victim := r.j.servers[1]
			c.fault(t, r, victim)
			time.Sleep(c.for_) // the fault's length, not a synchronisation
			c.heal(t, r, victim)
			ref := time.Now()
			rs := r.h.wait(t, ref, 60*time.Second)
			t.Logf("%s on %s, then healed:%s", c.name, victim.name, summary(rs))
			expectCompleted(t, rs)
			for _, w := range counts(r.h.output()) {
				if len(w) != 2 || w[0] != rounds || w[1] != rounds {
					t.Errorf("counts %v, want %d on each server", w, rounds)
				}
			}
		})
	}
}

// Row: a worker's connection to a server reset under it (ss -K, as a
// middlebox would, or a link down just longer than PS_LINK_TIMEOUT): the
// transport has it back within 100 ms, but what was in flight on it is
// lost. Without PS_RESEND the worker stops the job naming the server, and
// every process exits non-zero at once (within 5 s); with it the job
// completes, every round counted once.
// On both transports.
func TestFaultConnectionBlip(t *testing.T) {
	for _, c := range []struct {
		name   string
		van    []string
		resend bool
	}{{"zmtp", nil, false}, {"zmtp", nil, true}, {"zmq", zmqEnv, false}, {"zmq", zmqEnv, true}} {
		resend := c.resend
		t.Run(fmt.Sprintf("%s resend=%v", c.name, resend), func(t *testing.T) {
			env := append(append([]string{}, c.van...), heartbeatEnv...)
			if resend {
				env = append(env, "PS_RESEND=1")
			}
			const rounds = 60
			r := startRow(t, false, 1, 1, rounds, env)
			ref := time.Now()
			r.h.resetConnection(t, r.j.workers[0], r.j.servers[0])
			if !resend {
				// At once: 0.3-0.5 s measured; the bound leaves room for a
				// loaded machine.
				const bound = 5 * time.Second
				rs := r.h.wait(t, ref, bound+10*time.Second)
				t.Logf("reset the connection of %s to %s:%s", r.j.workers[0].name, r.j.servers[0].name, summary(rs))
				expectFailed(t, rs, bound, "server 0 (node 8)")
				return
			}
			rs := r.h.wait(t, ref, 60*time.Second)
			t.Logf("reset the connection of %s to %s:%s", r.j.workers[0].name, r.j.servers[0].name, summary(rs))
			expectCompleted(t, rs)
			if c := counts(r.h.output()); len(c) != 1 || len(c[0]) != 1 || c[0][0] != rounds {
				t.Errorf("counts %v, want %d", c, rounds)
			}
		})
	}
}

func linkDown(t *testing.T, r *row, p *proc) { r.h.linkDown(t, p.host) }
func linkUp(t *testing.T, r *row, p *proc)   { r.h.linkUp(t, p.host) }
func stop(t *testing.T, r *row, p *proc) {
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
}
func cont(t *testing.T, r *row, p *proc) {
	if err := p.cont(); err != nil {
		t.Fatal(err)
	}
}

// Row: a server's link down 60 s. Without heartbeats, with or without
// resending, TCP rides it out and the job completes: resending gives up
// only PS_RESEND_GIVEUP (180 s) after a message's first send, and the
// connections' own timeout (PS_LINK_TIMEOUT) is 180 s too. (That a
// message is given up on past PS_RESEND_GIVEUP, every process then
// failing, is the in-process TestLongPartition's row, on a fake clock.)
// With heartbeats every process exits non-zero within the bound of the
// cut, the cut-off server on its own.
func TestFaultLongPartition(t *testing.T) {
	// Parallel: it mostly waits (for a fault's timeouts), so it runs beside the other waiting rows once the package's sequential tests are done (make test's -parallel).
	t.Parallel()
	const outage = 60 * time.Second
	for _, c := range []struct {
		name string
		env  []string
	}{{"defaults: completes", nil}, {"resend: completes", []string{"PS_RESEND=1"}}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const rounds = 40
			r := startRow(t, true, 2, 1, rounds, c.env)
			victim := r.j.servers[1]
			r.h.linkDown(t, victim.host)
			time.Sleep(outage) // the fault's length
			r.h.linkUp(t, victim.host)
			ref := time.Now()
			rs := r.h.wait(t, ref, 90*time.Second) // TCP's backed-off retransmission comes within 2 min
			t.Logf("%s's link down %v, then up:%s", victim.name, outage, summary(rs))
			expectCompleted(t, rs)
			for _, w := range counts(r.h.output()) {
				if len(w) != 2 || w[0] != rounds || w[1] != rounds {
					t.Errorf("counts %v, want %d on each server", w, rounds)
				}
			}
		})
	}
	t.Run("heartbeats: everyone fails", func(t *testing.T) {
		t.Parallel()
		r := startRow(t, true, 2, 1, rowRounds, heartbeatEnv)
		victim := r.j.servers[1]
		lost := nodeName("server", rank(t, victim))
		ref := time.Now()
		r.h.linkDown(t, victim.host)
		rs := r.h.wait(t, ref, modelBound+10*time.Second)
		t.Logf("%s's link down, no end in sight:%s", victim.name, summary(rs))
		expectFailed(t, rs, modelBound, lost, victim)
		expectFailed(t, []result{find(rs, victim.name)}, modelBound, "scheduler (node 1)")
	})
}

// Row: a link down for good is the node being dead: with heartbeats, or
// without them but with a short PS_LINK_TIMEOUT (the connections' own
// ZMTP heartbeats and TCP timeouts drop the dead link), every process
// exits non-zero within the bound, the cut-off one included (it loses the
// scheduler).
func TestFaultLinkDownForGood(t *testing.T) {
	// Parallel: it mostly waits (for a fault's timeouts), so it runs beside the other waiting rows once the package's sequential tests are done (make test's -parallel).
	t.Parallel()
	for _, c := range []struct{ who, how string }{{"worker", "heartbeats"}, {"scheduler", "heartbeats"}, {"worker", "link timeout"}} {
		who, env := c.who, heartbeatEnv
		if c.how == "link timeout" {
			env = []string{"PS_LINK_TIMEOUT=5"}
		}
		t.Run(who+", "+c.how, func(t *testing.T) {
			t.Parallel()
			r := startRow(t, true, 2, 2, rowRounds, env)
			victim, lost := r.j.sched, "scheduler (node 1)"
			if who == "worker" {
				victim = r.j.workers[1]
				lost = nodeName("worker", rank(t, victim))
			}
			ref := time.Now()
			r.h.linkDown(t, victim.host)
			rs := r.h.wait(t, ref, modelBound+10*time.Second)
			t.Logf("%s's link down for good:%s", victim.name, summary(rs))
			expectFailed(t, rs, modelBound, lost, victim)
			if who == "worker" {
				// It loses everyone: with heartbeats the scheduler tells it
				// first; with the link timeout, whichever connection drops
				// first.
				cause := "scheduler (node 1)"
				if c.how == "link timeout" {
					cause = " lost"
					if strings.Contains(find(rs, victim.name).out, "disconnected") {
						cause = "disconnected"
					}
				}
				expectFailed(t, []result{find(rs, victim.name)}, modelBound, cause)
			}
		})
	}
}
