package zmqtransport

import (
	"errors"
	"fmt"
	"sync/atomic"

	zmq "github.com/pebbe/zmq4"
)

// socketMonitor reads a socket's ZeroMQ events on its own goroutine, which
// owns the PAIR socket the events arrive on, until monitoring stops.
//
// The goroutine ends only on the MONITOR_STOPPED event (or when the context
// terminates), never on a flag of its own: libzmq sends that event with a
// blocking send when monitoring stops, and a PAIR socket whose peer has
// gone blocks such a send for ever, so the reading side must stay open
// until the event has arrived.
type socketMonitor struct {
	done chan struct{} // closed when the goroutine has ended
}

// monitorSeq numbers the monitors' endpoints: a name made of the socket's
// address could be taken again by a later socket at that address while
// libzmq has not yet released the earlier endpoint.
var monitorSeq atomic.Uint64

// monitorSocket starts delivering sock's events (a mask of zmq.EVENT_*) to
// f. Call stop before the socket is closed.
func monitorSocket(ctx *zmq.Context, sock *zmq.Socket, events zmq.Event, f func(ev zmq.Event, addr string, val int)) (*socketMonitor, error) {
	addr := fmt.Sprintf("inproc://pslite-monitor-%d", monitorSeq.Add(1))
	// MONITOR_STOPPED wakes the goroutine at once when monitoring stops.
	if err := sock.Monitor(addr, events|zmq.EVENT_MONITOR_STOPPED); err != nil {
		return nil, fmt.Errorf("van: monitor socket: %w", err)
	}
	pair, err := ctx.NewSocket(zmq.PAIR)
	if err != nil {
		return nil, fmt.Errorf("van: monitor socket: %w", err)
	}
	pair.SetLinger(0)
	if err := pair.Connect(addr); err != nil {
		pair.Close()
		return nil, fmt.Errorf("van: connect monitor: %w", err)
	}
	m := &socketMonitor{done: make(chan struct{})}
	go func() {
		defer close(m.done)
		defer pair.Close()
		for {
			ev, a, v, err := pair.RecvEvent(0)
			if err != nil {
				if errors.Is(err, zmq.ETERM) {
					return
				}
				continue // interrupted by a signal
			}
			if ev == zmq.EVENT_MONITOR_STOPPED {
				return
			}
			if ev&events != 0 {
				f(ev, a, v)
			}
		}
	}()
	return m, nil
}

// stop stops monitoring sock (by its owner, before closing it); the
// monitor's goroutine ends once the MONITOR_STOPPED event reaches it, or
// when the context terminates. It does not wait for that.
func (m *socketMonitor) stop(sock *zmq.Socket) {
	if m != nil {
		sock.Monitor("", 0)
	}
}
