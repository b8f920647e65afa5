package zmtptransport

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/internal/sendq"
)

// peer is the sending side for one node: a DEALER connection of its own.
type peer struct {
	t        *Transport
	id       int
	network  string
	addr     string
	identity string
	ctx      context.Context // cancelled by shut
	cancel   context.CancelFunc

	// wMu is the right to write to conn: the writer holds it while it
	// writes (which may wait), senders only try it.
	wMu     sync.Mutex
	conn    net.Conn        // the established connection, or nil; set under wMu
	raw     syscall.RawConn // conn's, for writes that never wait
	scratch []byte          // a Send's encoding buffer; under wMu
	// lastDirect is when a Send last wrote itself; under wMu.
	lastDirect time.Time

	cMu  sync.Mutex // guards cur
	cur  net.Conn   // the connection being made or used, for shut
	qMu  sync.Mutex // guards the fields below
	q    net.Buffers
	pack bool // q's last buffer is a pack that takes more small messages
	// partial: q[0] is the rest of a message partly written to conn; it
	// is dropped should conn break (the next connection starts afresh).
	partial bool
	n       int        // messages in q
	room    sendq.Room // senders wait on it while n is at the limit
	// urgent: q holds something that does not wait for Flush while p is
	// held (a large message, a PONG).
	urgent bool
	// holds release the lent frames q refers to (message.HoldLent), once
	// they are written or dropped.
	holds []func()
	spare []byte
	// kc is what the ROUTER at the other end of the current connection
	// keeps for it (keycache.go); kcQueued maps the key cache commands
	// queued in q (by their first byte) to what undoes them, should the
	// connection end before they are written.
	kc       sendCache
	kcQueued map[*byte]kcUndo
	// code: the ROUTER at the other end of the current connection
	// decodes coded key lists (keycodec.go); the commands of those queued
	// in q are in kcQueued too.
	code    bool
	held    bool
	closing bool
	kick    chan struct{} // wakes the writer (capacity 1)
}

func newPeer(t *Transport, id int, network, addr, identity string) *peer {
	ctx, cancel := context.WithCancel(context.Background())
	return &peer{
		t: t, id: id, network: network, addr: addr, identity: identity,
		ctx: ctx, cancel: cancel,
		kick: make(chan struct{}, 1),
	}
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

// shut makes p's writer send what is queued (for up to the linger time)
// and close the connection; senders waiting for room get
// van.ErrPeerClosed. It does not wait.
func (p *peer) shut() {
	if p == nil {
		return
	}
	p.qMu.Lock()
	p.closing = true
	p.room.Close()
	p.qMu.Unlock()
	p.cancel()
	p.cMu.Lock()
	if p.cur != nil {
		p.cur.SetDeadline(time.Now().Add(p.t.opts.Linger))
	}
	p.cMu.Unlock()
	p.Wake()
}

// send writes the message itself when p is idle, has not been written to
// for coalesceGap, and the kernel takes it; otherwise it queues it for the
// writer. With wait it waits for room until ctx is done; without, it
// returns van.ErrWouldBlock on a full queue.
func (p *peer) send(ctx context.Context, wait bool, frames [][]byte, shared bool, limit int) (int, error) {
	total := 0
	for _, f := range frames {
		total += len(f)
	}
	size := encodedLen(frames)
	small := size <= packMax
	if small && p.wMu.TryLock() {
		now := time.Now()
		quiet := now.Sub(p.lastDirect) >= coalesceGap
		if p.conn != nil && quiet {
			p.qMu.Lock()
			idle := len(p.q) == 0 && !p.closing && !p.held
			p.qMu.Unlock()
			if idle {
				p.lastDirect = now
				p.scratch = appendMessage(p.scratch[:0], frames)
				n := p.tryWrite(p.scratch)
				if n < len(p.scratch) {
					// The kernel's buffer is full (or the connection broke):
					// the writer sends the rest, before what others may
					// have queued meanwhile (it cannot write while wMu is
					// held).
					p.qMu.Lock()
					p.q = append(net.Buffers{append([]byte(nil), p.scratch[n:]...)}, p.q...)
					p.partial = n > 0
					p.n++
					p.qMu.Unlock()
					p.Wake()
				}
				if cap(p.scratch) > packCap {
					p.scratch = nil
				}
				p.wMu.Unlock()
				return total, nil
			}
		}
		p.wMu.Unlock()
	}
	p.qMu.Lock()
	full := func() bool { return p.n >= limit }
	err := p.room.Check(full)
	if wait {
		err = p.room.Wait(ctx, &p.qMu, full)
	}
	if err != nil {
		p.qMu.Unlock()
		return 0, err
	}
	if p.closing {
		p.qMu.Unlock()
		if p.t.view.Closed() {
			return 0, van.ErrClosed
		}
		return 0, van.ErrPeerClosed
	}
	if small {
		p.packLocked(frames, size)
	} else {
		p.queueLargeLocked(frames, shared)
	}
	p.n++
	wake := !p.held || p.n >= maxHeld || !small
	p.qMu.Unlock()
	if wake {
		p.Wake()
	}
	return total, nil
}

// packLocked encodes a small message onto the pack at q's end; qMu is held.
func (p *peer) packLocked(frames [][]byte, size int) {
	if last := len(p.q) - 1; p.pack && len(p.q[last])+size <= packCap {
		p.q[last] = appendMessage(p.q[last], frames)
		return
	}
	b := p.spare
	p.spare = nil
	if b == nil {
		b = make([]byte, 0, max(2*size, 1024))
	}
	p.q = append(p.q, appendMessage(b, frames))
	p.pack = true
}

// queueLargeLocked queues a large message: headers and small frames are
// copied, large frames too unless shared (then they are written from the
// caller's memory, held until written when it is memory lent to a
// handler), and the first frame always (van.Transport: the caller may
// reuse it once Send returns); qMu is held.
func (p *peer) queueLargeLocked(frames [][]byte, shared bool) {
	var cur []byte
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = flagMore
		}
		owned := false // f is the transport's own copy, which never changes
		if i == 1 && p.kc.limit > 0 && len(f) >= keyCacheMin {
			if plan := p.kc.plan(f); plan.op != kcNone {
				if len(cur) > 0 {
					p.q = append(p.q, cur)
					cur = nil
				}
				p.queueCacheLocked(plan, flags, len(f))
				if plan.op == kcRef {
					continue
				}
				// The kept copy goes out: the caller's frame is neither
				// copied twice nor held.
				f, owned = plan.data, true
			}
		}
		if i == 1 && p.code && shared && !owned && len(f) >= keyCodeMin {
			if len(cur) > 0 {
				p.q = append(p.q, cur)
				cur = nil
			}
			if p.queueCodedLocked(f, flags) {
				continue
			}
		}
		cur = appendHeader(cur, flags, len(f))
		if len(f) < zeroCopyMin {
			cur = append(cur, f...)
			continue
		}
		if owned {
			// The key cache's copy.
		} else if !shared || i == 0 {
			// Not shared, or the first frame (the meta), which the
			// caller may reuse once Send returns all the same.
			f = message.Clone(f)
		} else if drop, ok := message.HoldLent(f); ok {
			// A view of lent memory (a handler answering with its
			// request's keys): its loan stays held until written.
			p.holds = append(p.holds, drop)
		}
		p.q = append(p.q, cur, f)
		cur = nil
	}
	if len(cur) > 0 {
		p.q = append(p.q, cur)
	}
	p.pack, p.urgent = false, true
}

// kcUndo undoes a key cache command queued in q: a put is dropped, a
// reference or a coded list becomes the whole frame (hdr, then data, and
// the extra buffers the coded list took after those are emptied).
type kcUndo struct {
	hdr, data []byte
	extra     int // buffers after the first that the frame took in q
}

// queueCacheLocked queues the key cache command plan calls for, for a frame
// of size bytes sent with flags: an X-KCPUT (the frame follows), or an
// X-KCREF and an empty buffer in the frame's place; qMu is held.
func (p *peer) queueCacheLocked(plan kcPlan, flags byte, size int) {
	var cmd []byte
	undo := kcUndo{}
	if plan.op == kcPut {
		cmd = putCommand(plan.slot, plan.gen, plan.drop)
		p.q = append(p.q, cmd)
		p.t.kcPuts.Add(1)
	} else {
		cmd = refCommand(plan.slot, plan.gen, size, flags&flagMore == 0)
		undo = kcUndo{hdr: appendHeader(nil, flags, size), data: plan.data}
		p.q = append(p.q, cmd, nil)
		p.t.kcRefs.Add(1)
	}
	if p.kcQueued == nil {
		p.kcQueued = map[*byte]kcUndo{}
	}
	p.kcQueued[&cmd[0]] = undo
}

// queueCodedLocked queues the key list f, sent with flags, coded, and
// reports whether it did: not when f is not a sorted list of keys that
// shrinks enough. f is the caller's (shared), held until written: should
// the connection end first, it goes whole on the next one (kcQueued).
// qMu is held.
func (p *peer) queueCodedLocked(f []byte, flags byte) bool {
	keys, ok := keyView(f)
	if !ok {
		return false
	}
	size, ok := codeEstimate(keys)
	if !ok {
		return false
	}
	coded, bufs, ok := p.t.encode(keys, size)
	if !ok {
		return false
	}
	cmd := appendHeader(codeCommand(len(f)), flags, len(coded[0])+len(coded[1]))
	p.q = append(p.q, cmd, coded[0], coded[1])
	p.holds = append(p.holds, func() {
		for _, b := range bufs {
			p.t.pool.put(b, false)
		}
	})
	if drop, ok := message.HoldLent(f); ok {
		p.holds = append(p.holds, drop)
	}
	if p.kcQueued == nil {
		p.kcQueued = map[*byte]kcUndo{}
	}
	p.kcQueued[&cmd[0]] = kcUndo{hdr: appendHeader(nil, flags, len(f)), data: f, extra: 1}
	p.t.coded.Add(1)
	return true
}

// forgetCacheLocked forgets what the last connection's ROUTER kept: the
// key cache commands still queued are undone, and nothing is cached until
// the next connection's offer; qMu is held.
func (p *peer) forgetCacheLocked() {
	if len(p.kcQueued) > 0 {
		for i, b := range p.q {
			if len(b) == 0 {
				continue
			}
			u, ok := p.kcQueued[&b[0]]
			if !ok {
				continue
			}
			p.q[i] = nil
			if u.hdr != nil {
				p.q[i], p.q[i+1] = u.hdr, u.data
				clear(p.q[i+2 : i+2+u.extra])
			}
		}
	}
	p.kcQueued = nil
	p.kc.reset()
	p.code = false
}

// queueRaw queues bytes that are not a message (a PING, a PONG). They are
// copied: a buffer written alone may be kept for the next pack (recycle),
// and b may be sent again (the connection's PING).
func (p *peer) queueRaw(b []byte) {
	b = append([]byte(nil), b...)
	p.qMu.Lock()
	p.q = append(p.q, b)
	p.pack, p.urgent = false, true
	p.qMu.Unlock()
	p.Wake()
}

// takeLocked takes what q holds, for writing, and the releases of the lent
// memory it refers to; qMu is held.
func (p *peer) takeLocked() (net.Buffers, []func()) {
	q, holds := p.q, p.holds
	p.q, p.holds, p.pack, p.partial, p.urgent = nil, nil, false, false, false
	p.kcQueued = nil // written from now on, or lost with the connection
	if p.n > 0 {
		p.room.Freed()
	}
	p.n = 0
	return q, holds
}

// release gives back the lent memory of what was written or dropped.
func release(holds []func()) {
	for _, r := range holds {
		r()
	}
}

// tryWrite writes b to conn with one system call that does not wait, and
// returns how much the kernel took; wMu is held.
func (p *peer) tryWrite(b []byte) int {
	n := 0
	p.raw.Write(func(fd uintptr) bool {
		for {
			m, err := syscall.Write(int(fd), b)
			if err == syscall.EINTR {
				continue
			}
			n = max(m, 0)
			return true
		}
	})
	return n
}

// drain writes what q holds on the calling goroutine when it is one buffer
// and the kernel takes it all; it reports false when something is left
// for the writer.
func (p *peer) drain() bool {
	if !p.wMu.TryLock() {
		return false
	}
	defer p.wMu.Unlock()
	if p.conn == nil {
		return false
	}
	p.qMu.Lock()
	if len(p.q) != 1 || len(p.holds) > 0 || p.closing {
		p.qMu.Unlock()
		return false
	}
	q, _ := p.takeLocked()
	p.qMu.Unlock()
	n := p.tryWrite(q[0])
	if n == len(q[0]) {
		p.recycle(q[0])
		return true
	}
	p.qMu.Lock()
	p.q = append(net.Buffers{q[0][n:]}, p.q...)
	p.partial = n > 0
	p.pack = len(p.q) > 1 && p.pack
	p.n++ // at least the message partly written is left
	p.qMu.Unlock()
	return false
}

// recycle keeps a buffer written alone for the next pack. Every buffer q
// holds alone is the peer's own (a pack, a large message's copy, a raw
// command's copy): the caller's frames, sent without a copy, always follow
// a header buffer.
func (p *peer) recycle(b []byte) {
	if cap(b) > packCap {
		return
	}
	p.qMu.Lock()
	if p.spare == nil {
		p.spare = b[:0]
	}
	p.qMu.Unlock()
}

// run is p's writer: it connects, writes what is queued, and reconnects
// when the connection breaks, until p shuts.
func (p *peer) run() {
	defer p.t.wg.Done()
	defer func() { // what was never written holds no lent memory
		p.qMu.Lock()
		_, holds := p.takeLocked()
		p.qMu.Unlock()
		release(holds)
	}()
	for {
		c, dead, ok := p.dial()
		if !ok {
			return
		}
		p.report(true)
		ok = p.serve(c, dead)
		p.wMu.Lock()
		p.conn, p.raw = nil, nil
		p.wMu.Unlock()
		c.Close()
		<-dead // the connection's reader has ended
		if !ok {
			return
		}
		p.report(false)
		// What was partly written is lost with the connection.
		p.qMu.Lock()
		if p.partial {
			p.q = p.q[1:]
			p.partial = false
			p.n = max(p.n-1, 0)
		}
		p.forgetCacheLocked()
		p.qMu.Unlock()
	}
}

// report tells the connection handler that p's connection went up or down.
func (p *peer) report(up bool) {
	f := p.t.onConnection.Load()
	if f == nil || !p.t.view.Current(p.id, p) || p.ctx.Err() != nil {
		return
	}
	(*f)(p.id, up)
}

// dial connects and makes the handshake, trying every ReconnectInterval
// until it succeeds or p shuts (ok false). dead is closed when the
// connection's reader ends.
func (p *peer) dial() (c net.Conn, dead chan struct{}, ok bool) {
	t := p.t
	var wait *time.Timer
	warned := false
	for first := true; ; first = false {
		if !first {
			if wait == nil {
				wait = time.NewTimer(t.opts.ReconnectInterval)
			} else {
				wait.Reset(t.opts.ReconnectInterval)
			}
			select {
			case <-wait.C:
			case <-p.ctx.Done():
				return nil, nil, false
			}
		}
		if p.ctx.Err() != nil {
			return nil, nil, false
		}
		d := net.Dialer{Timeout: t.opts.HandshakeTimeout}
		c, err := d.DialContext(p.ctx, p.network, p.addr)
		if err != nil {
			continue
		}
		p.cMu.Lock()
		p.cur = c
		p.cMu.Unlock()
		if p.ctx.Err() != nil { // shut before cur was set
			c.Close()
			return nil, nil, false
		}
		t.tune(c)
		br := bufio.NewReaderSize(c, 4096)
		if _, err := t.handshake(c, br, "DEALER", p.identity, nil); err != nil {
			c.Close()
			if errors.Is(err, errRefused) {
				t.refused.Add(1)
			}
			// Once a warning (a peer that is no ZeroMQ ROUTER, or wants
			// CURVE), then quietly, every ReconnectInterval.
			ev := t.opts.Log.Debug()
			if !warned && p.ctx.Err() == nil {
				ev, warned = t.opts.Log.Warn(), true
			}
			ev.Err(err).Int("node", p.id).Str("addr", p.addr).Msg("zmtp: handshake failed, trying again")
			continue
		}
		raw, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			c.Close()
			return nil, nil, false
		}
		dead = make(chan struct{})
		pingMsg := ping(t.opts.LinkTimeout)
		lk := t.watch(c, func() { p.queueRaw(pingMsg) })
		t.wg.Add(1)
		go p.listen(br, lk, dead)
		p.wMu.Lock()
		p.conn, p.raw = c, raw
		p.wMu.Unlock()
		return c, dead, true
	}
}

// listen reads what the peer's ROUTER sends on p's connection (nothing but
// PINGs, which it answers) until the connection ends, then closes dead
// and wakes the writer.
func (p *peer) listen(br *bufio.Reader, lk *link, dead chan struct{}) {
	defer p.t.wg.Done()
	defer p.Wake()
	defer close(dead)
	defer p.t.unwatch(lk)
	fr := &frameReader{r: br, maxFrames: p.t.opts.MaxFrames, maxBytes: 1 << 16}
	for {
		_, cmd, err := fr.readMessage()
		lk.touch()
		var o *oversized
		if err != nil && !errors.As(err, &o) {
			return
		}
		for _, c := range append(fr.inside, cmd) {
			if reply := answer(c); reply != nil {
				p.queueRaw(reply)
			}
			name, body, err := parseCommand(c)
			switch {
			case err != nil:
			case name == cmdCodeOK && p.t.keyCode():
				p.qMu.Lock()
				p.code = true
				p.qMu.Unlock()
			case name == cmdOffer && p.t.opts.KeyCacheBytes > 0:
				p.qMu.Lock()
				err := p.kc.offer(body, p.t.opts.KeyCacheBytes)
				p.qMu.Unlock()
				if err != nil {
					p.t.netLog.Warn().Err(err).Int("node", p.id).Msg("zmtp: key cache offer refused")
				}
			}
		}
	}
}

// serve writes what is queued to c until c breaks (true: reconnect) or p
// shuts (false, once what was queued is written or the linger time is
// up).
func (p *peer) serve(c net.Conn, dead chan struct{}) bool {
	for {
		for {
			p.wMu.Lock()
			p.qMu.Lock()
			closing := p.closing
			var q net.Buffers
			var holds []func()
			if !p.held || p.urgent || p.n >= maxHeld || closing {
				q, holds = p.takeLocked() // else Flush sends it
			}
			p.qMu.Unlock()
			if len(q) == 0 {
				p.wMu.Unlock()
				if closing {
					return false
				}
				break
			}
			var first []byte
			if len(q) == 1 {
				first = q[0]
			}
			_, err := q.WriteTo(c)
			p.wMu.Unlock()
			release(holds)
			if err != nil {
				if closing || p.ctx.Err() != nil {
					return false
				}
				p.t.opts.Log.Debug().Err(err).Int("node", p.id).Msg("zmtp: connection broke, reconnecting")
				return true
			}
			if first != nil {
				p.recycle(first)
			}
		}
		select {
		case <-p.kick:
		case <-dead:
			if p.ctx.Err() != nil {
				return false
			}
			return true
		}
	}
}
