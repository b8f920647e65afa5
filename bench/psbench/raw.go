package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// The raw baseline moves the same bytes between the same processes as the
// job does, over bare pebbe/zmq4 sockets: each server runs a rawServer (a
// ROUTER in its own ZeroMQ context, as a node has) and each worker a
// rawClient with one DEALER per server. A request is a header frame listing
// the sizes of the reply frames, followed by the payload frames; the server
// answers with frames of those sizes. So a raw "pull" sends the keys and gets
// keys and values back, exactly the bytes of a ps-lite pull, without the
// meta encoding, customers, tracker and slicing on either side.

// rawServer answers raw requests until closed.
type rawServer struct {
	ctx      *zmq.Context
	router   *zmq.Socket
	endpoint string
	stop     chan struct{}
	done     chan struct{}
}

// startRawServer binds a ROUTER on host (any free port) and answers on a
// goroutine of its own, which owns the socket.
func startRawServer(host string) (*rawServer, error) {
	ctx, err := zmq.NewContext()
	if err != nil {
		return nil, err
	}
	router, err := ctx.NewSocket(zmq.ROUTER)
	if err != nil {
		ctx.Term()
		return nil, err
	}
	router.SetLinger(0)
	router.SetRcvtimeo(100 * time.Millisecond)
	if err := router.Bind(fmt.Sprintf("tcp://%s:*", host)); err != nil {
		router.Close()
		ctx.Term()
		return nil, fmt.Errorf("raw: bind: %w", err)
	}
	ep, err := router.GetLastEndpoint()
	if err != nil {
		router.Close()
		ctx.Term()
		return nil, err
	}
	s := &rawServer{ctx: ctx, router: router, endpoint: ep, stop: make(chan struct{}), done: make(chan struct{})}
	go s.serve()
	return s, nil
}

func (s *rawServer) serve() {
	defer close(s.done)
	var buf []byte // reply payloads: the bytes are copied into ZeroMQ on send
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		frames, err := s.router.RecvMessageBytes(0)
		if err != nil {
			if errors.Is(err, zmq.Errno(syscall.EAGAIN)) {
				continue
			}
			return
		}
		if len(frames) < 2 || len(frames[1])%8 != 0 {
			continue
		}
		hdr := frames[1]
		reply := make([]int, len(hdr)/8)
		for i := range reply {
			reply[i] = int(binary.LittleEndian.Uint64(hdr[8*i:]))
			if reply[i] > len(buf) {
				buf = make([]byte, reply[i])
			}
		}
		s.router.SendBytes(frames[0], zmq.SNDMORE)
		for i, n := range reply {
			flag := zmq.SNDMORE
			if i == len(reply)-1 {
				flag = 0
			}
			s.router.SendBytes(buf[:n], flag)
		}
	}
}

// Close stops the server and releases its socket and context.
func (s *rawServer) Close() {
	close(s.stop)
	<-s.done
	s.router.Close()
	s.ctx.Term()
}

// rawClient sends raw requests to every server. It belongs to one goroutine.
type rawClient struct {
	ctx     *zmq.Context
	dealers []*zmq.Socket // by server rank
	hdr     []byte
}

// newRawClient connects one DEALER per server endpoint (by server rank).
func newRawClient(endpoints []string) (*rawClient, error) {
	ctx, err := zmq.NewContext()
	if err != nil {
		return nil, err
	}
	c := &rawClient{ctx: ctx}
	for _, ep := range endpoints {
		d, err := ctx.NewSocket(zmq.DEALER)
		if err != nil {
			c.Close()
			return nil, err
		}
		d.SetLinger(0)
		c.dealers = append(c.dealers, d)
		if err := d.Connect(ep); err != nil {
			c.Close()
			return nil, fmt.Errorf("raw: connect %s: %w", ep, err)
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
		if _, err := c.dealers[s].RecvMessageBytes(0); err != nil {
			return 0, fmt.Errorf("raw: receive from server %d: %w", s, err)
		}
	}
	return time.Since(start), nil
}

func (c *rawClient) send(s int, r *rawReq) error {
	c.hdr = c.hdr[:0]
	for _, n := range r.reply {
		c.hdr = binary.LittleEndian.AppendUint64(c.hdr, uint64(n))
	}
	d := c.dealers[s]
	flag := zmq.SNDMORE
	if len(r.send) == 0 {
		flag = 0
	}
	if _, err := d.SendBytes(c.hdr, flag); err != nil {
		return fmt.Errorf("raw: send to server %d: %w", s, err)
	}
	for i, f := range r.send {
		flag := zmq.SNDMORE
		if i == len(r.send)-1 {
			flag = 0
		}
		if _, err := d.SendBytes(f, flag); err != nil {
			return fmt.Errorf("raw: send to server %d: %w", s, err)
		}
	}
	return nil
}

// windowRate sends n requests to server s with at most w outstanding and
// returns the requests per second.
func (c *rawClient) windowRate(s int, r *rawReq, n, w int) (float64, error) {
	start := time.Now()
	d := c.dealers[s]
	out := 0
	for sent := 0; sent < n; sent++ {
		if out == w {
			if _, err := d.RecvMessageBytes(0); err != nil {
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
		if _, err := d.RecvMessageBytes(0); err != nil {
			return 0, err
		}
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// Close releases the sockets and the context.
func (c *rawClient) Close() {
	for _, d := range c.dealers {
		d.Close()
	}
	c.ctx.Term()
}
