package van

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van/control"
)

// receiveLoop receives and handles messages until the van stops. If the
// watchdog hands the loop to a new goroutine while this one is in a data
// handler, this one ends when the handler returns.
func (v *Van) receiveLoop() {
	if v.receive() {
		close(v.recvDone)
	}
}

// loopState is what the receive loop keeps from one message to the next.
// It belongs to the goroutine that runs the loop, and to no other: no
// lock guards it. The loop moves to a new goroutine when a data handler
// runs long (watchHandlers), and its state moves with it. The hand-over
// is the van's inHandler counter: the loop's goroutine makes it odd
// before it calls the handler (having written the state for the last
// time), and the watchdog takes the loop by moving it on to even, with a
// compare-and-swap, before it starts the new goroutine. The old goroutine
// finds its own compare-and-swap failed when the handler returns, and
// ends without touching the state again. So each write to the state
// happens before the next goroutine's first read of it.
type loopState struct {
	held    int                // data messages handled since the last flush (see next)
	heldIDs []int32            // senders held since the last flush (the first few)
	yield   bool               // a response was handled since the loop last waited
	rng     *rand.Rand         // draws PS_DROP_MSG's drops, and the first timestamp
	early   []*message.Message // data received before the node was ready
}

// maxEarly bounds the data messages kept until the node is ready.
const maxEarly = 1 << 16

// verdict says what the receive loop does after a message.
type verdict int

const (
	goOn       verdict = iota // receive the next message
	stopLoop                  // the van stops
	handedOver                // a new goroutine runs the loop now
)

// receive is the receive loop; it reports false when it has handed the loop
// over rather than stopped.
func (v *Van) receive() bool {
	if !v.replayEarly() {
		return false
	}
	for {
		v.applyHandover()
		ident, frames, loan, err := v.next()
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
			if errors.Is(err, ErrOversized) {
				v.metrics.Dropped("oversized")
				v.dropLog.Warn().Err(err).Msg("dropping a message")
				continue
			}
			v.log.Error().Err(err).Msg("receive failed")
			if v.stopping.Load() {
				return true
			}
			continue
		}
		msg, err := v.decode(ident, frames)
		if err != nil {
			if loan != nil {
				loan.Drop()
			}
			v.metrics.Dropped("malformed")
			v.dropLog.Warn().Err(err).Str("from", describeIdentity(ident)).Msg("dropping a malformed message")
			continue
		}
		if loan != nil {
			msg.Lend(loan.Mask()>>1, loan) // bit 0: the meta
			if msg.Meta.IsControl() || !v.isReady.Load() {
				msg.Own() // kept, or small
			}
		}
		if !v.fromMember(msg) {
			msg.Release()
			v.metrics.Dropped("not_member")
			continue
		}
		if v.metrics != nil {
			n := len(ident)
			for _, f := range frames {
				n += len(f)
			}
			v.metrics.Received(&msg.Meta, n)
		}
		if d := v.dropRate.Load(); d > 0 && v.IsReady() && msg.Meta.Control.Cmd != message.CmdTerminate && v.loop.rng.IntN(100) < int(d) {
			msg.Release()
			v.metrics.Dropped("test_drop")
			v.log.Debug().Str("msg", msg.String()).Msg("dropping a message (PS_DROP_MSG)")
			continue
		}
		if !msg.Meta.IsControl() && !v.isReady.Load() {
			// Data before this node has its id (the peers of a node that
			// replaces a dead one may hear of it first): kept until the node
			// is ready, then acknowledged, deduplicated and handled.
			if len(v.loop.early) < maxEarly {
				v.loop.early = append(v.loop.early, msg)
			} else {
				v.metrics.Dropped("early")
				v.dropLog.Warn().Str("msg", msg.String()).Msg("dropping a data message that came before the node joined")
			}
			continue
		}
		switch v.handle(msg) {
		case stopLoop:
			v.flush()
			return true
		case handedOver:
			return false
		}
	}
}

// maxBatch bounds the data messages the receive loop handles, holding
// back what is sent to their senders, before it sends what it held.
const maxBatch = 32

// next receives the next message. While it holds back what is sent to the
// senders of the messages it handled (see Batcher), it first looks whether
// another message has arrived already, and handles that first; when none
// has (or maxBatch have been handled), it sends what it held and then
// waits for one. A loop taken over from a handler that runs long (see
// watchHandlers) thus sends what the handler's goroutine held back.
func (v *Van) next() (ident []byte, frames [][]byte, loan *message.Loan, err error) {
	if v.loop.held > 0 && v.loop.held < maxBatch {
		ident, frames, loan, err = v.recv(false)
		if !errors.Is(err, ErrRecvTimeout) {
			return ident, frames, loan, err
		}
	}
	v.flush()
	if v.loop.yield {
		// A response handled since the loop last waited has likely
		// readied the goroutine waiting for it. Yield, so that it runs on
		// this thread now, instead of waiting for another thread to wake
		// while this one blocks in the receive; once per run of messages,
		// not per response.
		v.loop.yield = false
		runtime.Gosched()
	}
	return v.recv(true)
}

// flush sends what the receive loop held back.
func (v *Van) flush() {
	if v.batcher != nil && v.loop.held > 0 {
		v.loop.held = 0
		v.batcher.Flush()
	}
}

// applyHandover turns the transport's identity handover on while a
// replacement is recent (or, at the scheduler, possible) and off otherwise.
// The receive loop calls it before each receive, so that a change made by
// a message it handled is in place before the socket takes its next
// connection: libzmq settles a new connection's identity inside a receive,
// once, and a connection it refused then stays refused.
func (v *Van) applyHandover() {
	h, ok := v.tr.(Handover)
	if !ok {
		return
	}
	until := v.handoverUntil.Load() // 0 until a replacement: no clock read per message
	want := v.replacing.Load() || until != 0 && v.clock.Now().UnixNano() < until
	if want == v.handoverOn.Load() {
		return
	}
	if err := h.SetHandover(want); err != nil {
		v.log.Warn().Err(err).Bool("on", want).Msg("could not change the identity handover")
		return
	}
	v.handoverOn.Store(want)
	v.log.Debug().Bool("on", want).Msg("identity handover for a replacement")
}

// noIncarnation reports whether node id's connection presented no process
// incarnation: a C++ ps-lite node (or a Go node on libzmq), whose resender
// may miss an ACK (see resendDriver.ackAgain).
func (v *Van) noIncarnation(id int32) bool {
	inc, ok := v.tr.(Incarnations)
	if !ok {
		return true
	}
	return id != emptyID && inc.ProcessOf([]byte(fmt.Sprintf("ps%d", id))) == ""
}

// replayEarly handles the data messages kept until the node was ready; it
// reports false if the loop was handed over meanwhile.
func (v *Van) replayEarly() bool {
	for len(v.loop.early) > 0 && v.isReady.Load() {
		msg := v.loop.early[0]
		v.loop.early[0] = nil
		v.loop.early = v.loop.early[1:]
		msg.Meta.Recver = v.MyNode().ID
		if v.handle(msg) == handedOver {
			return false
		}
	}
	return true
}

// handle runs one received message: acknowledgement and duplicate
// suppression, then the control protocol or the handler.
func (v *Van) handle(msg *message.Message) verdict {
	r := v.res.Load()
	if r != nil {
		ack, drop := r.r.Incoming(msg, v.clock.Now())
		if ack != nil {
			// Never wait here: an ACK that cannot be queued is dropped,
			// and the peer's resend is acknowledged later.
			if _, err := v.trySend(ack); err != nil {
				v.log.Debug().Err(err).Int32("to", msg.Meta.Sender).Msg("ACK not sent")
			}
			if v.noIncarnation(msg.Meta.Sender) {
				r.ackAgain(ack.Detached())
			}
		}
		if drop {
			msg.Release()
			if msg.Meta.Control.Cmd != message.CmdAck {
				v.metrics.Duplicate()
				v.log.Debug().Str("msg", msg.String()).Msg("dropping a duplicate")
			}
			return goOn
		}
	}
	if e := v.log.Trace(); e.Enabled() {
		e.Str("msg", msg.String()).Msg("received")
	}
	if msg.Meta.IsControl() {
		if msg.Meta.Control.Cmd == message.CmdTerminate {
			if v.stopping.Load() {
				return stopLoop
			}
			v.log.Warn().Str("msg", msg.String()).Msg("ignoring TERMINATE while not stopping")
			return goOn
		}
		wasReady := v.isReady.Load()
		v.step(func(c *control.Core, now time.Time) []control.Output { return c.Step(msg, now) })
		if wasReady || !v.isReady.Load() {
			return goOn
		}
		if r := v.res.Load(); r != nil {
			// The node list that made this node ready: acknowledge it now
			// that resending is on (its sender resends it until then), as
			// sent to the id it gave.
			msg.Meta.Recver = v.MyNode().ID
			if ack, _ := r.r.Incoming(msg, v.clock.Now()); ack != nil {
				if _, err := v.trySend(ack); err != nil {
					v.log.Debug().Err(err).Msg("ACK not sent")
				}
			}
		}
		if !v.replayEarly() {
			return handedOver
		}
		return goOn
	}
	if msg.Meta.AppID == emptyID {
		msg.Release()
		v.metrics.Dropped("no_app")
		v.dropLog.Warn().Str("msg", msg.String()).Msg("dropping a data message without app id")
		return goOn
	}
	if !v.dispatch(msg) {
		return handedOver
	}
	return goOn
}

// dispatch passes a data message to the handler and reports whether this
// goroutine still runs the receive loop afterwards.
func (v *Van) dispatch(msg *message.Message) bool {
	if msg.Lent() {
		if _, ok := v.handler.(LendingHandler); !ok {
			msg.Own()
		}
	}
	if v.batcher != nil && msg.Meta.Sender != emptyID {
		// What the handler (or anyone) sends to the sender now waits
		// until the loop has handled what else has arrived.
		if v.loop.held == 0 {
			v.loop.heldIDs = v.loop.heldIDs[:0]
		}
		if !slices.Contains(v.loop.heldIDs, msg.Meta.Sender) {
			v.batcher.Hold(int(msg.Meta.Sender))
			if len(v.loop.heldIDs) < cap(v.loop.heldIDs) {
				v.loop.heldIDs = append(v.loop.heldIDs, msg.Meta.Sender)
			}
		}
		v.loop.held++
	}
	if !msg.Meta.Request {
		v.loop.yield = true // see next
	}
	seq := v.inHandler.Add(1) // odd: in the handler
	v.wakeWatchdog()
	v.handler.HandleData(msg) // (msg may be recycled once it returns)
	return v.inHandler.CompareAndSwap(seq, seq+1)
}

// watchHandlers hands the receive loop to a new goroutine whenever a data
// handler has run for HandlerStall, so that a slow handler (or one waiting
// for a message only the loop can receive) never stalls receiving, until
// the loop stops. It measures real time: it is about responsiveness, not
// the protocol. It looks every HandlerStall/2 at which handler call runs
// (inHandler), so that the receive loop reads no clock per message: a call
// is handed over from when it has been seen running for HandlerStall, at
// most HandlerStall/2 later than that.
//
// A node with no handler call for watchIdle (200 ms) parks the watchdog
// until the next call (see wakeWatchdog): an idle node wakes for nothing,
// which matters on a machine that runs hundreds of them.
func (v *Van) watchHandlers() {
	tick := time.NewTicker(HandlerStall / 2)
	defer tick.Stop()
	var seen uint64 // the handler call seen running, since seenAt
	var seenAt time.Time
	last, idle := v.inHandler.Load(), time.Duration(0)
	for {
		var now time.Time
		select {
		case <-v.recvDone:
			return
		case now = <-tick.C:
		}
		seq := v.inHandler.Load()
		if seq != last {
			last, idle = seq, 0
		} else if seq%2 == 0 {
			if idle += HandlerStall / 2; idle >= watchIdle {
				if !v.parkWatchdog(seq) {
					return
				}
				tick.Reset(HandlerStall / 2)
				last, idle = v.inHandler.Load(), 0
				continue
			}
		}
		if seq%2 == 0 {
			continue
		}
		if seq != seen {
			seen, seenAt = seq, now
			continue
		}
		if now.Sub(seenAt) < HandlerStall {
			continue
		}
		if v.inHandler.CompareAndSwap(seq, seq+1) {
			v.log.Debug().Msg("a data handler is taking long: receiving on a new goroutine")
			go v.receiveLoop()
		}
	}
}

// watchIdle is how long the watchdog looks at a node that calls no handler
// before it parks.
const watchIdle = 10 * HandlerStall

// parkWatchdog waits until a handler call is made after seq, or the loop
// stops (it then reports false). A call made as it parks is not missed:
// the watchdog says it parks before it looks at inHandler again, and
// dispatch moves inHandler on before it looks whether the watchdog has
// parked; of two such pairs of atomic operations, one side sees the other.
func (v *Van) parkWatchdog(seq uint64) bool {
	v.watchParked.Store(true)
	if v.inHandler.Load() != seq {
		if v.watchParked.CompareAndSwap(true, false) {
			return true
		}
		// dispatch unparked it already, and sent the wake-up: take it.
	}
	select {
	case <-v.recvDone:
		return false
	case <-v.watchWake:
		return true
	}
}

// WatchdogParked reports whether the handler watchdog (see HandlerStall)
// is parked: the node has called no data handler for a while, so nothing
// wakes it until the next call. For tests and diagnostics.
func (v *Van) WatchdogParked() bool { return v.watchParked.Load() }

// wakeWatchdog wakes a parked watchdog; dispatch calls it after each
// handler call begins.
func (v *Van) wakeWatchdog() {
	if v.watchParked.Load() && v.watchParked.CompareAndSwap(true, false) {
		v.watchWake <- struct{}{} // buffered: one wake-up per park
	}
}

// fromMember reports whether msg comes from a node of the job: its sender
// identity names the scheduler, a server or a worker of the job's size. The
// only messages without an identity that count are ADD_NODE requests, by
// which nodes join, ACKs (a C++ node acknowledges the node list before it
// reconnects with its identity) and a node's TERMINATE to itself before it
// has an id (honoured only while it stops). Anything else is dropped here,
// before it is acknowledged, deduplicated or handled.
func (v *Van) fromMember(msg *message.Message) bool {
	sender := int(msg.Meta.Sender)
	if sender == emptyID {
		if cmd := msg.Meta.Control.Cmd; cmd == message.CmdAddNode || cmd == message.CmdAck || cmd == message.CmdTerminate {
			return true
		}
		v.dropLog.Warn().Str("msg", msg.String()).Msg("dropping a message from a sender without a node identity")
		return false
	}
	if !message.IsMember(sender, v.cfg.NumServers, v.cfg.NumWorkers) {
		v.dropLog.Warn().Str("from", message.DescribeID(sender)).Str("msg", msg.String()).
			Msgf("dropping a message from a node that is not in this job of %d servers and %d workers", v.cfg.NumServers, v.cfg.NumWorkers)
		return false
	}
	return true
}

// describeIdentity names a sender by its ZeroMQ identity, for logs.
func describeIdentity(ident []byte) string {
	if id := ParseIdentity(ident); id != emptyID {
		return message.DescribeID(int(id))
	}
	return fmt.Sprintf("identity %q", ident)
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
	msg := message.Get()      // (a customer that recycles gives it back)
	msg.SetFrames(frames[1:]) // a list of the message's own
	if err := msg.DecodeMeta(frames[0]); err != nil {
		msg.Recycle()
		return nil, err
	}
	msg.Meta.Sender = ParseIdentity(ident)
	msg.Meta.Recver = v.MyNode().ID
	if msg.Meta.Control.Cmd == message.CmdAddNode && msg.Meta.Sender == emptyID {
		// A registration: the scheduler records which process made it.
		if inc, ok := v.tr.(Incarnations); ok {
			msg.Process = inc.ProcessOf(ident)
		}
	}
	if len(msg.Data) > 0 && len(msg.Meta.DataTypes) != len(msg.Data) {
		err := fmt.Errorf("%d data frames but %d data types", len(msg.Data), len(msg.Meta.DataTypes))
		msg.Recycle()
		return nil, err
	}
	return msg, nil
}
