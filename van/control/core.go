package control

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/replica"
)

const empty = message.Empty

// Defaults for the Config fields left zero.
const (
	DefaultConnGrace      = time.Second
	DefaultConnectTimeout = 10 * time.Second
)

// Config describes the node a Core runs and the job it belongs to.
type Config struct {
	Role       message.Role
	NumServers int
	NumWorkers int
	// SchedulerHost and SchedulerPort are the scheduler's address
	// (DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT).
	SchedulerHost string
	SchedulerPort int
	// Host and Port are the address this node announces (a scheduler's are
	// SchedulerHost and SchedulerPort); Port is the one bound.
	Host string
	Port int
	// HeartbeatInterval, when positive, makes a server or worker send a
	// heartbeat to the scheduler this often, and turns on the detection of
	// silent nodes.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long a node may stay silent, with heartbeats
	// on, before it counts as dead. It must exceed HeartbeatInterval.
	HeartbeatTimeout time.Duration
	// ConnEvents says that the transport reports connections going down and
	// up (Core.Connection). Without it only heartbeats detect dead nodes.
	ConnEvents bool
	// ConnGrace is how long a connection that dropped may stay down before
	// the peer counts as dead (default DefaultConnGrace): a live peer's
	// connection comes back sooner.
	ConnGrace time.Duration
	// Resend says that lost messages are resent (PS_RESEND). Without it, a
	// connection to a live peer that drops and comes back within ConnGrace
	// fails the job: what was in flight on it may be lost for good, and a
	// request or barrier waiting for it would wait for ever.
	Resend bool
	// ConnectTimeout is how long a new connection may take to come up
	// (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// RecoveryWait is how long the scheduler waits, after a server or worker
	// is declared dead, for a replacement to take its place before it
	// declares the job failed. Zero fails the job at once (a replacement
	// already waiting still takes the place).
	RecoveryWait time.Duration
	// Managed makes the job managed (PS_REPLICAS or PS_CHECKPOINT_DIR): the
	// scheduler makes views of which servers hold each key range, and every
	// server and worker follows them (see views.go).
	Managed bool
	// Replicas is how many servers hold each key range besides its head
	// (PS_REPLICAS), in a managed job.
	Replicas int
	// CheckpointInterval, at a managed job's scheduler, takes a snapshot of
	// every server's store this often (0: only when asked).
	CheckpointInterval time.Duration
	// NextTimestamp returns the timestamp of each message the core makes;
	// nil numbers them from 0.
	NextTimestamp func() int32
	// Log receives the core's account of what it decides.
	Log zerolog.Logger
}

func (cfg *Config) check() error {
	var errs []error
	if cfg.NumServers <= 0 || cfg.NumWorkers <= 0 {
		errs = append(errs, fmt.Errorf("need at least one server and one worker (have %d servers, %d workers)", cfg.NumServers, cfg.NumWorkers))
	}
	if cfg.Role != message.RoleScheduler && cfg.Role != message.RoleServer && cfg.Role != message.RoleWorker {
		errs = append(errs, fmt.Errorf("invalid role %v", cfg.Role))
	}
	if cfg.SchedulerHost == "" || cfg.SchedulerPort <= 0 || cfg.SchedulerPort > 65535 {
		errs = append(errs, fmt.Errorf("invalid scheduler address %q:%d", cfg.SchedulerHost, cfg.SchedulerPort))
	}
	if cfg.Replicas < 0 || cfg.Replicas > 0 && !cfg.Managed {
		errs = append(errs, fmt.Errorf("%d replicas in an unmanaged job", cfg.Replicas))
	}
	if cfg.HeartbeatInterval < 0 || cfg.HeartbeatTimeout < 0 || cfg.RecoveryWait < 0 || cfg.ConnGrace < 0 || cfg.ConnectTimeout < 0 || cfg.CheckpointInterval < 0 {
		errs = append(errs, errors.New("negative durations"))
	}
	if cfg.HeartbeatInterval > 0 && cfg.HeartbeatTimeout <= cfg.HeartbeatInterval {
		errs = append(errs, fmt.Errorf("heartbeat timeout %v must exceed the heartbeat interval %v", cfg.HeartbeatTimeout, cfg.HeartbeatInterval))
	}
	if len(errs) > 0 {
		return fmt.Errorf("control: %w", errors.Join(errs...))
	}
	if cfg.ConnGrace == 0 {
		cfg.ConnGrace = DefaultConnGrace
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	return nil
}

// Phase is where a node is in its life.
type Phase int

// Phases, in the order a node goes through them.
const (
	// PhaseIdle: not started.
	PhaseIdle Phase = iota
	// PhaseJoining: registering with the scheduler (a scheduler: waiting
	// for the job to fill up).
	PhaseJoining
	// PhaseReady: the node has its id and its peers.
	PhaseReady
	// PhaseDone: the node passed its final barrier or left; faults no
	// longer matter to it.
	PhaseDone
	// PhaseFailed: the job failed (Core.Err says why).
	PhaseFailed
)

var phaseNames = [...]string{"idle", "joining", "ready", "done", "failed"}

func (p Phase) String() string {
	if p >= 0 && int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// OutputKind says what an Output asks the van to do.
type OutputKind int

// Output kinds.
const (
	// Send Msg (to Msg.Meta.Recver), without waiting: the van must never
	// block on it.
	Send OutputKind = iota + 1
	// Connect to Node (its ID, Hostname and Port), presenting Identity (none
	// when empty); it replaces any connection to that id.
	Connect
	// Disconnect from node ID.
	Disconnect
	// Notify the node's user of Event.
	Notify
)

// Output is one thing the van must do, in order.
type Output struct {
	Kind     OutputKind
	Msg      *message.Message // Send
	Once     bool             // Send: once, never resent (to a node outside the job)
	Node     message.Node     // Connect
	Identity string           // Connect
	ID       int              // Disconnect
	Event    Event            // Notify
}

// EventType says what an Event reports.
type EventType int

// Event types.
const (
	// EventReady: the node has joined the job; Node is the node itself,
	// with its id.
	EventReady EventType = iota + 1
	// EventBarrierDone: the scheduler released a barrier; Msg is the
	// release.
	EventBarrierDone
	// EventPeerDown: the connection to server or worker ID has been closed
	// for ConnGrace (seen by a server or worker): its process is gone.
	EventPeerDown
	// EventPeerUp: the connection to server or worker ID is up again after
	// an EventPeerDown.
	EventPeerUp
	// EventNodeDead: the scheduler declared node ID dead (Err says how).
	EventNodeDead
	// EventNodeBack: a node declared dead was heard from again before it
	// was replaced.
	EventNodeBack
	// EventNodeReplaced: Node took the id of a dead node.
	EventNodeReplaced
	// EventFailed: the job failed; Err says why.
	EventFailed
	// EventView: a server or worker of a managed job has a new View.
	EventView
	// EventCut: a server is asked to cut snapshot Gen (Text: the meta to
	// store with it).
	EventCut
	// EventCommitted: snapshot Gen is complete (at a server, or at the
	// worker whose request RequestID asked for it; Gen 0: refused, Text
	// says why).
	EventCommitted
	// EventIncarnations: the process incarnation of the nodes of the job
	// (Incarnations, by id), for the transport to refuse connections that
	// claim a node's identity from another process.
	EventIncarnations
)

var eventNames = [...]string{"", "ready", "barrier-done", "peer-down", "peer-up", "node-dead", "node-back", "node-replaced", "failed", "view", "cut", "committed", "incarnations"}

func (t EventType) String() string {
	if t > 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return fmt.Sprintf("event(%d)", int(t))
}

// Event is something the node's user is told.
type Event struct {
	Type      EventType
	ID        int
	Node      message.Node
	Msg       *message.Message
	Err       error
	View      *replica.View // EventView
	Gen       uint64        // EventCut, EventCommitted
	RequestID int32         // EventCommitted
	Text      string        // EventCut, EventCommitted
	// Incarnations maps node ids to process incarnations
	// (EventIncarnations).
	Incarnations map[int]string
}

// Core is one node's control protocol. It is not safe for concurrent use:
// the van calls it under a mutex.
type Core struct {
	cfg   Config
	log   zerolog.Logger
	phase Phase
	err   error
	me    message.Node
	sched message.Node
	ts    int32 // for NextTimestamp == nil

	startedAt   time.Time
	lastBeat    time.Time // last heartbeat sent
	lastTick    time.Time // a server's or worker's last Tick, to find it was frozen
	finalizing  bool
	passedFinal bool // the final barrier was released

	peers     map[int]*peer      // by process id; see peer
	connected map[int]string     // id -> address of each connection made
	links     map[int]*linkState // a server's or worker's connections to its peers that are down
	// linksDown holds the links that went down, in that order, until
	// Tick reports them or finds them back up.
	linksDown []linkDown

	// The scheduler's.
	registered  []message.Node         // ADD_NODE requests until the job is full, then the node list
	byAddr      map[string]int         // host:port -> process id
	shared      map[int]int            // id -> process id, for the other customers of a process
	barriers    [8]map[barrierKey]bool // barrier requests counted per group
	lastBarrier [8]*message.Message    // the last request counted per group
	waiting     []waiter
	refusals    int // ADD_NODE requests refused

	// Managed jobs (views.go). The scheduler's:
	planner    *replica.Planner
	hellos     map[int]string          // servers that said hello, with what they have on disk
	viewSent   bool                    // the first view went out
	viewsSince time.Time               // when the job filled up
	lostSince  map[int]time.Time       // ranges no server holds, since when
	nextGen    uint64                  // the last snapshot started
	lastCut    time.Time               // when the last periodic snapshot started
	cuts       map[uint64]map[int]bool // snapshots in progress: ranges written
	cutWaiters map[uint64][]cutRequest
	marking    map[uint64]map[int]bool // snapshots written, by the servers yet to mark them complete
	// The process incarnation of each node, by id: the scheduler's from
	// the registrations (procByAddr until ids are given), the others' from
	// the scheduler.
	incarnations map[int]string
	procByAddr   map[string]string
	// A server's or worker's:
	view  *replica.View
	nodes []message.Node // the job's servers, from the scheduler's lists
	// nodeAt is the index of each id in nodes: the list comes whole to
	// every node at each change, so a search per entry would cost every
	// node the job's size squared.
	nodeAt map[int32]int
	mesh   bool // servers are connected to each other
}

// New returns the core of the node cfg describes.
func New(cfg Config) (*Core, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	c := &Core{
		cfg:          cfg,
		log:          cfg.Log,
		peers:        map[int]*peer{},
		connected:    map[int]string{},
		links:        map[int]*linkState{},
		byAddr:       map[string]int{},
		shared:       map[int]int{},
		cuts:         map[uint64]map[int]bool{},
		cutWaiters:   map[uint64][]cutRequest{},
		incarnations: map[int]string{},
		procByAddr:   map[string]string{},
	}
	c.sched = message.Node{Role: message.RoleScheduler, ID: message.Scheduler, Hostname: cfg.SchedulerHost, Port: int32(cfg.SchedulerPort)}
	if cfg.Role == message.RoleScheduler {
		c.me = c.sched
	} else {
		c.me = message.Node{Role: cfg.Role, ID: empty, Hostname: cfg.Host, Port: int32(cfg.Port)}
	}
	for g := range c.barriers {
		c.barriers[g] = map[barrierKey]bool{}
	}
	return c, nil
}

// Phase returns where the node is.
func (c *Core) Phase() Phase { return c.phase }

// Err returns why the job failed, or nil.
func (c *Core) Err() error { return c.err }

// Me returns this node; its ID is message.Empty until the node is ready.
func (c *Core) Me() message.Node { return c.me }

// IsScheduler reports whether this is the scheduler's core.
func (c *Core) IsScheduler() bool { return c.cfg.Role == message.RoleScheduler }

func (c *Core) heartbeats() bool { return c.cfg.HeartbeatInterval > 0 }

func (c *Core) nextTS() int32 {
	if c.cfg.NextTimestamp != nil {
		return c.cfg.NextTimestamp()
	}
	ts := c.ts
	c.ts++
	return ts
}

// out collects the outputs of one call.
type out []Output

func (o *out) send(m *message.Message) { *o = append(*o, Output{Kind: Send, Msg: m}) }

func (o *out) notify(e Event) { *o = append(*o, Output{Kind: Notify, Event: e}) }

// connect asks for a connection to n and starts watching it come up.
func (c *Core) connect(o *out, n message.Node, now time.Time) {
	ident := ""
	if c.me.ID != empty {
		ident = Identity(int(c.me.ID))
	}
	*o = append(*o, Output{Kind: Connect, Node: n, Identity: ident})
	if p := c.peers[int(n.ID)]; p != nil {
		p.connUp, p.everUp, p.downSince = false, false, now
	}
}

// Identity returns the socket identity of node id: "ps<id>".
func Identity(id int) string { return "ps" + strconv.Itoa(id) }

// Step handles a received control message. The van has set
// msg.Meta.Sender from the sender's identity.
func (c *Core) Step(msg *message.Message, now time.Time) []Output {
	if c.phase == PhaseIdle {
		return nil
	}
	var o out
	switch msg.Meta.Control.Cmd {
	case message.CmdAddNode:
		if c.IsScheduler() {
			c.register(&o, msg, now)
		} else {
			c.nodeList(&o, msg, now)
		}
	case message.CmdBarrier:
		c.barrier(&o, msg, now)
	case message.CmdHeartbeat:
		c.heartbeat(&o, msg, now)
	case message.CmdAck, message.CmdTerminate:
		// Resending is off here (ACKs need no answer); the van handles
		// its own TERMINATE.
	default:
		c.log.Warn().Str("msg", msg.String()).Msg("dropping a control message of unknown type")
	}
	return o
}
