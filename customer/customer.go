package customer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
)

// Handler processes one received message. Messages reach it one at a time,
// in queue order: on the customer's goroutine, or, when the customer is idle
// as a message arrives, on the goroutine that accepted it (see Accept).
type Handler func(msg *message.Message)

// Customer receives the messages of one (app id, customer id) pair and
// tracks the responses to the requests it sends.
type Customer struct {
	appID      int
	customerID int
	handle     Handler
	queue      *Queue
	tracker    *Tracker
	log        zerolog.Logger
	dropLog    zerolog.Logger // log, rate-limited, for dropped messages
	done       chan struct{}  // closed when the receive goroutine exits
	stopOnce   sync.Once
	resume     chan struct{} // closed when a paused customer may start handling
	resumeOnce sync.Once
	nodeDown   atomic.Pointer[func(id int)]
	filter     atomic.Pointer[func(msg *message.Message) error]
	resumed    atomic.Bool // handling has started (see StartPaused)
	takesLent  atomic.Bool // see SetTakesLent
	recycles   atomic.Bool // see SetRecycles
}

// SetRecycles makes the customer recycle each message once handled
// (message.Message.Recycle): its handler (and filter) promise to keep
// neither the message nor its meta's slices after they return; the data
// frames they may keep. Off by default.
func (c *Customer) SetRecycles(on bool) { c.recycles.Store(on) }

// SetTakesLent lets the customer be given messages whose large frames are
// lent by the transport rather than copied (see message.Message.Lend): its
// handler promises to keep no part of a message's data after it returns,
// and the customer gives the frames back then. Off by default.
func (c *Customer) SetTakesLent(on bool) { c.takesLent.Store(on) }

// TakesLent reports whether the customer takes lent messages.
func (c *Customer) TakesLent() bool { return c.takesLent.Load() }

// SetNodeDownHandler sets a function told when a node this customer may be
// waiting on is gone (see postoffice).
func (c *Customer) SetNodeDownHandler(f func(id int)) { c.nodeDown.Store(&f) }

// NodeDown tells the customer's node-down handler, if any, that node id is gone.
func (c *Customer) NodeDown(id int) {
	if f := c.nodeDown.Load(); f != nil {
		(*f)(id)
	}
}

// SetFilter sets a check run on every message before it is handled: a
// message it returns an error for is dropped (with a rate-limited warning
// giving the error) and, if a response, not counted. Applications use it to
// accept requests only from the nodes that may send them and responses only
// from the nodes a request went to.
func (c *Customer) SetFilter(f func(msg *message.Message) error) { c.filter.Store(&f) }

// Option configures a Customer.
type Option func(*Customer)

// StartPaused makes the customer queue messages without handling them until
// Resume is called, e.g. until the application has installed its handlers.
func StartPaused() Option {
	return func(c *Customer) { c.resume = make(chan struct{}) }
}

// WithTimestamps makes the customer's requests draw their timestamps from
// source, shared by the customers of a process (see NewSharedTracker).
func WithTimestamps(source func() int32) Option {
	return func(c *Customer) { c.tracker = NewSharedTracker(source) }
}

// New starts a customer that passes every accepted message to handle and
// then, for responses, counts it against its request.
func New(appID, customerID int, handle Handler, log zerolog.Logger, opts ...Option) *Customer {
	c := &Customer{
		appID:      appID,
		customerID: customerID,
		handle:     handle,
		queue:      NewQueue(),
		tracker:    NewTracker(),
		log:        log.With().Int("app", appID).Int("customer", customerID).Logger(),
		done:       make(chan struct{}),
	}
	c.dropLog = c.log.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Second})
	for _, o := range opts {
		o(c)
	}
	if c.resume == nil {
		c.resume = make(chan struct{})
		close(c.resume)
		c.resumeOnce.Do(func() {})
		c.resumed.Store(true)
	}
	go c.receive()
	return c
}

// Resume starts handling messages on a customer created with StartPaused.
func (c *Customer) Resume() { c.resumeOnce.Do(func() { close(c.resume) }) }

// AppID returns the application id.
func (c *Customer) AppID() int { return c.appID }

// CustomerID returns the customer id within the application.
func (c *Customer) CustomerID() int { return c.customerID }

// Idle reports whether the customer has nothing to do: no message or task
// queued, none being handled (tests on a fake clock wait for it before
// moving time).
func (c *Customer) Idle() bool { return c.queue.Idle() }

// QueueLen returns how many received messages wait to be handled.
func (c *Customer) QueueLen() int { return c.queue.Len() }

// Tracker returns the customer's request tracker.
func (c *Customer) Tracker() *Tracker { return c.tracker }

// NewRequest starts tracking a request that expects the given number of
// responses and returns its timestamp.
func (c *Customer) NewRequest(expected int) (int, error) { return c.tracker.NewRequest(expected) }

// WaitRequest blocks until the request has all its responses.
func (c *Customer) WaitRequest(ts int) error { return c.tracker.Wait(ts) }

// WaitRequestContext is WaitRequest that gives up when ctx is done.
func (c *Customer) WaitRequestContext(ctx context.Context, ts int) error {
	return c.tracker.WaitContext(ctx, ts)
}

// NumResponse returns how many responses ts has received so far (0 once it
// has finished or when it is unknown).
func (c *Customer) NumResponse(ts int) int {
	got, _, _ := c.tracker.NumResponse(ts)
	return got
}

// AddResponse counts num responses for ts without a message, e.g. for
// servers a request did not need to be sent to.
func (c *Customer) AddResponse(ts, num int) { c.tracker.AddResponse(ts, num) }

// Accept hands a received message to the customer. When the customer is
// idle (nothing queued, no message being handled, not paused) the message is
// handled at once on the calling goroutine, which saves waking the
// customer's goroutine: on the van's receive goroutine that is one thread
// hand-off less per message. Otherwise it is queued. It reports false once
// the customer has stopped.
func (c *Customer) Accept(msg *message.Message) bool {
	if c.resumed.Load() && c.queue.TryClaim() {
		c.run(msg)
		c.queue.Release()
		return true
	}
	return c.queue.Push(msg)
}

// Enqueue queues a message for the customer's goroutine, never handling it
// on the caller's. It reports false once the customer has stopped.
func (c *Customer) Enqueue(msg *message.Message) bool { return c.queue.Push(msg) }

// Do runs f in the customer's turn, on its goroutine, after the messages
// queued before it (of the same priority or higher): state its handler
// owns can be changed by f without a lock. It never waits, and reports
// false once the customer has stopped.
func (c *Customer) Do(f func()) bool {
	msg := message.New()
	msg.Task = f
	msg.Meta.Request = true
	return c.queue.Push(msg)
}

// Stop ends the receive goroutine after the messages already queued have
// been handled, and waits for it.
func (c *Customer) Stop() {
	c.stopOnce.Do(c.queue.Close)
	c.Resume()
	<-c.done
}

func (c *Customer) receive() {
	defer close(c.done)
	<-c.resume
	c.resumed.Store(true)
	for {
		msg, ok := c.queue.Next()
		if !ok {
			return
		}
		c.run(msg)
		c.queue.Release()
	}
}

// run handles one message and, for a response, counts it against its
// request.
func (c *Customer) run(msg *message.Message) {
	defer c.handled(msg)
	if msg.Task != nil {
		msg.Task()
		return
	}
	if !msg.Meta.Request && !c.tracker.Pending(int(msg.Meta.Timestamp)) {
		c.dropLog.Warn().Stringer("msg", msg).Msg("dropping a response nobody waits for")
		return
	}
	if f := c.filter.Load(); f != nil {
		if err := (*f)(msg); err != nil {
			c.dropLog.Warn().Err(err).Stringer("msg", msg).Msg("dropping a message")
			return
		}
	}
	c.handle(msg)
	if !msg.Meta.Request {
		c.tracker.AddResponse(int(msg.Meta.Timestamp), 1)
	}
}

// handled gives back what msg holds once it is handled: its lent frames,
// or the whole message when the customer recycles.
func (c *Customer) handled(msg *message.Message) {
	if c.recycles.Load() {
		msg.Recycle()
	} else {
		msg.Release()
	}
}
