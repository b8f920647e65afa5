package zmtptransport

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/internal/sendq"
)

// Options configures a Transport. The fields mean what they mean for the
// ZeroMQ transport (zmqtransport.Options), of which this takes the ones
// that apply.
type Options struct {
	// Local uses the Unix socket /tmp/<port> instead of TCP (DMLC_LOCAL):
	// libzmq's ipc:///tmp/<port>.
	Local bool
	// WaterMark, when positive, bounds the messages waiting for one peer
	// before Send waits (DMLC_PS_WATER_MARK); 0 means QueueLimit.
	WaterMark int
	// BindAll binds every address instead of the node's host.
	BindAll bool
	// RecvTimeout bounds each blocking receive; 0 means 200ms.
	RecvTimeout time.Duration
	// Linger is how long closing a connection waits to send what is
	// queued for it; 0 means 500ms.
	Linger time.Duration
	// QueueLimit bounds the messages waiting for one peer before Send
	// waits; 0 means 1024. TrySend may queue twice as many.
	QueueLimit int
	// MaxMessageBytes bounds the bytes of one received message (a frame
	// beyond it drops the sender's connection, as libzmq does; frames that
	// add up beyond it drop the message); 0 means 1 GiB.
	MaxMessageBytes int64
	// IsMember reports whether a peer's identity names a node of the job.
	// A connection whose identity does not, or that announced none (a node
	// that has no id yet: it sends only its ADD_NODE), may send messages of
	// StrangerMaxBytes at most; members keep MaxMessageBytes. Nil counts
	// every announced identity as a member.
	IsMember func(identity string) bool
	// StrangerMaxBytes bounds the messages of connections that are not
	// members (see IsMember); 0 means 16 KiB. A stranger that announces a
	// larger frame is dropped at its header, before anything is allocated.
	StrangerMaxBytes int64
	// MaxStrangers bounds the accepted connections that are strangers: in
	// their handshake, or connected with an identity that names no member
	// (see IsMember); 0 means 1024. A connection accepted past it is
	// closed at once (its peer, a node registering, connects again), and
	// the refusal logged at most a burst a second.
	MaxStrangers int
	// UpfrontBytes bounds the bytes of large frames (over 1 MiB) still
	// arriving, across connections, whose buffers are allocated whole
	// when their headers come; past it a frame's buffer grows as its
	// bytes arrive, so what a node holds follows what it received. 0
	// means MaxMessageBytes.
	UpfrontBytes int64
	// MaxFrames bounds the frames of one received message; 0 means 64.
	MaxFrames int
	// LinkTimeout, when positive, bounds how long a connection may carry
	// nothing from its peer before it is dropped (PS_LINK_TIMEOUT), as
	// with the ZeroMQ transport: ZMTP heartbeats (a PING every
	// LinkTimeout/12, answered with a PONG), TCP keepalive probing an idle
	// connection after LinkTimeout/2, and a TCP user timeout (data not
	// acknowledged) of LinkTimeout. So a cut cable, a host gone or a
	// stopped process is noticed without application heartbeats.
	LinkTimeout time.Duration
	// pingEvery, when set, replaces LinkTimeout/12 as the PING interval:
	// tests ping often under a link timeout that a starved CPU cannot
	// reach.
	pingEvery time.Duration
	// HandshakeTimeout bounds a connection's ZMTP handshake; 0 means 10s.
	HandshakeTimeout time.Duration
	// ReconnectInterval is the wait between attempts to connect to a peer
	// (libzmq's ZMQ_RECONNECT_IVL); 0 means 100ms.
	ReconnectInterval time.Duration
	// PoisonLent overwrites lent frames (see RecvLent) with 0xDB bytes when
	// they are given back, so that a handler that keeps a view of its
	// request reads garbage in its tests (PS_POISON_LENT).
	PoisonLent bool
	// AwaitMembers holds a connection that claims a member's identity
	// (see IsMember) before the node knows the job's members: it is not
	// read past its handshake until MembersKnown is called, then served if
	// its process is the node's known incarnation (or the node has none: a
	// libzmq or C++ peer), and closed after MemberWait otherwise. So a
	// stranger that connects early under the id of a node that has not
	// joined yet cannot send a member's large messages. The nodes of a job
	// connect to each other only once they know its members, so they do
	// not wait in practice. The scheduler's connection (SchedulerIdentity)
	// is not held: the list of members comes over it.
	AwaitMembers bool
	// SchedulerIdentity is the scheduler's identity ("ps1"), which
	// AwaitMembers does not hold.
	SchedulerIdentity string
	// MemberWait bounds that wait; 0 means 60s.
	MemberWait time.Duration
	// Process is this process's incarnation, presented on every
	// connection it makes (the "X-Pslite-Process" property of its READY;
	// libzmq peers ignore it); see van.Incarnations.
	Process string
	// KeyCacheBytes, when positive, turns on key caching with peers on
	// this transport (keycache.go, PS_KEY_CACHE_MB): each connection's
	// ROUTER keeps up to this many bytes of key lists its DEALER sent, and
	// the DEALER sends a reference to one instead of the list again. 0:
	// off (no offer made or taken).
	KeyCacheBytes int64
	// KeyCode turns on coded key lists with peers on this transport that
	// can decode them (keycodec.go, PS_KEY_CODE): a sorted key list whose
	// gaps are mostly equal, and shrink to at most half its bytes, is sent
	// as its gaps.
	KeyCode bool
	// KeyCacheTotal bounds what the key caches of all accepted
	// connections may keep together; 0 means 4 * KeyCacheBytes. A
	// connection that comes when it is spent gets no offer.
	KeyCacheTotal int64
	// Log receives the transport's warnings (peers that break the
	// protocol, refused identities).
	Log zerolog.Logger
}

// processProperty is the READY property carrying a process's incarnation.
const processProperty = "X-Pslite-Process"

const (
	defaultMaxMessageBytes  = 1 << 30
	defaultStrangerMaxBytes = 16 << 10
	defaultMaxStrangers     = 1024
	// handshakeBuffer is the read buffer of a connection until it proves
	// a member's identity: strangers and half-open connections cost little.
	handshakeBuffer  = 4 << 10
	defaultMaxFrames = 64

	// packMax bounds the encoded size of a message that is written at
	// once by a Send to an idle peer, or joins a pack: messages queued for
	// a peer are encoded end to end into one buffer, written with one
	// system call. Larger ones are queued for the writer (their large
	// frames without a copy). A copy of up to packMax costs less than the
	// hand-off to the writer.
	packMax = 256 << 10
	// packCap is the size past which a pack takes no more messages.
	packCap = 256 << 10
	// zeroCopyMin is the smallest shared frame sent without a copy.
	zeroCopyMin = 512 << 10
	// coalesceGap: a small message sent to a peer less than this after
	// the last one a Send wrote itself goes to the peer's writer, which
	// writes what has queued by then with one system call. A message
	// alone (a request, its response a round trip later) is written at
	// once; a run of them (pushes with many outstanding) travels in few
	// TCP segments, each of which costs both sides far more than the
	// bytes in it. Measured in docs/PERFORMANCE-NOTES.md.
	coalesceGap = 50 * time.Microsecond
	// maxHeld is how many messages a held peer's queue takes before its
	// writer sends them all the same.
	maxHeld = 64
	// readBuffer is the size of each connection's read buffer.
	readBuffer = 64 << 10
	// inboxLen is how many batches of received messages wait for the
	// receive loop before the connections' readers wait (and TCP pushes
	// back).
	inboxLen = 64
	// maxBatch bounds the messages a reader passes on at once: those it
	// has read already when it has read one.
	maxBatch = 32
	// stopWait bounds how long Close waits, beyond the linger time, for
	// the transport's goroutines.
	stopWait = 10 * time.Second
)

// Transport speaks ZeroMQ's wire protocol, ZMTP 3.1, itself: a node binds
// one listening socket, on which every peer's DEALER connects (a ROUTER to
// them), and opens one connection per peer, as a DEALER, to send to it. It
// is wire compatible with libzmq's ROUTER and DEALER sockets, so nodes
// using it, the ZeroMQ transport and C++ ps-lite mix in one job.
//
// Each accepted connection has a reader goroutine, which passes what it
// reads to the receive loop through a bounded queue. Each peer has a
// writer goroutine, which connects (and reconnects) and writes what waits
// in the peer's queue. A Send to an idle peer writes the message itself,
// with one non-blocking system call, and leaves whatever the kernel did
// not take to the writer.
type Transport struct {
	opts Options
	// strangers counts the accepted connections that are strangers (see
	// Options.MaxStrangers).
	strangers atomic.Int64
	// netLog is opts.Log limited to a burst of lines a second, for what
	// anyone who can open a connection can make the transport say.
	netLog zerolog.Logger
	ln     net.Listener

	inbox chan []inMsg
	stop  chan struct{} // closed by Close
	// known is closed by MembersKnown (see Options.AwaitMembers).
	known     chan struct{}
	knownOnce sync.Once
	timer     *time.Timer // Recv's; the receive loop's
	pending   []inMsg     // the rest of the batch Recv took last; the receive loop's

	mu    sync.Mutex // guards the fields below; never held across I/O
	peers map[int]*peer
	conns map[*inConn]struct{}
	// handshaking holds the accepted connections still in their
	// handshake, by the order they came (see Options.MaxStrangers).
	handshaking map[*inConn]struct{}
	accepted    uint64
	owners      map[string]*inConn // identity -> the connection it is delivered from
	// claimed maps an identity to the accept order (inConn.seq) of the
	// last connection that held it: one accepted before that is stale (its
	// sender has connected again since, or been replaced) and never holds
	// it, so that what it still carries cannot arrive after what the newer
	// one delivered. Entries older than every open connection are pruned
	// (pruneClaimedLocked).
	claimed    map[string]uint64
	claimedCap int                // the size at which claimed is pruned next
	links      map[*link]struct{} // connections the heartbeat watches
	handover   bool
	// incarnations maps identities to the process incarnation that holds
	// them now (SetIncarnations).
	incarnations map[string]string
	closed       bool
	anon         uint32 // the last identity made up for a peer without one

	view sendq.View[*peer] // peers and closed, published at each change
	wg   sync.WaitGroup    // every goroutine of the transport

	held sendq.Held[*peer]

	pool bufPool // large received frames' buffers
	// upfront is what is left of Options.UpfrontBytes (see readFrame).
	upfront atomic.Int64

	onConnection atomic.Pointer[func(id int, up bool)]

	// refused counts the handshakes peers refused (their ERROR), for tests.
	refused atomic.Int64
	// kcBudget is what is left of Options.KeyCacheTotal for offers.
	kcBudget atomic.Int64
	// kcPuts and kcRefs count the frames sent with X-KCPUT and as
	// X-KCREF (KeyCacheStats).
	kcPuts, kcRefs atomic.Int64
	// coded counts the key lists sent coded (KeyCodeStats).
	coded atomic.Int64
}

var (
	_ van.Transport          = (*Transport)(nil)
	_ van.ConnectionReporter = (*Transport)(nil)
	_ van.Batcher            = (*Transport)(nil)
	_ van.Handover           = (*Transport)(nil)
	_ van.Lender             = (*Transport)(nil)
	_ van.Incarnations       = (*Transport)(nil)
	_ van.MembershipWatcher  = (*Transport)(nil)
)

// inMsg is a received message, or the error of one that was skipped.
type inMsg struct {
	ident  []byte
	frames [][]byte
	lent   uint64 // bit i: frames[i] is a buffer of the pool
	err    error
}

// inConn is an accepted connection.
type inConn struct {
	c       net.Conn
	seq     uint64 // the order it was accepted in, from 1
	ident   string
	process string      // the incarnation it presented
	owner   atomic.Bool // its messages are delivered (it holds its identity)
	// stranger: counted in Transport.strangers (until it proves a
	// member's identity, or goes)
	stranger atomic.Bool
	wMu      sync.Mutex // guards writes (PONGs)
}

// New creates a transport.
func New(opts Options) (*Transport, error) {
	if opts.RecvTimeout <= 0 {
		opts.RecvTimeout = 200 * time.Millisecond
	}
	if opts.Linger <= 0 {
		opts.Linger = 500 * time.Millisecond
	}
	if opts.QueueLimit <= 0 {
		opts.QueueLimit = 1024
	}
	if opts.WaterMark > 0 {
		opts.QueueLimit = opts.WaterMark
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = defaultMaxMessageBytes
	}
	if opts.UpfrontBytes <= 0 {
		opts.UpfrontBytes = opts.MaxMessageBytes
	}
	if opts.MaxStrangers <= 0 {
		opts.MaxStrangers = defaultMaxStrangers
	}
	if opts.StrangerMaxBytes <= 0 {
		opts.StrangerMaxBytes = defaultStrangerMaxBytes
	}
	if opts.MaxFrames <= 0 {
		opts.MaxFrames = defaultMaxFrames
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	if opts.ReconnectInterval <= 0 {
		opts.ReconnectInterval = 100 * time.Millisecond
	}
	if opts.KeyCacheTotal <= 0 {
		opts.KeyCacheTotal = 4 * max(opts.KeyCacheBytes, 0)
	}
	t := &Transport{
		opts:         opts,
		netLog:       van.RateLimited(opts.Log),
		inbox:        make(chan []inMsg, inboxLen),
		stop:         make(chan struct{}),
		known:        make(chan struct{}),
		peers:        map[int]*peer{},
		conns:        map[*inConn]struct{}{},
		handshaking:  map[*inConn]struct{}{},
		owners:       map[string]*inConn{},
		claimed:      map[string]uint64{},
		claimedCap:   claimedPruneMin,
		links:        map[*link]struct{}{},
		incarnations: map[string]string{},
		anon:         rand.Uint32(),
	}
	t.upfront.Store(opts.UpfrontBytes)
	t.kcBudget.Store(opts.KeyCacheTotal)
	if opts.LinkTimeout > 0 {
		t.wg.Add(1)
		go t.heartbeat()
	}
	return t, nil
}

// SetConnectionHandler implements van.ConnectionReporter: f(id, true) when
// the connection to node id has made its handshake, f(id, false) when an
// established one drops. f runs on the peer's writer goroutine.
func (t *Transport) SetConnectionHandler(f func(id int, up bool)) { t.onConnection.Store(&f) }

// SetHandover implements van.Handover: while on, a connection announcing
// an identity another connection holds takes it over (the other is
// closed); while off, the newcomer's messages are dropped, as libzmq's
// ROUTER does.
func (t *Transport) SetHandover(on bool) error {
	t.mu.Lock()
	t.handover = on
	t.mu.Unlock()
	return nil
}

// address returns the network and address of a node's endpoint.
func (t *Transport) address(host string, port int) (network, addr string) {
	if t.opts.Local {
		return "unix", "/tmp/" + strconv.Itoa(port)
	}
	return "tcp", net.JoinHostPort(host, strconv.Itoa(port))
}

// Bind implements van.Transport.
func (t *Transport) Bind(host string, port, maxRetry int) (int, error) {
	if t.ln != nil {
		return 0, errors.New("van: already bound")
	}
	if host == "*" || t.opts.BindAll {
		host = ""
	}
	var lastErr error
	for i := 0; i <= maxRetry; i++ {
		switch {
		case port <= 0 && i == 0 && !t.opts.Local:
			// The kernel picks a free port, as with C++ ps-lite.
		case i > 0 || port <= 0:
			port = 10000 + rand.IntN(40000)
		}
		network, addr := t.address(host, max(port, 0))
		if network == "unix" {
			os.Remove(addr) // what a previous run left behind, as libzmq does
		}
		ln, err := net.Listen(network, addr)
		if err != nil {
			lastErr = err
			continue
		}
		if port <= 0 {
			port = ln.Addr().(*net.TCPAddr).Port
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			ln.Close()
			return 0, van.ErrClosed
		}
		t.ln = ln
		t.wg.Add(1)
		t.mu.Unlock()
		go t.accept(ln)
		return port, nil
	}
	network, addr := t.address(host, port)
	return 0, fmt.Errorf("van: bind %s %s: %w", network, addr, lastErr)
}

// accept accepts connections until the listener closes.
func (t *Transport) accept(ln net.Listener) {
	defer t.wg.Done()
	var backoff *time.Timer
	for {
		c, err := ln.Accept()
		if err != nil {
			if t.stopped() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, say: try again in a moment.
			t.opts.Log.Warn().Err(err).Msg("zmtp: accepting a connection failed")
			if backoff == nil {
				backoff = time.NewTimer(10 * time.Millisecond)
			} else {
				backoff.Reset(10 * time.Millisecond)
			}
			select {
			case <-t.stop:
				return
			case <-backoff.C:
			}
			continue
		}
		ic := &inConn{c: c}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			c.Close()
			return
		}
		if !t.makeRoomLocked(ic) {
			t.mu.Unlock()
			c.Close()
			continue
		}
		t.strangers.Add(1)
		ic.stranger.Store(true)
		t.accepted++
		ic.seq = t.accepted
		t.handshaking[ic] = struct{}{}
		t.conns[ic] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serve(ic)
	}
}

// makeRoomLocked keeps the strangers within Options.MaxStrangers as ic
// comes: past it, the connection longest in its handshake is closed (a
// node's handshake takes milliseconds; one that idles is not a node), or,
// when every stranger has finished its handshake, ic is refused. t.mu is
// held.
func (t *Transport) makeRoomLocked(ic *inConn) bool {
	if t.strangers.Load() < int64(t.opts.MaxStrangers) {
		return true
	}
	var oldest *inConn
	for c := range t.handshaking {
		if oldest == nil || c.seq < oldest.seq {
			oldest = c
		}
	}
	if oldest == nil {
		t.netLog.Warn().Str("from", ic.c.RemoteAddr().String()).Int("strangers", t.opts.MaxStrangers).
			Msg("zmtp: too many connections without a member's identity; refusing a new one")
		return false
	}
	t.netLog.Warn().Str("from", oldest.c.RemoteAddr().String()).Int("strangers", t.opts.MaxStrangers).
		Msg("zmtp: too many connections without a member's identity; closing the one longest in its handshake")
	delete(t.handshaking, oldest)
	oldest.c.Close() // its serve sees the handshake fail, and forgets it
	return true
}

func (t *Transport) stopped() bool {
	select {
	case <-t.stop:
		return true
	default:
		return false
	}
}

// serve reads one accepted connection's messages until it closes.
func (t *Transport) serve(ic *inConn) {
	defer t.wg.Done()
	defer t.forget(ic)
	t.tune(ic.c)
	br := bufio.NewReaderSize(ic.c, handshakeBuffer)
	props, err := t.handshake(ic.c, br, "ROUTER", "", t.admit)
	t.mu.Lock()
	delete(t.handshaking, ic)
	t.mu.Unlock()
	if err != nil {
		if !t.stopped() {
			t.netLog.Warn().Err(err).Str("from", ic.c.RemoteAddr().String()).Msg("zmtp: handshake failed, connection closed")
		}
		return
	}
	ic.process = props[strings.ToLower(processProperty)]
	if t.opts.AwaitMembers && t.member(props["identity"]) && props["identity"] != t.opts.SchedulerIdentity &&
		!t.awaitMembers(ic, props["identity"]) {
		return
	}
	pingMsg := ping(t.opts.LinkTimeout)
	lk := t.watch(ic.c, func() { ic.write(pingMsg, t.opts.HandshakeTimeout) })
	defer t.unwatch(lk)
	ident := []byte(props["identity"])
	if len(ident) == 0 {
		ident = t.anonIdentity()
	}
	ic.ident = string(ident)
	held, stale := t.claim(ic, false)
	if stale {
		t.opts.Log.Debug().Str("identity", ic.ident).Msg("zmtp: closing a connection a newer one of its identity replaced")
		return
	} else if !held {
		t.netLog.Warn().Str("identity", ic.ident).Str("from", ic.c.RemoteAddr().String()).
			Msg("zmtp: identity already connected; dropping this connection's messages while the other holds it")
	}
	if t.member(props["identity"]) {
		// A member: a read buffer for runs of messages (over the small
		// one, which may hold what came with the READY).
		t.unstranger(ic)
		br = bufio.NewReaderSize(br, readBuffer)
	}
	memberMax := t.maxBytes(props["identity"])
	fr := &frameReader{r: br, maxFrames: t.opts.MaxFrames, maxBytes: memberMax, pool: &t.pool, upfront: &t.upfront}
	// A key cache for a member's connection that holds its identity and
	// asks for one (a Go node on this transport; not the scheduler, which
	// sends no large frames).
	if props[strings.ToLower(keyCacheProperty)] != "" && held && t.member(props["identity"]) && props["identity"] != t.opts.SchedulerIdentity {
		if n := t.reserveKeyCache(); n > 0 {
			defer t.kcBudget.Add(n)
			if ic.write(offerCommand(n, keyCacheSlots), t.opts.HandshakeTimeout) != nil {
				return
			}
			fr.kc = &recvCache{limit: n, pool: &t.pool}
			defer fr.kc.close()
		}
	}
	// Coded key lists from the same (keycodec.go): this node says it
	// decodes them, and the peer may send them from then on.
	if t.keyCode() && props[strings.ToLower(keyCodeProperty)] != "" && held && t.member(props["identity"]) && props["identity"] != t.opts.SchedulerIdentity {
		if ic.write(command(cmdCodeOK, nil), t.opts.HandshakeTimeout) != nil {
			return
		}
		fr.code = true
	}
	var batch []inMsg
	for {
		// Pass on, together, what has arrived already: one hand-off to the
		// receive loop for a run of messages rather than one each.
		if len(batch) > 0 && (br.Buffered() == 0 || len(batch) == maxBatch) {
			if !t.deliver(batch) {
				return
			}
			batch = nil
		}
		// A connection whose identity another holds (its messages are
		// dropped) may announce no more than a stranger: what it sends
		// costs no memory.
		fr.maxBytes = memberMax
		if !ic.owner.Load() {
			held, stale := t.claim(ic, false)
			if stale {
				t.opts.Log.Debug().Str("identity", ic.ident).Msg("zmtp: closing a connection a newer one of its identity replaced")
				return
			}
			if !held {
				fr.maxBytes = min(memberMax, t.opts.StrangerMaxBytes)
			}
		}
		frames, cmd, err := fr.readMessage()
		lk.touch()
		for _, c := range fr.inside {
			if reply := answer(c); reply != nil && ic.write(reply, t.opts.HandshakeTimeout) != nil {
				fr.giveBack(frames)
				return
			}
		}
		if err != nil {
			var o *oversized
			if errors.As(err, &o) {
				batch = append(batch, inMsg{err: fmt.Errorf("%w: from %q, %v", van.ErrOversized, ident, o)})
				continue
			}
			if len(batch) > 0 {
				t.deliver(batch)
			}
			if !t.stopped() && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.netLog.Warn().Err(err).Str("identity", ic.ident).Msg("zmtp: connection dropped")
			}
			return
		}
		if cmd != nil {
			if reply := answer(cmd); reply != nil && ic.write(reply, t.opts.HandshakeTimeout) != nil {
				return
			}
			continue
		}
		if !ic.owner.Load() {
			if held, _ := t.claim(ic, true); !held {
				fr.giveBack(frames)
				continue // another connection holds the identity (or held it since)
			}
		}
		batch = append(batch, inMsg{ident: ident, frames: frames, lent: fr.lent})
	}
}

// reserveKeyCache takes a connection's key cache from the budget: up to
// Options.KeyCacheBytes, nothing when less than a cached frame is left.
func (t *Transport) reserveKeyCache() int64 {
	for {
		left := t.kcBudget.Load()
		n := min(left, t.opts.KeyCacheBytes)
		if n < keyCacheMin {
			return 0
		}
		if t.kcBudget.CompareAndSwap(left, left-n) {
			return n
		}
	}
}

// KeyCacheStats returns how many frames this transport sent whole to be
// kept by the peer's key cache, and how many it sent as references to
// kept ones.
func (t *Transport) KeyCacheStats() (puts, refs int64) { return t.kcPuts.Load(), t.kcRefs.Load() }

// KeyCodeStats returns how many key lists this transport sent coded.
func (t *Transport) KeyCodeStats() int64 { return t.coded.Load() }

// keyCode reports whether this transport codes key lists, and decodes
// them: only where a key frame's bytes are the machine's uint64s.
func (t *Transport) keyCode() bool { return t.opts.KeyCode && littleEndian }

// write writes b to an accepted connection (a PONG or a PING), waiting at
// most d.
func (ic *inConn) write(b []byte, d time.Duration) error {
	ic.wMu.Lock()
	defer ic.wMu.Unlock()
	ic.c.SetWriteDeadline(time.Now().Add(d))
	_, err := ic.c.Write(b)
	return err
}

// answer returns the reply to a command a peer sent after the handshake
// (a PONG to a PING), or nil.
func answer(cmd []byte) []byte {
	name, body, err := parseCommand(cmd)
	if err == nil && name == "PING" {
		return pong(body)
	}
	return nil
}

// deliver hands received messages to the receive loop; false when the
// transport closed first.
func (t *Transport) deliver(batch []inMsg) bool {
	select {
	case t.inbox <- batch:
		return true
	case <-t.stop:
		return false
	}
}

// maxBytes returns the largest message a connection that announced
// identity may send: MaxMessageBytes for a member of the job, else
// StrangerMaxBytes (see Options.IsMember).
func (t *Transport) maxBytes(identity string) int64 {
	if t.member(identity) {
		return t.opts.MaxMessageBytes
	}
	return min(t.opts.StrangerMaxBytes, t.opts.MaxMessageBytes)
}

// member reports whether a connection that announced identity is a
// member's (see Options.IsMember).
func (t *Transport) member(identity string) bool {
	return identity != "" && (t.opts.IsMember == nil || t.opts.IsMember(identity))
}

// anonIdentity makes up an identity for a peer that announced none, as
// libzmq's ROUTER does: a zero byte, then a 32-bit number.
func (t *Transport) anonIdentity() []byte {
	t.mu.Lock()
	t.anon++
	n := t.anon
	t.mu.Unlock()
	return binary.BigEndian.AppendUint32([]byte{0}, n)
}

// admit decides, at a ROUTER's handshake, whether a peer that announced
// props may connect: not when it claims the identity of a node whose
// process is known to be another (a replaced node's predecessor, or a
// stranger). It returns why not.
func (t *Transport) admit(props map[string]string) error {
	ident := props["identity"]
	if ident == "" {
		return nil
	}
	t.mu.Lock()
	want := t.incarnations[ident]
	t.mu.Unlock()
	if got := props[strings.ToLower(processProperty)]; want != "" && got != want {
		return fmt.Errorf("identity %s belongs to another process now (this one was replaced, or is not that node)", ident)
	}
	return nil
}

// MembersKnown implements van.MembershipWatcher: the node knows the job's
// members (and their incarnations) now; connections held by AwaitMembers
// are checked and served.
func (t *Transport) MembersKnown() { t.knownOnce.Do(func() { close(t.known) }) }

// awaitMembers holds ic, which claims member identity ident, until the
// node knows the job's members, and reports whether it may be served:
// its process must be the identity's known incarnation, if there is one.
// It still counts as a stranger meanwhile (see Options.MaxStrangers).
func (t *Transport) awaitMembers(ic *inConn, ident string) bool {
	select {
	case <-t.known:
	default:
		wait := t.opts.MemberWait
		if wait <= 0 {
			wait = 60 * time.Second
		}
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-t.known:
		case <-t.stop:
			return false
		case <-timer.C:
			t.netLog.Warn().Str("identity", ident).Str("from", ic.c.RemoteAddr().String()).Dur("waited", wait).
				Msg("zmtp: closing a connection that claims a member's identity this node never learnt of")
			return false
		}
	}
	t.mu.Lock()
	want := t.incarnations[ident]
	t.mu.Unlock()
	if want != "" && ic.process != want {
		t.netLog.Warn().Str("identity", ident).Str("from", ic.c.RemoteAddr().String()).
			Msg("zmtp: closing a connection that claimed a member's identity before this node knew the job: it belongs to another process")
		return false
	}
	return true
}

// ProcessOf implements van.Incarnations.
func (t *Transport) ProcessOf(identity []byte) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ic := t.owners[string(identity)]; ic != nil {
		return ic.process
	}
	return ""
}

// SetIncarnations implements van.Incarnations: connections that hold an
// identity from a process that is no longer its node's are closed.
func (t *Transport) SetIncarnations(byID map[int]string) {
	m := make(map[string]string, len(byID))
	for id, p := range byID {
		m[fmt.Sprintf("ps%d", id)] = p
	}
	t.mu.Lock()
	t.incarnations = m
	var stale []*inConn
	for ident, ic := range t.owners {
		if want := m[ident]; want != "" && ic.process != want {
			stale = append(stale, ic)
		}
	}
	t.mu.Unlock()
	for _, ic := range stale {
		t.netLog.Warn().Str("identity", ic.ident).Str("from", ic.c.RemoteAddr().String()).
			Msg("zmtp: closing a connection of a process that no longer holds its identity")
		ic.c.Close()
	}
}

// claim makes ic the connection its identity's messages are delivered
// from, if no other holds it, or ic's process is the identity's known
// incarnation, or handover is on (the other is then closed); it reports
// whether ic holds it. A connection accepted before the last one that held
// its identity is stale: it never holds it (stale true), whatever else
// holds. Without that, a connection whose reader fell behind (a starved
// CPU) could claim its identity after a newer one let go of it, and
// deliver old messages after newer ones.
//
// Without take, claim only tells: held is then whether ic holds the
// identity or would on its next message. A connection takes its identity
// when it has a message to deliver, never before: two connections that
// wait for the same identity to be let go (a node's new connection and a
// silent one of its past) are decided by which speaks first, not by which
// reader the scheduler happened to run first.
func (t *Transport) claim(ic *inConn, take bool) (held, stale bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.owners[ic.ident]
	want := t.incarnations[ic.ident]
	switch {
	case old == ic:
		return true, false
	case ic.seq < t.claimed[ic.ident]:
		return false, true
	case want != "" && ic.process != want:
		return false, false
	case old != nil && !t.handover && (want == "" || old.process == want):
		return false, false
	case !take:
		return true, false
	}
	if old != nil {
		old.owner.Store(false)
		old.c.Close()
	}
	t.owners[ic.ident] = ic
	ic.owner.Store(true)
	// Made-up identities are never claimed twice, and a stranger's
	// messages are dropped by the van anyway: neither costs an entry.
	if ic.ident[0] != 0 && t.member(ic.ident) {
		t.claimed[ic.ident] = ic.seq
		if len(t.claimed) >= t.claimedCap {
			t.pruneClaimedLocked()
		}
	}
	return true, false
}

// claimedPruneMin is the least size at which Transport.claimed is pruned.
const claimedPruneMin = 1024

// pruneClaimedLocked drops the entries of claimed that no connection can
// be stale against: those older than every open connection (one accepted
// later is newer still). t.mu is held.
func (t *Transport) pruneClaimedLocked() {
	oldest := t.accepted + 1
	for c := range t.conns {
		oldest = min(oldest, c.seq)
	}
	for ident, seq := range t.claimed {
		if seq < oldest {
			delete(t.claimed, ident)
		}
	}
	t.claimedCap = max(claimedPruneMin, 2*len(t.claimed))
}

// unstranger stops counting ic as a stranger.
func (t *Transport) unstranger(ic *inConn) {
	if ic.stranger.Swap(false) {
		t.strangers.Add(-1)
	}
}

// forget closes an accepted connection and lets go of its identity.
func (t *Transport) forget(ic *inConn) {
	t.unstranger(ic)
	ic.c.Close()
	t.mu.Lock()
	delete(t.conns, ic)
	delete(t.handshaking, ic)
	if t.owners[ic.ident] == ic {
		delete(t.owners, ic.ident)
	}
	t.mu.Unlock()
}

// handshake makes the ZMTP handshake on c as a socket of type ours,
// announcing identity, and returns the peer's properties. A ROUTER passes
// admit, which sees the peer's READY before this side sends its own: a
// peer it refuses gets an ERROR instead, and never an established
// connection. A DEALER reads the peer's ERROR, if it sends one, as the
// reason it was refused.
func (t *Transport) handshake(c net.Conn, br *bufio.Reader, ours, identity string, admit func(map[string]string) error) (map[string]string, error) {
	c.SetDeadline(time.Now().Add(t.opts.HandshakeTimeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(greeting()); err != nil {
		return nil, err
	}
	g := make([]byte, greetingLen)
	if _, err := io.ReadFull(br, g); err != nil {
		return nil, err
	}
	if err := checkGreeting(g); err != nil {
		return nil, err
	}
	if admit == nil {
		if _, err := c.Write(ready(ours, identity, t.opts.Process, t.opts.KeyCacheBytes > 0, t.keyCode())); err != nil {
			return nil, err
		}
	}
	fr := &frameReader{r: br, maxFrames: 1, maxBytes: 1 << 16}
	_, cmd, err := fr.readMessage()
	if err != nil {
		return nil, err
	}
	name, body, err := parseCommand(cmd)
	if err != nil {
		return nil, err
	}
	if name == "ERROR" {
		return nil, fmt.Errorf("%w: refused: %s", errRefused, parseError(body))
	}
	if name != "READY" {
		return nil, fmt.Errorf("%w: %q before READY", errProtocol, name)
	}
	props, err := parseProperties(body)
	if err != nil {
		return nil, err
	}
	if theirs := props["socket-type"]; !compatible(ours, theirs) {
		return nil, fmt.Errorf("%w: a %s socket cannot talk to a %q socket", errProtocol, ours, theirs)
	}
	if admit != nil {
		if err := admit(props); err != nil {
			c.Write(errorCommand(err.Error()))
			return nil, err
		}
		if _, err := c.Write(ready(ours, identity, "", false, false)); err != nil {
			return nil, err
		}
	}
	return props, nil
}

// errRefused marks a handshake the peer refused (its ERROR command).
var errRefused = errors.New("zmtp: connection refused by the peer")

// tune sets a new connection's options.
func (t *Transport) tune(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	tc.SetNoDelay(true)
	if d := t.opts.LinkTimeout; d > 0 {
		tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: d / 2, Interval: max(d/12, time.Second), Count: 6})
		setUserTimeout(tc, d)
	}
}

// Connect implements van.Transport: the peer's writer connects, and
// reconnects every ReconnectInterval while the peer cannot be reached.
func (t *Transport) Connect(id int, host string, port int, identity string) error {
	network, addr := t.address(host, port)
	p := newPeer(t, id, network, addr, identity)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return van.ErrClosed
	}
	old := t.peers[id]
	t.peers[id] = p
	t.publishLocked()
	t.wg.Add(1)
	t.mu.Unlock()
	old.shut()
	go p.run()
	return nil
}

// Disconnect implements van.Transport.
func (t *Transport) Disconnect(id int) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.publishLocked()
	t.mu.Unlock()
	p.shut()
}

// publishLocked publishes the peers and closed; mu is held.
func (t *Transport) publishLocked() { t.view.Publish(t.peers, t.closed) }

// peer returns the sending side for id.
func (t *Transport) peer(id int) (*peer, error) { return t.view.Get(id) }

// Send implements van.Transport. Shared frames of 512 KiB or more, but
// the first (the meta, the caller's again once Send returns), are written
// without a copy.
func (t *Transport) Send(ctx context.Context, id int, frames [][]byte, shared bool) (int, error) {
	p, err := t.peer(id)
	if err != nil {
		return 0, err
	}
	return p.send(ctx, true, frames, shared, t.opts.QueueLimit)
}

// TrySend implements van.Transport.
func (t *Transport) TrySend(id int, frames [][]byte, shared bool) (int, error) {
	p, err := t.peer(id)
	if err != nil {
		return 0, err
	}
	return p.send(context.Background(), false, frames, shared, 2*t.opts.QueueLimit)
}

// Hold implements van.Batcher.
func (t *Transport) Hold(id int) {
	if p, err := t.peer(id); err == nil {
		t.held.Hold(p)
	}
}

// Flush implements van.Batcher: it sends what the held peers' queues hold,
// on the calling goroutine when that needs no waiting, and otherwise by
// their writers. It never waits.
func (t *Transport) Flush() { t.held.Flush(func(p *peer) bool { return p.drain() }) }

// Recv implements van.Transport. The frames are the caller's.
func (t *Transport) Recv() ([]byte, [][]byte, error) {
	m := t.recv()
	return m.ident, m.frames, m.err
}

// RecvLent implements van.Lender: frames of 512 KiB or more are lent
// (buffers of the transport's pool, which it takes back from the loan once
// its last hold is dropped) rather than the caller's.
func (t *Transport) RecvLent() ([]byte, [][]byte, *message.Loan, error) {
	return t.lend(t.recv())
}

// TryRecvLent implements van.Batcher: RecvLent that returns
// van.ErrRecvTimeout at once when no message waits.
func (t *Transport) TryRecvLent() ([]byte, [][]byte, *message.Loan, error) {
	m, ok := t.next()
	if !ok {
		return nil, nil, nil, van.ErrRecvTimeout
	}
	return t.lend(m)
}

// recv returns the next message, waiting up to RecvTimeout.
func (t *Transport) recv() inMsg {
	if t.ln == nil {
		return inMsg{err: errors.New("van: not bound")}
	}
	if m, ok := t.next(); ok {
		return m
	}
	if t.timer == nil {
		t.timer = time.NewTimer(t.opts.RecvTimeout)
	} else {
		t.timer.Reset(t.opts.RecvTimeout)
	}
	select {
	case b := <-t.inbox:
		t.timer.Stop()
		t.pending = b
		m, _ := t.next()
		return m
	case <-t.timer.C:
		return inMsg{err: van.ErrRecvTimeout}
	case <-t.stop:
		t.timer.Stop()
		return inMsg{err: van.ErrClosed}
	}
}

// next returns the next message received already, if any.
func (t *Transport) next() (inMsg, bool) {
	if len(t.pending) == 0 {
		select {
		case t.pending = <-t.inbox:
		default:
			return inMsg{}, false
		}
	}
	m := t.pending[0]
	t.pending[0] = inMsg{}
	t.pending = t.pending[1:]
	return m, true
}

// lend returns m with its pooled frames lent: the loan gives them back to
// the pool, from its own list of them, once nothing holds it.
func (t *Transport) lend(m inMsg) ([]byte, [][]byte, *message.Loan, error) {
	if m.err != nil || m.lent == 0 {
		return m.ident, m.frames, nil, m.err
	}
	return m.ident, m.frames, message.NewLoan(m.frames, m.lent, t.giveBack), nil
}

// giveBack takes lent buffers back into the pool (poisoned and
// quarantined with PoisonLent).
func (t *Transport) giveBack(bufs [][]byte) {
	for _, b := range bufs {
		t.pool.put(b, t.opts.PoisonLent)
	}
}

// errStuck is Close's error when a goroutine of the transport did not stop
// in time.
var errStuck = errors.New("van: the transport's goroutines did not stop in time")

// Close implements van.Transport. Each peer's writer gets the linger time
// to send what is queued; Close waits at most that and stopWait more.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	peers := t.peers
	t.peers = map[int]*peer{}
	t.publishLocked()
	conns := make([]*inConn, 0, len(t.conns))
	for ic := range t.conns {
		conns = append(conns, ic)
	}
	ln := t.ln
	t.mu.Unlock()
	close(t.stop)
	t.pool.close()
	if ln != nil {
		ln.Close() // a Unix socket's file goes with it
	}
	for _, ic := range conns {
		ic.c.Close()
	}
	for _, p := range peers {
		p.shut()
	}
	done := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(done)
	}()
	wait := t.opts.Linger + stopWait
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
		t.opts.Log.Error().Dur("waited", wait).Msg("zmtp: the transport's goroutines did not stop")
		return fmt.Errorf("%w (%v)", errStuck, wait)
	}
}
