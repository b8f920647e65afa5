package zmqtransport

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/van"
)

const zapDomain = "pslite"

// curveGuard runs the ZAP handler of one ZeroMQ context and watches the
// ROUTER for failed handshakes, logging every refused peer. Each of its two
// goroutines owns its socket and stops when stop is set.
type curveGuard struct {
	keys     van.CurveKeys
	log      zerolog.Logger
	stop     atomic.Bool
	wg       sync.WaitGroup // the ZAP goroutine
	monitors []watched
	// Refused counts the connections refused so far.
	refused atomic.Int64
	// Refusals are logged at most once per logEvery, with a count.
	logMu    sync.Mutex
	lastLog  time.Time
	unlogged int64
}

const logEvery = 5 * time.Second

// logRefusal logs a refused connection, folding repeats (a refused peer
// retries every 100 ms) into one line every logEvery.
func (g *curveGuard) logRefusal(reason string, fields map[string]string) {
	g.refused.Add(1)
	g.logMu.Lock()
	g.unlogged++
	if time.Since(g.lastLog) < logEvery {
		g.logMu.Unlock()
		return
	}
	n := g.unlogged
	g.unlogged = 0
	g.lastLog = time.Now()
	g.logMu.Unlock()
	e := g.log.Warn().Int64("attempts", n)
	for k, v := range fields {
		e = e.Str(k, v)
	}
	e.Msg("refused a connection: " + reason)
}

// watched is a socket whose handshakes the guard watches.
type watched struct {
	mon  *socketMonitor
	sock *zmq.Socket
}

func startCurveGuard(ctx *zmq.Context, keys van.CurveKeys, log zerolog.Logger) (*curveGuard, error) {
	g := &curveGuard{keys: keys, log: log}
	zap, err := ctx.NewSocket(zmq.REP)
	if err != nil {
		return nil, fmt.Errorf("van: ZAP socket: %w", err)
	}
	zap.SetLinger(0)
	zap.SetRcvtimeo(200 * time.Millisecond)
	if err := zap.Bind("inproc://zeromq.zap.01"); err != nil {
		zap.Close()
		return nil, fmt.Errorf("van: bind ZAP handler: %w", err)
	}
	g.wg.Add(1)
	go g.serveZAP(zap)
	return g, nil
}

// serveZAP answers ZeroMQ's authentication requests: version, request id,
// domain, address, identity, mechanism and, for CURVE, the client's public
// key.
func (g *curveGuard) serveZAP(sock *zmq.Socket) {
	defer g.wg.Done()
	defer sock.Close()
	want := zmq.Z85decode(g.keys.Public)
	for !g.stop.Load() {
		req, err := sock.RecvMessageBytes(0)
		if err != nil {
			continue // timeout: look at stop again
		}
		if len(req) < 6 {
			sock.SendMessage("1.0", "", "400", "malformed ZAP request", "", "")
			continue
		}
		id, addr, mech := req[1], string(req[3]), string(req[5])
		status, text := "200", "OK"
		switch {
		case mech != "CURVE":
			status, text = "400", "CURVE required"
		case len(req) < 7 || string(req[6]) != want:
			status, text = "400", "unknown CURVE key"
		}
		if status != "200" {
			g.logRefusal(text, map[string]string{"peer": addr, "mechanism": mech})
		}
		sock.SendMessage("1.0", id, status, text, "", "")
	}
}

// watch logs failed handshakes on sock (a peer that does not know the
// job's public key fails before ZAP is asked).
func (g *curveGuard) watch(ctx *zmq.Context, sock *zmq.Socket, name string) error {
	m, err := monitorSocket(ctx, sock, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL|zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL|zmq.EVENT_HANDSHAKE_FAILED_AUTH,
		func(ev zmq.Event, endpoint string, val int) {
			g.logRefusal("CURVE handshake failed (the peer does not hold the job's keys)",
				map[string]string{"socket": name, "endpoint": endpoint, "event": ev.String(), "detail": fmt.Sprint(val)})
		})
	if err != nil {
		return err
	}
	g.monitors = append(g.monitors, watched{m, sock})
	return nil
}

// unwatch stops watching the sockets, before their owner closes them.
func (g *curveGuard) unwatch() {
	for _, w := range g.monitors {
		w.mon.stop(w.sock)
	}
	g.monitors = nil
}

// close stops the ZAP handler.
func (g *curveGuard) close() {
	g.stop.Store(true)
	g.wg.Wait()
}
