package main

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
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
	kindDump     = 5 // pull of a control key: every model key of the server below its value, with state
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

// Responder answers a request; KVServer.ZResponse in a job, a recorder in
// tests. The response's slices are not changed afterwards.
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
// (Store.applied) sums them next to the weights, in the table (keys lists
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
	Keys            int           // model keys created (by a push)
	BufferedMaxKeys int           // BSP: most keys buffered for one step
}

// Store is a server's request handle: it keeps the state of the keys in its
// range that were pushed, updates them with an Optimizer, and enforces the
// consistency model by holding pull responses.
type Store struct {
	mu        sync.Mutex // guards everything below
	opt       Optimizer
	mode      SyncMode
	staleness int
	workers   int
	params    table
	saved     *table                     // the snapshot (early stopping's best model)
	savedAt   int                        // the round it was saved for
	stats     map[int]map[uint64]float32 // by round
	pending   map[int]*stepBuf           // BSP: step -> gradient sums
	applied   int                        // BSP: steps 0..applied-1 are applied
	clock     []int                      // SSP: clock[w] = steps worker w has pushed
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
		stats:     make(map[int]map[uint64]float32),
		pending:   make(map[int]*stepBuf),
		clock:     make([]int, workers),
	}
}

// Handle is the KVServer request handle.
func (s *Store) Handle(meta kv.KVMeta, data kv.KVPairs[float32], srv *kv.KVServer[float32]) {
	s.Serve(meta, data, srv.ZResponse)
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
			s.pushStats(data)
		case kindTrain:
			s.push(worker, step, data)
		case kindInit:
			s.init(data)
		case kindSnapshot:
			s.snapshot(step)
		default:
			s.errs = append(s.errs, fmt.Errorf("push of kind %d from worker %d", kind, worker))
		}
		if !meta.Pull {
			out = append(out, reply{meta: meta})
		}
		out = s.release(out)
	}
	if meta.Pull {
		switch {
		case kind == kindDump:
			out = append(out, reply{meta, s.dump(data.Keys)})
		case s.ready(kind, step, data.Keys):
			if kind == kindTrain {
				s.st.Pulls++
			}
			out = append(out, reply{meta, s.values(data.Keys)})
		default:
			if kind == kindTrain {
				s.st.Pulls++
				s.st.Held++
			}
			s.held = append(s.held, held{meta: meta, keys: slices.Clone(data.Keys), kind: kind, step: step, since: time.Now()})
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

// pushStats stores statistics; a push of round r forgets rounds before r-1,
// which every worker has pulled by then.
func (s *Store) pushStats(data kv.KVPairs[float32]) {
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
}

// init sets the state of keys from a saved model: W, Z, N per key, each a
// float64 in two float32s (see packFloat64).
func (s *Store) init(data kv.KVPairs[float32]) {
	if len(data.Vals) != 6*len(data.Keys) {
		s.errs = append(s.errs, fmt.Errorf("init push with %d values for %d keys", len(data.Vals), len(data.Keys)))
		return
	}
	for i, k := range data.Keys {
		if k >= statsBase {
			continue
		}
		v := data.Vals[6*i:]
		p := &s.entry(k).p
		p.W, p.Z, p.N = unpackFloat64(v[0:2]), unpackFloat64(v[2:4]), unpackFloat64(v[4:6])
	}
}

// snapshot saves the model (cmd > 0: for round cmd, once) or restores the
// saved one.
func (s *Store) snapshot(cmd int) {
	switch {
	case cmd == snapshotRestore:
		if s.saved != nil {
			s.params = s.saved.clone()
		}
	case cmd > s.savedAt:
		saved := s.params.clone()
		s.saved = &saved
		s.savedAt = cmd
	}
}

// dump answers a kindDump pull of a control key: the value of control key
// ctrlBase+s is ignored; the answer is one value list holding, for every
// model key k below statsBase, key, W, Z, N as four float64s in two float32s
// each, in key order.
func (s *Store) dump(keys []uint64) kv.KVPairs[float32] {
	var ks []uint64
	s.params.each(func(e *entry) { ks = append(ks, e.key-1) })
	slices.Sort(ks)
	vals := make([]float32, 0, 8*len(ks))
	for _, k := range ks {
		p := &s.params.find(k).p
		vals = appendUint64(vals, k)
		vals = appendFloat64(vals, p.W)
		vals = appendFloat64(vals, p.Z)
		vals = appendFloat64(vals, p.N)
	}
	lens := make([]int32, len(keys))
	if len(lens) > 0 {
		lens[0] = int32(len(vals))
	}
	return kv.KVPairs[float32]{Keys: keys, Vals: vals, Lens: lens}
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
			e := s.entry(k)
			if !e.inStep {
				e.inStep = true
				b.keys = append(b.keys, k)
			}
			e.g += g
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
				e := s.params.find(k)
				g := e.g
				e.g, e.inStep = 0, false
				s.opt.Update(&e.p, g, 1, b.rate)
			}
			for k, g := range b.grads {
				s.opt.Update(&s.entry(k).p, g, 1, b.rate)
			}
			delete(s.pending, s.applied)
			s.applied++
			s.st.StepsApplied++
		}
		return
	}
	for i, k := range data.Keys {
		if k < statsBase {
			s.opt.Update(&s.entry(k).p, float64(data.Vals[i]), share, rate)
		}
	}
	if s.mode == SSP && worker < len(s.clock) {
		s.clock[worker] = max(s.clock[worker], step+1)
	}
}

// entry returns key k's entry, creating it on first touch.
func (s *Store) entry(k uint64) *entry {
	e, created := s.params.get(k)
	if created {
		s.st.Keys++
	}
	return e
}

// ready reports whether a pull of keys of the given kind at step may be
// answered now.
func (s *Store) ready(kind, step int, keys []uint64) bool {
	switch kind {
	case kindStats:
		for _, k := range keys {
			if _, ok := s.stats[statsRound(k)][k]; !ok {
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

// values returns the current weights (or statistics) of keys; a key never
// pushed has weight 0 and is not created.
func (s *Store) values(keys []uint64) kv.KVPairs[float32] {
	res := kv.KVPairs[float32]{Keys: keys, Vals: make([]float32, len(keys))}
	for i, k := range keys {
		if k >= statsBase {
			res.Vals[i] = s.stats[statsRound(k)][k]
			continue
		}
		if e := s.params.find(k); e != nil {
			res.Vals[i] = float32(e.p.W)
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
type table struct {
	slots []entry
	n     int
	shift uint // 64 - log2(len(slots))
}

// home returns the slot where the search for key k starts (Fibonacci
// hashing).
func (t *table) home(k uint64) uint64 { return (k * 0x9e3779b97f4a7c15) >> t.shift }

// find returns key k's entry, or nil when k was never pushed.
func (t *table) find(k uint64) *entry {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		e := &t.slots[i]
		if e.key == k+1 {
			return e
		}
		if e.key == 0 {
			return nil
		}
	}
}

// get returns key k's entry, creating it (all zero) when new.
func (t *table) get(k uint64) (e *entry, created bool) {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		e := &t.slots[i]
		if e.key == k+1 {
			return e, false
		}
		if e.key == 0 {
			e.key = k + 1
			t.n++
			return e, true
		}
	}
}

// grow doubles the table.
func (t *table) grow() {
	old := t.slots
	n := max(1024, 2*len(old))
	t.slots = make([]entry, n)
	t.shift = uint(64 - bits.TrailingZeros(uint(n)))
	mask := uint64(n - 1)
	for _, e := range old {
		if e.key == 0 {
			continue
		}
		i := t.home(e.key - 1)
		for t.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = e
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

// clone returns a copy.
func (t *table) clone() table {
	return table{slots: slices.Clone(t.slots), n: t.n, shift: t.shift}
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
