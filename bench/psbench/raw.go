package main

/*
#cgo !windows pkg-config: libzmq
#include <zmq.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

// rz_warm_malloc makes glibc keep freed memory for reuse. libzmq allocates
// each large message it receives with malloc, on its I/O thread: glibc gives
// a block that large a mapping of its own and unmaps it when the message is
// released (a thread's arena cannot hold it, whatever the mmap threshold),
// so every large message pays a page fault per 4 KiB. With one arena (the
// main one, grown by brk), no mappings of its own and no trimming below 1
// GiB, freed blocks stay in the heap for the next message. Returns 1 when
// done, 0 elsewhere than glibc.
static int rz_warm_malloc(void) {
#ifdef __GLIBC__
	return mallopt(M_ARENA_MAX, 1) && mallopt(M_MMAP_MAX, 0) && mallopt(M_TRIM_THRESHOLD, 1 << 30);
#else
	return 0;
#endif
}

// rz_keep is the free function of frames sent without a copy from buffers
// that stay allocated: nothing to do.
static void rz_keep(void *data, void *hint) { (void)data; (void)hint; }

// rz_recv receives one message from s. The first keep frames are copied
// into head (cap bytes in all, back to back) with their sizes in lens; the
// others are released unread. It returns the number of frames, or -1 with
// errno set. Calls a signal interrupts (EINTR: the Go runtime signals its
// threads) are made again, here and in rz_send.
static int rz_recv(void *s, char *head, size_t cap, size_t *lens, int keep) {
	int n = 0, more = 1;
	size_t used = 0;
	while (more) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		int rc;
		do {
			rc = zmq_msg_recv(&m, s, 0);
		} while (rc < 0 && errno == EINTR); // a signal to the Go runtime
		if (rc < 0) {
			int e = errno;
			zmq_msg_close(&m);
			errno = e;
			return -1;
		}
		if (n < keep) {
			size_t l = zmq_msg_size(&m);
			if (l > cap - used) l = cap - used;
			memcpy(head + used, zmq_msg_data(&m), l);
			lens[n] = l;
			used += l;
		}
		more = zmq_msg_more(&m);
		zmq_msg_close(&m);
		n++;
	}
	return n;
}

// rz_send sends one message on s: nhead frames copied from head (sizes in
// lens, back to back), then n frames of the given sizes from buf without a
// copy (buf must stay allocated). It returns 0, or -1 with errno set.
static int rz_send(void *s, const char *head, const size_t *lens, int nhead, char *buf, const size_t *sizes, int n) {
	size_t off = 0;
	for (int i = 0; i < nhead; i++) {
		int rc;
		do {
			rc = zmq_send(s, head + off, lens[i], i + 1 < nhead + n ? ZMQ_SNDMORE : 0);
		} while (rc < 0 && errno == EINTR);
		if (rc < 0) return -1;
		off += lens[i];
	}
	for (int i = 0; i < n; i++) {
		zmq_msg_t m;
		if (zmq_msg_init_data(&m, buf, sizes[i], rz_keep, NULL) != 0) return -1;
		int rc;
		do {
			rc = zmq_msg_send(&m, s, i + 1 < n ? ZMQ_SNDMORE : 0);
		} while (rc < 0 && errno == EINTR);
		if (rc < 0) {
			int e = errno;
			zmq_msg_close(&m);
			errno = e;
			return -1;
		}
	}
	return 0;
}

// rz_socket makes a socket of type t with no linger and, when rcvtimeo is
// not negative, a receive timeout in milliseconds.
static void *rz_socket(void *ctx, int t, int rcvtimeo) {
	void *s = zmq_socket(ctx, t);
	if (s == NULL) return NULL;
	int zero = 0;
	zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
	if (rcvtimeo >= 0) zmq_setsockopt(s, ZMQ_RCVTIMEO, &rcvtimeo, sizeof rcvtimeo);
	return s;
}

// rz_endpoint writes the endpoint s last bound to into out (cap bytes).
static int rz_endpoint(void *s, char *out, size_t cap) {
	return zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, out, &cap);
}
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// The raw baseline moves the same bytes between the same processes as the
// job does, over bare libzmq sockets used the way a careful C program would:
// each server runs a rawServer (a ROUTER in its own ZeroMQ context, as a
// node has) and each worker a rawClient with one DEALER per server. A
// request is a header frame listing the sizes of the reply frames, followed
// by the payload frames; the server answers with frames of those sizes. So
// a raw "pull" sends the keys and gets keys and values back, exactly the
// bytes of a ps-lite pull, without the meta encoding, customers, tracker
// and slicing on either side.
//
// Payload frames are sent without a copy from buffers allocated in C and
// kept warm (their contents are not the job's keys and values, only as many
// bytes), and received frames are released without being copied out of
// libzmq: what remains is libzmq's own cost.

// cBuf is memory in C from which frames are sent without a copy. It only
// grows, to at least twice its size; a buffer it outgrew is not freed, as
// libzmq may still be sending from it (the waste is less than the largest
// size asked for).
type cBuf struct {
	p unsafe.Pointer
	n int
}

// get returns the buffer with room for n bytes, or nil when C has no
// memory for it.
func (b *cBuf) get(n int) *C.char {
	if n > b.n {
		p := C.calloc(C.size_t(max(n, 2*b.n)), 1)
		if p == nil {
			return nil
		}
		b.p, b.n = p, max(n, 2*b.n)
	}
	return (*C.char)(b.p)
}

// zerr returns libzmq's error for a call that failed.
func zerr(what string) error {
	e := C.zmq_errno()
	return fmt.Errorf("raw: %s: %s", what, C.GoString(C.zmq_strerror(e)))
}

// rawServer answers raw requests until closed.
type rawServer struct {
	ctx, sock unsafe.Pointer
	endpoint  string
	stop      chan struct{}
	done      chan struct{}
}

var warmOnce sync.Once

// warmMalloc has the C allocator keep freed memory for reuse
// (rz_warm_malloc), so that libzmq receives large messages into warm
// memory, as our transport does (it keeps a pool of buffers), and the
// baseline measures libzmq rather than the kernel's page faults. On this
// virtual machine, with a fault costing 15-60 us, a 1e7-key push took raw
// zmq 1.3-1.5 s before and 145-196 ms after (two CPU burners beside it).
// Not when our nodes run on libzmq too (DMLC_PS_VAN_TYPE=zmq): the setting
// is the whole process's, and would change their figures as well.
func warmMalloc() {
	warmOnce.Do(func() {
		if os.Getenv("DMLC_PS_VAN_TYPE") != "zmq" {
			C.rz_warm_malloc()
		}
	})
}

// startRawServer binds a ROUTER on host (any free port) and answers on a
// goroutine of its own, which owns the socket.
func startRawServer(host string) (*rawServer, error) {
	warmMalloc()
	ctx := C.zmq_ctx_new()
	if ctx == nil {
		return nil, zerr("context")
	}
	sock := C.rz_socket(ctx, C.ZMQ_ROUTER, 100)
	if sock == nil {
		C.zmq_ctx_term(ctx)
		return nil, zerr("socket")
	}
	fail := func(what string) (*rawServer, error) {
		err := zerr(what)
		C.zmq_close(sock)
		C.zmq_ctx_term(ctx)
		return nil, err
	}
	ep := C.CString(fmt.Sprintf("tcp://%s:*", host))
	defer C.free(unsafe.Pointer(ep))
	if C.zmq_bind(sock, ep) != 0 {
		return fail("bind")
	}
	var buf [256]byte
	if C.rz_endpoint(sock, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf))) != 0 {
		return fail("endpoint")
	}
	s := &rawServer{ctx: ctx, sock: sock, endpoint: C.GoString((*C.char)(unsafe.Pointer(&buf[0]))),
		stop: make(chan struct{}), done: make(chan struct{})}
	go s.serve()
	return s, nil
}

func (s *rawServer) serve() {
	defer close(s.done)
	var (
		head  [1024]byte // the identity frame, then the header frame
		lens  [2]C.size_t
		sizes []C.size_t
		out   cBuf // the answers' bytes
	)
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		n, err := C.rz_recv(s.sock, (*C.char)(unsafe.Pointer(&head[0])), C.size_t(len(head)), &lens[0], 2)
		if n < 0 {
			if err == syscall.EAGAIN || err == syscall.EINTR {
				continue
			}
			return
		}
		if n < 2 || lens[1]%8 != 0 {
			continue
		}
		hdr := head[lens[0] : lens[0]+lens[1]]
		sizes = sizes[:0]
		most := 0
		for i := 0; i+8 <= len(hdr); i += 8 {
			n := int(binary.LittleEndian.Uint64(hdr[i:]))
			sizes = append(sizes, C.size_t(n))
			most = max(most, n)
		}
		if len(sizes) == 0 || most > 1<<34 {
			continue
		}
		if buf := out.get(most); buf != nil {
			C.rz_send(s.sock, (*C.char)(unsafe.Pointer(&head[0])), &lens[0], 1, buf, &sizes[0], C.int(len(sizes)))
		}
	}
}

// Close stops the server and releases its socket and context.
func (s *rawServer) Close() {
	close(s.stop)
	<-s.done
	C.zmq_close(s.sock)
	C.zmq_ctx_term(s.ctx)
}

// rawClient sends raw requests to every server. It belongs to one goroutine.
type rawClient struct {
	ctx     unsafe.Pointer
	dealers []unsafe.Pointer // by server rank
	hdr     []byte
	sizes   []C.size_t
	payload cBuf
}

// newRawClient connects one DEALER per server endpoint (by server rank).
func newRawClient(endpoints []string) (*rawClient, error) {
	warmMalloc()
	ctx := C.zmq_ctx_new()
	if ctx == nil {
		return nil, zerr("context")
	}
	c := &rawClient{ctx: ctx}
	for _, ep := range endpoints {
		d := C.rz_socket(ctx, C.ZMQ_DEALER, -1)
		if d == nil {
			err := zerr("socket")
			c.Close()
			return nil, err
		}
		c.dealers = append(c.dealers, d)
		cep := C.CString(ep)
		rc := C.zmq_connect(d, cep)
		C.free(unsafe.Pointer(cep))
		if rc != 0 {
			err := zerr("connect " + ep)
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// rawReq is one server's share of a raw round trip: the payload frames sent
// and the sizes of the frames the server answers with.
type rawReq struct {
	send  [][]byte
	reply []int
}

// roundTrip sends each server its request (nil: none), then waits for every
// answer, and returns the time it took.
func (c *rawClient) roundTrip(reqs []*rawReq) (time.Duration, error) {
	start := time.Now()
	for s, r := range reqs {
		if r == nil {
			continue
		}
		if err := c.send(s, r); err != nil {
			return 0, err
		}
	}
	for s, r := range reqs {
		if r == nil {
			continue
		}
		if err := c.recv(s); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// send sends server s the header frame and as many payload bytes as r's
// frames hold.
func (c *rawClient) send(s int, r *rawReq) error {
	c.hdr = c.hdr[:0]
	for _, n := range r.reply {
		c.hdr = binary.LittleEndian.AppendUint64(c.hdr, uint64(n))
	}
	// sizes: the header's, then the payload frames' (and room for one
	// more, so that &c.sizes[1] exists without payload frames).
	c.sizes = append(c.sizes[:0], C.size_t(len(c.hdr)))
	most := 0
	for _, f := range r.send {
		c.sizes = append(c.sizes, C.size_t(len(f)))
		most = max(most, len(f))
	}
	c.sizes = append(c.sizes, 0)
	buf := c.payload.get(max(most, 1))
	if buf == nil {
		return fmt.Errorf("raw: no memory for %d bytes", most)
	}
	if C.rz_send(c.dealers[s], (*C.char)(unsafe.Pointer(unsafe.SliceData(c.hdr))), &c.sizes[0], 1,
		buf, &c.sizes[1], C.int(len(r.send))) != 0 {
		return zerr(fmt.Sprintf("send to server %d", s))
	}
	return nil
}

// recv receives server s's answer and releases it.
func (c *rawClient) recv(s int) error {
	if C.rz_recv(c.dealers[s], nil, 0, nil, 0) < 0 {
		return zerr(fmt.Sprintf("receive from server %d", s))
	}
	return nil
}

// windowRate sends n requests to server s with at most w outstanding and
// returns the requests per second.
func (c *rawClient) windowRate(s int, r *rawReq, n, w int) (float64, error) {
	start := time.Now()
	out := 0
	for sent := 0; sent < n; sent++ {
		if out == w {
			if err := c.recv(s); err != nil {
				return 0, err
			}
			out--
		}
		if err := c.send(s, r); err != nil {
			return 0, err
		}
		out++
	}
	for ; out > 0; out-- {
		if err := c.recv(s); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// Close releases the sockets and the context.
func (c *rawClient) Close() {
	for _, d := range c.dealers {
		C.zmq_close(d)
	}
	C.zmq_ctx_term(c.ctx)
}
