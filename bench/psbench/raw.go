package main

import (
	"fmt"
	"net"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/gopslite/pslite/internal/prog"
)

// rawFigures are the bare-transport baselines: the time to move a bulk
// payload one way (until a 1-byte reply comes back) and the round trip of a
// 16-byte ping-pong, over a DEALER/ROUTER pair on loopback, each side with
// its own ZeroMQ context, as two ps-lite nodes have.
type rawFigures struct {
	bulk     time.Duration
	pingpong time.Duration
}

func measureRaw(bulkBytes int) rawFigures {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	prog.Check(err, "raw: free port")
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()

	rctx, _ := zmq.NewContext()
	dctx, _ := zmq.NewContext()
	router, err := rctx.NewSocket(zmq.ROUTER)
	prog.Check(err, "raw: router")
	prog.Check(router.Bind(fmt.Sprintf("tcp://127.0.0.1:%d", port)), "raw: bind")
	dealer, err := dctx.NewSocket(zmq.DEALER)
	prog.Check(err, "raw: dealer")
	dealer.SetIdentity("ps9")
	prog.Check(dealer.Connect(fmt.Sprintf("tcp://127.0.0.1:%d", port)), "raw: connect")

	// The router side echoes: a 1-byte reply to a bulk message, the same 16
	// bytes to a ping.
	done := make(chan struct{})
	go func() {
		defer close(done)
		back, _ := rctx.NewSocket(zmq.DEALER)
		back.SetIdentity("ps8")
		// Replies go straight back over the router's connection.
		back.Close()
		for {
			frames, err := router.RecvMessageBytes(0)
			if err != nil || len(frames) < 2 {
				return
			}
			reply := frames[len(frames)-1]
			if len(frames) > 2 {
				reply = []byte{1}
			}
			if string(reply) == "quit" {
				router.SendBytes(frames[0], zmq.SNDMORE)
				router.SendBytes(reply, 0)
				return
			}
			router.SendBytes(frames[0], zmq.SNDMORE)
			router.SendBytes(reply, 0)
		}
	}()

	keys := make([]byte, bulkBytes*2/3)
	vals := make([]byte, bulkBytes-len(keys))
	var bulk []time.Duration
	for i := 0; i < *repeat; i++ {
		start := time.Now()
		dealer.SendBytes([]byte("meta"), zmq.SNDMORE)
		dealer.SendBytes(keys, zmq.SNDMORE)
		dealer.SendBytes(vals, 0)
		_, err := dealer.RecvMessageBytes(0)
		prog.Check(err, "raw: bulk reply")
		bulk = append(bulk, time.Since(start))
	}
	ping := make([]byte, 16)
	var pp []time.Duration
	for i := 0; i < *iters; i++ {
		start := time.Now()
		dealer.SendBytes(ping, 0)
		_, err := dealer.RecvMessageBytes(0)
		prog.Check(err, "raw: pong")
		pp = append(pp, time.Since(start))
	}
	dealer.SendBytes([]byte("quit"), 0)
	dealer.RecvMessageBytes(0)
	<-done
	dealer.SetLinger(0)
	router.SetLinger(0)
	dealer.Close()
	router.Close()
	dctx.Term()
	rctx.Term()
	return rawFigures{bulk: median(bulk), pingpong: median(pp)}
}
