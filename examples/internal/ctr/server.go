package ctr

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

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

// Statistics keys: worker rank's field f of round r (the census is round 0,
// then one round per epoch, over all folds) is statsKey(r, rank, f).
const (
	statsFieldBits = 20
	statsRankBits  = 12
	maxStatsRound  = 1<<(61-statsFieldBits-statsRankBits) - 1
)

// statsKey returns the key of field f of worker rank's statistics for round r.
func statsKey(round, rank, f int) uint64 {
	return statsBase | uint64(round)<<(statsFieldBits+statsRankBits) | uint64(rank)<<statsFieldBits | uint64(f)
}

// statsRound returns the round of a statistics key.
func statsRound(k uint64) int { return int((k - statsBase) >> (statsFieldBits + statsRankBits)) }

// Request kinds, in the low three bits of a request's command; the step
// number is in the bits above.
const (
	kindTrain    = 0 // pushes of gradients, pulls of weights under the consistency model
	kindStats    = 1 // statistics: a pull waits until every key asked for was pushed
	kindFinal    = 2 // pulls of weights answered at once (the workers synchronise before)
	kindInit     = 3 // pushes of a saved model's state (warm start): W, Z, N per key
	kindSnapshot = 4 // pushes of one control key: save the model (step = round) or restore it
	kindDump     = 5 // pull of a control key: every model key of the server's range, with state
	kindJob      = 6 // pushes of one control key per server: the job's run or key layout (the step says which)
)

// Job commands, the step of a kindJob push; the values follow the control
// key, each uint64 in two float32s (see appendUint64).
const (
	// jobBegin: a run of the job begins, value the snapshot it resumed
	// from (ps.Restored). Workers send it only when that is not 0: a
	// server restored from a snapshot of another run then starts its
	// consistency state, statistics and saved model over, keeping the
	// model (a warm start).
	jobBegin = 0
	// jobLayout: the key layout, values the model keys per fold and the
	// number of servers. Every worker sends it before its first model key.
	jobLayout = 1
)

// Snapshot commands, the step of a kindSnapshot push.
const (
	snapshotRestore = 0 // restore the last saved model
	// a positive step saves the model, once per round: every worker asks
	// and the first request of a round is the one that counts
)

// maxStep is the largest step number a command can carry.
const maxStep = math.MaxInt32 >> 3

// command packs a request kind and a step into a KV command.
func command(kind, step int) int { return step<<3 | kind }

// splitCommand is the inverse of command.
func splitCommand(cmd int) (kind, step int) { return cmd & 7, cmd >> 3 }

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

// Responder answers a request; a recorder in tests (Serve). The response's
// slices are not changed afterwards.
type Responder func(meta kv.KVMeta, res kv.KVPairs[float32]) error

// held is a pull waiting for its consistency condition.
type held struct {
	answer func(kv.KVPairs[float32], error)
	keys   []uint64 // a copy: the request's may be lent
	kind   int
	step   int
	parts  []int // training pulls: the parts whose condition they wait for
	since  time.Time
}

// stepBuf collects the gradients of one BSP step of one part. The step
// being applied (partState.applied) sums them next to the weights, in the
// table (keys lists the keys that hold a sum). A later step can be pending
// too: a worker whose batch for step t+1 has no key on this server pulls
// nothing here and may push t+1 (control keys only) before another
// worker's step t arrives; its model keys, which a worker pushes only
// after pulling them for that step here, cannot be ahead, but should any
// be, they are summed in grads, and moved next to the weights when the
// step becomes the one being applied.
type stepBuf struct {
	keys    []uint64
	grads   map[uint64]float64
	pushers map[int]bool
	rate    float64
}

// partState is the state of one part (the range of one server when all are
// alive) besides its keys' entries: the run it belongs to, the consistency
// model's clocks and step buffers, and the saved model. A request to a
// part changes only that part's state and entries, so that every server
// holding the part, whatever else it holds, keeps the same state.
type partState struct {
	run     uint64           // the run: the snapshot its job resumed from (0: none)
	applied int              // BSP: steps 0..applied-1 are applied
	pending map[int]*stepBuf // BSP: step -> gradient sums
	clock   []int            // SSP: clock[w] = steps worker w has pushed
	saved   []savedParam     // the saved model (early stopping's best), by key
	savedAt int              // the round it was saved for (0: none saved)
}

// savedParam is a key's saved state.
type savedParam struct {
	key uint64
	p   Param
}

// ServerStats counts what a server did.
type ServerStats struct {
	Pushes, Pulls   int           // training requests
	Held            int           // training pulls that had to wait
	HeldTime        time.Duration // their total waiting time
	MaxHeld         time.Duration // the longest wait
	StepsApplied    int           // BSP: steps applied (over the parts the server held)
	Keys            int           // model keys held
	Dim             int           // values per model key (SetDim)
	BufferedMaxKeys int           // BSP: most keys buffered for one step
}

// Store is a server's state: it keeps the state of the keys in its range
// that were pushed, updates them with an Optimizer, and enforces the
// consistency model by holding pull responses. It is a kv.Store and a
// kv.AsyncReader (install it with KVServer.SetStore): in a job with
// PS_REPLICAS every server holding a range keeps the same state, and with
// PS_CHECKPOINT_DIR it is written to disk (see Snapshot for what it
// holds). Its methods may be called from any goroutine.
type Store struct {
	mu        sync.Mutex // guards everything below
	opt       Optimizer
	mode      SyncMode
	staleness int
	workers   int
	numKeys   uint64 // model keys per fold (jobLayout); 0 until told
	servers   int    // the job's servers (jobLayout, Restore); 0 until told
	params    table
	parts     map[int]*partState         // by part index
	stats     map[int]map[uint64]float32 // by round (part 0's)
	held      []held
	st        ServerStats
	errs      []error
	// initStd and initSeed, when initStd > 0, start every key at
	// initFactor(key, initSeed, initStd) (a factor model's factors).
	initStd  float64
	initSeed uint64
	dim      int // values per model key (SetDim); 0 or 1: one
}

var (
	_ kv.Store[float32]       = (*Store)(nil)
	_ kv.AsyncReader[float32] = (*Store)(nil)
)

// NewStore returns an empty store for a job with the given number of
// workers.
func NewStore(opt Optimizer, mode SyncMode, staleness, workers int) *Store {
	return &Store{
		opt:       opt,
		mode:      mode,
		staleness: staleness,
		workers:   workers,
		parts:     make(map[int]*partState),
		stats:     make(map[int]map[uint64]float32),
	}
}

// SetInit has the store start every key at a normal draw of standard
// deviation std that depends on the key and seed alone (initFactor), as a
// factor model's factors must start: at zero their gradients would stay
// zero. Keys never pushed are not stored: a pull answers their start.
// Call it before the store serves.
func (s *Store) SetInit(std float64, seed uint64) {
	s.mu.Lock()
	s.initStd, s.initSeed = std, seed
	s.mu.Unlock()
}

// SetDim makes every model key carry dim values (a feature's factors):
// training pushes and pulls have dim values per key, and the store keeps
// value j of key k as its own parameter k·dim+j, with its own optimiser
// state, a key's values side by side in its table (one run). Control keys
// keep their own formats; a training push's control key carries the
// learning-rate scale as the first of its dim values. Call it before the
// store serves.
func (s *Store) SetDim(dim int) {
	s.mu.Lock()
	s.dim = max(dim, 1)
	s.params.group = uint64(s.dim)
	s.mu.Unlock()
}

// checkModelKeys refuses model keys whose values' parameters would not
// fit below statsBase (k·dim+j would wrap around and alias another key):
// the workers' layout never makes them.
func (s *Store) checkModelKeys(keys []uint64) error {
	if s.dim <= 1 {
		return nil
	}
	limit := statsBase / uint64(s.dim)
	for _, k := range keys {
		if k >= limit && k < statsBase {
			return fmt.Errorf("model key %d of %d values is beyond the key space", k, s.dim)
		}
	}
	return nil
}

// keyOf returns the model key whose value the stored parameter k is.
func (s *Store) keyOf(k uint64) uint64 { return k / uint64(max(s.dim, 1)) }

// errNoLayout refuses model keys before the workers sent the key layout,
// which they do before their first model key.
var errNoLayout = errors.New("model keys before the key layout (the workers send it first)")

// maxServers bounds the servers a layout or control key may name.
const maxServers = 1 << 16

// reply is an answer to give once the lock is released.
type reply struct {
	answer func(kv.KVPairs[float32], error)
	res    kv.KVPairs[float32]
}

// Changes implements kv.Store: every push changes the store (a training
// push, statistics, a warm start, the saved model, the run and the
// layout), pulls never do.
func (s *Store) Changes(meta kv.KVMeta, _ kv.KVPairs[float32]) bool { return meta.Push }

// Apply implements kv.Store: it applies a push and answers a pull at once,
// whatever the consistency model (a push-pull, which the workers never
// send, cannot wait; a pull without a push comes here only to be read
// again). It answers the held pulls that a push makes ready. A request
// that does not fit the protocol changes nothing and is answered with its
// error (Stats reports it too).
func (s *Store) Apply(meta kv.KVMeta, data kv.KVPairs[float32]) (kv.KVPairs[float32], error) {
	kind, step := splitCommand(meta.Cmd)
	s.mu.Lock()
	var res kv.KVPairs[float32]
	var err error
	var out []reply
	if meta.Push {
		err = s.change(kind, step, message.IDToRank(meta.Sender), data)
		out = s.release(out)
	}
	if err == nil && meta.Pull {
		res, err = s.readNow(kind, data.Keys)
	}
	if err != nil {
		s.errs = append(s.errs, err)
	}
	s.mu.Unlock()
	for _, r := range out {
		r.answer(r.res, nil)
	}
	return res, err
}

// Read implements kv.AsyncReader: it answers a pull now, or holds it until
// its consistency condition holds (a training pull under BSP or SSP, a
// statistics pull until every key asked for was pushed) and answers it
// from the goroutine of the push that makes it ready.
func (s *Store) Read(meta kv.KVMeta, data kv.KVPairs[float32], answer func(kv.KVPairs[float32], error)) {
	kind, step := splitCommand(meta.Cmd)
	s.mu.Lock()
	res, wait, err := s.read(kind, step, data.Keys, answer)
	if err != nil {
		s.errs = append(s.errs, err)
	}
	s.mu.Unlock()
	if !wait {
		answer(res, err)
	}
}

// Serve handles one request outside a KVServer (tests drive the store so),
// answering it now or later through respond; a request refused is not
// answered (Stats reports its error).
func (s *Store) Serve(meta kv.KVMeta, data kv.KVPairs[float32], respond Responder) {
	answer := func(res kv.KVPairs[float32], err error) {
		if err != nil {
			return // recorded by Apply or Read
		}
		if err := respond(meta, res); err != nil {
			s.mu.Lock()
			s.errs = append(s.errs, err)
			s.mu.Unlock()
		}
	}
	if s.Changes(meta, data) {
		answer(s.Apply(meta, data))
		return
	}
	s.Read(meta, data, answer)
}

// change applies a push of kind and step from worker.
func (s *Store) change(kind, step, worker int, data kv.KVPairs[float32]) error {
	switch kind {
	case kindStats:
		return s.pushStats(data)
	case kindTrain:
		return s.push(worker, step, data)
	case kindInit:
		return s.init(data)
	case kindSnapshot:
		part, err := s.ctrlPart(data.Keys)
		if err != nil {
			return fmt.Errorf("snapshot command: %w", err)
		}
		return s.snapshot(part, step)
	case kindJob:
		return s.job(step, data)
	}
	return fmt.Errorf("push of kind %d from worker %d", kind, worker)
}

// read answers a pull now (wait false), or holds it to answer later.
func (s *Store) read(kind, step int, keys []uint64, answer func(kv.KVPairs[float32], error)) (res kv.KVPairs[float32], wait bool, err error) {
	var parts []int
	switch kind {
	case kindTrain:
		s.st.Pulls++
		if err = s.checkModelKeys(keys); err != nil {
			return res, false, fmt.Errorf("training pull: %w", err)
		}
		if s.mode != ASP {
			if parts, err = s.partsOf(keys); err != nil {
				return res, false, fmt.Errorf("training pull: %w", err)
			}
		}
	case kindStats:
		for _, k := range keys {
			if k < statsBase || k >= ctrlBase {
				return res, false, fmt.Errorf("statistics pull of key %d", k)
			}
		}
	default:
		res, err = s.readNow(kind, keys)
		return res, false, err
	}
	if s.ready(kind, step, parts, keys) {
		return s.values(keys), false, nil
	}
	if kind == kindTrain {
		s.st.Held++
	}
	s.held = append(s.held, held{answer: answer, keys: slices.Clone(keys), kind: kind, step: step, parts: parts, since: time.Now()})
	return res, true, nil
}

// readNow answers a pull at once.
func (s *Store) readNow(kind int, keys []uint64) (kv.KVPairs[float32], error) {
	switch kind {
	case kindDump:
		return s.dump(keys)
	case kindTrain, kindStats, kindFinal:
		if err := s.checkModelKeys(keys); err != nil {
			return kv.KVPairs[float32]{}, fmt.Errorf("pull: %w", err)
		}
		return s.values(keys), nil
	}
	return kv.KVPairs[float32]{}, fmt.Errorf("pull of kind %d", kind)
}

// part returns part r's state, creating it.
func (s *Store) part(r int) *partState {
	ps := s.parts[r]
	if ps == nil {
		ps = &partState{pending: make(map[int]*stepBuf), clock: make([]int, s.workers)}
		s.parts[r] = ps
	}
	return ps
}

// ctrlPart returns the part a request's control key names: the request
// must carry exactly one, its last key.
func (s *Store) ctrlPart(keys []uint64) (int, error) {
	n := len(keys)
	if n == 0 || keys[n-1] < ctrlBase {
		return 0, errors.New("no control key")
	}
	if n > 1 && keys[n-2] >= ctrlBase {
		return 0, errors.New("control keys of several servers")
	}
	p := keys[n-1] - ctrlBase
	if p >= maxServers || (s.servers > 0 && p >= uint64(s.servers)) {
		return 0, fmt.Errorf("control key of server %d of %d", p, s.servers)
	}
	return int(p), nil
}

// partsOf returns the parts (in order) that keys, sorted model and
// statistics keys, belong to among the job's servers.
func (s *Store) partsOf(keys []uint64) ([]int, error) {
	var parts []int
	r := keyRouter{numKeys: s.numKeys}
	for i := 0; i < len(keys); {
		k := keys[i]
		if k >= ctrlBase {
			return nil, fmt.Errorf("control key %d among model keys", k)
		}
		if k < statsBase && (s.numKeys == 0 || s.servers == 0) {
			return nil, errNoLayout
		}
		p, next, err := r.route(k, s.servers)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
		if next <= k {
			break
		}
		j := i + 1
		i = j + sort.Search(len(keys)-j, func(x int) bool { return keys[j+x] >= next })
	}
	slices.Sort(parts)
	return parts, nil
}

// inPart checks that model keys (sorted) all belong to part.
func (s *Store) inPart(keys []uint64, part int) error {
	if len(keys) == 0 {
		return nil
	}
	parts, err := s.partsOf(keys)
	if err != nil {
		return err
	}
	if len(parts) != 1 || parts[0] != part {
		return fmt.Errorf("keys of servers %v in a request for server %d", parts, part)
	}
	return nil
}

// pushStats stores statistics; a push of round r forgets rounds before r-1,
// which every worker has pulled by then.
func (s *Store) pushStats(data kv.KVPairs[float32]) error {
	if len(data.Vals) != len(data.Keys) {
		return fmt.Errorf("statistics push with %d values for %d keys", len(data.Vals), len(data.Keys))
	}
	for _, k := range data.Keys {
		if k < statsBase || k >= ctrlBase {
			return fmt.Errorf("statistics push of key %d", k)
		}
	}
	for i, k := range data.Keys {
		r := statsRound(k)
		m := s.stats[r]
		if m == nil {
			m = make(map[uint64]float32)
			s.stats[r] = m
			for old := range s.stats {
				if old < r-1 {
					delete(s.stats, old)
				}
			}
		}
		m[k] = data.Vals[i]
	}
	return nil
}

// init sets the state of keys from a saved model: W, Z, N per key, each a
// float64 in two float32s (see packFloat64).
func (s *Store) init(data kv.KVPairs[float32]) error {
	if len(data.Vals) != 6*len(data.Keys) {
		return fmt.Errorf("init push with %d values for %d keys", len(data.Vals), len(data.Keys))
	}
	keys := data.Keys
	if n := len(keys); n > 0 && keys[n-1] >= statsBase {
		return fmt.Errorf("init push of key %d", keys[n-1])
	}
	if parts, err := s.partsOf(keys); err != nil {
		return fmt.Errorf("init push: %w", err)
	} else if len(parts) > 1 {
		return fmt.Errorf("init push of keys of servers %v", parts)
	}
	for i, k := range keys {
		v := data.Vals[6*i:]
		p := &s.entry(k).p
		p.W, p.Z, p.N = unpackFloat64(v[0:2]), unpackFloat64(v[2:4]), unpackFloat64(v[4:6])
	}
	return nil
}

// job carries out a kindJob command.
func (s *Store) job(cmd int, data kv.KVPairs[float32]) error {
	part, err := s.ctrlPart(data.Keys)
	if err != nil {
		return fmt.Errorf("job command %d: %w", cmd, err)
	}
	v := data.Vals
	switch cmd {
	case jobBegin:
		if len(data.Keys) != 1 || len(v) != 2 {
			return fmt.Errorf("run push with %d values for %d keys", len(v), len(data.Keys))
		}
		ps := s.part(part)
		if run := unpackUint64(v); run != ps.run {
			s.resetRun(part, ps)
			ps.run = run
		}
		return nil
	case jobLayout:
		if len(data.Keys) != 1 || len(v) != 4 {
			return fmt.Errorf("layout push with %d values for %d keys", len(v), len(data.Keys))
		}
		n, servers := unpackUint64(v[0:2]), unpackUint64(v[2:4])
		switch {
		case n == 0 || n > statsBase || servers == 0 || servers > maxServers || uint64(part) >= servers:
			return fmt.Errorf("layout of %d keys per fold on %d servers, sent to server %d", n, servers, part)
		case s.numKeys != 0 && s.numKeys != n:
			return fmt.Errorf("this server's model has %d keys per fold, the workers lay out %d: a job resumed from a snapshot must have the same data, -loss and -hash-bits (or use another PS_CHECKPOINT_DIR)", s.numKeys, n)
		case s.servers != 0 && s.servers != int(servers):
			return fmt.Errorf("the workers lay keys out on %d servers, this server is one of %d", servers, s.servers)
		}
		s.numKeys, s.servers = n, int(servers)
		return nil
	}
	return fmt.Errorf("job command %d", cmd)
}

// resetRun starts part's consistency state, saved model and (part 0)
// statistics over, for a new run of the job; the model stays.
func (s *Store) resetRun(part int, ps *partState) {
	if b := ps.pending[ps.applied]; b != nil {
		for _, k := range b.keys {
			if e := s.params.find(k); e != nil {
				e.g, e.inStep = 0, false
			}
		}
	}
	*ps = partState{pending: make(map[int]*stepBuf), clock: make([]int, s.workers)}
	if part == 0 {
		s.stats = make(map[int]map[uint64]float32)
	}
}

// snapshot saves part's model (cmd > 0: for round cmd, once) or restores
// the saved one.
func (s *Store) snapshot(part, cmd int) error {
	ps := s.part(part)
	switch {
	case cmd == snapshotRestore:
		if ps.savedAt > 0 {
			return s.replacePart(part, ps.saved)
		}
	case cmd > ps.savedAt:
		es, err := s.partEntries(part, s.servers)
		if err != nil {
			return err
		}
		saved := make([]savedParam, len(es))
		for i, e := range es {
			saved[i] = savedParam{key: e.key - 1, p: e.p}
		}
		ps.saved, ps.savedAt = saved, cmd
	}
	return nil
}

// replacePart replaces the model of part's keys with saved. The sums of
// the step being applied stay (next to the saved weights).
func (s *Store) replacePart(part int, saved []savedParam) error {
	if s.params.n > 0 && (s.numKeys == 0 || s.servers <= 0) {
		return errNoLayout
	}
	r := keyRouter{numKeys: s.numKeys}
	t := table{group: s.params.group}
	var err error
	s.params.each(func(e *entry) {
		p, _, rerr := r.route(s.keyOf(e.key-1), s.servers)
		if rerr != nil {
			err = rerr
		}
		if p != part || rerr != nil {
			ne, _ := t.get(e.key - 1)
			*ne = *e
		} else if e.inStep {
			ne, _ := t.get(e.key - 1)
			ne.g, ne.inStep = e.g, true
		}
	})
	if err != nil {
		return err
	}
	for _, sp := range saved {
		ne, _ := t.get(sp.key)
		ne.p = sp.p
	}
	s.params = t
	return nil
}

// partEntries returns the entries of part's keys among servers, by key.
func (s *Store) partEntries(part, servers int) ([]entry, error) {
	if s.params.n == 0 {
		return nil, nil
	}
	if s.numKeys == 0 || servers <= 0 {
		return nil, errNoLayout
	}
	r := keyRouter{numKeys: s.numKeys}
	var es []entry
	s.params.each(func(e *entry) {
		if p, _, err := r.route(s.keyOf(e.key-1), servers); err == nil && p == part {
			es = append(es, *e)
		}
	})
	slices.SortFunc(es, func(a, b entry) int { return cmpUint64(a.key, b.key) })
	return es, nil
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// dump answers a kindDump pull of a control key: the value of control key
// ctrlBase+s is ignored; the answer is one value list holding, for every
// model key k of part s, key, W, Z, N as four float64s in two float32s
// each, in key order.
func (s *Store) dump(keys []uint64) (kv.KVPairs[float32], error) {
	part, err := s.ctrlPart(keys)
	if err != nil {
		return kv.KVPairs[float32]{}, fmt.Errorf("dump: %w", err)
	}
	es, err := s.partEntries(part, s.servers)
	if err != nil {
		return kv.KVPairs[float32]{}, fmt.Errorf("dump: %w", err)
	}
	vals := make([]float32, 0, 8*len(es))
	for i := range es {
		p := &es[i].p
		vals = appendUint64(vals, es[i].key-1)
		vals = appendFloat64(vals, p.W)
		vals = appendFloat64(vals, p.Z)
		vals = appendFloat64(vals, p.N)
	}
	lens := make([]int32, len(keys))
	lens[0] = int32(len(vals))
	return kv.KVPairs[float32]{Keys: keys, Vals: vals, Lens: lens}, nil
}

// push applies or buffers a training push of worker for step: model keys
// with their gradients, then the control key of the part with the step's
// learning-rate scale.
func (s *Store) push(worker, step int, data kv.KVPairs[float32]) error {
	s.st.Pushes++
	keys := data.Keys
	d := max(s.dim, 1)
	if len(data.Vals) != d*len(keys) {
		return fmt.Errorf("training push with %d values for %d keys of %d", len(data.Vals), len(keys), d)
	}
	if worker < 0 || worker >= s.workers {
		return fmt.Errorf("training push from worker %d of %d", worker, s.workers)
	}
	part, err := s.ctrlPart(keys)
	if err != nil {
		return fmt.Errorf("training push: %w", err)
	}
	n := len(keys) - 1
	model, grads := keys[:n], data.Vals[:n*d]
	if n > 0 && model[n-1] >= statsBase {
		return fmt.Errorf("training push of key %d", model[n-1])
	}
	if err := s.inPart(model, part); err != nil {
		return fmt.Errorf("training push: %w", err)
	}
	if err := s.checkModelKeys(model); err != nil {
		return fmt.Errorf("training push: %w", err)
	}
	rate := float64(data.Vals[n*d])
	ps := s.part(part)
	if s.mode == BSP {
		return s.pushStep(ps, worker, step, model, grads, rate)
	}
	share := 1 / float64(s.workers)
	for i, k := range model {
		run := s.run(k)
		for j := range run {
			s.opt.Update(&run[j].p, float64(grads[i*d+j]), share, rate)
		}
	}
	if s.mode == SSP {
		ps.clock[worker] = max(ps.clock[worker], step+1)
	}
	return nil
}

// pushStep buffers a BSP push and applies every complete step, in order.
func (s *Store) pushStep(ps *partState, worker, step int, keys []uint64, grads []float32, rate float64) error {
	if step < ps.applied {
		// A step is applied only once every worker pushed it: a push for an
		// applied step is a duplicate or a worker out of step.
		return fmt.Errorf("worker %d pushed step %d, already applied", worker, step)
	}
	b := ps.pending[step]
	if b == nil {
		b = &stepBuf{grads: make(map[uint64]float64), pushers: make(map[int]bool), rate: rate}
		ps.pending[step] = b
	}
	d := max(s.dim, 1)
	for i, key := range keys {
		for j, g32 := range grads[i*d : (i+1)*d] {
			k, g := key*uint64(d)+uint64(j), float64(g32)
			if step != ps.applied {
				b.grads[k] += g
				continue
			}
			s.addToStep(b, k, g)
		}
	}
	s.st.BufferedMaxKeys = max(s.st.BufferedMaxKeys, len(b.keys)+len(b.grads))
	b.pushers[worker] = true
	for {
		b := ps.pending[ps.applied]
		if b == nil || len(b.pushers) < s.workers {
			break
		}
		for _, k := range b.keys {
			e := s.params.find(k)
			if e == nil || !e.inStep {
				continue // cannot happen: a key of the step keeps its entry
			}
			g := e.g
			e.g, e.inStep = 0, false
			s.opt.Update(&e.p, g, 1, b.rate)
		}
		delete(ps.pending, ps.applied)
		ps.applied++
		s.st.StepsApplied++
		// The next step's early sums join the weights now.
		if b := ps.pending[ps.applied]; b != nil {
			for k, g := range b.grads {
				s.addToStep(b, k, g)
			}
			b.grads = make(map[uint64]float64)
		}
	}
	return nil
}

// addToStep adds g to key k's sum in the step being applied, b.
func (s *Store) addToStep(b *stepBuf, k uint64, g float64) {
	e := s.entry(k)
	if !e.inStep {
		e.inStep = true
		b.keys = append(b.keys, k)
	}
	e.g += g
}

// entry returns key k's entry, creating it on first touch.
func (s *Store) entry(k uint64) *entry {
	r, j := s.params.split(k)
	return &s.run(r)[j]
}

// run returns the entries of model key r's values, creating them on first
// touch, each at its start.
func (s *Store) run(r uint64) []entry {
	run, created := s.params.getRun(r)
	if created && s.initStd > 0 {
		g := uint64(len(run))
		for x := range run {
			run[x].p = s.opt.Start(initFactor(r*g+uint64(x), s.initSeed, s.initStd))
		}
	}
	return run
}

// ready reports whether a pull of keys (of parts) of the given kind at step
// may be answered now.
func (s *Store) ready(kind, step int, parts []int, keys []uint64) bool {
	switch kind {
	case kindStats:
		for _, k := range keys {
			if _, ok := s.stats[statsRound(k)][k]; !ok {
				return false
			}
		}
		return true
	case kindTrain:
		for _, p := range parts {
			ps := s.parts[p]
			switch s.mode {
			case BSP:
				if ps == nil && step > 0 || ps != nil && ps.applied < step {
					return false
				}
			case SSP:
				if step-s.staleness > 0 && (ps == nil || minClock(ps.clock) < step-s.staleness) {
					return false
				}
			}
		}
	}
	return true
}

// minClock returns the smallest of clocks (MaxInt for none).
func minClock(clocks []int) int {
	m := math.MaxInt
	for _, c := range clocks {
		m = min(m, c)
	}
	return m
}

// values returns the current weights (or statistics) of keys; a key never
// pushed has weight 0 and is not created.
func (s *Store) values(keys []uint64) kv.KVPairs[float32] {
	d := max(s.dim, 1)
	res := kv.KVPairs[float32]{Keys: keys, Vals: make([]float32, d*len(keys))}
	for i, k := range keys {
		if k >= statsBase {
			res.Vals[i*d] = s.stats[statsRound(k)][k]
			continue
		}
		out := res.Vals[i*d : (i+1)*d]
		if run := s.params.findRun(k); run != nil {
			for j := range out {
				out[j] = float32(run[j].p.W)
			}
		} else if s.initStd > 0 {
			for j := range out {
				out[j] = float32(initFactor(k*uint64(d)+uint64(j), s.initSeed, s.initStd))
			}
		}
	}
	return res
}

// release appends the answers of the held pulls that are now ready.
func (s *Store) release(out []reply) []reply {
	if len(s.held) == 0 {
		return out
	}
	kept := s.held[:0]
	now := time.Now()
	for _, h := range s.held {
		if !s.ready(h.kind, h.step, h.parts, h.keys) {
			kept = append(kept, h)
			continue
		}
		if h.kind == kindTrain {
			d := now.Sub(h.since)
			s.st.HeldTime += d
			s.st.MaxHeld = max(s.st.MaxHeld, d)
		}
		out = append(out, reply{h.answer, s.values(h.keys)})
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
	st := s.st
	st.Keys, st.Dim = s.params.runs, max(s.dim, 1)
	return st, append([]error(nil), s.errs...)
}

// Weight returns key k's weight (0 for a key never touched).
func (s *Store) Weight(k uint64) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.params.find(k); e != nil {
		return e.p.W
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
	fmt.Fprintf(&b, "%d keys", st.Keys)
	if st.Dim > 1 {
		fmt.Fprintf(&b, " of %d values", st.Dim)
	}
	fmt.Fprintf(&b, ", %d pushes, %d pulls", st.Pushes, st.Pulls)
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

// entry is a key's slot in a table: its optimiser state and, under BSP,
// the sum of the gradients of the step being applied.
type entry struct {
	key    uint64 // key + 1; 0 marks an empty slot
	p      Param
	g      float64
	inStep bool
}

// table is an open-addressing hash table (linear probing) from keys to
// entries. It holds only the keys pushed, however sparse they are (hashed
// features spread a few keys over a large space): 48-byte entries, at most
// 3/4 full, so 64 to 128 bytes per key.
//
// Keys come in runs of group (1 unless set): keys r·group+j, j < group,
// are the values of one model key r (a feature's factors), created
// together and kept in consecutive entries, so that a run costs one
// search and shares cache lines.
type table struct {
	slots []entry // runs of group entries
	n     int     // entries held
	runs  int     // runs held
	shift uint    // 64 - log2(len(slots)/group)
	group uint64  // 0 means 1
}

// width returns the entries per run.
func (t *table) width() uint64 { return max(t.group, 1) }

// home returns the run slot where the search for run r starts (Fibonacci
// hashing).
func (t *table) home(r uint64) uint64 { return (r * 0x9e3779b97f4a7c15) >> t.shift }

// split returns key k's run and place in it.
func (t *table) split(k uint64) (r, j uint64) {
	if g := t.width(); g > 1 {
		return k / g, k % g
	}
	return k, 0
}

// find returns key k's entry, or nil when k was never pushed.
func (t *table) find(k uint64) *entry {
	r, j := t.split(k)
	return t.findValue(r, j)
}

// findValue returns entry j of run r, or nil when the run was never
// pushed.
func (t *table) findValue(r, j uint64) *entry {
	if run := t.findRun(r); run != nil {
		return &run[j]
	}
	return nil
}

// findRun returns the entries of run r, or nil when it was never pushed.
func (t *table) findRun(r uint64) []entry {
	if t.runs == 0 {
		return nil
	}
	g := t.width()
	mask := uint64(len(t.slots))/g - 1
	first := r*g + 1 // the key (+1) of the run's first entry
	for i := t.home(r); ; i = (i + 1) & mask {
		e := &t.slots[i*g]
		if e.key == first {
			return t.slots[i*g : (i+1)*g]
		}
		if e.key == 0 {
			return nil
		}
	}
}

// get returns key k's entry, creating its run (all zero) when new;
// created reports that.
func (t *table) get(k uint64) (e *entry, created bool) {
	r, j := t.split(k)
	return t.getValue(r, j)
}

// getValue is get of entry j of run r.
func (t *table) getValue(r, j uint64) (e *entry, created bool) {
	run, created := t.getRun(r)
	return &run[j], created
}

// getRun returns the entries of run r, creating them (all zero) when new.
func (t *table) getRun(r uint64) (run []entry, created bool) {
	g := t.width()
	if 4*(t.runs+1) > 3*len(t.slots)/int(g) {
		t.grow()
	}
	mask := uint64(len(t.slots))/g - 1
	first := r*g + 1
	for i := t.home(r); ; i = (i + 1) & mask {
		e := &t.slots[i*g]
		if e.key == first {
			return t.slots[i*g : (i+1)*g], false
		}
		if e.key == 0 {
			for x := uint64(0); x < g; x++ {
				t.slots[i*g+x].key = first + x
			}
			t.n += int(g)
			t.runs++
			return t.slots[i*g : (i+1)*g], true
		}
	}
}

// releaseAbove is the size of a table (bytes) whose growth gives the
// memory of the old one back to the system at once: the garbage collector
// would otherwise let the heap reach twice the live table before it runs,
// and the runtime keeps freed pages a while, so that a server's RSS was
// about three times its model.
const releaseAbove = 32 << 20

// grow doubles the table.
func (t *table) grow() {
	defer func() {
		if len(t.slots)*int(unsafe.Sizeof(entry{})) > releaseAbove {
			debug.FreeOSMemory() // the old slots are garbage by now
		}
	}()
	g := t.width()
	old := t.slots
	n := max(1024, 2*len(old)/int(g))
	t.slots = make([]entry, n*int(g))
	t.shift = uint(64 - bits.TrailingZeros(uint(n)))
	mask := uint64(n - 1)
	for o := 0; o < len(old); o += int(g) {
		if old[o].key == 0 {
			continue
		}
		i := t.home((old[o].key - 1) / g)
		for t.slots[i*g].key != 0 {
			i = (i + 1) & mask
		}
		copy(t.slots[i*g:(i+1)*g], old[o:o+int(g)])
	}
}

// each calls f for every entry.
func (t *table) each(f func(e *entry)) {
	for i := range t.slots {
		if e := &t.slots[i]; e.key != 0 {
			f(e)
		}
	}
}

// appendFloat64 appends x as two float32s carrying its bits (high word
// first). The values are only ever copied, never computed with, so every
// bit pattern survives the trip.
func appendFloat64(dst []float32, x float64) []float32 {
	return appendUint64(dst, math.Float64bits(x))
}

// appendUint64 appends u as two float32s carrying its bits (high word
// first).
func appendUint64(dst []float32, u uint64) []float32 {
	return append(dst, math.Float32frombits(uint32(u>>32)), math.Float32frombits(uint32(u)))
}

// unpackUint64 is the inverse of appendUint64.
func unpackUint64(v []float32) uint64 {
	return uint64(math.Float32bits(v[0]))<<32 | uint64(math.Float32bits(v[1]))
}

// unpackFloat64 is the inverse of appendFloat64.
func unpackFloat64(v []float32) float64 { return math.Float64frombits(unpackUint64(v)) }

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
