package control

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gopslite/pslite/message"
)

// Liveness: heartbeats, connection events, the detection of dead nodes,
// and the failure of a job.

// peer is what a core knows of another node: the scheduler knows every
// server and worker process; a server or worker knows the scheduler.
type peer struct {
	node      message.Node
	lastHeard time.Time // last heartbeat (or other control message)
	connUp    bool      // the connection is up
	everUp    bool      // the current connection has been up
	downSince time.Time // since when the connection is down or being made; zero while up
	dead      bool
	deadSince time.Time
	cause     string // how it was found dead
	covered   bool   // dead, but the job goes on without it (its ranges are held elsewhere)
	left      bool   // it announced that it stops
}

// gone reports whether the job goes on without p: it left, or it is dead
// and its ranges are held by other servers. Barriers do not wait for it.
func (p *peer) gone() bool { return p.left || p.dead && p.covered }

// linkState is a server's or worker's view of its connection to a peer
// (not the scheduler).
type linkState struct {
	downSince time.Time // zero while up
	reported  bool      // EventPeerDown was sent
}

// heartbeat handles a HEARTBEAT: liveness, the scheduler's answer, and
// notices.
func (c *Core) heartbeat(o *out, msg *message.Message, now time.Time) {
	kind, text, isNotice := ParseNotice(msg)
	sender := int(msg.Meta.Sender)
	if !c.IsScheduler() {
		if sender != message.Scheduler {
			// A peer that failed on its own (it lost the scheduler) says
			// so, that the job's nodes all name the cause. While this node
			// hears the scheduler, the scheduler decides: the peer may be
			// the one cut off, its notice held by the network until the
			// link came back, long after the job went on without it.
			if _, peer := c.connected[sender]; peer && isNotice && kind == NoticeAbort && sender != int(c.me.ID) {
				if c.hearsScheduler(now) {
					c.log.Warn().Int("from", sender).Str("reason", text).Msg("a peer stopped; the scheduler, which this node hears, decides for the job")
					return
				}
				c.fail(o, &AbortError{By: sender, Reason: text})
				return
			}
			c.log.Debug().Str("msg", msg.String()).Msg("dropping a heartbeat not sent by the scheduler")
			return
		}
		if p := c.peers[message.Scheduler]; p != nil {
			p.lastHeard = now
		}
		if !isNotice {
			return
		}
		switch kind {
		case NoticeAbort:
			c.fail(o, &AbortError{By: message.Scheduler, Reason: text})
		case NoticeEvict:
			c.fail(o, &EvictedError{Reason: text})
		case NoticeView:
			if c.phase == PhaseReady {
				c.takeView(o, text, now)
			}
		case NoticeCut:
			if gen, meta, err := ParseCut(text); err == nil && c.phase == PhaseReady {
				o.notify(Event{Type: EventCut, Gen: gen, Text: meta})
			}
		case NoticeCommitted:
			if gen, id, why, err := ParseCommitted(text); err == nil {
				o.notify(Event{Type: EventCommitted, Gen: gen, RequestID: id, Text: why})
			}
		case NoticeIncarnations:
			if m, err := ParseIncarnations(text); err == nil {
				c.incarnations = m
				o.notify(Event{Type: EventIncarnations, Incarnations: m})
			} else {
				c.log.Warn().Err(err).Msg("dropping incarnations")
			}
		}
		return
	}
	p := c.peers[c.process(sender)]
	if p == nil {
		c.log.Debug().Str("msg", msg.String()).Msg("dropping a heartbeat from a node not in the job")
		return
	}
	p.lastHeard = now
	if isNotice && kind == NoticeLeave {
		c.log.Info().Str("node", p.node.String()).Msg("node leaves the job")
		p.left = true
		for g := 1; g < len(c.barriers); g++ {
			c.checkBarrier(o, g)
		}
		c.serverDead(o, int(p.node.ID), now) // its ranges move on
		return
	}
	if isNotice && kind == NoticeAbort && c.phase == PhaseReady {
		// It found a fault itself (a blip of one of its connections, see
		// blip). A node already found dead speaks for nobody: the job went
		// on without it.
		if p.dead {
			c.log.Warn().Str("node", p.node.String()).Str("reason", text).Msg("dropping the abort of a node found dead")
			return
		}
		c.fail(o, &AbortError{By: int(p.node.ID), Reason: text})
		return
	}
	if isNotice && c.phase == PhaseReady && !p.dead {
		switch kind {
		case NoticeHello:
			c.hello(o, sender, text)
			return
		case NoticeReport:
			c.report(o, sender, text)
			return
		case NoticeCheckpoint:
			c.checkpointRequest(o, sender, text)
			return
		case NoticeMarked:
			c.marked(o, sender, text)
			return
		}
	}
	if c.phase == PhaseFailed {
		// It missed the abort (it was stopped or cut off): say it again.
		o.send(NewNotice(sender, NoticeAbort, abortReason(c.err), c.nextTS()))
		return
	}
	if !c.cfg.ConnEvents || p.connUp {
		// A heartbeat in flight from a process whose connection closed
		// does not bring it back.
		c.revive(o, p)
	}
	ack := message.New()
	ack.Meta.Recver = int32(sender)
	ack.Meta.Control.Cmd = message.CmdHeartbeat
	ack.Meta.Control.Nodes = []message.Node{c.me}
	ack.Meta.Timestamp = c.nextTS()
	o.send(ack)
}

// revive takes back the death of p, heard from again before it was
// replaced or the job failed.
func (c *Core) revive(o *out, p *peer) {
	if !p.dead || c.phase != PhaseReady {
		return
	}
	if c.planner != nil && p.node.Role == message.RoleServer {
		// Its ranges moved on when it was found dead: its store is behind
		// theirs for good.
		c.evict(o, int(p.node.ID), fmt.Sprintf("found dead (%s) and its key ranges moved to other servers; start a new process to take its place", p.cause))
		return
	}
	p.dead = false
	c.log.Warn().Str("node", p.node.String()).Msg("a node declared dead is back")
	o.notify(Event{Type: EventNodeBack, ID: int(p.node.ID), Node: p.node})
}

// Connection reports that the connection to node id went down or came up.
func (c *Core) Connection(id int, up bool, now time.Time) []Output {
	var o out
	if c.phase == PhaseDone && c.IsScheduler() {
		// Past the final barrier nothing is a fault; only who is still
		// connected matters (ConnectedMembers).
		if p := c.peers[id]; p != nil {
			p.connUp = up
		}
		return nil
	}
	if c.phase != PhaseJoining && c.phase != PhaseReady || id == int(c.me.ID) {
		return nil
	}
	if p := c.peers[id]; p != nil && (c.IsScheduler() || id == message.Scheduler) {
		if up {
			blip := p.everUp && !p.connUp && !p.downSince.IsZero() && !p.dead
			p.connUp, p.everUp, p.downSince = true, true, time.Time{}
			c.revive(&o, p)
			if blip {
				c.blip(&o, p.node)
			}
		} else if p.connUp || p.downSince.IsZero() {
			p.connUp, p.downSince = false, now
		}
		return o
	}
	if !c.IsScheduler() && c.phase == PhaseReady && id != message.Scheduler {
		if _, ok := c.connected[id]; !ok {
			return nil
		}
		// links holds only the connections that are down, so that Tick
		// looks at those alone (a job of thousands of nodes has millions
		// of connections up).
		l := c.links[id]
		switch {
		case up && l == nil:
		case up:
			if l.reported {
				o.notify(Event{Type: EventPeerUp, ID: id})
			} else if !l.downSince.IsZero() {
				role, _ := message.RoleOfID(id)
				c.blip(&o, message.Node{ID: int32(id), Role: role})
			}
			delete(c.links, id)
		case l == nil:
			c.links[id] = &linkState{downSince: now}
			c.linksDown = append(c.linksDown, linkDown{id: id, since: now})
		}
	}
	return o
}

// linkDown is a link that went down at since, waiting for its grace to
// end (Core.linksDown).
type linkDown struct {
	id    int
	since time.Time
}

// blip fails the job, without resending, when the connection to n dropped
// and came back within the grace: n is alive, but what was in flight on the
// connection may be lost, and nothing would send it again.
func (c *Core) blip(o *out, n message.Node) {
	if c.cfg.Resend || c.phase != PhaseReady {
		return
	}
	err := &NodeLostError{Node: n, Cause: fmt.Sprintf(
		"its connection dropped and came back within %v, so messages in flight on it may be lost, and without PS_RESEND nothing sends them again", c.cfg.ConnGrace)}
	c.fail(o, err)
	if !c.IsScheduler() {
		// The scheduler is alive too: it stops the job with this cause.
		o.send(NewNotice(message.Scheduler, NoticeAbort, abortReason(err), c.nextTS()))
	}
}

// Tick lets time pass: heartbeats are sent and silent or disconnected
// nodes found dead.
func (c *Core) Tick(now time.Time) []Output {
	if c.phase == PhaseJoining && !c.IsScheduler() {
		// Waiting for the node list: the scheduler's connection closing
		// for good (its process ended, say after failing the start-up
		// because it cannot reach this node) ends the wait.
		var o out
		if p := c.peers[message.Scheduler]; p != nil && c.cfg.ConnEvents && p.everUp && !p.connUp && now.Sub(p.downSince) >= c.cfg.ConnGrace {
			c.fail(&o, &NodeLostError{Node: c.sched, Cause: fmt.Sprintf("its connection closed before this node at %s joined (can the scheduler reach that address? see DMLC_NODE_HOST, DMLC_INTERFACE)", c.me.Addr())})
		}
		return o
	}
	if c.phase != PhaseReady {
		return nil
	}
	var o out
	if c.IsScheduler() {
		c.checkMembers(&o, now)
		return o
	}
	if gap := now.Sub(c.lastTick); c.heartbeats() && !c.lastTick.IsZero() && gap > c.cfg.HeartbeatTimeout {
		// This process did not run for longer than the heartbeat timeout
		// (stopped, or starved): the scheduler has counted it dead, and a
		// replacement may have its id now. It is the fault: it stops
		// without telling anyone (anything it said would pass for its
		// replacement's words).
		c.lastTick = now
		c.failQuietly(&o, &FrozenError{For: gap, Timeout: c.cfg.HeartbeatTimeout})
		return o
	}
	c.lastTick = now
	if c.heartbeats() && now.Sub(c.lastBeat) >= c.cfg.HeartbeatInterval {
		c.lastBeat = now
		msg := message.New()
		msg.Meta.Recver = message.Scheduler
		msg.Meta.Control.Cmd = message.CmdHeartbeat
		msg.Meta.Control.Nodes = []message.Node{c.me}
		msg.Meta.Timestamp = c.nextTS()
		o.send(msg)
	}
	if p := c.peers[message.Scheduler]; p != nil {
		if cause := c.lost(p, now); cause != "" {
			p.dead, p.deadSince, p.cause = true, now, cause
			c.fail(&o, &NodeLostError{Node: c.sched, Cause: cause})
			return o
		}
	}
	// A peer whose connection stays closed past the grace is gone. The
	// links down wait in the order they went down, which is the order they
	// are due in: a tick looks at those due alone (a job of thousands of
	// nodes that ends sees thousands of links go down at each node, ten
	// ticks a second).
	for len(c.linksDown) > 0 {
		d := c.linksDown[0]
		l := c.links[d.id]
		if l != nil && !l.reported && l.downSince.Equal(d.since) {
			if now.Sub(d.since) < c.cfg.ConnGrace {
				break
			}
			l.reported = true
			o.notify(Event{Type: EventPeerDown, ID: d.id})
		} // else it came back, or went down again since (a later entry)
		c.linksDown[0] = linkDown{}
		c.linksDown = c.linksDown[1:]
	}
	return o
}

// hearsScheduler reports whether this server or worker heard the scheduler
// lately: within half PS_HEARTBEAT_TIMEOUT with heartbeats on, else while
// its connection is up. A node that lost the scheduler has not heard it for
// PS_HEARTBEAT_TIMEOUT; its peers, if the scheduler is really gone, have
// not heard it for about as long.
func (c *Core) hearsScheduler(now time.Time) bool {
	p := c.peers[message.Scheduler]
	if p == nil {
		return false
	}
	if c.heartbeats() {
		return now.Sub(p.lastHeard) < c.cfg.HeartbeatTimeout/2
	}
	return p.connUp
}

// lost says how p is lost, or "" while it looks alive.
func (c *Core) lost(p *peer, now time.Time) string {
	if c.heartbeats() && now.Sub(p.lastHeard) > c.cfg.HeartbeatTimeout {
		return fmt.Sprintf("nothing heard from it for %v (PS_HEARTBEAT_TIMEOUT)", c.cfg.HeartbeatTimeout)
	}
	if !c.cfg.ConnEvents || p.connUp || p.downSince.IsZero() {
		return ""
	}
	switch {
	case p.everUp && now.Sub(p.downSince) >= c.cfg.ConnGrace:
		return "its connection closed"
	case !p.everUp && now.Sub(p.downSince) >= c.cfg.ConnectTimeout:
		return fmt.Sprintf("could not connect to it within %v", c.cfg.ConnectTimeout)
	}
	return ""
}

// checkMembers finds dead servers and workers, gives their places to nodes
// waiting for one, and fails the job when a place stays empty past
// RecoveryWait.
func (c *Core) checkMembers(o *out, now time.Time) {
	ids := make([]int, 0, len(c.peers))
	for id := range c.peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		p := c.peers[id]
		if p.dead || p.left {
			continue
		}
		if cause := c.lost(p, now); cause != "" {
			p.dead, p.deadSince, p.cause = true, now, cause
			c.log.Warn().Str("node", p.node.String()).Str("cause", cause).Msg("node declared dead")
			o.notify(Event{Type: EventNodeDead, ID: id, Node: p.node, Err: &NodeLostError{Node: p.node, Cause: cause}})
			if c.serverDead(o, id, now) {
				// Its ranges are held by other servers: the job goes on, and
				// its place stays open for a replacement; barriers no
				// longer wait for it.
				p.covered = true
				for g := 1; g < len(c.barriers); g++ {
					c.checkBarrier(o, g)
				}
			}
		}
	}
	// Waiting nodes take the places of dead ones, first come first served;
	// those that waited too long are dropped.
	ttl := max(60*time.Second, 2*c.cfg.HeartbeatTimeout)
	waiting := c.waiting[:0]
	for _, w := range c.waiting {
		if id := c.deadOfRole(w.node.Role); id != 0 {
			c.replace(o, id, w.node, now)
			continue
		}
		if now.Sub(w.since) >= c.refusalGrace() && !c.suspectOfRole(w.node.Role, now) {
			c.refuse(o, w.node, fmt.Sprintf("the job at %s:%d is full (%d servers, %d workers) and no %s looks dead",
				c.me.Hostname, c.me.Port, c.cfg.NumServers, c.cfg.NumWorkers, w.node.Role))
			continue
		}
		if now.Sub(w.since) > ttl {
			c.refuse(o, w.node, fmt.Sprintf("no %s of the job died within %v", w.node.Role, ttl))
			continue
		}
		waiting = append(waiting, w)
	}
	c.waiting = waiting
	for _, id := range ids {
		p := c.peers[id]
		if p.dead && !p.covered && now.Sub(p.deadSince) >= c.cfg.RecoveryWait {
			if c.planner != nil && p.node.Role == message.RoleServer {
				continue // checkViews names the key range lost
			}
			c.fail(o, &NodeLostError{Node: p.node, Cause: p.cause,
				Outcome: fmt.Sprintf("no replacement joined within %v (PS_RECOVERY_WAIT)", c.cfg.RecoveryWait)})
			return
		}
	}
	c.checkViews(o, now)
	if c.phase == PhaseReady {
		c.tickCheckpoints(o, now)
	}
}

// refusalGrace is how long a node that registers once the job is full
// waits for evidence that a node of its role may be dead (see
// suspectOfRole) before it is refused: ConnGrace, and with heartbeats two
// intervals more, time for a frozen node to miss two heartbeats.
func (c *Core) refusalGrace() time.Duration {
	if c.heartbeats() {
		return c.cfg.ConnGrace + 2*c.cfg.HeartbeatInterval
	}
	return c.cfg.ConnGrace
}

// FrozenError is the error of a server or worker that did not run for
// longer than PS_HEARTBEAT_TIMEOUT (its process was stopped, or starved of
// CPU): the job counted it dead, and may have given its place to a
// replacement.
type FrozenError struct {
	For, Timeout time.Duration
}

func (e *FrozenError) Error() string {
	return fmt.Sprintf("this process did not run for %v, longer than PS_HEARTBEAT_TIMEOUT (%v) (it was stopped, or starved): the job counted it dead and may have replaced it, so it stops", e.For.Round(time.Millisecond), e.Timeout)
}

// Unwrap makes errors.Is(err, ErrJobFailed) true: for this node the job is
// over.
func (e *FrozenError) Unwrap() error { return ErrJobFailed }

// failQuietly ends the job for this node only: it tells nobody.
func (c *Core) failQuietly(o *out, err error) {
	if c.phase == PhaseFailed || c.phase == PhaseDone {
		return
	}
	c.phase = PhaseFailed
	c.err = err
	c.log.Error().Err(err).Msg("stopping")
	o.notify(Event{Type: EventFailed, Err: err})
}

// fail ends the job with err. The scheduler tells every server and worker
// why.
func (c *Core) fail(o *out, err error) {
	if c.phase == PhaseFailed || c.phase == PhaseDone {
		return
	}
	c.phase = PhaseFailed
	c.err = err
	c.log.Error().Err(err).Msg("the job failed")
	var tell []int
	switch {
	case c.IsScheduler():
		for _, id := range c.members(message.ServerGroup + message.WorkerGroup) {
			if _, shared := c.shared[id]; !shared {
				tell = append(tell, id)
			}
		}
	case !errors.As(err, new(*AbortError)):
		// It found the fault itself: its peers may not have yet.
		for id := range c.connected {
			if id != message.Scheduler && id != int(c.me.ID) {
				tell = append(tell, id)
			}
		}
		slices.Sort(tell)
	}
	for _, id := range tell {
		o.send(NewNotice(id, NoticeAbort, abortReason(err), c.nextTS()))
	}
	o.notify(Event{Type: EventFailed, Err: err})
}

// Abort fails the job with err, found by this node's user (a store that
// cannot restore its snapshot, a worker that lost pushes it did not accept
// losing): its peers and the scheduler are told, and the scheduler stops
// the job.
func (c *Core) Abort(err error) []Output {
	if c.phase != PhaseReady && c.phase != PhaseJoining {
		return nil
	}
	var o out
	c.fail(&o, err)
	if !c.IsScheduler() {
		o.send(NewNotice(message.Scheduler, NoticeAbort, abortReason(err), c.nextTS()))
	}
	return o
}

// abortReason is what an abort notice says of err: its cause, not who
// passed it on.
func abortReason(err error) string {
	var a *AbortError
	if errors.As(err, &a) {
		return a.Reason
	}
	return err.Error()
}

// DeadNodes returns the nodes not heard from within timeout or found dead:
// at the scheduler, servers and workers; elsewhere, the scheduler. Only
// nodes found dead count when heartbeats are off. A timeout of 0 reports
// none.
func (c *Core) DeadNodes(timeout time.Duration, now time.Time) []int {
	if timeout <= 0 || c.phase < PhaseReady {
		return nil
	}
	var ids []int
	if c.IsScheduler() {
		ids = c.members(message.ServerGroup + message.WorkerGroup)
	} else {
		ids = []int{message.Scheduler}
	}
	var dead []int
	for _, id := range ids {
		p := c.peers[c.process(id)]
		if p == nil || p.left {
			continue
		}
		silent := c.heartbeats() && now.Sub(p.lastHeard) > timeout && now.Sub(c.startedAt) > timeout
		if p.dead || silent {
			dead = append(dead, id)
		}
	}
	return dead
}
