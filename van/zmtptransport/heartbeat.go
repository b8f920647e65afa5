package zmtptransport

import (
	"encoding/binary"
	"net"
	"sync/atomic"
	"time"
)

// link is a connection the heartbeat watches (Options.LinkTimeout): it is
// sent a PING every LinkTimeout/12 and dropped when its peer has sent
// nothing, not even the PONG, for LinkTimeout. libzmq answers PINGs
// whatever its own heartbeat options, so this holds against C++ nodes too.
type link struct {
	c     net.Conn
	heard atomic.Int64 // when the peer last sent anything (UnixNano)
	ping  func()       // sends c a PING; may wait (bounded) on a full socket
	busy  atomic.Bool  // a ping is being sent
}

// touch records that the peer sent something; l may be nil (no heartbeat).
func (l *link) touch() {
	if l != nil {
		l.heard.Store(time.Now().UnixNano())
	}
}

// ping encodes a PING whose TTL tells the peer to drop the connection when
// it hears nothing for ttl (ZMTP 3.1 counts it in tenths of a second).
func ping(ttl time.Duration) []byte {
	return command("PING", binary.BigEndian.AppendUint16(nil, uint16(min(ttl/(100*time.Millisecond), 0xFFFF))))
}

// watch makes the heartbeat watch c, or returns nil without LinkTimeout.
func (t *Transport) watch(c net.Conn, send func()) *link {
	if t.opts.LinkTimeout <= 0 {
		return nil
	}
	l := &link{c: c, ping: send}
	l.touch()
	t.mu.Lock()
	t.links[l] = struct{}{}
	t.mu.Unlock()
	return l
}

// unwatch stops watching l (which may be nil).
func (t *Transport) unwatch(l *link) {
	if l == nil {
		return
	}
	t.mu.Lock()
	delete(t.links, l)
	t.mu.Unlock()
}

// heartbeat pings every watched connection each LinkTimeout/12 and closes
// those that have been silent for LinkTimeout (their readers then end, and
// a peer's writer reconnects and reports the connection down).
func (t *Transport) heartbeat() {
	defer t.wg.Done()
	timeout := t.opts.LinkTimeout
	every := max(timeout/12, time.Millisecond)
	if t.opts.pingEvery > 0 {
		every = t.opts.pingEvery
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	var links []*link
	for {
		select {
		case <-t.stop:
			return
		case now := <-ticker.C:
			t.mu.Lock()
			for l := range t.links {
				links = append(links, l)
			}
			t.mu.Unlock()
			for i, l := range links {
				links[i] = nil
				if silent := time.Duration(now.UnixNano() - l.heard.Load()); silent > timeout {
					t.netLog.Warn().Dur("silent", silent).Str("peer", l.c.RemoteAddr().String()).Msg("zmtp: the peer sent nothing, not even a PONG, within PS_LINK_TIMEOUT; dropping the connection")
					l.c.Close()
					continue
				}
				// Each ping on a goroutine of its own, so that a peer that
				// does not read holds up no one else's.
				if l.busy.CompareAndSwap(false, true) {
					t.wg.Add(1)
					go func() {
						defer t.wg.Done()
						defer l.busy.Store(false)
						l.ping()
					}()
				}
			}
			links = links[:0]
		}
	}
}
