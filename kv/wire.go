package kv

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/gopslite/pslite/replica"
)

// The bodies of the KV messages Go nodes add for managed jobs
// (docs/REPLICATION.md). A body starts with "pslite:" and a letter naming
// its kind, then uvarints (zig-zag varints for signed fields). C++ ps-lite
// never reads the body of a KV message, so tags on requests and answers
// pass through C++ nodes unseen; the other kinds go only between Go
// servers, or from a Go server to a Go worker that tagged its request.
const (
	bodyPrefix = "pslite:"
	// kindTag, on a worker's request: the key range it is for and the
	// epoch of the view the worker routed it by.
	kindTag = 'T'
	// kindAnswerTag, on a server's answer to a tagged request: the range,
	// the snapshot gen the change was applied at, and whether it changed
	// the store.
	kindAnswerTag = 'G'
	// kindRedirect, from a server to a worker (a request message of its
	// own timestamp, not an answer): this server does not head the range
	// in view epoch; send request ts to the head of a view at least that
	// recent.
	kindRedirect = 'D'
	// kindForward, kindAck, kindSnapshot, kindRefuse: replica.Forward,
	// replica.Ack, replica.Snapshot, a refusal, between servers.
	kindForward  = 'F'
	kindAck      = 'A'
	kindSnapshot = 'S'
	kindRefuse   = 'X'
	// kindBatch, between servers: several forwards to the same server in
	// one message, their data frames one after the other.
	kindBatch = 'B'
	// kindAskCopy, between servers: a replica.Ack asking for a copy of its
	// range (an entry of it could not be read); kindSayAgain: a message
	// could not be read, say again how far you are (no fields).
	kindAskCopy  = 'C'
	kindSayAgain = 'Y'
	// kindKeys, outside managed jobs: flags, on a Go worker's pull
	// (flagKeys: it keeps the keys it asks for, so the answer may leave
	// them out) and on a Go server's answer to one (flagKeys: the answer
	// has no keys frame). In managed jobs the flags ride on the tags.
	kindKeys = 'K'
)

// Flags of kindKeys bodies and of tags.
const (
	// flagChanged, on an answer tag: the request changed the store.
	flagChanged = 1
	// flagKeys, on a pull: the answer may leave its keys out, when they
	// are exactly the keys asked for; on an answer: it left them out, and
	// its values (and lens) answer the keys of the request, in order.
	flagKeys = 2
)

// replicationKind reports whether k is a message between the servers of
// a managed job.
func replicationKind(k byte) bool {
	switch k {
	case kindForward, kindBatch, kindAck, kindSnapshot, kindRefuse, kindAskCopy, kindSayAgain:
		return true
	}
	return false
}

// bodyKind returns the kind of a pslite body and its fields, or 0.
func bodyKind(body []byte) (byte, []byte) {
	if len(body) <= len(bodyPrefix) || !bytes.HasPrefix(body, []byte(bodyPrefix)) {
		return 0, nil
	}
	k := body[len(bodyPrefix)]
	switch k {
	case kindTag, kindAnswerTag, kindRedirect, kindForward, kindAck, kindSnapshot, kindRefuse, kindBatch, kindAskCopy, kindSayAgain, kindKeys:
		return k, body[len(bodyPrefix)+1:]
	}
	return 0, nil
}

// fields appends and reads the numbers of a body.
type fields struct {
	b   []byte
	err error
}

func newBody(kind byte, hint int) *fields {
	b := make([]byte, 0, len(bodyPrefix)+1+hint)
	b = append(b, bodyPrefix...)
	return &fields{b: append(b, kind)}
}

func (f *fields) u(x uint64) *fields { f.b = binary.AppendUvarint(f.b, x); return f }
func (f *fields) i(x int64) *fields  { f.b = binary.AppendVarint(f.b, x); return f }

var errShortBody = errors.New("kv: malformed pslite body")

func (f *fields) getU() uint64 {
	if f.err != nil {
		return 0
	}
	x, n := binary.Uvarint(f.b)
	if n <= 0 {
		f.err = errShortBody
		return 0
	}
	f.b = f.b[n:]
	return x
}

func (f *fields) getI() int64 {
	if f.err != nil {
		return 0
	}
	x, n := binary.Varint(f.b)
	if n <= 0 {
		f.err = errShortBody
		return 0
	}
	f.b = f.b[n:]
	return x
}

// getRank reads a server rank or range below n.
func (f *fields) getRank(n int) int {
	x := f.getU()
	if f.err == nil && x >= uint64(n) {
		f.err = errShortBody
	}
	return int(x)
}

func (f *fields) getI32() int32 {
	x := f.getI()
	if f.err == nil && (x < -1<<31 || x >= 1<<31) {
		f.err = errShortBody
	}
	return int32(x)
}

func tagBody(r int, epoch uint64, flags uint64) []byte {
	return newBody(kindTag, 8).u(uint64(r)).u(epoch).u(flags).b
}

func answerTagBody(r int, gen uint64, flags uint64) []byte {
	return newBody(kindAnswerTag, 8).u(uint64(r)).u(gen).u(flags).b
}

func keysBody(flags uint64) []byte { return newBody(kindKeys, 1).u(flags).b }

// pullFlags returns the flags a request or an answer carries in its body
// (a kindKeys body or a tag), 0 when none.
func pullFlags(body []byte, answer bool) uint64 {
	switch k, p := bodyKind(body); {
	case k == kindKeys:
		f := &fields{b: p}
		flags := f.getU()
		if f.err != nil || len(f.b) != 0 {
			return 0
		}
		return flags
	case k == kindTag && !answer, k == kindAnswerTag && answer:
		_, _, flags, err := parseTag(p, replica.MaxServers, answer)
		if err != nil {
			return 0
		}
		return flags
	}
	return 0
}

func redirectBody(r int, epoch uint64, ts int32) []byte {
	return newBody(kindRedirect, 12).u(uint64(r)).u(epoch).i(int64(ts)).b
}

// parseRedirect reads a redirect's range (below n), epoch and request
// timestamp.
func parseRedirect(p []byte, n int) (r int, epoch uint64, ts int32, err error) {
	f := &fields{b: p}
	r = f.getRank(n)
	epoch = f.getU()
	ts = f.getI32()
	if f.err == nil && len(f.b) != 0 {
		f.err = errShortBody
	}
	return r, epoch, ts, f.err
}

// forwardHeader is what a forward's body carries besides its data frames.
type forwardHeader struct {
	f          replica.Forward[struct{}]
	cmd        int32
	push, pull bool
}

func forwardBody(f *replica.Forward[struct{}], cmd int32, push, pull bool) []byte {
	return newBody(kindForward, 48).forward(f, cmd, push, pull).b
}

// forward appends the fields of a forward.
func (b *fields) forward(f *replica.Forward[struct{}], cmd int32, push, pull bool) *fields {
	flags := uint64(0)
	if push {
		flags |= 1
	}
	if pull {
		flags |= 2
	}
	b.u(f.Epoch).u(uint64(f.From)).u(f.Inc).u(uint64(f.Range)).u(f.LSN).u(uint64(f.Kind)).u(f.Gen)
	b.i(int64(f.Origin.Sender)).i(int64(f.Origin.Customer)).i(int64(f.Origin.TS)).i(int64(cmd)).u(flags)
	return b
}

func parseForward(p []byte, n int) (forwardHeader, error) {
	f := &fields{b: p}
	h := f.getForward(n)
	if f.err == nil && len(f.b) != 0 {
		f.err = errShortBody
	}
	return h, f.err
}

// getForward reads the fields of a forward.
func (f *fields) getForward(n int) forwardHeader {
	var h forwardHeader
	h.f.Epoch = f.getU()
	h.f.From = f.getRank(n)
	h.f.Inc = f.getU()
	h.f.Range = f.getRank(n)
	h.f.LSN = f.getU()
	h.f.Kind = replica.EntryKind(f.getU())
	h.f.Gen = f.getU()
	h.f.Origin.Sender = f.getI32()
	h.f.Origin.Customer = f.getI32()
	h.f.Origin.TS = f.getI32()
	h.cmd = f.getI32()
	flags := f.getU()
	h.push, h.pull = flags&1 != 0, flags&2 != 0
	if f.err == nil && h.f.Kind != replica.EntryRequest && h.f.Kind != replica.EntryCut {
		f.err = errShortBody
	}
	return h
}

// A batch carries its forwards' data in at most three frames: the j-th
// frame of every forward (keys, values, lens), one after the other. Its
// body: the number of forwards, then each forward's fields, its number of
// frames (0, 2 or 3) and their sizes in bytes.
const maxBatch = 4096

// batchedForward is one forward of a batch: its fields and the sizes of
// its data frames.
type batchedForward struct {
	forwardHeader
	frames int
	sizes  [3]int
}

func batchBody(list []batchedForward) []byte {
	b := newBody(kindBatch, 4+60*len(list)).u(uint64(len(list)))
	for i := range list {
		h := &list[i]
		b.forward(&h.f, h.cmd, h.push, h.pull).u(uint64(h.frames))
		for j := range h.frames {
			b.u(uint64(h.sizes[j]))
		}
	}
	return b.b
}

// parseBatch reads a batch's forwards; frame j of each must add up to
// sizes[j], the message's (the message has as many frames as the forward
// with the most).
func parseBatch(p []byte, n int, sizes []int) ([]batchedForward, error) {
	f := &fields{b: p}
	count := f.getU()
	if f.err == nil && (count == 0 || count > maxBatch || len(sizes) > 3) {
		f.err = errShortBody
	}
	var list []batchedForward
	var total [3]int
	most := 0
	for i := uint64(0); f.err == nil && i < count; i++ {
		h := batchedForward{forwardHeader: f.getForward(n)}
		k := f.getU()
		if f.err == nil && (k == 1 || k > 3 || h.f.Kind == replica.EntryCut && k != 0) {
			f.err = errShortBody
		}
		h.frames = int(k)
		most = max(most, h.frames)
		for j := 0; f.err == nil && j < h.frames; j++ {
			x := f.getU()
			if f.err == nil && x > 1<<40 {
				f.err = errShortBody
			}
			h.sizes[j] = int(x)
			total[j] += h.sizes[j]
		}
		list = append(list, h)
	}
	if f.err == nil && (len(f.b) != 0 || most != len(sizes)) {
		f.err = errShortBody
	}
	for j := 0; f.err == nil && j < len(sizes); j++ {
		if total[j] != sizes[j] {
			f.err = errShortBody
		}
	}
	return list, f.err
}

func ackBody(a replica.Ack) []byte { return ackKindBody(kindAck, a) }

// askCopyBody asks for a copy of a.Range.
func askCopyBody(a replica.Ack) []byte { return ackKindBody(kindAskCopy, a) }

func ackKindBody(kind byte, a replica.Ack) []byte {
	return newBody(kind, 24).u(a.Epoch).u(uint64(a.From)).u(a.Inc).u(uint64(a.Range)).u(a.Version).u(a.LSN).b
}

// sayAgainBody asks a server to say again how far it is.
func sayAgainBody() []byte { return newBody(kindSayAgain, 0).b }

func parseAck(p []byte, n int) (replica.Ack, error) {
	f := &fields{b: p}
	var a replica.Ack
	a.Epoch = f.getU()
	a.From = f.getRank(n)
	a.Inc = f.getU()
	a.Range = f.getRank(n)
	a.Version = f.getU()
	a.LSN = f.getU()
	if f.err == nil && len(f.b) != 0 {
		f.err = errShortBody
	}
	return a, f.err
}

func snapshotBody(s *replica.Snapshot[struct{}]) []byte {
	b := newBody(kindSnapshot, 32+24*len(s.Applied))
	b.u(s.Epoch).u(uint64(s.From)).u(s.Inc).u(uint64(s.Range)).u(s.LSN).u(s.Gen)
	b.b = replica.EncodeApplied(b.b, s.Applied)
	return b.b
}

func parseSnapshot(p []byte, n int) (replica.Snapshot[struct{}], error) {
	f := &fields{b: p}
	var s replica.Snapshot[struct{}]
	s.Epoch = f.getU()
	s.From = f.getRank(n)
	s.Inc = f.getU()
	s.Range = f.getRank(n)
	s.LSN = f.getU()
	s.Gen = f.getU()
	if f.err != nil {
		return s, f.err
	}
	applied, rest, err := replica.DecodeApplied(f.b)
	if err != nil || len(rest) != 0 {
		return s, errShortBody
	}
	s.Applied = applied
	return s, nil
}

func refuseBody(r int, epoch uint64) []byte { return newBody(kindRefuse, 8).u(uint64(r)).u(epoch).b }

// parseTag reads a tag or an answer tag: a range below n, a number (epoch
// or gen) and flags (an answer tag's always; a request tag's, flagKeys,
// when it has them).
func parseTag(p []byte, n int, answer bool) (r int, x uint64, flags uint64, err error) {
	f := &fields{b: p}
	r = f.getRank(n)
	x = f.getU()
	if answer || len(f.b) > 0 { // (a request's flags may be left out)
		flags = f.getU()
	}
	if f.err == nil && len(f.b) != 0 {
		f.err = errShortBody
	}
	return r, x, flags, f.err
}
