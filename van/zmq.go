package van

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	zmq "github.com/pebbe/zmq4"
	"github.com/rs/zerolog"
)

// ZMQOptions configures a ZMQTransport.
type ZMQOptions struct {
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
	// Curve, when set, encrypts and authenticates every connection with
	// the job's CURVE key pair.
	Curve *CurveKeys
	// Log receives the transport's own warnings (refused connections).
	Log zerolog.Logger
}

// ZMQTransport is the ZeroMQ transport of C++ ps-lite: one ROUTER socket
// receives from every peer and one DEALER socket per peer sends to it.
//
// The ROUTER belongs to the goroutine running the receive loop (Bind, Recv).
// Each DEALER is guarded by its own mutex, so sends to different peers run
// in parallel.
type ZMQTransport struct {
	opts ZMQOptions
	ctx  *zmq.Context

	router  *zmq.Socket  // owned by the receive loop
	reader  *frameReader // receives from router; nil: pebbe/zmq4's calls
	boundAt string       // the endpoint router is bound to

	peersMu sync.RWMutex // guards the peers map, not the sockets
	peers   map[int]*zmqPeer
	closed  bool

	guard *curveGuard // nil without CURVE

	onConnection atomic.Pointer[func(id int, up bool)]
}

// SetConnectionHandler makes the transport call f(id, false) when the
// connection to node id drops (its process died or closed) and f(id, true)
// when it is (re-)established, for peers connected from now on. f runs on a
// monitor goroutine.
func (t *ZMQTransport) SetConnectionHandler(f func(id int, up bool)) { t.onConnection.Store(&f) }

type zmqPeer struct {
	mu   sync.Mutex // guards sock
	sock *zmq.Socket
	h    unsafe.Pointer // libzmq's handle of sock, for zero-copy sends; may be nil
	mon  *socketMonitor // reports disconnects; nil without a handler
}

var _ Transport = (*ZMQTransport)(nil)

// NewZMQTransport creates a ZeroMQ context for one node.
func NewZMQTransport(opts ZMQOptions) (*ZMQTransport, error) {
	if opts.RecvTimeout <= 0 {
		opts.RecvTimeout = 200 * time.Millisecond
	}
	if opts.Linger <= 0 {
		opts.Linger = 500 * time.Millisecond
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
	t := &ZMQTransport{opts: opts, ctx: ctx, peers: make(map[int]*zmqPeer)}
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

// Refused returns how many connections CURVE authentication refused.
func (t *ZMQTransport) Refused() int64 {
	if t.guard == nil {
		return 0
	}
	return t.guard.refused.Load()
}

func (t *ZMQTransport) endpoint(host string, port int) string {
	if t.opts.Local {
		return fmt.Sprintf("ipc:///tmp/%d", port)
	}
	return fmt.Sprintf("tcp://%s:%d", host, port)
}

// Bind implements Transport.
func (t *ZMQTransport) Bind(host string, port, maxRetry int) (int, error) {
	if t.router != nil {
		return 0, errors.New("van: already bound")
	}
	sock, err := t.ctx.NewSocket(zmq.ROUTER)
	if err != nil {
		return 0, fmt.Errorf("van: create receiver socket: %w", err)
	}
	if err := sock.SetRcvtimeo(t.opts.RecvTimeout); err != nil {
		sock.Close()
		return 0, fmt.Errorf("van: receive timeout: %w", err)
	}
	sock.SetLinger(0)
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
			t.reader = newFrameReader(h)
		}
		return port, nil
	}
	sock.Close()
	return 0, fmt.Errorf("van: bind %s: %w", t.endpoint(host, port), lastErr)
}

// Connect implements Transport.
func (t *ZMQTransport) Connect(id int, host string, port int, identity string) error {
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
	if c := t.opts.Curve; c != nil {
		if err := errors.Join(sock.SetCurveServerkey(c.Public), sock.SetCurvePublickey(c.Public), sock.SetCurveSecretkey(c.Secret)); err != nil {
			sock.Close()
			return fmt.Errorf("van: CURVE client: %w", err)
		}
	}
	addr := t.endpoint(host, port)
	if err := sock.Connect(addr); err != nil {
		sock.Close()
		return fmt.Errorf("van: connect to %s: %w", addr, err)
	}
	p := &zmqPeer{sock: sock, h: rawSocket(sock)}
	if f := t.onConnection.Load(); f != nil {
		m, err := monitorSocket(t.ctx, sock, zmq.EVENT_CONNECTED|zmq.EVENT_DISCONNECTED, func(ev zmq.Event, _ string, _ int) {
			t.peersMu.RLock()
			current := t.peers[id] == p && !t.closed
			t.peersMu.RUnlock()
			if current {
				(*f)(id, ev == zmq.EVENT_CONNECTED)
			}
		})
		if err != nil {
			sock.Close()
			return err
		}
		p.mon = m
	}
	t.peersMu.Lock()
	if t.closed {
		t.peersMu.Unlock()
		p.close()
		return ErrClosed
	}
	old := t.peers[id]
	t.peers[id] = p
	t.peersMu.Unlock()
	old.close()
	return nil
}

func (p *zmqPeer) close() {
	if p == nil {
		return
	}
	p.mon.close()
	p.mu.Lock()
	if p.sock != nil {
		p.sock.Close()
		p.sock = nil
	}
	p.mu.Unlock()
}

// Disconnect implements Transport.
func (t *ZMQTransport) Disconnect(id int) {
	t.peersMu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.peersMu.Unlock()
	p.close()
}

// Send implements Transport. Shared frames of 512 KiB or more are sent
// without a copy.
func (t *ZMQTransport) Send(id int, frames [][]byte, shared bool) (int, error) {
	return t.send(id, frames, 0, shared)
}

// TrySend implements Transport.
func (t *ZMQTransport) TrySend(id int, frames [][]byte) (int, error) {
	return t.send(id, frames, zmq.DONTWAIT, false)
}

func (t *ZMQTransport) send(id int, frames [][]byte, flags zmq.Flag, shared bool) (int, error) {
	for {
		t.peersMu.RLock()
		p, ok := t.peers[id]
		closed := t.closed
		t.peersMu.RUnlock()
		if closed {
			return 0, ErrClosed
		}
		if !ok {
			return 0, fmt.Errorf("%w %d", ErrNoPeer, id)
		}
		p.mu.Lock()
		if p.sock == nil { // replaced by a reconnect meanwhile: look again
			p.mu.Unlock()
			continue
		}
		n, err := sendFrames(p.sock, p.h, frames, flags, shared)
		p.mu.Unlock()
		return n, err
	}
}

// sendFrames sends a multipart message on sock (libzmq handle h, or nil).
// With DONTWAIT, only the first frame can be refused (ZeroMQ then queues
// nothing); the rest of a message whose first frame was taken is always
// taken.
func sendFrames(sock *zmq.Socket, h unsafe.Pointer, frames [][]byte, flags zmq.Flag, shared bool) (int, error) {
	total := 0
	for i, f := range frames {
		flag := flags | zmq.SNDMORE
		if i == len(frames)-1 {
			flag = flags
		}
		n, err := sendFrame(sock, h, f, flag, shared)
		if err != nil {
			if i == 0 && errors.Is(err, zmq.Errno(syscall.EAGAIN)) {
				return 0, ErrWouldBlock
			}
			return total, fmt.Errorf("van: send frame %d/%d: %w", i, len(frames), err)
		}
		total += n
	}
	return total, nil
}

// Recv implements Transport.
func (t *ZMQTransport) Recv() ([]byte, [][]byte, error) {
	if t.router == nil {
		return nil, nil, errors.New("van: not bound")
	}
	var frames [][]byte
	var err error
	if t.reader != nil {
		frames, err = t.reader.recv()
	} else {
		frames, err = t.router.RecvMessageBytes(0)
	}
	if err != nil {
		if errors.Is(err, zmq.Errno(syscall.EAGAIN)) {
			return nil, nil, ErrRecvTimeout
		}
		if errors.Is(err, zmq.ETERM) {
			return nil, nil, ErrClosed
		}
		return nil, nil, fmt.Errorf("van: receive: %w", err)
	}
	if len(frames) == 0 {
		return nil, nil, ErrRecvTimeout
	}
	return frames[0], frames[1:], nil
}

// Close implements Transport. Closing waits up to the linger time for
// unsent messages to peers that are still reachable.
func (t *ZMQTransport) Close() error {
	t.peersMu.Lock()
	if t.closed {
		t.peersMu.Unlock()
		return nil
	}
	t.closed = true
	peers := t.peers
	t.peers = map[int]*zmqPeer{}
	t.peersMu.Unlock()
	for _, p := range peers {
		p.close()
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
	return t.ctx.Term()
}
