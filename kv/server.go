package kv

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/internal/hugemem"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/metrics"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/van"
)

// KVMeta describes a request as the server's handle sees it.
type KVMeta struct {
	Cmd        int
	Push       bool
	Pull       bool
	Sender     int
	Timestamp  int
	CustomerID int
	AppID      int

	// keysKnown is a pull's keys when its worker keeps them and so can do
	// without them in the answer (a Go worker; see leavesKeysOut).
	keysKnown []uint64
}

// leavesKeysOut reports whether answer res to req goes without its keys
// frame: req's worker keeps the keys it asked for, and res answers exactly
// those, which it does when its keys are the request's own slice (as
// DefaultHandle's answers, and those of any handle that answers with the
// keys it was given, are). Answers to C++ workers, and answers with keys
// of their own, always carry their keys.
func leavesKeysOut[V message.Value](req KVMeta, res KVPairs[V]) bool {
	return len(res.Keys) > 0 && len(res.Keys) == len(req.keysKnown) && &res.Keys[0] == &req.keysKnown[0]
}

// answerTag is what a managed job's answer tags (answerTagBody).
type answerTag struct {
	r       int
	gen     uint64
	changed bool
}

// ReqHandle processes a request; it must call Response once for it, then or
// later, from any goroutine.
type ReqHandle[V message.Value] func(meta KVMeta, data KVPairs[V], server *KVServer[V])

// KVServer answers the requests of workers. It also answers SimpleApp
// requests sent to it (set with SetSimpleRequestHandle).
type KVServer[V message.Value] struct {
	*SimpleApp

	mu      sync.RWMutex // guards handle and rep
	handle  ReqHandle[V]
	rep     *replicated[V] // the store of a managed job (SetStore), or nil
	dropLog zerolog.Logger // rate-limited, for refused requests
}

// NewKVServer registers a server as customer (appID, appID), the way C++
// ps-lite routes requests to servers. Requests that arrive before
// SetRequestHandle is called wait for it.
func NewKVServer[V message.Value](po *postoffice.Postoffice, appID int) (*KVServer[V], error) {
	s := &KVServer[V]{SimpleApp: newSimpleApp(po)}
	if err := s.register(appID, appID, s.process); err != nil {
		return nil, err
	}
	s.cust.SetFilter(func(msg *message.Message) error { return acceptAtServer(po, msg) })
	s.dropLog = van.RateLimited(po.Logger())
	return s, nil
}

// SetRequestHandle sets the function that answers KV requests, and starts
// handling requests. In a managed job (PS_REPLICAS, PS_CHECKPOINT_DIR) a
// handle's state is neither replicated nor written to disk: use SetStore
// for that.
func (s *KVServer[V]) SetRequestHandle(h ReqHandle[V]) error {
	if h == nil {
		return fmt.Errorf("kv: nil request handle")
	}
	if s.po.Managed() {
		l := s.po.Logger()
		l.Warn().Int("app", s.cust.AppID()).Msg("a request handle in a job with PS_REPLICAS or PS_CHECKPOINT_DIR: its state is neither replicated nor written to disk (give the server a kv.Store with SetStore)")
	}
	s.mu.Lock()
	s.handle = h
	s.mu.Unlock()
	s.resume()
	return nil
}

// LendRequests, when on, gives the request handle views of the receive
// buffers for large keys, values and lens (512 KiB or more) instead of
// copies: the copy of a large push or pull request into fresh memory is
// saved (the way C++ ps-lite's handles see their requests). The views are
// valid only while the handle runs: a handle that keeps data beyond it (a
// store, a later Response) must copy it. Answering from within the handle
// with a view of the request (ZResponse with the request's keys, as
// DefaultHandle does) is safe: the transport copies a small answer and
// pins the lent memory under a large one (message.HoldLent) until it is
// written. Run tests with
// PS_POISON_LENT=1 to overwrite given-back buffers, so that a handle that
// keeps a view reads garbage. Off by default.
func (s *KVServer[V]) LendRequests(on bool) { s.cust.SetTakesLent(on) }

// SetSimpleRequestHandle sets the function that answers SimpleApp requests.
// Like KV requests, they are handled once SetRequestHandle has been called.
func (s *KVServer[V]) SetSimpleRequestHandle(h SimpleHandle) {
	if h != nil {
		s.SimpleApp.reqHandle.Store(&h)
	}
}

// Response answers req with res (keys, values and optional lens for a pull;
// nothing for a push). It copies res, so the handle may reuse its slices at
// once. When res's keys are the request's own slice (as a handle that
// answers the keys it was given has them) and the request came from a Go
// worker, the answer goes without the keys, which that worker kept.
func (s *KVServer[V]) Response(req KVMeta, res KVPairs[V]) error {
	return s.response(req, res, false, nil)
}

// ZResponse is Response without copying res: large slices are sent from
// where they are, after ZResponse returns, so they must never change again
// (fresh slices, or the request's own keys, as DefaultHandle answers with).
// This is how C++ ps-lite answers; for a pull of millions of keys it saves
// copying the answer.
func (s *KVServer[V]) ZResponse(req KVMeta, res KVPairs[V]) error {
	return s.response(req, res, true, nil)
}

// response sends answer res to req, tagged when tag is not nil.
func (s *KVServer[V]) response(req KVMeta, res KVPairs[V], zeroCopy bool, tag *answerTag) error {
	msg := message.Get()
	omit := leavesKeysOut(req, res)
	flags := uint64(0)
	if omit {
		flags |= flagKeys
	}
	switch {
	case tag != nil:
		if tag.changed {
			flags |= flagChanged
		}
		msg.Meta.Body = answerTagBody(tag.r, tag.gen, flags)
	case omit:
		msg.Meta.Body = keysBody(flags)
	}
	msg.ZeroCopy = zeroCopy
	msg.Meta.AppID = int32(s.cust.AppID())
	msg.Meta.CustomerID = int32(req.CustomerID)
	msg.Meta.Request = false
	msg.Meta.Push = req.Push
	msg.Meta.Pull = req.Pull
	msg.Meta.Head = int32(req.Cmd)
	msg.Meta.Timestamp = int32(req.Timestamp)
	msg.Meta.Recver = int32(req.Sender)
	if len(res.Keys) > 0 {
		if err := res.Check(true); err != nil {
			msg.Recycle()
			return err
		}
		if !omit {
			msg.AddData(message.Uint64, message.Frame(res.Keys))
		}
		msg.AddData(message.TypeOf[V](), message.Frame(res.Vals))
		if len(res.Lens) > 0 {
			msg.AddData(message.Int32, message.Frame(res.Lens))
		}
	}
	return s.po.SendRecycled(msg)
}

// errorBody starts the body of a response that refuses a request; the rest
// says why. C++ ps-lite has no such answer (its worker counts it as an empty
// response); a Go worker fails the request with the reason.
const errorBody = "pslite:error "

// acceptAtServer lets in SimpleApp messages and, of KV messages, only
// requests from workers, and in a managed job the replication messages of
// other servers.
func acceptAtServer(po *postoffice.Postoffice, msg *message.Message) error {
	switch {
	case msg.Meta.SimpleApp:
		return nil
	case !msg.Meta.Request:
		return errors.New("a KV response sent to a server")
	case message.IsWorkerID(int(msg.Meta.Sender)):
		return nil
	case po.Managed() && po.IsMemberServer(int(msg.Meta.Sender)):
		if k, _ := bodyKind(msg.Meta.Body); replicationKind(k) {
			return nil
		}
	}
	return fmt.Errorf("a KV request from %s, which is not a worker", message.DescribeID(int(msg.Meta.Sender)))
}

// refuse answers req with an error instead of values.
func (s *KVServer[V]) refuse(req KVMeta, err error) {
	msg := message.New()
	msg.Meta.AppID = int32(s.cust.AppID())
	msg.Meta.CustomerID = int32(req.CustomerID)
	msg.Meta.Push = req.Push
	msg.Meta.Pull = req.Pull
	msg.Meta.Head = int32(req.Cmd)
	msg.Meta.Timestamp = int32(req.Timestamp)
	msg.Meta.Recver = int32(req.Sender)
	msg.Meta.Body = []byte(errorBody + err.Error())
	if err := s.po.Send(msg); err != nil {
		l := s.po.Logger()
		l.Debug().Err(err).Msg("refusal not sent")
	}
}

func (s *KVServer[V]) process(msg *message.Message) {
	if msg.Meta.SimpleApp {
		s.SimpleApp.process(msg)
		return
	}
	if !msg.Meta.Request {
		return
	}
	s.mu.RLock()
	rep := s.rep
	s.mu.RUnlock()
	if rep != nil {
		if k, p := bodyKind(msg.Meta.Body); replicationKind(k) {
			rep.replication(msg, k, p)
			return
		}
	}
	meta := KVMeta{
		Cmd:        int(msg.Meta.Head),
		Push:       msg.Meta.Push,
		Pull:       msg.Meta.Pull,
		Sender:     int(msg.Meta.Sender),
		Timestamp:  int(msg.Meta.Timestamp),
		CustomerID: int(msg.Meta.CustomerID),
		AppID:      int(msg.Meta.AppID),
	}
	data, err := decodeKVs[V](msg, msg.Meta.Push)
	if err != nil {
		s.dropLog.Warn().Err(err).Str("msg", msg.String()).Msg("refusing a malformed KV request")
		s.refuse(meta, err)
		return
	}
	if meta.Pull && pullFlags(msg.Meta.Body, false)&flagKeys != 0 {
		meta.keysKnown = data.Keys
	}
	if rep != nil {
		rep.request(msg, meta, data)
		return
	}
	s.mu.RLock()
	h := s.handle
	s.mu.RUnlock()
	if h == nil { // only when stopping without ever setting a handle
		l := s.po.Logger()
		l.Warn().Str("msg", msg.String()).Msg("dropping a request: no request handle was set")
		return
	}
	m := s.po.Metrics()
	if m == nil {
		h(meta, data, s)
		return
	}
	start := time.Now()
	h(meta, data, s)
	m.ServerRequest(meta.AppID, meta.CustomerID, metrics.RequestKind(meta.Push, meta.Pull, false), time.Since(start))
}

// Close stops the server's customer; a store stops following views.
func (s *KVServer[V]) Close() {
	s.mu.RLock()
	rep := s.rep
	s.mu.RUnlock()
	if rep != nil {
		rep.close()
	}
	s.SimpleApp.Close()
}

// DefaultHandle is a request handle that keeps a store of values per key:
// a push adds the pushed values element-wise to the stored ones (a key's
// first push, or a push of another length, stores them), and a pull returns the stored values (a key
// never pushed reads as one zero). Lens are returned when the pull request
// carries lens (a C++ or MXNet worker that passes a lens buffer of the
// keys' size) or when any key pulled holds other than one value.
type DefaultHandle[V message.Value] struct {
	mu    sync.Mutex // guards store
	store map[uint64][]V
}

// NewDefaultHandle returns an empty store.
func NewDefaultHandle[V message.Value]() *DefaultHandle[V] {
	return &DefaultHandle[V]{store: make(map[uint64][]V)}
}

// Handle is the ReqHandle.
func (h *DefaultHandle[V]) Handle(meta KVMeta, data KVPairs[V], s *KVServer[V]) {
	h.mu.Lock()
	var res KVPairs[V]
	if meta.Push {
		h.push(data)
	}
	if meta.Pull {
		res = h.pull(data.Keys, len(data.Lens) > 0)
	}
	h.mu.Unlock()
	// res holds the request's keys and values pull built afresh: nothing
	// changes them, so they can be sent without a copy.
	if err := s.ZResponse(meta, res); err != nil {
		l := s.po.Logger()
		l.Warn().Err(err).Msg("response failed")
	}
}

func (h *DefaultHandle[V]) push(data KVPairs[V]) {
	for k, vals := range data.All() {
		cur := h.store[k]
		if len(cur) != len(vals) {
			h.store[k] = append([]V(nil), vals...)
			continue
		}
		for j, v := range vals {
			cur[j] += v
		}
	}
}

// pull answers keys; with lens when asked (the request carried lens, as
// MXNet's pulls do) or when some key holds other than one value.
func (h *DefaultHandle[V]) pull(keys []uint64, withLens bool) KVPairs[V] {
	res := KVPairs[V]{Keys: keys}
	uniform := !withLens
	total := 0
	for _, k := range keys {
		n := max(len(h.store[k]), 1)
		if n != 1 {
			uniform = false
		}
		total += n
	}
	res.Vals = hugemem.Make[V](total)[:0] // a large answer's pages fault in by the 2 MiB
	if !uniform {
		res.Lens = make([]int32, len(keys))
	}
	for i, k := range keys {
		v := h.store[k]
		if len(v) == 0 {
			v = []V{0}
		}
		res.Vals = append(res.Vals, v...)
		if !uniform {
			res.Lens[i] = int32(len(v))
		}
	}
	return res
}

// Get returns a copy of the values stored for key.
func (h *DefaultHandle[V]) Get(key uint64) []V {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]V(nil), h.store[key]...)
}

// Len returns the number of keys stored.
func (h *DefaultHandle[V]) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.store)
}
