package control

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gopslite/pslite/message"
)

// SeenCapacity bounds how many received message signatures a Resender
// remembers to suppress duplicates. Resends come within a few resend
// timeouts of the original, so this covers well over 10,000 messages a
// second.
const SeenCapacity = 1 << 17

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

// Resender is the bookkeeping of PS_RESEND: it keeps every message sent
// until its ACK arrives, says which to resend (the k-th resend k timeouts
// after the first send, as C++ does) and which to give up on (maxRetry+1
// timeouts after the send); it acknowledges received messages and
// suppresses duplicates. It is safe for concurrent use; the caller does the
// sending and tells it the time.
//
// An ACK says that a request arrived, not that it was handled: a server can
// die between the two. So a data request is kept, without resends, after
// its ACK until its response arrives; when the server is replaced, Reawait
// sends it again, to the replacement (maxAwaiting bounds how many are kept).
type Resender struct {
	timeout  time.Duration
	maxRetry int

	mu      sync.Mutex // guards sendBuf, unacked and seen
	sendBuf map[uint64]*Pending
	unacked int // entries of sendBuf not acknowledged
	seen    sigRing
}

// maxAwaiting bounds the acknowledged requests kept for their responses.
const maxAwaiting = 1 << 16

// Pending is a message waiting for its ACK, or a request for its response.
type Pending struct {
	Msg     *message.Message
	sig     uint64
	sent    time.Time
	retries int
	acked   bool // a request acknowledged, waiting for its response
}

// awaitsResponse reports whether a message is a data request, kept after
// its ACK until the response comes.
func awaitsResponse(m *message.Message) bool { return m.Meta.Request && !m.Meta.IsControl() }

// NewResender returns a resender that resends after timeout and gives up
// after maxRetry resends.
func NewResender(timeout time.Duration, maxRetry int) *Resender {
	return &Resender{
		timeout:  timeout,
		maxRetry: maxRetry,
		sendBuf:  make(map[uint64]*Pending),
		seen:     newSigRing(SeenCapacity),
	}
}

// Timeout returns the resend timeout.
func (r *Resender) Timeout() time.Duration { return r.timeout }

// Budget returns how long after its send a message is given up on.
func (r *Resender) Budget() time.Duration { return r.timeout * time.Duration(r.maxRetry+1) }

// Outgoing remembers msg, sent by myID at now, until it is acknowledged.
// A message whose frames the sender may reuse (not ZeroCopy) is kept as a
// copy.
func (r *Resender) Outgoing(msg *message.Message, myID int32, now time.Time) {
	if msg.Meta.Control.Cmd == message.CmdAck || msg.Meta.Control.Cmd == message.CmdTerminate || msg.Meta.Timestamp == empty {
		return
	}
	sig := MsgSig(msg.Meta.AppID, myID, msg.Meta.Recver, msg.Meta.Timestamp, msg.Meta.Request)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.sendBuf[sig]; ok {
		return
	}
	if !msg.ZeroCopy {
		cp := *msg
		cp.Data = make([][]byte, len(msg.Data))
		for i, f := range msg.Data {
			cp.Data[i] = slices.Clone(f)
		}
		msg = &cp
	}
	r.sendBuf[sig] = &Pending{Msg: msg, sig: sig, sent: now}
	r.unacked++
}

// Incoming handles a received message: it consumes ACKs, and for
// everything else returns the ACK to send back. drop reports a message the
// receiver must not handle (an ACK, or a duplicate).
func (r *Resender) Incoming(msg *message.Message) (ack *message.Message, drop bool) {
	switch msg.Meta.Control.Cmd {
	case message.CmdTerminate:
		return nil, false
	case message.CmdAck:
		r.mu.Lock()
		r.ackLocked(msg.Meta.Control.MsgSig)
		r.mu.Unlock()
		return nil, true
	}
	if msg.Meta.Sender == empty || msg.Meta.Timestamp == empty {
		return nil, false // a node without an id cannot be acknowledged
	}
	sig := MsgSig(msg.Meta.AppID, msg.Meta.Sender, msg.Meta.Recver, msg.Meta.Timestamp, msg.Meta.Request)
	r.mu.Lock()
	dup := !r.seen.add(sig)
	if !msg.Meta.Request && !msg.Meta.IsControl() {
		// A response: its request is done with (it also says the request
		// arrived, should its ACK be late or lost).
		req := MsgSig(msg.Meta.AppID, msg.Meta.Recver, msg.Meta.Sender, msg.Meta.Timestamp, true)
		if p, ok := r.sendBuf[req]; ok {
			if !p.acked {
				r.unacked--
			}
			delete(r.sendBuf, req)
		}
	}
	r.mu.Unlock()
	ack = message.New()
	ack.Meta.Recver = msg.Meta.Sender
	ack.Meta.Control.Cmd = message.CmdAck
	ack.Meta.Control.MsgSig = sig
	return ack, dup
}

// ackLocked handles the ACK of sig: the message is done with, or, for a
// data request, kept until its response.
func (r *Resender) ackLocked(sig uint64) {
	p, ok := r.sendBuf[sig]
	if !ok || p.acked {
		return
	}
	r.unacked--
	if !awaitsResponse(p.Msg) || len(r.sendBuf)-r.unacked > maxAwaiting {
		delete(r.sendBuf, sig)
		return
	}
	p.acked = true
}

// Reawait returns, to send now, every message for node id still waiting for
// its ACK or its response: id was replaced, and what its predecessor had not
// answered must go to the replacement. Their timers start again at now.
func (r *Resender) Reawait(id int32, now time.Time) []*message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	var msgs []*message.Message
	for _, p := range r.sendBuf {
		if p.Msg.Meta.Recver != id {
			continue
		}
		if p.acked {
			p.acked = false
			r.unacked++
		}
		p.sent, p.retries = now, 0
		msgs = append(msgs, p.Msg)
	}
	return msgs
}

// ForgetSender forgets the signatures received from node id: a node that
// took a dead node's id numbers its messages afresh, and they must not pass
// for duplicates of its predecessor's.
func (r *Resender) ForgetSender(id int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen.forget(func(sig uint64) bool { return uint8(sig>>40) == uint8(id) })
}

// DropTo forgets the messages waiting for an ACK from node id (a node found
// dead: its replacement gets what it needs afresh).
func (r *Resender) DropTo(id int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for sig, p := range r.sendBuf {
		if p.Msg.Meta.Recver == id {
			if !p.acked {
				r.unacked--
			}
			delete(r.sendBuf, sig)
		}
	}
}

// Due returns, at now, the messages to resend and those given up on (which
// it forgets). Call Resent for each message actually resent.
func (r *Resender) Due(now time.Time) (resend []*Pending, failed []*message.Message) {
	deadline := r.Budget()
	r.mu.Lock()
	defer r.mu.Unlock()
	for sig, p := range r.sendBuf {
		switch {
		case p.acked:
		case now.Sub(p.sent) > deadline:
			delete(r.sendBuf, sig)
			r.unacked--
			failed = append(failed, p.Msg)
		case now.Sub(p.sent) > r.timeout*time.Duration(1+p.retries):
			resend = append(resend, p)
		}
	}
	return resend, failed
}

// Resent counts one resend of p and returns how many it has had.
func (r *Resender) Resent(p *Pending) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	p.retries++
	return p.retries
}

// FailError returns the error of a message given up on.
func (r *Resender) FailError(m *message.Message) error {
	return fmt.Errorf("%w by %s within %v (%d resends)", ErrNoAck, message.DescribeID(int(m.Meta.Recver)), r.Budget(), r.maxRetry)
}

// Len returns the number of messages not yet acknowledged.
func (r *Resender) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unacked
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

// forget removes the signatures for which match is true.
func (s *sigRing) forget(match func(uint64) bool) {
	for sig := range s.set {
		if match(sig) {
			delete(s.set, sig)
		}
	}
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
