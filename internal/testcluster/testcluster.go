// Package testcluster starts whole ps-lite jobs inside one test process:
// a scheduler, servers and workers, each a postoffice.Postoffice, over
// in-memory transports or real sockets on loopback (the transport the
// configuration names: ZMTP by default). Over the
// in-memory network, faults can be injected (van.MemNetwork) and the
// protocol's time can be a van.FakeClock.
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
	// Network is the in-memory network the job runs on; nil over real sockets.
	Network *van.MemNetwork

	t                testing.TB
	opts             Options
	port             int
	servers, workers int
	mu               sync.Mutex               // guards extra
	extra            []*postoffice.Postoffice // nodes made by NewNode
}

// All returns every node, scheduler first.
func (c *Cluster) All() []*postoffice.Postoffice {
	return append(append([]*postoffice.Postoffice{c.Scheduler}, c.Servers...), c.Workers...)
}

// Options configures New.
type Options struct {
	// Mem runs the job over an in-memory network instead of sockets (as
	// every job does in a build without cgo).
	Mem bool
	// Van names the transport: "mem" (as Mem), "zmtp" or "zmq" (libzmq);
	// empty means the default. Vans lists those this build can run.
	Van string
	// Network, if set, is the in-memory network to run on (it implies
	// Mem); tests inject faults through it.
	Network *van.MemNetwork
	// Clock, if set, runs every node's protocol timers.
	Clock van.Clock
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
	c := &Cluster{t: t, opts: o, port: 9000, servers: s, workers: w}
	switch {
	case o.Network != nil:
		c.Network = o.Network
	case o.Mem || o.Van == "mem" || !realTransport:
		c.Network = van.NewMemNetwork()
	default:
		c.port = FreePort(t)
	}
	mk := func(role message.Role) *postoffice.Postoffice {
		p, err := c.newNode(role, nil)
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

// Vans returns the transports a job of this build can run on, for tests
// that run on each (Options.Van): the in-memory network, and, in a build
// with cgo, ZMTP and libzmq over real sockets.
func Vans() []string {
	if !realTransport {
		return []string{"mem"}
	}
	return []string{"mem", "zmtp", "zmq"}
}

// Config returns the configuration a node of role gets in this job.
func (c *Cluster) Config(role message.Role) postoffice.Config {
	cfg := postoffice.Config{Role: role, NumServers: c.servers, NumWorkers: c.workers,
		SchedulerHost: "127.0.0.1", SchedulerPort: c.port, Host: "127.0.0.1"}
	if c.opts.Van == "zmtp" || c.opts.Van == "zmq" {
		cfg.VanType = c.opts.Van
	}
	// As for a process: PS_POISON_LENT=1 in the environment poisons lent
	// memory given back, in every job (make test runs the cluster tests
	// once more so).
	cfg.PoisonLent = os.Getenv("PS_POISON_LENT") == "1"
	if c.opts.Tweak != nil {
		c.opts.Tweak(&cfg)
	}
	return cfg
}

// Logger returns a logger for a node of the job.
func (c *Cluster) Logger() zerolog.Logger {
	level := zerolog.WarnLevel
	if os.Getenv("PSLITE_TEST_TRACE") != "" {
		level = zerolog.TraceLevel
	}
	if c.opts.Quiet {
		level = zerolog.ErrorLevel
	}
	return zerolog.New(zerolog.NewTestWriter(c.t)).Level(level)
}

func (c *Cluster) newNode(role message.Role, tweak func(*postoffice.Config)) (*postoffice.Postoffice, error) {
	cfg := c.Config(role)
	if tweak != nil {
		tweak(&cfg)
	}
	opts := []postoffice.Option{postoffice.WithLogger(c.Logger())}
	if c.Network != nil {
		opts = append(opts, postoffice.WithTransport(c.Network.Transport()))
	}
	if c.opts.Clock != nil {
		opts = append(opts, postoffice.WithClock(c.opts.Clock))
	}
	return postoffice.New(cfg, opts...)
}

// NewNode creates another node of the job (not started), e.g. one that
// replaces a node killed by the test, on the job's network and clock;
// tweak may edit its configuration. It is finalized when the test ends.
func (c *Cluster) NewNode(role message.Role, tweak func(*postoffice.Config)) *postoffice.Postoffice {
	c.t.Helper()
	p, err := c.newNode(role, tweak)
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.extra = append(c.extra, p)
	c.mu.Unlock()
	return p
}

// Addr returns the address p bound, as the in-memory network names it.
func Addr(p *postoffice.Postoffice) string { return p.Van().MyNode().Addr() }

// Finalize finalizes every node with a barrier and fails the test on error.
func (c *Cluster) Finalize(t testing.TB) { c.stop(t, true) }

func (c *Cluster) stop(t testing.TB, barrier bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Each(c.All(), func(p *postoffice.Postoffice) error { return p.Finalize(ctx, 0, barrier) }); err != nil && barrier {
		t.Errorf("finalize: %v", err)
	}
	c.mu.Lock()
	extra := c.extra
	c.mu.Unlock()
	Each(extra, func(p *postoffice.Postoffice) error { return p.Finalize(ctx, 0, false) })
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
