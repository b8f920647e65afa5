package van

import (
	"os"
	"strconv"
	"time"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van/control"
)

// This file drives the control core: every input (a control message, a
// connection event, a tick, a call of the node's user) is a step under
// ctlMu, whose outputs are carried out in order before the lock is
// released; none of them waits (sends are TrySends, connects do not wait
// for the connection). The handler hears of the step's events after the
// lock is released.

// step runs f on the core, carries out its outputs and reports its events.
func (v *Van) step(f func(c *control.Core, now time.Time) []control.Output) {
	v.ctlMu.Lock()
	now := v.clock.Now()
	outs := f(v.core, now)
	events := v.applyLocked(outs)
	v.replacing.Store(v.core.ReplacementPossible(now))
	v.ctlMu.Unlock()
	v.notify(events)
}

// applyLocked carries out outputs and returns the events for the handler.
func (v *Van) applyLocked(outs []control.Output) []control.Event {
	var events []control.Event
	for _, o := range outs {
		switch o.Kind {
		case control.Send:
			post := v.post
			if o.Once {
				post = v.trySend
			}
			if _, err := post(o.Msg); err != nil {
				v.log.Debug().Err(err).Str("msg", o.Msg.String()).Msg("control message not sent")
			}
		case control.Connect:
			v.connectLocked(o.Node, o.Identity)
		case control.Disconnect:
			v.tr.Disconnect(o.ID)
		case control.Notify:
			if v.noteLocked(o.Event) {
				events = append(events, o.Event)
			}
		}
	}
	return events
}

// dial is how a node was connected to: its address and the identity this
// node presented.
type dial struct {
	node     message.Node
	identity string
}

func (v *Van) connectLocked(n message.Node, identity string) {
	if v.cfg.Resend { // only the resender redials: no map per peer otherwise
		if v.dialed == nil {
			v.dialed = make(map[int]dial)
		}
		v.dialed[int(n.ID)] = dial{n, identity}
	}
	v.downMu.Lock()
	delete(v.down, int(n.ID)) // a new connection, e.g. to a replacement
	v.ndown.Store(int32(len(v.down)))
	v.downMu.Unlock()
	if err := v.tr.Connect(int(n.ID), n.Hostname, int(n.Port), identity); err != nil {
		v.log.Error().Err(err).Str("node", n.String()).Msg("connect failed")
	}
}

// redial connects to node id again, as it was connected to last (see
// resendDriver.check); it reports whether it knew how.
func (v *Van) redial(id int) bool {
	v.ctlMu.Lock()
	defer v.ctlMu.Unlock()
	d, ok := v.dialed[id]
	if ok {
		v.connectLocked(d.node, d.identity)
	}
	return ok
}

// noteLocked updates the van's own state for an event and reports whether
// the handler must hear of it.
func (v *Van) noteLocked(e control.Event) bool {
	switch e.Type {
	case control.EventReady:
		me := e.Node
		v.myNode.Store(&me)
		if me.IsRecovery {
			v.recoveredUntil.Store(v.clock.Now().Add(HandoverWindow).UnixNano())
		}
		if v.cfg.SetRankEnv && me.Role != message.RoleScheduler {
			os.Setenv("DMLC_RANK", strconv.Itoa(message.IDToRank(int(me.ID))))
		}
		if v.cfg.Resend {
			// In place before the receive loop takes its next message: every
			// message from a ready peer is acknowledged and deduplicated.
			v.res.Store(newResendDriver(v, v.cfg.Resending))
		}
		if w, ok := v.tr.(MembershipWatcher); ok {
			w.MembersKnown()
		}
		v.isReady.Store(true)
		close(v.ready)
		return false
	case control.EventBarrierDone:
		return true
	case control.EventPeerDown:
		if v.res.Load() != nil {
			return false // requests to it are resent until it or a replacement answers
		}
		v.downMu.Lock()
		v.down[e.ID] = true
		v.ndown.Store(int32(len(v.down)))
		v.downMu.Unlock()
		v.log.Warn().Str("node", message.DescribeID(e.ID)).Msg("connection still down after the grace; requests to it fail")
		return true
	case control.EventPeerUp:
		v.downMu.Lock()
		delete(v.down, e.ID)
		v.ndown.Store(int32(len(v.down)))
		v.downMu.Unlock()
		return false
	case control.EventNodeDead:
		v.metrics.NodeDead(e.ID)
		if r := v.res.Load(); r != nil {
			// What the scheduler sent it (heartbeat replies, lists) matters
			// no more; its replacement gets what it needs afresh.
			r.r.DropTo(int32(e.ID))
		}
		return false
	case control.EventNodeReplaced:
		// Its predecessor may be frozen with its connections open: let the
		// replacement's connections take over its identity for a while.
		v.handoverUntil.Store(v.clock.Now().Add(HandoverWindow).UnixNano())
		if r := v.res.Load(); r != nil {
			// Its messages are numbered afresh: they are no duplicates of
			// its predecessor's.
			r.r.ForgetSender(int32(e.ID))
		}
		return true // (and what its predecessor left unanswered goes to it)
	case control.EventFailed:
		err := e.Err
		v.failErr.Store(&err)
		close(v.failed)
		v.cancel()
		return true
	case control.EventView:
		v.view.Store(e.View)
		return true
	case control.EventIncarnations:
		v.pslScheduler.Store(true)
		if inc, ok := v.tr.(Incarnations); ok {
			inc.SetIncarnations(e.Incarnations)
		}
		return false
	case control.EventCut, control.EventCommitted:
		return true
	}
	return false // the core logged it
}

// notify tells the handler about events, in order.
func (v *Van) notify(events []control.Event) {
	for _, e := range events {
		switch e.Type {
		case control.EventBarrierDone:
			v.handler.HandleBarrierDone(e.Msg)
		case control.EventPeerDown:
			v.handler.HandleNodeDown(e.ID)
		case control.EventFailed:
			v.handler.HandleFailure(e.Err)
		case control.EventNodeReplaced:
			// The layers above first: a worker whose request went to the
			// replaced node's range elsewhere cancels it here before it is
			// sent again to the replacement.
			v.handler.HandleEvent(e)
			if r := v.res.Load(); r != nil {
				r.reawait(e.ID)
			}
		case control.EventView, control.EventCut, control.EventCommitted:
			v.handler.HandleEvent(e)
		}
	}
}

// onConnection learns from the transport that the connection to node id
// dropped or came back.
func (v *Van) onConnection(id int, up bool) {
	if v.stopping.Load() {
		return
	}
	v.metrics.Connection(id, up)
	if r := v.res.Load(); r != nil {
		r.r.Connection(int32(id), up, v.clock.Now())
	}
	if !up {
		v.ctlMu.Lock()
		over, ending := v.core.PassedFinalBarrier(), v.core.InFinalBarrier()
		v.ctlMu.Unlock()
		switch {
		case over: // past the final barrier, connections close as nodes exit
		case ending: // a peer released from the final barrier first may exit
			v.log.Info().Str("node", message.DescribeID(id)).Msg("connection closed during the final barrier")
		default:
			v.log.Warn().Str("node", message.DescribeID(id)).Msg("connection lost")
		}
	}
	v.step(func(c *control.Core, now time.Time) []control.Output { return c.Connection(id, up, now) })
}

// tick lets the protocol's time pass.
func (v *Van) tick() {
	v.step(func(c *control.Core, now time.Time) []control.Output { return c.Tick(now) })
}

// Barrier asks the scheduler for a barrier of customerID on group. The
// handler's HandleBarrierDone tells when it is released (possibly before
// Barrier returns, at the scheduler); HandleFailure, when it never will be.
func (v *Van) Barrier(customerID, group int) error {
	var err error
	v.step(func(c *control.Core, now time.Time) []control.Output {
		outs, e := c.Barrier(customerID, group, now)
		err = e
		return outs
	})
	return err
}

// Finalizing says that the node's next barrier is its final one: once it
// is released, connections closing and silences are no fault any more.
func (v *Van) Finalizing() {
	v.ctlMu.Lock()
	v.core.Finalizing()
	v.ctlMu.Unlock()
}

// Leave says that the node stops: a node that did not pass a final
// barrier tells the scheduler, so that its going is no fault.
func (v *Van) Leave() {
	v.step(func(c *control.Core, now time.Time) []control.Output { return c.Leave(now) })
}

// DeadNodes returns the nodes not heard from within timeout or found dead
// (their connection closed): at the scheduler, servers and workers;
// elsewhere, the scheduler. With heartbeats off only nodes found dead
// count. A timeout of 0 reports none.
func (v *Van) DeadNodes(timeout time.Duration) []int {
	v.ctlMu.Lock()
	defer v.ctlMu.Unlock()
	return v.core.DeadNodes(timeout, v.clock.Now())
}
