package control

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
)

// sim is an in-process network of Cores with a fake clock, in the style of
// etcd raft's test network: messages are delivered by step(), links can be
// cut (messages held, as TCP holds them, until healed) or lossy (seeded),
// processes can be killed (their peers see the connection close), stopped
// (they neither send nor receive) and restarted; time moves only when the
// test says so.
type sim struct {
	t     *testing.T
	now   time.Time
	rng   *rand.Rand
	nodes []*simNode
	cfg   func(*Config) // tweaks every node's Config
	// cut[a][b] holds messages from address a to address b while the link
	// is cut.
	cut  map[[2]string][]delivery
	loss map[[2]string]float64
	// unreachable holds the addresses nothing can connect or send to (a
	// node that announced an address others have no route to).
	unreachable map[string]bool
}

type simNode struct {
	name   string // "scheduler", "server", "worker" plus a number
	addr   string
	core   *Core
	alive  bool
	paused bool
	// conns maps a peer id to the address and identity this node connected
	// with.
	conns  map[int]simConn
	inbox  []delivery
	events []Event
}

type simConn struct {
	addr  string
	ident string
}

type delivery struct {
	to   string // address
	msg  *message.Message
	conn *struct { // a connection event instead of a message
		id int
		up bool
	}
}

const schedAddr = "10.0.0.1:9000"

func newSim(t *testing.T, servers, workers int, tweak func(*Config)) *sim {
	s := &sim{t: t, now: time.Unix(1_000_000, 0), rng: rand.New(rand.NewPCG(1, 2)), cfg: tweak,
		cut: map[[2]string][]delivery{}, loss: map[[2]string]float64{}, unreachable: map[string]bool{}}
	s.add("scheduler", message.RoleScheduler, schedAddr, servers, workers)
	for i := 0; i < servers; i++ {
		s.add(fmt.Sprintf("server%d", i), message.RoleServer, fmt.Sprintf("10.0.1.%d:%d", i+1, 7000+i), servers, workers)
	}
	for i := 0; i < workers; i++ {
		s.add(fmt.Sprintf("worker%d", i), message.RoleWorker, fmt.Sprintf("10.0.2.%d:%d", i+1, 8000+i), servers, workers)
	}
	return s
}

func (s *sim) config(role message.Role, addr string, servers, workers int) Config {
	host, port, _ := strings.Cut(addr, ":")
	var p int
	fmt.Sscan(port, &p)
	cfg := Config{Role: role, NumServers: servers, NumWorkers: workers,
		SchedulerHost: "10.0.0.1", SchedulerPort: 9000, Host: host, Port: p,
		ConnEvents: true, RecoveryWait: 5 * time.Second, Log: zerolog.Nop()}
	if s.cfg != nil {
		s.cfg(&cfg)
	}
	return cfg
}

// add creates a node (not started) and returns it.
func (s *sim) add(name string, role message.Role, addr string, servers, workers int) *simNode {
	c, err := New(s.config(role, addr, servers, workers))
	if err != nil {
		s.t.Fatal(err)
	}
	n := &simNode{name: name, addr: addr, core: c, alive: true, conns: map[int]simConn{}}
	s.nodes = append(s.nodes, n)
	return n
}

func (s *sim) node(name string) *simNode {
	for _, n := range s.nodes {
		if n.name == name {
			return n
		}
	}
	s.t.Fatalf("no node %s", name)
	return nil
}

func (s *sim) byAddr(addr string) *simNode {
	for _, n := range s.nodes {
		if n.addr == addr && n.alive {
			return n
		}
	}
	return nil
}

// apply carries out n's outputs.
func (s *sim) apply(n *simNode, outs []Output) {
	for _, o := range outs {
		switch o.Kind {
		case Send:
			c, ok := n.conns[int(o.Msg.Meta.Recver)]
			if !ok {
				s.t.Fatalf("%s sends to %d without a connection: %s", n.name, o.Msg.Meta.Recver, o.Msg)
			}
			m := *o.Msg
			m.Meta.Sender = empty
			if id, ok := parseIdent(c.ident); ok {
				m.Meta.Sender = int32(id)
			}
			s.post(n.addr, delivery{to: c.addr, msg: &m})
		case Connect:
			id := int(o.Node.ID)
			addr := o.Node.Addr()
			n.conns[id] = simConn{addr: addr, ident: o.Identity}
			if s.byAddr(addr) != nil && !s.unreachable[addr] {
				n.inbox = append(n.inbox, delivery{to: n.addr, conn: &struct {
					id int
					up bool
				}{id, true}})
			}
		case Disconnect:
			delete(n.conns, o.ID)
		case Notify:
			n.events = append(n.events, o.Event)
		}
	}
}

func parseIdent(s string) (int, bool) {
	var id int
	if _, err := fmt.Sscanf(s, "ps%d", &id); err != nil {
		return 0, false
	}
	return id, true
}

// post sends a message from address from, through cuts and losses.
func (s *sim) post(from string, d delivery) {
	link := [2]string{from, d.to}
	if held, ok := s.cut[link]; ok {
		s.cut[link] = append(held, d)
		return
	}
	if p := s.loss[link]; p > 0 && s.rng.Float64() < p || s.unreachable[d.to] {
		return
	}
	if to := s.byAddr(d.to); to != nil {
		to.inbox = append(to.inbox, d)
	}
}

// deliver hands every queued message and event to its node until the
// network is quiet (bounded).
func (s *sim) deliver() {
	for round := 0; round < 1000; round++ {
		busy := false
		for _, n := range s.nodes {
			if !n.alive || n.paused || len(n.inbox) == 0 {
				continue
			}
			busy = true
			d := n.inbox[0]
			n.inbox = n.inbox[1:]
			if d.conn != nil {
				s.apply(n, n.core.Connection(d.conn.id, d.conn.up, s.now))
			} else {
				s.apply(n, n.core.Step(d.msg, s.now))
			}
		}
		if !busy {
			return
		}
	}
	s.t.Fatal("the network does not settle")
}

// tick advances time by d in steps of step, ticking every running node and
// delivering after each step.
func (s *sim) tick(d, step time.Duration) {
	for end := s.now.Add(d); s.now.Before(end); {
		s.now = s.now.Add(step)
		for _, n := range s.nodes {
			if n.alive && !n.paused {
				s.apply(n, n.core.Tick(s.now))
			}
		}
		s.deliver()
	}
}

// startAll starts every node, registers one customer each and delivers.
func (s *sim) startAll() {
	for _, n := range s.nodes {
		s.start(n)
	}
	s.deliver()
}

func (s *sim) start(n *simNode) {
	s.apply(n, n.core.Start(s.now))
	s.apply(n, n.core.Register(0, s.now))
}

// kill ends n's process: its peers see their connections close.
func (s *sim) kill(n *simNode) {
	n.alive = false
	n.inbox = nil
	for _, m := range s.nodes {
		if !m.alive || m == n {
			continue
		}
		for id, c := range m.conns {
			if c.addr == n.addr {
				m.inbox = append(m.inbox, delivery{to: m.addr, conn: &struct {
					id int
					up bool
				}{id, false}})
			}
		}
	}
}

// isolate cuts every link to and from n; heal restores them and delivers
// what was held.
func (s *sim) isolate(n *simNode) {
	for _, m := range s.nodes {
		if m == n {
			continue
		}
		for _, link := range [][2]string{{n.addr, m.addr}, {m.addr, n.addr}} {
			if _, cut := s.cut[link]; !cut {
				s.cut[link] = nil // a key of s.cut is a cut link, holding what is sent on it
			}
		}
	}
}

func (s *sim) heal() {
	cut := s.cut
	s.cut = map[[2]string][]delivery{}
	links := make([][2]string, 0, len(cut))
	for l := range cut {
		links = append(links, l)
	}
	slices.SortFunc(links, func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) })
	for _, l := range links {
		for _, d := range cut[l] {
			s.post(l[0], d)
		}
	}
}

// barrierAll has every node of the job enter a barrier on group.
func (s *sim) barrier(group int, names ...string) {
	for _, name := range names {
		n := s.node(name)
		outs, err := n.core.Barrier(0, group, s.now)
		if err != nil {
			s.t.Fatalf("%s: barrier: %v", name, err)
		}
		s.apply(n, outs)
	}
	s.deliver()
}

func (n *simNode) has(t EventType) *Event {
	for i := range n.events {
		if n.events[i].Type == t {
			return &n.events[i]
		}
	}
	return nil
}

// all returns n's events of type t, in order.
func (n *simNode) all(t EventType) []Event {
	var evs []Event
	for _, e := range n.events {
		if e.Type == t {
			evs = append(evs, e)
		}
	}
	return evs
}

func (n *simNode) count(t EventType) int {
	k := 0
	for _, e := range n.events {
		if e.Type == t {
			k++
		}
	}
	return k
}
