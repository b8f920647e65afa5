package postoffice

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/customer"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/metrics"
	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/control"
)

// maxPending and maxPendingBytes bound the messages held for customers that
// do not exist yet, in number and in bytes of data.
const (
	maxPending      = 100000
	maxPendingBytes = 32 << 20
)

// DefaultRecoveryWait is how long the scheduler waits for a dead node's
// replacement when Config.RecoveryWait is zero.
const DefaultRecoveryWait = 5 * time.Second

// ErrNotStarted is returned by calls that need a started node.
var ErrNotStarted = errors.New("postoffice: not started")

// Option configures a Postoffice.
type Option func(*options)

type options struct {
	transport van.Transport
	logger    *zerolog.Logger
	clock     van.Clock
}

// WithTransport makes the node use t instead of a ZeroMQ transport.
func WithTransport(t van.Transport) Option { return func(o *options) { o.transport = t } }

// WithClock makes the node's protocol timers (heartbeats, failure
// detection, resends) run on c instead of the system clock: tests pass a
// van.FakeClock.
func WithClock(c van.Clock) Option { return func(o *options) { o.clock = c } }

// WithLogger sets the logger; by default logs go to stderr at the level
// Config.Verbose asks for.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.logger = &l } }

// Postoffice is one node of a job.
type Postoffice struct {
	cfg Config
	van *van.Van
	log zerolog.Logger

	mu        sync.Mutex // guards customers, pending and exitCbs
	customers map[[2]int]*customer.Customer
	// custView is a copy of customers, replaced under mu at each change,
	// for the receive loop to look customers up without the lock.
	custView atomic.Pointer[map[[2]int]*customer.Customer]
	pending  map[[2]int][]*message.Message
	npending int
	pendingB int // bytes of data in pending
	dropLog  zerolog.Logger
	exitCbs  []func()

	barrierMu sync.Mutex    // guards barrierCh
	barrierCh chan struct{} // closed by the next barrier release

	ranges   []Range
	groupsMu sync.Mutex    // guards groups
	groups   map[int][]int // the groups' members, made when first asked for

	managed managedState // see managed.go

	finalizeOnce sync.Once

	metrics   *metrics.Metrics // nil when off
	metricSrv *metrics.Server
}

// New creates a node for cfg. It does not touch the network until Start.
func New(cfg Config, opts ...Option) (*Postoffice, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	var log zerolog.Logger
	if o.logger != nil {
		log = *o.logger
	} else {
		log = DefaultLogger(cfg.Verbose)
	}
	log = log.With().Str("role", cfg.Role.String()).Logger()
	ids := &nodeIDHook{}
	log = log.Hook(ids)
	p := &Postoffice{
		cfg:       cfg,
		log:       log,
		dropLog:   van.RateLimited(log),
		customers: make(map[[2]int]*customer.Customer),
		pending:   make(map[[2]int][]*message.Message),
		barrierCh: make(chan struct{}),
		ranges:    KeyRanges(cfg.NumServers),
		groups:    make(map[int][]int),
	}
	p.managed.init()
	if cfg.MetricsAddr != "" {
		p.metrics = metrics.New()
		p.metrics.GaugeFunc("receive_queue_messages", "Messages waiting in the node's customers' receive queues.", func() float64 {
			n := 0
			for _, c := range p.allCustomers() {
				n += c.QueueLen()
			}
			return float64(n)
		})
		p.metrics.GaugeFunc("requests_in_flight", "Requests of the node's customers waiting for responses.", func() float64 {
			n := 0
			for _, c := range p.allCustomers() {
				n += c.Tracker().Len()
			}
			return float64(n)
		})
		p.metrics.GaugeFunc("held_messages", "Messages held for customers that do not exist yet.", func() float64 { return float64(p.HeldMessages()) })
		srv, err := metrics.Serve(cfg.MetricsAddr, p.metrics)
		if err != nil {
			return nil, err
		}
		p.metricSrv = srv
	}
	tr := o.transport
	if tr == nil {
		t, err := newTransport(cfg, log)
		if err != nil {
			p.closeMetrics()
			return nil, err
		}
		tr = t
	}
	host := cfg.Host
	if cfg.Role == message.RoleScheduler {
		host = cfg.SchedulerHost
	}
	recoveryWait := cfg.RecoveryWait
	switch {
	case recoveryWait == 0:
		recoveryWait = DefaultRecoveryWait
	case recoveryWait < 0:
		recoveryWait = 0
	}
	v, err := van.New(van.Config{
		Config: control.Config{
			Role:               cfg.Role,
			NumServers:         cfg.NumServers,
			NumWorkers:         cfg.NumWorkers,
			SchedulerHost:      cfg.SchedulerHost,
			SchedulerPort:      cfg.SchedulerPort,
			Host:               host,
			Port:               cfg.Port,
			HeartbeatInterval:  cfg.HeartbeatInterval,
			HeartbeatTimeout:   cfg.HeartbeatTimeout,
			Resend:             cfg.Resend,
			ConnectTimeout:     cfg.ConnectTimeout,
			RecoveryWait:       recoveryWait,
			Managed:            cfg.Managed(),
			Replicas:           cfg.Replicas,
			CheckpointInterval: cfg.CheckpointInterval,
		},
		Resending: control.ResendConfig{
			Timeout:  cfg.ResendTimeout,
			GiveUp:   cfg.ResendGiveUp,
			MaxRetry: cfg.ResendMaxRetry,
		},
		BindRetries: 40,
		DropRate:    cfg.DropRate,
		SetRankEnv:  cfg.SetRankEnv,
		Clock:       o.clock,
		Metrics:     p.metrics,
	}, tr, (*handler)(p), log)
	if err != nil {
		tr.Close()
		p.closeMetrics()
		return nil, err
	}
	p.van = v
	ids.van.Store(v)
	return p, nil
}

// Metrics returns the node's metrics, or nil when they are off.
func (p *Postoffice) Metrics() *metrics.Metrics { return p.metrics }

// MetricsAddr returns the address the node serves its metrics at, or "".
func (p *Postoffice) MetricsAddr() string {
	if p.metricSrv == nil {
		return ""
	}
	return p.metricSrv.Addr()
}

func (p *Postoffice) closeMetrics() {
	if p.metricSrv != nil {
		p.metricSrv.Close()
	}
}

// nodeIDHook adds the node's id to every log line once it has one, so that
// the lines of the nodes of a job can be told apart and put in order.
type nodeIDHook struct {
	van atomic.Pointer[van.Van]
}

// Run implements zerolog.Hook.
func (h *nodeIDHook) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	if v := h.van.Load(); v != nil {
		if id := v.MyNode().ID; id != message.Empty {
			e.Int32("id", id)
		}
	}
}

// DefaultLogger returns a logger to stderr: warnings at verbose 0, progress
// at 1, every message at 2 and above.
func DefaultLogger(verbose int) zerolog.Logger {
	level := zerolog.WarnLevel
	switch {
	case verbose >= 2:
		level = zerolog.TraceLevel
	case verbose == 1:
		level = zerolog.InfoLevel
	}
	w := zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000", NoColor: !isTerminal(os.Stderr)}
	return zerolog.New(w).Level(level).Hook(timeHook{})
}

// timeHook stamps each line with the time to the nanosecond (zerolog's
// Timestamp follows the process-wide TimeFieldFormat, by default to the
// second); the console writer prints it to the millisecond.
type timeHook struct{}

// Run implements zerolog.Hook.
func (timeHook) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().Format(time.RFC3339Nano))
}

// isTerminal reports whether f is a terminal: log colours only go there.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Config returns the node's configuration.
func (p *Postoffice) Config() Config { return p.cfg }

// Van returns the node's van.
func (p *Postoffice) Van() *van.Van { return p.van }

// Logger returns the node's logger.
func (p *Postoffice) Logger() zerolog.Logger { return p.log }

// Start joins the job for customerID and, when doBarrier is set, waits until
// every node has joined (a node that replaces a dead one skips that barrier). A process with several customers calls Start once
// for each. Config.StartTimeout, when set, bounds the wait.
func (p *Postoffice) Start(ctx context.Context, customerID int, doBarrier bool) error {
	if p.cfg.StartTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.StartTimeout)
		defer cancel()
	}
	if err := p.van.Start(ctx, customerID); err != nil {
		return err
	}
	if err := p.startManaged(ctx); err != nil {
		return err
	}
	if doBarrier && !p.IsRecovery() { // the others are past their start barrier
		if err := p.Barrier(ctx, customerID, message.AllGroup); err != nil {
			return err
		}
		return p.cppStartGrace(ctx)
	}
	return nil
}

// cppStartGrace waits Config.CppStartGrace at a server or worker whose
// scheduler is C++ ps-lite's. That scheduler releases the start barrier to
// the workers first and to the servers after; a C++ server that gets a
// request before its own release blocks its one receive thread waiting for
// the customer it creates only once released, and aborts after 5 s. Go
// workers, quick to push once released, lost that race in a third of such
// jobs here (docs/LIBRARY.md). No message says when a C++ server is
// released, so the grace is a wait; a pslite scheduler releases servers
// first, and nodes under it do not wait.
func (p *Postoffice) cppStartGrace(ctx context.Context) error {
	d := p.cfg.CppStartGrace
	if d == 0 {
		d = DefaultCppStartGrace
	}
	if d < 0 || !p.van.ForeignScheduler() {
		return nil
	}
	p.log.Info().Dur("grace", d).Msg("the scheduler is C++ ps-lite's: waiting for it to release the servers")
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.van.Failed():
		return p.van.Err()
	}
}

// Finalize leaves the job for customerID, after a barrier of all nodes when
// doBarrier is set. Customer 0's Finalize stops the node: it stops the van,
// runs the exit callbacks and stops the remaining customers. It never
// hangs: the barrier ends with the job's failure, if the job fails, and
// with ctx. It returns the failure of the job (naming the node lost), if
// any.
func (p *Postoffice) Finalize(ctx context.Context, customerID int, doBarrier bool) error {
	// Customers still holding their messages (an app that never set a
	// handle) answer now: a peer may wait on them before its barrier.
	for _, c := range p.allCustomers() {
		c.Resume()
	}
	var err error
	if doBarrier && p.van.IsReady() {
		if customerID == 0 {
			p.van.Finalizing()
		}
		err = p.Barrier(ctx, customerID, message.AllGroup)
	}
	if customerID == 0 {
		p.finalizeOnce.Do(func() {
			p.managed.disk.stop()
			p.van.Leave()
			if e := p.van.Stop(); e != nil && err == nil {
				err = e
			}
			p.mu.Lock()
			cbs := p.exitCbs
			p.exitCbs = nil
			p.mu.Unlock()
			for i := len(cbs) - 1; i >= 0; i-- {
				cbs[i]()
			}
			for _, c := range p.allCustomers() {
				c.Tracker().FailAll(van.ErrStopped)
				c.Stop()
			}
			p.closeMetrics()
		})
	}
	if err == nil {
		err = p.van.Err()
	}
	return err
}

// RegisterExitCallback adds a function that customer 0's Finalize runs after
// the node has stopped; callbacks run in reverse order of registration.
func (p *Postoffice) RegisterExitCallback(cb func()) {
	p.mu.Lock()
	p.exitCbs = append(p.exitCbs, cb)
	p.mu.Unlock()
}

// Barrier blocks until every node of group has called Barrier. The node must
// belong to the group. It returns the job's failure if the job fails first
// (a node lost and not replaced), and ctx's error when ctx is done.
func (p *Postoffice) Barrier(ctx context.Context, customerID, group int) error {
	members, err := p.GetNodeIDs(group)
	if err != nil {
		return err
	}
	if len(members) <= 1 {
		return nil
	}
	if err := p.van.Err(); err != nil {
		return err
	}
	if !p.van.IsReady() {
		return ErrNotStarted
	}
	if !message.InGroup(p.cfg.Role, group) {
		return fmt.Errorf("postoffice: a %s is not in barrier group %d", p.cfg.Role, group)
	}
	p.barrierMu.Lock()
	ch := p.barrierCh
	p.barrierMu.Unlock()
	start := time.Now()
	if err := p.van.Barrier(customerID, group); err != nil {
		return fmt.Errorf("postoffice: barrier: %w", err)
	}
	select {
	case <-ch:
		p.metrics.BarrierWait(group, time.Since(start))
		return nil
	case <-p.van.Failed():
		return fmt.Errorf("postoffice: barrier on group %d: %w", group, p.van.Err())
	case <-ctx.Done():
		return fmt.Errorf("postoffice: barrier on group %d: %w", group, ctx.Err())
	}
}

// Err returns why the job failed (an error wrapping van.ErrJobFailed that
// names the node lost), or nil. A program blocked somewhere else than in
// Wait, Barrier or Finalize can watch Failed.
func (p *Postoffice) Err() error { return p.van.Err() }

// Failed returns a channel closed when the job fails.
func (p *Postoffice) Failed() <-chan struct{} { return p.van.Failed() }

// GetNodeIDs returns the ids of the nodes a group or node id addresses.
// A group's list is made when first asked for, and kept: the caller must
// not change it.
func (p *Postoffice) GetNodeIDs(id int) ([]int, error) {
	if !message.IsGroup(id) {
		return message.GroupMembers(id, p.cfg.NumServers, p.cfg.NumWorkers)
	}
	p.groupsMu.Lock()
	defer p.groupsMu.Unlock()
	if g, ok := p.groups[id]; ok {
		return g, nil
	}
	g, err := message.GroupMembers(id, p.cfg.NumServers, p.cfg.NumWorkers)
	if err == nil {
		p.groups[id] = g
	}
	return g, err
}

// ServerKeyRanges returns the key range of each server, by rank.
func (p *Postoffice) ServerKeyRanges() []Range { return p.ranges }

// NumWorkers returns the number of workers in the job.
func (p *Postoffice) NumWorkers() int { return p.cfg.NumWorkers }

// NumServers returns the number of servers in the job.
func (p *Postoffice) NumServers() int { return p.cfg.NumServers }

// Role returns this node's role.
func (p *Postoffice) Role() message.Role { return p.cfg.Role }

// IsWorker reports whether this node is a worker.
func (p *Postoffice) IsWorker() bool { return p.cfg.Role == message.RoleWorker }

// IsServer reports whether this node is a server.
func (p *Postoffice) IsServer() bool { return p.cfg.Role == message.RoleServer }

// IsScheduler reports whether this node is the scheduler.
func (p *Postoffice) IsScheduler() bool { return p.cfg.Role == message.RoleScheduler }

// MyID returns this node's id (message.Empty before Start).
func (p *Postoffice) MyID() int { return int(p.van.MyNode().ID) }

// MyRank returns this node's rank among the nodes of its role.
func (p *Postoffice) MyRank() int { return message.IDToRank(p.MyID()) }

// IsRecovery reports whether this node replaced a dead node.
func (p *Postoffice) IsRecovery() bool { return p.van.MyNode().IsRecovery }

// DeadNodes returns the nodes not heard from within timeout or found dead
// (see van.DeadNodes).
func (p *Postoffice) DeadNodes(timeout time.Duration) []int { return p.van.DeadNodes(timeout) }

// Send sends a message through the van.
func (p *Postoffice) Send(msg *message.Message) error {
	_, err := p.van.Send(msg)
	return err
}

// SendRecycled sends a message nothing else refers to (one from
// message.Get, typically) and recycles it (see van.Van.SendRecycled).
func (p *Postoffice) SendRecycled(msg *message.Message) error {
	_, err := p.van.SendRecycled(msg)
	return err
}

// NewCustomer creates and registers the customer (appID, customerID), whose
// goroutine passes each message to h. Messages that arrived for it before
// it existed are delivered first.
func (p *Postoffice) NewCustomer(appID, customerID int, h customer.Handler, opts ...customer.Option) (*customer.Customer, error) {
	key := [2]int{appID, customerID}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.customers[key]; ok {
		return nil, fmt.Errorf("postoffice: customer %d of app %d already exists", customerID, appID)
	}
	opts = append([]customer.Option{customer.WithTimestamps(p.van.NextTimestamp)}, opts...)
	c := customer.New(appID, customerID, h, p.log, opts...)
	p.customers[key] = c
	p.publishCustomersLocked()
	for _, m := range p.pending[key] {
		c.Enqueue(m) // not handled here: p.mu is held
		p.pendingB -= dataBytes(m)
	}
	p.npending -= len(p.pending[key])
	delete(p.pending, key)
	return c, nil
}

// dataBytes returns the size of msg's data frames.
func dataBytes(msg *message.Message) int {
	n := 0
	for _, f := range msg.Data {
		n += len(f)
	}
	return n
}

// Idle reports whether every customer of the node has nothing to do (see
// customer.Customer.Idle): tests on a fake clock wait for it, with the
// network settled, before moving time.
func (p *Postoffice) Idle() bool {
	for _, c := range p.allCustomers() {
		if !c.Idle() {
			return false
		}
	}
	return true
}

// HeldMessages returns how many received messages wait for customers that
// do not exist yet.
func (p *Postoffice) HeldMessages() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.npending
}

// RemoveCustomer unregisters c and stops it.
func (p *Postoffice) RemoveCustomer(c *customer.Customer) {
	key := [2]int{c.AppID(), c.CustomerID()}
	p.mu.Lock()
	if p.customers[key] == c {
		delete(p.customers, key)
		p.publishCustomersLocked()
	}
	p.mu.Unlock()
	c.Stop()
}

// Customer returns the registered customer, or nil.
func (p *Postoffice) Customer(appID, customerID int) *customer.Customer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.customers[[2]int{appID, customerID}]
}

// publishCustomersLocked publishes a copy of customers; mu is held.
func (p *Postoffice) publishCustomersLocked() {
	view := maps.Clone(p.customers)
	p.custView.Store(&view)
}

// handler is the postoffice seen from the van.
type handler Postoffice

func (h *handler) HandleData(msg *message.Message) {
	p := (*Postoffice)(h)
	cid := int(msg.Meta.AppID)
	if p.cfg.Role == message.RoleWorker {
		cid = int(msg.Meta.CustomerID)
	}
	key := [2]int{int(msg.Meta.AppID), cid}
	var c *customer.Customer
	if view := p.custView.Load(); view != nil {
		c = (*view)[key]
	}
	if c == nil || !c.TakesLent() {
		// Kept, or for a customer that copies nothing itself. Outside the
		// lock: copying a large frame takes a while.
		msg.Own()
	}
	if c == nil {
		p.mu.Lock()
		if c = p.customers[key]; c == nil { // still missing: hold it
			size := dataBytes(msg)
			if p.npending >= maxPending || p.pendingB+size > maxPendingBytes {
				p.mu.Unlock()
				p.dropLog.Warn().Str("from", message.DescribeID(int(msg.Meta.Sender))).Str("msg", msg.String()).
					Int("held", maxPending).Int("held_bytes", maxPendingBytes).
					Msg("dropping a message for a customer that does not exist: too much is held for missing customers already")
				return
			}
			p.pending[key] = append(p.pending[key], msg)
			p.npending++
			p.pendingB += size
			p.mu.Unlock()
			p.log.Debug().Int("app", key[0]).Int("customer", key[1]).Msg("holding a message until its customer exists")
			return
		}
		p.mu.Unlock()
	}
	if !c.Accept(msg) {
		msg.Release()
		p.log.Warn().Str("msg", msg.String()).Msg("dropping a message for a stopped customer")
	}
}

// TakesLent implements van.LendingHandler: data messages go to customers,
// which give lent ones back after their handler ran, or copy them first
// when the customer does not take lent messages.
func (h *handler) TakesLent() {}

// HandleSendFailure fails the request a lost message belonged to, so that
// its Wait returns the error.
func (h *handler) HandleSendFailure(msg *message.Message, err error) {
	p := (*Postoffice)(h)
	if msg.Meta.IsControl() || !msg.Meta.Request {
		return // a lost response or control message: its waiter is elsewhere
	}
	if c := p.Customer(int(msg.Meta.AppID), int(msg.Meta.CustomerID)); c != nil {
		c.Tracker().Fail(int(msg.Meta.Timestamp), err)
	}
}

// HandleFailure fails every request waiting anywhere in the node: the job
// failed and nothing will answer them.
func (h *handler) HandleFailure(err error) {
	p := (*Postoffice)(h)
	for _, c := range p.allCustomers() {
		c.Tracker().FailAll(err)
	}
}

func (p *Postoffice) allCustomers() []*customer.Customer {
	p.mu.Lock()
	defer p.mu.Unlock()
	custs := make([]*customer.Customer, 0, len(p.customers))
	for _, c := range p.customers {
		custs = append(custs, c)
	}
	return custs
}

// HandleNodeDown tells every customer that node id is gone.
func (h *handler) HandleNodeDown(id int) {
	p := (*Postoffice)(h)
	for _, c := range p.allCustomers() {
		c.NodeDown(id)
	}
}

func (h *handler) HandleBarrierDone(*message.Message) {
	p := (*Postoffice)(h)
	p.barrierMu.Lock()
	close(p.barrierCh)
	p.barrierCh = make(chan struct{})
	p.barrierMu.Unlock()
}
