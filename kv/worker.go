package kv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/internal/hugemem"
	"github.com/gopslite/pslite/internal/tsmap"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/metrics"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/replica"
)

// Option sets an optional parameter of a KVWorker request.
type Option func(*reqOptions)

type reqOptions struct {
	cmd      int
	cb       func()
	priority int
}

// WithCmd sets the request's command (meta head), passed to the server's handle.
func WithCmd(cmd int) Option { return func(o *reqOptions) { o.cmd = cmd } }

// WithCallback sets a function run, in the customer's turn (on its
// goroutine or the van's receive goroutine), once the
// request has all its responses (and, for a pull, the values are in place),
// before Wait returns.
func WithCallback(cb func()) Option { return func(o *reqOptions) { o.cb = cb } }

// WithPriority sets the request's priority: servers handle requests of
// higher priority first.
func WithPriority(p int) Option { return func(o *reqOptions) { o.priority = p } }

func collect(opts []Option) reqOptions {
	if len(opts) == 0 {
		return reqOptions{} // (o below escapes to the heap)
	}
	var o reqOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// KVWorker pushes values to and pulls values from the servers.
type KVWorker[V message.Value] struct {
	*SimpleApp

	mu sync.Mutex // guards reqs
	// reqs holds what the worker keeps of each unfinished request that
	// went to some server, by timestamp.
	reqs tsmap.Map[*request[V]]
	// slicer is the slicer SetSlicer set; nil: DefaultSlicer.
	slicer atomic.Pointer[Slicer[V]]
	// managed is set in a managed job: requests go to the head of each
	// range in the view, tagged (see routing.go).
	managed bool
	// loss is what the worker knows of its changes lost with a server.
	loss lossBook
}

// request is what a worker keeps of an unfinished request.
type request[V message.Value] struct {
	// waiting lists the key ranges (the ranks of their home servers) not
	// answered yet, so that a lost server fails exactly the requests that
	// wait on it.
	waiting []int
	room    [2]int // waiting's own room, for requests to one or two servers
	// parts are, in a managed job, the parts sent per range, to send again
	// when their server goes away or redirects them.
	parts []sentPart[V]
	part1 [2]sentPart[V] // parts' own room, for requests to one or two servers
	push  bool
	cmd   int
	pull  *pulling[V] // nil for a push
	cb    func()      // the user's callback, or nil
	kind  string      // for metrics: the request's kind and start
	at    time.Time
}

// pulling is what a worker keeps of an unfinished pull.
type pulling[V message.Value] struct {
	dest  pullDest[V]   // where the values go
	parts []pullPart[V] // the answers so far
	part  [1]pullPart[V]
}

// ErrServerLost is the error of requests waiting on a server whose
// connection has been closed for a second (its process is gone) while
// resending is off.
var ErrServerLost = errors.New("kv: server lost")

// NewKVWorker registers a worker as customer (appID, customerID).
func NewKVWorker[V message.Value](po *postoffice.Postoffice, appID, customerID int) (*KVWorker[V], error) {
	w := &KVWorker[V]{
		SimpleApp: newSimpleApp(po),
	}
	if err := w.register(appID, customerID, w.process); err != nil {
		return nil, err
	}
	w.cust.SetNodeDownHandler(w.nodeDown)
	w.cust.SetFilter(w.accept)
	w.startRouting()
	// Pull responses keep only their values and key bounds (holding lent
	// memory until the pull is assembled), so the received keys need no copy.
	w.cust.SetTakesLent(true)
	w.cust.Resume()
	return w, nil
}

// pullPart is one server's answer to a pull: the bounds of its keys, and
// its values and lens, views of the received message (lent, when the
// transport lent its memory). The last answer of a pull is assembled before
// its message is given back; earlier answers hold the loans of their lent
// views (keep) until the pull is assembled or dropped (release). Holding,
// not copying: a copy of a large answer is fresh memory, a fault per page,
// on every pull.
type pullPart[V message.Value] struct {
	first, last uint64
	keys        int
	vals        []V
	lens        []int32
	lent        bool      // vals is a view of lent memory
	drops       [2]func() // the holds keep took, dropped by release
}

// keep makes the part's views of msg's lent frames outlive msg: the
// values at frame valsAt, the lens after them.
func (p *pullPart[V]) keep(msg *message.Message, valsAt int) {
	if msg.IsLent(valsAt) {
		p.vals = holdLent(p.vals, &p.drops[0])
	}
	if msg.IsLent(valsAt + 1) {
		p.lens = holdLent(p.lens, &p.drops[1])
	}
}

// release gives up the holds keep took.
func (p *pullPart[V]) release() {
	for i, drop := range p.drops {
		if drop != nil {
			p.drops[i] = nil
			drop()
		}
	}
}

// releaseParts gives up the holds of parts.
func releaseParts[V message.Value](parts []pullPart[V]) {
	for i := range parts {
		parts[i].release()
	}
}

// holdLent holds the loan s is a view of, setting *drop to give the hold
// up, and returns s; memory that is not lent any more (which a message's
// lent frame always is until the message is released) is copied instead.
func holdLent[T message.Value](s []T, drop *func()) []T {
	if len(s) == 0 {
		return s
	}
	if d, ok := message.HoldLent(message.Frame(s)); ok {
		*drop = d
		return s
	}
	own, err := message.Values[T](message.Clone(message.Frame(s)))
	if err != nil { // cannot happen: a whole number of values
		return slices.Clone(s)
	}
	return own
}

// accept lets in SimpleApp messages and, of KV messages, only responses
// from a server that request still waits on: a request, a response from a
// node the request did not go to, or a second response from the same
// server is dropped.
func (w *KVWorker[V]) accept(msg *message.Message) error {
	if msg.Meta.SimpleApp {
		return nil
	}
	if msg.Meta.Request {
		if k, _ := bodyKind(msg.Meta.Body); k != kindRedirect || !w.managed {
			return errors.New("a KV request sent to a worker")
		}
	}
	sender := int(msg.Meta.Sender)
	ts := int(msg.Meta.Timestamp)
	if k, p := bodyKind(msg.Meta.Body); k == kindRedirect {
		_, _, rts, err := parseRedirect(p, len(w.po.ServerKeyRanges()))
		if err != nil {
			return err
		}
		ts = int(rts)
	}
	w.mu.Lock()
	r, ok := w.reqs.Get(ts)
	waits := ok && message.IsServerID(sender)
	if waits {
		_, waits = w.answerRange(r, msg)
	}
	w.mu.Unlock()
	if !waits {
		return fmt.Errorf("request %d does not wait for a response from %s", ts, message.DescribeID(sender))
	}
	return nil
}

// nodeDown fails the requests still waiting on server id.
func (w *KVWorker[V]) nodeDown(id int) {
	if !message.IsServerID(id) || w.managed {
		return // (in a managed job, views move its ranges)
	}
	rank := message.IDToRank(id)
	var lost []int
	w.mu.Lock()
	for ts, r := range w.reqs.All() {
		if slices.Contains(r.waiting, rank) {
			lost = append(lost, ts)
		}
	}
	w.mu.Unlock()
	for _, ts := range lost {
		err := fmt.Errorf("%w: %s disconnected before answering request %d", ErrServerLost, message.DescribeID(id), ts)
		w.log().Warn().Err(err).Msg("failing the request")
		w.dropRequest(ts)
		w.cust.Tracker().Fail(ts, err)
	}
}

// SetSlicer replaces the function that splits requests over servers.
func (w *KVWorker[V]) SetSlicer(s Slicer[V]) error {
	if s == nil {
		return fmt.Errorf("kv: nil slicer")
	}
	w.slicer.Store(&s)
	return nil
}

// Push sends keys and vals (and lens, when not nil, the number of values of
// each key) to the servers. It copies its arguments, so the caller may reuse
// them at once. It returns the timestamp to Wait on.
func (w *KVWorker[V]) Push(keys []uint64, vals []V, lens []int32, opts ...Option) (int, error) {
	return w.ZPush(slices.Clone(keys), slices.Clone(vals), slices.Clone(lens), opts...)
}

// ZPush is Push without copying: keys, vals and lens must not change until
// the request has finished.
func (w *KVWorker[V]) ZPush(keys []uint64, vals []V, lens []int32, opts ...Option) (int, error) {
	o := collect(opts)
	kvs := KVPairs[V]{Keys: keys, Vals: vals, Lens: lens, Priority: o.priority}
	if err := kvs.Check(true); err != nil {
		return 0, err
	}
	return w.send(true, false, o, kvs, pullDest[V]{})
}

// Pull fetches the values of keys into *vals (and the number of values of
// each key into *lens, when lens is not nil). An empty *vals (or *lens) is
// filled within its capacity when that has room, as append would (pass
// buf[:0] to reuse buf), and allocated otherwise; a non-empty one must have
// room for exactly the values returned. The values are in place when Wait
// returns.
func (w *KVWorker[V]) Pull(keys []uint64, vals *[]V, lens *[]int32, opts ...Option) (int, error) {
	return w.ZPull(slices.Clone(keys), vals, lens, opts...)
}

// ZPull is Pull without copying keys: they must not change until the request
// has finished.
func (w *KVWorker[V]) ZPull(keys []uint64, vals *[]V, lens *[]int32, opts ...Option) (int, error) {
	if vals == nil {
		return 0, fmt.Errorf("kv: nil destination for pulled values")
	}
	o := collect(opts)
	req := KVPairs[V]{Keys: keys, Priority: o.priority}
	if lens != nil && len(*lens) == len(keys) {
		// As C++ does: a lens buffer of the keys' size goes with the
		// request, which tells a server that the puller wants lens back.
		req.Lens = *lens
	}
	return w.send(false, true, o, req, pullDest[V]{keys: keys, vals: vals, lens: lens})
}

// PushPull pushes vals and pulls the resulting values into *outs in one round
// trip. When lens is not nil, *lens gives the values per key to send and
// receives the lengths returned. Its inputs are copied.
func (w *KVWorker[V]) PushPull(keys []uint64, vals []V, outs *[]V, lens *[]int32, opts ...Option) (int, error) {
	var send []int32
	if lens != nil {
		send = slices.Clone(*lens)
	}
	return w.pushPull(slices.Clone(keys), slices.Clone(vals), send, outs, lens, opts)
}

// ZPushPull is PushPull without copying: keys, vals and *lens must not
// change until the request has finished.
func (w *KVWorker[V]) ZPushPull(keys []uint64, vals []V, outs *[]V, lens *[]int32, opts ...Option) (int, error) {
	var send []int32
	if lens != nil {
		send = *lens
	}
	return w.pushPull(keys, vals, send, outs, lens, opts)
}

func (w *KVWorker[V]) pushPull(keys []uint64, vals []V, send []int32, outs *[]V, lensOut *[]int32, opts []Option) (int, error) {
	if outs == nil {
		return 0, fmt.Errorf("kv: nil destination for pulled values")
	}
	o := collect(opts)
	kvs := KVPairs[V]{Keys: keys, Vals: vals, Lens: send, Priority: o.priority}
	if err := kvs.Check(true); err != nil {
		return 0, err
	}
	return w.send(true, true, o, kvs, pullDest[V]{keys: keys, vals: outs, lens: lensOut})
}

// Wait blocks until request ts has finished and returns its error.
func (w *KVWorker[V]) Wait(ts int) error { return w.cust.WaitRequest(ts) }

// WaitContext is Wait that gives up when ctx is done.
func (w *KVWorker[V]) WaitContext(ctx context.Context, ts int) error {
	return w.cust.WaitRequestContext(ctx, ts)
}

type pullDest[V message.Value] struct {
	keys []uint64
	vals *[]V
	lens *[]int32
}

// requestBody returns the body of a request for key range rg: in a managed
// job its tag (the view's epoch), and on a pull the flag that lets the
// server leave the keys out of its answer (the worker keeps them in the
// request's parts; C++ servers never read the body and send them).
func requestBody(managed bool, rg int, epoch uint64, pull bool) []byte {
	flags := uint64(0)
	if pull {
		flags = flagKeys
	}
	switch {
	case managed:
		return tagBody(rg, epoch, flags)
	case pull:
		return keysBody(flags)
	}
	return nil
}

// maxStackParts is the most servers whose parts of a request the default
// slicer writes to the stack.
const maxStackParts = 8

// send slices a request (a pull when pull is true, into dest) and sends
// its parts.
func (w *KVWorker[V]) send(push, pull bool, o reqOptions, kvs KVPairs[V], dest pullDest[V]) (int, error) {
	custom := w.slicer.Load()
	ranges := w.po.ServerKeyRanges()
	var parts []KVPairs[V]
	var err error
	var room [maxStackParts]KVPairs[V]
	switch {
	case custom != nil:
		parts, err = (*custom)(kvs, ranges)
	case len(ranges) <= len(room):
		parts, err = sliceInto(room[:len(ranges)], kvs, ranges)
	default:
		parts, err = DefaultSlicer(kvs, ranges)
	}
	if err != nil {
		return 0, err
	}
	if len(parts) != len(ranges) {
		return 0, fmt.Errorf("kv: slicer returned %d parts for %d servers", len(parts), len(ranges))
	}
	ts, err := w.cust.NewRequest(len(ranges))
	if err != nil {
		return 0, err
	}
	r := &request[V]{cb: o.cb, push: push, cmd: o.cmd}
	r.waiting = r.room[:0]
	if pull {
		r.pull = &pulling[V]{dest: dest}
		r.pull.parts = r.pull.part[:0]
	}
	skipped := 0
	for i, p := range parts {
		if len(p.Keys) == 0 {
			skipped++
		} else {
			r.waiting = append(r.waiting, i)
		}
	}
	m := w.po.Metrics()
	kind := metrics.RequestKind(push, pull, false)
	if skipped == len(parts) {
		w.finish(ts, r)
		w.cust.AddResponse(ts, skipped)
		return ts, nil
	}
	if m != nil {
		r.kind, r.at = kind, time.Now()
	}
	var view *replica.View
	if w.managed {
		view = w.route(r, parts)
	} else {
		w.keepParts(r, parts)
	}
	w.mu.Lock()
	w.reqs.Put(ts, r)
	w.mu.Unlock()
	if skipped > 0 {
		w.cust.AddResponse(ts, skipped)
	}
	for i, p := range parts {
		if len(p.Keys) == 0 {
			continue
		}
		dest := i
		var body []byte
		if view != nil {
			part := r.part(i)
			if part.dest < 0 {
				continue // no server holds the range now: sent with the next view
			}
			dest, body = part.dest, requestBody(true, i, view.Epoch, pull)
		} else {
			body = requestBody(false, i, 0, pull)
		}
		msg := message.Get()
		msg.Meta.Body = body
		msg.Meta.AppID = int32(w.cust.AppID())
		msg.Meta.CustomerID = int32(w.cust.CustomerID())
		msg.Meta.Request = true
		msg.Meta.Push = push
		msg.Meta.Pull = pull
		msg.Meta.Head = int32(o.cmd)
		msg.Meta.Timestamp = int32(ts)
		msg.Meta.Recver = int32(message.ServerRankToID(dest))
		msg.Meta.Priority = int32(kvs.Priority)
		msg.ZeroCopy = true // Push and Pull copied their inputs; Z* callers keep theirs unchanged
		msg.AddData(message.Uint64, message.Frame(p.Keys))
		msg.AddData(message.TypeOf[V](), message.Frame(p.Vals))
		if len(p.Lens) > 0 {
			msg.AddData(message.Int32, message.Frame(p.Lens))
		}
		m.WorkerRequest(w.cust.AppID(), w.cust.CustomerID(), kind)
		if err := w.po.SendRecycled(msg); err != nil {
			err = fmt.Errorf("kv: send to server %d: %w", i, err)
			w.dropRequest(ts)
			w.cust.Tracker().Fail(ts, err)
			return ts, err
		}
	}
	return ts, nil
}

func (w *KVWorker[V]) dropRequest(ts int) {
	w.mu.Lock()
	r, ok := w.reqs.Get(ts)
	w.reqs.Delete(ts)
	w.mu.Unlock()
	if ok && r.pull != nil {
		// Deleted under the lock: no answer is added to it any more.
		releaseParts(r.pull.parts)
	}
}

// finish completes request ts, which has all its answers: it puts a pull's
// values in place and runs the callback. A pull whose answers do not fit
// fails ts (and runs no callback).
func (w *KVWorker[V]) finish(ts int, r *request[V]) {
	if r.pull != nil {
		if err := w.assemble(r.pull); err != nil {
			w.log().Warn().Err(err).Int("timestamp", ts).Msg("request failed")
			w.cust.Tracker().Fail(ts, err)
			return
		}
	}
	if r.cb != nil {
		r.cb()
	}
}

func (w *KVWorker[V]) process(msg *message.Message) {
	if msg.Meta.SimpleApp {
		msg.Own()
		w.SimpleApp.process(msg)
		return
	}
	ts := int(msg.Meta.Timestamp)
	if msg.Meta.Request {
		w.redirected(msg) // (the filter let through only redirects)
		return
	}
	if text, ok := strings.CutPrefix(string(msg.Meta.Body), errorBody); ok {
		err := fmt.Errorf("kv: %s refused request %d: %s", message.DescribeID(int(msg.Meta.Sender)), ts, text)
		w.log().Warn().Err(err).Msg("failing the request")
		w.dropRequest(ts)
		w.cust.Tracker().Fail(ts, err)
		return
	}
	var part pullPart[V]
	w.mu.Lock()
	rank := -1
	var asked []uint64 // the keys this answer is for
	if r, ok := w.reqs.Get(ts); ok {
		rank, _ = w.answerRange(r, msg)
		if sp := r.part(rank); sp != nil {
			asked = sp.kvs.Keys
		}
	}
	w.mu.Unlock()
	if rank < 0 {
		return // failed meanwhile
	}
	if msg.Meta.Pull {
		var kvs KVPairs[V]
		var err error
		valsAt := 1 // the index of the values frame
		if pullFlags(msg.Meta.Body, true)&flagKeys != 0 {
			// The server left the keys out: its values answer the keys
			// this worker sent it.
			valsAt = 0
			kvs, err = decodeKeyless[V](msg, asked)
		} else {
			kvs, err = decodeKVs[V](msg, true)
		}
		if err == nil && len(kvs.Keys) == 0 {
			err = fmt.Errorf("no keys")
		}
		if err != nil {
			err = fmt.Errorf("kv: bad pull response from node %d: %w", msg.Meta.Sender, err)
			w.log().Warn().Err(err).Msg("failing the request")
			w.dropRequest(ts)
			w.cust.Tracker().Fail(ts, err)
			return
		}
		n := len(kvs.Keys)
		part = pullPart[V]{first: kvs.Keys[0], last: kvs.Keys[n-1], keys: n,
			vals: kvs.Vals, lens: kvs.Lens, lent: msg.IsLent(valsAt)}
		if (msg.IsLent(valsAt) || msg.IsLent(valsAt+1)) && !w.lastAnswer(ts, rank) {
			// It must outlive its message, which is given back on return.
			part.keep(msg, valsAt)
		}
	}
	w.mu.Lock()
	r, ok := w.reqs.Get(ts)
	if !ok { // failed meanwhile
		w.mu.Unlock()
		part.release()
		return
	}
	r.waiting = slices.DeleteFunc(r.waiting, func(x int) bool { return x == rank })
	if msg.Meta.Pull && r.pull != nil { // (values answering a push are ignored)
		r.pull.parts = append(r.pull.parts, part)
	} else {
		defer part.release()
	}
	w.loss.answered(rank, msg, r.push)
	last := len(r.waiting) == 0
	if last {
		w.reqs.Delete(ts)
	}
	w.mu.Unlock()
	if !last {
		return
	}
	if !r.at.IsZero() {
		w.po.Metrics().WorkerLatency(r.kind, time.Since(r.at))
	}
	w.finish(ts, r)
}

// lastAnswer reports whether request ts waits for nothing but the answer
// of the server of rank. Answers to one request are processed one at a
// time, so it stays so until that answer is counted (or the request fails).
func (w *KVWorker[V]) lastAnswer(ts, rank int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.reqs.Get(ts)
	return ok && len(r.waiting) == 1 && r.waiting[0] == rank
}

func (w *KVWorker[V]) log() *zerolog.Logger { l := w.po.Logger(); return &l }

// assemble copies the answers of pull p into its destination, in key
// order.
func (w *KVWorker[V]) assemble(p *pulling[V]) error {
	parts, dest := p.parts, &p.dest
	defer releaseParts(parts)
	sort.Slice(parts, func(i, j int) bool { return parts[i].first < parts[j].first })
	totalKeys, totalVals := 0, 0
	for _, p := range parts {
		// Each answer must cover the next run of requested keys; checking its
		// ends is enough for the sorted keys a slicer sends (as C++ does).
		n := p.keys
		if totalKeys+n > len(dest.keys) || p.first != dest.keys[totalKeys] || p.last != dest.keys[totalKeys+n-1] {
			return fmt.Errorf("kv: pull responses do not match the requested keys")
		}
		totalKeys += n
		totalVals += len(p.vals)
	}
	if totalKeys != len(dest.keys) {
		return fmt.Errorf("kv: pull got %d of %d keys (lost a server?)", totalKeys, len(dest.keys))
	}
	vals := *dest.vals
	handedOver := false
	switch {
	case len(vals) == 0 && cap(vals) >= totalVals:
		// An empty destination with room: fill it, as C++'s SArray::resize
		// keeps its capacity (no fresh memory, whose pages cost a fault
		// each, for every pull).
		vals = vals[:totalVals]
	case len(vals) == 0 && len(parts) == 1 && !parts[0].lent:
		// One answer of our own and no room: hand over its values.
		vals, handedOver = parts[0].vals, true
	case len(vals) == 0:
		// Fresh memory: a large pull's pages fault in by the 2 MiB, not
		// the 4 KiB (internal/hugemem).
		vals = hugemem.Make[V](totalVals)
	case len(vals) != totalVals:
		return fmt.Errorf("kv: pull got %d values but the destination holds %d", totalVals, len(vals))
	}
	var lens []int32
	if dest.lens != nil {
		lens = *dest.lens
		if len(lens) == 0 {
			lens = slices.Grow(lens, totalKeys)[:totalKeys]
		} else if len(lens) != totalKeys {
			return fmt.Errorf("kv: pull got %d lengths but the destination holds %d", totalKeys, len(lens))
		}
	}
	vi, ki := 0, 0
	for _, p := range parts {
		if !handedOver {
			copy(vals[vi:], p.vals)
		}
		vi += len(p.vals)
		if lens != nil {
			if len(p.lens) > 0 {
				copy(lens[ki:], p.lens)
			} else {
				per := int32(len(p.vals) / max(p.keys, 1))
				for j := range p.keys {
					lens[ki+j] = per
				}
			}
		}
		ki += p.keys
	}
	*dest.vals = vals
	if dest.lens != nil {
		*dest.lens = lens
	}
	return nil
}

// decodeKeyless reads an answer to a pull that left its keys out: values
// and optional lens for keys, the keys the worker asked for.
func decodeKeyless[V message.Value](msg *message.Message, keys []uint64) (KVPairs[V], error) {
	var kvs KVPairs[V]
	if len(keys) == 0 {
		return kvs, fmt.Errorf("an answer without keys to a request this worker did not send")
	}
	n := len(msg.Data)
	if n < 1 || n > 2 {
		return kvs, fmt.Errorf("%d data frames in an answer without keys (want values and optional lens)", n)
	}
	kvs, err := decodeParts[V](msg.Data, msg.Meta.DataTypes, 1)
	if err != nil {
		return kvs, err
	}
	kvs.Keys = keys
	kvs.Priority = int(msg.Meta.Priority)
	return kvs, kvs.Check(true)
}

// decodeKVs reads keys, values and optional lens from msg's data frames.
func decodeKVs[V message.Value](msg *message.Message, withVals bool) (KVPairs[V], error) {
	kvs, err := decodeFrames[V](msg.Data, msg.Meta.DataTypes, withVals)
	kvs.Priority = int(msg.Meta.Priority)
	return kvs, err
}

// decodeFrames reads keys, values and optional lens from data frames and
// their types (as many as frames).
func decodeFrames[V message.Value](frames [][]byte, types []message.DataType, withVals bool) (KVPairs[V], error) {
	var kvs KVPairs[V]
	n := len(frames)
	if n == 0 {
		return kvs, nil
	}
	if n < 2 || n > 3 {
		return kvs, fmt.Errorf("%d data frames (want keys, values and optional lens)", n)
	}
	kvs, err := decodeParts[V](frames, types, 0)
	if err != nil {
		return kvs, err
	}
	return kvs, kvs.Check(withVals)
}

// decodeParts reads data frames (as many types) that hold, in this order,
// keys, values and lens, starting with the part numbered first (0 keys, 1
// values): all their types are checked before any frame is read.
func decodeParts[V message.Value](frames [][]byte, types []message.DataType, first int) (KVPairs[V], error) {
	var kvs KVPairs[V]
	want := []message.DataType{message.Uint64, message.TypeOf[V](), message.Int32}[first:]
	names := [...]string{"keys", "values", "lens"}
	for i := range frames {
		if got := types[i]; !message.Compatible(got, want[i]) {
			return kvs, fmt.Errorf("%s frame tagged %v, want %v", names[first+i], got, want[i])
		}
	}
	var err error
	for i, f := range frames {
		switch first + i {
		case 0:
			kvs.Keys, err = message.Values[uint64](f)
		case 1:
			kvs.Vals, err = message.Values[V](f)
		default:
			kvs.Lens, err = message.Values[int32](f)
		}
		if err != nil {
			return kvs, fmt.Errorf("%s: %w", names[first+i], err)
		}
	}
	return kvs, nil
}
