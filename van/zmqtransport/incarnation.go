package zmqtransport

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/van"
)

var _ van.Incarnations = (*Transport)(nil)

// incarnations tells processes apart on libzmq (van.Incarnations): every
// message carries the X-Pslite-Process property its connection presented,
// and a message that claims a node's identity from another process than
// the one the scheduler registered for it is held back, not delivered. A
// replacement's messages that arrive before this node has heard of the
// replacement are held until it has, then delivered in order; a stranger's
// (or a replaced predecessor's) stay held until newer ones push them out
// (heldMax, heldBytes), unanswered.
type incarnations struct {
	presents atomic.Bool // Options.Process is set on the sockets
	log      zerolog.Logger

	mu     sync.Mutex
	byID   map[string]string // identity → the incarnation holding it now
	last   map[string]string // identity → the incarnation of its last message
	held   []readMsg         // in arrival order
	bytes  int
	queued []readMsg // released from held, to deliver first
}

const (
	heldMax   = 1024
	heldBytes = 64 << 20
	lastMax   = 4096
)

// init sets the incarnations up.
func (in *incarnations) init(proc string, log zerolog.Logger) {
	in.presents.Store(proc != "")
	in.log = van.RateLimited(log)
}

// admit reports whether m, from identity, is delivered now; if not, it is
// held. It runs on the receive goroutine.
func (in *incarnations) admit(identity []byte, m readMsg) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if last, ok := in.last[string(identity)]; !ok || !m.proc.is(last) {
		if in.last == nil || len(in.last) >= lastMax {
			// Anonymous peers (nodes registering, strangers) each have
			// an identity of their own: forget them all now and then.
			in.last = map[string]string{}
		}
		in.last[string(identity)] = string(m.proc.b[:m.proc.n])
	}
	want := in.byID[string(identity)]
	if want == "" || (m.proc.is(want) && !in.holding(identity, &m.proc)) {
		return true
	}
	in.held = append(in.held, m)
	in.bytes += msgBytes(m)
	for len(in.held) > heldMax || (in.bytes > heldBytes && len(in.held) > 1) {
		in.drop(0)
	}
	in.log.Warn().Str("identity", string(identity)).Str("process", string(m.proc.b[:m.proc.n])).Str("holder", want).
		Msg("van: holding a message that claims a node's identity from another process")
	return false
}

// holding reports whether messages of identity from process p are held
// (later ones wait behind them, to keep their order). in.mu is held.
func (in *incarnations) holding(identity []byte, p *process) bool {
	for i := range in.held {
		if h := &in.held[i]; string(h.frames[0]) == string(identity) && h.proc == *p {
			return true
		}
	}
	return false
}

// drop gives back the held message at i. in.mu is held.
func (in *incarnations) drop(i int) {
	m := in.held[i]
	in.held = append(in.held[:i], in.held[i+1:]...)
	in.bytes -= msgBytes(m)
	if m.release != nil {
		m.release()
	}
}

// ready returns a released message to deliver before anything received
// after it.
func (in *incarnations) ready() (readMsg, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.queued) == 0 {
		return readMsg{}, false
	}
	m := in.queued[0]
	in.queued[0] = readMsg{}
	in.queued = in.queued[1:]
	return m, true
}

// set replaces the incarnations by identity and releases the held
// messages that now come from their identity's holder.
func (in *incarnations) set(byID map[string]string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.byID = byID
	kept := in.held[:0]
	for _, m := range in.held {
		if want := byID[string(m.frames[0])]; want == "" || m.proc.is(want) {
			in.queued = append(in.queued, m)
			in.bytes -= msgBytes(m)
			continue
		}
		kept = append(kept, m)
	}
	clear(in.held[len(kept):])
	in.held = kept
}

// msgBytes is the size of m's frames.
func msgBytes(m readMsg) int {
	n := 0
	for _, f := range m.frames {
		n += len(f)
	}
	return n
}

// ProcessOf implements van.Incarnations: the incarnation presented by the
// last message received from identity ("" for none, as from C++ nodes).
func (t *Transport) ProcessOf(identity []byte) string {
	t.inc.mu.Lock()
	defer t.inc.mu.Unlock()
	return t.inc.last[string(identity)]
}

// SetIncarnations implements van.Incarnations.
func (t *Transport) SetIncarnations(byID map[int]string) {
	m := make(map[string]string, len(byID))
	for id, p := range byID {
		m[fmt.Sprintf("ps%d", id)] = p
	}
	t.inc.set(m)
}
