package van

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/metrics"
	"github.com/gopslite/pslite/replica"
	"github.com/gopslite/pslite/van/control"
)

// ErrNodeDown is returned when sending to a node whose connection dropped
// (with resending off) and has not come back.
var ErrNodeDown = errors.New("van: connection to node lost")

// ErrStopped is returned by calls on a van that has stopped.
var ErrStopped = errors.New("van: stopped")

// ErrJobFailed is wrapped by the errors of a job that failed because of a
// fault (a node lost and not replaced, the scheduler lost): see
// control.NodeLostError and control.AbortError.
var ErrJobFailed = control.ErrJobFailed

// Config describes the node a van runs and the job it belongs to: the
// control core's Config (the van sets its ConnEvents, NextTimestamp and
// Log, and a scheduler's Host and Port, itself), and what the van alone
// uses.
type Config struct {
	control.Config
	// Resending configures PS_RESEND's resender (its Forget is the van's
	// own) once the node is ready, when Config.Resend is set.
	Resending control.ResendConfig
	// BindRetries is how many random ports a non-scheduler node tries when
	// Port is taken or 0.
	BindRetries int
	// Metrics, if not nil, counts what the van does.
	Metrics *metrics.Metrics
	// DropRate is the percentage of received messages dropped once the node
	// is ready (PS_DROP_MSG, for tests). A positive rate turns Resend on.
	DropRate int
	// SetRankEnv sets DMLC_RANK in the process environment once the node
	// knows its rank, as C++ ps-lite does.
	SetRankEnv bool
	// Clock runs the protocol's timers; nil is the system clock.
	Clock Clock
}

// LendingHandler is a Handler whose HandleData takes messages with lent
// frames (see Lender and message.Message.Lend) and gives each back, with
// msg.Release once done with it or msg.Own to keep it.
type LendingHandler interface {
	Handler
	// TakesLent marks the handler; it is never called.
	TakesLent()
}

// Handler receives what the van does not handle itself.
type Handler interface {
	// HandleData is called, on the receive goroutine, for each data message.
	// It may take its time: a call that lasts longer than HandlerStall
	// hands the receive loop to a new goroutine, and the call's goroutine
	// ends when it returns.
	// A LendingHandler may be given messages with lent frames; any other
	// handler gets messages of their own.
	HandleData(msg *message.Message)
	// HandleBarrierDone is called when the scheduler releases a barrier.
	HandleBarrierDone(msg *message.Message)
	// HandleSendFailure is called when a message is given up on without an
	// acknowledgement: PS_RESEND_GIVEUP after its first send, or after
	// PS_RESEND_MAX_RETRY resends when that is set.
	HandleSendFailure(msg *message.Message, err error)
	// HandleNodeDown is called when the connection to a server or worker
	// drops while resending is off: nothing sent to it will be answered.
	HandleNodeDown(id int)
	// HandleFailure is called once when the job fails (err wraps
	// ErrJobFailed and names the node lost): nothing will complete any
	// more.
	HandleFailure(err error)
	// HandleEvent is called for the control protocol's events the layers
	// above act on: a new view (control.EventView), a snapshot to cut or
	// complete (EventCut, EventCommitted), a node replaced
	// (EventNodeReplaced). It must not block.
	HandleEvent(e control.Event)
}

// HandoverWindow is how long after a node's replacement the receiving
// socket lets a new connection take over the identity of an open one: long
// enough for the replacement to connect to everyone.
const HandoverWindow = 30 * time.Second

// HandlerStall is how long Handler.HandleData may run on the receive
// goroutine before a new goroutine takes over receiving: short enough that
// ACKs, heartbeats and other customers' messages barely notice a slow or
// blocked handler, long enough that ordinary handlers never trigger it.
const HandlerStall = 20 * time.Millisecond

// tickEvery is how often the control protocol is ticked: the resolution
// of heartbeats and failure detection.
const tickEvery = 100 * time.Millisecond

// Van is one node's endpoint: it runs the control protocol (a
// control.Core) over a Transport and hands data messages to a Handler.
type Van struct {
	cfg     Config
	tr      Transport
	handler Handler
	log     zerolog.Logger
	dropLog zerolog.Logger // log, rate-limited: for messages dropped as bad or foreign
	metrics *metrics.Metrics
	clock   Clock

	// ctx is cancelled when the van stops or the job fails; sends waiting
	// for room give up then.
	ctx    context.Context
	cancel context.CancelFunc

	startMu  sync.Mutex // serialises Start and Stop
	started  bool
	stopped  bool
	stopping atomic.Bool
	ready    chan struct{} // closed once the node has its id and peers
	isReady  atomic.Bool
	failed   chan struct{} // closed when the job fails
	failErr  atomic.Pointer[error]
	recvDone chan struct{} // closed when the receive loop exits
	// inHandler is odd while the receive goroutine runs HandleData. The
	// watchdog hands the loop to a new goroutine by moving it on to even;
	// see dispatch, watchHandlers and loopState, the state that moves.
	inHandler atomic.Uint64
	// watchParked is set while the watchdog waits on watchWake for a
	// handler call (see parkWatchdog).
	watchParked atomic.Bool
	watchWake   chan struct{}
	stopTicker  func()
	res         atomic.Pointer[resendDriver]

	timestamp atomic.Int32 // timestamps of this process's requests and control messages

	// ctlMu guards core. It is held while the core is stepped and its
	// connects and sends are carried out (which never wait), never while
	// the handler is called.
	ctlMu sync.Mutex
	core  *control.Core
	// dialed is, per node id, how this node last connected to it (guarded
	// by ctlMu), so that it can connect again (see resendDriver.redial);
	// kept with resending on only.
	dialed map[int]dial
	// recoveredUntil (Unix ns on the van's clock) is, at a node that
	// replaced a dead one, when its peers stop letting its connections
	// take over its predecessor's identity (HandoverWindow after it
	// joined); 0 elsewhere.
	recoveredUntil atomic.Int64

	myNode atomic.Pointer[message.Node]
	view   atomic.Pointer[replica.View]
	// pslScheduler is set at a server or worker once its scheduler has
	// told it the process incarnations: a pslite scheduler does so before
	// it sends the node list, C++ ps-lite's never (see ForeignScheduler).
	pslScheduler atomic.Bool

	dropRate atomic.Int32 // percent of received messages to drop once ready
	batcher  Batcher      // tr, when it is one; else nil
	lender   Lender       // tr, when it is one; else nil
	loop     loopState    // owned by the goroutine running the receive loop
	downMu   sync.Mutex   // guards down
	down     map[int]bool // nodes whose connection dropped (resending off)
	ndown    atomic.Int32 // len(down), for a send to skip the lock while no node is down

	// handoverUntil (Unix ns) is when the receiving socket stops letting
	// a new connection take over a member's identity, after a replacement;
	// the scheduler's lets it also while replacing is set. handoverOn is
	// whether it does now (see applyHandover).
	handoverUntil atomic.Int64
	handoverOn    atomic.Bool
	replacing     atomic.Bool // the scheduler may replace a node soon

	sendBytes atomic.Int64
	recvBytes atomic.Int64
	// resent counts the messages the resender sent again, and their bytes
	// (part of sendBytes).
	resentMsgs, resentBytes atomic.Int64
}

// New returns a van for the node cfg describes, sending through tr and
// handing data messages to h.
func New(cfg Config, tr Transport, h Handler, log zerolog.Logger) (*Van, error) {
	if tr == nil || h == nil {
		return nil, errors.New("van: nil transport or handler")
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	if cfg.DropRate > 0 && !cfg.Resend {
		// Nothing else recovers a dropped message: its request would wait
		// for ever.
		cfg.Resend = true
		log.Warn().Int("percent", cfg.DropRate).Msg("PS_DROP_MSG drops received messages, which only resending recovers: resending (PS_RESEND) is on")
	}
	host, port := cfg.Host, cfg.Port
	if cfg.Role == message.RoleScheduler {
		host, port = cfg.SchedulerHost, cfg.SchedulerPort
	}
	v := &Van{
		cfg:       cfg,
		tr:        tr,
		handler:   h,
		log:       log,
		dropLog:   RateLimited(log),
		metrics:   cfg.Metrics,
		clock:     cfg.Clock,
		ready:     make(chan struct{}),
		failed:    make(chan struct{}),
		recvDone:  make(chan struct{}),
		watchWake: make(chan struct{}, 1),
		down:      make(map[int]bool),
		loop: loopState{
			rng:     rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)),
			heldIDs: make([]int32, 0, 8),
		},
	}
	v.batcher, _ = tr.(Batcher)
	v.lender, _ = tr.(Lender)
	_, connEvents := tr.(ConnectionReporter)
	ccfg := cfg.Config
	ccfg.Host, ccfg.Port = host, port
	ccfg.ConnEvents = connEvents
	ccfg.NextTimestamp = v.NextTimestamp
	ccfg.Log = log
	core, err := control.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("van: %w", err)
	}
	v.core = core
	me := core.Me()
	v.myNode.Store(&me)
	// Timestamps start anywhere: a process that takes a dead node's id must
	// not repeat its predecessor's recent resend signatures, which its
	// peers remember as seen.
	v.timestamp.Store(v.loop.rng.Int32N(1 << 30))
	v.ctx, v.cancel = context.WithCancel(context.Background())
	if r, ok := tr.(ConnectionReporter); ok {
		r.SetConnectionHandler(v.onConnection)
	}
	v.dropRate.Store(int32(cfg.DropRate))
	return v, nil
}

// RateLimited returns log limited to a burst of 10 lines a second, for
// warnings about input from the network: a flood of bad messages must not
// become a flood of log lines.
func RateLimited(log zerolog.Logger) zerolog.Logger {
	return log.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Second})
}

// MyNode returns this node's description; its ID is Empty until the van is ready.
func (v *Van) MyNode() message.Node { return *v.myNode.Load() }

// ForeignScheduler reports whether this server or worker's scheduler is
// not a pslite scheduler but C++ ps-lite's, as far as the node knows once
// Start has returned: a pslite scheduler tells every node the process
// incarnations ahead of the node list, which C++ ps-lite's never sends.
// It is false at the scheduler.
func (v *Van) ForeignScheduler() bool {
	n := v.myNode.Load()
	return n != nil && n.Role != message.RoleScheduler && !v.pslScheduler.Load()
}

// IsReady reports whether the node has joined the job and not stopped.
func (v *Van) IsReady() bool { return v.isReady.Load() && !v.stopping.Load() }

// Ready returns a channel closed once the node has joined the job.
func (v *Van) Ready() <-chan struct{} { return v.ready }

// Failed returns a channel closed when the job fails; Err says why.
func (v *Van) Failed() <-chan struct{} { return v.failed }

// Err returns why the job failed (an error wrapping ErrJobFailed that names
// the node lost), or nil.
func (v *Van) Err() error {
	if p := v.failErr.Load(); p != nil {
		return *p
	}
	return nil
}

// NextTimestamp returns a fresh timestamp. Every request of every customer
// of this process and every control message draws from it, so that no two
// messages of the process share a resend signature.
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
// scheduler and starts receiving; every call by a non-scheduler registers
// customerID with the scheduler (a process with several customers
// registers each). It returns once the node has its id and its peers, or
// with ctx's error.
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

	if v.cfg.Role != message.RoleScheduler && !v.isReady.Load() {
		v.step(func(c *control.Core, now time.Time) []control.Output { return c.Register(customerID, now) })
	}
	select {
	case <-v.ready:
		return nil
	case <-v.failed:
		return v.Err()
	case <-v.recvDone:
		return ErrStopped
	case <-ctx.Done():
		if v.cfg.Role == message.RoleScheduler {
			v.ctlMu.Lock()
			status := v.core.RegistrationStatus()
			v.ctlMu.Unlock()
			return fmt.Errorf("van: the job did not fill up: %s: %w", status, ctx.Err())
		}
		return fmt.Errorf("van: %s at %s:%d did not join the job (scheduler %s:%d unreachable, or the job has not filled up: %d servers, %d workers expected): %w",
			v.cfg.Role, v.cfg.Host, v.MyNode().Port, v.cfg.SchedulerHost, v.cfg.SchedulerPort, v.cfg.NumServers, v.cfg.NumWorkers, ctx.Err())
	}
}

func (v *Van) init() error {
	isSched := v.cfg.Role == message.RoleScheduler
	me := v.MyNode()
	retries := v.cfg.BindRetries
	if isSched {
		retries = 0
	}
	port, err := v.tr.Bind(me.Hostname, int(me.Port), retries)
	if err != nil {
		return err
	}
	v.ctlMu.Lock()
	v.core.SetPort(port)
	me = v.core.Me()
	v.myNode.Store(&me)
	v.ctlMu.Unlock()
	v.log.Info().Str("node", me.String()).Msg("bound")
	v.step(func(c *control.Core, now time.Time) []control.Output { return c.Start(now) })
	go v.receiveLoop()
	go v.watchHandlers()
	v.stopTicker = ticker(v.clock, tickEvery, v.tick)
	return nil
}

// Stop stops the van: the receive loop and the timers end and every
// socket is closed. It does not hang: a receive loop that does not see its
// own TERMINATE stops at its next receive timeout, and with resending on,
// unacknowledged messages get a bounded time to be acknowledged (none
// once the job has failed).
func (v *Van) Stop() error {
	v.startMu.Lock()
	defer v.startMu.Unlock()
	if v.stopped {
		return nil
	}
	v.stopped = true
	if !v.started {
		v.cancel()
		return v.tr.Close()
	}
	v.ctlMu.Lock()
	done := v.core.PassedFinalBarrier() && v.cfg.Role != message.RoleScheduler
	v.ctlMu.Unlock()
	if r := v.res.Load(); r != nil && v.Err() == nil && !closed(v.recvDone) && !done {
		// Let unacknowledged messages (say, the scheduler's last barrier
		// releases) be resent a few times before the receive loop stops.
		// Not when no ACK can come (the transport is gone), nor at a
		// server or worker past its final barrier: every node got there,
		// so what it sent before has served its purpose.
		r.drain(r.r.Timeout()*9, v.recvDone)
	}
	if v.cfg.Role == message.RoleScheduler && v.Err() == nil {
		v.awaitMembersGone(FinalDrain)
	}
	v.stopping.Store(true)
	v.cancel()
	me := v.MyNode()
	if me.ID != emptyID {
		msg := message.New()
		msg.Meta.Control.Cmd = message.CmdTerminate
		msg.Meta.Recver = me.ID
		msg.Meta.CustomerID = 0
		if _, err := v.trySend(msg); err != nil {
			v.log.Debug().Err(err).Msg("could not send TERMINATE to self; waiting for the receive timeout")
		}
	}
	<-v.recvDone
	v.stopTicker()
	if r := v.res.Load(); r != nil {
		r.close()
	}
	v.log.Info().Str("node", me.String()).Int64("sent_bytes", v.sendBytes.Load()).Int64("recv_bytes", v.recvBytes.Load()).
		Int64("resent_messages", v.resentMsgs.Load()).Int64("resent_bytes", v.resentBytes.Load()).Msg("stopped")
	return v.tr.Close()
}

// FinalDrain bounds how long a scheduler past the final barrier keeps its
// connections open for the servers and workers to leave: closing them
// sooner can cut a release still on its way over a lossy link (TCP
// retransmitting it), and its node would take the closed connection for
// the scheduler's death. Over links losing 10% of packets each way TCP
// delayed 73 of 6,393 small messages by more than 10 s and the slowest by
// 32 s, and a 10 s drain once ended a 2x2 job's scheduler before a
// server's release arrived (burner run 30). In a job that ends well every
// node leaves at once, and the scheduler with it.
const FinalDrain = 60 * time.Second

// awaitMembersGone waits, at a scheduler past its final barrier, until
// every server and worker has closed its connection (they exit once
// released), limit has passed or the receive loop has stopped.
func (v *Van) awaitMembersGone(limit time.Duration) {
	v.ctlMu.Lock()
	passed := v.core.PassedFinalBarrier()
	v.ctlMu.Unlock()
	if !passed {
		return
	}
	deadline := time.Now().Add(limit)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for time.Now().Before(deadline) {
		v.ctlMu.Lock()
		left := len(v.core.ConnectedMembers())
		v.ctlMu.Unlock()
		if left == 0 {
			return
		}
		select {
		case <-poll.C:
		case <-v.recvDone:
			return
		}
	}
	v.log.Warn().Dur("waited", limit).Msg("stopping with servers or workers still connected after the final barrier")
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// SetDropRate changes the percentage of received messages dropped once the
// node is ready (PS_DROP_MSG), for tests. Unlike Config.DropRate it does not
// turn resending on: without it, a dropped request or answer is never
// recovered.
func (v *Van) SetDropRate(percent int) { v.dropRate.Store(int32(min(max(percent, 0), 100))) }

// View returns the view of a managed job this node follows (nil before
// the first, and in an unmanaged job); at the scheduler, a copy of the
// view it makes.
func (v *Van) View() *replica.View {
	if v.cfg.Role == message.RoleScheduler {
		v.ctlMu.Lock()
		defer v.ctlMu.Unlock()
		if cv := v.core.View(); cv != nil {
			return cv.Clone()
		}
		return nil
	}
	return v.view.Load()
}

// Abort fails the job with err, a fault found above the van: every node
// stops, naming it (see control.Core.Abort). err should wrap ErrJobFailed.
func (v *Van) Abort(err error) {
	v.step(func(c *control.Core, now time.Time) []control.Output { return c.Abort(err) })
}

// Report sends a notice of kind with text to the scheduler (a server's
// hello or report, say).
func (v *Van) Report(kind control.NoticeKind, text string) {
	v.step(func(c *control.Core, now time.Time) []control.Output { return c.Notice(message.Scheduler, kind, text) })
}

// Checkpoint asks the scheduler for a snapshot of every server's store,
// with meta stored next to it; the answer comes as an EventCommitted with
// RequestID id.
func (v *Van) Checkpoint(id int32, meta string) {
	v.step(func(c *control.Core, now time.Time) []control.Output { return c.Checkpoint(id, meta) })
}

// CancelResend forgets the request of app appID with timestamp ts for key
// range rg (-1: untagged) sent to node to, when resending is on: it went
// elsewhere instead.
func (v *Van) CancelResend(appID, to, ts, rg int) {
	if r := v.res.Load(); r != nil {
		r.r.Cancel(int32(appID), v.MyNode().ID, int32(to), int32(ts), rg)
	}
}

// Stats returns the bytes sent and received so far.
func (v *Van) Stats() (sent, received int64) { return v.sendBytes.Load(), v.recvBytes.Load() }

// ResendStats returns the messages the resender sent again so far
// (PS_RESEND), and their bytes, which Stats counts among those sent.
func (v *Van) ResendStats() (messages, bytes int64) {
	return v.resentMsgs.Load(), v.resentBytes.Load()
}
