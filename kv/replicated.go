package kv

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/metrics"
	"github.com/gopslite/pslite/replica"
	"github.com/gopslite/pslite/snapshot"
)

// replicated runs a KVServer's store in a managed job: a replica.Core says
// what to apply, pass on and answer, and this carries it out. Everything
// here runs in the server customer's turn (messages, and views and
// snapshots through Customer.Do), one thing at a time, so it needs no lock.
type replicated[V message.Value] struct {
	s     *KVServer[V]
	store Store[V]
	core  *replica.Core[*entry[V]]
	app   int
	rank  int
	n     int
	dir   string // PS_CHECKPOINT_DIR
	log   zerolog.Logger
	warn  zerolog.Logger // rate-limited
	stop  []func()
	// started: the first view was taken (and the store restored from disk
	// if the job resumed from a snapshot).
	started bool
	// acks waiting to be sent, the last per server and range: an ack says
	// how far everything after this server is, so one sent after a burst
	// of entries does for all of them (see deferAck).
	acks map[[2]int]replica.Ack
	// forwards waiting to be sent, per server, in order (see forward).
	batches map[int]*batch
	// flushQueued: flushPending is queued on the customer.
	flushQueued bool
}

// batch is the small forwards to one server kept for the end of a burst,
// the j-th frame of each copied after the others' into buf[j].
type batch struct {
	list  []batchedForward
	buf   [3][]byte
	types [3]message.DataType
	bytes int
}

const (
	// batchAlone: a forward with this many bytes of data or more is sent
	// alone, its frames as they are.
	batchAlone = 64 << 10
	// batchFull: a batch is sent once its frames hold this many bytes or
	// it has batchEntries forwards.
	batchFull    = 1 << 20
	batchEntries = 512
)

// entry is a request, or an entry passed on by another server, as the
// core carries it.
type entry[V message.Value] struct {
	meta   KVMeta
	data   KVPairs[V]
	frames [][]byte // data's frames, as they are sent on
	types  []message.DataType
	tagged bool
	owned  bool // data is the entry's own (not lent by the transport)
	// At the head: the answer Apply gave, kept until the entry is
	// replicated.
	answer KVPairs[V]
	err    error
	gen    uint64
	done   bool // applied, answered or let go of: its data is no longer needed
	snap   []byte
}

// SetStore makes st answer the server's KV requests (in place of a
// request handle), and starts handling them. In a managed job (PS_REPLICAS,
// PS_CHECKPOINT_DIR) the store's key ranges are kept on the servers the
// scheduler's views say, and written to disk when asked; a job launched
// again with the same PS_CHECKPOINT_DIR restores it from the last
// snapshot. Elsewhere it is simply the request handle. Call it once,
// after the node has started.
func (s *KVServer[V]) SetStore(st Store[V]) error {
	if st == nil {
		return fmt.Errorf("kv: nil store")
	}
	po := s.po
	if !po.Managed() {
		return s.SetRequestHandle(storeHandle(st))
	}
	if s.rep != nil {
		return fmt.Errorf("kv: the server of app %d has a store already", s.cust.AppID())
	}
	r := &replicated[V]{
		s: s, store: st, app: s.cust.AppID(), rank: po.MyRank(), n: po.NumServers(),
		dir: po.Config().CheckpointDir, log: po.Logger(),
	}
	r.warn = r.log.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Second})
	r.core = replica.NewCore[*entry[V]](r.rank, r.log.With().Int("app", r.app).Logger())
	s.mu.Lock()
	s.rep = r
	s.mu.Unlock()
	// The first view, then every later one, in the customer's turn.
	cust := s.cust
	r.stop = append(r.stop, po.OnView(func(v *replica.View) {
		cust.Do(func() { r.setView(v) })
	}))
	if v := po.View(); v != nil {
		cust.Do(func() { r.setView(v) })
	}
	r.stop = append(r.stop, po.RegisterCutter(r.app, cutter(func(gen uint64) {
		cust.Do(func() { r.run(r.core.Cut(gen)) })
	})))
	s.resume()
	return nil
}

type cutter func(gen uint64)

func (c cutter) Cut(gen uint64) { c(gen) }

// storeHandle answers requests with a store, outside managed jobs.
func storeHandle[V message.Value](st Store[V]) ReqHandle[V] {
	ar, async := st.(AsyncReader[V])
	return func(meta KVMeta, data KVPairs[V], s *KVServer[V]) {
		answer := func(res KVPairs[V], err error) {
			if err != nil {
				s.refuse(meta, err)
				return
			}
			if err := s.ZResponse(meta, res); err != nil {
				l := s.po.Logger()
				l.Warn().Err(err).Msg("response failed")
			}
		}
		if async && !st.Changes(meta, data) {
			ar.Read(meta, data, answer)
			return
		}
		answer(st.Apply(meta, data))
	}
}

func (r *replicated[V]) close() {
	for _, f := range r.stop {
		f()
	}
}

// setView takes a view; the first one also restores the store from the
// snapshot the job resumed from.
func (r *replicated[V]) setView(v *replica.View) {
	if !r.started {
		r.started = true
		if v.Restored != 0 && !r.s.po.IsRecovery() {
			if err := r.restoreFromDisk(v); err != nil {
				r.s.po.Fail(fmt.Errorf("kv: store of app %d cannot restore snapshot %d: %w", r.app, v.Restored, err))
				return
			}
		}
	}
	r.run(r.core.SetView(v))
}

// restoreFromDisk restores every range this server holds in its first view
// from the snapshot the job resumes from.
func (r *replicated[V]) restoreFromDisk(v *replica.View) error {
	for rg := range v.Ranges {
		if v.Ranges[rg].Position(r.rank) < 0 {
			continue
		}
		if err := r.load(rg, v.Restored); err != nil {
			return err
		}
	}
	r.log.Info().Int("app", r.app).Uint64("snapshot", v.Restored).Msg("store restored")
	return nil
}

// load replaces range rg of the store with what snapshot gen holds of it
// (gen 0: nothing).
func (r *replicated[V]) load(rg int, gen uint64) error {
	part := r.part(rg)
	if gen == 0 {
		return r.store.Restore(nil, part)
	}
	if r.dir == "" {
		return fmt.Errorf("snapshot %d asked for without PS_CHECKPOINT_DIR", gen)
	}
	if apps, err := snapshot.Apps(r.dir, gen); err == nil && !slices.Contains(apps, r.app) {
		r.log.Warn().Int("app", r.app).Uint64("snapshot", gen).Msg("the snapshot holds nothing of this store (it did not exist then): it starts empty")
		return r.store.Restore(nil, part)
	}
	files, err := snapshot.Files(r.dir, gen, r.app, rg, r.n)
	if err != nil {
		return err
	}
	readers := make([]io.Reader, 0, len(files))
	for _, f := range files {
		h, body, err := snapshot.ReadRange(f)
		if err != nil {
			return err
		}
		if h.App != r.app || h.Gen != gen {
			return fmt.Errorf("%s holds app %d snapshot %d", f, h.App, h.Gen)
		}
		readers = append(readers, bytes.NewReader(body))
	}
	return r.store.Restore(readers, part)
}

// part returns store part rg of the job.
func (r *replicated[V]) part(rg int) Part {
	return Part{Index: rg, Of: r.n, Keys: r.s.po.ServerKeyRanges()[rg]}
}

// request takes a worker's KV request.
func (r *replicated[V]) request(msg *message.Message, meta KVMeta, data KVPairs[V]) {
	rg, epoch, tagged := r.rank, uint64(0), false
	if k, p := bodyKind(msg.Meta.Body); k == kindTag {
		var err error
		if rg, epoch, _, err = parseTag(p, r.n, false); err != nil {
			r.s.refuse(meta, fmt.Errorf("a request with a malformed range tag"))
			return
		}
		tagged = true
	}
	e := &entry[V]{meta: meta, data: data, frames: slices.Clone(msg.Data), types: slices.Clone(msg.Meta.DataTypes), tagged: tagged, owned: !msg.Lent()}
	req := &replica.Request[*entry[V]]{
		Origin:  replica.Origin{Sender: int32(meta.Sender), Customer: int32(meta.CustomerID), TS: int32(meta.Timestamp)},
		Range:   rg,
		Epoch:   epoch,
		Tagged:  tagged,
		Changes: r.store.Changes(meta, data),
		Payload: e,
	}
	r.run(r.core.Request(req))
	r.keep(msg, e)
}

// keep makes what the core still holds of e outlive msg, which is given
// back (and, being recycled, zeroed) when the handler returns: the request
// itself when it waits (held, or for a newer view), the keys of its answer
// when it waits to be replicated. (e's lists of frames and types are its
// own from the start: a message's small lists live in the message.)
func (r *replicated[V]) keep(msg *message.Message, e *entry[V]) {
	if e.owned {
		return
	}
	if !e.done {
		msg.Own()
		data, err := decodeKVs[V](msg, msg.Meta.Push)
		if err != nil { // cannot happen: it decoded before
			r.log.Error().Err(err).Msg("kv: re-decoding a kept request")
		}
		e.data, e.frames, e.owned = data, slices.Clone(msg.Data), true
		if e.meta.keysKnown != nil {
			e.meta.keysKnown = data.Keys // (the answer's keys will be these)
		}
		return
	}
	if e.answer.Keys != nil && msg.IsLent(0) && len(e.answer.Keys) > 0 && len(e.data.Keys) > 0 &&
		&e.answer.Keys[0] == &e.data.Keys[0] {
		e.answer.Keys = slices.Clone(e.answer.Keys)
	}
}

// replication takes a message from another server.
func (r *replicated[V]) replication(msg *message.Message, kind byte, p []byte) {
	sender := int(msg.Meta.Sender)
	if !r.s.po.IsMemberServer(sender) {
		r.warn.Warn().Str("from", message.DescribeID(sender)).Msg("dropping a replication message not from a server")
		return
	}
	switch kind {
	case kindForward:
		h, err := parseForward(p, r.n)
		if err == nil && h.f.From != message.IDToRank(sender) {
			err = fmt.Errorf("sent by %s on behalf of server %d", message.DescribeID(sender), h.f.From)
		}
		var data KVPairs[V]
		if err == nil && h.f.Kind == replica.EntryRequest {
			data, err = decodeKVs[V](msg, h.push)
		}
		if err != nil {
			r.unreadable(sender, "an entry", err)
			return
		}
		e := &entry[V]{
			meta: KVMeta{Cmd: int(h.cmd), Push: h.push, Pull: h.pull, Sender: int(h.f.Origin.Sender),
				Timestamp: int(h.f.Origin.TS), CustomerID: int(h.f.Origin.Customer), AppID: r.app},
			data: data, frames: slices.Clone(msg.Data), types: slices.Clone(msg.Meta.DataTypes), owned: !msg.Lent(),
		}
		f := &replica.Forward[*entry[V]]{From: h.f.From, Inc: h.f.Inc, Epoch: h.f.Epoch, Range: h.f.Range, LSN: h.f.LSN,
			Kind: h.f.Kind, Gen: h.f.Gen, Origin: h.f.Origin, Payload: e}
		r.run(r.core.Forward(f))
		r.keep(msg, e)
	case kindBatch:
		r.batch(msg, sender, p)
	case kindAck:
		a, err := parseAck(p, r.n)
		if err == nil && a.From != message.IDToRank(sender) {
			err = fmt.Errorf("sent by %s on behalf of server %d", message.DescribeID(sender), a.From)
		}
		if err != nil {
			r.unreadable(sender, "an ack", err)
			return
		}
		r.run(r.core.Ack(a))
	case kindAskCopy:
		a, err := parseAck(p, r.n)
		if err != nil || a.From != message.IDToRank(sender) {
			r.warn.Warn().Str("from", message.DescribeID(sender)).Msg("dropping a malformed request for a copy")
			return
		}
		r.run(r.core.AskCopy(a))
	case kindSayAgain:
		r.run(r.core.SayAgain(message.IDToRank(sender)))
	case kindSnapshot:
		h, err := parseSnapshot(p, r.n)
		switch {
		case err != nil:
		case h.From != message.IDToRank(sender):
			err = fmt.Errorf("sent by %s on behalf of server %d", message.DescribeID(sender), h.From)
		case len(msg.Data) != 1:
			err = fmt.Errorf("%d data frames", len(msg.Data))
		}
		if err != nil {
			r.unreadable(sender, "a copy of a range", err)
			return
		}
		msg.Own()
		e := &entry[V]{snap: msg.Data[0], owned: true}
		s := &replica.Snapshot[*entry[V]]{From: h.From, Inc: h.Inc, Epoch: h.Epoch, Range: h.Range, LSN: h.LSN,
			Gen: h.Gen, Applied: h.Applied, Data: e}
		r.run(r.core.Snapshot(s))
	case kindRefuse:
		rg, epoch, _, _ := parseTag(p, r.n, false)
		r.log.Debug().Str("from", message.DescribeID(sender)).Int("range", rg).Uint64("epoch", epoch).Msg("a server refused an entry of this one: their views differ for now")
	}
}

// unreadable drops a message from another server that cannot be read, and
// has the core mend what it may have lost: entries and acks are never
// sent twice, so a copy of each range that server passes here is asked
// for, and that server is asked to say again how far it is (before, the
// range's chain stalled for good).
func (r *replicated[V]) unreadable(sender int, what string, err error) {
	r.warn.Warn().Err(err).Str("from", message.DescribeID(sender)).Msgf("dropping %s that cannot be read; asking that server for copies of its ranges", what)
	r.s.po.Metrics().ReplicationUnreadable()
	r.run(r.core.Unreadable(message.IDToRank(sender)))
}

// batch takes a batch of forwards: each is checked and decoded before
// any is passed to the core, so that a malformed batch is dropped whole.
func (r *replicated[V]) batch(msg *message.Message, sender int, p []byte) {
	sizes := make([]int, len(msg.Data))
	for j, fr := range msg.Data {
		sizes[j] = len(fr)
	}
	list, err := parseBatch(p, r.n, sizes)
	if err == nil && len(msg.Meta.DataTypes) != len(msg.Data) {
		err = fmt.Errorf("%d data types for %d frames", len(msg.Meta.DataTypes), len(msg.Data))
	}
	if err == nil {
		msg.Own() // the entries outlive the handler in the core
	}
	var fs []*replica.Forward[*entry[V]]
	if err == nil {
		fs, err = r.batchForwards(msg, sender, list)
	}
	if err != nil {
		r.unreadable(sender, "a batch of entries", err)
		return
	}
	for _, f := range fs {
		r.run(r.core.Forward(f))
	}
}

// batchForwards turns a batch's entries into forwards for the core. The
// entries keep msg's frames (the caller owns msg for them) and a copy of
// its type list: the message's lives in the message, which is recycled
// once the handler returns, while an entry may be kept (for a newer view,
// or ahead of its turn) and passed on later.
func (r *replicated[V]) batchForwards(msg *message.Message, sender int, list []batchedForward) ([]*replica.Forward[*entry[V]], error) {
	fs := make([]*replica.Forward[*entry[V]], 0, len(list))
	dataTypes := slices.Clone(msg.Meta.DataTypes)
	var off [3]int
	for i := range list {
		h := &list[i]
		if h.f.From != message.IDToRank(sender) {
			return nil, fmt.Errorf("sent by %s on behalf of server %d", message.DescribeID(sender), h.f.From)
		}
		frames := make([][]byte, h.frames)
		for j := range frames {
			frames[j] = msg.Data[j][off[j] : off[j]+h.sizes[j] : off[j]+h.sizes[j]]
			off[j] += h.sizes[j]
		}
		types := dataTypes[:h.frames:h.frames]
		var data KVPairs[V]
		if h.f.Kind == replica.EntryRequest {
			var err error
			if data, err = decodeFrames[V](frames, types, h.push); err != nil {
				return nil, err
			}
		}
		e := &entry[V]{
			meta: KVMeta{Cmd: int(h.cmd), Push: h.push, Pull: h.pull, Sender: int(h.f.Origin.Sender),
				Timestamp: int(h.f.Origin.TS), CustomerID: int(h.f.Origin.Customer), AppID: r.app},
			data: data, frames: frames, types: types, owned: true,
		}
		fs = append(fs, &replica.Forward[*entry[V]]{From: h.f.From, Inc: h.f.Inc, Epoch: h.f.Epoch, Range: h.f.Range,
			LSN: h.f.LSN, Kind: h.f.Kind, Gen: h.f.Gen, Origin: h.f.Origin, Payload: e})
	}
	return fs, nil
}

// run carries out the core's outputs in order.
func (r *replicated[V]) run(outs []replica.Output[*entry[V]]) {
	for len(outs) > 0 {
		o := outs[0]
		outs = outs[1:]
		switch o.Kind {
		case replica.OutApply:
			r.apply(o)
		case replica.OutRead:
			r.read(o)
		case replica.OutCut:
			outs = append(outs, r.cut(o.Range, o.Gen, o.LSN)...)
		case replica.OutForward:
			r.forward(o.To, o.Forward)
		case replica.OutAck:
			r.deferAck(o.To, o.Ack)
		case replica.OutSnapshot:
			r.sendSnapshot(o)
		case replica.OutRestore:
			if err := r.store.Restore([]io.Reader{bytes.NewReader(o.Snapshot.Data.snap)}, r.part(o.Range)); err != nil {
				r.s.po.Fail(fmt.Errorf("kv: store of app %d cannot take the copy of %s: %w", r.app, replica.RangeString(o.Range, r.n), err))
				return
			}
			r.s.po.Metrics().RangeCopied()
			r.log.Info().Int("app", r.app).Int("range", o.Range).Uint64("lsn", o.LSN).Int("bytes", len(o.Snapshot.Data.snap)).Msg("copied a range")
		case replica.OutLoad:
			if err := r.load(o.Range, o.Gen); err != nil {
				r.s.po.Fail(fmt.Errorf("kv: store of app %d cannot restore lost %s from snapshot %d: %w", r.app, replica.RangeString(o.Range, r.n), o.Gen, err))
				return
			}
			r.log.Warn().Int("app", r.app).Int("range", o.Range).Uint64("snapshot", o.Gen).Msg("restarted a lost range from the last snapshot (0: empty)")
		case replica.OutRespond:
			e := o.Request.Payload
			r.answer(e, o.Range, e.answer, e.err, e.gen, true)
		case replica.OutRespondAgain:
			r.answerAgain(o)
		case replica.OutRedirect:
			e := o.Request.Payload
			e.done = true
			r.redirect(e, o.Range, o.Epoch)
		case replica.OutRefuse:
			r.send(o.To, refuseBody(o.Range, o.Epoch), nil, nil)
			r.s.po.Metrics().ReplicationSent("refuse", 0)
		case replica.OutReport:
			if o.Report.Kind == replica.ReportCut {
				r.s.po.CutDone(r.app, o.Report.Range, o.Report.Gen)
			} else {
				r.s.po.ReportReplica(o.Report)
			}
		case replica.OutRelease:
			o.Request.Payload.done = true
		case replica.OutAskCopy:
			r.send(o.To, askCopyBody(o.Ack), nil, nil)
			r.s.po.Metrics().ReplicationSent("askcopy", 0)
		case replica.OutSayAgain:
			r.send(o.To, sayAgainBody(), nil, nil)
			r.s.po.Metrics().ReplicationSent("sayagain", 0)
		}
	}
}

// apply applies an entry to the store: a request at its range's head (its
// answer kept for later), or an entry passed on.
func (r *replicated[V]) apply(o replica.Output[*entry[V]]) {
	var e *entry[V]
	var origin replica.Origin
	if o.Request != nil {
		e, origin = o.Request.Payload, o.Request.Origin
	} else {
		e, origin = o.Forward.Payload, o.Forward.Origin
	}
	e.done = true
	var start time.Time
	m := r.s.po.Metrics()
	if m != nil {
		start = time.Now()
	}
	res, err := r.store.Apply(e.meta, e.data)
	if m != nil {
		m.ServerRequest(r.app, e.meta.CustomerID, metrics.RequestKind(e.meta.Push, e.meta.Pull, false), time.Since(start))
	}
	if o.Head {
		e.answer, e.err, e.gen = res, err, o.Gen
	}
	if ans := encodeAnswer(res, err); ans != nil {
		r.core.SetAnswer(o.Range, origin, ans)
	}
}

// encodeAnswer returns a small answer's bytes for a request sent again
// (nil: too large, read it again then).
func encodeAnswer[V message.Value](res KVPairs[V], err error) []byte {
	if err != nil {
		b := []byte{1}
		return append(b, err.Error()...)
	}
	size := 8*len(res.Keys) + message.SizeOf[V]()*len(res.Vals) + 4*len(res.Lens)
	if size+16 > replica.MaxAnswer {
		return nil
	}
	b := []byte{0}
	b = appendFrame(b, message.Frame(res.Keys))
	b = appendFrame(b, message.Frame(res.Vals))
	return appendFrame(b, message.Frame(res.Lens))
}

func appendFrame(b, f []byte) []byte {
	b = append(b, byte(len(f)), byte(len(f)>>8))
	return append(b, f...)
}

func decodeAnswer[V message.Value](b []byte) (KVPairs[V], error) {
	if len(b) == 0 {
		return KVPairs[V]{}, nil
	}
	if b[0] == 1 {
		return KVPairs[V]{}, fmt.Errorf("%s", b[1:])
	}
	b = b[1:]
	var frames [3][]byte
	for i := range frames {
		if len(b) < 2 {
			return KVPairs[V]{}, errShortBody
		}
		n := int(b[0]) | int(b[1])<<8
		if len(b) < 2+n {
			return KVPairs[V]{}, errShortBody
		}
		frames[i] = slices.Clone(b[2 : 2+n])
		b = b[2+n:]
	}
	var kvs KVPairs[V]
	var err error
	if kvs.Keys, err = message.Values[uint64](frames[0]); err != nil {
		return kvs, err
	}
	if kvs.Vals, err = message.Values[V](frames[1]); err != nil {
		return kvs, err
	}
	if len(frames[2]) > 0 {
		kvs.Lens, err = message.Values[int32](frames[2])
	}
	return kvs, err
}

// read answers a read at the range's head: now, or, from a store that
// answers reads later (AsyncReader), when it does.
func (r *replicated[V]) read(o replica.Output[*entry[V]]) {
	e := o.Request.Payload
	e.done = true
	ar, ok := r.store.(AsyncReader[V])
	if !ok {
		res, err := r.store.Apply(e.meta, e.data)
		r.answer(e, o.Range, res, err, o.Gen, false)
		return
	}
	// The request's data may be lent: the store copies what it keeps.
	rg, gen := o.Range, o.Gen
	ar.Read(e.meta, e.data, func(res KVPairs[V], err error) { r.answer(e, rg, res, err, gen, false) })
}

// answerAgain answers a request applied before.
func (r *replicated[V]) answerAgain(o replica.Output[*entry[V]]) {
	e := o.Request.Payload
	e.done = true
	if o.Answer != nil {
		res, err := decodeAnswer[V](o.Answer)
		r.answer(e, o.Range, res, err, o.Gen, true)
		return
	}
	var res KVPairs[V]
	var err error
	if e.meta.Pull {
		// Read the values again: what the request's push left, and what
		// came after.
		read := e.meta
		read.Push = false
		res, err = r.store.Apply(read, KVPairs[V]{Keys: e.data.Keys, Lens: e.data.Lens, Priority: e.data.Priority})
	}
	r.answer(e, o.Range, res, err, o.Gen, true)
}

// answer sends a request's answer to its worker.
func (r *replicated[V]) answer(e *entry[V], rg int, res KVPairs[V], err error, gen uint64, changed bool) {
	if err != nil {
		r.s.refuse(e.meta, err)
		return
	}
	var tag *answerTag
	if e.tagged {
		tag = &answerTag{r: rg, gen: gen, changed: changed}
	}
	if err := r.s.response(e.meta, res, true, tag); err != nil {
		r.warn.Warn().Err(err).Msg("response failed")
	}
}

// redirect tells a Go worker to send its request to the head of range rg
// in a view of epoch or later.
func (r *replicated[V]) redirect(e *entry[V], rg int, epoch uint64) {
	msg := message.New()
	msg.Meta.AppID = int32(r.app)
	msg.Meta.CustomerID = int32(e.meta.CustomerID)
	msg.Meta.Request = true
	msg.Meta.Push, msg.Meta.Pull = e.meta.Push, e.meta.Pull
	msg.Meta.Head = int32(e.meta.Cmd)
	msg.Meta.Timestamp = int32(e.meta.Timestamp)
	msg.Meta.Recver = int32(e.meta.Sender)
	msg.Meta.Body = redirectBody(rg, epoch, int32(e.meta.Timestamp))
	// A timestamp of its own (resending needs one), not the request's: a
	// redirect is no answer, and must not pass for one at the van.
	msg.Meta.Timestamp = r.s.po.Van().NextTimestamp()
	if err := r.s.po.Send(msg); err != nil {
		r.warn.Warn().Err(err).Msg("redirect not sent")
	}
}

// deferAck sends a, for server to, after the messages the customer has
// queued now: acks are cumulative, so the last one for a server and range
// (in the range's version at the time, which a new version's ack
// supersedes) does for a burst of entries.
func (r *replicated[V]) deferAck(to int, a replica.Ack) {
	if r.acks == nil {
		r.acks = map[[2]int]replica.Ack{}
	}
	r.acks[[2]int{to, a.Range}] = a
	r.flushLater()
}

// flushLater has flushPending run after the messages the customer has
// queued now (at once when the customer has stopped).
func (r *replicated[V]) flushLater() {
	if r.flushQueued {
		return
	}
	r.flushQueued = r.s.cust.Do(r.flushPending)
	if !r.flushQueued {
		r.flushPending()
	}
}

// flushPending sends the forwards and acks kept for the end of a burst.
func (r *replicated[V]) flushPending() {
	r.flushQueued = false
	for _, to := range slices.Sorted(maps.Keys(r.batches)) {
		r.flushForwards(to)
	}
	for k, a := range r.acks {
		r.sendNow(k[0], ackBody(a), nil, nil)
		r.s.po.Metrics().ReplicationSent("ack", 0)
	}
	clear(r.acks)
}

// forward passes an entry on to server to. A small one waits for the end
// of the burst of messages the customer is handling, and goes with the
// others to the same server in one message: each message costs the
// transport and the receiver about as much as a small entry's apply.
// Order to a server is kept: anything else sent to it sends the batch
// first.
func (r *replicated[V]) forward(to int, f *replica.Forward[*entry[V]]) {
	e := f.Payload
	h := batchedForward{forwardHeader: forwardHeader{f: replica.Forward[struct{}]{From: f.From, Inc: f.Inc, Epoch: f.Epoch,
		Range: f.Range, LSN: f.LSN, Kind: f.Kind, Gen: f.Gen, Origin: f.Origin}}}
	var frames [][]byte
	var types []message.DataType
	if f.Kind != replica.EntryCut {
		h.cmd, h.push, h.pull = int32(e.meta.Cmd), e.meta.Push, e.meta.Pull
		frames, types = e.frames, e.types
	}
	size := 0
	for _, fr := range frames {
		size += len(fr)
	}
	if size >= batchAlone {
		r.sendNow(to, forwardBody(&h.f, h.cmd, h.push, h.pull), frames, types)
		r.s.po.Metrics().ReplicationSent("forward", 1)
		return
	}
	if r.batches == nil {
		r.batches = map[int]*batch{}
	}
	b := r.batches[to]
	if b == nil {
		b = &batch{}
		r.batches[to] = b
	}
	h.frames = len(frames)
	for j, fr := range frames { // copied: a received request's frames are the transport's until its handler returns
		h.sizes[j] = len(fr)
		b.buf[j] = append(b.buf[j], fr...)
		b.types[j] = types[j]
		b.bytes += len(fr)
	}
	b.list = append(b.list, h)
	if b.bytes >= batchFull || len(b.list) >= batchEntries {
		r.flushForwards(to)
		return
	}
	r.flushLater()
}

// flushForwards sends the forwards kept for server to: one alone as a
// forward, more as a batch.
func (r *replicated[V]) flushForwards(to int) {
	b := r.batches[to]
	if b == nil || len(b.list) == 0 {
		return
	}
	delete(r.batches, to)
	if len(b.list) == 1 {
		h := &b.list[0]
		frames := make([][]byte, h.frames)
		for j := range frames {
			frames[j] = b.buf[j]
		}
		r.sendNow(to, forwardBody(&h.f, h.cmd, h.push, h.pull), frames, b.types[:h.frames])
		r.s.po.Metrics().ReplicationSent("forward", 1)
		return
	}
	most := 0
	for i := range b.list {
		most = max(most, b.list[i].frames)
	}
	frames := make([][]byte, most)
	for j := range frames {
		frames[j] = b.buf[j]
	}
	r.sendNow(to, batchBody(b.list), frames, b.types[:most])
	r.s.po.Metrics().ReplicationSent("batch", len(b.list))
}

// send sends a replication message to server rank to, after the
// forwards kept for it.
func (r *replicated[V]) send(to int, body []byte, frames [][]byte, types []message.DataType) {
	r.flushForwards(to)
	r.sendNow(to, body, frames, types)
}

// sendNow sends a replication message to server rank to.
func (r *replicated[V]) sendNow(to int, body []byte, frames [][]byte, types []message.DataType) {
	msg := message.Get()
	msg.Meta.AppID = int32(r.app)
	msg.Meta.CustomerID = int32(r.app)
	msg.Meta.Request = true
	msg.Meta.Recver = int32(message.ServerRankToID(to))
	msg.Meta.Body = body
	msg.Meta.Timestamp = r.s.po.Van().NextTimestamp()
	msg.ZeroCopy = true
	for i, f := range frames {
		msg.AddData(types[i], f)
	}
	if err := r.s.po.SendRecycled(msg); err != nil {
		r.warn.Warn().Err(err).Int("to", to).Msg("replication message not sent")
	}
}

// sendSnapshot sends a copy of a range to a server joining its chain.
func (r *replicated[V]) sendSnapshot(o replica.Output[*entry[V]]) {
	var buf bytes.Buffer
	if err := r.store.Snapshot(&buf, r.part(o.Range)); err != nil {
		r.s.po.Fail(fmt.Errorf("kv: store of app %d cannot copy %s: %w", r.app, replica.RangeString(o.Range, r.n), err))
		return
	}
	hdr := replica.Snapshot[struct{}]{From: r.rank, Inc: r.core.View().IncOf(r.rank), Epoch: r.core.Epoch(),
		Range: o.Range, LSN: o.LSN, Gen: o.Gen, Applied: o.Applied}
	r.log.Info().Int("app", r.app).Int("range", o.Range).Int("to", o.To).Int("bytes", buf.Len()).Msg("copying a range to a server that joins it")
	r.send(o.To, snapshotBody(&hdr), [][]byte{buf.Bytes()}, []message.DataType{message.Uint8})
	r.s.po.Metrics().ReplicationSent("copy", 0)
}

// cut writes snapshot gen of range rg to disk and tells the core.
func (r *replicated[V]) cut(rg int, gen, lsn uint64) []replica.Output[*entry[V]] {
	if r.dir == "" {
		r.log.Error().Uint64("snapshot", gen).Msg("asked to write a snapshot without PS_CHECKPOINT_DIR")
		return nil
	}
	part := r.part(rg)
	start := time.Now()
	err := snapshot.WriteRange(r.dir, snapshot.Header{App: r.app, Range: rg, Ranges: r.n, Writer: r.rank, LSN: lsn, Gen: gen},
		func(w io.Writer) error { return r.store.Snapshot(w, part) })
	r.s.po.Metrics().SnapshotWrite(time.Since(start), err)
	if err != nil {
		r.log.Error().Err(err).Uint64("snapshot", gen).Int("range", rg).Msg("writing a snapshot failed; it will not complete")
		return nil
	}
	return r.core.CutWritten(rg, gen)
}
