package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The rest of the tests run on the default transport, ZMTP spoken in Go
// (van/zmtptransport). The ones here run the main jobs and rows of the
// failure model on the other, libzmq through pebbe/zmq4
// (van/zmqtransport), and both transports in one job.

// zmqEnv selects the ZeroMQ transport (libzmq).
var zmqEnv = []string{"DMLC_PS_VAN_TYPE=zmq"}

// onZMQ returns the command running program name on the ZeroMQ transport
// (for mixedJob, which otherwise gives every process the same
// environment).
func onZMQ(name string) string { return "env DMLC_PS_VAN_TYPE=zmq " + bin(name) }

// The ps-lite programs launched the usual way, every node on the ZeroMQ
// transport: TCP and Unix sockets, large frames, and lost messages resent.
func TestZMQPrograms(t *testing.T) {
	for _, c := range []struct {
		van  []string
		prog string
		s, w int
		env  []string
		want string
		args []string
	}{
		{zmqEnv, "test_kv_app", 2, 2, nil, "error: 0, 0", nil},
		{zmqEnv, "test_kv_app", 2, 2, []string{"DMLC_LOCAL=1"}, "error: 0, 0", nil},
		{zmqEnv, "test_kv_app", 2, 2, []string{"PS_RESEND=1", "PS_DROP_MSG=10", "PS_RESEND_TIMEOUT=100", "PS_HEARTBEAT_INTERVAL=1"}, "error: 0, 0", nil},
		// A PING every 500 ms among 300 rounds of pushes and pulls, on both
		// transports (on ZMTP a PING written alone once corrupted the next
		// run of messages; van/zmtptransport's TestPingsInterleaveWithMessages
		// pings every 2 ms in one process). PS_LINK_TIMEOUT=1 dropped a link
		// of a process starved for a second under make test's load.
		{zmqEnv, "test_kv_app", 2, 2, []string{"PS_LINK_TIMEOUT=6"}, "error: 0, 0", []string{"-keys=20000", "-repeat=300"}},
		{nil, "test_kv_app", 2, 2, []string{"PS_LINK_TIMEOUT=6"}, "error: 0, 0", []string{"-keys=20000", "-repeat=300"}},
		{zmqEnv, "test_simple_app", 2, 2, nil, "handled 100 requests", nil},
		{zmqEnv, "test_kv_app_benchmark", 1, 1, nil, "Pull average time cost", nil},
	} {
		env := append(append([]string{}, c.van...), c.env...)
		t.Run(fmt.Sprintf("%s/%dx%d %s", c.prog, c.s, c.w, strings.Join(env, " ")), func(t *testing.T) {
			args := append([]string{fmt.Sprint(c.s), fmt.Sprint(c.w), bin(c.prog)}, c.args...)
			out := launch(t, env, "local.sh", args...)
			want := c.w
			if c.prog == "test_kv_app_benchmark" {
				want = 1
			}
			if n := strings.Count(out, c.want); n < want {
				t.Errorf("%d of %d reported %q:\n%s", n, want, c.want, out)
			}
		})
	}
}

// Nodes on the ZMTP transport and on the ZeroMQ one (libzmq) in one job,
// over TCP and over Unix sockets (libzmq's ipc://).
func TestZMTPMixedWithZeroMQ(t *testing.T) {
	z, g := bin, onZMQ
	kv := "test_kv_app"
	for _, c := range []struct {
		name             string
		sched            string
		servers, workers []string
		env              []string
	}{
		{"zmq scheduler", g(kv), []string{z(kv), g(kv)}, []string{g(kv), z(kv)}, nil},
		{"zmtp scheduler", z(kv), []string{g(kv), z(kv)}, []string{z(kv), g(kv)}, []string{"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=5"}},
		{"ipc", z(kv), []string{z(kv), g(kv)}, []string{g(kv), z(kv)}, []string{"DMLC_LOCAL=1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := mixedJob(t, c.sched, c.servers, c.workers, len(c.workers), false, c.env...)
			if n := strings.Count(out, "error: 0, 0"); n != 2 {
				t.Errorf("%d of 2 workers reported exact results:\n%s", n, out)
			}
		})
	}
}

// Rows of the failure model on the ZeroMQ transport: a worker killed, a
// server killed (requests resent, then failed), a worker stopped and a
// link cut with only the link timeout (libzmq's heartbeats) to notice
// them, a frozen worker replaced (its replacement's connections take over
// its identity, ZMQ_ROUTER_HANDOVER).
func TestZMQFaults(t *testing.T) {
	// Parallel: it mostly waits (for a fault's timeouts), so it runs beside the other waiting rows once the package's sequential tests are done (make test's -parallel).
	t.Parallel()
	env := append(append([]string{}, zmqEnv...), heartbeatEnv...)
	t.Run("worker killed", func(t *testing.T) {
		t.Parallel()
		r := startRow(t, false, 2, 2, rowRounds, env)
		r.killForGood(t, r.j.workers[1])
	})
	t.Run("server killed, resend", func(t *testing.T) {
		t.Parallel()
		r := startRow(t, false, 2, 1, rowRounds, append([]string{"PS_RESEND=1"}, env...))
		r.killForGood(t, r.j.servers[1])
	})
	// Heartbeats off: the transport's own PINGs find a stopped process
	// (its kernel still acknowledges TCP) and a link cut for good.
	linkEnv := append(append([]string{}, zmqEnv...), "PS_LINK_TIMEOUT=5")
	t.Run("worker stopped, link timeout only", func(t *testing.T) {
		t.Parallel()
		r := startRow(t, false, 2, 2, rowRounds, linkEnv)
		victim := r.j.workers[1]
		lost := nodeName("worker", rank(t, victim))
		ref := time.Now()
		if err := victim.stop(); err != nil {
			t.Fatal(err)
		}
		defer victim.kill()
		// The stopped one never exits: kill it once every other process
		// has (they are what the row is about), rather than wait out the
		// bound for it.
		r.h.mu.Lock()
		others := append([]*proc(nil), r.h.procs...)
		r.h.mu.Unlock()
		go func() {
			for _, p := range others {
				if p != victim {
					<-p.done
				}
			}
			victim.kill()
		}()
		rs := r.h.wait(t, ref, modelBound+10*time.Second)
		t.Logf("stopped %s:%s", victim.name, summary(rs))
		expectFailed(t, rs, modelBound, lost, victim)
	})
	t.Run("link down for good, link timeout only", func(t *testing.T) {
		t.Parallel()
		r := startRow(t, true, 2, 2, rowRounds, linkEnv)
		victim := r.j.workers[1]
		lost := nodeName("worker", rank(t, victim))
		ref := time.Now()
		r.h.linkDown(t, victim.host)
		rs := r.h.wait(t, ref, modelBound+10*time.Second)
		t.Logf("%s's link down for good:%s", victim.name, summary(rs))
		expectFailed(t, rs, modelBound, lost, victim)
		expectFailed(t, []result{find(rs, victim.name)}, modelBound, "")
	})
	t.Run("frozen worker replaced", func(t *testing.T) {
		t.Parallel()
		env := append([]string{"PS_RESEND=1"}, env...)
		const rounds = 60
		r := startRow(t, false, 2, 2, rounds, env)
		victim := r.j.workers[1]
		if err := victim.stop(); err != nil {
			t.Fatal(err)
		}
		defer victim.kill()
		ref := time.Now()
		repl := r.h.start(t, r.h.n-1, "worker", env, bin("test_recovery"), "-rounds", fmt.Sprint(rounds), "-pause", "100ms")
		repl.waitOutput(t, "working (recovery=true)", modelBound)
		repl.waitOutput(t, fmt.Sprintf("after %d rounds", rounds), 60*time.Second)
		victim.kill()
		rs := r.h.wait(t, ref, 60*time.Second)
		expectCompleted(t, rs, victim)
	})
}
