package ctr

import (
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/ps"
	"github.com/rs/zerolog"
)

// xflow's server (xflow/src/model/server.h and optimizer/ftrl.h, read
// from its source): two KV apps with FTRL-proximal handles, app 0 for w
// (its values per key set by the last push, 1 in practice) and app 1 for
// v (xflow's v_dim, 10, values per key). Its parameters:
const (
	xflowAlpha   = 5e-2
	xflowBeta    = 1.0
	xflowLambda1 = 5e-5
	xflowLambda2 = 10.0
	xflowVDim    = 10
	// xflow starts a v value it has not seen at a normal draw of standard
	// deviation 0.01 (with z and n at 0); w values start at 0.
	xflowVStd = 1e-2
)

// xflowApp is one app of an xflow-compatible server: a key's values and
// FTRL state, updated as xflow's handle does, in float32 as it computes.
// Keys never pushed are not stored: w answers 0 for them, v its start
// value, a function of the key and the seed, so that every pull of a key
// sees the same values, as xflow's (which stores what it drew) does.
type xflowApp struct {
	mu                  sync.Mutex
	dim                 int  // values per key
	fixed               bool // dim does not follow the pushes (v)
	std                 float64
	seed                uint64
	alpha, beta, l1, l2 float32
	keys                map[uint64][]float32 // per key: dim values of w, then n, then z
	stats               xflowStats
	log                 zerolog.Logger
}

// xflowStats counts what an xflow-compatible app served.
type xflowStats struct {
	Pushes, Pulls, Bad int
}

// newXflowApp returns app 0 (v false) or app 1 (v true) of an
// xflow-compatible server with cfg's FTRL settings.
func newXflowApp(v bool, cfg *Config, log zerolog.Logger) *xflowApp {
	a := &xflowApp{dim: 1, keys: make(map[uint64][]float32), seed: cfg.Seed, log: log,
		alpha: float32(cfg.Alpha), beta: float32(cfg.Beta), l1: float32(cfg.L1), l2: float32(cfg.L2)}
	if v {
		a.dim, a.fixed, a.std = cfg.XflowVDim, true, xflowVStd
	}
	return a
}

// state returns key k's values and state, creating them (w at its start,
// n and z at 0).
func (a *xflowApp) state(k uint64) []float32 {
	s := a.keys[k]
	if len(s) == 3*a.dim {
		return s
	}
	old := s
	s = make([]float32, 3*a.dim)
	for j := 0; j < a.dim; j++ {
		switch {
		case j < len(old)/3:
			// (w's dimension grew: keep what the key had.)
			s[j], s[a.dim+j], s[2*a.dim+j] = old[j], old[len(old)/3+j], old[2*len(old)/3+j]
		case a.std > 0:
			s[j] = float32(initFactor(k*uint64(a.dim)+uint64(j), a.seed, a.std))
		}
	}
	a.keys[k] = s
	return s
}

// handle answers one request as xflow's handle does: a push applies FTRL
// to every value and is answered empty, a pull is answered with dim values
// per key. A push whose values do not fit changes nothing; it is logged,
// counted (the server then exits with an error) and answered, so that
// the worker does not wait for ever (xflow's server aborts).
func (a *xflowApp) handle(meta kv.KVMeta, data kv.KVPairs[float32], s *kv.KVServer[float32]) {
	res, err := a.apply(meta, data)
	if err != nil {
		a.log.Warn().Err(err).Int("sender", meta.Sender).Msg("xflow server: request refused")
	}
	if err := s.ZResponse(meta, res); err != nil {
		a.log.Warn().Err(err).Int("sender", meta.Sender).Msg("xflow server: response not sent")
	}
}

// apply carries out a request under the lock and returns the response.
func (a *xflowApp) apply(meta kv.KVMeta, data kv.KVPairs[float32]) (kv.KVPairs[float32], error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := len(data.Keys)
	if !meta.Push {
		a.stats.Pulls++
		res := kv.KVPairs[float32]{Keys: data.Keys, Vals: make([]float32, n*a.dim)}
		for i, k := range data.Keys {
			s := a.keys[k]
			for j := 0; j < a.dim; j++ {
				switch {
				case j < len(s)/3:
					res.Vals[i*a.dim+j] = s[j]
				case a.std > 0:
					res.Vals[i*a.dim+j] = float32(initFactor(k*uint64(a.dim)+uint64(j), a.seed, a.std))
				}
			}
		}
		return res, nil
	}
	a.stats.Pushes++
	if n == 0 || len(data.Vals)%n != 0 || len(data.Lens) > 0 {
		a.stats.Bad++
		return kv.KVPairs[float32]{}, fmt.Errorf("xflow server: push of %d values for %d keys", len(data.Vals), n)
	}
	dim := len(data.Vals) / n
	if a.fixed && dim != a.dim {
		a.stats.Bad++
		return kv.KVPairs[float32]{}, fmt.Errorf("xflow server: push of %d values per key, want %d", dim, a.dim)
	}
	a.dim = dim // app 0: xflow's w_dim follows the pushes
	for i, k := range data.Keys {
		s := a.state(k)
		w, nn, z := s[:dim], s[dim:2*dim], s[2*dim:]
		for j := 0; j < dim; j++ {
			g := data.Vals[i*dim+j]
			oldN := nn[j]
			newN := oldN + g*g
			z[j] += g - (sqrt32(newN)-sqrt32(oldN))/a.alpha*w[j]
			nn[j] = newN
			if abs32(z[j]) <= a.l1 {
				w[j] = 0
				continue
			}
			r := z[j] - a.l1
			if z[j] < 0 {
				r = z[j] + a.l1
			}
			w[j] = r / -((a.beta+sqrt32(nn[j]))/a.alpha + a.l2)
		}
	}
	return kv.KVPairs[float32]{}, nil
}

func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }
func abs32(x float32) float32  { return float32(math.Abs(float64(x))) }

// serveXflow is -mode=xflow-server: the scheduler and servers of a job
// whose workers are xflow's own (its unchanged worker binary, LR, FM or
// MVM), the servers answering as xflow's do. A worker of this mode is an
// error: the workers are xflow's.
func serveXflow(cfg *Config, out io.Writer) error {
	if err := ps.Start(0); err != nil {
		return err
	}
	po, err := ps.Node()
	if err != nil {
		return err
	}
	var apps []*xflowApp
	if po.IsWorker() {
		return fmt.Errorf("-mode=xflow-server runs the scheduler and the servers; the workers are xflow's")
	}
	if po.IsServer() {
		if apps, err = installXflow(po, cfg); err != nil {
			return err
		}
	}
	if err := ps.Finalize(0, true); err != nil {
		return err
	}
	for i, a := range apps {
		a.mu.Lock()
		fmt.Fprintf(out, "[server %d app %d] xflow FTRL: %d pushes, %d pulls, %d keys of %d values, %d refused\n",
			po.MyRank(), i, a.stats.Pushes, a.stats.Pulls, len(a.keys), a.dim, a.stats.Bad)
		bad := a.stats.Bad
		a.mu.Unlock()
		if bad > 0 {
			return fmt.Errorf("server %d app %d refused %d requests", po.MyRank(), i, bad)
		}
	}
	return nil
}

// installXflow sets up apps 0 and 1 of an xflow-compatible server.
func installXflow(po *postoffice.Postoffice, cfg *Config) ([]*xflowApp, error) {
	var apps []*xflowApp
	for app := 0; app < 2; app++ {
		a := newXflowApp(app == factorApp, cfg, po.Logger())
		srv, err := kv.NewKVServer[float32](po, app)
		if err != nil {
			return nil, err
		}
		if err := srv.SetRequestHandle(a.handle); err != nil {
			return nil, err
		}
		po.RegisterExitCallback(srv.Close)
		apps = append(apps, a)
	}
	return apps, nil
}
