package zmqtransport

/*
#include "zmqmsg.h"
*/
import "C"

import (
	"errors"
	"runtime"
	"syscall"

	zmq "github.com/pebbe/zmq4"

	"github.com/gopslite/pslite/van"
)

// What waits to be sent to a peer is a queue of outMsg. Small messages
// (most of a parameter server's: a 1-key push, its response, a control
// message) are not queued one by one but packed: their frames are copied
// end to end into a sendPack, and the pack is handed to libzmq with one cgo
// call. Held peers (see Transport.Hold) queue everything this way, so a
// run of responses leaves the process with one call and, at libzmq's I/O
// thread, one system call.

// outMsg is a queued message, or a pack of small ones.
type outMsg struct {
	frames [][]byte
	shared bool
	pack   *sendPack // when set, frames is nil
}

// sendPack holds small messages one after the other.
type sendPack struct {
	buf   []byte
	sizes []uint32 // per frame, with packMore on all but a message's last
	msgs  int
	// sealed is set (under the peer's qMu) once the pack is being sent:
	// later messages go into a new pack behind it.
	sealed bool
	// sentFrames and sentBytes are how much of it was sent; used only
	// under the peer's sockMu.
	sentFrames int
	sentBytes  int
}

const (
	// packMore marks a frame followed by another of its message.
	packMore = 1 << 31
	// packMaxMsg is the largest message packed.
	packMaxMsg = 16 << 10
	// packMaxBytes bounds the bytes of one pack (it may take one message
	// beyond it).
	packMaxBytes = 256 << 10
)

// add appends the frames of one message.
func (pk *sendPack) add(frames [][]byte) {
	for i, f := range frames {
		size := uint32(len(f))
		if i < len(frames)-1 {
			size |= packMore
		}
		pk.buf = append(pk.buf, f...)
		pk.sizes = append(pk.sizes, size)
	}
	pk.msgs++
}

// reset empties pk for reuse.
func (pk *sendPack) reset() {
	pk.buf, pk.sizes = pk.buf[:0], pk.sizes[:0]
	pk.msgs, pk.sealed, pk.sentFrames, pk.sentBytes = 0, false, 0, 0
}

// packLocked returns the pack a small message of size bytes joins: the
// last one queued, if it is still open and has room, or a new one. qMu is
// held.
func (p *peer) packLocked(size int) *sendPack {
	if n := len(p.q); n > 0 {
		if pk := p.q[n-1].pack; pk != nil && !pk.sealed && len(pk.buf)+size <= packMaxBytes {
			return pk
		}
	}
	pk := p.spare
	if pk != nil {
		p.spare = nil
	} else {
		pk = new(sendPack)
	}
	p.q = append(p.q, outMsg{pack: pk})
	return pk
}

// sendHead sends the message or pack at the head of p's queue, without
// waiting; sockMu is held. It reports empty when there was nothing to send
// (or p is closing), and van.ErrWouldBlock when ZeroMQ's queue for the peer
// is full (what was not sent stays at the head).
func (t *Transport) sendHead(p *peer) (empty bool, err error) {
	p.qMu.Lock()
	if p.closing || len(p.q) == 0 {
		p.qMu.Unlock()
		return true, nil
	}
	m := p.q[0]
	if m.pack != nil {
		m.pack.sealed = true
	}
	p.qMu.Unlock()
	if m.pack != nil {
		err = t.sendPack(p, m.pack)
	} else {
		_, err = sendFrames(p.sock, p.h, m.frames, zmq.DONTWAIT, m.shared)
	}
	if errors.Is(err, van.ErrWouldBlock) {
		return false, err
	}
	if err != nil {
		t.opts.Log.Debug().Err(err).Int("to", p.id).Msg("send failed")
	}
	p.qMu.Lock()
	copy(p.q, p.q[1:])
	p.q[len(p.q)-1] = outMsg{}
	p.q = p.q[:len(p.q)-1]
	if m.pack != nil {
		p.n -= m.pack.msgs
		if cap(m.pack.buf) <= 4*packMaxBytes {
			m.pack.reset()
			p.spare = m.pack
		}
	} else {
		p.n--
	}
	p.room.Freed()
	p.qMu.Unlock()
	return false, nil
}

// sendPack sends what is left of pk; sockMu is held. It returns
// van.ErrWouldBlock when ZeroMQ refused a message for want of room, and
// another error when it refused one for another reason (the rest of the
// pack is then dropped with it).
func (t *Transport) sendPack(p *peer, pk *sendPack) error {
	sizes := pk.sizes[pk.sentFrames:]
	buf := pk.buf[pk.sentBytes:]
	if len(sizes) == 0 {
		return nil
	}
	var n int
	var errno syscall.Errno
	if p.h != nil {
		rc := int64(C.pslite_send_pack(p.h, addr(buf), addr(sizes), C.int(len(sizes)), C.int(zmq.DONTWAIT)))
		runtime.KeepAlive(buf)
		runtime.KeepAlive(sizes)
		n, errno = int(rc&0xffffffff), syscall.Errno(rc>>32)
	} else {
		n, errno = sendPackFrames(p.sock, buf, sizes)
	}
	for _, size := range sizes[:n] {
		pk.sentBytes += int(size &^ packMore)
	}
	pk.sentFrames += n
	switch {
	case errno == 0:
		return nil
	case errno == syscall.EAGAIN:
		return van.ErrWouldBlock
	default:
		return zmq.Errno(errno)
	}
}

// sendPackFrames is pslite_send_pack with pebbe/zmq4's calls, for a socket
// whose libzmq handle could not be had.
func sendPackFrames(sock *zmq.Socket, buf []byte, sizes []uint32) (int, syscall.Errno) {
	done := 0 // frames of whole messages sent
	for i, size := range sizes {
		n := int(size &^ packMore)
		flags := zmq.DONTWAIT
		if size&packMore != 0 && i < len(sizes)-1 {
			flags |= zmq.SNDMORE
		}
		if _, err := sock.SendBytes(buf[:n:n], flags); err != nil {
			var errno zmq.Errno
			if errors.As(err, &errno) {
				return done, syscall.Errno(errno)
			}
			return done, syscall.EIO
		}
		buf = buf[n:]
		if flags&zmq.SNDMORE == 0 {
			done = i + 1
		}
	}
	return done, 0
}
