package zmqtransport

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	zmq "github.com/pebbe/zmq4"
	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/internal/sendq"
)

// Options configures a Transport.
type Options struct {
	// Local uses ipc:///tmp/<port> endpoints instead of TCP (DMLC_LOCAL).
	Local bool
	// WaterMark, when positive, is the send high-water mark of every
	// sending socket (DMLC_PS_WATER_MARK).
	WaterMark int
	// BindAll binds 0.0.0.0 instead of the node's host (DMLC_USE_KUBERNETES
	// on the scheduler).
	BindAll bool
	// RecvTimeout bounds each blocking receive so the receive loop can
	// notice a stop; 0 means 200ms.
	RecvTimeout time.Duration
	// Linger is how long closing waits to flush unsent messages; 0 means
	// 500ms.
	Linger time.Duration
	// IOThreads is the number of ZeroMQ I/O threads; 0 means 1.
	IOThreads int
	// QueueLimit bounds the messages waiting for a peer whose ZeroMQ queue
	// is full (beyond the high-water mark) before Send waits; 0 means 1024.
	// TrySend may queue twice as many.
	QueueLimit int
	// Curve, when set, encrypts and authenticates every connection with
	// the job's CURVE key pair.
	Curve *van.CurveKeys
	// MaxMessageBytes bounds the bytes of one received message (a frame
	// beyond it makes ZeroMQ drop the sender's connection; frames that add
	// up beyond it drop the message); 0 means DefaultMaxMessageBytes.
	MaxMessageBytes int64
	// MaxFrames bounds the frames of one received message (beyond it the
	// message is dropped); 0 means DefaultMaxFrames.
	MaxFrames int
	// LinkTimeout, when positive, bounds how long a connection may carry
	// nothing from its peer before it is dropped (PS_LINK_TIMEOUT): ZMTP
	// heartbeats every LinkTimeout/12 with that timeout, TCP keepalive
	// probing an idle connection after LinkTimeout/2, and a TCP user
	// timeout (unacknowledged data) of LinkTimeout, on every socket. So a
	// cut cable or a host gone is noticed without application heartbeats.
	LinkTimeout time.Duration
	// KeepRecvMemory makes the process's C allocator keep the memory of
	// large blocks it frees for the next ones (PS_KEEP_RECV_MEMORY, on by
	// default): libzmq receives each large message into a block of its own,
	// and a block of fresh pages costs a page fault per 4 KiB, more than
	// receiving the bytes. The process then holds, after its largest
	// receive, as much memory as that needed. It applies to the whole
	// process, from the first transport created with it.
	KeepRecvMemory bool
	// PoisonLent overwrites lent frames (see RecvLent) with 0xDB bytes when
	// they are given back, so that a handler that keeps a view of its
	// request reads garbage in its tests (PS_POISON_LENT).
	PoisonLent bool
	// Log receives the transport's own warnings (refused connections).
	Log zerolog.Logger
	// Process is this process's incarnation, presented on every
	// connection it makes (the X-Pslite-Process property, through
	// ZMQ_METADATA; C++ nodes ignore it); see van.Incarnations. Empty: none.
	Process string
}

// keepMemory sets the C allocator up once per process (KeepRecvMemory).
var keepMemory sync.Once

// DefaultMaxMessageBytes is the default bound on a received message: 1 GiB,
// eight times test_kv_app_benchmark's push of 10 million keys.
const DefaultMaxMessageBytes = 1 << 30

// DefaultMaxFrames is the default bound on the frames of a received
// message. ps-lite's messages have an identity, a meta and at most a few
// data frames (keys, values, lens).
const DefaultMaxFrames = 64

// handshakeTimeout bounds an accepted connection's ZMTP handshake, as the
// ZMTP transport's default Options.HandshakeTimeout does.
const handshakeTimeout = 10 * time.Second

// Transport is the ZeroMQ transport of C++ ps-lite: one ROUTER socket
// receives from every peer and one DEALER socket per peer sends to it.
//
// The ROUTER belongs to the goroutine running the receive loop (Bind, Recv).
// Each DEALER belongs to a writer goroutine of its own, which sends what
// waits in the peer's queue and closes the socket when the peer is
// replaced, disconnected or the transport closes. A Send to an idle peer
// goes straight to the socket (it never waits there: ZeroMQ takes the
// message or refuses it at once) under the peer's socket mutex, taken only
// if free; otherwise it joins the queue. So no goroutine waits on another's
// send: Connect, Disconnect and Close only signal the writers.
type Transport struct {
	opts Options
	ctx  *zmq.Context

	router  *zmq.Socket  // owned by the receive loop
	reader  *frameReader // receives from router; nil: pebbe/zmq4's calls
	boundAt string       // the endpoint router is bound to

	peersMu sync.Mutex // guards peers and closed; never held across I/O
	peers   map[int]*peer
	closed  bool
	// view is a copy of peers and closed, replaced under peersMu at each
	// change, for sends to read without the lock.
	view    sendq.View[*peer]
	writers sync.WaitGroup
	live    map[*peer]struct{} // peers whose writer runs; under peersMu
	// stopWait, when set, replaces the package's stopWait (for tests).
	stopWait time.Duration

	guard *curveGuard // nil without CURVE

	held sendq.Held[*peer] // peers held by Hold and not flushed since

	onConnection atomic.Pointer[func(id int, up bool)]

	inc incarnations
}

var (
	_ van.Transport          = (*Transport)(nil)
	_ van.ConnectionReporter = (*Transport)(nil)
	_ van.Lender             = (*Transport)(nil)
	_ van.Batcher            = (*Transport)(nil)
)

// peer is the sending side for one node.
type peer struct {
	id   int
	sock *zmq.Socket    // used under sockMu, closed by the writer
	h    unsafe.Pointer // libzmq's handle of sock, for zero-copy sends; may be nil
	mon  *socketMonitor // reports disconnects; nil without a handler

	// sockMu guards the use of sock. The writer holds it while it sends
	// (waiting for room in slices of pollEvery) and when it closes the
	// socket; Send and TrySend only try it, and queue when it is taken.
	sockMu sync.Mutex

	qMu     sync.Mutex // guards q, n, spare, closing, held and room
	q       []outMsg   // what waits to be sent, oldest first
	n       int        // messages in q (a pack holds several)
	spare   *sendPack  // a sent pack kept for reuse
	closing bool
	held    bool          // Hold: sends queue without waking the writer, until Flush
	room    sendq.Room    // senders wait on it while n is at the limit
	kick    chan struct{} // wakes the writer (capacity 1)
	done    chan struct{} // closed when the writer has closed the socket
}

// pollEvery is how long the writer waits for room at a time before it
// looks whether the peer is closing.
const pollEvery = 50 * time.Millisecond

// New creates a ZeroMQ context for one node.
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
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.MaxFrames <= 0 {
		opts.MaxFrames = DefaultMaxFrames
	}
	if opts.KeepRecvMemory {
		keepMemory.Do(func() {
			if !keepRecvMemory() {
				opts.Log.Debug().Msg("cannot make the C allocator keep freed memory")
			}
		})
	}
	ctx, err := zmq.NewContext()
	if err != nil {
		return nil, fmt.Errorf("van: create zmq context: %w", err)
	}
	if err := ctx.SetMaxSockets(65536); err != nil {
		ctx.Term()
		return nil, fmt.Errorf("van: zmq max sockets: %w", err)
	}
	if opts.IOThreads > 0 {
		if err := ctx.SetIoThreads(opts.IOThreads); err != nil {
			ctx.Term()
			return nil, fmt.Errorf("van: zmq io threads: %w", err)
		}
	}
	t := &Transport{opts: opts, ctx: ctx, peers: make(map[int]*peer), live: make(map[*peer]struct{})}
	t.inc.init(opts.Process, opts.Log)
	if opts.Curve != nil {
		if err := opts.Curve.Check(); err != nil {
			ctx.Term()
			return nil, fmt.Errorf("van: %w", err)
		}
		g, err := startCurveGuard(ctx, *opts.Curve, opts.Log)
		if err != nil {
			ctx.Term()
			return nil, err
		}
		t.guard = g
	}
	return t, nil
}

// SetConnectionHandler implements van.ConnectionReporter: f(id, false) when
// the connection to node id drops (its process died or closed it), f(id,
// true) when it is (re-)established, for peers connected from now on. f
// runs on a monitor goroutine.
func (t *Transport) SetConnectionHandler(f func(id int, up bool)) { t.onConnection.Store(&f) }

// Refused returns how many connections CURVE authentication refused.
func (t *Transport) Refused() int64 {
	if t.guard == nil {
		return 0
	}
	return t.guard.refused.Load()
}

func (t *Transport) endpoint(host string, port int) string {
	if t.opts.Local {
		return fmt.Sprintf("ipc:///tmp/%d", port)
	}
	return fmt.Sprintf("tcp://%s:%d", host, port)
}

// Bind implements van.Transport.
func (t *Transport) Bind(host string, port, maxRetry int) (int, error) {
	if t.router != nil {
		return 0, errors.New("van: already bound")
	}
	sock, err := t.ctx.NewSocket(zmq.ROUTER)
	if err != nil {
		return 0, fmt.Errorf("van: create receiver socket: %w", err)
	}
	if err := sock.SetMaxmsgsize(t.opts.MaxMessageBytes); err != nil {
		sock.Close()
		return 0, fmt.Errorf("van: set the largest message: %w", err)
	}
	if err := sock.SetRcvtimeo(t.opts.RecvTimeout); err != nil {
		sock.Close()
		return 0, fmt.Errorf("van: receive timeout: %w", err)
	}
	sock.SetLinger(0)
	// A connection whose handshake has not finished within this is dropped
	// (libzmq's default is 30 s): a greeting sent a byte at a time holds
	// the socket no longer than the ZMTP transport's would.
	if err := sock.SetHandshakeIvl(handshakeTimeout); err != nil {
		sock.Close()
		return 0, fmt.Errorf("van: handshake timeout: %w", err)
	}
	if err := t.setLinkTimeout(sock); err != nil {
		sock.Close()
		return 0, err
	}
	if c := t.opts.Curve; c != nil {
		if err := errors.Join(sock.SetZapDomain(zapDomain), sock.SetCurveServer(1), sock.SetCurveSecretkey(c.Secret)); err != nil {
			sock.Close()
			return 0, fmt.Errorf("van: CURVE server: %w", err)
		}
		if err := t.guard.watch(t.ctx, sock, "receiver"); err != nil {
			sock.Close()
			return 0, err
		}
	}
	if host == "" || t.opts.BindAll {
		host = "*"
	}
	var lastErr error
	for i := 0; i <= maxRetry; i++ {
		endpoint := t.endpoint(host, port)
		switch {
		case port <= 0 && i == 0 && !t.opts.Local:
			// Let the kernel pick a free port, as C++ ps-lite does: it picks
			// from the ephemeral range, which scripts/local.sh keeps
			// schedulers out of, and never one that is taken.
			endpoint = fmt.Sprintf("tcp://%s:*", host)
		case i > 0 || port <= 0:
			port = 10000 + rand.IntN(40000)
			endpoint = t.endpoint(host, port)
		}
		if err := sock.Bind(endpoint); err != nil {
			lastErr = err
			continue
		}
		if port <= 0 {
			bound, err := sock.GetLastEndpoint()
			if err == nil {
				port, err = strconv.Atoi(bound[strings.LastIndexByte(bound, ':')+1:])
			}
			if err != nil || port <= 0 {
				sock.Close()
				return 0, fmt.Errorf("van: port of %q: %v", bound, err)
			}
		}
		t.router, t.boundAt = sock, t.endpoint(host, port)
		if h := rawSocket(sock); h != nil {
			t.reader = newFrameReader(h, t.opts.MaxFrames, t.opts.MaxMessageBytes)
		}
		return port, nil
	}
	sock.Close()
	return 0, fmt.Errorf("van: bind %s: %w", t.endpoint(host, port), lastErr)
}

// Connect implements van.Transport. A connection that replaces another
// does not wait for the old one: its writer closes it.
func (t *Transport) Connect(id int, host string, port int, identity string) error {
	t.peersMu.Lock()
	closed := t.closed
	t.peersMu.Unlock()
	if closed {
		return van.ErrClosed
	}
	sock, err := t.ctx.NewSocket(zmq.DEALER)
	if err != nil {
		return fmt.Errorf("van: create sender socket (raise the open-file limit?): %w", err)
	}
	if identity != "" {
		if err := sock.SetIdentity(identity); err != nil {
			sock.Close()
			return fmt.Errorf("van: set identity: %w", err)
		}
	}
	if t.opts.WaterMark > 0 {
		if err := sock.SetSndhwm(t.opts.WaterMark); err != nil {
			sock.Close()
			return fmt.Errorf("van: set send high-water mark: %w", err)
		}
	}
	sock.SetLinger(t.opts.Linger)
	if err := t.setLinkTimeout(sock); err != nil {
		sock.Close()
		return err
	}
	if c := t.opts.Curve; c != nil {
		if err := errors.Join(sock.SetCurveServerkey(c.Public), sock.SetCurvePublickey(c.Public), sock.SetCurveSecretkey(c.Secret)); err != nil {
			sock.Close()
			return fmt.Errorf("van: CURVE client: %w", err)
		}
	}
	if t.opts.Process != "" && t.inc.presents.Load() {
		if err := setProcess(sock, t.opts.Process); err != nil {
			// A libzmq without ZMQ_METADATA: this node presents no
			// incarnation, and is then told apart by its identity only.
			t.inc.presents.Store(false)
			t.opts.Log.Warn().Err(err).Msg("van: this libzmq cannot present the process incarnation (ZMQ_METADATA); replacements of this node are told apart by identity only")
		}
	}
	p := &peer{id: id, sock: sock, h: rawSocket(sock), kick: make(chan struct{}, 1), done: make(chan struct{})}
	if f := t.onConnection.Load(); f != nil {
		// Watch before connecting, so that the first handshake is seen.
		// Up is the ZMTP handshake done, not the TCP connection made: a
		// stopped process's kernel still accepts connections, so a DEALER
		// reconnecting to it would look up again at every try.
		m, err := monitorSocket(t.ctx, sock, zmq.EVENT_HANDSHAKE_SUCCEEDED|zmq.EVENT_DISCONNECTED, func(ev zmq.Event, _ string, _ int) {
			t.peersMu.Lock()
			current := t.peers[id] == p && !t.closed
			t.peersMu.Unlock()
			if current && !p.isClosing() {
				(*f)(id, ev == zmq.EVENT_HANDSHAKE_SUCCEEDED)
			}
		})
		if err != nil {
			sock.Close()
			return err
		}
		p.mon = m
	}
	// The socket is p's from now on: connect it under sockMu, which its
	// writer and senders take before they use it.
	p.sockMu.Lock()
	t.peersMu.Lock()
	if t.closed {
		t.peersMu.Unlock()
		p.mon.stop(sock)
		sock.Close()
		p.sockMu.Unlock()
		return van.ErrClosed
	}
	old := t.peers[id]
	t.peers[id] = p
	t.publishLocked()
	t.writers.Add(1)
	t.live[p] = struct{}{}
	t.peersMu.Unlock()
	go t.write(p)
	old.shut()
	addr := t.endpoint(host, port)
	err = sock.Connect(addr)
	p.sockMu.Unlock()
	if err != nil {
		t.peersMu.Lock()
		if t.peers[id] == p {
			delete(t.peers, id)
			t.publishLocked()
		}
		t.peersMu.Unlock()
		p.shut()
		return fmt.Errorf("van: connect to %s: %w", addr, err)
	}
	return nil
}

// Disconnect implements van.Transport.
func (t *Transport) Disconnect(id int) {
	t.peersMu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.publishLocked()
	t.peersMu.Unlock()
	p.shut()
}

// shut tells p's writer to close the socket; senders waiting for room get
// van.ErrPeerClosed. It does not wait.
func (p *peer) shut() {
	if p == nil {
		return
	}
	p.qMu.Lock()
	p.closing = true
	p.room.Close()
	p.qMu.Unlock()
	p.Wake()
}

// Wake implements sendq.Holdable: it wakes p's writer.
func (p *peer) Wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// SetHeld implements sendq.Holdable.
func (p *peer) SetHeld(on bool) (was, queued bool) {
	p.qMu.Lock()
	defer p.qMu.Unlock()
	was, p.held = p.held, on
	return was, len(p.q) > 0
}

// write is p's writer: it sends what is queued, in order, until p shuts,
// then closes the socket.
func (t *Transport) write(p *peer) {
	defer t.writers.Done()
	defer func() {
		t.peersMu.Lock()
		delete(t.live, p)
		t.peersMu.Unlock()
	}()
	defer close(p.done)
	var poller *zmq.Poller
	for {
		<-p.kick
		for {
			p.sockMu.Lock()
			if p.isClosing() {
				p.closeSocket()
				p.sockMu.Unlock()
				return
			}
			empty, err := t.sendHead(p)
			for errors.Is(err, van.ErrWouldBlock) {
				// ZeroMQ's queue for the peer is full: wait for room a
				// slice at a time, so that a shut is noticed.
				if poller == nil {
					poller = zmq.NewPoller()
					poller.Add(p.sock, zmq.POLLOUT)
				}
				poller.Poll(pollEvery)
				if p.isClosing() {
					p.closeSocket()
					p.sockMu.Unlock()
					return
				}
				empty, err = t.sendHead(p)
			}
			p.sockMu.Unlock()
			if empty {
				break
			}
		}
	}
}

func (p *peer) isClosing() bool {
	p.qMu.Lock()
	defer p.qMu.Unlock()
	return p.closing
}

// closeSocket stops p's monitor and closes its socket; sockMu is held. It
// does not wait for the monitor's goroutine, which ends on its own (see
// socketMonitor).
func (p *peer) closeSocket() {
	if p.sock == nil {
		return
	}
	p.mon.stop(p.sock)
	p.sock.Close()
	p.sock = nil
	p.qMu.Lock()
	p.q, p.n, p.spare = nil, 0, nil
	p.qMu.Unlock()
}

// publishLocked publishes a copy of peers and closed; peersMu is held.
func (t *Transport) publishLocked() { t.view.Publish(t.peers, t.closed) }

// peer returns the sending side for id.
func (t *Transport) peer(id int) (*peer, error) { return t.view.Get(id) }

// Send implements van.Transport. Shared frames of 512 KiB or more are sent
// without a copy.
func (t *Transport) Send(ctx context.Context, id int, frames [][]byte, shared bool) (int, error) {
	return t.send(ctx, true, id, frames, shared, t.opts.QueueLimit)
}

// TrySend implements van.Transport.
func (t *Transport) TrySend(id int, frames [][]byte, shared bool) (int, error) {
	return t.send(context.Background(), false, id, frames, shared, 2*t.opts.QueueLimit)
}

// send sends at once if the peer is idle and ZeroMQ takes the message, or
// queues it for the writer. With wait it waits for room until ctx is done;
// without, it returns van.ErrWouldBlock on a full queue.
func (t *Transport) send(ctx context.Context, wait bool, id int, frames [][]byte, shared bool, limit int) (int, error) {
	p, err := t.peer(id)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, f := range frames {
		total += len(f)
	}
	small := total <= packMaxMsg && len(frames) > 0
	if p.sockMu.TryLock() {
		p.qMu.Lock()
		// A held peer holds back small messages only: a large one gains
		// nothing from company, and would be copied in the queue.
		idle := len(p.q) == 0 && !p.closing && (!p.held || !small)
		p.qMu.Unlock()
		if idle {
			n, err := sendFrames(p.sock, p.h, frames, zmq.DONTWAIT, shared)
			p.sockMu.Unlock()
			if !errors.Is(err, van.ErrWouldBlock) {
				return n, err
			}
		} else {
			p.sockMu.Unlock()
		}
	}
	// Queue it: the writer sends it after what is queued already.
	var m outMsg
	if !small {
		m = outMsg{shared: shared}
		if !shared {
			m.frames = copyFrames(frames, total)
		} else {
			// The caller may reuse its list and small frames (the van
			// its meta buffer) once Send returns; lent memory is the
			// handler's only until it returns. Those are copied, the
			// large shared frames not.
			m.frames = append([][]byte(nil), frames...)
			for i, f := range frames {
				if i == 0 || len(f) < zeroCopyMin || message.IsLent(f) {
					m.frames[i] = message.Clone(f)
				}
			}
		}
	}
	p.qMu.Lock()
	full := func() bool { return p.n >= limit }
	err = p.room.Check(full)
	if wait {
		err = p.room.Wait(ctx, &p.qMu, full)
	}
	if err != nil {
		p.qMu.Unlock()
		return 0, err
	}
	if p.closing {
		p.qMu.Unlock()
		if _, err := t.peer(id); errors.Is(err, van.ErrClosed) {
			return 0, err
		}
		return 0, van.ErrPeerClosed
	}
	if small {
		p.packLocked(total).add(frames)
	} else {
		p.q = append(p.q, m)
	}
	p.n++
	wake := !p.held || p.n >= maxHeld
	p.qMu.Unlock()
	if wake {
		p.Wake()
	}
	return total, nil
}

// copyFrames copies frames (total bytes together) into one allocation.
func copyFrames(frames [][]byte, total int) [][]byte {
	buf := make([]byte, 0, total)
	out := make([][]byte, len(frames))
	for i, f := range frames {
		start := len(buf)
		buf = append(buf, f...)
		out[i] = buf[start:len(buf):len(buf)]
	}
	return out
}

// maxHeld is how many messages a held peer's queue takes before its writer
// sends them all the same.
const maxHeld = 64

// Hold implements van.Batcher: sends to node id join its queue, without
// waking its writer, until Flush.
func (t *Transport) Hold(id int) {
	if p, err := t.peer(id); err == nil {
		t.held.Hold(p)
	}
}

// Flush implements van.Batcher: it sends what the held peers' queues hold,
// on the calling goroutine when that needs no waiting, and otherwise by
// their writers. It never waits.
func (t *Transport) Flush() { t.held.Flush(t.drain) }

// drain sends p's queue on the calling goroutine; it reports false when
// something is left for the writer (the socket was busy or full).
func (t *Transport) drain(p *peer) bool {
	if !p.sockMu.TryLock() {
		return false
	}
	defer p.sockMu.Unlock()
	for {
		p.qMu.Lock()
		held := p.held
		p.qMu.Unlock()
		if held { // held again: the next Flush sends the rest
			return true
		}
		empty, err := t.sendHead(p)
		if err != nil {
			return false
		}
		if empty {
			return true
		}
	}
}

// sendFrames sends a multipart message on sock (libzmq handle h, or nil).
// With DONTWAIT, only the first frame can be refused (ZeroMQ then queues
// nothing, and sendFrames returns van.ErrWouldBlock); the rest of a message
// whose first frame was taken is always taken.
func sendFrames(sock *zmq.Socket, h unsafe.Pointer, frames [][]byte, flags zmq.Flag, shared bool) (int, error) {
	if h != nil && len(frames) > 0 && len(frames) <= maxMsgFrames {
		n, i, err := sendMsg(h, frames, flags, shared)
		if err != nil {
			if i == 0 && errors.Is(err, zmq.Errno(syscall.EAGAIN)) {
				return 0, van.ErrWouldBlock
			}
			return 0, fmt.Errorf("van: send frame %d/%d: %w", i, len(frames), err)
		}
		return n, nil
	}
	total := 0
	for i, f := range frames {
		flag := flags | zmq.SNDMORE
		if i == len(frames)-1 {
			flag = flags
		}
		n, err := sendFrame(sock, h, f, flag, shared && i > 0)
		if err != nil {
			if i == 0 && errors.Is(err, zmq.Errno(syscall.EAGAIN)) {
				return 0, van.ErrWouldBlock
			}
			return total, fmt.Errorf("van: send frame %d/%d: %w", i, len(frames), err)
		}
		total += n
	}
	return total, nil
}

// setLinkTimeout sets the options of Options.LinkTimeout on sock.
func (t *Transport) setLinkTimeout(sock *zmq.Socket) error {
	d := t.opts.LinkTimeout
	if d <= 0 {
		return nil
	}
	secs := max(int(d/time.Second), 12)
	ivl, timeout, ttl := heartbeats(d)
	err := errors.Join(
		sock.SetHeartbeatIvl(ivl),
		sock.SetHeartbeatTimeout(timeout),
		sock.SetHeartbeatTtl(ttl),
		sock.SetTcpKeepalive(1),
		sock.SetTcpKeepaliveIdle(secs/2),
		sock.SetTcpKeepaliveIntvl(secs/12),
		sock.SetTcpKeepaliveCnt(6),
		sock.SetTcpMaxrt(d),
	)
	if err != nil {
		return fmt.Errorf("van: link timeout options: %w", err)
	}
	return nil
}

// heartbeats returns the ZMTP heartbeat options for a link timeout d: a
// PING every twelfth of it, and the connection dropped after d without an
// answer (timeout) or without a message from the peer (TTL, which the PING
// asks the peer to apply). The interval must stay well below the TTL:
// libzmq re-arms a connection's TTL timer at each PING it receives and
// cancels it at any message, so with PINGs no more often than the TTL and
// nothing else to send, timer drift drops the connection whenever no PONG
// falls in between (every few seconds with both at 1 s).
func heartbeats(d time.Duration) (ivl, timeout, ttl time.Duration) {
	return max(d/12, time.Millisecond), d, d
}

// SetHandover implements van.Handover.
func (t *Transport) SetHandover(on bool) error {
	if t.router == nil {
		return errors.New("van: not bound")
	}
	return t.router.SetRouterHandover(on)
}

// Recv implements van.Transport.
func (t *Transport) Recv() ([]byte, [][]byte, error) {
	ident, frames, _, err := t.recv(false)
	return ident, frames, err
}

// RecvLent implements van.Lender: frames of 512 KiB or more are lent
// (views of libzmq's buffers, freed when the loan's last hold is dropped)
// rather than copied.
func (t *Transport) RecvLent() ([]byte, [][]byte, *message.Loan, error) {
	return t.recv(true)
}

// TryRecvLent implements van.Batcher: RecvLent that returns
// van.ErrRecvTimeout at once when no message waits, or none waited when the
// last batch was received.
func (t *Transport) TryRecvLent() ([]byte, [][]byte, *message.Loan, error) {
	return t.recvFlags(zmq.DONTWAIT, true)
}

func (t *Transport) recv(lend bool) ([]byte, [][]byte, *message.Loan, error) {
	return t.recvFlags(0, lend)
}

func (t *Transport) recvFlags(flags zmq.Flag, lend bool) ([]byte, [][]byte, *message.Loan, error) {
	if t.router == nil {
		return nil, nil, nil, errors.New("van: not bound")
	}
	var frames [][]byte
	var mask uint64
	var free func()
	var err error
	switch {
	case t.reader != nil:
		var proc process
		for {
			if m, ok := t.inc.ready(); ok {
				frames, mask, free = m.frames, m.mask, m.release
				break
			}
			frames, mask, free, proc, err = t.reader.recv(flags, lend, t.opts.PoisonLent)
			if err != nil || len(frames) == 0 || t.inc.admit(frames[0], readMsg{frames: frames, mask: mask, release: free, proc: proc}) {
				break
			}
			// held: its identity belongs to another process (for now)
		}
	default:
		frames, err = t.router.RecvMessageBytes(flags)
		if err == nil {
			err = checkSize(frames, t.opts.MaxFrames, t.opts.MaxMessageBytes)
		}
	}
	if err != nil {
		if errors.Is(err, zmq.Errno(syscall.EAGAIN)) {
			return nil, nil, nil, van.ErrRecvTimeout
		}
		if errors.Is(err, zmq.ETERM) {
			return nil, nil, nil, van.ErrClosed
		}
		return nil, nil, nil, fmt.Errorf("van: receive: %w", err)
	}
	if len(frames) == 0 {
		if free != nil {
			free()
		}
		return nil, nil, nil, van.ErrRecvTimeout
	}
	var loan *message.Loan
	if free != nil {
		// The loan frees libzmq's messages by their handles, which free
		// holds; the frames are only views of them.
		loan = message.NewLoan(frames[1:], mask>>1, func([][]byte) { free() }) // bit 0 was the identity
	}
	return frames[0], frames[1:], loan, nil
}

// stopWait bounds how long Close waits for the writers to stop, and then
// (beyond the linger time) for ZeroMQ's context to terminate.
const stopWait = 10 * time.Second

// stuckWriters names the nodes whose writers still run (the goroutines'
// stacks, which Close logs with it, say where).
func (t *Transport) stuckWriters() string {
	t.peersMu.Lock()
	defer t.peersMu.Unlock()
	var ws []string
	for p := range t.live {
		ws = append(ws, fmt.Sprintf("node %d", p.id))
	}
	slices.Sort(ws)
	return strings.Join(ws, ", ")
}

// errWritersStuck is Close's error when a writer did not stop in time.
var errWritersStuck = errors.New("van: a connection's writer did not stop in time")

// errTermStuck is Close's error when ZeroMQ's context did not terminate in
// time.
var errTermStuck = errors.New("van: ZeroMQ's context did not terminate in time")

// within reports whether ch is closed within d.
func within(ch <-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
		return false
	}
}

// logStuck logs msg as an error with every goroutine's stack: should Close
// ever find something stuck, the stacks say where.
func (t *Transport) logStuck(waited time.Duration, what, msg string) {
	stacks := make([]byte, 1<<20)
	stacks = stacks[:runtime.Stack(stacks, true)]
	t.opts.Log.Error().Dur("waited", waited).Str("stuck", what).Str("goroutines", string(stacks)).Msg(msg)
}

// Close implements van.Transport. Every writer closes its socket at once
// (a writer waiting for room notices within pollEvery); terminating the
// context then waits up to the linger time for unsent messages to peers
// that are still reachable, and ends the sockets' monitors. Close never
// waits longer than the linger time and twice stopWait: what is stuck
// beyond that is logged and returned as an error.
func (t *Transport) Close() error {
	t.peersMu.Lock()
	if t.closed {
		t.peersMu.Unlock()
		return nil
	}
	t.closed = true
	peers := t.peers
	t.peers = map[int]*peer{}
	t.publishLocked()
	t.peersMu.Unlock()
	for _, p := range peers {
		p.shut()
	}
	// The writers notice a shut within pollEvery; should one be stuck in
	// libzmq all the same, Close gives up on it (and on terminating the
	// context, which would wait for its socket) rather than hang Finalize.
	wait := t.stopWait
	if wait <= 0 {
		wait = stopWait
	}
	stopped := make(chan struct{})
	go func() {
		t.writers.Wait()
		close(stopped)
	}()
	if !within(stopped, wait) {
		stuck := t.stuckWriters()
		t.logStuck(wait, stuck, "van: a connection's writer did not stop; closing without releasing ZeroMQ's context")
		return fmt.Errorf("%w (%v): %s", errWritersStuck, wait, stuck)
	}
	if t.guard != nil {
		t.guard.unwatch()
	}
	if t.router != nil {
		t.reader.close()
		t.reader = nil
		t.router.Close()
		t.router = nil
		if path, ok := strings.CutPrefix(t.boundAt, "ipc://"); ok {
			os.Remove(path) // libzmq leaves the socket file behind
		}
	}
	if t.guard != nil {
		t.guard.close()
	}
	// Terminating waits for every socket to be closed, the monitors' too,
	// which their goroutines close once they have seen MONITOR_STOPPED or
	// ETERM: a goroutine held in the connection handler would hold it up.
	var err error
	termed := make(chan struct{})
	go func() {
		err = t.ctx.Term()
		close(termed)
	}()
	if !within(termed, t.opts.Linger+wait) {
		t.logStuck(t.opts.Linger+wait, "context", "van: ZeroMQ's context did not terminate (a socket monitor's goroutine is held in the connection handler?)")
		return fmt.Errorf("%w (%v)", errTermStuck, t.opts.Linger+wait)
	}
	return err
}
