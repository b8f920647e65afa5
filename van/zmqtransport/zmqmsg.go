package zmqtransport

/*
#cgo !windows pkg-config: libzmq
#include <stdlib.h>
#include "zmqmsg.h"
*/
import "C"

import (
	"fmt"
	"reflect"
	"runtime"
	"runtime/cgo"
	"sync/atomic"
	"unsafe"

	zmq "github.com/pebbe/zmq4"

	"github.com/gopslite/pslite/van"
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
	data := unsafe.Pointer(unsafe.SliceData(f))
	p := new(runtime.Pinner)
	p.Pin(data)
	pinnedFrames.Add(1)
	n := C.pslite_send_frame(h, data, C.size_t(len(f)), C.int(flags), C.uintptr_t(cgo.NewHandle(p)))
	if n < 0 { // libzmq has released the frame already
		return 0, zmq.Errno(-n)
	}
	return int(n), nil
}

// pslite_release_frame unpins a frame libzmq is done with. It runs on a
// libzmq thread (or, when a send fails, inside sendFrame's cgo call).
//
//export pslite_release_frame
func pslite_release_frame(h C.uintptr_t) {
	handle := cgo.Handle(h)
	handle.Value().(*runtime.Pinner).Unpin()
	handle.Delete()
	pinnedFrames.Add(-1)
}

// frameReader receives whole messages from one socket. It belongs to the
// socket's owner.
type frameReader struct {
	h         unsafe.Pointer
	f         *C.pslite_frame // C memory, reused for every frame
	maxFrames int
	maxBytes  int64
}

func newFrameReader(h unsafe.Pointer, maxFrames int, maxBytes int64) *frameReader {
	f := (*C.pslite_frame)(C.malloc(C.sizeof_pslite_frame))
	C.zmq_msg_init(&f.msg)
	return &frameReader{h: h, f: f, maxFrames: maxFrames, maxBytes: maxBytes}
}

// recv returns the frames of the next message; its errors are
// pebbe/zmq4's (zmq.Errno), or van.ErrOversized for a message with more
// frames or bytes than the reader accepts, which it reads to its end
// without keeping it.
//
// With flags zmq.DONTWAIT it returns EAGAIN at once when no message waits;
// the frames after the first are always there (ZeroMQ delivers whole
// messages).
func (r *frameReader) recv(flags zmq.Flag) ([][]byte, error) {
	frames := make([][]byte, 0, 4) // identity, meta, keys, values: most messages
	count, size := 0, int64(0)
	for {
		n := C.pslite_recv_frame(r.h, r.f, C.int(flags))
		flags = 0
		if n < 0 {
			return nil, zmq.Errno(-n)
		}
		count++
		size += int64(n)
		if count > r.maxFrames+1 || size > r.maxBytes { // +1: the identity
			frames = frames[:min(len(frames), 1)] // keep the identity, for the error
			if r.f.more == 0 {
				// libzmq held the whole message (64 bytes a frame, even an
				// empty one): give what it freed back to the system.
				C.zmq_msg_close(&r.f.msg)
				C.zmq_msg_init(&r.f.msg)
				C.pslite_release_memory()
				return nil, oversized(frames, count-1, size)
			}
			continue
		}
		frames = append(frames, copyFrame(r.f.data, int(n)))
		if n >= zeroCopyMin {
			// Give a large frame back now rather than when the next
			// message replaces it.
			C.zmq_msg_close(&r.f.msg)
			C.zmq_msg_init(&r.f.msg)
		}
		if r.f.more == 0 {
			return frames, nil
		}
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

// copyChunk bounds each copy of a large frame. A copy is one memmove, which
// cannot be preempted: a collection that starts meanwhile spins, signalling
// the thread again and again, until it ends, and a memmove into fresh pages
// of a large frame takes milliseconds (page faults). The runtime clears
// memory in chunks of the same size for the same reason.
const copyChunk = 256 << 10

// copyFrame copies n bytes of C memory into Go memory. Small frames are
// copied in one go into memory that is not zeroed first; large ones chunk by
// chunk into a slice from make (which clears only recycled memory, itself
// in chunks). In a cold test_kv_app_benchmark (1e7 keys) this took the push
// from about 320 to 260 ms and the pull from about 720 to 630 ms (medians
// of 6 runs).
func copyFrame(p unsafe.Pointer, n int) []byte {
	if n <= copyChunk {
		return C.GoBytes(p, C.int(n))
	}
	src := unsafe.Slice((*byte)(p), n)
	b := make([]byte, n)
	for off := 0; off < n; off += copyChunk {
		copy(b[off:], src[off:min(off+copyChunk, n)])
	}
	return b
}

// close frees the reader's C memory.
func (r *frameReader) close() {
	if r == nil {
		return
	}
	C.zmq_msg_close(&r.f.msg)
	C.free(unsafe.Pointer(r.f))
	r.f = nil
}
