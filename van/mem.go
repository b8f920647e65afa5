package van

import (
	"fmt"
	"sync"
	"time"
)

// MemNetwork is an in-memory network of transports, so that whole clusters
// run inside one test process without sockets. Messages are copied on send,
// as a real network would.
type MemNetwork struct {
	mu     sync.Mutex
	inbox  map[string]chan memMsg // by "host:port", created by a bind or a first send
	bound  map[string]bool
	nextID int
}

type memMsg struct {
	identity []byte
	frames   [][]byte
}

// NewMemNetwork returns an empty network.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{inbox: make(map[string]chan memMsg), bound: make(map[string]bool)}
}

// inboxLocked returns addr's inbox, creating it so that messages sent before
// the receiver binds wait for it, as they do with ZeroMQ.
func (n *MemNetwork) inboxLocked(addr string) chan memMsg {
	ch, ok := n.inbox[addr]
	if !ok {
		ch = make(chan memMsg, 4096)
		n.inbox[addr] = ch
	}
	return ch
}

// Transport returns a new transport attached to the network.
func (n *MemNetwork) Transport() Transport {
	return &memTransport{net: n, peers: make(map[int]memPeer)}
}

type memTransport struct {
	net   *MemNetwork
	addr  string
	inbox chan memMsg

	mu     sync.Mutex // guards peers and closed
	peers  map[int]memPeer
	closed bool
}

type memPeer struct {
	addr     string
	identity []byte
}

func (t *memTransport) Bind(host string, port, maxRetry int) (int, error) {
	t.net.mu.Lock()
	defer t.net.mu.Unlock()
	for i := 0; i <= maxRetry; i++ {
		if port <= 0 || i > 0 {
			t.net.nextID++
			port = 10000 + t.net.nextID
		}
		addr := fmt.Sprintf("%s:%d", host, port)
		if t.net.bound[addr] {
			continue
		}
		t.addr = addr
		t.inbox = t.net.inboxLocked(addr)
		t.net.bound[addr] = true
		return port, nil
	}
	return 0, fmt.Errorf("van: bind %s:%d: address in use", host, port)
}

func (t *memTransport) Connect(id int, host string, port int, identity string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	var ident []byte
	if identity != "" {
		ident = []byte(identity)
	} else {
		ident = []byte{0, 0x6b, 0x8b, 0x45, 0x67} // like ZeroMQ's generated identities
	}
	t.peers[id] = memPeer{addr: fmt.Sprintf("%s:%d", host, port), identity: ident}
	return nil
}

func (t *memTransport) Disconnect(id int) {
	t.mu.Lock()
	delete(t.peers, id)
	t.mu.Unlock()
}

func (t *memTransport) Send(id int, frames [][]byte, _ bool) (int, error) {
	return t.send(id, frames, true)
}

func (t *memTransport) TrySend(id int, frames [][]byte) (int, error) {
	return t.send(id, frames, false)
}

func (t *memTransport) send(id int, frames [][]byte, wait bool) (int, error) {
	t.mu.Lock()
	p, ok := t.peers[id]
	closed := t.closed
	t.mu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	if !ok {
		return 0, fmt.Errorf("%w %d", ErrNoPeer, id)
	}
	t.net.mu.Lock()
	inbox := t.net.inboxLocked(p.addr)
	t.net.mu.Unlock()
	cp := make([][]byte, len(frames))
	total := 0
	for i, f := range frames {
		cp[i] = append([]byte{}, f...)
		total += len(f)
	}
	m := memMsg{identity: p.identity, frames: cp}
	if !wait {
		select {
		case inbox <- m:
			return total, nil
		default:
			return 0, ErrWouldBlock
		}
	}
	select {
	case inbox <- m:
	case <-time.After(5 * time.Second):
		return 0, fmt.Errorf("van: in-memory send to %s blocked", p.addr)
	}
	return total, nil
}

func (t *memTransport) Recv() ([]byte, [][]byte, error) {
	if t.inbox == nil {
		return nil, nil, fmt.Errorf("van: not bound")
	}
	timer := time.NewTimer(100 * time.Millisecond)
	defer timer.Stop()
	select {
	case m := <-t.inbox:
		return m.identity, m.frames, nil
	case <-timer.C:
		return nil, nil, ErrRecvTimeout
	}
}

func (t *memTransport) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.net.mu.Lock()
	if t.addr != "" {
		delete(t.net.inbox, t.addr)
		delete(t.net.bound, t.addr)
	}
	t.net.mu.Unlock()
	return nil
}
