package zmtptransport

import (
	"sync"

	"github.com/gopslite/pslite/van/internal/quarantine"
)

// lendMin is the smallest frame received into a pooled buffer and lent
// (see Transport.RecvLent): below it a copy costs less than the
// bookkeeping.
const lendMin = 512 << 10

// bufPool keeps the buffers of large received frames once their handlers
// are done with them, for the next ones: a fresh buffer costs a page fault
// per 4 KiB, more than receiving the bytes into it (a new one asks for huge
// pages, see adviseHuge). It keeps at most poolBuffers buffers and
// poolBytes bytes.
//
// Poisoned buffers (Options.PoisonLent) are never reused: they wait in a
// quarantine (van/internal/quarantine), oldest leaving first, so that a
// view kept past its release keeps reading 0xDB bytes instead of the next
// message received into the same memory.
type bufPool struct {
	mu         sync.Mutex
	free       [][]byte
	bytes      int
	quarantine quarantine.Q[[]byte]
}

const (
	poolBuffers = 8
	poolBytes   = 1 << 30
)

// get returns a buffer of n bytes: a kept one at most twice as large as
// needed, or a new one.
func (p *bufPool) get(n int) []byte {
	if b := p.kept(n); b != nil {
		return b
	}
	b := make([]byte, n)
	adviseHuge(b)
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
		last := len(p.free) - 1
		p.free[best] = p.free[last]
		p.free[last] = nil
		p.free = p.free[:last]
		p.bytes -= cap(b)
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
	if len(p.free) >= poolBuffers || p.bytes+cap(b) > poolBytes {
		return
	}
	p.free = append(p.free, b[:0])
	p.bytes += cap(b)
}
