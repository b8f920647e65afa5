package van

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gopslite/pslite/message"
)

// MemNetwork is an in-memory network of transports, so that whole clusters
// run inside one test process without sockets, and faults can be injected
// the way etcd raft's test network does: drop messages at a seeded rate,
// delay them, cut and heal links (a cut link holds messages, as TCP does,
// and delivers them in order once healed), stop a node (it neither sends
// nor receives until resumed) and kill it (its peers see their connections
// close). Messages are copied on send, as a real network would. Nodes are
// named by the address they bind, "host:port".
type MemNetwork struct {
	clock Clock

	mu        sync.Mutex // guards everything below
	rng       *rand.Rand
	endpoints map[string]*memEndpoint // by address
	links     map[[2]string]*memLink  // by (from, to) address
	early     map[string][]memMsg     // for addresses nobody has bound (yet)
	// dialers holds, per address, the transports that ever connected to
	// it, in that order, until they close: a connection event there
	// concerns them alone (with thousands of nodes, telling every
	// transport of every event was quadratic).
	dialers  map[string][]*memTransport
	nextPort int
	dropAll  float64
	idle     chan struct{} // closed and replaced when a receiver starts waiting or an event is handled
	events   int           // connection events queued or being handled
}

// memLimit bounds a node's receive queue for Send (the peer does not keep
// up); TrySend may go to memHardLimit.
const (
	memLimit     = 4096
	memHardLimit = 2 * memLimit
)

type memMsg struct {
	identity []byte
	frames   [][]byte
	at       time.Time // when it may be delivered (delayed links)
}

// memEndpoint is a bound address: its receive queue and state.
type memEndpoint struct {
	addr    string
	owner   *memTransport
	inbox   []memMsg
	wake    chan struct{} // closed and replaced when inbox grows or state changes
	room    chan struct{} // closed and replaced when inbox shrinks
	dead    bool
	paused  bool
	waiting bool      // its receive loop waits in Recv with nothing to take
	held    []heldMsg // sent while paused
}

type heldMsg struct {
	to  string
	msg memMsg
}

// memLink is the state of the link from one address to another.
type memLink struct {
	cut     bool
	held    []memMsg // while cut
	drop    float64  // probability of losing a message
	tamper  func(frames [][]byte) [][]byte
	delay   time.Duration
	transit []memMsg // delayed, in order
	armed   bool     // a delivery timer is set
}

// NewMemNetwork returns an empty network on the system clock, with drops
// seeded by 1.
func NewMemNetwork() *MemNetwork { return NewMemNetworkClock(SystemClock(), 1) }

// NewMemNetworkClock returns an empty network whose delays run on clock
// and whose drops are drawn from a generator seeded with seed.
func NewMemNetworkClock(clock Clock, seed uint64) *MemNetwork {
	return &MemNetwork{
		clock:     clock,
		rng:       rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		endpoints: make(map[string]*memEndpoint),
		links:     make(map[[2]string]*memLink),
		early:     make(map[string][]memMsg),
		dialers:   make(map[string][]*memTransport),
	}
}

// Settle waits until every running node has taken in all that was
// delivered to it and waits for more (its receive loop is idle), and every
// connection event has been handled. Messages
// held by cut links, delayed on a link, or waiting for a stopped node do not
// count. With a FakeClock, a test that advances the clock and settles the
// network after each step sees the protocol run as it would in real time.
// It returns ctx's error if the network does not settle.
func (n *MemNetwork) Settle(ctx context.Context) error {
	for {
		n.mu.Lock()
		busy := n.events > 0
		for _, ep := range n.endpoints {
			if !ep.dead && !ep.paused && (len(ep.inbox) > 0 || !ep.waiting) {
				busy = true
				break
			}
		}
		idle := waitOn(&n.idle)
		n.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Transport returns a new transport attached to the network.
func (n *MemNetwork) Transport() Transport {
	return &memTransport{net: n, peers: make(map[int]memPeer), stop: make(chan struct{})}
}

func (n *MemNetwork) linkLocked(from, to string) *memLink {
	l := n.links[[2]string{from, to}]
	if l == nil {
		l = &memLink{}
		n.links[[2]string{from, to}] = l
	}
	return l
}

// Drop makes the link from one address to another lose messages with
// probability p (0 to 1).
func (n *MemNetwork) Drop(from, to string, p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.linkLocked(from, to).drop = p
}

// Tamper makes the link from one address to another pass each message's
// frames (the network's own copy) through f, which may change them, as a
// damaged peer or a bug would; nil removes it.
func (n *MemNetwork) Tamper(from, to string, f func(frames [][]byte) [][]byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.linkLocked(from, to).tamper = f
}

// DropAll makes every link lose messages with probability p, on top of any
// per-link rate.
func (n *MemNetwork) DropAll(p float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropAll = p
}

// Delay makes the link from one address to another deliver each message d
// after it was sent (on the network's clock), in order.
func (n *MemNetwork) Delay(from, to string, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.linkLocked(from, to).delay = d
}

// Cut cuts the links both ways between every address of a and every
// address of b: messages are held until Heal.
func (n *MemNetwork) Cut(a, b []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			n.linkLocked(x, y).cut = true
			n.linkLocked(y, x).cut = true
		}
	}
}

// Isolate cuts every link to and from addr.
func (n *MemNetwork) Isolate(addr string) {
	n.mu.Lock()
	var others []string
	for a := range n.endpoints {
		if a != addr {
			others = append(others, a)
		}
	}
	n.mu.Unlock()
	n.Cut([]string{addr}, others)
}

// Heal restores every cut link and delivers what they held, in order.
func (n *MemNetwork) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	keys := make([][2]string, 0, len(n.links))
	for k := range n.links {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int {
		if a[0] != b[0] {
			return cmpString(a[0], b[0])
		}
		return cmpString(a[1], b[1])
	})
	for _, k := range keys {
		l := n.links[k]
		if !l.cut {
			continue
		}
		l.cut = false
		held := l.held
		l.held = nil
		for _, m := range held {
			n.routeLocked(k[0], k[1], l, m)
		}
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Refuse makes the node at from lose, from now on, all it sends to node id
// over its current connection, without telling it; a new connection
// (Connect again) is heard. So a peer's libzmq treats a connection whose
// identity it refused (ZMQ_ROUTER_HANDOVER off while another connection
// holds it): a refused connection stays refused.
func (n *MemNetwork) Refuse(from string, id int) {
	n.mu.Lock()
	var t *memTransport
	if ep := n.endpoints[from]; ep != nil {
		t = ep.owner
	}
	n.mu.Unlock()
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.peers[id]; ok {
		if t.refused == nil {
			t.refused = make(map[int]int)
		}
		t.refused[id] = p.gen
	}
}

// Pause stops the node at addr, as SIGSTOP would: it receives nothing
// (messages to it wait) and what it sends is held until Resume.
func (n *MemNetwork) Pause(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ep := n.endpoints[addr]; ep != nil {
		ep.paused = true
	}
}

// Resume lets a paused node run again: what it sent meanwhile goes out.
func (n *MemNetwork) Resume(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ep := n.endpoints[addr]
	if ep == nil || !ep.paused {
		return
	}
	ep.paused = false
	held := ep.held
	ep.held = nil
	for _, h := range held {
		n.sendLocked(addr, h.to, h.msg)
	}
	ep.signal()
}

// Kill ends the node at addr as if its process died: it receives and sends
// nothing more, its transport's calls fail, and every transport connected
// to it sees the connection go down.
func (n *MemNetwork) Kill(addr string) {
	n.mu.Lock()
	ep := n.endpoints[addr]
	if ep == nil || ep.dead {
		n.mu.Unlock()
		return
	}
	ep.dead = true
	ep.inbox, ep.held = nil, nil
	ep.signal()
	broadcast(&ep.room)
	delete(n.endpoints, addr)
	owner := ep.owner
	n.mu.Unlock()
	owner.kill()
	n.connectionEvent(addr, false)
}

// connectionEvent tells every transport connected to addr that the
// connection went down or came up.
func (n *MemNetwork) connectionEvent(addr string, up bool) {
	n.mu.Lock()
	// Closed transports leave the list here, not at Close (a job's end
	// would then cost a search of each list it is in).
	ts := slices.DeleteFunc(n.dialers[addr], func(t *memTransport) bool { return t.dialed == nil })
	n.dialers[addr] = ts
	if len(ts) == 0 {
		delete(n.dialers, addr)
	}
	ts = slices.Clone(ts)
	n.mu.Unlock()
	for _, t := range ts {
		t.peerEvent(addr, up)
	}
}

// sendLocked routes a message from one address to another.
func (n *MemNetwork) sendLocked(from, to string, m memMsg) {
	if ep := n.endpoints[from]; ep != nil && ep.paused {
		ep.held = append(ep.held, heldMsg{to: to, msg: m})
		return
	}
	n.routeLocked(from, to, n.linkLocked(from, to), m)
}

func (n *MemNetwork) routeLocked(from, to string, l *memLink, m memMsg) {
	if l.cut {
		l.held = append(l.held, m)
		return
	}
	if p := max(l.drop, n.dropAll); p > 0 && n.rng.Float64() < p {
		return
	}
	if l.tamper != nil {
		m.frames = l.tamper(m.frames)
	}
	if l.delay <= 0 && len(l.transit) == 0 {
		n.deliverLocked(to, m)
		return
	}
	m.at = n.clock.Now().Add(l.delay)
	l.transit = append(l.transit, m)
	n.armLocked(to, l)
}

// armLocked sets a timer for the first message in transit on l.
func (n *MemNetwork) armLocked(to string, l *memLink) {
	if l.armed || len(l.transit) == 0 {
		return
	}
	l.armed = true
	d := l.transit[0].at.Sub(n.clock.Now())
	n.clock.AfterFunc(max(d, 0), func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		l.armed = false
		now := n.clock.Now()
		for len(l.transit) > 0 && !l.transit[0].at.After(now) {
			n.deliverLocked(to, l.transit[0])
			l.transit = l.transit[1:]
		}
		n.armLocked(to, l)
	})
}

func (n *MemNetwork) deliverLocked(to string, m memMsg) {
	ep := n.endpoints[to]
	if ep == nil || ep.dead {
		// Nobody listens there: the message waits for whoever binds the
		// address, as it waits in a ZeroMQ sender's queue (up to a bound).
		if len(n.early[to]) < memHardLimit {
			n.early[to] = append(n.early[to], m)
		}
		return
	}
	ep.inbox = append(ep.inbox, m)
	ep.signal()
}

// broadcast wakes whoever waits on *ch (see waitOn): it closes the
// channel, if one was made, and clears it, so that a network nobody waits
// on makes no channel per message or event. The lock that guards *ch is
// held.
func broadcast(ch *chan struct{}) {
	if *ch != nil {
		close(*ch)
		*ch = nil
	}
}

// waitOn returns the channel the next broadcast on *ch closes, making it
// if need be. The lock that guards *ch is held.
func waitOn(ch *chan struct{}) chan struct{} {
	if *ch == nil {
		*ch = make(chan struct{})
	}
	return *ch
}

func (ep *memEndpoint) signal() {
	broadcast(&ep.wake)
}

// The in-memory transport lends and batches, as the socket transports do.
var (
	_ Lender  = (*memTransport)(nil)
	_ Batcher = (*memTransport)(nil)
)

type memTransport struct {
	net  *MemNetwork
	addr string // bound address

	mu    sync.Mutex // guards peers, gens, held, closed, killed, handler, events
	peers map[int]memPeer
	// atAddr indexes peers by address: every node's connection events
	// look up the address that went up or down (a scan of every peer
	// made a job's start and end cost its size cubed).
	atAddr map[string][]int
	// changed is broadcast when a peer is replaced or dropped: it ends the
	// Sends waiting for room on it (ErrPeerClosed). See waitOn.
	changed chan struct{}
	// dialed is every address the transport connected to (its entries in
	// the network's dialers), nil once it is closed; guarded by the
	// network's mu.
	dialed map[string]struct{}
	gens   int // the last memPeer.gen given
	// ident is the identity the last Connect gave, shared by the peers
	// (read only).
	ident []byte
	// held holds what is sent to the peers held by Hold (see Batcher), in
	// order, until Flush.
	held map[int][]batchedMsg
	// refused is, per peer id, the connection (memPeer.gen) whose
	// messages are lost (see MemNetwork.Refuse).
	refused   map[int]int
	closed    bool
	killed    bool
	handler   func(id int, up bool)
	events    []memEvent
	eventWake chan struct{}
	eventDone chan struct{}
	// stop is closed when the transport is closed or killed: it ends the
	// Sends waiting for room.
	stop chan struct{}
}

type memPeer struct {
	addr     string
	identity []byte
	gen      int // distinguishes connections (to the same id, or not)
}

// batchedMsg is a message sent to a peer held by Hold.
type batchedMsg struct {
	peer memPeer
	msg  memMsg
}

type memEvent struct {
	id int
	up bool
}

var (
	_ Transport          = (*memTransport)(nil)
	_ ConnectionReporter = (*memTransport)(nil)
	_ Batcher            = (*memTransport)(nil)
)

// Hold implements Batcher: what is sent to node id waits, in order, until
// Flush.
func (t *memTransport) Hold(id int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held == nil {
		t.held = make(map[int][]batchedMsg)
	}
	if _, ok := t.held[id]; !ok {
		t.held[id] = nil
	}
}

// Flush implements Batcher: it delivers what the held peers' queues hold
// (past a full inbox, as ZeroMQ's queue would take it) and stops holding
// them. What was held for a connection replaced since is lost, as it would
// be on a closed socket.
func (t *memTransport) Flush() {
	t.mu.Lock()
	held := t.held
	t.held = nil
	peers := make(map[int]memPeer, len(held))
	for id := range held {
		peers[id] = t.peers[id]
	}
	closed := t.closed || t.killed
	t.mu.Unlock()
	if closed {
		return
	}
	n := t.net
	for id, msgs := range held {
		for _, h := range msgs {
			if cur, ok := peers[id]; !ok || cur.gen != h.peer.gen {
				continue
			}
			n.mu.Lock()
			n.sendLocked(t.addr, h.peer.addr, h.msg)
			n.mu.Unlock()
		}
	}
}

// memLendMin is the smallest frame the in-memory transport lends, the same
// as the socket transports' (512 KiB).
const memLendMin = 512 << 10

// RecvLent implements Lender: Recv, with frames of memLendMin bytes or more
// lent, as the socket transports lend them. Their memory is the network's
// copy of what was sent, and it is overwritten with 0xDB bytes when the
// loan's last hold is dropped, so that any test over the in-memory network
// that reads lent memory after giving it back reads poison.
func (t *memTransport) RecvLent() ([]byte, [][]byte, *message.Loan, error) {
	ident, frames, err := t.Recv()
	return ident, frames, memLoan(frames), err
}

// memLoan lends the large frames of a received message, if any.
func memLoan(frames [][]byte) *message.Loan {
	var mask uint64
	for i, f := range frames {
		if i < 64 && len(f) >= memLendMin {
			mask |= 1 << i
		}
	}
	if mask == 0 {
		return nil
	}
	return message.NewLoan(frames, mask, poisonFrames)
}

// poisonFrames overwrites given-back frames with 0xDB bytes.
func poisonFrames(bufs [][]byte) {
	for _, b := range bufs {
		for i := range b {
			b[i] = 0xDB
		}
	}
}

// TryRecvLent implements Batcher: RecvLent that returns ErrRecvTimeout at
// once when nothing waits.
func (t *memTransport) TryRecvLent() ([]byte, [][]byte, *message.Loan, error) {
	if t.addr == "" {
		return nil, nil, nil, fmt.Errorf("van: not bound")
	}
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	ep := n.endpoints[t.addr]
	if ep == nil || ep.dead || ep.owner != t {
		return nil, nil, nil, ErrClosed
	}
	if ep.paused || len(ep.inbox) == 0 {
		return nil, nil, nil, ErrRecvTimeout
	}
	m := ep.inbox[0]
	ep.inbox[0] = memMsg{}
	ep.inbox = ep.inbox[1:]
	broadcast(&ep.room)
	return m.identity, m.frames, memLoan(m.frames), nil
}

func (t *memTransport) Bind(host string, port, maxRetry int) (int, error) {
	n := t.net
	n.mu.Lock()
	for i := 0; i <= maxRetry; i++ {
		if port <= 0 || i > 0 {
			n.nextPort++
			port = 10000 + n.nextPort
		}
		addr := fmt.Sprintf("%s:%d", host, port)
		if n.endpoints[addr] != nil {
			continue
		}
		t.addr = addr
		n.endpoints[addr] = &memEndpoint{addr: addr, owner: t, inbox: n.early[addr]}
		delete(n.early, addr)
		n.mu.Unlock()
		n.connectionEvent(addr, true) // a node restarted on an address others know
		return port, nil
	}
	n.mu.Unlock()
	return 0, fmt.Errorf("van: bind %s:%d: address in use", host, port)
}

func (t *memTransport) SetConnectionHandler(f func(id int, up bool)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.handler = f
	if t.eventDone == nil {
		t.eventWake = make(chan struct{}, 1)
		t.eventDone = make(chan struct{})
		go t.runEvents()
	}
}

// runEvents delivers connection events in order, on a goroutine of its
// own, until the transport closes.
func (t *memTransport) runEvents() {
	defer close(t.eventDone)
	for {
		t.mu.Lock()
		evs := t.events
		t.events = nil
		f := t.handler
		closed := t.closed || t.killed
		t.mu.Unlock()
		for _, e := range evs {
			if !closed {
				f(e.id, e.up)
			}
			t.net.eventDone()
		}
		if closed {
			return
		}
		if len(evs) == 0 {
			<-t.eventWake
		}
	}
}

func (t *memTransport) queueEvent(id int, up bool) {
	if t.handler == nil || t.closed || t.killed {
		return
	}
	t.events = append(t.events, memEvent{id, up})
	t.net.mu.Lock()
	t.net.events++
	t.net.mu.Unlock()
	select {
	case t.eventWake <- struct{}{}:
	default:
	}
}

// peerEvent reports a connection event for every peer at addr.
func (t *memTransport) peerEvent(addr string, up bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range t.atAddr[addr] { // in order (see Connect)
		t.queueEvent(id, up)
	}
}

// eventDone counts one connection event handled.
func (n *MemNetwork) eventDone() {
	n.mu.Lock()
	n.events--
	broadcast(&n.idle)
	n.mu.Unlock()
}

// stopLocked closes stop, once; mu is held.
func (t *memTransport) stopLocked() {
	if !t.closed && !t.killed {
		close(t.stop)
	}
}

func (t *memTransport) kill() {
	t.mu.Lock()
	t.stopLocked()
	t.killed = true
	dropped := len(t.events)
	t.events = nil
	t.mu.Unlock()
	for range dropped {
		t.net.eventDone()
	}
	if t.eventWake != nil {
		select {
		case t.eventWake <- struct{}{}:
		default:
		}
	}
}

func (t *memTransport) Connect(id int, host string, port int, identity string) error {
	addr := host + ":" + strconv.Itoa(port)
	t.net.mu.Lock()
	ep := t.net.endpoints[addr]
	live := ep != nil && !ep.dead
	if t.dialed == nil {
		t.dialed = map[string]struct{}{}
	}
	if _, ok := t.dialed[addr]; !ok {
		t.dialed[addr] = struct{}{}
		t.net.dialers[addr] = append(t.net.dialers[addr], t)
	}
	t.net.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.killed {
		return ErrClosed
	}
	ident := t.ident // a node connects to all its peers with one identity
	if string(ident) != identity || ident == nil {
		ident = []byte(identity)
		if identity == "" {
			ident = []byte{0, 0x6b, 0x8b, 0x45, 0x67} // like ZeroMQ's generated identities
		}
		t.ident = ident
	}
	if old, ok := t.peers[id]; ok {
		broadcast(&t.changed)
		t.unindexLocked(id, old.addr)
	}
	t.gens++
	t.peers[id] = memPeer{addr: addr, identity: ident, gen: t.gens}
	if t.atAddr == nil {
		t.atAddr = map[string][]int{}
	}
	ids := t.atAddr[addr] // mostly one id: a slice, sorted, costs least
	i, _ := slices.BinarySearch(ids, id)
	t.atAddr[addr] = slices.Insert(ids, i, id)
	if live {
		t.queueEvent(id, true)
	}
	return nil
}

func (t *memTransport) Disconnect(id int) {
	t.mu.Lock()
	if p, ok := t.peers[id]; ok {
		broadcast(&t.changed)
		delete(t.peers, id)
		t.unindexLocked(id, p.addr)
	}
	t.mu.Unlock()
}

// unindexLocked removes peer id at addr from atAddr; mu is held.
func (t *memTransport) unindexLocked(id int, addr string) {
	ids := slices.DeleteFunc(t.atAddr[addr], func(x int) bool { return x == id })
	t.atAddr[addr] = ids
	if len(ids) == 0 {
		delete(t.atAddr, addr)
	}
}

func (t *memTransport) Send(ctx context.Context, id int, frames [][]byte, _ bool) (int, error) {
	return t.send(ctx, id, frames, true)
}

func (t *memTransport) TrySend(id int, frames [][]byte, _ bool) (int, error) {
	return t.send(context.Background(), id, frames, false)
}

func (t *memTransport) send(ctx context.Context, id int, frames [][]byte, wait bool) (int, error) {
	t.mu.Lock()
	p, ok := t.peers[id]
	closed := t.closed || t.killed
	refused := ok && t.refused != nil && t.refused[id] == p.gen
	t.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	if !ok {
		return 0, fmt.Errorf("%w %d", ErrNoPeer, id)
	}
	total := 0
	for _, f := range frames {
		total += len(f)
	}
	if refused { // lost, and the sender cannot tell
		return total, nil
	}
	cp := make([][]byte, len(frames))
	for i, f := range frames {
		cp[i] = append([]byte{}, f...)
	}
	m := memMsg{identity: p.identity, frames: cp}
	t.mu.Lock()
	if q, held := t.held[id]; held {
		t.held[id] = append(q, batchedMsg{peer: p, msg: m})
		t.mu.Unlock()
		return total, nil
	}
	t.mu.Unlock()
	n := t.net
	for {
		n.mu.Lock()
		ep := n.endpoints[p.addr]
		limit := memHardLimit
		if wait {
			limit = memLimit
		}
		if ep == nil || ep.dead || len(ep.inbox) < limit || ep.paused {
			// Nobody listens (lost, as with ZeroMQ once the peer is gone),
			// or there is room (a paused receiver's inbox grows, as a
			// socket buffer would, up to what TCP would hold: this is a
			// test network).
			n.sendLocked(t.addr, p.addr, m)
			n.mu.Unlock()
			return total, nil
		}
		if !wait {
			n.mu.Unlock()
			return 0, ErrWouldBlock
		}
		room := waitOn(&ep.room)
		n.mu.Unlock()
		changed, err := t.stillPeer(id, p.gen)
		if err != nil {
			return 0, err
		}
		select {
		case <-room:
		case <-changed: // a peer replaced or dropped: this one?
		case <-t.stop: // closed
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if _, err := t.stillPeer(id, p.gen); err != nil {
			return 0, err
		}
	}
}

// stillPeer returns ErrClosed once t is closed, and ErrPeerClosed once
// the connection gen to id is replaced or dropped; else a channel closed
// at the next such change to any peer.
func (t *memTransport) stillPeer(id, gen int) (chan struct{}, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q, ok := t.peers[id]
	switch {
	case t.closed || t.killed:
		return nil, ErrClosed
	case !ok || q.gen != gen:
		return nil, ErrPeerClosed
	}
	return waitOn(&t.changed), nil
}

func (t *memTransport) Recv() ([]byte, [][]byte, error) {
	if t.addr == "" {
		return nil, nil, fmt.Errorf("van: not bound")
	}
	n := t.net
	var timer *time.Timer // made once nothing waits: most calls find a message
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		n.mu.Lock()
		ep := n.endpoints[t.addr]
		if ep == nil || ep.dead || ep.owner != t {
			n.mu.Unlock()
			return nil, nil, ErrClosed
		}
		if !ep.paused && len(ep.inbox) > 0 {
			m := ep.inbox[0]
			ep.inbox[0] = memMsg{}
			ep.inbox = ep.inbox[1:]
			broadcast(&ep.room)
			n.mu.Unlock()
			return m.identity, m.frames, nil
		}
		wake := waitOn(&ep.wake)
		ep.waiting = true
		broadcast(&n.idle)
		n.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(100 * time.Millisecond)
		}
		timedOut := false
		select {
		case <-wake:
		case <-timer.C:
			timedOut = true
		}
		n.mu.Lock()
		ep.waiting = false
		n.mu.Unlock()
		if timedOut {
			return nil, nil, ErrRecvTimeout
		}
	}
}

func (t *memTransport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.stopLocked()
	t.closed = true
	t.mu.Unlock()
	if t.eventWake != nil {
		select {
		case t.eventWake <- struct{}{}:
		default:
		}
		<-t.eventDone
	}
	n := t.net
	n.mu.Lock()
	t.dialed = nil // it leaves the dialers' lists (see connectionEvent)
	ep := n.endpoints[t.addr]
	mine := ep != nil && ep.owner == t
	if mine {
		delete(n.endpoints, t.addr)
		ep.dead = true
		ep.signal()
		broadcast(&ep.room)
	}
	n.mu.Unlock()
	if mine {
		// A process that stops closes its connections: its peers see them
		// go down.
		n.connectionEvent(t.addr, false)
	}
	return nil
}
