package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// Key layout. Model keys are fold·numKeys + feature·outputs + output, below
// statsBase. Statistics keys (statsBase + ...) all live on server 0.
// Control key ctrlBase+s goes to server s: workers add one per server to
// every training push, with the step's learning-rate scale as its value, so
// that every server sees every worker's every step (which BSP and SSP count)
// even when a batch has no feature in the server's range.
const (
	statsBase uint64 = 1 << 61
	ctrlBase  uint64 = 1 << 62
)

// statsFields is the number of values a worker reports per epoch: summed
// loss, examples, examples predicted correctly, seconds spent.
const statsFields = 4

// statsKey returns the key of field f of worker rank's report for round r
// (a round is one epoch of one fold).
func statsKey(round, rank, workers, f int) uint64 {
	return statsBase + uint64((round*workers+rank)*statsFields+f)
}

// Request kinds, in the low two bits of a request's command; the step
// number is in the bits above.
const (
	kindTrain = 0 // pushes of gradients, pulls of weights under the consistency model
	kindStats = 1 // per-epoch reports: a pull waits until every key asked for was pushed
	kindFinal = 2 // pulls answered at once (after the workers' final barrier)
)

// maxStep is the largest step number a command can carry.
const maxStep = math.MaxInt32 >> 2

// command packs a request kind and a step into a KV command.
func command(kind, step int) int { return step<<2 | kind }

// splitCommand is the inverse of command.
func splitCommand(cmd int) (kind, step int) { return cmd & 3, cmd >> 2 }

// SyncMode is a consistency model.
type SyncMode int

// The consistency models.
const (
	ASP SyncMode = iota // asynchronous: every push applied at once, pulls answered at once
	BSP                 // bulk synchronous: a step's pushes are summed and applied together
	SSP                 // stale synchronous: no worker more than Staleness steps ahead
)

// ParseSyncMode parses "asp", "bsp" or "ssp".
func ParseSyncMode(s string) (SyncMode, error) {
	switch strings.ToLower(s) {
	case "asp":
		return ASP, nil
	case "bsp":
		return BSP, nil
	case "ssp":
		return SSP, nil
	}
	return 0, fmt.Errorf("unknown consistency model %q (want asp, bsp or ssp)", s)
}

// String returns the model's flag value.
func (m SyncMode) String() string {
	if m < ASP || m > SSP {
		return fmt.Sprintf("SyncMode(%d)", int(m))
	}
	return [...]string{"asp", "bsp", "ssp"}[m]
}

// Responder answers a request; KVServer.Response in a job, a recorder in
// tests.
type Responder func(meta kv.KVMeta, res kv.KVPairs[float32]) error

// held is a pull waiting for its consistency condition.
type held struct {
	meta  kv.KVMeta
	keys  []uint64
	kind  int
	step  int
	since time.Time
}

// stepBuf collects the gradients of one BSP step. The step being applied
// (Store.applied) sums them next to the weights, in the pages (keys lists
// the keys that hold a sum). A later step can be pending too: a worker whose
// batch for step t+1 has no key on this server pulls nothing here and may
// push t+1 (control keys only) before another worker's step t arrives; its
// model keys, which a worker pushes only after pulling them for that step
// here, cannot be ahead, but should any be, they are summed in grads.
type stepBuf struct {
	keys    []uint64
	grads   map[uint64]float64
	pushers map[int]bool
	rate    float64
}

// ServerStats counts what a server did.
type ServerStats struct {
	Pushes, Pulls   int           // training requests
	Held            int           // training pulls that had to wait
	HeldTime        time.Duration // their total waiting time
	MaxHeld         time.Duration // the longest wait
	StepsApplied    int           // BSP: steps applied
	Keys            int           // model keys created
	BufferedMaxKeys int           // BSP: most keys buffered for one step
}

// Store is a server's request handle: it keeps the weights of the keys in
// its range, created on first touch, updates them with an Optimizer, and
// enforces the consistency model by holding pull responses.
type Store struct {
	mu        sync.Mutex // guards everything below
	opt       Optimizer
	mode      SyncMode
	staleness int
	workers   int
	pages     map[uint64]*page // model keys, by key >> pageBits
	lastIdx   uint64           // the page param used last, a cache
	last      *page
	stats     map[uint64]float32
	pending   map[int]*stepBuf // BSP: step -> gradient sums
	applied   int              // BSP: steps 0..applied-1 are applied
	clock     []int            // SSP: clock[w] = steps worker w has pushed
	held      []held
	st        ServerStats
	errs      []error
}

// NewStore returns an empty store for a job with the given number of
// workers.
func NewStore(opt Optimizer, mode SyncMode, staleness, workers int) *Store {
	return &Store{
		opt:       opt,
		mode:      mode,
		staleness: staleness,
		workers:   workers,
		pages:     make(map[uint64]*page),
		stats:     make(map[uint64]float32),
		pending:   make(map[int]*stepBuf),
		clock:     make([]int, workers),
	}
}

// Handle is the KVServer request handle.
func (s *Store) Handle(meta kv.KVMeta, data kv.KVPairs[float32], srv *kv.KVServer[float32]) {
	s.Serve(meta, data, srv.Response)
}

// reply is a response to send once the lock is released.
type reply struct {
	meta kv.KVMeta
	res  kv.KVPairs[float32]
}

// Serve handles one request, answering it (now or later) through respond.
func (s *Store) Serve(meta kv.KVMeta, data kv.KVPairs[float32], respond Responder) {
	kind, step := splitCommand(meta.Cmd)
	worker := message.IDToRank(meta.Sender)
	s.mu.Lock()
	var out []reply
	if meta.Push {
		switch kind {
		case kindStats:
			for i, k := range data.Keys {
				s.stats[k] = data.Vals[i]
			}
		case kindTrain:
			s.push(worker, step, data)
		default:
			s.errs = append(s.errs, fmt.Errorf("push of kind %d from worker %d", kind, worker))
		}
		if !meta.Pull {
			out = append(out, reply{meta: meta})
		}
		out = s.release(out)
	}
	if meta.Pull {
		if kind == kindTrain {
			s.st.Pulls++
		}
		if s.ready(kind, step, data.Keys) {
			out = append(out, reply{meta, s.values(data.Keys)})
		} else {
			if kind == kindTrain {
				s.st.Held++
			}
			s.held = append(s.held, held{meta: meta, keys: append([]uint64(nil), data.Keys...), kind: kind, step: step, since: time.Now()})
		}
	}
	s.mu.Unlock()
	for _, r := range out {
		if err := respond(r.meta, r.res); err != nil {
			s.mu.Lock()
			s.errs = append(s.errs, err)
			s.mu.Unlock()
		}
	}
}

// push applies or buffers a training push of worker for step.
func (s *Store) push(worker, step int, data kv.KVPairs[float32]) {
	s.st.Pushes++
	per := 1
	if len(data.Keys) > 0 {
		per = len(data.Vals) / len(data.Keys)
	}
	if per != 1 {
		s.errs = append(s.errs, fmt.Errorf("push with %d values per key", per))
		return
	}
	rate := 1.0
	for i := len(data.Keys) - 1; i >= 0 && data.Keys[i] >= ctrlBase; i-- {
		rate = float64(data.Vals[i])
	}
	share := 1 / float64(s.workers)
	if s.mode == BSP && step < s.applied {
		// A step is applied only once every worker pushed it: a push for an
		// applied step is a duplicate or a worker out of step.
		s.errs = append(s.errs, fmt.Errorf("worker %d pushed step %d, already applied", worker, step))
		return
	}
	if s.mode == BSP {
		b := s.pending[step]
		if b == nil {
			b = &stepBuf{grads: make(map[uint64]float64), pushers: make(map[int]bool), rate: rate}
			s.pending[step] = b
		}
		for i, k := range data.Keys {
			if k >= statsBase {
				continue
			}
			g := float64(data.Vals[i])
			if step != s.applied {
				b.grads[k] += g
				continue
			}
			pg, j := s.slot(k)
			if pg.bsp == nil {
				pg.bsp = new(pageStep)
			}
			if !pg.bsp.inStep[j] {
				pg.bsp.inStep[j] = true
				b.keys = append(b.keys, k)
			}
			pg.bsp.grad[j] += g
		}
		s.st.BufferedMaxKeys = max(s.st.BufferedMaxKeys, len(b.keys)+len(b.grads))
		b.pushers[worker] = true
		// Apply every complete step, in order.
		for {
			b := s.pending[s.applied]
			if b == nil || len(b.pushers) < s.workers {
				break
			}
			for _, k := range b.keys {
				pg, j := s.slot(k)
				g := pg.bsp.grad[j]
				pg.bsp.grad[j], pg.bsp.inStep[j] = 0, false
				s.opt.Update(&pg.params[j], g, 1, b.rate)
			}
			for k, g := range b.grads {
				s.opt.Update(s.param(k), g, 1, b.rate)
			}
			delete(s.pending, s.applied)
			s.applied++
			s.st.StepsApplied++
		}
		return
	}
	for i, k := range data.Keys {
		if k < statsBase {
			s.opt.Update(s.param(k), float64(data.Vals[i]), share, rate)
		}
	}
	if s.mode == SSP && worker < len(s.clock) {
		s.clock[worker] = max(s.clock[worker], step+1)
	}
}

// pageBits sets the size of the blocks in which a Store allocates keys.
const pageBits = 10

// page holds the state of 1<<pageBits consecutive keys; a key exists once
// touched. Under BSP, bsp sums the step being applied.
type page struct {
	params  [1 << pageBits]Param
	touched [1 << pageBits]bool
	bsp     *pageStep // allocated by the first BSP push to the page
}

// pageStep sums the gradient of the BSP step being applied for the keys of
// a page marked inStep.
type pageStep struct {
	grad   [1 << pageBits]float64
	inStep [1 << pageBits]bool
}

// param returns key k's state, creating it on first touch.
func (s *Store) param(k uint64) *Param {
	pg, j := s.slot(k)
	return &pg.params[j]
}

// slot returns the page and index of key k, creating the key on first
// touch. Keys are kept in pages of consecutive keys, so that the dense keys
// of a model cost one map look-up per page rather than per key.
func (s *Store) slot(k uint64) (*page, int) {
	idx := k >> pageBits
	pg := s.last
	if pg == nil || idx != s.lastIdx {
		pg = s.pages[idx]
		if pg == nil {
			pg = new(page)
			s.pages[idx] = pg
		}
		s.last, s.lastIdx = pg, idx
	}
	j := int(k & (1<<pageBits - 1))
	if !pg.touched[j] {
		pg.touched[j] = true
		s.st.Keys++
	}
	return pg, j
}

// ready reports whether a pull of keys of the given kind at step may be
// answered now.
func (s *Store) ready(kind, step int, keys []uint64) bool {
	switch kind {
	case kindStats:
		for _, k := range keys {
			if _, ok := s.stats[k]; !ok {
				return false
			}
		}
		return true
	case kindTrain:
		switch s.mode {
		case BSP:
			return s.applied >= step
		case SSP:
			return s.minClock() >= step-s.staleness
		}
	}
	return true
}

func (s *Store) minClock() int {
	m := math.MaxInt
	for _, c := range s.clock {
		m = min(m, c)
	}
	return m
}

// values returns the current weights (or statistics) of keys.
func (s *Store) values(keys []uint64) kv.KVPairs[float32] {
	res := kv.KVPairs[float32]{Keys: keys, Vals: make([]float32, len(keys))}
	for i, k := range keys {
		if k >= statsBase {
			res.Vals[i] = s.stats[k]
			continue
		}
		res.Vals[i] = float32(s.param(k).W)
	}
	return res
}

// release appends the answers of the held pulls that are now ready.
func (s *Store) release(out []reply) []reply {
	kept := s.held[:0]
	now := time.Now()
	for _, h := range s.held {
		if !s.ready(h.kind, h.step, h.keys) {
			kept = append(kept, h)
			continue
		}
		if h.kind == kindTrain {
			d := now.Sub(h.since)
			s.st.HeldTime += d
			s.st.MaxHeld = max(s.st.MaxHeld, d)
		}
		out = append(out, reply{h.meta, s.values(h.keys)})
	}
	for i := len(kept); i < len(s.held); i++ {
		s.held[i] = held{}
	}
	s.held = kept
	return out
}

// Stats returns the counters, and the errors seen (requests that did not
// fit the protocol, responses that failed).
func (s *Store) Stats() (ServerStats, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st, append([]error(nil), s.errs...)
}

// Weight returns key k's weight (0 for a key never touched).
func (s *Store) Weight(k uint64) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pg := s.pages[k>>pageBits]; pg != nil {
		return pg.params[k&(1<<pageBits-1)].W
	}
	return 0
}

// HeldPulls returns the number of pulls waiting.
func (s *Store) HeldPulls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// Summary describes what the server did, for its last output line.
func (st ServerStats) Summary(mode SyncMode) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d keys, %d pushes, %d pulls", st.Keys, st.Pushes, st.Pulls)
	if mode != ASP {
		mean := time.Duration(0)
		if st.Held > 0 {
			mean = st.HeldTime / time.Duration(st.Held)
		}
		fmt.Fprintf(&b, ", %d pulls held (%.1f%%, mean %v, max %v)", st.Held,
			100*float64(st.Held)/float64(max(st.Pulls, 1)), mean.Round(time.Microsecond), st.MaxHeld.Round(time.Microsecond))
	}
	if mode == BSP {
		fmt.Fprintf(&b, ", %d steps applied, at most %d keys buffered", st.StepsApplied, st.BufferedMaxKeys)
	}
	return b.String()
}

// keyRouter sends model keys to servers by splitting each fold's key space
// [0, numKeys) into equal contiguous parts, statistics keys to server 0 and
// control key ctrlBase+s to server s.
type keyRouter struct {
	numKeys uint64
}

// route returns the server of key k and the smallest key above k that may
// go elsewhere (0 when none).
func (r keyRouter) route(k uint64, servers int) (server int, next uint64, err error) {
	n, S := r.numKeys, uint64(servers)
	switch {
	case k >= ctrlBase:
		s := k - ctrlBase
		if s >= S {
			return 0, 0, fmt.Errorf("control key for server %d of %d", s, servers)
		}
		return int(s), k + 1, nil
	case k >= statsBase:
		return 0, ctrlBase, nil
	default:
		fold, local := k/n, k%n
		s := local * S / n
		// Keys with floor(local·S/n) = s are those below ceil((s+1)·n/S).
		end := ((s+1)*n + S - 1) / S
		return int(s), fold*n + end, nil
	}
}

// Slicer is a kv.Slicer for this key layout. Keys must be sorted. A part
// shares memory with kvs unless a server's keys come in several runs (a
// push's model keys and its control key), which are then copied together.
// KVWorker reassembles pulls by key order, so a pull's keys must reach the
// servers in ascending runs: one fold's model keys, or statistics keys.
func (r keyRouter) Slicer(kvs kv.KVPairs[float32], ranges []postoffice.Range) ([]kv.KVPairs[float32], error) {
	parts := make([]kv.KVPairs[float32], len(ranges))
	keys := kvs.Keys
	if len(keys) == 0 {
		return parts, nil
	}
	if len(kvs.Lens) > 0 {
		return nil, fmt.Errorf("lr slicer: lens are not supported")
	}
	per := 0
	if len(kvs.Vals) > 0 {
		per = len(kvs.Vals) / len(keys)
	}
	shared := make([]bool, len(parts)) // part still aliases kvs
	for i := 0; i < len(keys); {
		s, next, err := r.route(keys[i], len(ranges))
		if err != nil {
			return nil, err
		}
		j := i + 1
		if next > keys[i] {
			j += sort.Search(len(keys)-j, func(x int) bool { return keys[j+x] >= next })
		} else {
			j = len(keys)
		}
		for x := i + 1; x < j; x++ {
			if keys[x] <= keys[x-1] {
				return nil, kv.ErrUnsortedKeys
			}
		}
		p := &parts[s]
		p.Priority = kvs.Priority
		switch {
		case len(p.Keys) == 0:
			p.Keys = keys[i:j]
			p.Vals = kvs.Vals[i*per : j*per]
			shared[s] = true
		case shared[s]:
			p.Keys = append(append(make([]uint64, 0, len(p.Keys)+j-i), p.Keys...), keys[i:j]...)
			p.Vals = append(append(make([]float32, 0, len(p.Vals)+(j-i)*per), p.Vals...), kvs.Vals[i*per:j*per]...)
			shared[s] = false
		default:
			p.Keys = append(p.Keys, keys[i:j]...)
			p.Vals = append(p.Vals, kvs.Vals[i*per:j*per]...)
		}
		if j < len(keys) && keys[j] <= keys[j-1] {
			return nil, kv.ErrUnsortedKeys
		}
		i = j
	}
	return parts, nil
}
