package control

import (
	"encoding/binary"
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

// TaggedRange returns the key range a Go node's KV message names in its
// body ("pslite:T", "pslite:G" or "pslite:D" then the range as a uvarint:
// see package kv), or -1. A worker of a managed job may send parts of one
// request for two ranges to one server (a server that took over a range),
// under one timestamp: their signatures must differ.
func TaggedRange(body []byte) int {
	const prefix = "pslite:"
	if len(body) < len(prefix)+2 || string(body[:len(prefix)]) != prefix {
		return -1
	}
	switch body[len(prefix)] {
	case 'T', 'G', 'D':
	default:
		return -1
	}
	r, n := binary.Uvarint(body[len(prefix)+1:])
	if n <= 0 || r >= 1<<20 {
		return -1
	}
	return int(r)
}

// sigOf returns msg's resend signature as sent by sender to recver:
// MsgSig, as C++ ps-lite computes it, mixed with the key range of a
// tagged message (which only Go nodes send and receive).
func sigOf(msg *message.Message, sender, recver int32, request bool) uint64 {
	sig := MsgSig(msg.Meta.AppID, sender, recver, msg.Meta.Timestamp, request)
	if r := TaggedRange(msg.Meta.Body); r >= 0 {
		sig ^= (uint64(r) + 1) * 0x9E3779B97F4A7C15
	}
	return sig
}

// Resend policy defaults.
const (
	// DefaultResendGiveUp is how long after its first send a message is
	// given up on by default: long enough to ride out a one-minute outage
	// and the TCP retransmission backoff that follows it (up to about a
	// minute more), short enough that a link gone for good ends in an error.
	DefaultResendGiveUp = 180 * time.Second
	// maxBackoff caps the doubling of the wait between resends, in
	// timeouts: after the 1st, 2nd, 3rd resend the next waits 2, 4, 8
	// timeouts, and 8 from then on.
	maxBackoff = 8
	// assumedRate is the rate, in bytes a second, a line is assumed to carry
	// until a large message has measured it: 1 MiB/s, slower than any
	// network a job runs on, so that a large message is not resent before
	// it can have arrived. Being slow to resend a large message costs
	// little: on a live connection only the receiver can lose a message, and
	// a connection that drops hands its messages back at once (Reconnected).
	assumedRate = 1 << 20
	// rateSample is the size from which a message's ACK measures its line's
	// rate (smaller ones measure the round trip, not the rate).
	rateSample = 1 << 20
)

// ResendConfig is the policy of a Resender.
type ResendConfig struct {
	// Timeout is how long a message may go unacknowledged, once it can
	// have arrived, before it is resent (PS_RESEND_TIMEOUT).
	Timeout time.Duration
	// GiveUp is how long after its first send a message still
	// unacknowledged is given up on (PS_RESEND_GIVEUP; 0 means
	// DefaultResendGiveUp).
	GiveUp time.Duration
	// MaxRetry, when positive, also gives a message up once it has been
	// resent this many times and is due again (PS_RESEND_MAX_RETRY).
	MaxRetry int
	// Forget, if set, is called (without the resender's lock) with every
	// message handed to Outgoing that the resender does not keep, or stops
	// keeping: acknowledged, answered, dropped (DropTo) or at ForgetAll;
	// not those Due returns as failed, which are the caller's. The van
	// gives back the memory a kept message held with it.
	Forget func(*message.Message)
}

// Resender is the bookkeeping of PS_RESEND: it keeps every message sent
// until its ACK arrives, says which to resend and which to give up on; it
// acknowledges received messages and suppresses duplicates. It is safe for
// concurrent use; the caller does the sending and tells it the time.
//
// When a message is due. Messages to one peer travel in order over one
// connection, so a message cannot arrive, and its ACK cannot come back,
// before everything sent to that peer ahead of it has arrived. The
// Resender keeps, per peer, the line of transmissions (first sends and
// resends) in the order they were handed to the transport. A message's
// timer starts only when it could have left: when it reaches the head of
// its line (everything ahead was acknowledged, or found to have arrived
// because something sent after it was), or when a later message's ACK
// shows that it arrived without its own ACK. It is then resent after the
// timeout, doubled at each resend up to maxBackoff timeouts, plus
// allowFactor times the time its bytes take at the line's measured rate
// (assumedRate until measured). So a message still queued behind others,
// or behind its own earlier transmission, is never resent, and a large
// message on a slow link is given the time to arrive. A resend goes to the
// back of the line, and the message it repeats leaves the head, so the
// messages behind it get their turn. An ACK of a message sent more than once does not say
// which transmission arrived, so it shows nothing about the others.
//
// An ACK says that a request arrived, not that it was handled: a server can
// die between the two. So a data request is kept, without resends, after
// its ACK until its response arrives; when the server is replaced, Reawait
// sends it again, to the replacement (maxAwaiting bounds how many are kept).
type Resender struct {
	cfg ResendConfig

	mu      sync.Mutex // guards sendBuf, unacked, lines and seen
	sendBuf map[uint64]*Pending
	unacked int // entries of sendBuf not acknowledged
	lines   map[int32]*line
	seen    sigRing

	forgotten []*message.Message // for cfg.Forget once the lock is released
}

// dropLocked stops keeping p (sig's entry of sendBuf).
func (r *Resender) dropLocked(sig uint64, p *Pending) {
	delete(r.sendBuf, sig)
	if r.cfg.Forget != nil {
		r.forgotten = append(r.forgotten, p.Msg)
	}
}

// unlock releases the lock, then tells cfg.Forget what was dropped.
func (r *Resender) unlock() {
	f := r.forgotten
	r.forgotten = nil
	r.mu.Unlock()
	for _, m := range f {
		r.cfg.Forget(m)
	}
}

// forget tells cfg.Forget, if set, about m.
func (r *Resender) forget(m *message.Message) {
	if r.cfg.Forget != nil {
		r.cfg.Forget(m)
	}
}

// ForgetAll stops keeping every message (the van stops).
func (r *Resender) ForgetAll() {
	r.mu.Lock()
	for sig, p := range r.sendBuf {
		r.dropLocked(sig, p)
	}
	r.unacked = 0
	clear(r.lines)
	r.unlock()
}

// maxAwaiting bounds the acknowledged requests kept for their responses.
const maxAwaiting = 1 << 16

// Pending is a message waiting for its ACK, or a request for its response.
type Pending struct {
	Msg     *message.Message
	sig     uint64
	size    int       // bytes of its data frames
	first   time.Time // first sent: the give-up time runs from here
	retries int
	acked   bool          // a request acknowledged, waiting for its response
	tx      *transmission // the latest transmission; nil once acked
}

// transmission is one send of a message: the first or a resend.
type transmission struct {
	p      *Pending
	sent   time.Time // handed to the transport
	head   time.Time // when it became the head of its line; zero before
	passed time.Time // when a later message's ACK showed it arrived; zero before
	inLine bool
}

// line is the transmissions to one peer that may not have arrived yet, in
// the order they were sent; the first is the head.
type line struct {
	q      []*transmission
	rate   float64   // measured bytes a second (the lower of the average and the last sample); 0 until measured
	avg    float64   // moving average of the samples
	downAt time.Time // when the connection dropped; zero while it is up
}

// push appends tx at now.
func (l *line) push(tx *transmission, now time.Time) {
	tx.inLine, tx.sent = true, now
	l.q = append(l.q, tx)
	if len(l.q) == 1 {
		tx.head = now
	}
}

// remove takes tx out of the line; if it was the head, the next one
// becomes the head at now. Lines are drained from the front, so tx is
// usually near it.
func (l *line) remove(tx *transmission, now time.Time) {
	if !tx.inLine {
		return
	}
	tx.inLine = false
	i := slices.Index(l.q, tx)
	if i < 0 {
		return
	}
	l.q = slices.Delete(l.q, i, i+1)
	if i == 0 && len(l.q) > 0 {
		l.q[0].head = now
	}
}

// arrived takes tx, whose ACK came at now, and everything ahead of it out of
// the line: those arrived too. It measures the line's rate on large
// messages.
func (l *line) arrived(tx *transmission, now time.Time) {
	i := slices.Index(l.q, tx)
	if i < 0 {
		return
	}
	for _, ahead := range l.q[:i] {
		ahead.inLine, ahead.passed = false, now
	}
	tx.inLine = false
	if i == 0 && tx.p.size >= rateSample {
		if d := now.Sub(tx.head).Seconds(); d > 0 {
			sample := float64(tx.p.size) / d
			if l.avg == 0 {
				l.avg = sample
			} else {
				l.avg = 0.75*l.avg + 0.25*sample
			}
			l.rate = min(l.avg, sample)
		}
	}
	clear(l.q[:i+1])
	l.q = l.q[i+1:]
	if len(l.q) > 0 {
		l.q[0].head = now
	}
}

// allowFactor is how many times over a large message is given the time its
// bytes take at the line's measured rate. On a lossy link TCP's
// retransmissions make one transfer take twice as long as the one before:
// at 5 ms and 10% loss, twice over still let a 40 MB request be resent
// while it was arriving, in one job of three (each such resend repeats
// tens of megabytes). Waiting longer costs little: on a live connection
// only the receiver can lose a message, and a connection that drops hands
// its messages back at once (Connection).
const allowFactor = 4

// allowance is the time size bytes take on the line, allowFactor times
// over.
func (l *line) allowance(size int) time.Duration {
	rate := l.rate
	if rate <= 0 {
		rate = assumedRate
	}
	return time.Duration(allowFactor * float64(size) / rate * float64(time.Second))
}

// awaitsResponse reports whether a message is a data request, kept after
// its ACK until the response comes.
func awaitsResponse(m *message.Message) bool { return m.Meta.Request && !m.Meta.IsControl() }

// NewResender returns a resender with the policy cfg.
func NewResender(cfg ResendConfig) *Resender {
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.GiveUp <= 0 {
		cfg.GiveUp = DefaultResendGiveUp
	}
	return &Resender{
		cfg:     cfg,
		sendBuf: make(map[uint64]*Pending),
		lines:   make(map[int32]*line),
		seen:    newSigRing(SeenCapacity),
	}
}

// Timeout returns the resend timeout.
func (r *Resender) Timeout() time.Duration { return r.cfg.Timeout }

// lineTo returns the line to peer id.
func (r *Resender) lineTo(id int32) *line {
	l := r.lines[id]
	if l == nil {
		l = &line{}
		r.lines[id] = l
	}
	return l
}

// Outgoing remembers msg, sent by myID at now, until it is acknowledged.
// A message whose frames the sender may reuse (not ZeroCopy) is kept as a
// copy.
func (r *Resender) Outgoing(msg *message.Message, myID int32, now time.Time) {
	if msg.Meta.Control.Cmd == message.CmdAck || msg.Meta.Control.Cmd == message.CmdTerminate || msg.Meta.Timestamp == empty {
		r.forget(msg)
		return
	}
	sig := sigOf(msg, myID, msg.Meta.Recver, msg.Meta.Request)
	size := 0
	for _, f := range msg.Data {
		size += len(f)
	}
	if !msg.ZeroCopy {
		cp := msg.Detached()
		for i, f := range cp.Data {
			cp.Data[i] = slices.Clone(f) // the copy's frames are its own
		}
		r.forget(msg)
		msg = cp
	}
	r.mu.Lock()
	defer r.unlock()
	if p, ok := r.sendBuf[sig]; ok {
		if p.Msg != msg {
			r.forgotten = append(r.forgotten, msg)
		}
		return
	}
	p := &Pending{Msg: msg, sig: sig, size: size, first: now}
	p.tx = &transmission{p: p}
	r.lineTo(msg.Meta.Recver).push(p.tx, now)
	r.sendBuf[sig] = p
	r.unacked++
}

// Incoming handles a message received at now: it consumes ACKs, and for
// everything else returns the ACK to send back. drop reports a message the
// receiver must not handle (an ACK, or a duplicate).
func (r *Resender) Incoming(msg *message.Message, now time.Time) (ack *message.Message, drop bool) {
	switch msg.Meta.Control.Cmd {
	case message.CmdTerminate:
		return nil, false
	case message.CmdAck:
		r.mu.Lock()
		r.ackLocked(msg.Meta.Control.MsgSig, now)
		r.unlock()
		return nil, true
	}
	if msg.Meta.Sender == empty || msg.Meta.Timestamp == empty {
		return nil, false // a node without an id cannot be acknowledged
	}
	sig := sigOf(msg, msg.Meta.Sender, msg.Meta.Recver, msg.Meta.Request)
	r.mu.Lock()
	dup := !r.seen.add(sig)
	if !msg.Meta.Request && !msg.Meta.IsControl() {
		// A response: its request is done with (it also says the request
		// arrived, should its ACK be late or lost).
		req := sigOf(msg, msg.Meta.Recver, msg.Meta.Sender, true)
		if p, ok := r.sendBuf[req]; ok {
			if !p.acked {
				r.unacked--
				r.leaveLineLocked(p, now)
			}
			r.dropLocked(req, p)
		}
	}
	r.unlock()
	ack = message.New()
	ack.Meta.Recver = msg.Meta.Sender
	ack.Meta.Control.Cmd = message.CmdAck
	ack.Meta.Control.MsgSig = sig
	return ack, dup
}

// leaveLineLocked takes the arrived p out of its line. Sent once, its
// arrival shows that everything ahead of it arrived too; sent more than
// once, nothing says which transmission arrived.
func (r *Resender) leaveLineLocked(p *Pending, now time.Time) {
	tx := p.tx
	p.tx = nil
	if tx == nil || !tx.inLine {
		return
	}
	l := r.lineTo(p.Msg.Meta.Recver)
	if p.retries == 0 {
		l.arrived(tx, now)
	} else {
		l.remove(tx, now)
	}
}

// ackLocked handles the ACK of sig: the message is done with, or, for a
// data request, kept until its response.
func (r *Resender) ackLocked(sig uint64, now time.Time) {
	p, ok := r.sendBuf[sig]
	if !ok || p.acked {
		return
	}
	r.unacked--
	r.leaveLineLocked(p, now)
	if !awaitsResponse(p.Msg) || len(r.sendBuf)-r.unacked > maxAwaiting {
		r.dropLocked(sig, p)
		return
	}
	p.acked = true
}

// Reawait returns, to send now, every message for node id still waiting for
// its ACK or its response, in the order they were first sent: id was
// replaced, and what its predecessor had not answered must go to the
// replacement. Their timers start again at now.
func (r *Resender) Reawait(id int32, now time.Time) []*message.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ps []*Pending
	for _, p := range r.sendBuf {
		if p.Msg.Meta.Recver == id {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, func(a, b *Pending) int { return a.first.Compare(b.first) })
	l := &line{}
	r.lines[id] = l
	msgs := make([]*message.Message, 0, len(ps))
	for _, p := range ps {
		if p.acked {
			p.acked = false
			r.unacked++
		}
		p.first, p.retries = now, 0
		p.tx = &transmission{p: p}
		l.push(p.tx, now)
		msgs = append(msgs, p.Msg)
	}
	return msgs
}

// Connection tells the resender, at now, that the connection to node id
// went down (up false) or came up. Messages are lost on a live connection
// only if the receiver drops them, but a connection that drops may lose
// what was on its way: when it comes back up, every transmission sent
// before it dropped counts as having arrived without its ACK, so it is
// resent one timeout later whatever its size. (Some may still arrive,
// from ZeroMQ's queue: their resends are duplicates, dropped.)
func (r *Resender) Connection(id int32, up bool, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.lines[id]
	switch {
	case l == nil:
	case !up:
		if l.downAt.IsZero() {
			l.downAt = now
		}
	case !l.downAt.IsZero():
		keep := l.q[:0]
		for _, tx := range l.q {
			if !tx.sent.After(l.downAt) {
				tx.inLine, tx.passed = false, now
				continue
			}
			keep = append(keep, tx)
		}
		clear(l.q[len(keep):])
		l.q = keep
		if len(l.q) > 0 && l.q[0].head.IsZero() {
			l.q[0].head = now
		}
		l.downAt = time.Time{}
	}
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
	defer r.unlock()
	for sig, p := range r.sendBuf {
		if p.Msg.Meta.Recver == id {
			if !p.acked {
				r.unacked--
			}
			r.dropLocked(sig, p)
		}
	}
	delete(r.lines, id)
}

// Cancel forgets the request with timestamp ts of app appID for key range
// rg (-1: untagged) that this node (myID) sent to node to: its sender sent
// it elsewhere (to another server of a replicated range), and it must not
// reach to, or a replacement of to, any more.
func (r *Resender) Cancel(appID, myID, to, ts int32, rg int) {
	sig := MsgSig(appID, myID, to, ts, true)
	if rg >= 0 {
		sig ^= (uint64(rg) + 1) * 0x9E3779B97F4A7C15
	}
	r.mu.Lock()
	defer r.unlock()
	if p, ok := r.sendBuf[sig]; ok {
		if !p.acked {
			r.unacked--
			r.leaveLineLocked(p, time.Time{})
		}
		r.dropLocked(sig, p)
	}
}

// Due returns, at now, the messages to resend and those given up on (which
// it forgets). Call Resent for each message actually resent.
func (r *Resender) Due(now time.Time) (resend []*Pending, failed []*message.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for sig, p := range r.sendBuf {
		if p.acked {
			continue
		}
		allow := r.lineTo(p.Msg.Meta.Recver).allowance(p.size)
		if now.Sub(p.first) > r.cfg.GiveUp+allow {
			r.failLocked(sig, p, now)
			failed = append(failed, p.Msg)
			continue
		}
		wait := r.cfg.Timeout * time.Duration(min(1<<p.retries, maxBackoff))
		var start time.Time
		switch tx := p.tx; {
		case !tx.passed.IsZero():
			start = tx.passed // it can have arrived: only the timeout
		case tx.inLine && !tx.head.IsZero():
			start, wait = tx.head, wait+allow // its bytes are on their way
		default:
			continue // queued behind others: they go first
		}
		if now.Sub(start) < wait {
			continue
		}
		if r.cfg.MaxRetry > 0 && p.retries >= r.cfg.MaxRetry {
			r.failLocked(sig, p, now)
			failed = append(failed, p.Msg)
			continue
		}
		resend = append(resend, p)
	}
	// Oldest first, so that a line is refilled in its order.
	slices.SortFunc(resend, func(a, b *Pending) int { return a.first.Compare(b.first) })
	return resend, failed
}

// failLocked forgets p, given up on.
func (r *Resender) failLocked(sig uint64, p *Pending, now time.Time) {
	delete(r.sendBuf, sig)
	r.unacked--
	if p.tx != nil {
		r.lineTo(p.Msg.Meta.Recver).remove(p.tx, now)
	}
}

// Resent records that p was sent again at now, and returns how many
// resends it has had. The new transmission goes to the back of p's line,
// and the one it repeats leaves the line.
func (r *Resender) Resent(p *Pending, now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.acked || p.tx == nil || r.sendBuf[p.sig] != p {
		return p.retries // acknowledged or given up on meanwhile
	}
	l := r.lineTo(p.Msg.Meta.Recver)
	l.remove(p.tx, now)
	p.retries++
	p.tx = &transmission{p: p}
	l.push(p.tx, now)
	return p.retries
}

// FailError returns the error of a message given up on.
func (r *Resender) FailError(m *message.Message) error {
	limit := ""
	if r.cfg.MaxRetry > 0 {
		limit = fmt.Sprintf(" or %d resends (PS_RESEND_MAX_RETRY)", r.cfg.MaxRetry)
	}
	return fmt.Errorf("%w by %s within %v (PS_RESEND_GIVEUP)%s", ErrNoAck, message.DescribeID(int(m.Meta.Recver)), r.cfg.GiveUp, limit)
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
