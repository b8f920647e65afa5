package replica

import (
	"errors"
	"slices"

	"github.com/rs/zerolog"
)

// EntryKind says what an entry of a range's stream is.
type EntryKind uint8

// Entry kinds. The values are part of the protocol between Go servers.
const (
	// EntryRequest is a worker's request that changes the store.
	EntryRequest EntryKind = 1
	// EntryCut is a snapshot to disk: every server holding the range
	// writes the range as of this point (Gen numbers the snapshot).
	EntryCut EntryKind = 2
)

// Request is a worker's request for one range, as a server gets it.
type Request[P any] struct {
	Origin Origin
	Range  int
	// Epoch is the view epoch the worker routed by (Tagged requests only).
	Epoch uint64
	// Tagged marks a request from a Go worker that routes by views. Others
	// (C++ workers) send each range to its home server.
	Tagged bool
	// Changes says that applying the request changes the store: it is
	// replicated, numbered and remembered; other requests are reads.
	Changes bool
	Payload P
}

// Forward carries one entry of a range's stream from a server to the next
// one of the chain, or to a server copying the range.
type Forward[P any] struct {
	From  int    // sender's rank
	Inc   uint64 // sender's incarnation
	Epoch uint64 // sender's view epoch
	Range int
	LSN   uint64
	Kind  EntryKind
	// Gen is, for a cut, the snapshot it takes; for a request, the last
	// snapshot cut before it in the stream.
	Gen     uint64
	Origin  Origin
	Payload P
}

// Ack tells the previous server of a chain that the sender has applied,
// and passed on to the end of the chain, every entry of the range up to
// LSN. The end of the chain is that of the range's Version: an ack means
// nothing in another version (the chain after the sender may differ), so
// every server says again how far it is whenever the version changes.
type Ack struct {
	From    int
	Inc     uint64
	Epoch   uint64
	Range   int
	Version uint64
	LSN     uint64
}

// Snapshot is a copy of a range sent to a server joining its chain: the
// store's part (Data, the driver's) as of LSN, and the requests applied.
type Snapshot[P any] struct {
	From    int
	Inc     uint64
	Epoch   uint64
	Range   int
	LSN     uint64
	Gen     uint64
	Applied []Applied
	Data    P
}

// ReportKind says what a Report tells the scheduler.
type ReportKind uint8

// Report kinds.
const (
	// ReportSynced: Range's tail says that Joiner has copied the range and
	// has every entry since, as of Version.
	ReportSynced ReportKind = iota + 1
	// ReportDrained: the server, Range's head, has replicated everything
	// it applied (up to LSN) at Version.
	ReportDrained
	// ReportCut: every server holding Range has written snapshot Gen.
	ReportCut
)

// Report is what a server tells the scheduler.
type Report struct {
	Kind    ReportKind
	Range   int
	Version uint64
	LSN     uint64
	Gen     uint64
	Joiner  int // ReportSynced
}

// OutputKind says what an Output asks the driver to do.
type OutputKind int

// Output kinds.
const (
	// OutApply: apply the entry (Forward, or at the head Request) to the
	// store. At the head (Head set) keep its answer for OutRespond; keep a
	// small answer with SetAnswer in any case.
	OutApply OutputKind = iota + 1
	// OutRead: answer Request, a read, from the store now.
	OutRead
	// OutCut: write snapshot Gen of Range to disk, as the store holds it
	// now (everything up to LSN); then call CutWritten.
	OutCut
	// OutForward: send Forward to server To.
	OutForward
	// OutAck: send Ack to server To.
	OutAck
	// OutSnapshot: send server To a Snapshot of Range: the store's part now
	// (as of LSN), with Gen and Applied.
	OutSnapshot
	// OutRestore: replace the store's part of Range with Snapshot.Data.
	OutRestore
	// OutLoad: replace the store's part of Range with what snapshot Gen on
	// disk holds of it (Gen 0: nothing): the range was lost, and this
	// server restarts it.
	OutLoad
	// OutRespond: answer Request with the answer its OutApply kept.
	OutRespond
	// OutRespondAgain: answer Request, applied before: with Answer, or,
	// when nil, with what the store holds now.
	OutRespondAgain
	// OutRedirect: tell Request's sender to send it to Range's head once it
	// has a view of Epoch or later.
	OutRedirect
	// OutRefuse: tell server To that its message for Range is not taken in
	// view Epoch (it is no longer where it thinks it is).
	OutRefuse
	// OutReport: tell the scheduler Report.
	OutReport
	// OutRelease: the core keeps Request no more and will not answer it
	// (the server left the range's chain): free what it holds.
	OutRelease
	// OutAskCopy: ask server To, the one Range's entries come from, for a
	// copy of the range (Ack says who asks, in which view, and how far it
	// is): an entry of the range never arrived whole here.
	OutAskCopy
	// OutSayAgain: ask server To to say again how far it is (SayAgain): a
	// message from it could not be read here, and it may have been an ack.
	OutSayAgain
)

// Output is one thing the driver must do, in order.
type Output[P any] struct {
	Kind     OutputKind
	To       int
	Range    int
	LSN      uint64
	Gen      uint64
	Epoch    uint64
	Head     bool
	Request  *Request[P]
	Forward  *Forward[P]
	Ack      Ack
	Snapshot *Snapshot[P]
	Applied  []Applied
	Answer   []byte
	Report   Report
}

// role is a server's place in a range.
type role int

const (
	roleNone role = iota
	roleHead
	roleMember // in the chain, not its head
	roleJoiner
)

// pendingAnswer is a request the head answers once its entry is
// replicated.
type pendingAnswer[P any] struct {
	lsn   uint64
	req   *Request[P]
	again bool   // applied before: OutRespondAgain
	ans   []byte // for again
	gen   uint64 // for again: the request's snapshot gen
}

// pendingCut is a snapshot whose range is done once replicated.
type pendingCut struct {
	lsn     uint64
	gen     uint64
	written bool
}

// rangeState is what a server keeps of a range it holds or copies.
type rangeState[P any] struct {
	r       int
	role    role
	applied uint64 // LSN of the last entry applied
	gen     uint64 // last snapshot cut in the stream
	// version is the range's version in the view this server follows.
	version uint64
	// acked is what the successor has acknowledged in this version;
	// upAcked what this server acknowledged to its predecessor (or the
	// server it copies from).
	acked, upAcked uint64
	succ, pred     int // ranks, -1 for none
	dedup          *dedup
	pending        []pendingAnswer[P] // head: answers waiting for replication
	// scanned is the replicated LSN pending was last answered through;
	// rescan is set when pending may hold an entry at or below it.
	scanned uint64
	rescan  bool
	cuts    []pendingCut  // cuts not yet replicated (and, here, written)
	held    []*Request[P] // requests waiting until this server heads the range
	// forwards received ahead of their turn (a gap, or before the snapshot).
	early []*Forward[P]
	// asked: a copy of the range was asked of the server its entries come
	// from, because one of them is missing here, and has not arrived.
	asked bool
	// joiner: the tail it copies from, and whether the copy has arrived.
	syncer    int
	syncerInc uint64
	restored  bool
	// tail: the joiners it sends the range to, with their incarnation,
	// and how far each has acknowledged in this version. Once it sends a
	// joiner the range, the tail counts the joiner's acks as it does its
	// successor's: every change answered from then on is at the joiner
	// too, so a joiner that joins the chain lacks nothing that was
	// answered.
	syncing map[int]uint64
	syncAck map[int]uint64
	// syncLSN is the LSN of the copy sent to each joiner: once its acks
	// reach it, the joiner has caught up and the tail reports it.
	syncLSN map[int]uint64
	// syncReported is the range version the tail reported a joiner at.
	syncReported map[int]uint64
	// reported marks the range version a Drained was reported for.
	reported uint64
}

// deferred is an input that names a newer view than this server has.
type deferred[P any] struct {
	epoch uint64
	req   *Request[P]
	fwd   *Forward[P]
	ack   *Ack
	ask   *Ack // a request for a copy (AskCopy)
	snap  *Snapshot[P]
}

// Core is one server's part of chain replication for one store: it takes
// workers' requests, entries from the previous server of each chain, acks
// from the next, snapshots and views, and says what to apply, send and
// answer. It does no I/O, starts no goroutines and reads no clock: the
// driver (kv's server) carries out its Outputs in order. It is not safe
// for concurrent use.
//
// For each range in the view the server holds, the head numbers every
// request that changes the store (its LSN), passes it down the chain
// before applying it, and answers the worker once the chain's tail has
// acknowledged it; each member applies entries in LSN order, passes them
// on, and acknowledges what the rest of the chain has. A request applied
// already (a worker sending it again to a new head) is recognised by its
// Origin and answered without being applied twice. Requests for a range
// this server does not head wait (it is about to head it) or are
// redirected (the worker's view is old).
type Core[P any] struct {
	me     int
	log    zerolog.Logger
	view   *View
	ranges map[int]*rangeState[P]
	wait   []deferred[P]
	// unread marks the servers a message was dropped from as unreadable:
	// the first later view in which some range's entries come from one of
	// them has those ranges ask for a copy (the message may have been for
	// that view), and clears the mark.
	unread map[int]bool
}

// maxDeferred bounds the inputs kept for a newer view.
const maxDeferred = 1 << 16

// ErrTooManyWaiting is the error of a request refused because too many
// wait for a newer view.
var ErrTooManyWaiting = errors.New("replica: too many requests wait for a view")

// NewCore returns the core of server rank me.
func NewCore[P any](me int, log zerolog.Logger) *Core[P] {
	return &Core[P]{me: me, log: log, ranges: map[int]*rangeState[P]{}}
}

// View returns the view the core follows (nil before the first).
func (c *Core[P]) View() *View { return c.view }

// Epoch returns the epoch of the core's view (0 before the first).
func (c *Core[P]) Epoch() uint64 {
	if c.view == nil {
		return 0
	}
	return c.view.Epoch
}

func (c *Core[P]) inc() uint64 { return c.view.IncOf(c.me) }

// Applied returns the last LSN applied of range r, and the snapshot gen
// its stream is at (for tests and metrics).
func (c *Core[P]) Applied(r int) (lsn, gen uint64) {
	if rs := c.ranges[r]; rs != nil {
		return rs.applied, rs.gen
	}
	return 0, 0
}

// Heads reports whether this server heads range r in its view.
func (c *Core[P]) Heads(r int) bool {
	rs := c.ranges[r]
	return rs != nil && rs.role == roleHead
}

// Gen returns the snapshot gen of range r's stream: the tag of a request
// applied now.
func (c *Core[P]) Gen(r int) uint64 {
	if rs := c.ranges[r]; rs != nil {
		return rs.gen
	}
	return 0
}

// SetAnswer keeps a small answer of the request with origin o, applied to
// range r, for when it is sent again.
func (c *Core[P]) SetAnswer(r int, o Origin, ans []byte) {
	if len(ans) > MaxAnswer {
		return
	}
	if rs := c.ranges[r]; rs != nil {
		if e := rs.dedup.get(o); e != nil {
			e.Answer = ans
		}
	}
}

type outs[P any] []Output[P]

func (o *outs[P]) add(x Output[P]) { *o = append(*o, x) }

// SetView makes v the core's view (an older or equal epoch is ignored) and
// takes up what waited for it.
func (c *Core[P]) SetView(v *View) []Output[P] {
	if v == nil || c.view != nil && v.Epoch <= c.view.Epoch {
		return nil
	}
	var o outs[P]
	old := c.view
	c.view = v
	for r := range v.Ranges {
		c.rangeView(&o, r, old)
	}
	// Ranges whose entries now come from a server a message was dropped
	// from.
	for _, from := range sortedKeys(c.unread) {
		asked := false
		for _, r := range sortedKeys(c.ranges) {
			if rs := c.ranges[r]; c.source(rs) == from && !rs.asked {
				c.askCopy(&o, rs)
				asked = true
			}
		}
		if asked {
			delete(c.unread, from)
		}
	}
	// Ranges this server held and the view no longer lists.
	for r, rs := range c.ranges {
		if r >= len(v.Ranges) {
			c.leave(&o, rs)
			delete(c.ranges, r)
		}
	}
	// What waited for this view.
	wait := c.wait
	c.wait = nil
	for _, d := range wait {
		switch {
		case d.epoch > v.Epoch:
			c.wait = append(c.wait, d)
		case d.req != nil:
			o = append(o, c.Request(d.req)...)
		case d.fwd != nil:
			o = append(o, c.Forward(d.fwd)...)
		case d.ack != nil:
			o = append(o, c.Ack(*d.ack)...)
		case d.ask != nil:
			o = append(o, c.AskCopy(*d.ask)...)
		case d.snap != nil:
			o = append(o, c.Snapshot(d.snap)...)
		}
	}
	return o
}

// rangeView takes range r's entry of the new view.
func (c *Core[P]) rangeView(o *outs[P], r int, old *View) {
	rv := &c.view.Ranges[r]
	rs := c.ranges[r]
	var newRole role
	switch {
	case rv.Head() == c.me:
		newRole = roleHead
	case rv.Position(c.me) > 0:
		newRole = roleMember
	case slices.Contains(rv.Joining, c.me):
		newRole = roleJoiner
	}
	if newRole == roleNone {
		if rs != nil {
			c.leave(o, rs)
			delete(c.ranges, r)
		}
		return
	}
	if rs == nil {
		rs = &rangeState[P]{r: r, succ: -1, pred: -1, syncer: -1, dedup: newDedup(),
			syncing: map[int]uint64{}, syncAck: map[int]uint64{}, syncLSN: map[int]uint64{}, syncReported: map[int]uint64{}}
		c.ranges[r] = rs
		rs.gen = c.view.Restored
		switch {
		case newRole != roleJoiner && rv.LossVersion == rv.Version && rv.LossVersion != 0:
			// The range was lost: this server restarts it from the last
			// snapshot.
			rs.gen = rv.LossGen
			o.add(Output[P]{Kind: OutLoad, Range: r, Gen: rv.LossGen})
		case newRole != roleJoiner && old != nil:
			// A view that lists this server in a chain it was not in, without
			// a copy: can only come from a confused scheduler.
			c.log.Error().Int("range", r).Str("view", c.view.String()).Msg("replica: listed in a range's chain without having copied it")
		}
	}
	newVersion := rs.version != rv.Version
	if newVersion {
		// Acks of another version say nothing about this one's chain.
		rs.version = rv.Version
		rs.acked, rs.upAcked = 0, 0
		clear(rs.syncAck)
		rs.asked = false // the next gap asks again, in this version
	}
	if newRole == roleJoiner {
		c.joinerView(o, rs, rv)
		if newVersion && rs.restored {
			c.ackUp(o, rs)
		}
		return
	}
	wasRole := rs.role
	if wasRole == roleJoiner && !rs.restored {
		// Promoted before the copy arrived: cannot happen (the scheduler
		// promotes on this server's own report), but never serve a range
		// not copied.
		c.log.Error().Int("range", r).Msg("replica: in a range's chain before its copy arrived")
	}
	rs.role = newRole
	rs.restored = true
	rs.pred, rs.succ = rv.Predecessor(c.me), rv.Successor(c.me)
	// Entries kept ahead of their turn are good only from the server
	// before this one now: a head takes none, and what an earlier
	// predecessor (or an earlier process in its place) sent past a gap
	// holds other requests under the same LSNs.
	rs.early = slices.DeleteFunc(rs.early, func(f *Forward[P]) bool {
		return f.LSN <= rs.applied || f.From != rs.pred || f.Inc != c.view.IncOf(f.From)
	})
	// Joiners this server no longer sends the range to.
	for j := range rs.syncing {
		if !slices.Contains(rv.Joining, j) || rv.Tail() != c.me || c.view.IncOf(j) != rs.syncing[j] {
			delete(rs.syncing, j)
			delete(rs.syncAck, j)
			delete(rs.syncLSN, j)
			delete(rs.syncReported, j)
		}
	}
	if rv.Tail() == c.me {
		for _, j := range rv.Joining {
			if _, ok := rs.syncing[j]; !ok {
				rs.syncing[j] = c.view.IncOf(j)
				c.copyTo(o, rs, j)
			}
		}
	}
	c.replicated(o, rs)
	if newRole == roleHead {
		c.headView(o, rs, rv)
	} else {
		// No longer the head: what waited for it goes to the head.
		c.redirectHeld(o, rs)
	}
}

// joinerView takes a view in which this server copies range rs.r.
func (c *Core[P]) joinerView(o *outs[P], rs *rangeState[P], rv *Range) {
	tail := rv.Tail()
	if rs.role != roleJoiner || rs.syncer != tail || rs.syncerInc != c.view.IncOf(tail) {
		if rs.role == roleHead || rs.role == roleMember {
			c.leave(o, rs)
		}
		rs.role = roleJoiner
		rs.syncer, rs.syncerInc = tail, c.view.IncOf(tail)
		rs.restored = false
		rs.early = nil
		rs.pending, rs.cuts, rs.rescan = nil, nil, true
		rs.succ, rs.pred = -1, -1
	}
}

// headView takes a view in which this server heads range rs.r.
func (c *Core[P]) headView(o *outs[P], rs *rangeState[P], rv *Range) {
	if rv.Draining {
		c.checkDrained(o, rs)
		return
	}
	held := rs.held
	rs.held = nil
	for _, req := range held {
		c.headRequest(o, rs, req)
	}
}

// leave drops a range this server no longer holds: what it was to answer,
// it will not.
func (c *Core[P]) leave(o *outs[P], rs *rangeState[P]) {
	for _, p := range rs.pending {
		o.add(Output[P]{Kind: OutRelease, Request: p.req})
	}
	rs.pending = nil
	rs.role = roleNone
	c.redirectHeld(o, rs)
}

// redirectHeld sends the requests held for range rs.r back to their
// workers (Go workers) or keeps them (untagged requests wait for this
// server to head its home range; others are released).
func (c *Core[P]) redirectHeld(o *outs[P], rs *rangeState[P]) {
	keep := rs.held[:0]
	for _, req := range rs.held {
		switch {
		case req.Tagged:
			o.add(Output[P]{Kind: OutRedirect, Request: req, Range: rs.r, Epoch: c.view.Epoch})
		case rs.r == c.me && rs.role != roleNone:
			keep = append(keep, req)
		default:
			o.add(Output[P]{Kind: OutRelease, Request: req})
		}
	}
	rs.held = keep
}

// Request takes a worker's request.
func (c *Core[P]) Request(req *Request[P]) []Output[P] {
	var o outs[P]
	if req.Tagged && req.Epoch > c.Epoch() {
		c.deferInput(&o, deferred[P]{epoch: req.Epoch, req: req})
		return o
	}
	if c.view == nil {
		c.deferInput(&o, deferred[P]{epoch: 1, req: req})
		return o
	}
	rs := c.ranges[req.Range]
	switch {
	case rs != nil && rs.role == roleHead:
		c.headRequest(&o, rs, req)
	case !req.Tagged && req.Range == c.me && rs != nil:
		// A C++ worker sends each range to its home server: this one
		// copies its range or is about to head it again.
		rs.held = append(rs.held, req)
	case !req.Tagged:
		// The home server of a range nobody can give it (it holds nothing
		// of its own range): keep it for the next view.
		c.deferInput(&o, deferred[P]{epoch: c.view.Epoch + 1, req: req})
	default:
		o.add(Output[P]{Kind: OutRedirect, Request: req, Range: req.Range, Epoch: c.view.Epoch})
	}
	return o
}

func (c *Core[P]) deferInput(o *outs[P], d deferred[P]) {
	if len(c.wait) >= maxDeferred {
		c.log.Warn().Uint64("epoch", d.epoch).Msg("replica: too many inputs wait for a newer view; dropping one")
		if d.req != nil {
			o.add(Output[P]{Kind: OutRelease, Request: d.req})
		}
		return
	}
	c.wait = append(c.wait, d)
}

// headRequest handles a request at the range's head.
func (c *Core[P]) headRequest(o *outs[P], rs *rangeState[P], req *Request[P]) {
	rv := &c.view.Ranges[rs.r]
	if !req.Changes {
		o.add(Output[P]{Kind: OutRead, Request: req, Range: rs.r, Gen: rs.gen})
		return
	}
	if rv.Draining {
		rs.held = append(rs.held, req)
		return
	}
	if e := rs.dedup.get(req.Origin); e != nil {
		// Applied before (the worker sent it again, to this new head or
		// to this one): answer once it is replicated.
		rs.pending = append(rs.pending, pendingAnswer[P]{lsn: e.LSN, req: req, again: true, ans: e.Answer, gen: e.Gen})
		rs.rescan = true
		c.answerReplicated(o, rs)
		return
	}
	rs.applied++
	lsn := rs.applied
	rs.dedup.put(Applied{Origin: req.Origin, LSN: lsn, Gen: rs.gen})
	f := &Forward[P]{From: c.me, Inc: c.inc(), Epoch: c.view.Epoch, Range: rs.r, LSN: lsn, Kind: EntryRequest,
		Gen: rs.gen, Origin: req.Origin, Payload: req.Payload}
	c.pass(o, rs, f)
	o.add(Output[P]{Kind: OutApply, Range: rs.r, LSN: lsn, Gen: rs.gen, Head: true, Request: req, Forward: f})
	rs.pending = append(rs.pending, pendingAnswer[P]{lsn: lsn, req: req})
	rs.rescan = rs.rescan || lsn <= rs.scanned
	c.replicated(o, rs)
}

// pass sends entry f on: to the successor, and, at the tail, to the
// joiners copying the range.
func (c *Core[P]) pass(o *outs[P], rs *rangeState[P], f *Forward[P]) {
	next := *f
	next.From, next.Inc, next.Epoch = c.me, c.inc(), c.view.Epoch
	if rs.succ >= 0 {
		o.add(Output[P]{Kind: OutForward, To: rs.succ, Forward: &next})
	}
	for _, j := range sortedKeys(rs.syncing) {
		o.add(Output[P]{Kind: OutForward, To: j, Forward: &next})
	}
}

// through is how far the chain from this server on, and the joiners it
// copies the range to, have every entry.
func (rs *rangeState[P]) through() uint64 {
	t := rs.applied
	if rs.succ >= 0 {
		t = min(t, rs.acked)
	}
	for j := range rs.syncing {
		t = min(t, rs.syncAck[j])
	}
	return t
}

// replicated acknowledges, answers and reports what the rest of the
// chain now has.
func (c *Core[P]) replicated(o *outs[P], rs *rangeState[P]) {
	if rs.role != roleHead && rs.role != roleMember {
		return
	}
	t := rs.through()
	for len(rs.cuts) > 0 && rs.cuts[0].lsn <= t && rs.cuts[0].written {
		cut := rs.cuts[0]
		rs.cuts = rs.cuts[1:]
		if rs.role == roleHead {
			o.add(Output[P]{Kind: OutReport, Report: Report{Kind: ReportCut, Range: rs.r, Gen: cut.gen, LSN: cut.lsn}})
		}
	}
	// A member acknowledges no further than its first unwritten cut.
	if len(rs.cuts) > 0 && !rs.cuts[0].written {
		t = min(t, rs.cuts[0].lsn-1)
	}
	if rs.role == roleMember && rs.pred >= 0 && t > rs.upAcked {
		rs.upAcked = t
		o.add(Output[P]{Kind: OutAck, To: rs.pred, Ack: c.ack(rs, t)})
	}
	if rs.role == roleHead {
		rs.upAcked = t
		c.answerReplicated(o, rs)
		if c.view.Ranges[rs.r].Draining {
			c.checkDrained(o, rs)
		}
	}
}

// answerReplicated answers the pending requests the chain has.
func (c *Core[P]) answerReplicated(o *outs[P], rs *rangeState[P]) {
	t := rs.through()
	if len(rs.cuts) > 0 && !rs.cuts[0].written {
		t = min(t, rs.cuts[0].lsn-1)
	}
	if t == rs.scanned && !rs.rescan {
		return // every pending entry is past t: a scan per request would cost the window's length
	}
	rs.scanned, rs.rescan = t, false
	keep := rs.pending[:0]
	for _, p := range rs.pending {
		switch {
		case p.lsn > t:
			keep = append(keep, p)
		case p.again:
			o.add(Output[P]{Kind: OutRespondAgain, Request: p.req, Range: rs.r, Answer: p.ans, Gen: p.gen})
		default:
			o.add(Output[P]{Kind: OutRespond, Request: p.req, Range: rs.r})
		}
	}
	clear(rs.pending[len(keep):])
	rs.pending = keep
}

// checkDrained reports a draining range once everything is replicated.
func (c *Core[P]) checkDrained(o *outs[P], rs *rangeState[P]) {
	rv := &c.view.Ranges[rs.r]
	if len(rs.pending) > 0 || rs.through() < rs.applied || len(rs.cuts) > 0 || rs.reported == rv.Version {
		return
	}
	rs.reported = rv.Version
	o.add(Output[P]{Kind: OutReport, Report: Report{Kind: ReportDrained, Range: rs.r, Version: rv.Version, LSN: rs.applied}})
}

// Forward takes an entry from another server.
func (c *Core[P]) Forward(f *Forward[P]) []Output[P] {
	var o outs[P]
	if f.Epoch > c.Epoch() {
		c.deferInput(&o, deferred[P]{epoch: f.Epoch, fwd: f})
		return o
	}
	rs := c.ranges[f.Range]
	switch {
	case rs == nil:
	case (rs.role == roleMember) && f.From == rs.pred && f.Inc == c.view.IncOf(f.From):
		c.memberEntry(&o, rs, f)
		return o
	case rs.role == roleJoiner && f.From == rs.syncer && f.Inc == rs.syncerInc:
		if !rs.restored || f.LSN > rs.applied+1 {
			c.early(rs, f)
			if rs.restored && !rs.asked {
				c.askCopy(&o, rs) // a gap after the copy
			}
			return o
		}
		c.memberEntry(&o, rs, f)
		return o
	}
	c.log.Debug().Int("from", f.From).Int("range", f.Range).Uint64("lsn", f.LSN).Msg("replica: refusing an entry from a server that is not before this one")
	o.add(Output[P]{Kind: OutRefuse, To: f.From, Range: f.Range, Epoch: c.view.Epoch})
	return o
}

// early keeps an entry that came before its turn (bounded: the rest is
// sent again or the copy starts over).
func (c *Core[P]) early(rs *rangeState[P], f *Forward[P]) {
	if len(rs.early) >= maxDeferred {
		c.log.Warn().Int("range", rs.r).Msg("replica: too many entries ahead of their turn; dropping one")
		return
	}
	rs.early = append(rs.early, f)
}

// memberEntry applies an entry at a member or a joiner, in LSN order.
func (c *Core[P]) memberEntry(o *outs[P], rs *rangeState[P], f *Forward[P]) {
	switch {
	case f.LSN <= rs.applied:
		// A duplicate: say again how far this server is.
		if rs.pred >= 0 || rs.role == roleJoiner {
			c.ackUp(o, rs)
		}
		return
	case f.LSN > rs.applied+1:
		// A gap: an entry before this one never arrived whole (entries
		// come in order on one connection). It is never sent again; a copy
		// of the range fills it.
		c.early(rs, f)
		if !rs.asked {
			c.askCopy(o, rs)
		}
		return
	}
	c.applyEntry(o, rs, f)
	// Entries that waited for this one.
	for {
		i := slices.IndexFunc(rs.early, func(e *Forward[P]) bool { return e.LSN == rs.applied+1 })
		if i < 0 {
			break
		}
		e := rs.early[i]
		rs.early = slices.Delete(rs.early, i, i+1)
		c.applyEntry(o, rs, e)
	}
	rs.early = slices.DeleteFunc(rs.early, func(e *Forward[P]) bool { return e.LSN <= rs.applied })
}

// applyEntry applies entry f, the next of its range.
func (c *Core[P]) applyEntry(o *outs[P], rs *rangeState[P], f *Forward[P]) {
	rs.applied = f.LSN
	if rs.role != roleJoiner {
		c.pass(o, rs, f)
	}
	switch f.Kind {
	case EntryCut:
		rs.gen = f.Gen
		rs.cuts = append(rs.cuts, pendingCut{lsn: f.LSN, gen: f.Gen})
		o.add(Output[P]{Kind: OutCut, Range: rs.r, LSN: f.LSN, Gen: f.Gen})
	default:
		rs.gen = f.Gen
		rs.dedup.put(Applied{Origin: f.Origin, LSN: f.LSN, Gen: f.Gen})
		o.add(Output[P]{Kind: OutApply, Range: rs.r, LSN: f.LSN, Gen: f.Gen, Forward: f})
	}
	if rs.role == roleJoiner {
		if len(rs.cuts) == 0 || rs.cuts[0].written {
			c.ackUp(o, rs)
		}
		return
	}
	c.replicated(o, rs)
}

// ackUp tells the server this one gets the range from how far it is.
func (c *Core[P]) ackUp(o *outs[P], rs *rangeState[P]) {
	to := rs.pred
	lsn := rs.upAcked
	if rs.role == roleJoiner {
		to = rs.syncer
		lsn = rs.applied
		if len(rs.cuts) > 0 && !rs.cuts[0].written {
			lsn = rs.cuts[0].lsn - 1
		}
	}
	if to < 0 {
		return
	}
	o.add(Output[P]{Kind: OutAck, To: to, Ack: c.ack(rs, lsn)})
}

func (c *Core[P]) ack(rs *rangeState[P], lsn uint64) Ack {
	return Ack{From: c.me, Inc: c.inc(), Epoch: c.view.Epoch, Range: rs.r, Version: rs.version, LSN: lsn}
}

// Ack takes an acknowledgement from a server this one passes a range to.
func (c *Core[P]) Ack(a Ack) []Output[P] {
	var o outs[P]
	if a.Epoch > c.Epoch() {
		c.deferInput(&o, deferred[P]{epoch: a.Epoch, ack: &a})
		return o
	}
	rs := c.ranges[a.Range]
	if rs == nil || a.Inc != c.view.IncOf(a.From) || a.Version != rs.version {
		return o
	}
	switch {
	case a.From == rs.succ && a.LSN > rs.acked:
		rs.acked = a.LSN
		c.replicated(&o, rs)
	case rs.syncing[a.From] != 0 && a.LSN > rs.syncAck[a.From]:
		rs.syncAck[a.From] = a.LSN
		if a.LSN >= rs.syncLSN[a.From] && rs.syncReported[a.From] != rs.version {
			rs.syncReported[a.From] = rs.version
			o.add(Output[P]{Kind: OutReport, Report: Report{Kind: ReportSynced, Range: rs.r, Version: rs.version, Joiner: a.From}})
		}
		c.replicated(&o, rs)
	}
	return o
}

// Snapshot takes a copy of a range: one this server joins, or, at a member
// of the range's chain, one its predecessor sent because an entry was
// missing here (see AskCopy).
func (c *Core[P]) Snapshot(s *Snapshot[P]) []Output[P] {
	var o outs[P]
	if s.Epoch > c.Epoch() {
		c.deferInput(&o, deferred[P]{epoch: s.Epoch, snap: s})
		return o
	}
	rs := c.ranges[s.Range]
	switch {
	case rs != nil && rs.role == roleJoiner && s.From == rs.syncer && s.Inc == rs.syncerInc:
		if rs.restored && s.LSN <= rs.applied {
			return o // an old copy, sent again or late: this server is further
		}
		for _, f := range c.restore(&o, rs, s) {
			c.memberEntry(&o, rs, f)
		}
		c.ackUp(&o, rs)
	case rs != nil && rs.role == roleMember && s.From == rs.pred && s.Inc == c.view.IncOf(s.From):
		if s.LSN <= rs.applied {
			rs.asked = false // it lacked nothing the copy holds
			return o
		}
		early := c.restore(&o, rs, s)
		// The servers after this one lack what it lacked: they get the
		// same copy, ahead of the entries that follow it.
		c.copyOn(&o, rs)
		for _, f := range early {
			c.memberEntry(&o, rs, f)
		}
		c.replicated(&o, rs)
	default:
		c.log.Debug().Int("from", s.From).Int("range", s.Range).Msg("replica: ignoring a copy of a range this server does not take from that server")
	}
	return o
}

// restore makes copy s range rs's state here, and returns the entries
// kept ahead of their turn that come after it, in order.
func (c *Core[P]) restore(o *outs[P], rs *rangeState[P], s *Snapshot[P]) []*Forward[P] {
	o.add(Output[P]{Kind: OutRestore, Range: s.Range, LSN: s.LSN, Gen: s.Gen, Snapshot: s})
	rs.applied, rs.gen = s.LSN, s.Gen
	rs.dedup = newDedup()
	for _, e := range s.Applied {
		rs.dedup.put(e)
	}
	rs.restored, rs.asked = true, false
	rs.cuts = nil
	early := slices.DeleteFunc(rs.early, func(f *Forward[P]) bool { return f.LSN <= rs.applied })
	rs.early = nil
	slices.SortFunc(early, func(a, b *Forward[P]) int { return cmpU64(a.LSN, b.LSN) })
	return early
}

// copyOn sends a copy of range rs, as this server holds it now, to the
// server after it and to the joiners it passes the range to.
func (c *Core[P]) copyOn(o *outs[P], rs *rangeState[P]) {
	if rs.succ >= 0 {
		c.sendCopy(o, rs, rs.succ)
	}
	for _, j := range sortedKeys(rs.syncing) {
		c.copyTo(o, rs, j)
	}
}

// copyTo sends joiner j a copy of range rs, as this server holds it now.
func (c *Core[P]) copyTo(o *outs[P], rs *rangeState[P], j int) {
	rs.syncLSN[j] = rs.applied
	c.sendCopy(o, rs, j)
}

// sendCopy sends server to a copy of range rs, as this server holds it
// now (the driver takes it from the store when it carries the output out,
// after everything before it).
func (c *Core[P]) sendCopy(o *outs[P], rs *rangeState[P], to int) {
	o.add(Output[P]{Kind: OutSnapshot, To: to, Range: rs.r, LSN: rs.applied, Gen: rs.gen, Applied: rs.dedup.all()})
}

// Unreadable says that the driver dropped a message from server from that
// it could not read: an entry, a batch of them, a copy or an ack. This
// server may now lack an entry of every range it takes from that server,
// and entries are never sent twice, so it asks that server for a copy of
// each; and, as acks are not sent again either, it asks that server to say
// again how far it is.
func (c *Core[P]) Unreadable(from int) []Output[P] {
	o := outs[P]{{Kind: OutSayAgain, To: from}}
	if c.unread == nil {
		c.unread = map[int]bool{}
	}
	c.unread[from] = true
	for _, r := range sortedKeys(c.ranges) {
		if rs := c.ranges[r]; c.source(rs) == from {
			c.askCopy(&o, rs)
		}
	}
	return o
}

// source is the server range rs's entries come from here (-1: none).
func (c *Core[P]) source(rs *rangeState[P]) int {
	switch rs.role {
	case roleMember:
		return rs.pred
	case roleJoiner:
		return rs.syncer
	}
	return -1
}

// askCopy asks the server range rs's entries come from for a copy.
func (c *Core[P]) askCopy(o *outs[P], rs *rangeState[P]) {
	from := c.source(rs)
	if from < 0 {
		return
	}
	rs.asked = true
	c.log.Warn().Int("range", rs.r).Int("from", from).Uint64("applied", rs.applied).Msg("replica: an entry of the range is missing; asking the server before this one for a copy")
	o.add(Output[P]{Kind: OutAskCopy, To: from, Range: rs.r, Ack: c.ack(rs, rs.applied)})
}

// SayAgain takes a request from server from, which could not read a
// message of this one: this server acknowledges again, to that server,
// how far it is in every range it takes from it.
func (c *Core[P]) SayAgain(from int) []Output[P] {
	var o outs[P]
	for _, r := range sortedKeys(c.ranges) {
		if rs := c.ranges[r]; c.source(rs) == from && (rs.role == roleJoiner && rs.restored || rs.role == roleMember && rs.upAcked > 0) {
			c.ackUp(&o, rs)
		}
	}
	return o
}

// AskCopy takes a request for a copy of a range from the server this one
// passes it to (a member after it, or a joiner it copies the range to),
// which lacks an entry: it gets the range as this server holds it now,
// ahead of the entries that follow. A request from anyone else is ignored.
func (c *Core[P]) AskCopy(a Ack) []Output[P] {
	var o outs[P]
	if a.Epoch > c.Epoch() {
		c.deferInput(&o, deferred[P]{epoch: a.Epoch, ask: &a})
		return o
	}
	rs := c.ranges[a.Range]
	if rs == nil || (rs.role != roleHead && rs.role != roleMember) || a.Inc != c.view.IncOf(a.From) {
		return o
	}
	switch {
	case a.From == rs.succ:
		c.sendCopy(&o, rs, a.From)
	case rs.syncing[a.From] != 0:
		c.copyTo(&o, rs, a.From)
	default:
		c.log.Debug().Int("from", a.From).Int("range", a.Range).Msg("replica: ignoring a request for a copy from a server this one does not pass the range to")
	}
	return o
}

// Cut starts snapshot gen of every range this server heads: an entry in
// each range's stream, written by every server holding the range as it
// applies it. A head whose range is draining cuts it all the same.
func (c *Core[P]) Cut(gen uint64) []Output[P] {
	var o outs[P]
	if c.view == nil {
		return o
	}
	for _, r := range sortedKeys(c.ranges) {
		rs := c.ranges[r]
		if rs.role != roleHead || gen <= rs.gen {
			continue
		}
		rs.applied++
		f := &Forward[P]{From: c.me, Inc: c.inc(), Epoch: c.view.Epoch, Range: r, LSN: rs.applied, Kind: EntryCut, Gen: gen}
		rs.gen = gen
		rs.cuts = append(rs.cuts, pendingCut{lsn: rs.applied, gen: gen})
		c.pass(&o, rs, f)
		o.add(Output[P]{Kind: OutCut, Range: r, LSN: rs.applied, Gen: gen})
	}
	return o
}

// CutWritten says that snapshot gen of range r is on disk here (the
// driver's answer to OutCut). A failed write is reported by the driver;
// the cut then never completes.
func (c *Core[P]) CutWritten(r int, gen uint64) []Output[P] {
	var o outs[P]
	rs := c.ranges[r]
	if rs == nil {
		return o
	}
	for i := range rs.cuts {
		if rs.cuts[i].gen == gen {
			rs.cuts[i].written = true
		}
	}
	if rs.role == roleJoiner {
		for len(rs.cuts) > 0 && rs.cuts[0].written {
			rs.cuts = rs.cuts[1:]
		}
		c.ackUp(&o, rs)
		return o
	}
	c.replicated(&o, rs)
	return o
}

// Holding returns how many requests wait at this server (for its range or
// a newer view).
func (c *Core[P]) Holding() int {
	n := len(c.wait)
	for _, rs := range c.ranges {
		n += len(rs.held)
	}
	return n
}

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
