package zmqtransport

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// socketMonitor reads a socket's ZeroMQ events on its own goroutine, which
// owns the PAIR socket the events arrive on, until stopped.
type socketMonitor struct {
	stop atomic.Bool
	done sync.WaitGroup
}

// monitorSocket starts delivering sock's events (a mask of zmq.EVENT_*) to
// f. Call close before the socket is closed.
func monitorSocket(ctx *zmq.Context, sock *zmq.Socket, events zmq.Event, f func(ev zmq.Event, addr string, val int)) (*socketMonitor, error) {
	addr := fmt.Sprintf("inproc://pslite-monitor-%p", sock)
	// MONITOR_STOPPED wakes the goroutine at once when monitoring stops.
	if err := sock.Monitor(addr, events|zmq.EVENT_MONITOR_STOPPED); err != nil {
		return nil, fmt.Errorf("van: monitor socket: %w", err)
	}
	pair, err := ctx.NewSocket(zmq.PAIR)
	if err != nil {
		return nil, fmt.Errorf("van: monitor socket: %w", err)
	}
	pair.SetLinger(0)
	pair.SetRcvtimeo(200 * time.Millisecond)
	if err := pair.Connect(addr); err != nil {
		pair.Close()
		return nil, fmt.Errorf("van: connect monitor: %w", err)
	}
	m := &socketMonitor{}
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		defer pair.Close()
		for !m.stop.Load() {
			ev, a, v, err := pair.RecvEvent(0)
			if err != nil {
				continue // timeout: look at stop again
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

// close stops monitoring sock (by its owner, before closing it) and waits
// for the monitor's goroutine, which the MONITOR_STOPPED event ends at once.
func (m *socketMonitor) close(sock *zmq.Socket) {
	if m == nil {
		return
	}
	m.stop.Store(true)
	sock.Monitor("", 0)
	m.done.Wait()
}
