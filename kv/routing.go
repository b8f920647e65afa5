package kv

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/replica"
)

// A worker in a managed job sends each key range to the head of the range
// in the scheduler's latest view, tagged with the range and the view's
// epoch, and keeps what it sent until answered: when the server it went to
// leaves the range (it died), or says it does not head the range
// (a redirect), the part goes again, under the same timestamp, to the
// range's head in a view recent enough; the server that applied it already
// answers without applying it twice. See docs/REPLICATION.md.

// sentPart is a part of a request as a managed worker sent it.
type sentPart[V message.Value] struct {
	r    int // the key range
	kvs  KVPairs[V]
	dest int    // the server rank it went to, -1 while no server holds the range
	inc  uint64 // that server's incarnation when it went
	// after, when not 0, holds the part until a view of at least this
	// epoch (it was redirected, or nobody held its range).
	after uint64
}

func (r *request[V]) part(rg int) *sentPart[V] {
	for i := range r.parts {
		if r.parts[i].r == rg {
			return &r.parts[i]
		}
	}
	return nil
}

// startRouting sets a new worker up for a managed job.
func (w *KVWorker[V]) startRouting() {
	w.loss.init()
	if !w.po.Managed() {
		// Outside managed jobs a replaced server restarts empty: what the
		// worker pushed to it is gone; what it left unanswered goes to
		// the replacement.
		w.po.OnNodeReplaced(func(id int) {
			if message.IsServerID(id) {
				w.cust.Do(func() {
					rank := message.IDToRank(id)
					w.lossed(&StateLostError{Server: rank, Pushes: w.loss.take(rank, 0)})
					w.toReplacement(rank)
				})
			}
		})
		return
	}
	w.managed = true
	w.po.OnView(func(v *replica.View) { w.cust.Do(func() { w.viewChanged(v) }) })
}

// toReplacement sends a replaced server the parts its predecessor left
// unanswered, outside managed jobs. With PS_RESEND the van does (it keeps
// every request until answered); without, they would wait for ever on a
// predecessor cut off rather than dead, whose connection never closes.
func (w *KVWorker[V]) toReplacement(rank int) {
	if w.po.Config().Resend || w.po.Config().DropRate > 0 {
		return
	}
	type resend struct {
		ts   int
		r    *request[V]
		part sentPart[V]
	}
	var again []resend
	w.mu.Lock()
	for ts, r := range w.reqs.All() {
		if sp := r.part(rank); sp != nil && slices.Contains(r.waiting, rank) {
			again = append(again, resend{ts: ts, r: r, part: *sp})
		}
	}
	w.mu.Unlock()
	if len(again) > 0 {
		w.log().Warn().Int("server", rank).Int("requests", len(again)).Msg("sending what a replaced server left unanswered to its replacement")
	}
	for _, a := range again {
		w.sendPart(a.ts, a.r, a.part, 0)
	}
}

// keepParts keeps, outside managed jobs, the part of a request each server
// gets, to send it again to a replacement.
func (w *KVWorker[V]) keepParts(r *request[V], parts []KVPairs[V]) {
	r.parts = r.part1[:0]
	for _, i := range r.waiting {
		r.parts = append(r.parts, sentPart[V]{r: i, kvs: parts[i], dest: i})
	}
}

// route picks, in a managed job, the server each part goes to: the head
// of its range in the current view (its home server before the first).
func (w *KVWorker[V]) route(r *request[V], parts []KVPairs[V]) *replica.View {
	v := w.po.View()
	epoch := uint64(0)
	if v != nil {
		epoch = v.Epoch
	}
	r.parts = make([]sentPart[V], 0, len(r.waiting))
	for _, i := range r.waiting {
		sp := sentPart[V]{r: i, kvs: parts[i], dest: i}
		if v != nil {
			sp.dest, sp.inc = v.HeadOf(i), v.IncOf(v.HeadOf(i))
			if sp.dest < 0 {
				sp.after = epoch + 1
			}
		}
		r.parts = append(r.parts, sp)
	}
	if v == nil {
		return &replica.View{} // epoch 0: servers take it as untagged routing
	}
	return v
}

// answerRange returns the key range msg answers (or redirects) of request
// r, and whether r waits on that answer from msg's sender. w.mu is held.
func (w *KVWorker[V]) answerRange(r *request[V], msg *message.Message) (int, bool) {
	sender := message.IDToRank(int(msg.Meta.Sender))
	if !w.managed {
		return sender, slices.Contains(r.waiting, sender)
	}
	rg := -1
	switch k, p := bodyKind(msg.Meta.Body); k {
	case kindAnswerTag:
		rg, _, _, _ = parseTag(p, len(w.po.ServerKeyRanges()), true)
	case kindRedirect:
		rg, _, _, _ = parseRedirect(p, len(w.po.ServerKeyRanges()))
	default:
		// Untagged (a refusal): the part that went to the sender.
		for _, sp := range r.parts {
			if sp.dest == sender && sp.after == 0 && slices.Contains(r.waiting, sp.r) {
				rg = sp.r
				break
			}
		}
	}
	if rg < 0 || !slices.Contains(r.waiting, rg) {
		return -1, false
	}
	sp := r.part(rg)
	if sp == nil || sp.dest != sender || sp.after != 0 {
		return -1, false
	}
	return rg, true
}

// redirected takes a server's word that it does not head a range.
func (w *KVWorker[V]) redirected(msg *message.Message) {
	_, p := bodyKind(msg.Meta.Body)
	rg, epoch, rts, err := parseRedirect(p, len(w.po.ServerKeyRanges()))
	if err != nil {
		return
	}
	ts := int(rts)
	w.mu.Lock()
	r, ok := w.reqs.Get(ts)
	var sp *sentPart[V]
	if ok {
		sp = r.part(rg)
	}
	if sp == nil || sp.dest != message.IDToRank(int(msg.Meta.Sender)) || sp.after != 0 {
		w.mu.Unlock()
		return
	}
	sp.after = epoch
	w.mu.Unlock()
	// Send it again now if this worker's view is that recent.
	if v := w.po.View(); v != nil && v.Epoch >= epoch {
		w.viewChanged(v)
	}
}

// viewChanged sends again the parts whose server left their range, or
// that waited for this view, and takes note of ranges lost.
func (w *KVWorker[V]) viewChanged(v *replica.View) {
	type resend struct {
		ts   int
		r    *request[V]
		part sentPart[V]
		old  int
	}
	var again []resend
	w.mu.Lock()
	for ts, r := range w.reqs.All() {
		for i := range r.parts {
			sp := &r.parts[i]
			if !slices.Contains(r.waiting, sp.r) || sp.r >= len(v.Ranges) {
				continue
			}
			gone := sp.after == 0 && (v.IncOf(sp.dest) != sp.inc || !v.Ranges[sp.r].Holds(sp.dest))
			due := sp.after != 0 && v.Epoch >= sp.after
			if !gone && !due {
				continue
			}
			old := sp.dest
			if sp.after != 0 {
				old = -1 // nothing of it is kept for the old server
			}
			sp.dest, sp.inc, sp.after = v.HeadOf(sp.r), v.IncOf(v.HeadOf(sp.r)), 0
			if sp.dest < 0 {
				sp.after = v.Epoch + 1
				continue
			}
			again = append(again, resend{ts: ts, r: r, part: *sp, old: old})
		}
	}
	w.mu.Unlock()
	for _, e := range w.loss.view(v) {
		w.lossed(e)
	}
	for _, a := range again {
		if a.old >= 0 {
			// A copy kept by the van for the old server must not reach it,
			// or a replacement of it, later.
			w.po.Van().CancelResend(w.cust.AppID(), message.ServerRankToID(a.old), a.ts, a.part.r)
		}
		w.sendPart(a.ts, a.r, a.part, v.Epoch)
	}
}

// sendPart sends a part of request ts (again) to its server.
func (w *KVWorker[V]) sendPart(ts int, r *request[V], sp sentPart[V], epoch uint64) {
	msg := message.Get()
	msg.Meta.Body = requestBody(w.managed, sp.r, epoch, r.pull != nil)
	msg.Meta.AppID = int32(w.cust.AppID())
	msg.Meta.CustomerID = int32(w.cust.CustomerID())
	msg.Meta.Request = true
	msg.Meta.Push = r.push
	msg.Meta.Pull = r.pull != nil
	msg.Meta.Head = int32(r.cmd)
	msg.Meta.Timestamp = int32(ts)
	msg.Meta.Recver = int32(message.ServerRankToID(sp.dest))
	msg.Meta.Priority = int32(sp.kvs.Priority)
	msg.ZeroCopy = true
	msg.AddData(message.Uint64, message.Frame(sp.kvs.Keys))
	msg.AddData(message.TypeOf[V](), message.Frame(sp.kvs.Vals))
	if len(sp.kvs.Lens) > 0 {
		msg.AddData(message.Int32, message.Frame(sp.kvs.Lens))
	}
	if err := w.po.SendRecycled(msg); err != nil {
		err = fmt.Errorf("kv: send to server %d: %w", sp.dest, err)
		w.dropRequest(ts)
		w.cust.Tracker().Fail(ts, err)
	}
}

// StateLostError says that a server's key range lost changes this worker
// made: the server died with no replica to take its place, and the range
// started again empty or from an older snapshot.
type StateLostError struct {
	// Server is the rank of the range's home server.
	Server int
	// Range names the keys.
	Range string
	// Snapshot is the snapshot the range was restored from (0: none, it
	// restarted empty).
	Snapshot uint64
	// Pushes is how many of this worker's requests that changed the range,
	// answered by the server, were lost.
	Pushes int64
}

func (e *StateLostError) Error() string {
	from := "empty (no replica, no snapshot)"
	if e.Snapshot != 0 {
		from = fmt.Sprintf("from snapshot %d", e.Snapshot)
	}
	return fmt.Sprintf("kv: server %d's state was lost: its key %s restarted %s; %d pushes this worker made to it, answered, are gone (PS_REPLICAS keeps them)",
		e.Server, e.Range, from, e.Pushes)
}

// ErrStateLost is matched (errors.Is) by every StateLostError.
var ErrStateLost = errors.New("kv: server state lost")

// Is makes errors.Is(err, ErrStateLost) true.
func (e *StateLostError) Is(target error) bool { return target == ErrStateLost }

// AcceptStateLoss declares that the program accepts losing what it pushed
// to a server that dies unreplicated (see StateLoss): the worker then goes
// on, logging a warning and counting the pushes lost in the
// state_lost_pushes_total metric, instead of stopping the job. Without it,
// a loss of pushes this worker made stops the job, naming the server, its
// keys and the pushes lost.
func (w *KVWorker[V]) AcceptStateLoss() {
	w.loss.mu.Lock()
	w.loss.accept = true
	w.loss.mu.Unlock()
}

// StateLoss returns the losses of this worker's pushes so far (each a
// *StateLostError, joined), or nil.
func (w *KVWorker[V]) StateLoss() error {
	w.loss.mu.Lock()
	defer w.loss.mu.Unlock()
	return errors.Join(w.loss.lost...)
}

// lossBook counts, per key range and snapshot gen, the changes this
// worker made that servers answered, so that it can say how many a lost
// range took with it. It has a lock of its own, taken after the worker's
// when both are.
type lossBook struct {
	mu     sync.Mutex
	acked  map[int]map[uint64]int64 // range -> gen -> changes answered
	seen   map[int]uint64           // range -> the last loss version taken
	accept bool
	lost   []error
}

func (l *lossBook) init() {
	l.acked = map[int]map[uint64]int64{}
	l.seen = map[int]uint64{}
}

// answered counts an answer to a part of range rg.
func (l *lossBook) answered(rg int, msg *message.Message, push bool) {
	changed, gen := push, uint64(0)
	if k, p := bodyKind(msg.Meta.Body); k == kindAnswerTag {
		var flags uint64
		_, gen, flags, _ = parseTag(p, replica.MaxServers, true)
		changed = flags&flagChanged != 0
	}
	if !changed {
		return
	}
	l.mu.Lock()
	m := l.acked[rg]
	if m == nil {
		m = map[uint64]int64{}
		l.acked[rg] = m
	}
	m[gen]++
	l.mu.Unlock()
}

// take removes and returns the changes of range rg made at gen or later.
func (l *lossBook) take(rg int, gen uint64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for g, c := range l.acked[rg] {
		if g >= gen {
			n += c
			delete(l.acked[rg], g)
		}
	}
	return n
}

// view returns the losses a view records that this worker had not seen.
func (l *lossBook) view(v *replica.View) []*StateLostError {
	var out []*StateLostError
	for rg, rv := range v.Ranges {
		l.mu.Lock()
		seen := rv.LossVersion == 0 || rv.LossVersion <= l.seen[rg]
		if !seen {
			l.seen[rg] = rv.LossVersion
		}
		l.mu.Unlock()
		if seen {
			continue
		}
		n := l.take(rg, rv.LossGen)
		out = append(out, &StateLostError{Server: rg, Range: replica.RangeString(rg, len(v.Ranges)), Snapshot: rv.LossGen, Pushes: n})
	}
	return out
}

// lossed reports a loss: logged, counted, remembered, and, unless the
// program accepts losses, the end of the job.
func (w *KVWorker[V]) lossed(e *StateLostError) {
	if e.Range == "" {
		e.Range = replica.RangeString(e.Server, len(w.po.ServerKeyRanges()))
	}
	if e.Pushes == 0 {
		w.log().Warn().Int("server", e.Server).Msg("a server restarted without its state; this worker had pushed nothing to it since")
		return
	}
	w.loss.mu.Lock()
	w.loss.lost = append(w.loss.lost, e)
	accept := w.loss.accept
	w.loss.mu.Unlock()
	w.po.Metrics().StateLost(e.Server, e.Pushes)
	if accept {
		w.log().Warn().Err(e).Msg("state lost (accepted: AcceptStateLoss)")
		return
	}
	w.log().Error().Err(e).Msg("state lost: stopping the job (call AcceptStateLoss to go on instead)")
	w.po.Fail(e)
}
