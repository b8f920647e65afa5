package van

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
)

const emptyID = message.Empty

// ErrNodeDown is returned when sending to a node whose connection dropped
// (with resending off) and has not come back.
var ErrNodeDown = errors.New("van: connection to node lost")

// ErrStopped is returned by calls on a van that has stopped.
var ErrStopped = errors.New("van: stopped")

// Config describes the node a van runs and the job it belongs to.
type Config struct {
	Role          message.Role
	NumServers    int
	NumWorkers    int
	SchedulerHost string // DMLC_PS_ROOT_URI
	SchedulerPort int    // DMLC_PS_ROOT_PORT
	// Host is the address this node announces and binds (not used by the
	// scheduler, which is SchedulerHost).
	Host string
	// Port to bind; 0 picks a free one.
	Port int
	// BindRetries is how many random ports a non-scheduler node tries when
	// Port is taken or 0.
	BindRetries int
	// HeartbeatInterval, when positive, makes a non-scheduler node send a
	// heartbeat to the scheduler this often.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long without a heartbeat makes a node dead,
	// for recovery; 0 disables dead-node detection.
	HeartbeatTimeout time.Duration
	// DropRate is the percentage of received messages dropped once the node
	// is ready (PS_DROP_MSG, for tests).
	DropRate int
	// SetRankEnv sets DMLC_RANK in the process environment once the node
	// knows its rank, as C++ ps-lite does.
	SetRankEnv bool
	// Resend turns on acknowledgements and resending (PS_RESEND) once the
	// node is ready.
	Resend bool
	// ResendTimeout is how long to wait for an ACK before resending
	// (PS_RESEND_TIMEOUT; default 1s).
	ResendTimeout time.Duration
	// ResendMaxRetry is how many times a message is resent before the send
	// fails (default 20).
	ResendMaxRetry int
}

// Handler receives what the van does not handle itself.
type Handler interface {
	// HandleData is called, on the receive goroutine, for each data message.
	// It may take its time: a call that lasts longer than HandlerStall
	// hands the receive loop to a new goroutine, and the call's goroutine
	// ends when it returns.
	HandleData(msg *message.Message)
	// HandleBarrierDone is called when the scheduler releases a barrier.
	HandleBarrierDone(msg *message.Message)
	// HandleSendFailure is called when a message was resent the maximum
	// number of times without an acknowledgement.
	HandleSendFailure(msg *message.Message, err error)
	// HandleNodeDown is called when the connection to a server or worker
	// drops while resending is off: nothing sent to it will be answered.
	HandleNodeDown(id int)
}

// HandlerStall is how long Handler.HandleData may run on the receive
// goroutine before a new goroutine takes over receiving: short enough that
// ACKs, heartbeats and other customers' messages barely notice a slow or
// blocked handler, long enough that ordinary handlers never trigger it.
const HandlerStall = 20 * time.Millisecond

// Van is one node's endpoint.
type Van struct {
	cfg     Config
	tr      Transport
	handler Handler
	log     zerolog.Logger

	startMu   sync.Mutex // serialises Start and Stop
	started   bool
	stopped   bool
	stopping  atomic.Bool
	ready     chan struct{} // closed once the node has its id and peers
	readyOnce sync.Once
	recvDone  chan struct{} // closed when the receive loop exits
	// inHandler is odd while the receive goroutine runs HandleData, which
	// it entered at handlerSince (Unix ns). The watchdog hands the loop to
	// a new goroutine by moving it on to even; see dispatch.
	inHandler    atomic.Uint64
	handlerSince atomic.Int64
	hbStop       chan struct{} // closed to stop the heartbeat goroutine
	hbDone       chan struct{} // closed when the heartbeat goroutine exits
	hbStarted    atomic.Bool
	afterOnce    sync.Once // runs afterReady once
	res          atomic.Pointer[resender]

	timestamp atomic.Int32 // for control messages

	nodeMu    sync.RWMutex // guards myNode and numbers below
	myNode    message.Node
	scheduler message.Node

	hbMu       sync.Mutex // guards heartbeats
	heartbeats map[int]time.Time
	startTime  time.Time

	dropRate atomic.Int32 // percent of received messages to drop once ready
	downMu   sync.Mutex   // guards down
	down     map[int]bool // nodes whose connection dropped (resending off)

	regMu       sync.Mutex     // guards regSnapshot
	regSnapshot []message.Node // what the scheduler has registered, for errors

	sendBytes atomic.Int64
	recvBytes atomic.Int64

	// Owned by the goroutine running the receive loop.
	rs recvState
}

// recvState is the control protocol's state, touched only by the goroutine
// running the receive loop.
type recvState struct {
	registered []message.Node // ADD_NODE requests seen by the scheduler
	connected  map[string]int // host:port -> id
	shared     map[int]int    // id -> id of the process it shares (multi-customer processes)
	numServers int
	numWorkers int
	barrier    [8]int // barrier requests counted per group
	rng        *rand.Rand
	// waiting holds nodes that asked to join a full job before any node of
	// their role was found dead; they are retried as time passes.
	waiting   []message.Node
	lastRetry time.Time
}

// New returns a van for the node cfg describes, sending through tr and
// handing data messages to h.
func New(cfg Config, tr Transport, h Handler, log zerolog.Logger) (*Van, error) {
	if tr == nil || h == nil {
		return nil, errors.New("van: nil transport or handler")
	}
	if cfg.NumServers <= 0 || cfg.NumWorkers <= 0 {
		return nil, fmt.Errorf("van: need at least one server and one worker (have %d servers, %d workers)", cfg.NumServers, cfg.NumWorkers)
	}
	if cfg.SchedulerHost == "" || cfg.SchedulerPort <= 0 || cfg.SchedulerPort > 65535 {
		return nil, fmt.Errorf("van: invalid scheduler address %q:%d", cfg.SchedulerHost, cfg.SchedulerPort)
	}
	v := &Van{
		cfg:        cfg,
		tr:         tr,
		handler:    h,
		log:        log,
		ready:      make(chan struct{}),
		recvDone:   make(chan struct{}),
		hbStop:     make(chan struct{}),
		hbDone:     make(chan struct{}),
		heartbeats: make(map[int]time.Time),
		down:       make(map[int]bool),
	}
	v.scheduler = message.Node{Role: message.RoleScheduler, ID: message.Scheduler, Hostname: cfg.SchedulerHost, Port: int32(cfg.SchedulerPort)}
	if cfg.Role == message.RoleScheduler {
		v.myNode = v.scheduler
	} else {
		v.myNode = message.Node{Role: cfg.Role, ID: emptyID, Hostname: cfg.Host, Port: int32(cfg.Port)}
	}
	if d, ok := tr.(interface{ SetConnectionHandler(func(int, bool)) }); ok {
		d.SetConnectionHandler(v.onConnection)
	}
	v.dropRate.Store(int32(cfg.DropRate))
	v.rs = recvState{connected: map[string]int{}, shared: map[int]int{}, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))}
	return v, nil
}

// MyNode returns this node's description; its ID is Empty until the van is ready.
func (v *Van) MyNode() message.Node {
	v.nodeMu.RLock()
	defer v.nodeMu.RUnlock()
	return v.myNode
}

// IsReady reports whether the node has joined the job.
func (v *Van) IsReady() bool {
	select {
	case <-v.ready:
		return !v.stopping.Load()
	default:
		return false
	}
}

// Ready returns a channel closed once the node has joined the job.
func (v *Van) Ready() <-chan struct{} { return v.ready }

// NextTimestamp returns a fresh timestamp for a control message.
func (v *Van) NextTimestamp() int32 {
	for {
		ts := v.timestamp.Add(1) - 1
		if ts >= 0 && ts != math.MaxInt32 {
			return ts
		}
		v.timestamp.CompareAndSwap(ts+1, 0)
	}
}

// Start joins the job: on the first call it binds, connects to the
// scheduler and starts receiving; every call by a non-scheduler sends
// ADD_NODE for customerID (a process with several customers registers each).
// It returns once the node has its id and its peers, or with ctx's error.
func (v *Van) Start(ctx context.Context, customerID int) error {
	v.startMu.Lock()
	if v.stopped {
		v.startMu.Unlock()
		return ErrStopped
	}
	if !v.started {
		if err := v.init(); err != nil {
			v.startMu.Unlock()
			return err
		}
		v.started = true
	}
	v.startMu.Unlock()

	if v.cfg.Role != message.RoleScheduler && !v.IsReady() {
		me := v.MyNode()
		me.CustomerID = int32(customerID)
		msg := message.New()
		msg.Meta.Recver = message.Scheduler
		msg.Meta.Control.Cmd = message.CmdAddNode
		msg.Meta.Control.Nodes = []message.Node{me}
		msg.Meta.Timestamp = v.NextTimestamp()
		if _, err := v.Send(msg); err != nil {
			return fmt.Errorf("van: register with the scheduler: %w", err)
		}
	}
	select {
	case <-v.ready:
		v.afterOnce.Do(v.afterReady)
		return nil
	case <-v.recvDone:
		return ErrStopped
	case <-ctx.Done():
		if v.cfg.Role == message.RoleScheduler {
			return fmt.Errorf("van: the job did not fill up: %s: %w", v.registrationStatus(), ctx.Err())
		}
		return fmt.Errorf("van: %s at %s:%d did not join the job (scheduler %s:%d unreachable, or the job has not filled up: %d servers, %d workers expected): %w",
			v.cfg.Role, v.cfg.Host, v.MyNode().Port, v.cfg.SchedulerHost, v.cfg.SchedulerPort, v.cfg.NumServers, v.cfg.NumWorkers, ctx.Err())
	}
}

// registrationStatus says which nodes have registered with the scheduler
// and how many of each role are missing.
func (v *Van) registrationStatus() string {
	v.regMu.Lock()
	defer v.regMu.Unlock()
	servers, workers := 0, 0
	var seen []string
	for _, n := range v.regSnapshot {
		if n.Role == message.RoleServer {
			servers++
		} else if n.Role == message.RoleWorker {
			workers++
		}
		seen = append(seen, fmt.Sprintf("%s %s", n.Role, n.Addr()))
	}
	if len(seen) == 0 {
		seen = []string{"none"}
	}
	return fmt.Sprintf("missing %d of %d servers and %d of %d workers (registered: %s)",
		v.cfg.NumServers-servers, v.cfg.NumServers, v.cfg.NumWorkers-workers, v.cfg.NumWorkers, strings.Join(seen, ", "))
}

func (v *Van) init() error {
	isSched := v.cfg.Role == message.RoleScheduler
	me := v.MyNode()
	retries := v.cfg.BindRetries
	host := me.Hostname
	if isSched {
		retries = 0
	}
	port, err := v.tr.Bind(host, int(me.Port), retries)
	if err != nil {
		return err
	}
	v.nodeMu.Lock()
	v.myNode.Port = int32(port)
	v.nodeMu.Unlock()
	v.log.Info().Str("node", v.MyNode().String()).Msg("bound")

	// Connect to the scheduler; a new node has no identity yet.
	ident := ""
	if isSched {
		ident = Identity(message.Scheduler)
	}
	if err := v.tr.Connect(message.Scheduler, v.cfg.SchedulerHost, v.cfg.SchedulerPort, ident); err != nil {
		return err
	}
	v.startTime = time.Now()
	go v.receiveLoop()
	go v.watchHandlers()
	return nil
}

// Stop stops the van: the receive loop and the heartbeat end and every
// socket is closed. It does not hang: a receive loop that does not see its
// own TERMINATE stops at its next receive timeout.
func (v *Van) Stop() error {
	v.startMu.Lock()
	defer v.startMu.Unlock()
	if v.stopped {
		return nil
	}
	v.stopped = true
	if !v.started {
		return v.tr.Close()
	}
	if r := v.res.Load(); r != nil {
		// Let unacknowledged messages (say, the last barrier release) be
		// resent a few times before the receive loop stops.
		r.drain(time.Now().Add(r.timeout * time.Duration(min(r.maxRetry, 8)+1)))
	}
	v.stopping.Store(true)
	me := v.MyNode()
	if me.ID != emptyID {
		msg := message.New()
		msg.Meta.Control.Cmd = message.CmdTerminate
		msg.Meta.Recver = me.ID
		msg.Meta.CustomerID = 0
		if _, err := v.Send(msg); err != nil {
			v.log.Debug().Err(err).Msg("could not send TERMINATE to self; waiting for the receive timeout")
		}
	}
	<-v.recvDone
	if r := v.res.Load(); r != nil {
		r.close()
	}
	close(v.hbStop)
	if v.hbStarted.Load() {
		<-v.hbDone
	}
	v.log.Info().Str("node", me.String()).Int64("sent_bytes", v.sendBytes.Load()).Int64("recv_bytes", v.recvBytes.Load()).Msg("stopped")
	return v.tr.Close()
}

// Send encodes msg and sends it to msg.Meta.Recver. With resending on, the
// message is kept until acknowledged. It returns the bytes sent.
func (v *Van) Send(msg *message.Message) (int, error) {
	if r := v.res.Load(); r != nil {
		r.addOutgoing(msg, v.MyNode().ID)
	}
	return v.sendNow(msg)
}

// sendNow sends msg once.
func (v *Van) sendNow(msg *message.Message) (int, error) { return v.send(msg, false) }

// trySend sends msg once if that needs no waiting; the receive loop sends
// this way, so a slow peer can never stall it (and, through it, everyone).
func (v *Van) trySend(msg *message.Message) (int, error) { return v.send(msg, true) }

func (v *Van) send(msg *message.Message, try bool) (int, error) {
	if msg.Meta.Recver == emptyID {
		return 0, errors.New("van: message without a receiver")
	}
	v.downMu.Lock()
	down := v.down[int(msg.Meta.Recver)]
	v.downMu.Unlock()
	if down {
		return 0, fmt.Errorf("%w: node %d", ErrNodeDown, msg.Meta.Recver)
	}
	meta, err := message.Encode(&msg.Meta)
	if err != nil {
		return 0, fmt.Errorf("van: encode meta: %w", err)
	}
	frames := make([][]byte, 0, 1+len(msg.Data))
	frames = append(frames, meta)
	frames = append(frames, msg.Data...)
	var n int
	if try {
		n, err = v.tr.TrySend(int(msg.Meta.Recver), frames)
	} else {
		n, err = v.tr.Send(int(msg.Meta.Recver), frames, msg.ZeroCopy)
	}
	if err != nil {
		return n, err
	}
	v.sendBytes.Add(int64(n))
	if e := v.log.Trace(); e.Enabled() {
		e.Str("msg", msg.String()).Msg("sent")
	}
	return n, nil
}

// receiveLoop receives and handles messages until the van stops. If the
// watchdog hands the loop to a new goroutine while this one is in a data
// handler, this one ends when the handler returns.
func (v *Van) receiveLoop() {
	if v.receive() {
		close(v.recvDone)
	}
}

// receive is the receive loop; it reports false when it has handed the loop
// over rather than stopped.
func (v *Van) receive() bool {
	for {
		ident, frames, err := v.tr.Recv()
		if len(v.rs.waiting) > 0 && time.Since(v.rs.lastRetry) > 200*time.Millisecond {
			v.retryWaiting()
		}
		if err != nil {
			if errors.Is(err, ErrRecvTimeout) {
				if v.stopping.Load() {
					return true
				}
				continue
			}
			if errors.Is(err, ErrClosed) {
				return true
			}
			v.log.Error().Err(err).Msg("receive failed")
			if v.stopping.Load() {
				return true
			}
			continue
		}
		msg, err := v.decode(ident, frames)
		if err != nil {
			v.log.Warn().Err(err).Msg("dropping a malformed message")
			continue
		}
		if d := v.dropRate.Load(); d > 0 && v.IsReady() && msg.Meta.Control.Cmd != message.CmdTerminate && v.rs.rng.IntN(100) < int(d) {
			v.log.Debug().Str("msg", msg.String()).Msg("dropping a message (PS_DROP_MSG)")
			continue
		}
		if r := v.res.Load(); r != nil && r.addIncoming(msg) {
			continue
		}
		if e := v.log.Trace(); e.Enabled() {
			e.Str("msg", msg.String()).Msg("received")
		}
		if msg.Meta.IsControl() {
			if v.handleControl(msg) {
				return true
			}
			continue
		}
		if msg.Meta.Sender == emptyID || msg.Meta.AppID == emptyID {
			v.log.Warn().Str("msg", msg.String()).Msg("dropping a data message from an unknown sender or without app id")
			continue
		}
		if !v.dispatch(msg) {
			return false
		}
	}
}

// dispatch passes a data message to the handler and reports whether this
// goroutine still runs the receive loop afterwards.
func (v *Van) dispatch(msg *message.Message) bool {
	v.handlerSince.Store(time.Now().UnixNano())
	seq := v.inHandler.Add(1) // odd: in the handler
	v.handler.HandleData(msg)
	if !msg.Meta.Request {
		// A response usually readies the goroutine waiting for it. Yield,
		// so that it runs on this thread now instead of waiting for another
		// thread to wake while this one blocks in the next receive.
		runtime.Gosched()
	}
	return v.inHandler.CompareAndSwap(seq, seq+1)
}

// watchHandlers hands the receive loop to a new goroutine whenever a data
// handler has run for HandlerStall, so that a slow handler (or one waiting
// for a message only the loop can receive) never stalls receiving, until
// the loop stops.
func (v *Van) watchHandlers() {
	tick := time.NewTicker(HandlerStall / 2)
	defer tick.Stop()
	for {
		select {
		case <-v.recvDone:
			return
		case <-tick.C:
		}
		seq := v.inHandler.Load()
		if seq%2 == 0 || time.Since(time.Unix(0, v.handlerSince.Load())) < HandlerStall {
			continue
		}
		if v.inHandler.CompareAndSwap(seq, seq+1) {
			v.log.Debug().Msg("a data handler is taking long: receiving on a new goroutine")
			go v.receiveLoop()
		}
	}
}

func (v *Van) decode(ident []byte, frames [][]byte) (*message.Message, error) {
	if len(frames) < 1 {
		return nil, errors.New("no meta frame")
	}
	var n int64
	for _, f := range frames {
		n += int64(len(f))
	}
	v.recvBytes.Add(n + int64(len(ident)))
	meta, err := message.Decode(frames[0])
	if err != nil {
		return nil, err
	}
	meta.Sender = ParseIdentity(ident)
	meta.Recver = v.MyNode().ID
	msg := &message.Message{Meta: meta, Data: frames[1:]}
	if len(msg.Data) > 0 && len(meta.DataTypes) != len(msg.Data) {
		return nil, fmt.Errorf("%d data frames but %d data types", len(msg.Data), len(meta.DataTypes))
	}
	return msg, nil
}

// handleControl runs one control message; it reports true when the loop
// must end.
func (v *Van) handleControl(msg *message.Message) bool {
	switch msg.Meta.Control.Cmd {
	case message.CmdTerminate:
		if v.stopping.Load() {
			return true
		}
		v.log.Warn().Str("msg", msg.String()).Msg("ignoring TERMINATE while not stopping")
	case message.CmdAddNode:
		v.handleAddNode(msg)
	case message.CmdBarrier:
		v.handleBarrier(msg)
	case message.CmdHeartbeat:
		v.handleHeartbeat(msg)
	case message.CmdAck:
		// Resending is off here; an ACK needs no answer.
	default:
		v.log.Warn().Str("msg", msg.String()).Msg("dropping a control message of unknown type")
	}
	return false
}

// markReady marks the node as joined. It runs on the receive goroutine, so
// the resender is in place before the next message is received: every
// message from a ready peer is acknowledged and deduplicated.
func (v *Van) markReady() {
	v.readyOnce.Do(func() {
		if v.cfg.Resend {
			timeout := v.cfg.ResendTimeout
			if timeout <= 0 {
				timeout = time.Second
			}
			retries := v.cfg.ResendMaxRetry
			if retries <= 0 {
				retries = 20
			}
			v.res.Store(newResender(v, timeout, retries))
		}
		close(v.ready)
	})
}

func (v *Van) connect(n message.Node) error {
	me := v.MyNode()
	if n.Role == me.Role && n.ID != me.ID {
		return nil // workers do not talk to workers, nor servers to servers
	}
	ident := ""
	if me.ID != emptyID {
		ident = Identity(int(me.ID))
	}
	v.downMu.Lock()
	delete(v.down, int(n.ID)) // a new connection, e.g. to a replacement
	v.downMu.Unlock()
	return v.tr.Connect(int(n.ID), n.Hostname, int(n.Port), ident)
}

func (v *Van) handleAddNode(msg *message.Message) {
	nodes := msg.Meta.Control.Nodes
	if v.cfg.Role == message.RoleScheduler {
		v.schedulerAddNode(msg)
		return
	}
	if msg.Meta.Sender != message.Scheduler {
		v.log.Warn().Str("msg", msg.String()).Msg("dropping ADD_NODE not sent by the scheduler")
		return
	}
	me := v.MyNode()
	for _, n := range nodes {
		if n.Hostname == me.Hostname && n.Port == me.Port && me.ID == emptyID {
			if n.ID == emptyID || n.Role != me.Role {
				v.log.Warn().Str("msg", msg.String()).Msg("dropping ADD_NODE that assigns no valid id")
				return
			}
			v.nodeMu.Lock()
			v.myNode.ID = n.ID
			v.myNode.IsRecovery = n.IsRecovery
			v.nodeMu.Unlock()
			me = v.MyNode()
			if v.cfg.SetRankEnv {
				os.Setenv("DMLC_RANK", strconv.Itoa(message.IDToRank(int(n.ID))))
			}
			v.log.Info().Str("node", me.String()).Msg("assigned id")
		}
	}
	if me.ID == emptyID {
		v.log.Warn().Str("msg", msg.String()).Msg("ADD_NODE does not list this node; ignoring it")
		return
	}
	now := time.Now()
	for _, n := range nodes {
		if n.ID == emptyID || n.ID <= 0 {
			continue
		}
		addr := n.Addr()
		if old, ok := v.rs.connected[addr]; ok && old == int(n.ID) && !n.IsRecovery {
			continue
		}
		if err := v.connect(n); err != nil {
			v.log.Error().Err(err).Str("node", n.String()).Msg("connect failed")
			continue
		}
		v.rs.connected[addr] = int(n.ID)
		v.updateHeartbeat(int(n.ID), now)
	}
	v.markReady()
}

func (v *Van) schedulerAddNode(msg *message.Message) {
	total := v.cfg.NumServers + v.cfg.NumWorkers
	if msg.Meta.Sender != emptyID {
		v.log.Warn().Str("msg", msg.String()).Msg("dropping ADD_NODE from a node that already has an id")
		return
	}
	if len(msg.Meta.Control.Nodes) != 1 {
		v.log.Warn().Str("msg", msg.String()).Msg("dropping ADD_NODE that does not carry exactly one node")
		return
	}
	n := msg.Meta.Control.Nodes[0]
	if n.Role != message.RoleServer && n.Role != message.RoleWorker || n.Port <= 0 || n.Hostname == "" {
		v.log.Warn().Str("msg", msg.String()).Msg("dropping ADD_NODE for an invalid node")
		return
	}
	if len(v.rs.registered) < total {
		n.ID = emptyID
		v.rs.registered = append(v.rs.registered, n)
		v.regMu.Lock()
		v.regSnapshot = append([]message.Node(nil), v.rs.registered...)
		v.regMu.Unlock()
		v.log.Info().Str("node", n.String()).Int("have", len(v.rs.registered)).Int("want", total).Msg("node registered")
		if len(v.rs.registered) == total {
			v.assignIDs()
		}
		return
	}
	v.recoverNode(n)
}

// assignIDs gives every registered node an id, in order of host and port,
// and sends the full list to all of them.
func (v *Van) assignIDs() {
	nodes := v.rs.registered
	sort.SliceStable(nodes, func(i, j int) bool {
		if nodes[i].Hostname != nodes[j].Hostname {
			return nodes[i].Hostname < nodes[j].Hostname
		}
		return nodes[i].Port < nodes[j].Port
	})
	now := time.Now()
	for i := range nodes {
		n := &nodes[i]
		var id int
		if n.Role == message.RoleServer {
			id = message.ServerRankToID(v.rs.numServers)
			v.rs.numServers++
		} else {
			id = message.WorkerRankToID(v.rs.numWorkers)
			v.rs.numWorkers++
		}
		addr := n.Addr()
		if first, ok := v.rs.connected[addr]; ok {
			// Another customer of a process already registered: it shares
			// that process's id and sockets.
			v.rs.shared[id] = first
			n.ID = int32(first)
			continue
		}
		n.ID = int32(id)
		if err := v.connect(*n); err != nil {
			v.log.Error().Err(err).Str("node", n.String()).Msg("connect failed")
		}
		v.rs.connected[addr] = id
		v.updateHeartbeat(id, now)
	}
	list := append(append([]message.Node{}, nodes...), v.MyNode())
	v.rs.registered = list
	for _, id := range v.groupMembers(message.ServerGroup + message.WorkerGroup) {
		if _, shared := v.rs.shared[id]; shared {
			continue
		}
		v.sendNodes(id, list)
	}
	v.log.Info().Int("servers", v.rs.numServers).Int("workers", v.rs.numWorkers).Msg("all nodes registered")
	v.markReady()
}

func (v *Van) sendNodes(id int, nodes []message.Node) {
	msg := message.New()
	msg.Meta.Recver = int32(id)
	msg.Meta.Control.Cmd = message.CmdAddNode
	msg.Meta.Control.Nodes = nodes
	msg.Meta.Timestamp = v.NextTimestamp()
	if _, err := v.Send(msg); err != nil {
		v.log.Error().Err(err).Int("to", id).Msg("sending the node list failed")
	}
}

// retryWaiting gives the nodes waiting to replace a dead node another try.
func (v *Van) retryWaiting() {
	v.rs.lastRetry = time.Now()
	waiting := v.rs.waiting
	v.rs.waiting = nil
	for _, n := range waiting {
		v.recoverNode(n)
	}
}

// recoverNode lets a node replace a dead node of the same role. When none is
// dead yet but heartbeats are on, the node waits (a restarted process often
// registers before the scheduler has declared its predecessor dead).
func (v *Van) recoverNode(n message.Node) bool {
	dead := v.DeadNodes(v.cfg.HeartbeatTimeout)
	deadSet := map[int]bool{}
	for _, id := range dead {
		deadSet[id] = true
	}
	list := v.rs.registered
	for i := 0; i < len(list)-1; i++ {
		old := list[i]
		if !deadSet[int(old.ID)] || old.Role != n.Role {
			continue
		}
		n.ID = old.ID
		n.IsRecovery = true
		v.log.Warn().Str("dead", old.String()).Str("new", n.String()).Msg("replacing a dead node")
		delete(v.rs.connected, old.Addr())
		list[i] = n
		if err := v.connect(n); err != nil {
			v.log.Error().Err(err).Str("node", n.String()).Msg("connect failed")
			return false
		}
		v.rs.connected[n.Addr()] = int(n.ID)
		v.updateHeartbeat(int(n.ID), time.Now())
		for _, id := range v.groupMembers(message.ServerGroup + message.WorkerGroup) {
			if id != int(n.ID) && deadSet[id] {
				continue
			}
			if id == int(n.ID) {
				v.sendNodes(id, list)
			} else {
				v.sendNodes(id, []message.Node{n})
			}
		}
		return true
	}
	if v.cfg.HeartbeatTimeout > 0 && len(v.rs.waiting) < v.cfg.NumServers+v.cfg.NumWorkers {
		for _, w := range v.rs.waiting {
			if w.Addr() == n.Addr() {
				return false
			}
		}
		v.log.Info().Str("node", n.String()).Msg("job is full: the node waits until a node of its role is declared dead")
		v.rs.waiting = append(v.rs.waiting, n)
		return false
	}
	v.log.Warn().Str("node", n.String()).Msg("refusing ADD_NODE: the job is full and no node of that role is dead")
	return false
}

func (v *Van) groupMembers(group int) []int {
	ids, _ := message.GroupMembers(group, v.cfg.NumServers, v.cfg.NumWorkers)
	return ids
}

func (v *Van) handleBarrier(msg *message.Message) {
	if !msg.Meta.Request {
		if msg.Meta.Sender != message.Scheduler {
			v.log.Warn().Str("msg", msg.String()).Msg("dropping a barrier release not sent by the scheduler")
			return
		}
		v.handler.HandleBarrierDone(msg)
		return
	}
	if v.cfg.Role != message.RoleScheduler {
		v.log.Warn().Str("msg", msg.String()).Msg("dropping a barrier request sent to a non-scheduler")
		return
	}
	group := int(msg.Meta.Control.BarrierGroup)
	if group < 1 || group > 7 || msg.Meta.Sender == emptyID {
		v.log.Warn().Str("msg", msg.String()).Msg("dropping a barrier request with a bad group or sender")
		return
	}
	members := v.groupMembers(group)
	v.rs.barrier[group]++
	v.log.Debug().Int("group", group).Int("count", v.rs.barrier[group]).Int("of", len(members)).Msg("barrier")
	if v.rs.barrier[group] < len(members) {
		return
	}
	v.rs.barrier[group] = 0
	// Release servers first and workers last. A released worker may send a
	// request at once, and a C++ ps-lite server that gets a request before
	// its own release blocks its receive thread waiting (5 s, then aborts)
	// for the customer it only creates once released; C++ schedulers
	// release workers first and lose that race now and then.
	slices.SortStableFunc(members, func(a, b int) int { return releaseOrder(a) - releaseOrder(b) })
	for _, id := range members {
		if _, shared := v.rs.shared[id]; shared {
			continue
		}
		res := message.New()
		res.Meta.Request = false
		res.Meta.AppID = msg.Meta.AppID
		res.Meta.CustomerID = msg.Meta.CustomerID
		res.Meta.Control.Cmd = message.CmdBarrier
		res.Meta.Recver = int32(id)
		res.Meta.Timestamp = v.NextTimestamp()
		if _, err := v.Send(res); err != nil {
			v.log.Error().Err(err).Int("to", id).Msg("sending a barrier release failed")
		}
	}
}

// releaseOrder ranks node ids for barrier releases: servers, the
// scheduler, workers.
func releaseOrder(id int) int {
	switch {
	case id == message.Scheduler:
		return 1
	case id%2 == 0:
		return 0
	}
	return 2
}

func (v *Van) handleHeartbeat(msg *message.Message) {
	now := time.Now()
	for _, n := range msg.Meta.Control.Nodes {
		if n.ID == emptyID {
			continue
		}
		v.updateHeartbeat(int(n.ID), now)
		if v.cfg.Role == message.RoleScheduler {
			ack := message.New()
			ack.Meta.Recver = n.ID
			ack.Meta.Control.Cmd = message.CmdHeartbeat
			ack.Meta.Control.Nodes = []message.Node{v.MyNode()}
			ack.Meta.Timestamp = v.NextTimestamp()
			if _, err := v.trySend(ack); err != nil {
				v.log.Debug().Err(err).Int32("to", n.ID).Msg("heartbeat reply not sent")
			}
		}
	}
}

func (v *Van) updateHeartbeat(id int, t time.Time) {
	v.hbMu.Lock()
	v.heartbeats[id] = t
	v.hbMu.Unlock()
}

// onConnection learns from the transport that the connection to node id
// dropped or came back. With resending on, requests to a lost node are
// resent until a replacement answers; without, they can only fail, and so
// do new sends to it until it is connected again.
func (v *Van) onConnection(id int, up bool) {
	if id == int(v.MyNode().ID) || id == message.Scheduler {
		return
	}
	v.downMu.Lock()
	if up {
		delete(v.down, id)
		v.downMu.Unlock()
		return
	}
	if !v.IsReady() || v.res.Load() != nil {
		v.downMu.Unlock()
		return
	}
	v.down[id] = true
	v.downMu.Unlock()
	v.log.Debug().Int("node", id).Msg("connection dropped")
	v.handler.HandleNodeDown(id)
}

// DeadNodes returns the nodes not heard from within timeout: at the
// scheduler, servers and workers; elsewhere, the scheduler. A timeout of 0
// reports none.
func (v *Van) DeadNodes(timeout time.Duration) []int {
	if timeout <= 0 || !v.IsReady() {
		return nil
	}
	var ids []int
	if v.cfg.Role == message.RoleScheduler {
		ids = v.groupMembers(message.ServerGroup + message.WorkerGroup)
	} else {
		ids = []int{message.Scheduler}
	}
	now := time.Now()
	if now.Sub(v.startTime) < timeout {
		return nil
	}
	v.hbMu.Lock()
	defer v.hbMu.Unlock()
	var dead []int
	for _, id := range ids {
		if last, ok := v.heartbeats[id]; !ok || now.Sub(last) > timeout {
			dead = append(dead, id)
		}
	}
	return dead
}

// afterReady starts the heartbeat once the node has joined; Stop ends it.
func (v *Van) afterReady() {
	v.startMu.Lock()
	defer v.startMu.Unlock()
	if v.stopped {
		return
	}
	if v.cfg.Role == message.RoleScheduler || v.cfg.HeartbeatInterval <= 0 {
		return
	}
	v.hbStarted.Store(true)
	go func() {
		defer close(v.hbDone)
		tick := time.NewTicker(v.cfg.HeartbeatInterval)
		defer tick.Stop()
		for {
			select {
			case <-v.hbStop:
				return
			case <-tick.C:
				msg := message.New()
				msg.Meta.Recver = message.Scheduler
				msg.Meta.Control.Cmd = message.CmdHeartbeat
				msg.Meta.Control.Nodes = []message.Node{v.MyNode()}
				msg.Meta.Timestamp = v.NextTimestamp()
				if _, err := v.Send(msg); err != nil {
					v.log.Debug().Err(err).Msg("heartbeat failed")
				}
			}
		}
	}()
}

// SetDropRate changes the percentage of received messages dropped once the
// node is ready (PS_DROP_MSG), for tests.
func (v *Van) SetDropRate(percent int) { v.dropRate.Store(int32(min(max(percent, 0), 100))) }

// Stats returns the bytes sent and received so far.
func (v *Van) Stats() (sent, received int64) { return v.sendBytes.Load(), v.recvBytes.Load() }
