package faults_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/control"
)

// The production settings of the failure model: heartbeats every second,
// a node silent for 5 s is dead, a dead node's place waits 5 s for a
// replacement (PS_RECOVERY_WAIT's default).
const (
	hbInterval = time.Second
	hbTimeout  = 5 * time.Second
	// bound is the failure model's promise: every surviving node fails
	// within PS_HEARTBEAT_TIMEOUT + 10 s of the fault becoming permanent.
	bound = hbTimeout + 10*time.Second
	step  = 100 * time.Millisecond
	quiet = true
)

func heartbeats(timeout time.Duration) func(*postoffice.Config) {
	return func(c *postoffice.Config) {
		c.HeartbeatInterval = hbInterval
		c.HeartbeatTimeout = timeout
	}
}

func resend(c *postoffice.Config) {
	c.Resend = true
	c.ResendTimeout = time.Second
}

// withMetrics collects metrics (served on a port of the kernel's choice).
func withMetrics(c *postoffice.Config) { c.MetricsAddr = "127.0.0.1:0" }

func both(fs ...func(*postoffice.Config)) func(*postoffice.Config) {
	return func(c *postoffice.Config) {
		for _, f := range fs {
			if f != nil {
				f(c)
			}
		}
	}
}

// env is a job on an in-memory network whose protocol time is a fake
// clock: servers keep counts (kv.DefaultHandle[int64]), each worker pushes
// a one to its own key on every server, round after round.
type env struct {
	t     *testing.T
	clock *van.FakeClock
	net   *van.MemNetwork
	c     *testcluster.Cluster
	tweak func(*postoffice.Config)

	workers []*workerRun
	extra   []*postoffice.Postoffice // replacements started by the test
	// acceptLoss makes the workers accept losing state (AcceptStateLoss).
	acceptLoss bool
}

func newEnv(t *testing.T, servers, workers int, tweak func(*postoffice.Config)) *env {
	t.Helper()
	clock := van.NewFakeClock(time.Unix(1_000_000_000, 0))
	net := van.NewMemNetworkClock(clock, 1)
	e := &env{t: t, clock: clock, net: net, tweak: tweak}
	e.c = testcluster.New(t, servers, workers, testcluster.Options{Network: net, Clock: clock, Tweak: tweak, Quiet: quiet})
	for _, p := range e.c.Servers {
		e.serve(p)
	}
	return e
}

// newNode makes a node for the job (a replacement), not yet started. The
// env waits on it as on the job's own nodes (see settle): a replacement's
// customers, left out, could sit on a request while time runs ahead.
func (e *env) newNode(role message.Role) *postoffice.Postoffice {
	p := e.c.NewNode(role, nil)
	e.extra = append(e.extra, p)
	return p
}

// join starts p (a replacement) and waits until its Start has returned:
// the protocol's part (an id, and in a managed job the first view) in
// protocol time, then the return of Start's goroutine in real time, so
// that a goroutine the machine runs late cannot let protocol time run
// ahead of it.
func (e *env) join(p *postoffice.Postoffice) {
	e.t.Helper()
	started := make(chan error, 1)
	go func() { started <- p.Start(context.Background(), 0, true) }()
	e.registered(p)
	e.within(bound, "the replacement joins", func() bool {
		return len(started) == 1 || p.Van().IsReady() && (!p.Managed() || p.View() != nil)
	})
	e.waitReal("the replacement's Start to return", func() bool { return len(started) == 1 })
	if err := <-started; err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) serve(p *postoffice.Postoffice) {
	s, err := kv.NewKVServer[int64](p, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := s.SetStore(kv.NewDefaultHandle[int64]()); err != nil {
		e.t.Fatal(err)
	}
}

// advance moves the protocol's time by d, a step at a time; after each step
// every node takes in what it was sent and every worker gets to where it
// waits on the job, so that time does not run ahead of them.
func (e *env) advance(d time.Duration) {
	e.t.Helper()
	for end := e.clock.Now().Add(d); e.clock.Now().Before(end); {
		e.clock.Advance(step)
		e.settle()
		for _, r := range e.workers {
			e.waitReal("a worker to wait on the job", r.blocked)
		}
	}
}

// settle waits until the network has delivered what it can and every
// node's customers are idle (views, copies and answers handled on
// customer goroutines, which the network does not see), and stays so.
func (e *env) settle() {
	e.t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := e.net.Settle(ctx)
		cancel()
		if err != nil {
			e.t.Fatalf("the network does not settle: %v", err)
		}
		e.waitReal("every node's customers to be idle", e.idle)
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		err = e.net.Settle(ctx)
		cancel()
		if err == nil && e.idle() {
			return
		}
	}
}

// idle reports whether every node of the job has nothing queued for its
// customers.
func (e *env) idle() bool {
	for _, p := range append(e.c.All(), e.extra...) {
		if !p.Idle() {
			return false
		}
	}
	return true
}

// registered waits, in real time, until node p has sent its registration:
// a node started on its own goroutine may not have run yet, and protocol
// time must not pass (the dead node's place expiring) before it has.
func (e *env) registered(p *postoffice.Postoffice) {
	e.t.Helper()
	e.waitReal("the new node to register", func() bool {
		sent, _ := p.Van().Stats()
		return sent > 0
	})
}

// within advances time until cond holds, failing the test past limit, and
// returns the time it took.
func (e *env) within(limit time.Duration, what string, cond func() bool) time.Duration {
	e.t.Helper()
	start := e.clock.Now()
	for !cond() {
		if d := e.clock.Now().Sub(start); d > limit {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			e.t.Logf("%s", buf[:n])
			e.t.Fatalf("%s: not within %v (view: %s)", what, limit, e.c.Scheduler.View())
		}
		e.advance(step)
	}
	return e.clock.Now().Sub(start)
}

// waitReal waits, in real time, for cond (work that needs no timers: round
// trips, handlers).
func (e *env) waitReal(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			e.t.Logf("%s", buf[:n])
			e.t.Fatalf("%s: still waiting after 30s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// allFailed returns a condition: every node of nodes has failed.
func allFailed(nodes []*postoffice.Postoffice) func() bool {
	return func() bool {
		for _, p := range nodes {
			if !failed(p) {
				return false
			}
		}
		return true
	}
}

func failed(p *postoffice.Postoffice) bool {
	select {
	case <-p.Failed():
		return true
	default:
		return false
	}
}

// workerRun is a worker pushing round after round until stopped; then it
// pulls its counts and finalizes.
type workerRun struct {
	p      *postoffice.Postoffice
	rounds atomic.Int64 // acknowledged
	// on says where the worker is, in one word so that it is read at
	// once: running, onJob (in Finalize, or held by the gate) or, when
	// not negative, the timestamp of the request it waits on.
	on     atomic.Int64
	w      atomic.Pointer[kv.KVWorker[int64]]
	stop   chan struct{}
	gate   chan struct{} // if set, each round waits for a token (release)
	tokens atomic.Int64  // tokens released
	taken  atomic.Int64  // tokens taken
	done   chan struct{}
	err    error   // the first error, once done
	counts []int64 // pulled, per server rank
	// acceptLoss makes the worker accept losing state (AcceptStateLoss).
	acceptLoss bool
}

// Where a worker is (workerRun.on) when it waits on no request.
const (
	running = -2
	onJob   = -1
)

func (e *env) startWorker(p *postoffice.Postoffice) *workerRun {
	r := &workerRun{p: p, stop: make(chan struct{}), done: make(chan struct{}), acceptLoss: e.acceptLoss}
	r.on.Store(running)
	go func() {
		defer close(r.done)
		r.err = r.run()
	}()
	e.workers = append(e.workers, r)
	return r
}

func (e *env) startWorkers() {
	for _, p := range e.c.Workers {
		e.startWorker(p)
	}
}

func (r *workerRun) run() error {
	w, err := kv.NewKVWorker[int64](r.p, 0, 0)
	if err != nil {
		return err
	}
	if r.acceptLoss {
		w.AcceptStateLoss()
	}
	r.w.Store(w)
	ranges := r.p.ServerKeyRanges()
	keys := make([]uint64, len(ranges))
	ones := make([]int64, len(ranges))
	for i, rg := range ranges {
		keys[i] = rg.Begin + uint64(r.p.MyRank())
		ones[i] = 1
	}
	wait := func(ts int, err error) error {
		if err != nil {
			return err
		}
		r.on.Store(int64(ts))
		defer r.on.Store(running)
		return w.Wait(ts)
	}
	for {
		if r.gate != nil {
			r.on.Store(onJob) // blocked, on the test
			select {
			case <-r.gate:
				r.taken.Add(1)
			case <-r.stop:
			}
			r.on.Store(running)
		}
		select {
		case <-r.stop:
			if err := wait(w.Pull(keys, &r.counts, nil)); err != nil {
				return fmt.Errorf("pull: %w", err)
			}
			r.on.Store(onJob)
			return r.p.Finalize(context.Background(), 0, true)
		default:
		}
		err := wait(w.Push(keys, ones, nil))
		if err != nil {
			return fmt.Errorf("push round %d: %w", r.rounds.Load(), err)
		}
		r.rounds.Add(1)
	}
}

// release lets a gated worker do one more round.
func (r *workerRun) release() {
	r.tokens.Add(1)
	r.gate <- struct{}{}
}

// blocked reports whether the worker waits on the job: in Wait for a
// request not yet finished, in Finalize, or done.
func (r *workerRun) blocked() bool {
	if isDone(r.done) {
		return true
	}
	on := r.on.Load()
	if on == running || r.taken.Load() < r.tokens.Load() {
		return false
	}
	w := r.w.Load()
	return on == onJob || w == nil || w.Customer().Tracker().Pending(int(on))
}

// waitRounds waits until every running worker has done n more rounds.
func (e *env) waitRounds(n int64) {
	e.t.Helper()
	for _, r := range e.workers {
		want := r.rounds.Load() + n
		e.waitReal("worker rounds", func() bool { return r.rounds.Load() >= want || isDone(r.done) })
	}
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// finish stops the workers and finalizes every other node; it returns the
// Finalize error of each node, by the node's name.
func (e *env) finish(others ...*postoffice.Postoffice) map[string]error {
	e.t.Helper()
	for _, r := range e.workers {
		select {
		case <-r.stop:
		default:
			close(r.stop)
		}
	}
	nodes := append([]*postoffice.Postoffice{e.c.Scheduler}, others...)
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, p := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.Finalize(context.Background(), 0, true) }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	e.waitReal("finalize", func() bool {
		if isDone(done) {
			for _, r := range e.workers {
				if !isDone(r.done) {
					return false
				}
			}
			return true
		}
		return false
	})
	out := map[string]error{}
	for i, p := range nodes {
		out[name(p)] = errs[i]
	}
	for _, r := range e.workers {
		out[name(r.p)] = r.err
	}
	return out
}

func name(p *postoffice.Postoffice) string {
	return message.DescribeID(p.MyID())
}

// expectFailed checks that every node of nodes failed (Err and Finalize)
// with an error that names lost.
func (e *env) expectFailed(nodes []*postoffice.Postoffice, lost string) {
	e.t.Helper()
	for _, p := range nodes {
		err := p.Err()
		if !errors.Is(err, van.ErrJobFailed) || !strings.Contains(err.Error(), lost) {
			e.t.Errorf("%s: failure %v does not name %s", name(p), err, lost)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ferr := p.Finalize(ctx, 0, true)
		cancel()
		if ferr == nil || !strings.Contains(ferr.Error(), lost) {
			e.t.Errorf("%s: Finalize = %v, want an error naming %s", name(p), ferr, lost)
		}
	}
}

func without(nodes []*postoffice.Postoffice, gone ...*postoffice.Postoffice) []*postoffice.Postoffice {
	var out []*postoffice.Postoffice
outer:
	for _, p := range nodes {
		for _, g := range gone {
			if p == g {
				continue outer
			}
		}
		out = append(out, p)
	}
	return out
}

func (e *env) kill(p *postoffice.Postoffice) { e.net.Kill(testcluster.Addr(p)) }

// Row: a worker killed, no replacement. The scheduler finds it dead (its
// connection closed), waits PS_RECOVERY_WAIT for a replacement, then fails
// the job and tells everyone: every surviving node fails naming the worker,
// within the bound; the other worker's requests fail too.
func TestWorkerKilled(t *testing.T) {
	for _, c := range []struct {
		name  string
		tweak func(*postoffice.Config)
	}{
		{"heartbeats", heartbeats(hbTimeout)},
		{"heartbeats and resend", both(heartbeats(hbTimeout), resend)},
		{"heartbeats off", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 2, 2, c.tweak)
			e.startWorkers()
			e.waitRounds(3)
			victim := e.c.Workers[1]
			e.kill(victim)
			survivors := without(e.c.All(), victim)
			took := e.within(bound, "every survivor fails", allFailed(survivors))
			t.Logf("every survivor failed %v after the kill", took)
			e.expectFailed(survivors, "worker 1 (node 11)")
			<-e.workers[0].done
			if err := e.workers[0].err; !errors.Is(err, van.ErrJobFailed) {
				t.Errorf("surviving worker ended with %v", err)
			}
		})
	}
}

// Row: a worker killed and a replacement started with the same role: it
// takes the dead worker's id and the job completes, with exact counts.
func TestWorkerReplaced(t *testing.T) {
	e := newEnv(t, 2, 2, heartbeats(hbTimeout))
	e.startWorkers()
	e.waitRounds(3)
	victim := e.workers[1]
	rank := victim.p.MyRank()
	e.kill(victim.p) // its goroutine stays blocked, as if gone, until cleanup
	e.workers = e.workers[:1]
	repl := e.newNode(message.RoleWorker)
	e.join(repl)
	if !repl.IsRecovery() || repl.MyRank() != rank {
		t.Fatalf("replacement: recovery %v rank %d, want rank %d", repl.IsRecovery(), repl.MyRank(), rank)
	}
	before := victim.rounds.Load() // settled long ago
	r := e.startWorker(repl)
	e.waitRounds(3)
	e.advance(2 * hbTimeout) // well past the recovery wait: nothing fails
	errs := e.finish(e.c.Servers...)
	for n, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	for rk, c := range e.workers[0].counts {
		if c != e.workers[0].rounds.Load() {
			t.Errorf("worker 0's key on server %d holds %d, pushed %d", rk, c, e.workers[0].rounds.Load())
		}
	}
	// The replacement's keys hold its predecessor's rounds too (and maybe
	// one more, pushed but not acknowledged before the kill).
	for rk, c := range r.counts {
		if own := r.rounds.Load(); c < before+own || c > before+own+1 {
			t.Errorf("replacement's key on server %d holds %d, want %d+%d", rk, c, before, own)
		}
	}
}

// Row: a worker replaced while a server refuses the replacement's first
// connection, as a server's libzmq does when the connection arrives before
// the server has heard of the replacement (its frozen predecessor still
// holds the identity): all the replacement sends on it is lost without a
// trace. After a push resent twice without an ACK, the replacement
// connects to that server again; the new connection is heard, and the
// job completes with exact counts.
func TestReplacementConnectsAgainToARefusingPeer(t *testing.T) {
	e := newEnv(t, 2, 2, both(heartbeats(hbTimeout), resend))
	e.startWorkers()
	e.waitRounds(3)
	victim := e.workers[1]
	e.kill(victim.p)
	e.workers = e.workers[:1]
	repl := e.newNode(message.RoleWorker)
	e.join(repl)
	refusing := e.c.Servers[0]
	e.net.Refuse(testcluster.Addr(repl), int(refusing.Van().MyNode().ID))
	before := victim.rounds.Load()
	r := e.startWorker(repl)
	e.within(bound, "the replacement's rounds go on", func() bool { return r.rounds.Load() >= 3 })
	errs := e.finish(e.c.Servers...)
	for n, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	for rk, c := range r.counts {
		if own := r.rounds.Load(); c < before+own || c > before+own+1 {
			t.Errorf("replacement's key on server %d holds %d, want %d+%d", rk, c, before, own)
		}
	}
}

// Row: a server killed, no replacement: the workers' requests fail naming
// the server (at once without resending, on the job's failure with it),
// and every node fails within the bound.
func TestServerKilled(t *testing.T) {
	for _, rs := range []bool{false, true} {
		t.Run(fmt.Sprintf("resend=%v", rs), func(t *testing.T) {
			tweak := heartbeats(hbTimeout)
			if rs {
				tweak = both(tweak, resend)
			}
			e := newEnv(t, 2, 2, tweak)
			e.startWorkers()
			e.waitRounds(3)
			victim := e.c.Servers[1]
			e.kill(victim)
			survivors := without(e.c.All(), victim)
			took := e.within(bound, "every survivor fails", allFailed(survivors))
			t.Logf("every survivor failed %v after the kill", took)
			for i, r := range e.workers {
				<-r.done
				if r.err == nil || !strings.Contains(r.err.Error(), "server 1 (node 10)") {
					t.Errorf("worker %d ended with %v, want an error naming server 1", i, r.err)
				}
			}
			e.expectFailed(survivors, "server 1 (node 10)")
		})
	}
}

// Row: a server killed and restarted, no replicas: the replacement takes
// its id with an empty store. What the workers pushed to it is gone, so
// the job stops, naming the server, its keys and the pushes lost (never a
// plain success).
func TestServerRestartedLosesState(t *testing.T) {
	e := newEnv(t, 2, 1, both(heartbeats(hbTimeout), resend))
	e.startWorkers()
	e.waitRounds(3)
	victim := e.c.Servers[1]
	e.kill(victim)
	repl := e.newNode(message.RoleServer)
	go repl.Start(context.Background(), 0, true)
	e.registered(repl)
	survivors := append(without(e.c.All(), victim), repl)
	took := e.within(bound, "every node fails", allFailed(survivors))
	t.Logf("every node failed %v after the kill", took)
	for _, p := range survivors {
		err := p.Err()
		if !strings.Contains(err.Error(), "server 1's state was lost") || !strings.Contains(err.Error(), "pushes this worker made to it") {
			t.Errorf("%s: %v, want the loss of server 1's state named", name(p), err)
		}
	}
	<-e.workers[0].done
	if err := e.workers[0].err; !errors.Is(err, kv.ErrStateLost) {
		t.Errorf("the worker ended with %v, want kv.ErrStateLost", err)
	}
}

// Row: a server killed and restarted, no replicas, in a program that
// accepts losing state (kv.KVWorker.AcceptStateLoss): the job completes;
// the worker knows exactly how many of its pushes the restart lost, and
// the replacement holds exactly the rest.
func TestServerRestartedAcceptingLoss(t *testing.T) {
	e := newEnv(t, 2, 1, both(heartbeats(hbTimeout), resend))
	e.acceptLoss = true
	e.startWorkers()
	e.waitRounds(3)
	victim := e.c.Servers[1]
	e.kill(victim)
	repl := e.newNode(message.RoleServer)
	e.join(repl)
	e.serve(repl)
	after := e.workers[0].rounds.Load()
	e.within(bound, "rounds go on", func() bool {
		return e.workers[0].rounds.Load() > after+3
	})
	w := e.workers[0]
	kw := w.w.Load()
	errs := e.finish(e.c.Servers[0], repl)
	for n, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	var lost *kv.StateLostError
	if err := kw.StateLoss(); !errors.As(err, &lost) || lost.Server != 1 || lost.Pushes < 1 {
		t.Fatalf("StateLoss() = %v, want server 1's pushes lost", err)
	}
	rounds := w.rounds.Load()
	if len(w.counts) != 2 || w.counts[0] != rounds || w.counts[1] != rounds-lost.Pushes {
		t.Errorf("counts %v after %d rounds, %d lost on server 1: want [%d %d]", w.counts, rounds, lost.Pushes, rounds, rounds-lost.Pushes)
	}
}

// Row: the scheduler killed: every node fails on its own, naming the
// scheduler (its connection closed), within the bound.
func TestSchedulerKilled(t *testing.T) {
	e := newEnv(t, 2, 2, heartbeats(hbTimeout))
	e.startWorkers()
	e.waitRounds(3)
	e.kill(e.c.Scheduler)
	nodes := append(append([]*postoffice.Postoffice{}, e.c.Servers...), e.c.Workers...)
	took := e.within(bound, "every node fails", allFailed(nodes))
	t.Logf("every node failed %v after the kill", took)
	e.expectFailed(nodes, "scheduler (node 1)")
}

// Rows: a link down 5 s, and a process stopped 20 s then continued (with a
// heartbeat timeout above the silence, or heartbeats off): the job
// completes with exact counts.
func TestShortFaultsComplete(t *testing.T) {
	cases := []struct {
		name  string
		tweak func(*postoffice.Config)
		fault func(e *env, p *postoffice.Postoffice) (heal func())
		for_  time.Duration
	}{
		{"link down 5s", heartbeats(10 * time.Second), isolate, 5 * time.Second},
		{"link down 5s, resend", both(heartbeats(10*time.Second), resend), isolate, 5 * time.Second},
		{"stopped 20s", heartbeats(30 * time.Second), pause, 20 * time.Second},
		{"stopped 20s, heartbeats off", nil, pause, 20 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 2, 2, c.tweak)
			e.startWorkers()
			e.waitRounds(3)
			heal := c.fault(e, e.c.Servers[1])
			e.advance(c.for_)
			heal()
			e.waitRounds(3)
			errs := e.finish(e.c.Servers...)
			for n, err := range errs {
				if err != nil {
					t.Errorf("%s: %v", n, err)
				}
			}
			for i, r := range e.workers {
				for s, got := range r.counts {
					if got != r.rounds.Load() {
						t.Errorf("worker %d: server %d holds %d of %d rounds", i, s, got, r.rounds.Load())
					}
				}
			}
		})
	}
}

func isolate(e *env, p *postoffice.Postoffice) func() {
	e.net.Isolate(testcluster.Addr(p))
	return e.net.Heal
}

func pause(e *env, p *postoffice.Postoffice) func() {
	addr := testcluster.Addr(p)
	e.net.Pause(addr)
	return func() { e.net.Resume(addr) }
}

// Row: a link down 60 s. Without heartbeats, with or without resending,
// TCP (here, the held link) rides it out and the job completes: resending
// gives up only PS_RESEND_GIVEUP (180 s) after a message's first send. A
// link down past that is given up on: the worker's request fails, the
// worker exits, and every other node fails within the bound (the cut-off
// server once the link returns). With heartbeats (5 s), everyone fails
// within the bound, the cut-off server on its own.
func TestLongPartition(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  func(*postoffice.Config)
	}{{"no resend, no heartbeats: completes", nil}, {"resend, no heartbeats: completes", resend}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 2, 1, c.cfg)
			e.startWorkers()
			e.waitRounds(3)
			heal := isolate(e, e.c.Servers[1])
			e.advance(60 * time.Second)
			heal()
			e.waitRounds(3)
			for n, err := range e.finish(e.c.Servers...) {
				if err != nil {
					t.Errorf("%s: %v", n, err)
				}
			}
		})
	}
	t.Run("resend: past PS_RESEND_GIVEUP", func(t *testing.T) {
		e := newEnv(t, 2, 1, resend)
		// Rounds one by one, so that the cut falls between two: the
		// next request cannot arrive. (One that arrived before a cut waits
		// for its answer until the link returns, as over plain TCP.)
		w := &workerRun{p: e.c.Workers[0], stop: make(chan struct{}), gate: make(chan struct{}, 3), done: make(chan struct{})}
		w.on.Store(running)
		e.workers = append(e.workers, w)
		go func() { defer close(w.done); w.err = w.run() }()
		for range 3 {
			w.release()
		}
		e.waitReal("three rounds", func() bool { return w.rounds.Load() == 3 })
		cut := e.c.Servers[1]
		heal := isolate(e, cut)
		w.release()
		took := e.within(control.DefaultResendGiveUp+10*time.Second, "the worker's request fails", func() bool { return isDone(w.done) })
		t.Logf("the worker's request failed %v into the partition: %v", took, w.err)
		if w.err == nil || !strings.Contains(w.err.Error(), "server 1 (node 10)") || !strings.Contains(w.err.Error(), "PS_RESEND_GIVEUP") {
			t.Fatalf("worker: %v, want an error naming server 1 and PS_RESEND_GIVEUP", w.err)
		}
		if took < control.DefaultResendGiveUp {
			t.Errorf("given up on after %v, before PS_RESEND_GIVEUP", took)
		}
		e.kill(w.p) // the worker program exits on the error
		e.within(bound, "the others fail", func() bool { return failed(e.c.Scheduler) && failed(e.c.Servers[0]) })
		heal()
		e.within(bound, "the cut-off server fails once the link is back", func() bool { return failed(cut) })
		e.expectFailed([]*postoffice.Postoffice{e.c.Scheduler, e.c.Servers[0], cut}, "worker 0 (node 9)")
	})
	t.Run("heartbeats: everyone fails", func(t *testing.T) {
		e := newEnv(t, 2, 1, heartbeats(hbTimeout))
		e.startWorkers()
		e.waitRounds(3)
		cut := e.c.Servers[1]
		isolate(e, cut)
		took := e.within(bound, "every node fails", allFailed(e.c.All()))
		t.Logf("every node failed %v into the partition", took)
		e.expectFailed(without(e.c.All(), cut), "server 1 (node 10)")
		e.expectFailed([]*postoffice.Postoffice{cut}, "scheduler (node 1)")
	})
}

// Row: a link down for good is the node being dead: with heartbeats, every
// node fails within the bound, the cut-off one included.
func TestLinkDownForGood(t *testing.T) {
	for _, who := range []string{"worker", "scheduler"} {
		t.Run(who, func(t *testing.T) {
			e := newEnv(t, 2, 2, heartbeats(hbTimeout))
			e.startWorkers()
			e.waitRounds(3)
			cut, lost := e.c.Workers[0], "worker 0 (node 9)"
			if who == "scheduler" {
				cut, lost = e.c.Scheduler, "scheduler (node 1)"
			}
			isolate(e, cut)
			took := e.within(bound, "every node fails", allFailed(e.c.All()))
			t.Logf("every node failed %v after the cut", took)
			e.expectFailed(without(e.c.All(), cut), lost)
		})
	}
}

// Row: PS_RESEND with several worker customers in one process, on a lossy
// network: every customer's requests complete, every push counted once.
// (Customers number their requests from one counter per process, so no two
// requests share a resend signature.)
func TestResendSeveralCustomers(t *testing.T) {
	net := van.NewMemNetworkClock(van.SystemClock(), 7)
	c := testcluster.New(t, 2, 2, testcluster.Options{Network: net, NoStart: true, Quiet: true, Tweak: func(cfg *postoffice.Config) {
		cfg.Resend = true
		cfg.ResendTimeout = 20 * time.Millisecond
		cfg.ResendMaxRetry = 200
	}})
	proc := c.Workers[0] // hosts both workers, as customers 0 and 1
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes := append([]*postoffice.Postoffice{c.Scheduler}, c.Servers...)
	started := make(chan error, len(nodes)+2)
	for _, p := range nodes {
		go func() { started <- p.Start(ctx, 0, true) }()
	}
	for cid := range 2 {
		go func() { started <- proc.Start(ctx, cid, true) }()
	}
	for range len(nodes) + 2 {
		if err := <-started; err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, c: c}
	for _, p := range c.Servers {
		e.serve(p)
	}
	net.DropAll(0.1)
	const rounds = 30
	errs := make(chan error, 2)
	for cid := range 2 {
		go func() {
			w, err := kv.NewKVWorker[int64](proc, 0, cid)
			if err != nil {
				errs <- err
				return
			}
			var keys []uint64
			for _, r := range proc.ServerKeyRanges() {
				keys = append(keys, r.Begin+uint64(cid))
			}
			ones := []int64{1, 1}
			for i := 0; i < rounds; i++ {
				ts, err := w.Push(keys, ones, nil)
				if err == nil {
					err = w.WaitContext(ctx, ts)
				}
				if err != nil {
					errs <- fmt.Errorf("customer %d round %d: %w", cid, i, err)
					return
				}
			}
			var got []int64
			ts, err := w.Pull(keys, &got, nil)
			if err == nil {
				err = w.WaitContext(ctx, ts)
			}
			if err == nil && (len(got) != 2 || got[0] != rounds || got[1] != rounds) {
				err = fmt.Errorf("customer %d pulled %v, want %d on each server", cid, got, rounds)
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// A tenth of the messages were lost: the resenders sent some again,
	// and counted them, in messages and bytes, among the bytes sent.
	var resent, resentBytes int64
	for _, p := range append(nodes, proc) {
		m, b := p.Van().ResendStats()
		if sent, _ := p.Van().Stats(); b > sent || (m == 0) != (b == 0) {
			t.Errorf("node %d resent %d messages of %d bytes, and sent %d bytes in all", p.MyID(), m, b, sent)
		}
		resent, resentBytes = resent+m, resentBytes+b
	}
	if resent == 0 {
		t.Error("no resend counted, with a tenth of the messages lost")
	}
	t.Logf("resent %d messages, %d bytes", resent, resentBytes)
	net.DropAll(0)
	if err := testcluster.Each(append(nodes, proc), func(p *postoffice.Postoffice) error {
		if p == proc {
			done := make(chan error, 1)
			go func() { done <- p.Finalize(ctx, 1, true) }()
			return errors.Join(p.Finalize(ctx, 0, true), <-done)
		}
		return p.Finalize(ctx, 0, true)
	}); err != nil {
		t.Fatal(err)
	}
}
