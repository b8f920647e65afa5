package postoffice_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/control"
)

func TestClusterIDs(t *testing.T) {
	for _, mem := range []bool{true, false} {
		t.Run(fmt.Sprintf("mem=%t", mem), func(t *testing.T) {
			c := testcluster.New(t, 2, 3, testcluster.Options{Mem: mem})
			got := map[int]bool{}
			for _, p := range c.All() {
				id := p.MyID()
				if got[id] {
					t.Fatalf("id %d assigned twice", id)
				}
				got[id] = true
			}
			for _, id := range []int{1, 8, 10, 9, 11, 13} {
				if !got[id] {
					t.Errorf("id %d not assigned; have %v", id, got)
				}
			}
			for i, p := range c.Workers {
				if p.MyRank() < 0 || p.MyRank() >= 3 || !p.IsWorker() {
					t.Errorf("worker %d: rank %d", i, p.MyRank())
				}
			}
			c.Finalize(t)
		})
	}
}

func TestBarrierGroups(t *testing.T) {
	c := testcluster.New(t, 2, 2, testcluster.Options{Mem: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Workers alone, then servers and scheduler, then everyone.
	if err := testcluster.Each(c.Workers, func(p *postoffice.Postoffice) error {
		return p.Barrier(ctx, 0, message.WorkerGroup)
	}); err != nil {
		t.Fatal(err)
	}
	if err := testcluster.Each(append(c.Servers, c.Scheduler), func(p *postoffice.Postoffice) error {
		return p.Barrier(ctx, 0, message.ServerGroup+message.Scheduler)
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Workers[0].Barrier(ctx, 0, message.ServerGroup); err == nil {
		t.Error("a worker joined a server barrier")
	}
	c.Finalize(t)
}

func TestBarrierWaitsForAll(t *testing.T) {
	c := testcluster.New(t, 1, 2, testcluster.Options{Mem: true})
	done := make(chan error, 1)
	go func() { done <- c.Workers[0].Barrier(context.Background(), 0, message.WorkerGroup) }()
	select {
	case err := <-done:
		t.Fatalf("barrier returned before the other worker arrived: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := c.Workers[1].Barrier(context.Background(), 0, message.WorkerGroup); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.Finalize(t)
}

func TestStartTimeout(t *testing.T) {
	// Two workers expected, only one starts: Start must give up.
	c := testcluster.New(t, 1, 2, testcluster.Options{Mem: true, NoStart: true})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := testcluster.Each([]*postoffice.Postoffice{c.Scheduler, c.Servers[0], c.Workers[0]},
		func(p *postoffice.Postoffice) error { return p.Start(ctx, 0, true) })
	if err == nil {
		t.Fatal("start of an incomplete job succeeded")
	}
}

func TestGetNodeIDs(t *testing.T) {
	p, err := postoffice.New(postoffice.Config{Role: message.RoleWorker, NumServers: 2, NumWorkers: 3,
		SchedulerHost: "127.0.0.1", SchedulerPort: 9, Host: "127.0.0.1"}, postoffice.WithTransport(van.NewMemNetwork().Transport()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Finalize(context.Background(), 0, false)
	ids, _ := p.GetNodeIDs(message.AllGroup)
	want := []int{9, 11, 13, 8, 10, 1}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("group 7 = %v, want %v", ids, want)
	}
	if _, err := p.GetNodeIDs(15); err == nil {
		t.Error("id 15 (worker rank 3 of 3) accepted")
	}
}

func TestUnreachableSchedulerFailsAndFinalizes(t *testing.T) {
	cfg := postoffice.Config{Role: message.RoleWorker, NumServers: 1, NumWorkers: 1,
		SchedulerHost: "127.0.0.1", SchedulerPort: testcluster.FreePort(t), Host: "127.0.0.1",
		StartTimeout: 300 * time.Millisecond}
	p, err := postoffice.New(cfg, postoffice.WithTransport(van.NewMemNetwork().Transport()))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.Start(context.Background(), 0, true); err == nil {
		t.Fatal("start without a scheduler succeeded")
	}
	if err := p.Finalize(context.Background(), 0, true); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("start and finalize took %v", d)
	}
}

func TestSchedulerTimeoutNamesMissingNodes(t *testing.T) {
	c := testcluster.New(t, 2, 1, testcluster.Options{Mem: true, NoStart: true})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var schedErr error
	testcluster.Each([]*postoffice.Postoffice{c.Scheduler, c.Servers[0]}, func(p *postoffice.Postoffice) error {
		err := p.Start(ctx, 0, true)
		if p == c.Scheduler {
			schedErr = err
		}
		return err
	})
	if schedErr == nil || !strings.Contains(schedErr.Error(), "missing 1 of 2 servers and 1 of 1 workers") {
		t.Errorf("scheduler error = %v", schedErr)
	}
}

// A server or worker whose scheduler is C++ ps-lite's (one that never tells
// the process incarnations) waits CppStartGrace after the start barrier, so
// that C++ servers, released after the workers, are released before a
// worker's first request reaches them; under a pslite scheduler nobody waits.
func TestStartGraceUnderACppScheduler(t *testing.T) {
	for _, cpp := range []bool{false, true} {
		t.Run(fmt.Sprintf("cpp=%v", cpp), func(t *testing.T) {
			// Under a pslite scheduler a grace would outlast Start's context.
			grace := 10 * time.Minute
			if cpp {
				grace = 700 * time.Millisecond
			}
			net := van.NewMemNetwork()
			if cpp {
				// The scheduler binds 9000; the others bind 10001 on in turn.
				for i := 1; i <= 3; i++ {
					net.Tamper("127.0.0.1:9000", fmt.Sprintf("127.0.0.1:%d", 10000+i), hideIncarnations)
				}
			}
			c := testcluster.New(t, 1, 2, testcluster.Options{Network: net, NoStart: true,
				Tweak: func(cfg *postoffice.Config) { cfg.CppStartGrace = grace }})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			took := make([]time.Duration, 4) // scheduler, server, workers
			err := testcluster.Each(c.All(), func(p *postoffice.Postoffice) error {
				start := time.Now()
				err := p.Start(ctx, 0, true)
				d := time.Since(start)
				for i, q := range c.All() {
					if q == p {
						took[i] = d
					}
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range c.All() {
				role := p.Van().MyNode().Role
				foreign := p.Van().ForeignScheduler()
				if want := cpp && role != message.RoleScheduler; foreign != want {
					t.Errorf("%v: ForeignScheduler() = %v, want %v", role, foreign, want)
				}
				if foreign && took[i] < grace {
					t.Errorf("%v: Start took %v with a grace of %v", role, took[i], grace)
				}
			}
			c.Finalize(t)
		})
	}
}

// hideIncarnations makes a pslite scheduler's message to a node look like
// C++ ps-lite's: the notice of the process incarnations becomes one of a
// kind nobody knows.
func hideIncarnations(frames [][]byte) [][]byte {
	from := []byte(control.NoticePrefix + string(control.NoticeIncarnations))
	to := []byte(control.NoticePrefix + "incarnationz")
	for i := range frames {
		frames[i] = bytes.ReplaceAll(frames[i], from, to)
	}
	return frames
}
