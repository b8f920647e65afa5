package postoffice_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/van"
)

// cluster starts a scheduler, s servers and w workers in this process over
// transports made by mk, and returns the nodes once all have started.
func cluster(t *testing.T, s, w int, mk func() van.Transport, port int) []*postoffice.Postoffice {
	t.Helper()
	var nodes []*postoffice.Postoffice
	add := func(role message.Role) {
		cfg := postoffice.Config{Role: role, NumServers: s, NumWorkers: w, SchedulerHost: "127.0.0.1", SchedulerPort: port, Host: "127.0.0.1"}
		var opts []postoffice.Option
		if mk != nil {
			opts = append(opts, postoffice.WithTransport(mk()))
		}
		opts = append(opts, postoffice.WithLogger(zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)))
		p, err := postoffice.New(cfg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, p)
	}
	add(message.RoleScheduler)
	for i := 0; i < s; i++ {
		add(message.RoleServer)
	}
	for i := 0; i < w; i++ {
		add(message.RoleWorker)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, p := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.Start(ctx, 0, true) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: start: %v", i, err)
		}
	}
	return nodes
}

func finalize(t *testing.T, nodes []*postoffice.Postoffice) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, p := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.Finalize(ctx, 0, true) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: finalize: %v", i, err)
		}
	}
}

func TestClusterMemIDs(t *testing.T) {
	net := van.NewMemNetwork()
	nodes := cluster(t, 2, 3, net.Transport, 9000)
	ids := map[int]bool{}
	for _, p := range nodes {
		id := p.MyID()
		if ids[id] {
			t.Fatalf("id %d assigned twice", id)
		}
		ids[id] = true
	}
	for _, id := range []int{1, 8, 10, 9, 11, 13} {
		if !ids[id] {
			t.Errorf("id %d not assigned; have %v", id, ids)
		}
	}
	finalize(t, nodes)
}

func TestClusterZMQ(t *testing.T) {
	for _, size := range [][2]int{{1, 1}, {2, 2}} {
		t.Run(fmt.Sprintf("%dx%d", size[0], size[1]), func(t *testing.T) {
			nodes := cluster(t, size[0], size[1], nil, freePort(t))
			finalize(t, nodes)
		})
	}
}
