// Package testcluster starts whole ps-lite jobs inside one test process:
// a scheduler, servers and workers, each a postoffice.Postoffice, over
// in-memory transports or real ZeroMQ sockets on loopback.
package testcluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/van"
)

// Cluster is a running job. Once started, Servers and Workers are in rank
// order.
type Cluster struct {
	Scheduler *postoffice.Postoffice
	Servers   []*postoffice.Postoffice
	Workers   []*postoffice.Postoffice
}

// All returns every node, scheduler first.
func (c *Cluster) All() []*postoffice.Postoffice {
	return append(append([]*postoffice.Postoffice{c.Scheduler}, c.Servers...), c.Workers...)
}

// Options configures New.
type Options struct {
	// Mem runs the job over an in-memory network instead of ZeroMQ.
	Mem bool
	// Tweak, if set, edits each node's configuration before it is created.
	Tweak func(*postoffice.Config)
	// NoStart creates the nodes without starting them.
	NoStart bool
	// Quiet logs only errors (for tests that provoke warnings on purpose).
	Quiet bool
}

// New creates a job of s servers and w workers and starts every node with
// customer 0 (unless NoStart). The nodes are finalized when the test ends
// if the test has not done so.
func New(t testing.TB, s, w int, o Options) *Cluster {
	t.Helper()
	var network *van.MemNetwork
	port := 9000
	if o.Mem {
		network = van.NewMemNetwork()
	} else {
		port = FreePort(t)
	}
	c := &Cluster{}
	mk := func(role message.Role) *postoffice.Postoffice {
		cfg := postoffice.Config{Role: role, NumServers: s, NumWorkers: w,
			SchedulerHost: "127.0.0.1", SchedulerPort: port, Host: "127.0.0.1"}
		if o.Tweak != nil {
			o.Tweak(&cfg)
		}
		level := zerolog.WarnLevel
		if o.Quiet {
			level = zerolog.ErrorLevel
		}
		opts := []postoffice.Option{postoffice.WithLogger(zerolog.New(zerolog.NewTestWriter(t)).Level(level))}
		if network != nil {
			opts = append(opts, postoffice.WithTransport(network.Transport()))
		}
		p, err := postoffice.New(cfg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	c.Scheduler = mk(message.RoleScheduler)
	for i := 0; i < s; i++ {
		c.Servers = append(c.Servers, mk(message.RoleServer))
	}
	for i := 0; i < w; i++ {
		c.Workers = append(c.Workers, mk(message.RoleWorker))
	}
	t.Cleanup(func() { c.stop(t, false) })
	if !o.NoStart {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := Each(c.All(), func(p *postoffice.Postoffice) error { return p.Start(ctx, 0, true) }); err != nil {
			t.Fatalf("start: %v", err)
		}
		byRank := func(ps []*postoffice.Postoffice) {
			sort.Slice(ps, func(i, j int) bool { return ps[i].MyRank() < ps[j].MyRank() })
		}
		byRank(c.Servers)
		byRank(c.Workers)
	}
	return c
}

// Finalize finalizes every node with a barrier and fails the test on error.
func (c *Cluster) Finalize(t testing.TB) { c.stop(t, true) }

func (c *Cluster) stop(t testing.TB, barrier bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Each(c.All(), func(p *postoffice.Postoffice) error { return p.Finalize(ctx, 0, barrier) }); err != nil && barrier {
		t.Errorf("finalize: %v", err)
	}
}

// Each runs f on every node concurrently and returns the first error.
func Each(nodes []*postoffice.Postoffice, f func(*postoffice.Postoffice) error) error {
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, p := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(p) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// FreePort returns a TCP port on loopback that was free a moment ago, for a
// scheduler. Like scripts/local.sh it picks below the kernel's ephemeral
// range when there is room, where no node's port (the kernel picks those
// from that range) can take it before the scheduler binds it.
func FreePort(t testing.TB) int {
	t.Helper()
	if lo := ephemeralLow(); lo > 12000 {
		for range 100 {
			port := 10000 + rand.IntN(lo-10000)
			if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				l.Close()
				return port
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ephemeralLow returns the lowest port of the kernel's ephemeral range, or 0.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var lo int
	fmt.Sscan(string(b), &lo)
	return lo
}
