package control

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gopslite/pslite/message"
)

var all = []string{"scheduler", "server0", "server1", "worker0", "worker1"}

func heartbeatsOn(c *Config) {
	c.HeartbeatInterval = time.Second
	c.HeartbeatTimeout = 5 * time.Second
}

func TestJoinAssignsIDsInAddressOrder(t *testing.T) {
	s := newSim(t, 2, 2, nil)
	s.startAll()
	want := map[string]int32{"scheduler": 1, "server0": 8, "server1": 10, "worker0": 9, "worker1": 11}
	for name, id := range want {
		n := s.node(name)
		if n.core.Phase() != PhaseReady || n.core.Me().ID != id {
			t.Errorf("%s: phase %v id %d, want ready with id %d", name, n.core.Phase(), n.core.Me().ID, id)
		}
		if n.count(EventReady) != 1 {
			t.Errorf("%s: %d ready events", name, n.count(EventReady))
		}
	}
	// Servers talk to workers and the scheduler, not to servers.
	if _, ok := s.node("server0").conns[10]; ok {
		t.Error("a server connected to a server")
	}
	if c := s.node("server0").conns[message.Scheduler]; c.ident != "ps8" {
		t.Errorf("server0 talks to the scheduler as %q, want ps8", c.ident)
	}
}

func TestBarrierCountsDistinctMembersAndReleasesServersFirst(t *testing.T) {
	s := newSim(t, 2, 2, nil)
	s.startAll()
	// worker0 asks twice (a resend): it must count once.
	w := s.node("worker0")
	outs, _ := w.core.Barrier(0, message.AllGroup, s.now)
	s.apply(w, outs)
	s.apply(w, outs)
	s.barrier(message.AllGroup, "scheduler", "server0", "server1")
	if n := s.node("server0").count(EventBarrierDone); n != 0 {
		t.Fatalf("released with worker1 missing (%d releases)", n)
	}
	// Watch the order the scheduler sends releases in.
	outs, _ = s.node("worker1").core.Barrier(0, message.AllGroup, s.now)
	s.apply(s.node("worker1"), outs)
	sched := s.node("scheduler")
	d := sched.inbox[len(sched.inbox)-1]
	sched.inbox = sched.inbox[:len(sched.inbox)-1]
	var order []int32
	for _, o := range sched.core.Step(d.msg, s.now) {
		if o.Kind == Send {
			order = append(order, o.Msg.Meta.Recver)
		}
	}
	if want := []int32{8, 10, 9, 11}; !slices.Equal(order, want) {
		t.Errorf("releases sent to %v, want servers first: %v", order, want)
	}
	if sched.count(EventBarrierDone) != 0 {
		// The scheduler's own release is an event of that Step, which the
		// test read directly.
		t.Error("unexpected release")
	}
}

func TestBarrierDropsNonMembersAndBadGroups(t *testing.T) {
	s := newSim(t, 1, 1, nil)
	s.startAll()
	sched := s.node("scheduler")
	for _, m := range []struct {
		sender, group int32
	}{{13, 7}, {message.Empty, 7}, {9, 0}, {9, 8}, {9, message.ServerGroup}, {1, 7}} {
		req := message.New()
		req.Meta.Request = true
		req.Meta.Control.Cmd = message.CmdBarrier
		req.Meta.Control.BarrierGroup = m.group
		req.Meta.Sender = m.sender
		req.Meta.CustomerID = 0
		if outs := sched.core.Step(req, s.now); len(outs) != 0 {
			t.Errorf("barrier request from %d for group %d produced %v", m.sender, m.group, outs)
		}
	}
	s.barrier(message.AllGroup, "scheduler", "server0")
	if sched.count(EventBarrierDone) != 0 {
		t.Fatal("a forged request counted")
	}
	s.barrier(message.AllGroup, "worker0")
	for _, name := range []string{"scheduler", "server0", "worker0"} {
		if s.node(name).count(EventBarrierDone) != 1 {
			t.Errorf("%s not released", name)
		}
	}
}

func TestHeartbeatsKeepNodesAlive(t *testing.T) {
	s := newSim(t, 2, 2, heartbeatsOn)
	s.startAll()
	s.tick(30*time.Second, 250*time.Millisecond)
	for _, n := range s.nodes {
		if n.core.Phase() != PhaseReady || n.has(EventNodeDead) != nil || n.has(EventFailed) != nil {
			t.Errorf("%s: phase %v, events %v", n.name, n.core.Phase(), n.events)
		}
	}
	if dead := s.node("scheduler").core.DeadNodes(5*time.Second, s.now); len(dead) != 0 {
		t.Errorf("dead nodes %v", dead)
	}
}

// A worker killed for good: the scheduler finds it dead through its
// connection, waits RecoveryWait for a replacement, then fails the job and
// tells every node, naming the worker.
func TestKilledWorkerFailsTheJob(t *testing.T) {
	for _, hb := range []bool{false, true} {
		t.Run(map[bool]string{false: "heartbeats off", true: "heartbeats on"}[hb], func(t *testing.T) {
			var tweak func(*Config)
			if hb {
				tweak = heartbeatsOn
			}
			s := newSim(t, 2, 2, tweak)
			s.startAll()
			s.tick(2*time.Second, 250*time.Millisecond)
			s.kill(s.node("worker1"))
			s.tick(2*time.Second, 250*time.Millisecond)
			sched := s.node("scheduler")
			// Dead through its connection, before any heartbeat timeout.
			if got := sched.core.DeadNodes(5*time.Second, s.now); !slices.Equal(got, []int{11}) {
				t.Errorf("DeadNodes = %v", got)
			}
			if sched.has(EventFailed) != nil {
				t.Fatal("failed before the recovery wait")
			}
			s.tick(8*time.Second, 250*time.Millisecond)
			failed := sched.has(EventFailed)
			if failed == nil {
				t.Fatalf("the scheduler did not fail the job: %v", sched.events)
			}
			var lost *NodeLostError
			if !errors.As(failed.Err, &lost) || lost.Node.ID != 11 || !errors.Is(failed.Err, ErrJobFailed) {
				t.Fatalf("failure %v does not name worker 1 (node 11)", failed.Err)
			}
			if !strings.Contains(failed.Err.Error(), "worker 1 (node 11)") || !strings.Contains(failed.Err.Error(), "connection closed") {
				t.Errorf("error %q", failed.Err)
			}
			for _, name := range []string{"server0", "server1", "worker0"} {
				ev := s.node(name).has(EventFailed)
				if ev == nil {
					t.Fatalf("%s was not told", name)
				}
				if !strings.Contains(ev.Err.Error(), "worker 1 (node 11)") {
					t.Errorf("%s: %v", name, ev.Err)
				}
			}
			if _, err := sched.core.Barrier(0, 7, s.now); !errors.Is(err, ErrJobFailed) {
				t.Errorf("barrier after the failure: %v", err)
			}
		})
	}
}

// The failure comes ConnGrace + RecoveryWait after the kill, not before.
func TestFailureTiming(t *testing.T) {
	s := newSim(t, 1, 1, func(c *Config) { c.ConnGrace = time.Second; c.RecoveryWait = 3 * time.Second })
	s.startAll()
	s.kill(s.node("server0"))
	s.tick(3900*time.Millisecond, 100*time.Millisecond)
	if ev := s.node("scheduler").has(EventFailed); ev != nil {
		t.Fatalf("failed after %v: %v", 3900*time.Millisecond, ev.Err)
	}
	if s.node("scheduler").has(EventNodeDead) == nil {
		t.Fatal("server not declared dead after the connection grace")
	}
	s.tick(300*time.Millisecond, 100*time.Millisecond)
	if s.node("scheduler").has(EventFailed) == nil || s.node("worker0").has(EventFailed) == nil {
		t.Fatal("no failure 4.2s after the kill")
	}
}

// A replacement that registers right after the kill waits until its
// predecessor is found dead, then takes its id; the job goes on.
func TestReplacementTakesTheDeadNodesID(t *testing.T) {
	for _, role := range []message.Role{message.RoleServer, message.RoleWorker} {
		t.Run(role.String(), func(t *testing.T) {
			s := newSim(t, 2, 2, heartbeatsOn)
			s.startAll()
			victim := s.node(role.String() + "1")
			id := victim.core.Me().ID
			s.kill(victim)
			repl := s.add("new", role, "10.0.3.1:6000", 2, 2)
			s.start(repl)
			s.deliver()
			s.tick(10*time.Second, 250*time.Millisecond)
			if repl.core.Phase() != PhaseReady || repl.core.Me().ID != id || !repl.core.Me().IsRecovery {
				t.Fatalf("replacement: phase %v, node %v; want id %d, recovery", repl.core.Phase(), repl.core.Me(), id)
			}
			for _, n := range s.nodes {
				if n.alive && n.has(EventFailed) != nil {
					t.Fatalf("%s failed: %v", n.name, n.has(EventFailed).Err)
				}
			}
			// Peers that talk to the replaced role reconnected to the new
			// address.
			other := map[message.Role]string{message.RoleServer: "worker0", message.RoleWorker: "server0"}[role]
			if c := s.node(other).conns[int(id)]; c.addr != "10.0.3.1:6000" {
				t.Errorf("%s connects to %d at %s", other, id, c.addr)
			}
			if s.node(other).has(EventNodeReplaced) == nil {
				t.Errorf("%s not told of the replacement", other)
			}
			// The job finishes: every live node passes the final barrier.
			names := []string{"scheduler", "server0", "worker0", "new"}
			if role == message.RoleServer {
				names = append(names, "worker1")
			} else {
				names = append(names, "server1")
			}
			for _, name := range names {
				s.node(name).core.Finalizing()
			}
			s.barrier(message.AllGroup, names...)
			for _, name := range names {
				if s.node(name).core.Phase() != PhaseDone {
					t.Errorf("%s: phase %v after the final barrier", name, s.node(name).core.Phase())
				}
			}
		})
	}
}

// A replacement that comes after RecoveryWait finds the job failed.
func TestLateReplacementIsRefused(t *testing.T) {
	s := newSim(t, 1, 1, nil)
	s.startAll()
	s.kill(s.node("worker0"))
	s.tick(8*time.Second, 500*time.Millisecond)
	repl := s.add("new", message.RoleWorker, "10.0.3.1:6000", 1, 1)
	s.start(repl)
	s.deliver()
	if repl.core.Phase() != PhaseJoining {
		t.Fatalf("late replacement got phase %v", repl.core.Phase())
	}
}

// The scheduler killed: every node fails on its own, naming the scheduler,
// after ConnGrace (connection) or HeartbeatTimeout (silence).
func TestSchedulerLost(t *testing.T) {
	cases := []struct {
		name  string
		tweak func(*Config)
		fault func(s *sim)
		cause string
		after time.Duration
	}{
		{"killed", nil, func(s *sim) { s.kill(s.node("scheduler")) }, "connection closed", 2 * time.Second},
		{"cut off, heartbeats", heartbeatsOn, func(s *sim) { s.isolate(s.node("scheduler")) }, "nothing heard", 7 * time.Second},
		{"stopped, heartbeats", heartbeatsOn, func(s *sim) { s.node("scheduler").paused = true }, "nothing heard", 7 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(t, 2, 2, c.tweak)
			s.startAll()
			s.tick(2*time.Second, 250*time.Millisecond)
			c.fault(s)
			s.tick(c.after, 250*time.Millisecond)
			for _, name := range all[1:] {
				ev := s.node(name).has(EventFailed)
				if ev == nil {
					t.Fatalf("%s did not notice", name)
				}
				var lost *NodeLostError
				if !errors.As(ev.Err, &lost) || lost.Node.ID != message.Scheduler || !strings.Contains(ev.Err.Error(), c.cause) {
					t.Errorf("%s: %v", name, ev.Err)
				}
				if got := s.node(name).core.DeadNodes(time.Second, s.now); !slices.Equal(got, []int{1}) {
					t.Errorf("%s: DeadNodes = %v", name, got)
				}
			}
		})
	}
}

// Silence shorter than the heartbeat timeout (a link down 3 s, a process
// stopped 3 s) is no fault; longer, with no replacement, fails the job on
// every node, the silent one included.
func TestSilence(t *testing.T) {
	for _, c := range []struct {
		name string
		long bool
		cut  bool
	}{{"link down 3s", false, true}, {"stopped 3s", false, false}, {"link down for good", true, true}, {"stopped 20s", true, false}} {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(t, 2, 2, heartbeatsOn)
			s.startAll()
			s.tick(2*time.Second, 250*time.Millisecond)
			victim := s.node("server1")
			if c.cut {
				s.isolate(victim)
			} else {
				victim.paused = true
			}
			d := 3 * time.Second
			if c.long {
				d = 20 * time.Second
			}
			s.tick(d, 250*time.Millisecond)
			if !c.long || !c.cut {
				s.heal()
				victim.paused = false
			}
			s.tick(5*time.Second, 250*time.Millisecond)
			for _, n := range s.nodes {
				failed := n.has(EventFailed)
				if c.long != (failed != nil) {
					t.Fatalf("%s: failed=%v, want %v (events %v)", n.name, failed, c.long, n.events)
				}
				if failed != nil && n != victim && !strings.Contains(failed.Err.Error(), "server 1 (node 10)") {
					t.Errorf("%s: %v does not name server 1", n.name, failed.Err)
				}
			}
			if c.long && !c.cut {
				// The stopped server finds, when it resumes, that it did not
				// run for longer than the heartbeat timeout: it stops,
				// saying so, and tells nobody.
				var frozen *FrozenError
				if !errors.As(victim.has(EventFailed).Err, &frozen) {
					t.Errorf("stopped server: %v, want a FrozenError", victim.has(EventFailed).Err)
				}
			}
		})
	}
}

// A node declared dead for silence that is heard from again before the
// recovery wait is over is alive again.
func TestDeadNodeComesBack(t *testing.T) {
	s := newSim(t, 1, 1, func(c *Config) { heartbeatsOn(c); c.RecoveryWait = 10 * time.Second })
	s.startAll()
	w := s.node("worker0")
	w.paused = true
	s.tick(7*time.Second, 250*time.Millisecond)
	sched := s.node("scheduler")
	if sched.has(EventNodeDead) == nil {
		t.Fatal("silent worker not declared dead")
	}
	w.paused = false
	s.tick(10*time.Second, 250*time.Millisecond)
	if sched.has(EventNodeBack) == nil || sched.has(EventFailed) != nil {
		t.Fatalf("events %v", sched.events)
	}
}

// A node that leaves (Finalize without a barrier) is no fault when its
// connection closes; after the final barrier, nothing is.
func TestLeaveAndFinalBarrier(t *testing.T) {
	s := newSim(t, 1, 2, nil)
	s.startAll()
	w := s.node("worker1")
	s.apply(w, w.core.Leave(s.now))
	s.deliver()
	s.kill(w)
	s.tick(10*time.Second, 500*time.Millisecond)
	if ev := s.node("scheduler").has(EventFailed); ev != nil {
		t.Fatalf("a worker that left failed the job: %v", ev.Err)
	}
	names := []string{"scheduler", "server0", "worker0"}
	for _, name := range names {
		s.node(name).core.Finalizing()
	}
	// worker1 left: the final barrier does not wait for it.
	s.barrier(message.AllGroup, names...)
	for _, name := range names {
		if n := s.node(name); n.count(EventBarrierDone) != 1 || n.core.Phase() != PhaseDone {
			t.Errorf("%s: %d releases, phase %v", name, n.count(EventBarrierDone), n.core.Phase())
		}
	}
}

// After the final barrier the scheduler and the nodes stop in any order:
// connections closing are no fault.
func TestStopAfterFinalBarrier(t *testing.T) {
	s := newSim(t, 2, 2, heartbeatsOn)
	s.startAll()
	for _, n := range s.nodes {
		n.core.Finalizing()
	}
	s.barrier(message.AllGroup, all...)
	s.kill(s.node("scheduler"))
	s.kill(s.node("worker0"))
	s.tick(20*time.Second, 500*time.Millisecond)
	for _, n := range s.nodes {
		if n.has(EventFailed) != nil || n.core.Phase() != PhaseDone {
			t.Errorf("%s: phase %v, events %v", n.name, n.core.Phase(), n.events)
		}
	}
}

// Lossy links (messages lost, as with PS_DROP_MSG) with heartbeats: a few
// lost heartbeats are no fault.
func TestLossyLinks(t *testing.T) {
	s := newSim(t, 2, 2, heartbeatsOn)
	s.startAll()
	for _, a := range s.nodes {
		for _, b := range s.nodes {
			s.loss[[2]string{a.addr, b.addr}] = 0.1
		}
	}
	s.tick(60*time.Second, 250*time.Millisecond)
	for _, n := range s.nodes {
		if n.has(EventFailed) != nil {
			t.Errorf("%s failed on 10%% loss: %v", n.name, n.has(EventFailed).Err)
		}
	}
}

// Several customers of one worker process share its id; the barrier counts
// each customer; the process dying fails the job once.
func TestMultiCustomerProcess(t *testing.T) {
	s := newSim(t, 1, 2, nil)
	// worker1 does not exist as a process: worker0 registers two customers.
	s.nodes = slices.DeleteFunc(s.nodes, func(n *simNode) bool { return n.name == "worker1" })
	for _, n := range s.nodes {
		s.apply(n, n.core.Start(s.now))
		s.apply(n, n.core.Register(0, s.now))
	}
	w := s.node("worker0")
	s.apply(w, w.core.Register(1, s.now))
	s.deliver()
	if w.core.Phase() != PhaseReady || w.core.Me().ID != 9 {
		t.Fatalf("worker process: %v %v", w.core.Phase(), w.core.Me())
	}
	for _, cid := range []int{0, 1} {
		outs, err := w.core.Barrier(cid, message.AllGroup, s.now)
		if err != nil {
			t.Fatal(err)
		}
		s.apply(w, outs)
	}
	s.barrier(message.AllGroup, "scheduler", "server0")
	if w.count(EventBarrierDone) != 1 || s.node("server0").count(EventBarrierDone) != 1 {
		t.Fatalf("releases: worker %d, server %d", w.count(EventBarrierDone), s.node("server0").count(EventBarrierDone))
	}
	s.kill(w)
	s.tick(8*time.Second, 500*time.Millisecond)
	if s.node("scheduler").count(EventFailed) != 1 || s.node("server0").count(EventFailed) != 1 {
		t.Fatal("the job did not fail once")
	}
}

func TestBadInput(t *testing.T) {
	s := newSim(t, 1, 1, nil)
	s.startAll()
	sched, srv := s.node("scheduler"), s.node("server0")
	bad := []*message.Message{}
	add := func(f func(m *message.Message)) {
		m := message.New()
		f(m)
		bad = append(bad, m)
	}
	add(func(m *message.Message) { m.Meta.Control.Cmd = message.CmdAddNode; m.Meta.Sender = 9 })
	add(func(m *message.Message) { m.Meta.Control.Cmd = message.CmdAddNode })
	add(func(m *message.Message) {
		m.Meta.Control.Cmd = message.CmdAddNode
		m.Meta.Control.Nodes = []message.Node{{Role: message.RoleScheduler, Hostname: "h", Port: 1}}
	})
	add(func(m *message.Message) { m.Meta.Control.Cmd = 99; m.Meta.Sender = 9 })
	add(func(m *message.Message) { m.Meta.Control.Cmd = message.CmdHeartbeat; m.Meta.Sender = 13 })
	add(func(m *message.Message) {
		m.Meta.Control.Cmd = message.CmdBarrier
		m.Meta.Sender = 9
		m.Meta.Request = false
	})
	for _, m := range bad {
		if outs := sched.core.Step(m, s.now); len(outs) != 0 {
			t.Errorf("scheduler answered %s with %v", m, outs)
		}
	}
	// A node list or abort not from the scheduler changes nothing.
	list := message.New()
	list.Meta.Control.Cmd = message.CmdAddNode
	list.Meta.Sender = 9
	list.Meta.Control.Nodes = []message.Node{{Role: message.RoleServer, ID: 8, Hostname: "10.9.9.9", Port: 1}}
	abort := NewNotice(8, NoticeAbort, "forged", 0)
	abort.Meta.Sender = 13 // not in the job
	for _, m := range []*message.Message{list, abort} {
		if outs := srv.core.Step(m, s.now); len(outs) != 0 {
			t.Errorf("server answered %s with %v", m, outs)
		}
	}
	if srv.core.Phase() != PhaseReady {
		t.Errorf("server phase %v", srv.core.Phase())
	}
}

// The first node to find a fault itself (here every server and worker loses
// the scheduler, a server first) tells its peers, so that all of them name
// the cause, not the peer that went away.
func TestFailureSpreadsWithItsCause(t *testing.T) {
	s := newSim(t, 2, 2, heartbeatsOn)
	s.startAll()
	s.tick(2*time.Second, 250*time.Millisecond)
	s.isolate(s.node("scheduler"))
	srv := s.node("server0")
	// Only server0 ticks: it finds the scheduler gone before the others.
	for end := s.now.Add(7 * time.Second); s.now.Before(end); {
		s.now = s.now.Add(250 * time.Millisecond)
		s.apply(srv, srv.core.Tick(s.now))
		s.deliver()
	}
	if srv.has(EventFailed) == nil {
		t.Fatal("server0 did not fail")
	}
	for _, name := range []string{"worker0", "worker1"} {
		ev := s.node(name).has(EventFailed)
		if ev == nil {
			t.Fatalf("%s was not told", name)
		}
		var a *AbortError
		if !errors.As(ev.Err, &a) || a.By != 8 || !strings.Contains(ev.Err.Error(), "server 0 (node 8) stopped the job: scheduler (node 1)") {
			t.Errorf("%s: %v", name, ev.Err)
		}
	}
	// Servers do not talk to servers: server1 finds out by itself.
	if s.node("server1").has(EventFailed) != nil {
		t.Error("server1 heard from server0")
	}
}

// A peer's abort, while this node hears the scheduler, is the peer's own
// fault: it was cut off and lost the scheduler, and its notice, held by the
// network, arrives when the link comes back, after the job went on without
// it. Only once the scheduler is quiet here too does the notice stop the job.
func TestPeerAbortWhileSchedulerHeardIsDropped(t *testing.T) {
	s := newSim(t, 2, 2, heartbeatsOn)
	s.startAll()
	s.tick(2*time.Second, 250*time.Millisecond)
	w := s.node("worker0")
	abort := func() {
		m := NewNotice(int(w.core.Me().ID), NoticeAbort, "scheduler (node 1) lost: nothing heard from it for 5s", 0)
		m.Meta.Sender = 8 // server0, a peer worker0 is connected to
		s.apply(w, w.core.Step(m, s.now))
	}
	abort()
	if ev := w.has(EventFailed); ev != nil {
		t.Fatalf("worker0 failed on a cut-off peer's word while it hears the scheduler: %v", ev.Err)
	}
	// The scheduler goes quiet for worker0 too: the peer's account stands.
	s.isolate(s.node("scheduler"))
	for end := s.now.Add(3 * time.Second); s.now.Before(end); {
		s.now = s.now.Add(250 * time.Millisecond)
		s.apply(w, w.core.Tick(s.now))
	}
	abort()
	var a *AbortError
	if ev := w.has(EventFailed); ev == nil || !errors.As(ev.Err, &a) || a.By != 8 {
		t.Fatalf("worker0 did not take the abort of a peer once the scheduler was quiet: %v", ev)
	}
}

// A connection that closes stays a while before the peer counts as gone:
// with resending on, a blip is no fault.
func TestPeerDownAfterGrace(t *testing.T) {
	s := newSim(t, 1, 1, func(c *Config) { c.Resend = true })
	s.startAll()
	w := s.node("worker0")
	s.apply(w, w.core.Connection(8, false, s.now))
	s.tick(500*time.Millisecond, 100*time.Millisecond)
	s.apply(w, w.core.Connection(8, true, s.now))
	s.tick(2*time.Second, 100*time.Millisecond)
	if w.has(EventPeerDown) != nil {
		t.Fatal("a half-second blip reported as a lost server")
	}
	s.apply(w, w.core.Connection(8, false, s.now))
	s.tick(1100*time.Millisecond, 100*time.Millisecond)
	if ev := w.has(EventPeerDown); ev == nil || ev.ID != 8 {
		t.Fatalf("server not reported gone after the grace: %v", w.events)
	}
	s.apply(w, w.core.Connection(8, true, s.now))
	if w.has(EventPeerUp) == nil {
		t.Error("no peer-up after the connection came back")
	}
}

// Links that go down at different times are each reported once their own
// grace is over (Tick looks at them only from the first one due on).
func TestPeersDownEachAfterTheirGrace(t *testing.T) {
	s := newSim(t, 2, 1, func(c *Config) { c.Resend = true })
	s.startAll()
	w := s.node("worker0")
	grace := w.core.cfg.ConnGrace
	s.apply(w, w.core.Connection(8, false, s.now))
	s.tick(grace/2, 100*time.Millisecond)
	s.apply(w, w.core.Connection(10, false, s.now))
	s.tick(grace/2+100*time.Millisecond, 100*time.Millisecond)
	if got := w.all(EventPeerDown); len(got) != 1 || got[0].ID != 8 {
		t.Fatalf("after server 8's grace: peer-down events %v, want server 8's alone", got)
	}
	s.tick(grace/2, 100*time.Millisecond)
	if got := w.all(EventPeerDown); len(got) != 2 || got[1].ID != 10 {
		t.Fatalf("after server 10's grace: peer-down events %v, want servers 8 and 10", got)
	}
}

// Without resending, a connection to a live peer that drops and comes back
// within the grace fails the job, naming the peer: what was in flight on it
// may be lost, and a request or barrier waiting for it would wait for ever.
// This holds for a worker's link to a server, a node's link to the
// scheduler, and the scheduler's link to a node; with resending on, none of
// them fails anything.
func TestBlipWithoutResendFailsTheJob(t *testing.T) {
	for _, c := range []struct {
		name, at string
		peer     int
		want     string // the node named
	}{
		{"worker's link to a server", "worker0", 8, "server 0 (node 8)"},
		{"server's link to a worker", "server0", 9, "worker 0 (node 9)"},
		{"worker's link to the scheduler", "worker0", message.Scheduler, "scheduler"},
		{"scheduler's link to a worker", "scheduler", 9, "worker 0 (node 9)"},
	} {
		for _, resend := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s resend=%v", c.name, resend), func(t *testing.T) {
				s := newSim(t, 1, 1, func(cfg *Config) { cfg.Resend = resend })
				s.startAll()
				n := s.node(c.at)
				s.apply(n, n.core.Connection(c.peer, false, s.now))
				s.tick(300*time.Millisecond, 100*time.Millisecond)
				if n.has(EventFailed) != nil {
					t.Fatal("failed while the connection was down, within the grace")
				}
				s.apply(n, n.core.Connection(c.peer, true, s.now))
				s.tick(2*time.Second, 100*time.Millisecond)
				failed := n.has(EventFailed)
				if resend {
					for _, m := range s.nodes {
						if ev := m.has(EventFailed); ev != nil {
							t.Fatalf("%s failed on a blip with resending on: %v", m.name, ev.Err)
						}
					}
					return
				}
				if failed == nil {
					t.Fatalf("no failure after the blip: %v", n.events)
				}
				var lost *NodeLostError
				if !errors.As(failed.Err, &lost) || !errors.Is(failed.Err, ErrJobFailed) ||
					!strings.Contains(failed.Err.Error(), c.want) || !strings.Contains(failed.Err.Error(), "PS_RESEND") {
					t.Fatalf("failure %q does not name %s and PS_RESEND", failed.Err, c.want)
				}
				// Whoever saw it, every node stops naming the cause.
				for _, m := range s.nodes {
					if ev := m.has(EventFailed); ev == nil || !strings.Contains(ev.Err.Error(), c.want) || !strings.Contains(ev.Err.Error(), "PS_RESEND") {
						t.Errorf("%s was not told the cause: %v", m.name, ev)
					}
				}
			})
		}
	}
}

func TestConfigChecks(t *testing.T) {
	base := Config{Role: message.RoleWorker, NumServers: 1, NumWorkers: 1, SchedulerHost: "h", SchedulerPort: 1}
	for _, tweak := range []func(*Config){
		func(c *Config) { c.NumServers = 0 },
		func(c *Config) { c.SchedulerHost = "" },
		func(c *Config) { c.SchedulerPort = 70000 },
		func(c *Config) { c.Role = 7 },
		func(c *Config) { c.HeartbeatInterval, c.HeartbeatTimeout = time.Second, time.Second },
		func(c *Config) { c.RecoveryWait = -1 },
	} {
		cfg := base
		tweak(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	if _, err := New(base); err != nil {
		t.Fatal(err)
	}
}

func TestNotices(t *testing.T) {
	m := NewNotice(9, NoticeAbort, "server 0 (node 8) lost", 3)
	kind, text, ok := ParseNotice(m)
	if !ok || kind != NoticeAbort || text != "server 0 (node 8) lost" || m.Meta.Control.Cmd != message.CmdHeartbeat || len(m.Meta.Control.Nodes) != 0 {
		t.Errorf("got %v %q %v from %s", kind, text, ok, m)
	}
	plain := message.New()
	plain.Meta.Control.Cmd = message.CmdHeartbeat
	if _, _, ok := ParseNotice(plain); ok {
		t.Error("a plain heartbeat parsed as a notice")
	}
}

// A node that registers once the job is full, while no node of its role
// looks dead, is refused within ConnGrace and told why; the job goes on
// undisturbed. With heartbeats off this holds long after the start (no
// node dies by default after a timeout), which is how a second job
// started on the same scheduler port by mistake used to take over nodes
// of the first.
func TestStrayNodeIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tweak func(*Config)
		wait  time.Duration
	}{
		{"heartbeats off, at once", nil, 0},
		{"heartbeats off, after 90s", nil, 90 * time.Second},
		{"heartbeats on", heartbeatsOn, 20 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, 2, 2, tc.tweak)
			s.startAll()
			s.tick(tc.wait, 500*time.Millisecond)
			stray := s.add("stray", message.RoleWorker, "10.0.9.9:5000", 2, 2)
			s.start(stray)
			s.deliver()
			s.tick(4*time.Second, 100*time.Millisecond)
			e := stray.has(EventFailed)
			if e == nil {
				t.Fatalf("stray: phase %v, not refused", stray.core.Phase())
			}
			var abort *AbortError
			if !errors.As(e.Err, &abort) || !strings.Contains(abort.Reason, "refused") || !strings.Contains(abort.Reason, "full") {
				t.Errorf("stray failed with %v, want a refusal that says the job is full", e.Err)
			}
			for _, n := range s.nodes {
				if n != stray && (n.has(EventFailed) != nil || n.has(EventNodeReplaced) != nil || n.has(EventNodeDead) != nil) {
					t.Errorf("%s disturbed: %v", n.name, n.events)
				}
			}
			names := []string{"scheduler", "server0", "server1", "worker0", "worker1"}
			s.barrier(message.AllGroup, names...)
			for _, name := range names {
				if s.node(name).count(EventBarrierDone) == 0 {
					t.Errorf("%s: barrier not released after the refusal", name)
				}
			}
		})
	}
}

// Refusals reuse a few connections: a flood of strays never makes the
// scheduler hold more than refusalConns extra connections.
func TestRefusalsHoldFewConnections(t *testing.T) {
	s := newSim(t, 1, 1, nil)
	s.startAll()
	for i := range 50 {
		stray := s.add(fmt.Sprintf("stray%d", i), message.RoleServer, fmt.Sprintf("10.0.9.%d:5000", i), 1, 1)
		s.start(stray)
	}
	s.deliver()
	s.tick(2*time.Second, 100*time.Millisecond)
	extra := 0
	for id := range s.node("scheduler").conns {
		if id < 0 {
			extra++
		}
	}
	if extra > refusalConns {
		t.Errorf("scheduler holds %d refusal connections, want at most %d", extra, refusalConns)
	}
	refused := 0
	for _, n := range s.nodes {
		if strings.HasPrefix(n.name, "stray") && n.has(EventFailed) != nil {
			refused++
		}
	}
	if refused == 0 {
		t.Error("no stray was told it was refused")
	}
}

// A replacement is possible (and the scheduler lets connections take over
// identities) only on evidence about a member: a stray ADD_NODE alone does
// not open that window.
func TestReplacementPossibleNeedsEvidence(t *testing.T) {
	s := newSim(t, 1, 1, heartbeatsOn)
	s.startAll()
	sched := s.node("scheduler").core
	if sched.ReplacementPossible(s.now) {
		t.Fatal("a replacement possible in a healthy job")
	}
	stray := s.add("stray", message.RoleWorker, "10.0.9.9:5000", 1, 1)
	s.start(stray)
	s.deliver()
	if sched.ReplacementPossible(s.now) {
		t.Error("a stray ADD_NODE made a replacement possible")
	}
	s.node("worker0").paused = true
	s.tick(3*time.Second, 100*time.Millisecond)
	if !sched.ReplacementPossible(s.now) {
		t.Error("a worker silent for three heartbeats does not make a replacement possible")
	}
}

// A node that announces an address the others cannot reach (the wrong
// interface) registers, but nothing reaches it: the scheduler fails the
// start-up naming it and its address within ConnectTimeout +
// RecoveryWait, and the node itself, waiting for the node list, fails
// once the scheduler's process has ended, instead of waiting for ever.
func TestUnreachableNodeIsNamed(t *testing.T) {
	s := newSim(t, 1, 1, nil)
	const wrong = "192.0.2.7:7000"
	s.node("server0").addr = wrong
	s.node("server0").core.me.Hostname, s.node("server0").core.me.Port = "192.0.2.7", 7000
	s.unreachable[wrong] = true
	s.startAll()
	sched := s.node("scheduler")
	s.tick(DefaultConnectTimeout+5*time.Second+time.Second, 100*time.Millisecond)
	ev := sched.has(EventFailed)
	if ev == nil {
		t.Fatal("the scheduler did not fail the start-up")
	}
	if msg := ev.Err.Error(); !strings.Contains(msg, "server 0 (node 8)") || !strings.Contains(msg, wrong) || !strings.Contains(msg, "could not connect") {
		t.Errorf("scheduler: %v", ev.Err)
	}
	srv := s.node("server0")
	if srv.core.Phase() != PhaseJoining {
		t.Fatalf("the unreachable server is in phase %v", srv.core.Phase())
	}
	s.kill(sched) // the scheduler program exits on the failure
	s.tick(2*time.Second, 100*time.Millisecond)
	ev = srv.has(EventFailed)
	if ev == nil {
		t.Fatal("the unreachable server still waits after the scheduler ended")
	}
	if msg := ev.Err.Error(); !strings.Contains(msg, "scheduler (node 1)") || !strings.Contains(msg, wrong) || !strings.Contains(msg, "DMLC_NODE_HOST") {
		t.Errorf("server: %v", ev.Err)
	}
}

// Past the final barrier the scheduler still learns who is connected, so
// that it keeps its connections open until the servers and workers have
// left (a release may still be on its way over a lossy link).
func TestConnectedMembersAfterFinalBarrier(t *testing.T) {
	s := newSim(t, 1, 2, nil)
	s.startAll()
	for _, n := range s.nodes {
		n.core.Finalizing()
		if !n.core.InFinalBarrier() || n.core.PassedFinalBarrier() {
			t.Fatalf("before its release: in the final barrier %v, passed it %v", n.core.InFinalBarrier(), n.core.PassedFinalBarrier())
		}
	}
	s.barrier(message.AllGroup, "scheduler", "server0", "worker0", "worker1")
	for _, n := range s.nodes {
		if n.core.InFinalBarrier() || !n.core.PassedFinalBarrier() {
			t.Fatalf("after its release: in the final barrier %v, passed it %v", n.core.InFinalBarrier(), n.core.PassedFinalBarrier())
		}
	}
	sched := s.node("scheduler")
	if got := sched.core.ConnectedMembers(); !slices.Equal(got, []int{8, 9, 11}) {
		t.Fatalf("connected after the final barrier: %v, want [8 9 11]", got)
	}
	s.kill(s.node("worker0"))
	s.kill(s.node("server0"))
	s.deliver()
	if got := sched.core.ConnectedMembers(); !slices.Equal(got, []int{11}) {
		t.Errorf("connected once two left: %v, want [11]", got)
	}
	if s.node("worker1").core.ConnectedMembers() != nil {
		t.Error("a worker reports connected members")
	}
}
