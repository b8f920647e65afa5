package control

import (
	"fmt"
	"slices"
	"time"

	"github.com/gopslite/pslite/message"
)

// Barriers, and leaving a job.

type barrierKey struct {
	sender, customer int32
}

// barrier counts a barrier request at the scheduler, or passes a release on.
func (c *Core) barrier(o *out, msg *message.Message, now time.Time) {
	if !msg.Meta.Request {
		if msg.Meta.Sender != message.Scheduler {
			c.log.Warn().Str("msg", msg.String()).Msg("dropping a barrier release not sent by the scheduler")
			return
		}
		c.released(o, msg)
		return
	}
	if !c.IsScheduler() {
		c.log.Warn().Str("msg", msg.String()).Msg("dropping a barrier request sent to a non-scheduler")
		return
	}
	if c.phase != PhaseReady {
		c.log.Debug().Str("msg", msg.String()).Str("phase", c.phase.String()).Msg("dropping a barrier request")
		return
	}
	sender := int(msg.Meta.Sender)
	group := int(msg.Meta.Control.BarrierGroup)
	role, ok := message.RoleOfID(sender)
	if group < 1 || group > 7 || !ok || c.peers[c.process(sender)] == nil || !message.InGroup(role, group) {
		c.log.Warn().Str("msg", msg.String()).Msg("dropping a barrier request with a bad group or from a node not in the job")
		return
	}
	c.countBarrier(o, msg, now)
}

// released handles a barrier release for this node.
func (c *Core) released(o *out, msg *message.Message) {
	if c.phase != PhaseReady {
		return
	}
	if c.finalizing {
		c.phase = PhaseDone
		c.finalizing = false
		c.passedFinal = true
	}
	o.notify(Event{Type: EventBarrierDone, Msg: msg})
}

// ConnectedMembers returns, at the scheduler, the servers and workers
// whose connection is up, in id order (none without connection events).
func (c *Core) ConnectedMembers() []int {
	var ids []int
	if !c.IsScheduler() || !c.cfg.ConnEvents {
		return nil
	}
	for id, p := range c.peers {
		if id != message.Scheduler && p.connUp && !p.dead && !p.left {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// InFinalBarrier reports whether the node is finalizing (Finalizing) and
// its final barrier is not released yet: a peer released first may exit
// meanwhile.
func (c *Core) InFinalBarrier() bool { return c.finalizing }

// PassedFinalBarrier reports whether the node's final barrier was released:
// every node of the job got to its Finalize, so whatever this node sent
// before has served its purpose.
func (c *Core) PassedFinalBarrier() bool { return c.passedFinal }

// countBarrier counts one request (distinct senders and customers only) and
// releases the group when every member has asked.
func (c *Core) countBarrier(o *out, req *message.Message, now time.Time) {
	group := int(req.Meta.Control.BarrierGroup)
	c.barriers[group][barrierKey{req.Meta.Sender, req.Meta.CustomerID}] = true
	c.lastBarrier[group] = req
	c.checkBarrier(o, group)
}

// checkBarrier releases group if every member that has not left has asked.
func (c *Core) checkBarrier(o *out, group int) {
	set := c.barriers[group]
	req := c.lastBarrier[group]
	if len(set) == 0 || req == nil {
		return
	}
	members := c.members(group)
	need, have := 0, 0
	for _, id := range members {
		if p := c.peers[c.process(id)]; p == nil || !p.gone() {
			need++
		}
	}
	for k := range set {
		if p := c.peers[int(k.sender)]; p == nil || !p.gone() {
			have++
		}
	}
	c.log.Debug().Int("group", group).Int("count", have).Int("of", need).Msg("barrier")
	if have < need {
		return
	}
	c.barriers[group] = map[barrierKey]bool{}
	c.lastBarrier[group] = nil
	// Release servers first and workers last. A released worker may send a
	// request at once, and a C++ ps-lite server that gets a request before
	// its own release blocks its receive thread waiting (5 s, then aborts)
	// for the customer it only creates once released; C++ schedulers
	// release workers first and lose that race now and then.
	slices.SortStableFunc(members, func(a, b int) int { return releaseOrder(a) - releaseOrder(b) })
	for _, id := range members {
		if _, shared := c.shared[id]; shared {
			continue
		}
		if p := c.peers[id]; p != nil && p.gone() {
			continue
		}
		res := message.New()
		res.Meta.Request = false
		res.Meta.AppID = req.Meta.AppID
		res.Meta.CustomerID = req.Meta.CustomerID
		res.Meta.Control.Cmd = message.CmdBarrier
		res.Meta.Recver = int32(id)
		res.Meta.Timestamp = c.nextTS()
		if id == message.Scheduler {
			res.Meta.Sender = message.Scheduler
			c.released(o, res)
			continue
		}
		o.send(res)
	}
}

// releaseOrder ranks node ids for barrier releases: servers, the
// scheduler, workers.
func releaseOrder(id int) int {
	switch {
	case message.IsServerID(id):
		return 0
	case id == message.Scheduler:
		return 1
	}
	return 2
}

// Barrier starts a barrier of customerID on group: the output asks the
// scheduler (the scheduler counts its own request at once, and may release
// the barrier in the same call). The caller waits for EventBarrierDone.
func (c *Core) Barrier(customerID, group int, now time.Time) ([]Output, error) {
	switch c.phase {
	case PhaseFailed:
		return nil, c.err
	case PhaseReady:
	default:
		return nil, fmt.Errorf("%w (%s)", ErrNotReady, c.phase)
	}
	if group < 1 || group > 7 || !message.InGroup(c.cfg.Role, group) {
		return nil, fmt.Errorf("control: a %s is not in barrier group %d", c.cfg.Role, group)
	}
	req := message.New()
	req.Meta.Recver = message.Scheduler
	req.Meta.Request = true
	req.Meta.Control.Cmd = message.CmdBarrier
	req.Meta.AppID = 0
	req.Meta.CustomerID = int32(customerID)
	req.Meta.Control.BarrierGroup = int32(group)
	req.Meta.Timestamp = c.nextTS()
	var o out
	if c.IsScheduler() {
		req.Meta.Sender = message.Scheduler
		c.countBarrier(&o, req, now)
	} else {
		o.send(req)
	}
	return o, nil
}

// Finalizing says that the node's next barrier is its last: once it is
// released, faults no longer matter to the node.
func (c *Core) Finalizing() { c.finalizing = true }

// Leave says that the node stops. A server or worker that has not passed a
// final barrier tells the scheduler, so that its connection closing is no
// fault.
func (c *Core) Leave(now time.Time) []Output {
	var o out
	if c.phase == PhaseReady {
		if !c.IsScheduler() {
			o.send(NewNotice(message.Scheduler, NoticeLeave, "", c.nextTS()))
		}
		c.phase = PhaseDone
	}
	if c.phase == PhaseIdle || c.phase == PhaseJoining {
		c.phase = PhaseDone
	}
	return o
}
