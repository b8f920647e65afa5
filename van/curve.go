package van

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	zmq "github.com/pebbe/zmq4"
	"github.com/rs/zerolog"
)

// CurveKeys is the job's CURVE key pair, Z85-encoded (40 characters each).
// With it every ROUTER is a CURVE server and every DEALER a CURVE client,
// both using this pair, so traffic is encrypted and a peer must hold the
// secret key to connect: a ZAP handler admits only clients that present the
// job's public key.
type CurveKeys struct {
	Public string
	Secret string
}

// NewCurveKeys returns a fresh key pair.
func NewCurveKeys() (CurveKeys, error) {
	pub, sec, err := zmq.NewCurveKeypair()
	if err != nil {
		return CurveKeys{}, fmt.Errorf("van: generate CURVE keys (is libzmq built with libsodium?): %w", err)
	}
	return CurveKeys{Public: pub, Secret: sec}, nil
}

// Check verifies that both keys are 40-character Z85 strings and that the
// public key belongs to the secret key.
func (k CurveKeys) Check() error {
	if len(k.Public) != 40 || len(zmq.Z85decode(k.Public)) != 32 {
		return errors.New("CURVE public key must be 40 Z85 characters")
	}
	if len(k.Secret) != 40 || len(zmq.Z85decode(k.Secret)) != 32 {
		return errors.New("CURVE secret key must be 40 Z85 characters")
	}
	pub, err := zmq.AuthCurvePublic(k.Secret)
	if err != nil {
		return fmt.Errorf("CURVE secret key: %v", err)
	}
	if pub != k.Public {
		return errors.New("CURVE public key does not belong to the secret key")
	}
	return nil
}

const zapDomain = "pslite"

// curveGuard runs the ZAP handler of one ZeroMQ context and watches the
// ROUTER for failed handshakes, logging every refused peer. Each of its two
// goroutines owns its socket and stops when stop is set.
type curveGuard struct {
	keys     CurveKeys
	log      zerolog.Logger
	stop     atomic.Bool
	wg       sync.WaitGroup // the ZAP goroutine
	monitors []*socketMonitor
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

func startCurveGuard(ctx *zmq.Context, keys CurveKeys, log zerolog.Logger) (*curveGuard, error) {
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
	g.monitors = append(g.monitors, m)
	return nil
}

func (g *curveGuard) close() {
	for _, m := range g.monitors {
		m.close()
	}
	g.stop.Store(true)
	g.wg.Wait()
}
