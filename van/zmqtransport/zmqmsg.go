package zmqtransport

/*
#cgo !windows pkg-config: libzmq
#include <stdlib.h>
#include <string.h>
#include "zmqmsg.h"
*/
import "C"

import (
	"fmt"
	"reflect"
	"runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	zmq "github.com/pebbe/zmq4"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/internal/quarantine"
)

// pebbe/zmq4 copies every frame between Go and C memory, and zeroes each
// received buffer before copying into it. For bulk requests (megabytes of
// keys and values) those copies and the pages they touch cost about as much
// as moving the bytes over loopback, so the transport moves large frames
// through libzmq's message API itself (zmqmsg.c), on the same sockets:
//
//   - a frame of at least zeroCopyMin bytes that the caller shares is sent
//     without a copy: it is pinned (runtime.Pinner, so the collector keeps it
//     in place even if Go drops every reference) and handed to libzmq, which
//     calls back to unpin it once it has written the bytes out;
//   - frames are received with one cgo call each and copied once into Go
//     memory (not zeroed first, for small frames; in preemptible chunks, for
//     large ones).
//
// The libzmq handle of a pebbe/zmq4 socket is not exported; rawSocket reads
// it by reflection and checks it against the socket's type, and the
// transport falls back to pebbe/zmq4's own calls when that fails.

// zeroCopyMin is the smallest frame sent without a copy: below it copying
// is cheaper than pinning the frame and being called back from a libzmq
// thread (BenchmarkZMQSendRecv: even at 512 KiB, copying ahead at 64 KiB,
// zero-copy 1.3x faster at 1 MiB and 1.6x at 16 MiB).
const zeroCopyMin = 512 << 10

// pinnedFrames counts frames handed to libzmq without a copy and not yet
// released.
var pinnedFrames atomic.Int64

// rawSocket returns libzmq's handle of s, or nil when it cannot be had.
func rawSocket(s *zmq.Socket) unsafe.Pointer {
	v := reflect.ValueOf(s).Elem().FieldByName("soc")
	if !v.IsValid() || v.Kind() != reflect.UnsafePointer {
		return nil
	}
	h := v.UnsafePointer()
	if h == nil {
		return nil
	}
	want, err := s.GetType()
	if err != nil || int(C.pslite_socket_type(h)) != int(want) {
		return nil
	}
	return h
}

// sendFrame sends one frame of a message on s (whose libzmq handle is h, or
// nil). A shared frame of at least zeroCopyMin bytes goes without a copy;
// the caller must not change it from now on.
func sendFrame(s *zmq.Socket, h unsafe.Pointer, f []byte, flags zmq.Flag, shared bool) (int, error) {
	if !shared || h == nil || len(f) < zeroCopyMin {
		return s.SendBytes(f, flags)
	}
	n := C.pslite_send_frame(h, unsafe.Pointer(unsafe.SliceData(f)), C.size_t(len(f)), C.int(flags), pin(f))
	if n < 0 { // libzmq has released the frame already
		return 0, zmq.Errno(-n)
	}
	return int(n), nil
}

// pin prepares frame f for a send without a copy: it stays pinned (or,
// when it is memory lent to a handler, held: message.HoldLent) until libzmq
// releases it (pslite_release_frame). It returns the hint to pass with it.
func pin(f []byte) C.uintptr_t {
	pinnedFrames.Add(1)
	if release, ok := message.HoldLent(f); ok {
		return C.uintptr_t(cgo.NewHandle(release))
	}
	p := new(runtime.Pinner)
	p.Pin(unsafe.SliceData(f))
	return C.uintptr_t(cgo.NewHandle(p))
}

// keepRecvMemory sets the C allocator up for Options.KeepRecvMemory; it
// reports false where that is not supported.
func keepRecvMemory() bool { return C.pslite_keep_memory() != 0 }

// setProcess has socket s present proc as its X-Pslite-Process property on
// the connections it makes (see van.Incarnations).
func setProcess(s *zmq.Socket, proc string) error {
	prop := C.CString("X-Pslite-Process:" + proc)
	defer C.free(unsafe.Pointer(prop))
	if rc := C.pslite_set_metadata(rawSocket(s), prop, C.strlen(prop)); rc != 0 {
		return fmt.Errorf("van: setting the process property: %w", zmq.Errno(-rc))
	}
	return nil
}

// maxMsgFrames is the most frames sendMsg sends with one call.
const maxMsgFrames = 4

// sendMsg sends a message of 1 to maxMsgFrames frames on libzmq socket h
// with one cgo call; shared frames of at least zeroCopyMin bytes go
// without a copy. It returns the bytes sent, or the error and the index of
// the frame that failed.
func sendMsg(h unsafe.Pointer, frames [][]byte, flags zmq.Flag, shared bool) (int, int, error) {
	var data [maxMsgFrames]C.uintptr_t // (see pslite_send_msg)
	var size [maxMsgFrames]C.size_t
	var hint [maxMsgFrames]C.uintptr_t
	for i, f := range frames {
		data[i], size[i] = addr(f), C.size_t(len(f))
		if shared && i > 0 && len(f) >= zeroCopyMin { // the first frame is the caller's again once Send returns
			hint[i] = pin(f)
		}
	}
	rc := C.pslite_send_msg(h, C.int(len(frames)), C.int(flags),
		data[0], size[0], hint[0], data[1], size[1], hint[1],
		data[2], size[2], hint[2], data[3], size[3], hint[3])
	runtime.KeepAlive(frames)
	if rc < 0 {
		return 0, int(-rc % 8), zmq.Errno(-rc / 8)
	}
	return int(rc), 0, nil
}

// addr is the address of f's bytes, for a C function that takes it as an
// integer; the caller keeps f alive across the call.
func addr[T any](f []T) C.uintptr_t { return C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(f)))) }

// pslite_release_frame unpins a frame libzmq is done with. It runs on a
// libzmq thread (or, when a send fails, inside sendFrame's cgo call).
//
//export pslite_release_frame
func pslite_release_frame(h C.uintptr_t) {
	handle := cgo.Handle(h)
	switch v := handle.Value().(type) {
	case *runtime.Pinner:
		v.Unpin()
	case func():
		v() // a hold on lent memory
	}
	handle.Delete()
	pinnedFrames.Add(-1)
}

// frameReader receives whole messages from one socket, a batch of them
// with one cgo call: the first, then those that have arrived already (see
// pslite_recv_batch). It belongs to the socket's owner.
type frameReader struct {
	h         unsafe.Pointer
	r         *C.pslite_reader // C memory, reused for every batch
	maxFrames int
	maxBytes  int64
	// queued holds the messages of the last batch not returned yet, in
	// batch.
	queued []readMsg
	batch  [maxBatchMsgs]readMsg
	// drained is set when the last batch ended because no more messages
	// were waiting.
	drained bool
}

// readMsg is one received message of a batch.
type readMsg struct {
	frames  [][]byte // identity first
	count   int      // frames received (more than kept: too many)
	bytes   int64
	mask    uint64 // lent frames
	release func() // gives the lent frames back; nil when none
	proc    process
}

// process is the incarnation a message's connection presented (its
// X-Pslite-Process property; empty when none), held without allocating.
type process struct {
	b [C.PSLITE_PROC_LEN]byte
	n uint8
}

// is reports whether p is s.
func (p *process) is(s string) bool { return string(p.b[:p.n]) == s }

// maxBatchMsgs is the most messages received with one call.
const maxBatchMsgs = 32

// newFrameReader returns a reader for libzmq socket h, or nil when C
// memory is short.
func newFrameReader(h unsafe.Pointer, maxFrames int, maxBytes int64) *frameReader {
	r := C.pslite_reader_new(C.int(maxFrames+2), maxBatchMsgs) // the identity, and one more to see too many
	if r == nil {
		return nil
	}
	return &frameReader{h: h, r: r, maxFrames: maxFrames, maxBytes: maxBytes}
}

// recv returns the frames of the next message; its errors are
// pebbe/zmq4's (zmq.Errno), or van.ErrOversized for a message with more
// frames or bytes than the reader accepts, which it reads to its end
// without keeping it.
//
// With flags zmq.DONTWAIT it returns EAGAIN at once when no message waits.
//
// Small frames come packed in one C buffer and are copied into one Go
// allocation for the whole batch; the frames are slices of it, each capped
// at its own length.
//
// With lend, frames of at least zeroCopyMin bytes (of the first 64) are not
// copied but lent: views of libzmq's buffers, marked in mask, valid until
// release is called (nil when nothing was lent). With poison, release
// overwrites them first, so that whoever kept a view reads 0xDB bytes.
func (r *frameReader) recv(flags zmq.Flag, lend, poison bool) (frames [][]byte, mask uint64, release func(), proc process, err error) {
	if len(r.queued) == 0 && flags&zmq.DONTWAIT != 0 && r.drained {
		// Nothing waited when the last batch was read, a moment ago: do
		// not ask again (a call into libzmq that finds nothing costs a
		// system call), but let the next wait find it.
		r.drained = false
		return nil, 0, nil, process{}, zmq.Errno(syscall.EAGAIN)
	}
	if len(r.queued) == 0 {
		if err := r.read(flags, lend, poison); err != nil {
			return nil, 0, nil, process{}, err
		}
	}
	m := r.queued[0]
	r.queued[0] = readMsg{}
	r.queued = r.queued[1:]
	if m.count > r.maxFrames+1 || m.bytes > r.maxBytes { // +1: the identity
		var ident [][]byte
		if len(m.frames) > 0 {
			ident = m.frames[:1] // for the error
		}
		if m.release != nil {
			m.release()
		}
		return nil, 0, nil, process{}, oversized(ident, m.count-1, m.bytes)
	}
	return m.frames, m.mask, m.release, m.proc, nil
}

// read receives a batch into r.queued.
func (r *frameReader) read(flags zmq.Flag, lend, poison bool) error {
	n := int(C.pslite_recv_batch(r.h, r.r, C.int(flags)))
	if n < 0 {
		return zmq.Errno(-n)
	}
	c := r.r
	r.drained = c.drained != 0
	kept := int(c.count)
	sizes := unsafe.Slice(c.size, kept)
	packed := unsafe.Slice(c.packed, kept)
	var pack []byte
	if c.used > 0 {
		pack = C.GoBytes(unsafe.Pointer(c.pack), C.int(c.used)) // not zeroed first
	}
	all := make([][]byte, kept)
	first := unsafe.Slice(c.msg_first, n)
	keptOf := unsafe.Slice(c.msg_kept, n)
	counts := unsafe.Slice(c.msg_frames, n)
	bytes := unsafe.Slice(c.msg_bytes, n)
	procs := unsafe.Slice((*byte)(unsafe.Pointer(c.msg_proc)), n*C.PSLITE_PROC_LEN)
	r.queued = r.batch[:n]
	for k := range n {
		m := readMsg{count: int(counts[k]), bytes: int64(bytes[k])}
		p := procs[k*C.PSLITE_PROC_LEN : (k+1)*C.PSLITE_PROC_LEN]
		for int(m.proc.n) < len(p) && p[m.proc.n] != 0 {
			m.proc.b[m.proc.n] = p[m.proc.n]
			m.proc.n++
		}
		from, to := int(first[k]), int(first[k])+int(keptOf[k])
		oversize := m.count > r.maxFrames+1 || m.bytes > r.maxBytes
		var lent []*C.zmq_msg_t
		for i := from; i < to; i++ {
			size := int(sizes[i])
			if off := int(packed[i]); off >= 0 {
				all[i] = pack[off : off+size : off+size]
				continue
			}
			if oversize && i > from {
				continue // dropped: only its identity is wanted
			}
			if lend && size >= zeroCopyMin && i-from < 64 {
				if lm := C.pslite_reader_take(c, C.int(i)); lm != nil {
					lent = append(lent, lm)
					m.mask |= 1 << (i - from)
					all[i] = unsafe.Slice((*byte)(C.zmq_msg_data(lm)), size)
					continue
				}
			}
			all[i] = copyFrame(C.zmq_msg_data(&unsafe.Slice(c.msgs, kept)[i]), size)
			if size >= zeroCopyMin {
				// Give a large frame back now rather than when the next
				// batch replaces it.
				C.pslite_reader_release(c, C.int(i))
			}
		}
		m.frames = all[from:to:to]
		if oversize && k == n-1 { // (only a batch's last message holds frames open)
			// libzmq held the whole message (64 bytes a frame, even an
			// empty one): give what it freed back to the system.
			C.pslite_reader_release_all(c)
			C.pslite_release_memory()
		}
		if len(lent) > 0 {
			lentMessages.Add(1)
			var once sync.Once
			m.release = func() {
				once.Do(func() {
					for _, lm := range lent {
						if poison {
							quarantineMsg(lm)
						} else {
							C.pslite_msg_free(lm)
						}
					}
					lentMessages.Add(-1)
				})
			}
		}
		r.queued[k] = m
	}
	return nil
}

// lentMessages counts messages whose frames are lent and not given back.
var lentMessages atomic.Int64

// poisoned holds given-back frames overwritten with 0xDB (PoisonLent), so
// that a view kept past its release reads 0xDB bytes, not memory reused
// or unmapped, until newer ones push it out of the quarantine.
var poisoned struct {
	mu sync.Mutex
	q  quarantine.Q[*C.zmq_msg_t]
}

// quarantineMsg poisons m and quarantines it, freeing the messages that
// leave the quarantine.
func quarantineMsg(m *C.zmq_msg_t) {
	n := int(C.pslite_msg_poison(m))
	poisoned.mu.Lock()
	free := poisoned.q.Add(m, n)
	poisoned.mu.Unlock()
	for _, m := range free {
		C.pslite_msg_free(m)
	}
}

// checkSize returns van.ErrOversized when a received message (identity
// first) has more than maxFrames frames or maxBytes bytes.
func checkSize(frames [][]byte, maxFrames int, maxBytes int64) error {
	size := int64(0)
	for _, f := range frames {
		size += int64(len(f))
	}
	if len(frames) > maxFrames+1 || size > maxBytes {
		return oversized(frames, len(frames)-1, size)
	}
	return nil
}

// oversized describes a message dropped for its size; received holds its
// sender's identity, if known.
func oversized(received [][]byte, frames int, size int64) error {
	from := "a sender without identity"
	if len(received) > 0 && len(received[0]) > 0 {
		from = fmt.Sprintf("identity %q", received[0])
	}
	return fmt.Errorf("%w: %d frames, %d bytes from %s", van.ErrOversized, frames, size, from)
}

// oneCopyMax is the largest frame copied with one memmove.
const oneCopyMax = 256 << 10

// copyFrame copies n bytes of C memory into Go memory: a small frame in one
// go into memory that is not zeroed first, a large one with message.Clone
// (chunk by chunk, yielding between chunks, so that a collection never
// waits for one long copy into fresh pages). In a cold
// test_kv_app_benchmark (1e7 keys) chunking took the push from about 320 to
// 260 ms and the pull from about 720 to 630 ms (medians of 6 runs).
func copyFrame(p unsafe.Pointer, n int) []byte {
	if n <= oneCopyMax {
		return C.GoBytes(p, C.int(n))
	}
	return message.Clone(unsafe.Slice((*byte)(p), n))
}

// close frees the reader's C memory.
func (r *frameReader) close() {
	if r == nil {
		return
	}
	for _, m := range r.queued {
		if m.release != nil {
			m.release()
		}
	}
	r.queued = nil
	C.pslite_reader_free(r.r)
	r.r = nil
}
