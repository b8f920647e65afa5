package van

import (
	"sync"
	"time"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van/control"
)

// resendDriver runs a control.Resender: it resends what is due on the van's
// clock and tells the handler about messages given up on.
type resendDriver struct {
	v        *Van
	r        *control.Resender
	stopTick func()

	mu       sync.Mutex         // guards again and redialed
	again    []*message.Message // ACKs to send once more at the next tick
	redialed map[int32]bool     // peers connected to again (see check)
}

// redialAfter is the resend of a message after which a node that replaced
// a dead one connects again to the peer that has acknowledged nothing of
// it (see check).
const redialAfter = 2

// ackAgain sends ack once more at the resender's next tick. C++ ps-lite
// records a message for resending only after it has sent it, so an ACK
// that arrives before the record (a fast peer's) is lost and the message
// resent; and a message left unacknowledged when it stops makes its resend
// thread abort the process. Peers that present no process incarnation
// (C++ nodes) get their ACKs twice.
func (d *resendDriver) ackAgain(ack *message.Message) {
	d.mu.Lock()
	if len(d.again) < maxAckAgain {
		d.again = append(d.again, ack)
	}
	d.mu.Unlock()
}

// maxAckAgain bounds the ACKs waiting to be sent again.
const maxAckAgain = 1 << 14

func newResendDriver(v *Van, cfg control.ResendConfig) *resendDriver {
	// A kept message may hold lent memory (keepable): give it back once
	// the message is no longer kept.
	cfg.Forget = func(m *message.Message) { m.Release() }
	d := &resendDriver{v: v, r: control.NewResender(cfg)}
	d.stopTick = ticker(v.clock, d.r.Timeout()/4, d.check)
	return d
}

func (d *resendDriver) check() {
	d.mu.Lock()
	again := d.again
	d.again = nil
	d.mu.Unlock()
	for _, ack := range again {
		if _, err := d.v.trySend(ack); err != nil {
			d.v.log.Debug().Err(err).Msg("ACK not sent again")
		}
	}
	now := d.v.clock.Now()
	resend, failed := d.r.Due(now)
	for _, p := range resend {
		// A resend that would wait (the peer is not reading) is tried again
		// on the next tick rather than piling onto a full queue.
		sent, err := d.v.resend(p.Msg)
		if err != nil {
			d.v.log.Debug().Err(err).Msg("resend deferred")
			continue
		}
		d.v.resentMsgs.Add(1)
		d.v.resentBytes.Add(int64(sent))
		n := d.r.Resent(p, now)
		d.v.metrics.Resent()
		d.v.log.Info().Str("msg", p.Msg.String()).Int("retry", n).Msg("no ACK in time; resent")
		if n == redialAfter {
			d.redial(p.Msg.Meta.Recver, now)
		}
	}
	for _, m := range failed {
		err := d.r.FailError(m)
		d.v.log.Warn().Err(err).Str("msg", m.String()).Msg("giving up on a message")
		d.v.handler.HandleSendFailure(m, err)
		m.Release()
	}
}

// redial connects again, once, to a peer that acknowledged nothing of a
// message sent twice, at a node that replaced a dead one, while its peers
// let its connections take over its predecessor's identity. A peer's
// libzmq refuses the identity of a connection that arrives before the
// peer has heard of the replacement (its predecessor, frozen, still holds
// the identity), and a refused connection stays refused: all the
// replacement sends on it is lost. A new connection arrives after.
func (d *resendDriver) redial(id int32, now time.Time) {
	if until := d.v.recoveredUntil.Load(); until == 0 || now.UnixNano() >= until {
		return
	}
	d.mu.Lock()
	done := d.redialed[id]
	if d.redialed == nil {
		d.redialed = make(map[int32]bool)
	}
	d.redialed[id] = true
	d.mu.Unlock()
	if done || !d.v.redial(int(id)) {
		return
	}
	d.v.log.Warn().Str("node", message.DescribeID(int(id))).Msg("a replacement's messages to a peer went unacknowledged: connecting to it again")
}

// reawait sends node id, which replaced a dead node, every message its
// predecessor left unacknowledged or unanswered.
func (d *resendDriver) reawait(id int) {
	msgs := d.r.Reawait(int32(id), d.v.clock.Now())
	for _, m := range msgs {
		sent, err := d.v.resend(m)
		if err != nil {
			d.v.log.Debug().Err(err).Msg("resend to a replacement deferred")
			continue
		}
		d.v.resentMsgs.Add(1)
		d.v.resentBytes.Add(int64(sent))
	}
	if len(msgs) > 0 {
		d.v.log.Info().Int("messages", len(msgs)).Str("node", message.DescribeID(id)).Msg("sent again to a replacement what its predecessor left unanswered")
	}
}

// drain waits, in real time, until every sent message is acknowledged,
// limit has passed or stop is closed.
func (d *resendDriver) drain(limit time.Duration, stop <-chan struct{}) {
	deadline := time.Now().Add(limit)
	poll := time.NewTicker(min(d.r.Timeout()/4, 20*time.Millisecond))
	defer poll.Stop()
	for d.r.Len() > 0 && time.Now().Before(deadline) {
		select {
		case <-poll.C:
		case <-stop:
			return
		}
	}
}

func (d *resendDriver) close() {
	d.stopTick()
	d.r.ForgetAll()
}
