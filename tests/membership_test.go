package tests

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
)

// forger sends well-formed messages under a ZeroMQ identity of its choice
// (none when empty) to one node.
type forger struct {
	s *zmq.Socket
}

func newForger(t *testing.T, ctx *zmq.Context, ident string, port int32) *forger {
	t.Helper()
	s, err := ctx.NewSocket(zmq.DEALER)
	if err != nil {
		t.Fatal(err)
	}
	if ident != "" {
		s.SetIdentity(ident)
	}
	s.SetLinger(0)
	s.SetSndhwm(0)
	if err := s.Connect(fmt.Sprintf("tcp://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	return &forger{s}
}

// send sends meta and data as one message.
func (f *forger) send(t *testing.T, meta message.Meta, data ...[]byte) {
	b, err := message.Encode(&meta)
	if err != nil {
		t.Error(err)
		return
	}
	if err := sendMultipart(f.s, append([][]byte{b}, data...)); err != nil {
		t.Error(err)
	}
}

// sendMultipart sends frames as one message on s.
func sendMultipart(s *zmq.Socket, frames [][]byte) error {
	for i, fr := range frames {
		flag := zmq.SNDMORE
		if i == len(frames)-1 {
			flag = 0
		}
		if _, err := s.SendBytes(fr, flag); err != nil {
			return err
		}
	}
	return nil
}

// pushExact has every worker of c push 1,000 keys of its own repeat times
// and pull them back exactly (testcluster.PushRepeatPull).
func pushExact(t *testing.T, c *testcluster.Cluster, repeat int) {
	t.Helper()
	eachWorker(t, c, func(r int, w *kv.KVWorker[float32]) error {
		keys := make([]uint64, 1000)
		vals := make([]float32, 1000)
		for i := range keys {
			keys[i] = message.MaxKey/1000*uint64(i) + uint64(r)
			vals[i] = float32(i % 97)
		}
		return testcluster.PushRepeatPull(w, keys, vals, repeat)
	})
}

// eachWorker runs f at once on every worker of c, each with a float32 KV
// worker of its own (app 0, customer 0), waits for them, and fails the test
// with the error of each worker whose f failed.
func eachWorker(t *testing.T, c *testcluster.Cluster, f func(rank int, w *kv.KVWorker[float32]) error) {
	t.Helper()
	var wg sync.WaitGroup
	for r, p := range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := kv.NewKVWorker[float32](p, 0, 0)
			if err == nil {
				err = f(r, w)
			}
			if err != nil {
				t.Errorf("worker %d: %v", r, err)
			}
		}()
	}
	wg.Wait()
}

// serveKV puts a float32 KV server with a default handle on every server.
func serveKV(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	for _, p := range c.Servers {
		s, err := kv.NewKVServer[float32](p, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetRequestHandle(kv.NewDefaultHandle[float32]().Handle); err != nil {
			t.Fatal(err)
		}
	}
}

// TestForgedMetasFromNonMembers runs a 2x2 job (members 1, 8, 9, 10, 11)
// while identities that are not members of it (ps12, ps13) forge every kind
// of message a member could send: pushes to the servers, pull and push
// responses to the workers for the very timestamps the workers use,
// requests to the workers, barrier requests and heartbeats (naming members)
// to the scheduler; and a stray node registers once the job is full. The
// workers' results must be exact and the job must end cleanly.
func TestForgedMetasFromNonMembers(t *testing.T) {
	c := testcluster.New(t, 2, 2, testcluster.Options{Quiet: true})
	serveKV(t, c)
	const nkeys = 200
	keys := make([]uint64, nkeys)
	for i := range keys {
		keys[i] = message.MaxKey / nkeys * uint64(i)
	}
	// The workers' own keys (see below), which the forged pushes target.
	var ownKeys [2][]byte
	for r := range ownKeys {
		own := make([]uint64, nkeys)
		for i := range own {
			own[i] = keys[i] + 1 + uint64(r)
		}
		ownKeys[r] = message.Frame(own)
	}
	ones := make([]float32, nkeys)
	for i := range ones {
		ones[i] = 1000
	}
	valFrame := message.Frame(ones)
	kvTypes := []message.DataType{message.Uint64, message.Float}
	// The timestamps the workers' requests will carry: each van numbers
	// its requests from one counter.
	var first [2]int32
	for i, w := range c.Workers {
		first[i] = w.Van().NextTimestamp()
	}

	ctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var rounds atomic.Int64
	var attack sync.WaitGroup
	attack.Add(1)
	go func() {
		defer attack.Done()
		var toServers, toWorkers []*forger
		for _, ident := range []string{"ps12", "ps13"} {
			for _, p := range c.Servers {
				toServers = append(toServers, newForger(t, ctx, ident, p.Van().MyNode().Port))
			}
		}
		for _, p := range c.Workers {
			toWorkers = append(toWorkers, newForger(t, ctx, "ps12", p.Van().MyNode().Port))
		}
		toSched := newForger(t, ctx, "ps13", c.Scheduler.Van().MyNode().Port)
		stray := newForger(t, ctx, "", c.Scheduler.Van().MyNode().Port)
		// ctx.Term waits for every socket to be closed: left to the
		// garbage collector's finalizers, it took from 1 to 100 s.
		defer func() {
			for _, f := range append(append(toServers, toWorkers...), toSched, stray) {
				f.s.Close()
			}
		}()
		stray.send(t, message.Meta{Control: message.Control{Cmd: message.CmdAddNode,
			Nodes: []message.Node{{Role: message.RoleWorker, ID: message.Empty, Hostname: "127.0.0.1", Port: int32(testcluster.FreePort(t))}}}})
		for !stop.Load() {
			for _, f := range toServers {
				for _, k := range ownKeys {
					f.send(t, message.Meta{AppID: 0, CustomerID: 0, Timestamp: 7, Request: true, Push: true, DataTypes: kvTypes}, k, valFrame)
				}
			}
			for i, f := range toWorkers {
				for ts := first[i]; ts < first[i]+50; ts++ {
					f.send(t, message.Meta{AppID: 0, CustomerID: 0, Timestamp: ts, Push: true})
					f.send(t, message.Meta{AppID: 0, CustomerID: 0, Timestamp: ts, Pull: true, DataTypes: kvTypes}, ownKeys[i], valFrame)
				}
				f.send(t, message.Meta{AppID: 0, CustomerID: 0, Timestamp: 3, Request: true, Pull: true, DataTypes: kvTypes}, ownKeys[i], valFrame)
			}
			for _, g := range []int{message.AllGroup, message.ServerGroup, message.WorkerGroup, message.ServerGroup + message.Scheduler} {
				toSched.send(t, message.Meta{Request: true, Timestamp: 5, Control: message.Control{Cmd: message.CmdBarrier, BarrierGroup: int32(g)}})
			}
			for _, id := range []int32{1, 8, 9, 10, 11} {
				toSched.send(t, message.Meta{Timestamp: 6, Control: message.Control{Cmd: message.CmdHeartbeat,
					Nodes: []message.Node{{Role: message.RoleServer, ID: id, Hostname: "127.0.0.1", Port: 1}}}})
			}
			rounds.Add(1)
			runtime.Gosched()
		}
	}()

	eachWorker(t, c, func(r int, w *kv.KVWorker[float32]) error {
		vals := make([]float32, nkeys)
		for i := range vals {
			vals[i] = float32(i%7 + r)
		}
		// Both workers push the same keys: each pulls the sum of both
		// workers' pushes once both have pushed, so check each worker's
		// own rounds through distinct keys.
		own := make([]uint64, nkeys)
		for i := range own {
			own[i] = keys[i] + 1 + uint64(r)
		}
		return testcluster.PushRepeatPull(w, own, vals, 20)
	})
	stop.Store(true)
	attack.Wait()
	ctx.Term()
	t.Logf("%d rounds of forged messages during the job", rounds.Load())
	if rounds.Load() == 0 {
		t.Error("the attack never ran")
	}
	c.Finalize(t)
}

// A second job started by mistake on the scheduler port of a running one
// (its scheduler cannot bind; its server and worker register with the
// first job's scheduler) is refused: its nodes exit non-zero within a few
// seconds saying the job is full, and the first job, with its defaults
// (heartbeats off), completes with exact counts. The intruders used to be
// queued, take over live nodes' ids 60 s in, and hang both jobs.
func TestSecondJobOnTheSamePort(t *testing.T) {
	const rounds = 40
	r := startRow(t, false, 1, 1, rounds, nil)
	ref := time.Now()
	var intruders []*proc
	for _, role := range []string{"server", "worker"} {
		intruders = append(intruders, r.h.start(t, r.h.n-1, role, nil, bin("test_recovery"), "-rounds", "5", "-pause", "100ms"))
	}
	rs := r.h.wait(t, ref, 60*time.Second)
	t.Logf("a second job's server and worker on the same scheduler port:%s", summary(rs))
	expectCompleted(t, rs, intruders...)
	for _, p := range intruders {
		res := find(rs, p.name)
		switch {
		case res.running:
			t.Errorf("%s still running: a hang", p.name)
		case res.code == 0:
			t.Errorf("%s exited 0: it joined a job that was full", p.name)
		case !strings.Contains(res.out, "refused") || !strings.Contains(res.out, "full"):
			t.Errorf("%s failed without saying it was refused:\n%s", p.name, lastLines(res.out, 5))
		case res.at > 10*time.Second:
			t.Errorf("%s refused only %v after it started", p.name, res.at)
		}
	}
	for _, c := range counts(r.j.workers[0].output()) {
		for s, n := range c {
			if n > rounds {
				t.Errorf("the worker's key on server %d holds %d after %d rounds: an intruder's pushes landed", s, n, rounds)
			}
		}
	}
}
