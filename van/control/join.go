package control

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gopslite/pslite/message"
)

// Joining a job: registration with the scheduler, the assignment of ids,
// and the replacement of dead nodes.

// waiter is a node that asked to join a full job, waiting for a node of its
// role to be declared dead.
type waiter struct {
	node  message.Node
	since time.Time
}

// maxWaiting bounds the waiting list.
const maxWaiting = 64

// Refused nodes are told through connections of their own, under the
// transport ids refusalID-0 .. refusalID-(refusalConns-1), reused in turn,
// so that refusals never hold more than refusalConns connections.
const (
	refusalID    = -1000
	refusalConns = 8
)

// SetPort records the port this node bound, before Start.
func (c *Core) SetPort(port int) {
	if !c.IsScheduler() {
		c.me.Port = int32(port)
	}
}

// Start begins joining the job: the first output connects to the
// scheduler (a scheduler connects to itself, as C++ ps-lite does).
func (c *Core) Start(now time.Time) []Output {
	if c.phase != PhaseIdle {
		return nil
	}
	c.phase = PhaseJoining
	c.startedAt = now
	var o out
	if c.IsScheduler() {
		o = append(o, Output{Kind: Connect, Node: c.sched, Identity: Identity(message.Scheduler)})
		return o
	}
	c.peers[message.Scheduler] = &peer{node: c.sched, lastHeard: now, downSince: now}
	o = append(o, Output{Kind: Connect, Node: c.sched})
	return o
}

// Register asks the scheduler to admit customer customerID of this
// process (a process with several customers registers each).
func (c *Core) Register(customerID int, now time.Time) []Output {
	if c.IsScheduler() || c.phase != PhaseJoining {
		return nil
	}
	me := c.me
	me.CustomerID = int32(customerID)
	msg := message.New()
	msg.Meta.Recver = message.Scheduler
	msg.Meta.Control.Cmd = message.CmdAddNode
	msg.Meta.Control.Nodes = []message.Node{me}
	msg.Meta.Timestamp = c.nextTS()
	var o out
	o.send(msg)
	return o
}

// nodeList takes the scheduler's list of nodes: this node's id, then the
// peers to connect to.
func (c *Core) nodeList(o *out, msg *message.Message, now time.Time) {
	if msg.Meta.Sender != message.Scheduler {
		c.log.Warn().Str("msg", msg.String()).Msg("dropping ADD_NODE not sent by the scheduler")
		return
	}
	if c.phase != PhaseJoining && c.phase != PhaseReady {
		return
	}
	nodes := msg.Meta.Control.Nodes
	c.rememberNodes(nodes)
	if c.me.ID == empty {
		for _, n := range nodes {
			if n.Hostname != c.me.Hostname || n.Port != c.me.Port {
				continue
			}
			if n.ID == empty || n.Role != c.me.Role || !validID(int(n.ID), n.Role) {
				c.log.Warn().Str("msg", msg.String()).Msg("dropping ADD_NODE that assigns no valid id")
				return
			}
			c.me.ID = n.ID
			c.me.IsRecovery = n.IsRecovery
			c.log.Info().Str("node", c.me.String()).Msg("assigned id")
			break
		}
		if c.me.ID == empty {
			c.log.Warn().Str("msg", msg.String()).Msg("ADD_NODE does not list this node; ignoring it")
			return
		}
	}
	for _, n := range nodes {
		id := int(n.ID)
		if n.ID == empty || id <= 0 {
			continue
		}
		if id == message.Scheduler {
			if _, ok := c.connected[id]; !ok {
				// Reconnect to the scheduler, now with this node's identity.
				c.connected[id] = n.Addr()
				c.connect(o, c.sched, now)
			}
			continue
		}
		if !validID(id, n.Role) {
			continue
		}
		if n.Role == c.me.Role && n.ID != c.me.ID && !(c.mesh && n.Role == message.RoleServer) {
			continue // workers do not talk to workers, nor servers to servers (unless they replicate)
		}
		if old, ok := c.connected[id]; ok && old == n.Addr() && !n.IsRecovery {
			continue
		}
		c.connected[id] = n.Addr()
		delete(c.links, id) // a new connection, not the old one back
		c.connect(o, n, now)
		if c.phase == PhaseReady && n.IsRecovery {
			o.notify(Event{Type: EventNodeReplaced, ID: id, Node: n})
		}
	}
	if c.phase == PhaseJoining {
		c.phase = PhaseReady
		if p := c.peers[message.Scheduler]; p != nil {
			p.lastHeard = now
		}
		c.lastBeat = now
		o.notify(Event{Type: EventReady, Node: c.me})
	}
}

// validID reports whether id can be a node of the role.
func validID(id int, role message.Role) bool {
	r, ok := message.RoleOfID(id)
	return ok && r == role
}

// register handles an ADD_NODE at the scheduler.
func (c *Core) register(o *out, msg *message.Message, now time.Time) {
	if msg.Meta.Sender != empty {
		c.log.Warn().Str("msg", msg.String()).Msg("dropping ADD_NODE from a node that already has an id")
		return
	}
	if len(msg.Meta.Control.Nodes) != 1 {
		c.log.Warn().Str("msg", msg.String()).Msg("dropping ADD_NODE that does not carry exactly one node")
		return
	}
	n := msg.Meta.Control.Nodes[0]
	if n.Role != message.RoleServer && n.Role != message.RoleWorker || n.Port <= 0 || n.Hostname == "" {
		c.log.Warn().Str("msg", msg.String()).Msg("dropping ADD_NODE for an invalid node")
		return
	}
	n.ID, n.IsRecovery = empty, false
	if msg.Process != "" {
		c.procByAddr[n.Addr()] = msg.Process
	}
	switch c.phase {
	case PhaseJoining:
		total := c.cfg.NumServers + c.cfg.NumWorkers
		c.registered = append(c.registered, n)
		c.log.Info().Str("node", n.String()).Int("have", len(c.registered)).Int("want", total).Msg("node registered")
		if len(c.registered) == total {
			c.assignIDs(o, now)
		}
	case PhaseReady:
		if id, ok := c.byAddr[n.Addr()]; ok && c.peers[id] != nil {
			if !c.peers[id].dead && !c.peers[id].left {
				c.log.Debug().Str("node", n.String()).Msg("another customer of a process in the job registered")
				return
			}
			if c.peers[id].node.Role == n.Role {
				c.replace(o, id, n, now) // restarted on the same address
				return
			}
		}
		c.recoverOrWait(o, n, now)
	default:
		c.log.Warn().Str("node", n.String()).Str("phase", c.phase.String()).Msg("refusing ADD_NODE: the job is over")
	}
}

// assignIDs gives every registered node an id, in order of host and port,
// connects to them and sends each the full list.
func (c *Core) assignIDs(o *out, now time.Time) {
	nodes := c.registered
	slices.SortStableFunc(nodes, func(a, b message.Node) int {
		if a.Hostname != b.Hostname {
			if a.Hostname < b.Hostname {
				return -1
			}
			return 1
		}
		return int(a.Port) - int(b.Port)
	})
	servers, workers := 0, 0
	for i := range nodes {
		n := &nodes[i]
		var id int
		if n.Role == message.RoleServer {
			id = message.ServerRankToID(servers)
			servers++
		} else {
			id = message.WorkerRankToID(workers)
			workers++
		}
		if first, ok := c.byAddr[n.Addr()]; ok {
			// Another customer of a process already registered: it shares
			// that process's id and sockets.
			c.shared[id] = first
			n.ID = int32(first)
			continue
		}
		n.ID = int32(id)
		c.byAddr[n.Addr()] = id
		c.peers[id] = &peer{node: *n, lastHeard: now}
		c.connect(o, *n, now)
	}
	c.registered = append(nodes, c.me)
	for _, n := range nodes {
		if p := c.procByAddr[n.Addr()]; p != "" {
			c.incarnations[int(n.ID)] = p
		}
	}
	c.sendIncarnations(o, -1)
	// One copy of the list for every node's message: in a job of n nodes,
	// a copy each would be n*n nodes.
	list := slices.Clone(c.registered)
	for _, id := range c.members(message.ServerGroup + message.WorkerGroup) {
		if _, shared := c.shared[id]; !shared {
			c.sendNodes(o, id, list)
		}
	}
	c.log.Info().Int("servers", servers).Int("workers", workers).Msg("all nodes registered")
	c.phase = PhaseReady
	c.startViews(now)
	o.notify(Event{Type: EventReady, Node: c.me})
}

// sendNodes sends id the list of nodes, which the message keeps: nodes
// must not change afterwards (messages to several nodes may share it).
func (c *Core) sendNodes(o *out, id int, nodes []message.Node) {
	msg := message.New()
	msg.Meta.Recver = int32(id)
	msg.Meta.Control.Cmd = message.CmdAddNode
	msg.Meta.Control.Nodes = nodes
	msg.Meta.Timestamp = c.nextTS()
	o.send(msg)
}

func (c *Core) members(group int) []int {
	ids, _ := message.GroupMembers(group, c.cfg.NumServers, c.cfg.NumWorkers)
	return ids
}

// process returns the process id of node id (itself unless it is another
// customer of a multi-customer process).
func (c *Core) process(id int) int {
	if p, ok := c.shared[id]; ok {
		return p
	}
	return id
}

// recoverOrWait lets n take the id of a dead node of its role, or puts it
// on the waiting list until one is declared dead (a restarted process often
// registers before its predecessor is found dead). checkMembers refuses it
// if, after refusalGrace, no node of its role looks dead.
func (c *Core) recoverOrWait(o *out, n message.Node, now time.Time) {
	if id := c.deadOfRole(n.Role); id != 0 {
		c.replace(o, id, n, now)
		return
	}
	for i, w := range c.waiting {
		if w.node.Addr() == n.Addr() {
			c.waiting[i].node = n
			return
		}
	}
	if len(c.waiting) >= maxWaiting {
		c.refuse(o, n, "the job is full and too many nodes wait to replace a dead one")
		return
	}
	c.log.Info().Str("node", n.String()).Msg("the job is full: the node waits until a node of its role is declared dead")
	c.waiting = append(c.waiting, waiter{node: n, since: now})
}

// ReplacementPossible reports, at the scheduler, whether a server or worker
// may be replaced soon: one is dead or gone and not replaced yet, or looks
// dead. A newcomer waiting for a place does not count: anyone can send an
// ADD_NODE, and while this holds a connection can take a member's identity.
func (c *Core) ReplacementPossible(now time.Time) bool {
	if !c.IsScheduler() || c.phase != PhaseReady {
		return false
	}
	for _, p := range c.peers {
		if p.dead || p.left || c.looksDead(p, now) {
			return true
		}
	}
	return false
}

// suspectOfRole reports whether the scheduler has evidence that a server or
// worker of the role may be dead: its connection is down, or heartbeats are
// on and it has missed two. Only then may a newcomer wait for its place.
func (c *Core) suspectOfRole(role message.Role, now time.Time) bool {
	for _, p := range c.peers {
		if p.node.Role == role && !p.dead && !p.left && c.looksDead(p, now) {
			return true
		}
	}
	return false
}

// looksDead reports whether live peer p may be dead: its connection is
// down, or heartbeats are on and it has missed two.
func (c *Core) looksDead(p *peer, now time.Time) bool {
	return c.cfg.ConnEvents && !p.connUp && !p.downSince.IsZero() ||
		c.heartbeats() && now.Sub(p.lastHeard) > 2*c.cfg.HeartbeatInterval
}

// refuse turns n away and tells it why: an abort notice over a connection
// of its own, sent once (n is not in the job, and acknowledges nothing).
func (c *Core) refuse(o *out, n message.Node, reason string) {
	c.log.Warn().Str("node", n.String()).Str("reason", reason).Msg("refusing ADD_NODE")
	slot := refusalID - c.refusals%refusalConns
	c.refusals++
	n.ID = int32(slot)
	*o = append(*o, Output{Kind: Connect, Node: n, Identity: Identity(int(c.me.ID))})
	*o = append(*o, Output{Kind: Send, Once: true, Msg: NewNotice(slot, NoticeAbort, "refused: "+reason, c.nextTS())})
}

// deadOfRole returns the lowest id of a dead or departed, unreplaced node
// of the role, or 0: a place a newcomer can take.
func (c *Core) deadOfRole(role message.Role) int {
	best := 0
	for id, p := range c.peers {
		if (p.dead || p.left) && p.node.Role == role && (best == 0 || id < best) {
			best = id
		}
	}
	return best
}

// replace gives the dead node id's place to n and tells everyone.
func (c *Core) replace(o *out, id int, n message.Node, now time.Time) {
	old := c.peers[id]
	n.ID = int32(id)
	n.IsRecovery = true
	c.log.Warn().Str("dead", old.node.String()).Str("new", n.String()).Msg("replacing a dead node")
	delete(c.byAddr, old.node.Addr())
	c.byAddr[n.Addr()] = id
	c.peers[id] = &peer{node: n, lastHeard: now}
	for i := range c.registered {
		// Every customer of the process: they share its id.
		if int(c.registered[i].ID) == id {
			c.registered[i].Hostname, c.registered[i].Port = n.Hostname, n.Port
			c.registered[i].IsRecovery = true
		}
	}
	if p := c.procByAddr[n.Addr()]; p != "" {
		c.incarnations[id] = p
	} else {
		delete(c.incarnations, id)
	}
	c.sendIncarnations(o, id)
	c.connect(o, n, now)
	// The others first: they let the replacement's connections take over
	// its predecessor's identity once they hear of it (see ROUTER
	// handover in the van, and incarnations), which they should before it
	// connects.
	news := []message.Node{n}
	for _, m := range c.members(message.ServerGroup + message.WorkerGroup) {
		if _, shared := c.shared[m]; !shared && m != id && c.peers[m] != nil && !c.peers[m].dead {
			c.sendNodes(o, m, news)
		}
	}
	c.sendNodes(o, id, slices.Clone(c.registered))
	for i := range c.registered {
		c.registered[i].IsRecovery = false
	}
	c.sendIncarnationsTo(o, id)
	o.notify(Event{Type: EventNodeReplaced, ID: id, Node: n})
	c.serverReplaced(o, id)
}

// sendIncarnationsTo sends node id the incarnations of every node.
func (c *Core) sendIncarnationsTo(o *out, id int) {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(c.incarnations)) {
		fmt.Fprintf(&b, "%d:%s ", k, c.incarnations[k])
	}
	o.send(NewNotice(id, NoticeIncarnations, strings.TrimSpace(b.String()), c.nextTS()))
}

// NoticeIncarnations, from the scheduler to every server and worker: the
// process incarnation of each node (see van.Incarnations). The text is
// "<id>:<incarnation>" pairs separated by spaces.
const NoticeIncarnations NoticeKind = "incarnations"

// sendIncarnations tells the scheduler's transport, and every server and
// worker but skip (the replacement, told with its node list), the process
// incarnation of each node.
func (c *Core) sendIncarnations(o *out, skip int) {
	m := maps.Clone(c.incarnations)
	o.notify(Event{Type: EventIncarnations, Incarnations: m})
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%d:%s ", id, m[id])
	}
	text := strings.TrimSpace(b.String())
	for _, id := range c.members(message.ServerGroup + message.WorkerGroup) {
		if _, shared := c.shared[id]; shared || id == skip {
			continue
		}
		if p := c.peers[id]; p == nil || p.dead || p.left {
			continue
		}
		o.send(NewNotice(id, NoticeIncarnations, text, c.nextTS()))
	}
}

// ParseIncarnations reads a NoticeIncarnations's text.
func ParseIncarnations(text string) (map[int]string, error) {
	m := map[int]string{}
	for _, f := range strings.Fields(text) {
		a, b, ok := strings.Cut(f, ":")
		id, err := strconv.Atoi(a)
		if !ok || err != nil || b == "" || len(b) > 64 {
			return nil, fmt.Errorf("control: bad incarnations %q", text)
		}
		m[id] = b
	}
	return m, nil
}

// rememberNodes keeps, at a server or worker, the job's servers from the
// scheduler's lists: servers connect to each other once a view says that
// ranges are replicated (takeView). Nothing else needs the list kept, and
// a large job's whole list at every node is its size squared.
func (c *Core) rememberNodes(nodes []message.Node) {
	for _, n := range nodes {
		if n.ID == empty || n.Role != message.RoleServer {
			continue
		}
		if c.nodeAt == nil {
			c.nodeAt = make(map[int32]int, c.cfg.NumServers)
			c.nodes = slices.Grow(c.nodes, c.cfg.NumServers)
		}
		if i, ok := c.nodeAt[n.ID]; ok {
			c.nodes[i] = n
			continue
		}
		c.nodeAt[n.ID] = len(c.nodes)
		c.nodes = append(c.nodes, n)
	}
}

// RegistrationStatus says, at the scheduler, which nodes have registered
// and how many of each role are missing.
func (c *Core) RegistrationStatus() string {
	servers, workers := 0, 0
	var seen []string
	for _, n := range c.registered {
		switch n.Role {
		case message.RoleServer:
			servers++
		case message.RoleWorker:
			workers++
		default:
			continue
		}
		seen = append(seen, fmt.Sprintf("%s %s", n.Role, n.Addr()))
	}
	list := "none"
	if len(seen) > 0 {
		list = fmt.Sprint(seen)
	}
	return fmt.Sprintf("missing %d of %d servers and %d of %d workers (registered: %s)",
		c.cfg.NumServers-servers, c.cfg.NumServers, c.cfg.NumWorkers-workers, c.cfg.NumWorkers, list)
}
