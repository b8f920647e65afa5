package kv_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// startServers puts a KVServer with a default handle on every server.
func startServers[V message.Value](t *testing.T, c *testcluster.Cluster) []*kv.DefaultHandle[V] {
	t.Helper()
	var hs []*kv.DefaultHandle[V]
	for _, p := range c.Servers {
		s, err := kv.NewKVServer[V](p, 0)
		if err != nil {
			t.Fatal(err)
		}
		h := kv.NewDefaultHandle[V]()
		if err := s.SetRequestHandle(h.Handle); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	return hs
}

func spreadKeys(n int, offset uint64) []uint64 {
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = message.MaxKey/uint64(n)*uint64(i) + offset
	}
	return keys
}

func pushPullExact[V message.Value](t *testing.T, van string, n int) {
	c := testcluster.New(t, 2, 2, testcluster.Options{Van: van})
	startServers[V](t, c)
	var wg sync.WaitGroup
	for r, p := range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := kv.NewKVWorker[V](p, 0, 0)
			if err != nil {
				t.Error(err)
				return
			}
			keys := spreadKeys(n, uint64(r))
			vals := make([]V, len(keys))
			for i := range vals {
				vals[i] = V((i + r) % 100)
			}
			const repeat = 5
			if err := testcluster.PushRepeatPull(w, keys, vals, repeat); err != nil {
				t.Errorf("worker %d: %v", r, err)
				return
			}
			var outs []V
			ts, err := w.PushPull(keys, vals, &outs, nil)
			if err == nil {
				err = w.Wait(ts)
			}
			if err != nil {
				t.Error(err)
				return
			}
			for i := range keys {
				if outs[i] != vals[i]*(repeat+1) {
					t.Errorf("pushpull key %d: got %v want %v", i, outs[i], vals[i]*(repeat+1))
					return
				}
			}
		}()
	}
	wg.Wait()
	c.Finalize(t)
}

// Pushes, a pull and a push-pull of every value type, each value checked,
// on every transport at sizes below and above the lending threshold
// (frames of 512 KiB): 1,000 keys, and 300,000 keys, which lend 1.2 MB of
// keys and 600 KB of float32 values to each of the two servers. And above
// the size from which fresh value slices ask for huge pages (two huge
// pages, 4 MiB: internal/hugemem), both in a worker's pull destination and
// in DefaultHandle's answer: 1,200,000 float64 keys, 9.6 MB of values a
// worker pulls, 4.8 MB a server answers.
func TestPushPullTypes(t *testing.T) {
	for _, van := range testcluster.Vans() {
		for _, n := range []int{1000, 300000} {
			t.Run(fmt.Sprintf("float32/%s/keys=%d", van, n), func(t *testing.T) { pushPullExact[float32](t, van, n) })
		}
	}
	for _, van := range testcluster.Vans()[:min(2, len(testcluster.Vans()))] {
		t.Run(fmt.Sprintf("float64/%s/keys=1200000", van), func(t *testing.T) {
			if testing.Short() {
				t.Skip("25 s with -race")
			}
			pushPullExact[float64](t, van, 1_200_000)
		})
	}
	t.Run("float64", func(t *testing.T) { pushPullExact[float64](t, "mem", 300000) })
	t.Run("int32", func(t *testing.T) { pushPullExact[int32](t, "mem", 1000) })
	t.Run("int64", func(t *testing.T) { pushPullExact[int64](t, "mem", 1000) })
	t.Run("uint8", func(t *testing.T) { pushPullExact[uint8](t, "mem", 1000) })
}

func TestLensAndCallbacks(t *testing.T) {
	c := testcluster.New(t, 3, 1, testcluster.Options{Mem: true})
	startServers[float64](t, c)
	w, err := kv.NewKVWorker[float64](c.Workers[0], 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := spreadKeys(30, 5)
	lens := make([]int32, len(keys))
	var vals []float64
	for i := range keys {
		lens[i] = int32(i % 4) // includes zero-length keys
		for j := 0; j < int(lens[i]); j++ {
			vals = append(vals, float64(i*10+j))
		}
	}
	var ran atomic.Bool
	ts, err := w.Push(keys, vals, lens, kv.WithCallback(func() { ran.Store(true) }), kv.WithCmd(3))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ts); err != nil {
		t.Fatal(err)
	}
	if !ran.Load() {
		t.Error("callback had not run when Wait returned")
	}
	var got []float64
	var gotLens []int32
	ts, err = w.Pull(keys, &got, &gotLens)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ts); err != nil {
		t.Fatal(err)
	}
	// A key pushed with no values reads back as one zero.
	var want []float64
	var wantLens []int32
	for i := range keys {
		if lens[i] == 0 {
			want = append(want, 0)
			wantLens = append(wantLens, 1)
			continue
		}
		want = append(want, vals[sumLens(lens[:i]):sumLens(lens[:i+1])]...)
		wantLens = append(wantLens, lens[i])
	}
	if !slices.Equal(got, want) || !slices.Equal(gotLens, wantLens) {
		t.Errorf("pull with lens:\n got %v %v\nwant %v %v", got, gotLens, want, wantLens)
	}
	c.Finalize(t)
}

func sumLens(l []int32) int {
	s := 0
	for _, x := range l {
		s += int(x)
	}
	return s
}

func TestBadArguments(t *testing.T) {
	c := testcluster.New(t, 2, 1, testcluster.Options{Mem: true})
	startServers[float32](t, c)
	w, err := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Push([]uint64{5, 3}, []float32{1, 2}, nil); !errors.Is(err, kv.ErrUnsortedKeys) {
		t.Errorf("unsorted keys: %v", err)
	}
	if _, err := w.Push([]uint64{1, 2}, []float32{1, 2, 3}, nil); err == nil {
		t.Error("3 values for 2 keys accepted")
	}
	if _, err := w.Push([]uint64{1, 2}, []float32{1, 2, 3}, []int32{1, 1}); err == nil {
		t.Error("lens summing to 2 with 3 values accepted")
	}
	if _, err := w.Pull([]uint64{1}, nil, nil); err == nil {
		t.Error("nil destination accepted")
	}
	if err := w.SetSlicer(nil); err == nil {
		t.Error("nil slicer accepted")
	}
	// Pulling into a destination of the wrong size fails the request.
	dst := make([]float32, 5)
	ts, err := w.Pull([]uint64{1, 2}, &dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ts); err == nil {
		t.Error("pull into a 5-value slice for 2 keys succeeded")
	}
	// Empty requests finish at once.
	ts, err = w.Push(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ts); err != nil {
		t.Fatal(err)
	}
	c.Finalize(t)
}

func TestUserSlicerAndCmd(t *testing.T) {
	c := testcluster.New(t, 2, 1, testcluster.Options{Mem: true})
	var cmds sync.Map
	for _, p := range c.Servers {
		i := p.MyRank()
		s, err := kv.NewKVServer[int64](p, 0)
		if err != nil {
			t.Fatal(err)
		}
		s.SetRequestHandle(func(meta kv.KVMeta, data kv.KVPairs[int64], s *kv.KVServer[int64]) {
			cmds.Store(i, meta.Cmd)
			res := kv.KVPairs[int64]{}
			if meta.Pull {
				res.Keys = data.Keys
				for range data.Keys {
					res.Vals = append(res.Vals, int64(i))
				}
			}
			s.Response(meta, res)
		})
	}
	w, _ := kv.NewKVWorker[int64](c.Workers[0], 0, 0)
	// Send everything to server 1.
	w.SetSlicer(func(kvs kv.KVPairs[int64], ranges []postoffice.Range) ([]kv.KVPairs[int64], error) {
		parts := make([]kv.KVPairs[int64], len(ranges))
		parts[1] = kvs
		return parts, nil
	})
	var got []int64
	ts, err := w.Pull([]uint64{1, 2, 3}, &got, nil, kv.WithCmd(42))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ts); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []int64{1, 1, 1}) {
		t.Errorf("got %v, want all from server 1", got)
	}
	if v, _ := cmds.Load(1); v != 42 {
		t.Errorf("server 1 saw cmd %v", v)
	}
	if _, ok := cmds.Load(0); ok {
		t.Error("server 0 got a request")
	}
	c.Finalize(t)
}

func TestSimpleAppOnKVServer(t *testing.T) {
	c := testcluster.New(t, 2, 1, testcluster.Options{Mem: true})
	var got sync.Map
	for i, p := range c.Servers {
		s, err := kv.NewKVServer[float32](p, 0)
		if err != nil {
			t.Fatal(err)
		}
		s.SetSimpleRequestHandle(func(d kv.SimpleData, app *kv.SimpleApp) {
			got.Store(i, d.Body)
			app.Response(d, "ack")
		})
		s.SetRequestHandle(kv.NewDefaultHandle[float32]().Handle)
	}
	w, _ := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
	var bodies []string
	var mu sync.Mutex
	w.SetResponseHandle(func(d kv.SimpleData, _ *kv.SimpleApp) {
		mu.Lock()
		bodies = append(bodies, d.Body)
		mu.Unlock()
	})
	ts, err := w.Request(7, "sync mode", message.ServerGroup)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ts); err != nil {
		t.Fatal(err)
	}
	for i := range c.Servers {
		if b, _ := got.Load(i); b != "sync mode" {
			t.Errorf("server %d got %v", i, b)
		}
	}
	if len(bodies) != 2 || bodies[0] != "ack" {
		t.Errorf("responses %v", bodies)
	}
	c.Finalize(t)
}

// Requests that reach a node before its SimpleApp exists are held, and the
// handle set right after NewSimpleApp answers every one of them (none goes
// to the default handle, and -race sees no race between the app being
// built and its customer running).
func TestHeldMessagesMeetTheHandle(t *testing.T) {
	for round := 0; round < 20; round++ {
		c := testcluster.New(t, 1, 1, testcluster.Options{Mem: true})
		// Customer id = app id: a scheduler routes by app id alone (C++
		// ps-lite's rule for non-workers).
		sched, err := kv.NewSimpleApp(c.Scheduler, 3, 3)
		if err != nil {
			t.Fatal(err)
		}
		const n = 10
		var ts []int
		for i := 0; i < n; i++ {
			id, err := sched.Request(1, fmt.Sprint(i), c.Workers[0].MyID())
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, id)
		}
		deadline := time.Now().Add(10 * time.Second)
		for c.Workers[0].HeldMessages() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d requests held", c.Workers[0].HeldMessages(), n)
			}
			runtime.Gosched()
		}
		app, err := kv.NewSimpleApp(c.Workers[0], 3, 3)
		if err != nil {
			t.Fatal(err)
		}
		// A caller that takes its time to set the handle: not a
		// synchronisation, the app must hold the requests whatever the gap.
		time.Sleep(5 * time.Millisecond)
		var handled atomic.Int32
		app.SetRequestHandle(func(d kv.SimpleData, a *kv.SimpleApp) {
			handled.Add(1)
			a.Response(d, "mine")
		})
		var bodies []string
		var mu sync.Mutex
		sched.SetResponseHandle(func(d kv.SimpleData, _ *kv.SimpleApp) {
			mu.Lock()
			bodies = append(bodies, d.Body)
			mu.Unlock()
		})
		for _, id := range ts {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := sched.WaitContext(ctx, id)
			cancel()
			if err != nil {
				t.Fatalf("round %d: request %d: %v (handled %d, held %d)", round, id, err, handled.Load(), c.Workers[0].HeldMessages())
			}
		}
		if handled.Load() != n || c.Workers[0].HeldMessages() != 0 {
			t.Fatalf("round %d: the handle saw %d of %d held requests", round, handled.Load(), n)
		}
		mu.Lock()
		for _, b := range bodies {
			if b != "mine" {
				t.Fatalf("round %d: a held request was answered by the default handle", round)
			}
		}
		mu.Unlock()
		c.Finalize(t)
	}
}

// A SimpleApp that never sets a handle still answers with the default one
// once its node finalizes, so a peer that waits on it before its own
// Finalize is not stuck (as test_simple_app's scheduler does).
func TestSimpleAppWithoutHandlesAnswersAtFinalize(t *testing.T) {
	c := testcluster.New(t, 1, 1, testcluster.Options{Mem: true})
	sched, _ := kv.NewSimpleApp(c.Scheduler, 3, 3)
	if _, err := kv.NewSimpleApp(c.Workers[0], 3, 3); err != nil {
		t.Fatal(err)
	}
	ts, err := sched.Request(1, "x", c.Workers[0].MyID())
	if err != nil {
		t.Fatal(err)
	}
	finalized := make(chan error, 2)
	for _, p := range []*postoffice.Postoffice{c.Workers[0], c.Servers[0]} {
		go func() { finalized <- p.Finalize(context.Background(), 0, true) }()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sched.WaitContext(ctx, ts); err != nil {
		t.Fatalf("the request was never answered: %v", err)
	}
	if err := c.Scheduler.Finalize(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-finalized; err != nil {
			t.Fatal(err)
		}
	}
}

func TestMultipleCustomersInOneProcess(t *testing.T) {
	// One worker process hosting two customers (ids 0 and 1) counts as two
	// workers, as in test_kv_app_multi_workers.
	c := testcluster.New(t, 2, 2, testcluster.Options{Mem: true, NoStart: true})
	nodes := append([]*postoffice.Postoffice{c.Scheduler}, c.Servers...)
	proc := c.Workers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, p := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- p.Start(ctx, 0, true) }()
	}
	startServers[float32](t, c)
	for cid := 0; cid < 2; cid++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := proc.Start(ctx, cid, true); err != nil {
				errs <- err
				return
			}
			w, err := kv.NewKVWorker[float32](proc, 0, cid)
			if err != nil {
				errs <- err
				return
			}
			keys := spreadKeys(100, uint64(cid))
			vals := make([]float32, len(keys))
			for i := range vals {
				vals[i] = float32(i + cid)
			}
			ts, _ := w.Push(keys, vals, nil)
			w.Wait(ts)
			var got []float32
			ts, _ = w.Pull(keys, &got, nil)
			if err := w.Wait(ts); err != nil || !slices.Equal(got, vals) {
				errs <- fmt.Errorf("customer %d: %v %v", cid, err, got[:3])
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	all := append(nodes, proc)
	if err := testcluster.Each(all, func(p *postoffice.Postoffice) error {
		if p == proc {
			var e1 error
			done := make(chan struct{})
			go func() { e1 = p.Finalize(ctx, 1, true); close(done) }()
			e0 := p.Finalize(ctx, 0, true)
			<-done
			return errors.Join(e0, e1)
		}
		return p.Finalize(ctx, 0, true)
	}); err != nil {
		t.Fatal(err)
	}
}

func TestPriorityOrder(t *testing.T) {
	c := testcluster.New(t, 1, 1, testcluster.Options{Mem: true})
	block, reached := make(chan struct{}), make(chan struct{})
	var order []int
	var mu sync.Mutex
	s, _ := kv.NewKVServer[float32](c.Servers[0], 0)
	first := true
	s.SetRequestHandle(func(meta kv.KVMeta, data kv.KVPairs[float32], s *kv.KVServer[float32]) {
		if first {
			first = false
			close(reached)
			<-block // hold the queue so the rest pile up
		}
		mu.Lock()
		order = append(order, meta.Cmd)
		mu.Unlock()
		s.Response(meta, kv.KVPairs[float32]{})
	})
	w, _ := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
	var tss []int
	ts, _ := w.Push([]uint64{1}, []float32{1}, nil, kv.WithCmd(0))
	tss = append(tss, ts)
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the handle")
	}
	for i, p := range []int{1, 5, 3} {
		ts, _ := w.Push([]uint64{1}, []float32{1}, nil, kv.WithCmd(i+1), kv.WithPriority(p))
		tss = append(tss, ts)
	}
	// The pushes are in the server's inbox. Once the network settles the
	// server has taken them in (on a new receive goroutine, the first one
	// being held by the blocked handle), so they wait in its queue.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Network.Settle(ctx); err != nil {
		t.Fatalf("the network did not settle: %v", err)
	}
	close(block)
	for _, ts := range tss {
		w.Wait(ts)
	}
	if !slices.Equal(order, []int{0, 2, 3, 1}) {
		t.Errorf("handled in order %v, want [0 2 3 1] (priority 5, 3, 1)", order)
	}
	c.Finalize(t)
}

func TestConcurrentRandomPushes(t *testing.T) {
	c := testcluster.New(t, 3, 2, testcluster.Options{})
	hs := startServers[int64](t, c)
	const perWorker = 200
	var wg sync.WaitGroup
	for r, p := range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, _ := kv.NewKVWorker[int64](p, 0, 0)
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			var tss []int
			for i := 0; i < perWorker; i++ {
				n := 1 + rng.IntN(20)
				set := map[uint64]bool{}
				for len(set) < n {
					set[rng.Uint64()%64*(message.MaxKey/64)] = true
				}
				keys := make([]uint64, 0, n)
				for k := range set {
					keys = append(keys, k)
				}
				slices.Sort(keys)
				vals := make([]int64, n)
				for i := range vals {
					vals[i] = 1
				}
				ts, err := w.Push(keys, vals, nil)
				if err != nil {
					t.Error(err)
					return
				}
				tss = append(tss, ts)
			}
			for _, ts := range tss {
				if err := w.Wait(ts); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	// Every push added 1 per key; the total over all servers is the number
	// of (request, key) pairs, which we recompute.
	var want int64
	for r := range c.Workers {
		rng := rand.New(rand.NewPCG(uint64(r), 1))
		for i := 0; i < perWorker; i++ {
			n := 1 + rng.IntN(20)
			set := map[uint64]bool{}
			for len(set) < n {
				set[rng.Uint64()%64*(message.MaxKey/64)] = true
			}
			want += int64(n)
		}
	}
	var got int64
	for _, h := range hs {
		for k := uint64(0); k < 64; k++ {
			if v := h.Get(k * (message.MaxKey / 64)); len(v) == 1 {
				got += v[0]
			}
		}
	}
	if got != want {
		t.Errorf("servers hold a total of %d, want %d", got, want)
	}
	c.Finalize(t)
}

// Requests that reach a server before its handle is set wait for the handle
// instead of being answered with nothing.
func TestRequestBeforeHandle(t *testing.T) {
	c := testcluster.New(t, 1, 1, testcluster.Options{Mem: true})
	s, err := kv.NewKVServer[float32](c.Servers[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
	ts, err := w.Push([]uint64{7}, []float32{2.5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.WaitContext(ctx, ts); err == nil {
		t.Fatal("push answered before the server had a handle")
	}
	h := kv.NewDefaultHandle[float32]()
	s.SetRequestHandle(h.Handle)
	if err := w.Wait(ts); err != nil {
		t.Fatal(err)
	}
	if got := h.Get(7); len(got) != 1 || got[0] != 2.5 {
		t.Errorf("stored %v", got)
	}
	c.Finalize(t)
}

// PushPull with lens sends the lens given and returns the lens of the
// answer once the request has finished.
func TestPushPullLens(t *testing.T) {
	c := testcluster.New(t, 2, 1, testcluster.Options{Mem: true})
	startServers[float32](t, c)
	w, _ := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
	keys := spreadKeys(4, 1)
	lens := []int32{2, 1, 3, 2}
	vals := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	var outs []float32
	gotLens := append([]int32(nil), lens...)
	ts, err := w.PushPull(keys, vals, &outs, &gotLens)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ts); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(outs, vals) || !slices.Equal(gotLens, lens) {
		t.Errorf("pushpull with lens: %v %v, want %v %v", outs, gotLens, vals, lens)
	}
	c.Finalize(t)
}

// TestBlockedHandleDoesNotStallNode runs a server whose app 0 handle waits
// until app 1's handle has run. Handles run on the receive goroutine when
// their customer is idle, so this only completes if a handle that blocks
// hands receiving over to a new goroutine (van.HandlerStall).
//
// With idle, the server has called no handler for long enough that its
// watchdog has parked, and the blocked handle must wake it.
func TestBlockedHandleDoesNotStallNode(t *testing.T) {
	for _, row := range []struct{ mem, idle bool }{{true, false}, {false, false}, {true, true}} {
		mem := row.mem
		t.Run(fmt.Sprintf("mem=%v,idle=%v", mem, row.idle), func(t *testing.T) {
			c := testcluster.New(t, 1, 1, testcluster.Options{Mem: mem})
			if row.idle {
				deadline := time.Now().Add(30 * time.Second)
				for !c.Servers[0].Van().WatchdogParked() {
					if time.Now().After(deadline) {
						t.Fatal("the idle server's watchdog never parked")
					}
					time.Sleep(10 * time.Millisecond) // polls a state; orders nothing
				}
			}
			app1Ran := make(chan struct{})
			s0, err := kv.NewKVServer[float32](c.Servers[0], 0)
			if err != nil {
				t.Fatal(err)
			}
			app0Reached := make(chan struct{})
			s0.SetRequestHandle(func(meta kv.KVMeta, _ kv.KVPairs[float32], s *kv.KVServer[float32]) {
				close(app0Reached)
				<-app1Ran
				s.Response(meta, kv.KVPairs[float32]{})
			})
			s1, err := kv.NewKVServer[float32](c.Servers[0], 1)
			if err != nil {
				t.Fatal(err)
			}
			s1.SetRequestHandle(func(meta kv.KVMeta, _ kv.KVPairs[float32], s *kv.KVServer[float32]) {
				close(app1Ran)
				s.Response(meta, kv.KVPairs[float32]{})
			})
			w0, _ := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
			w1, _ := kv.NewKVWorker[float32](c.Workers[0], 1, 1)
			ts0, err := w0.Push([]uint64{1}, []float32{1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			select { // app 0's handle blocks first
			case <-app0Reached:
			case <-time.After(10 * time.Second):
				t.Fatal("app 0's request never reached its handle")
			}
			ts1, err := w1.Push([]uint64{1}, []float32{1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := w1.WaitContext(ctx, ts1); err != nil {
				t.Fatalf("app 1's request behind a blocked app 0 handle: %v", err)
			}
			if err := w0.WaitContext(ctx, ts0); err != nil {
				t.Fatalf("app 0's request: %v", err)
			}
			c.Finalize(t)
		})
	}
}

// Values of another type than the server stores are refused, not
// reinterpreted: the worker's request fails with an error that names both
// types, the server keeps nothing, and a request of the right type still
// works.
func TestWrongValueTypeIsRefused(t *testing.T) {
	c := testcluster.New(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	hs := startServers[float32](t, c)
	wrong, err := kv.NewKVWorker[float64](c.Workers[0], 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := spreadKeys(10, 0)
	ts, err := wrong.Push(keys, make([]float64, len(keys)), nil)
	if err == nil {
		err = wrong.Wait(ts)
	}
	if err == nil || !strings.Contains(err.Error(), "DOUBLE") || !strings.Contains(err.Error(), "FLOAT") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("push of float64 values to float32 servers: %v, want a refusal naming DOUBLE and FLOAT", err)
	}
	for _, h := range hs {
		if h.Len() != 0 {
			t.Errorf("a server stored %d keys of a refused push", h.Len())
		}
	}
	right, err := kv.NewKVWorker[float32](c.Workers[0], 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := testcluster.PushRepeatPull(right, keys, make([]float32, len(keys)), 1); err != nil {
		t.Fatal(err)
	}
	c.Finalize(t)
}

// Messages for an app no customer serves are held only up to a bound in
// bytes: a worker that pushes 96 MiB to an app the servers lack leaves at
// most 32 MiB held, and the servers go on answering.
func TestHeldMessagesAreBoundedInBytes(t *testing.T) {
	c := testcluster.New(t, 1, 1, testcluster.Options{Mem: true, Quiet: true})
	startServers[float32](t, c)
	stray, err := kv.NewKVWorker[float32](c.Workers[0], 5, 0) // no server customer for app 5
	if err != nil {
		t.Fatal(err)
	}
	keys := spreadKeys(1<<14, 0)
	vals := make([]float32, len(keys)) // 192 KiB a message with its keys
	for range 512 {
		if _, err := stray.Push(keys, vals, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Messages from one node to another arrive in order: once this answer
	// is back, every push above has reached the server.
	w, err := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := testcluster.PushRepeatPull(w, keys[:10], vals[:10], 1); err != nil {
		t.Fatal(err)
	}
	held := c.Servers[0].HeldMessages()
	if held == 0 || held*(len(keys)*12) > 32<<20 {
		t.Errorf("%d messages of %d bytes held, want some and at most 32 MiB", held, len(keys)*12)
	}
	t.Logf("%d of 512 messages held (%d MiB)", held, held*len(keys)*12>>20)
	c.Finalize(t)
}

// A pull that sends a lens buffer of the keys' size (as C++ and MXNet
// workers do) gets lens back from DefaultHandle even when every key holds
// one value; a pull without lens gets none (and a Go puller that wants
// them fills them in either way).
func TestDefaultHandleAnswersLensWhenAsked(t *testing.T) {
	c := testcluster.New(t, 2, 1, testcluster.Options{Mem: true})
	startServers[float32](t, c)
	w, err := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := spreadKeys(20, 3)
	vals := make([]float32, len(keys))
	for i := range vals {
		vals[i] = float32(i)
	}
	if err := testcluster.PushRepeatPull(w, keys, vals, 1); err != nil {
		t.Fatal(err)
	}
	for _, sized := range []bool{true, false} {
		var got []float32
		lens := []int32{}
		if sized {
			lens = make([]int32, len(keys))
		}
		ts, err := w.Pull(keys, &got, &lens)
		if err == nil {
			err = w.Wait(ts)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, vals) || len(lens) != len(keys) || sumLens(lens) != len(keys) {
			t.Fatalf("sized=%v: pulled %v lens %v", sized, got, lens)
		}
	}
	c.Finalize(t)
}
