package van

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gopslite/pslite/message"
)

// seenCapacity bounds how many received message signatures are remembered
// for duplicate suppression. Resends come within a few resend timeouts of
// the original, so this covers well over 10,000 messages a second.
const seenCapacity = 1 << 17

// ErrNoAck is the error of a message that was never acknowledged.
var ErrNoAck = fmt.Errorf("van: message not acknowledged")

// MsgSig returns the signature C++ ps-lite's resender gives a message, with
// the same bit layout (and the same sign extension of timestamp<<1):
// uint16(app_id)<<48 | uint8(sender)<<40 | uint8(recver)<<32 | timestamp<<1 | request.
func MsgSig(appID, sender, recver, timestamp int32, request bool) uint64 {
	sig := uint64(uint16(appID))<<48 | uint64(uint8(sender))<<40 | uint64(uint8(recver))<<32
	sig |= uint64(int64(int32(uint32(timestamp) << 1)))
	if request {
		sig |= 1
	}
	return sig
}

// resender keeps every message sent until its ACK arrives, resends it after
// the timeout (the k-th resend k timeouts after the first send, as C++ does),
// and gives up maxRetry+1 timeouts after the send. It also acknowledges received messages
// and suppresses duplicates.
type resender struct {
	v        *Van
	timeout  time.Duration
	maxRetry int

	mu      sync.Mutex // guards sendBuf and seen
	sendBuf map[uint64]*outgoing
	seen    sigRing

	stop chan struct{}
	done chan struct{}
}

type outgoing struct {
	msg     *message.Message
	sent    time.Time
	retries int
}

func newResender(v *Van, timeout time.Duration, maxRetry int) *resender {
	r := &resender{
		v:        v,
		timeout:  timeout,
		maxRetry: maxRetry,
		sendBuf:  make(map[uint64]*outgoing),
		seen:     newSigRing(seenCapacity),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go r.monitor()
	return r
}

// addOutgoing remembers a sent message until it is acknowledged.
func (r *resender) addOutgoing(msg *message.Message, myID int32) {
	if msg.Meta.Control.Cmd == message.CmdAck || msg.Meta.Control.Cmd == message.CmdTerminate || msg.Meta.Timestamp == emptyID {
		return
	}
	sig := MsgSig(msg.Meta.AppID, myID, msg.Meta.Recver, msg.Meta.Timestamp, msg.Meta.Request)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.sendBuf[sig]; ok {
		return
	}
	if !msg.ZeroCopy {
		// The sender may reuse the frames once Send returns (the transport
		// copies them); a resend must not read them then.
		cp := *msg
		cp.Data = make([][]byte, len(msg.Data))
		for i, f := range msg.Data {
			cp.Data[i] = slices.Clone(f)
		}
		msg = &cp
	}
	r.sendBuf[sig] = &outgoing{msg: msg, sent: time.Now()}
}

// addIncoming handles a received message: it consumes ACKs, acknowledges
// everything else, and reports whether msg must be dropped (an ACK or a
// duplicate).
func (r *resender) addIncoming(msg *message.Message) bool {
	switch msg.Meta.Control.Cmd {
	case message.CmdTerminate:
		return false
	case message.CmdAck:
		r.mu.Lock()
		delete(r.sendBuf, msg.Meta.Control.MsgSig)
		r.mu.Unlock()
		return true
	}
	if msg.Meta.Sender == emptyID || msg.Meta.Timestamp == emptyID {
		return false // a node without an id cannot be acknowledged
	}
	sig := MsgSig(msg.Meta.AppID, msg.Meta.Sender, msg.Meta.Recver, msg.Meta.Timestamp, msg.Meta.Request)
	r.mu.Lock()
	dup := !r.seen.add(sig)
	r.mu.Unlock()
	ack := message.New()
	ack.Meta.Recver = msg.Meta.Sender
	ack.Meta.Control.Cmd = message.CmdAck
	ack.Meta.Control.MsgSig = sig
	// Never wait here (this is the receive loop): an ACK that cannot be
	// queued is dropped, and the peer's resend is acknowledged later.
	if _, err := r.v.trySend(ack); err != nil {
		r.v.log.Debug().Err(err).Int32("to", msg.Meta.Sender).Msg("ACK not sent")
	}
	if dup {
		r.v.log.Debug().Str("msg", msg.String()).Msg("dropping a duplicate")
	}
	return dup
}

func (r *resender) monitor() {
	defer close(r.done)
	tick := time.NewTicker(r.timeout / 4)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-tick.C:
			r.check(now)
		}
	}
}

func (r *resender) check(now time.Time) {
	var resend []*outgoing
	var failed []*message.Message
	deadline := r.timeout * time.Duration(r.maxRetry+1)
	r.mu.Lock()
	for sig, o := range r.sendBuf {
		switch {
		case now.Sub(o.sent) > deadline:
			delete(r.sendBuf, sig)
			failed = append(failed, o.msg)
		case now.Sub(o.sent) > r.timeout*time.Duration(1+o.retries):
			resend = append(resend, o)
		}
	}
	r.mu.Unlock()
	for _, o := range resend {
		// A resend that would wait (the peer is not reading) is tried again
		// on the next tick rather than piling onto a full queue.
		if _, err := r.v.trySend(o.msg); err != nil {
			r.v.log.Debug().Err(err).Msg("resend deferred")
			continue
		}
		r.mu.Lock()
		o.retries++
		r.mu.Unlock()
		r.v.log.Info().Str("msg", o.msg.String()).Int("retry", o.retries).Msg("no ACK in time; resent")
	}
	for _, m := range failed {
		err := fmt.Errorf("%w by node %d within %v (%d resends)", ErrNoAck, m.Meta.Recver, deadline, r.maxRetry)
		r.v.log.Warn().Err(err).Str("msg", m.String()).Msg("giving up on a message")
		r.v.handler.HandleSendFailure(m, err)
	}
}

// pending returns the number of messages not yet acknowledged.
func (r *resender) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sendBuf)
}

// drain waits until every sent message is acknowledged or the deadline
// passes.
func (r *resender) drain(deadline time.Time) {
	for r.pending() > 0 && time.Now().Before(deadline) {
		select {
		case <-r.done:
			return
		case <-time.After(r.timeout / 4):
		}
	}
}

func (r *resender) close() {
	close(r.stop)
	<-r.done
}

// sigRing is a set of the most recent signatures, bounded in size: adding
// to a full ring forgets the oldest.
type sigRing struct {
	set  map[uint64]struct{}
	ring []uint64
	next int
	full bool
}

func newSigRing(n int) sigRing {
	return sigRing{set: make(map[uint64]struct{}, n), ring: make([]uint64, n)}
}

// add inserts sig and reports whether it was new.
func (s *sigRing) add(sig uint64) bool {
	if _, ok := s.set[sig]; ok {
		return false
	}
	if s.full {
		delete(s.set, s.ring[s.next])
	}
	s.ring[s.next] = sig
	s.set[sig] = struct{}{}
	s.next++
	if s.next == len(s.ring) {
		s.next = 0
		s.full = true
	}
	return true
}
