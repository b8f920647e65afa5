package zmtptransport

import (
	"runtime/debug"
	"sync"
	"time"

	"github.com/gopslite/pslite/internal/hugemem"
	"github.com/gopslite/pslite/van/internal/quarantine"
)

// lendMin is the smallest frame received into a pooled buffer and lent
// (see Transport.RecvLent): below it a copy costs less than the
// bookkeeping.
const lendMin = 512 << 10

// bufPool keeps the buffers of large received frames once their handlers
// are done with them, for the next ones: a fresh buffer costs a page fault
// per 4 KiB, more than receiving the bytes into it (a new one asks for huge
// pages, see internal/hugemem). It keeps at most poolBuffers buffers and
// poolBytes bytes.
//
// Poisoned buffers (Options.PoisonLent) are never reused: they wait in a
// quarantine (van/internal/quarantine), oldest leaving first, so that a
// view kept past its release keeps reading 0xDB bytes instead of the next
// message received into the same memory.
//
// A buffer kept unused for poolIdle is let go, so that a node whose large
// messages have stopped (a job phase over, a peer gone) gives their memory
// back: a timer armed while the pool keeps anything trims it, and when that
// frees at least returnBytes the memory is handed back to the system at
// once rather than over the runtime's next minutes.
type bufPool struct {
	mu         sync.Mutex
	free       [][]byte
	since      []time.Time // when each of free was put
	bytes      int
	quarantine quarantine.Q[[]byte]
	timer      *time.Timer // armed while free holds buffers
	closed     bool
}

// poolBuffers is many, poolBytes the bound that matters: every large
// message in flight at once takes a buffer per large frame, and a server
// with replicas holds a request's frames until its forward is written, and
// receives forwards beside requests. With 8, sixteen pushes of a 1e7-key
// job in flight (psbench -pieces=16, PS_REPLICAS=1) got most of their
// buffers fresh and took 2.5x as long (docs/REPLICATION.md).
const (
	poolBuffers = 64
	poolBytes   = 1 << 30
	poolIdle    = 30 * time.Second
	returnBytes = 64 << 20
)

// get returns a buffer of n bytes: a kept one at most twice as large as
// needed, or a new one.
func (p *bufPool) get(n int) []byte {
	if b := p.kept(n); b != nil {
		return b
	}
	b := make([]byte, n)
	hugemem.Advise(b)
	return b
}

// kept returns a kept buffer of n bytes, at most twice as large as needed,
// or nil.
func (p *bufPool) kept(n int) []byte {
	p.mu.Lock()
	best := -1
	for i, b := range p.free {
		if cap(b) >= n && cap(b) <= 2*n && (best < 0 || cap(b) < cap(p.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := p.free[best]
		p.removeLocked(best)
		p.mu.Unlock()
		return b[:n]
	}
	p.mu.Unlock()
	return nil
}

// put keeps b for a later get, if there is room; poison overwrites it
// and quarantines it instead (Options.PoisonLent).
func (p *bufPool) put(b []byte, poison bool) {
	if poison {
		b = b[:cap(b)]
		for i := range b {
			b[i] = 0xDB
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.quarantine.Add(b, len(b)) // what leaves it is the collector's
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.free) >= poolBuffers || p.bytes+cap(b) > poolBytes {
		return
	}
	p.free = append(p.free, b[:0])
	p.since = append(p.since, time.Now())
	p.bytes += cap(b)
	if p.timer == nil {
		p.timer = time.AfterFunc(poolIdle, p.trimIdle)
	}
}

// removeLocked drops free[i] from the pool.
func (p *bufPool) removeLocked(i int) {
	last := len(p.free) - 1
	p.bytes -= cap(p.free[i])
	p.free[i], p.since[i] = p.free[last], p.since[last]
	p.free[last] = nil
	p.free, p.since = p.free[:last], p.since[:last]
}

// trim lets go of the buffers kept unused since before idleSince and
// returns the bytes let go.
func (p *bufPool) trim(idleSince time.Time) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	freed := 0
	for i := len(p.free) - 1; i >= 0; i-- {
		if p.since[i].Before(idleSince) {
			freed += cap(p.free[i])
			p.removeLocked(i)
		}
	}
	return freed
}

// trimIdle runs on the pool's timer: it trims the buffers idle for
// poolIdle, and arms the timer again while some are kept.
func (p *bufPool) trimIdle() {
	if p.trim(time.Now().Add(-poolIdle)) >= returnBytes {
		debug.FreeOSMemory()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) > 0 && !p.closed {
		p.timer.Reset(poolIdle / 2)
	} else {
		p.timer = nil
	}
}

// close lets go of every kept buffer and stops the timer.
func (p *bufPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	for len(p.free) > 0 {
		p.removeLocked(len(p.free) - 1)
	}
}
