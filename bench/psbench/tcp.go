package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gopslite/pslite/internal/hugemem"
)

// The TCP limit moves the same bytes as the raw ZeroMQ baseline (see
// raw.go) over plain TCP connections, one per worker and server, with
// buffers kept warm from one request to the next: no framing beyond a
// header of sizes, no copies beyond the kernel's. Every transport of this
// project, and libzmq, sends over TCP, so nothing moves these bytes
// between these processes faster: it is the limit each row is held to.
//
// A request is a header of two little-endian uint32 counts (payload
// frames, reply frames) and the sizes of both as uint64s, then the payload
// frames back to back; the answer is the reply frames' bytes back to back.

// tcpServer answers TCP limit requests until closed.
type tcpServer struct {
	ln   net.Listener
	addr string
	wg   sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// startTCPServer listens on host (any free port) and serves each
// connection on a goroutine of its own.
func startTCPServer(host string) (*tcpServer, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("tcp limit: listen: %w", err)
	}
	s := &tcpServer{ln: ln, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *tcpServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// serve answers one connection's requests in order: it reads a request's
// payload into a buffer it keeps, and writes the answer from another.
// Requests and answers pass through buffers of 64 KiB, so that small ones
// cost a system call per batch; large ones go around them.
func (s *tcpServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	r := bufio.NewReaderSize(c, 64<<10)
	w := bufio.NewWriterSize(c, 64<<10)
	var hdr, in, out []byte
	var sizes []uint64
	for {
		// Answers go out together while more requests are already in,
		// and before waiting for more: a window of requests costs a
		// write per batch, not per answer.
		if r.Buffered() < 8 {
			if err := w.Flush(); err != nil {
				return
			}
		}
		sendN, replyN, err := readCounts(r, &hdr)
		if err != nil {
			return
		}
		sizes, err = readSizes(r, &hdr, sizes, sendN+replyN)
		if err != nil {
			return
		}
		var in1, out1 uint64
		for i, n := range sizes {
			if i < sendN {
				in1 += n
			} else {
				out1 += n
			}
		}
		if in1 > 1<<34 || out1 > 1<<34 {
			return // not a request of ours
		}
		in = grow(in, int(in1))
		if _, err := io.ReadFull(r, in); err != nil {
			return
		}
		out = grow(out, int(out1))
		if _, err := w.Write(out); err != nil {
			return
		}
	}
}

// readCounts reads a request's two frame counts.
func readCounts(r io.Reader, buf *[]byte) (sendN, replyN int, err error) {
	*buf = grow(*buf, 8)
	if _, err := io.ReadFull(r, *buf); err != nil {
		return 0, 0, err
	}
	sendN = int(binary.LittleEndian.Uint32(*buf))
	replyN = int(binary.LittleEndian.Uint32((*buf)[4:]))
	if sendN > 64 || replyN > 64 {
		return 0, 0, errors.New("tcp limit: too many frames")
	}
	return sendN, replyN, nil
}

// readSizes reads n frame sizes into sizes (reusing its memory).
func readSizes(r io.Reader, buf *[]byte, sizes []uint64, n int) ([]uint64, error) {
	*buf = grow(*buf, 8*n)
	if _, err := io.ReadFull(r, *buf); err != nil {
		return sizes, err
	}
	sizes = sizes[:0]
	for i := 0; i < n; i++ {
		sizes = append(sizes, binary.LittleEndian.Uint64((*buf)[8*i:]))
	}
	return sizes, nil
}

// grow returns b with length n, reusing its memory when it has room. New
// memory asks for huge pages, as our transport's receive buffers do: the
// kernel's copies into a large buffer then miss the TLB far less.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return hugemem.Make[byte](n)
	}
	return b[:n]
}

// Close stops the server: it closes the listener and every connection and
// waits for their goroutines.
func (s *tcpServer) Close() {
	s.mu.Lock()
	s.closed = true
	s.ln.Close()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// tcpClient sends TCP limit requests to every server, one connection each.
// It belongs to one goroutine (roundTrip runs one more per server).
type tcpClient struct {
	conns   []net.Conn // by server rank
	readers []*bufio.Reader
	writers []*bufio.Writer
	hdrs    [][]byte // per server, the request header being built
	replies [][]byte // per server, the buffer answers are read into
}

// newTCPClient connects to every server's address (by server rank).
func newTCPClient(addrs []string) (*tcpClient, error) {
	c := &tcpClient{hdrs: make([][]byte, len(addrs)), replies: make([][]byte, len(addrs))}
	for _, a := range addrs {
		conn, err := net.DialTimeout("tcp", a, 10*time.Second)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("tcp limit: connect %s: %w", a, err)
		}
		c.conns = append(c.conns, conn)
		c.readers = append(c.readers, bufio.NewReaderSize(conn, 64<<10))
		c.writers = append(c.writers, bufio.NewWriterSize(conn, 64<<10))
	}
	return c, nil
}

// write queues server s's request r: its header and payload frames, in a
// buffer of 64 KiB that large frames go around. flush sends what is queued.
func (c *tcpClient) write(s int, r *rawReq) {
	h := c.hdrs[s][:0]
	h = binary.LittleEndian.AppendUint32(h, uint32(len(r.send)))
	h = binary.LittleEndian.AppendUint32(h, uint32(len(r.reply)))
	for _, f := range r.send {
		h = binary.LittleEndian.AppendUint64(h, uint64(len(f)))
	}
	for _, n := range r.reply {
		h = binary.LittleEndian.AppendUint64(h, uint64(n))
	}
	c.hdrs[s] = h
	w := c.writers[s]
	w.Write(h) // a bufio.Writer's error sticks: flush returns it
	for _, f := range r.send {
		w.Write(f)
	}
}

func (c *tcpClient) flush(s int) error {
	if err := c.writers[s].Flush(); err != nil {
		return fmt.Errorf("tcp limit: send to server %d: %w", s, err)
	}
	return nil
}

// replyBytes returns the size of r's answer.
func replyBytes(r *rawReq) int {
	n := 0
	for _, x := range r.reply {
		n += x
	}
	return n
}

// read reads server s's answer to r into a buffer kept for it.
func (c *tcpClient) read(s int, r *rawReq) error {
	c.replies[s] = grow(c.replies[s], replyBytes(r))
	if _, err := io.ReadFull(c.readers[s], c.replies[s]); err != nil {
		return fmt.Errorf("tcp limit: receive from server %d: %w", s, err)
	}
	return nil
}

// roundTrip sends each server its request (nil: none) and reads its
// answer, every server on a goroutine of its own, and returns the time
// until the last answer was in.
func (c *tcpClient) roundTrip(reqs []*rawReq) (time.Duration, error) {
	start := time.Now()
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for s, r := range reqs {
		if r == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.write(s, r)
			if errs[s] = c.flush(s); errs[s] == nil {
				errs[s] = c.read(s, r)
			}
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// windowRate sends n requests to server s with at most w outstanding and
// returns the requests per second. Requests go out together until it has
// to wait for an answer; then it takes that answer and every other one
// already read, and sends as many requests together: a write and a read
// per batch, not per request, as our transport and libzmq batch.
func (c *tcpClient) windowRate(s int, r *rawReq, n, w int) (float64, error) {
	start := time.Now()
	out := 0
	answer := replyBytes(r)
	for sent := 0; sent < n; sent++ {
		if out == w {
			if err := c.flush(s); err != nil {
				return 0, err
			}
			if err := c.read(s, r); err != nil {
				return 0, err
			}
			out--
			for out > 0 && answer > 0 && c.readers[s].Buffered() >= answer {
				if err := c.read(s, r); err != nil {
					return 0, err
				}
				out--
			}
		}
		c.write(s, r)
		out++
	}
	if err := c.flush(s); err != nil {
		return 0, err
	}
	for ; out > 0; out-- {
		if err := c.read(s, r); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// Close closes the connections.
func (c *tcpClient) Close() {
	for _, conn := range c.conns {
		conn.Close()
	}
}
