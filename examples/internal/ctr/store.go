package ctr

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/gopslite/pslite/kv"
)

// A Store's snapshot of a part (kv.Store's Snapshot and Restore). Which
// keys a part holds is the workers' routing (keyRouter), not the part's
// key range: statistics keys are part 0's, model keys are split by range
// within each fold, control keys are not stored.
//
// The format, version 1, all numbers little-endian:
//
//	magic "PSLRSNAP", version u32
//	part index u32, of u32           the layout it was written for
//	model keys per fold u64          0: not known yet (then no model keys)
//	servers u32, workers u32, mode u32
//	run u64                          the snapshot the run resumed from
//	applied i64                      BSP: steps applied
//	n u32, n × clock i64             SSP: each worker's clock
//	n u32, n × step                  BSP: pending steps, by step:
//	    step i64, rate f64, n u32, n × worker u32, n u64, n × (key u64, sum f64)
//	saved-at i64                     the round the saved model is for (0: none)
//	n u64, n × (key u64, W f64, Z f64, N f64)             the saved model, by key
//	n u64, n × (key u64, value f32)                       statistics, by key
//	n u64, n × (key u64, W f64, Z f64, N f64, sum f64, in-step u8)  the model, by key
//	end "PSLR.END"
//
// In-step marks the keys of the BSP step being applied, whose sums so far
// are next to their weights (sum).

const (
	snapMagic   = "PSLRSNAP"
	snapEnd     = "PSLR.END"
	snapVersion = 1
)

// stepSnap is a pending BSP step in a snapshot.
type stepSnap struct {
	step    int
	rate    float64
	pushers []int
	grads   []keyGrad // by key
}

type keyGrad struct {
	key uint64
	g   float64
}

// statSnap is a statistics key in a snapshot.
type statSnap struct {
	key uint64
	v   float32
}

// modelSnap is a model key in a snapshot.
type modelSnap struct {
	key    uint64
	p      Param
	g      float64
	inStep bool
}

// partSnap is everything a snapshot holds.
type partSnap struct {
	index, of int
	numKeys   uint64
	servers   int
	workers   int
	mode      SyncMode
	run       uint64
	applied   int
	clock     []int
	pending   []stepSnap // by step
	savedAt   int
	saved     []savedParam // by key
	stats     []statSnap   // by key
	model     []modelSnap  // by key
}

// Snapshot implements kv.Store: it writes the state of part p (p.Index
// among p.Of servers; p.Keys is not used, see keyRouter): its model keys'
// weights and optimiser state, the consistency model's state (BSP step
// buffers and sums, SSP clocks), the saved model (early stopping), the run,
// and for part 0 the statistics, in the format above.
func (s *Store) Snapshot(w io.Writer, p kv.Part) error {
	if p.Of <= 0 || p.Index < 0 || p.Index >= p.Of {
		return fmt.Errorf("lr store: snapshot of part %d of %d", p.Index, p.Of)
	}
	s.mu.Lock()
	sn, err := s.snapPart(p)
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("lr store: snapshot of part %d of %d: %w", p.Index, p.Of, err)
	}
	return sn.write(w)
}

// snapPart copies part p's state out.
func (s *Store) snapPart(p kv.Part) (*partSnap, error) {
	es, err := s.partEntries(p.Index, p.Of)
	if err != nil {
		return nil, err
	}
	sn := &partSnap{index: p.Index, of: p.Of, numKeys: s.numKeys, servers: s.servers, workers: s.workers, mode: s.mode,
		clock: make([]int, s.workers)}
	sn.model = make([]modelSnap, len(es))
	for i, e := range es {
		sn.model[i] = modelSnap{key: e.key - 1, p: e.p, g: e.g, inStep: e.inStep}
	}
	if ps := s.parts[p.Index]; ps != nil {
		sn.run, sn.applied, sn.savedAt = ps.run, ps.applied, ps.savedAt
		copy(sn.clock, ps.clock)
		sn.saved = slices.Clone(ps.saved)
		for step, b := range ps.pending {
			st := stepSnap{step: step, rate: b.rate}
			for w := range b.pushers {
				st.pushers = append(st.pushers, w)
			}
			slices.Sort(st.pushers)
			for k, g := range b.grads {
				st.grads = append(st.grads, keyGrad{k, g})
			}
			slices.SortFunc(st.grads, func(a, b keyGrad) int { return cmpUint64(a.key, b.key) })
			sn.pending = append(sn.pending, st)
		}
		slices.SortFunc(sn.pending, func(a, b stepSnap) int { return a.step - b.step })
	}
	if p.Index == 0 {
		for _, m := range s.stats {
			for k, v := range m {
				sn.stats = append(sn.stats, statSnap{k, v})
			}
		}
		slices.SortFunc(sn.stats, func(a, b statSnap) int { return cmpUint64(a.key, b.key) })
	}
	return sn, nil
}

// write writes sn in the snapshot format.
func (sn *partSnap) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	var b []byte
	le := binary.LittleEndian
	// flush writes b out when it grows (bufio keeps the first error).
	flush := func() {
		if len(b) >= 1<<15 {
			bw.Write(b)
			b = b[:0]
		}
	}
	b = append(b, snapMagic...)
	b = le.AppendUint32(b, snapVersion)
	b = le.AppendUint32(b, uint32(sn.index))
	b = le.AppendUint32(b, uint32(sn.of))
	b = le.AppendUint64(b, sn.numKeys)
	b = le.AppendUint32(b, uint32(sn.servers))
	b = le.AppendUint32(b, uint32(sn.workers))
	b = le.AppendUint32(b, uint32(sn.mode))
	b = le.AppendUint64(b, sn.run)
	b = le.AppendUint64(b, uint64(int64(sn.applied)))
	b = le.AppendUint32(b, uint32(len(sn.clock)))
	for _, c := range sn.clock {
		b = le.AppendUint64(b, uint64(int64(c)))
	}
	b = le.AppendUint32(b, uint32(len(sn.pending)))
	for _, st := range sn.pending {
		b = le.AppendUint64(b, uint64(int64(st.step)))
		b = le.AppendUint64(b, math.Float64bits(st.rate))
		b = le.AppendUint32(b, uint32(len(st.pushers)))
		for _, w := range st.pushers {
			b = le.AppendUint32(b, uint32(w))
		}
		b = le.AppendUint64(b, uint64(len(st.grads)))
		for _, g := range st.grads {
			b = le.AppendUint64(b, g.key)
			b = le.AppendUint64(b, math.Float64bits(g.g))
			flush()
		}
	}
	b = le.AppendUint64(b, uint64(int64(sn.savedAt)))
	b = le.AppendUint64(b, uint64(len(sn.saved)))
	for _, sp := range sn.saved {
		b = le.AppendUint64(b, sp.key)
		b = appendParam(b, sp.p)
		flush()
	}
	b = le.AppendUint64(b, uint64(len(sn.stats)))
	for _, st := range sn.stats {
		b = le.AppendUint64(b, st.key)
		b = le.AppendUint32(b, math.Float32bits(st.v))
		flush()
	}
	b = le.AppendUint64(b, uint64(len(sn.model)))
	for _, m := range sn.model {
		b = le.AppendUint64(b, m.key)
		b = appendParam(b, m.p)
		b = le.AppendUint64(b, math.Float64bits(m.g))
		in := byte(0)
		if m.inStep {
			in = 1
		}
		b = append(b, in)
		flush()
	}
	b = append(b, snapEnd...)
	bw.Write(b)
	return bw.Flush()
}

func appendParam(b []byte, p Param) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, math.Float64bits(p.W))
	b = le.AppendUint64(b, math.Float64bits(p.Z))
	return le.AppendUint64(b, math.Float64bits(p.N))
}

// snapReader decodes a snapshot; the first error sticks.
type snapReader struct {
	r   *bufio.Reader
	buf [8]byte
	err error
}

func (r *snapReader) bytes(n int) []byte {
	if r.err != nil {
		return r.buf[:n:n]
	}
	if _, err := io.ReadFull(r.r, r.buf[:n]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		r.err = err
	}
	return r.buf[:n]
}

func (r *snapReader) u8() uint8        { return r.bytes(1)[0] }
func (r *snapReader) u32() uint32      { return binary.LittleEndian.Uint32(r.bytes(4)) }
func (r *snapReader) u64() uint64      { return binary.LittleEndian.Uint64(r.bytes(8)) }
func (r *snapReader) i64() int         { return int(int64(r.u64())) }
func (r *snapReader) f64() float64     { return math.Float64frombits(r.u64()) }
func (r *snapReader) f32() float32     { return math.Float32frombits(r.u32()) }
func (r *snapReader) param() (p Param) { p.W, p.Z, p.N = r.f64(), r.f64(), r.f64(); return p }

// count reads a number of items, which must not be above limit.
func (r *snapReader) count(n uint64, limit uint64, what string) int {
	if r.err == nil && n > limit {
		r.err = fmt.Errorf("%d %s", n, what)
	}
	if r.err != nil {
		return 0
	}
	return int(n)
}

// prealloc bounds what a count read from a snapshot may allocate ahead:
// a damaged count runs into the end of the data instead.
func prealloc(n int) int { return min(n, 1<<16) }

// errNotSnapshot says a reader holds no snapshot of this program's store.
var errNotSnapshot = errors.New("not a snapshot of lr's server (no magic)")

// readSnap decodes a snapshot.
func readSnap(rd io.Reader) (*partSnap, error) {
	r := &snapReader{r: bufio.NewReaderSize(rd, 1<<16)}
	if string(r.bytes(8)) != snapMagic {
		if r.err != nil {
			return nil, r.err
		}
		return nil, errNotSnapshot
	}
	if v := r.u32(); r.err == nil && v != snapVersion {
		return nil, fmt.Errorf("snapshot format version %d, this program reads %d", v, snapVersion)
	}
	sn := &partSnap{}
	sn.index, sn.of = int(r.u32()), int(r.u32())
	sn.numKeys = r.u64()
	sn.servers, sn.workers, sn.mode = int(r.u32()), int(r.u32()), SyncMode(r.u32())
	sn.run = r.u64()
	sn.applied = r.i64()
	n := r.count(uint64(r.u32()), 1<<statsRankBits, "worker clocks")
	for i := 0; i < n && r.err == nil; i++ {
		sn.clock = append(sn.clock, r.i64())
	}
	n = r.count(uint64(r.u32()), math.MaxUint32, "pending steps")
	for i := 0; i < n && r.err == nil; i++ {
		st := stepSnap{step: r.i64(), rate: r.f64()}
		m := r.count(uint64(r.u32()), 1<<statsRankBits, "pushers of a step")
		for j := 0; j < m && r.err == nil; j++ {
			st.pushers = append(st.pushers, int(r.u32()))
		}
		m = r.count(r.u64(), math.MaxInt32, "sums of a step")
		st.grads = make([]keyGrad, 0, prealloc(m))
		for j := 0; j < m && r.err == nil; j++ {
			st.grads = append(st.grads, keyGrad{r.u64(), r.f64()})
		}
		sn.pending = append(sn.pending, st)
	}
	sn.savedAt = r.i64()
	n = r.count(r.u64(), math.MaxInt32, "saved keys")
	sn.saved = make([]savedParam, 0, prealloc(n))
	for i := 0; i < n && r.err == nil; i++ {
		sn.saved = append(sn.saved, savedParam{r.u64(), r.param()})
	}
	n = r.count(r.u64(), math.MaxInt32, "statistics")
	sn.stats = make([]statSnap, 0, prealloc(n))
	for i := 0; i < n && r.err == nil; i++ {
		sn.stats = append(sn.stats, statSnap{r.u64(), r.f32()})
	}
	n = r.count(r.u64(), math.MaxInt32, "model keys")
	sn.model = make([]modelSnap, 0, prealloc(n))
	for i := 0; i < n && r.err == nil; i++ {
		m := modelSnap{key: r.u64(), p: r.param(), g: r.f64()}
		m.inStep = r.u8() != 0
		sn.model = append(sn.model, m)
	}
	if end := string(r.bytes(8)); r.err == nil && end != snapEnd {
		return nil, errors.New("snapshot without its end mark")
	}
	if r.err != nil {
		return nil, r.err
	}
	return sn, sn.check()
}

// check refuses a snapshot whose parts do not fit together.
func (sn *partSnap) check() error {
	switch {
	case sn.of <= 0 || sn.index >= sn.of:
		return fmt.Errorf("a snapshot of part %d of %d", sn.index, sn.of)
	case sn.numKeys == 0 && (len(sn.model) > 0 || len(sn.saved) > 0):
		return errors.New("a snapshot with model keys but no key layout")
	case sn.numKeys > statsBase:
		return fmt.Errorf("a snapshot of %d keys per fold", sn.numKeys)
	case len(sn.clock) != sn.workers:
		return fmt.Errorf("a snapshot of %d workers with %d clocks", sn.workers, len(sn.clock))
	}
	for _, st := range sn.pending {
		if st.step < sn.applied {
			return fmt.Errorf("a snapshot with step %d pending, %d applied", st.step, sn.applied)
		}
		for _, w := range st.pushers {
			if w >= sn.workers {
				return fmt.Errorf("a snapshot with a push of worker %d of %d", w, sn.workers)
			}
		}
	}
	for _, m := range sn.model {
		if m.key >= statsBase {
			return fmt.Errorf("a snapshot with model key %d", m.key)
		}
	}
	for _, st := range sn.stats {
		if st.key < statsBase || st.key >= ctrlBase {
			return fmt.Errorf("a snapshot with statistics key %d", st.key)
		}
	}
	return nil
}

// Restore implements kv.Store: part p's state becomes what the readers
// hold of it. Model keys (and the saved model's) are taken from every
// reader by keyRouter for p.Of servers, so a snapshot of another number of
// servers restores; so are the statistics, into part 0. The consistency
// state (BSP step buffers and sums, SSP clocks) is a part's, not its
// keys': it comes from the reader written for this very part (same index,
// servers, workers and consistency model) and starts empty when there is
// none, as in a job relaunched with other servers, whose workers start
// over (a pending step's sums are then dropped). No reader empties the
// part. Snapshots whose key layouts differ are refused, and so is a
// snapshot that does not decode; the store is then unchanged.
func (s *Store) Restore(rs []io.Reader, p kv.Part) error {
	if p.Of <= 0 || p.Of > maxServers || p.Index < 0 || p.Index >= p.Of {
		return fmt.Errorf("lr store: restore of part %d of %d", p.Index, p.Of)
	}
	snaps := make([]*partSnap, 0, len(rs))
	for i, r := range rs {
		sn, err := readSnap(r)
		if err != nil {
			return fmt.Errorf("lr store: snapshot %d of %d for part %d of %d: %w", i+1, len(rs), p.Index, p.Of, err)
		}
		snaps = append(snaps, sn)
	}
	s.mu.Lock()
	out, err := s.restore(snaps, p)
	s.mu.Unlock()
	for _, r := range out {
		r.answer(r.res, nil)
	}
	if err != nil {
		return fmt.Errorf("lr store: restore of part %d of %d: %w", p.Index, p.Of, err)
	}
	return nil
}

// restore replaces part p's state with what snaps hold of it, and returns
// the answers of the held pulls that are ready then.
func (s *Store) restore(snaps []*partSnap, p kv.Part) ([]reply, error) {
	numKeys := s.numKeys
	for _, sn := range snaps {
		if sn.numKeys == 0 {
			continue
		}
		if numKeys != 0 && numKeys != sn.numKeys {
			return nil, fmt.Errorf("a snapshot of a model of %d keys per fold, this server's has %d", sn.numKeys, numKeys)
		}
		numKeys = sn.numKeys
	}
	if s.servers != 0 && s.servers != p.Of {
		return nil, fmt.Errorf("the workers lay keys out on %d servers", s.servers)
	}
	r := keyRouter{numKeys: numKeys}
	belongs := func(k uint64) bool {
		part, _, err := r.route(s.keyOf(k), p.Of)
		return err == nil && part == p.Index
	}
	fresh := &partState{pending: make(map[int]*stepBuf), clock: make([]int, s.workers)}
	model := map[uint64]modelSnap{}
	saved := map[uint64]Param{}
	stats := make(map[int]map[uint64]float32)
	for _, sn := range snaps {
		same := sn.index == p.Index && sn.of == p.Of && sn.workers == s.workers && sn.mode == s.mode
		for _, m := range sn.model {
			if belongs(m.key) {
				if !same {
					m.g, m.inStep = 0, false
				}
				model[m.key] = m
			}
		}
		for _, sp := range sn.saved {
			if belongs(sp.key) {
				saved[sp.key] = sp.p
			}
		}
		fresh.savedAt = max(fresh.savedAt, sn.savedAt)
		fresh.run = max(fresh.run, sn.run)
		if p.Index == 0 {
			for _, st := range sn.stats {
				round := statsRound(st.key)
				if stats[round] == nil {
					stats[round] = make(map[uint64]float32)
				}
				stats[round][st.key] = st.v
			}
		}
		if same {
			fresh.applied = sn.applied
			copy(fresh.clock, sn.clock)
			fresh.pending = make(map[int]*stepBuf)
			for _, st := range sn.pending {
				b := &stepBuf{grads: make(map[uint64]float64, len(st.grads)), pushers: make(map[int]bool), rate: st.rate}
				for _, w := range st.pushers {
					b.pushers[w] = true
				}
				for _, g := range st.grads {
					b.grads[g.key] = g.g
				}
				fresh.pending[st.step] = b
			}
		}
	}
	if fresh.savedAt > 0 {
		fresh.saved = make([]savedParam, 0, len(saved))
		for k, sp := range saved {
			fresh.saved = append(fresh.saved, savedParam{k, sp})
		}
		slices.SortFunc(fresh.saved, func(a, b savedParam) int { return cmpUint64(a.key, b.key) })
	}
	// The keys of the step being applied, in key order.
	var inStep []uint64
	for k, m := range model {
		if m.inStep {
			inStep = append(inStep, k)
		}
	}
	if len(inStep) > 0 {
		b := fresh.pending[fresh.applied]
		if b == nil {
			return nil, fmt.Errorf("a snapshot with sums of step %d, which it does not hold", fresh.applied)
		}
		slices.Sort(inStep)
		b.keys = inStep
	}
	// Every check is done: replace the part.
	if s.params.n > 0 && (s.numKeys == 0 || s.servers == 0) {
		return nil, errNoLayout // cannot happen: model keys come after the layout
	}
	old := keyRouter{numKeys: s.numKeys}
	t := table{group: s.params.group}
	s.params.each(func(e *entry) {
		if part, _, err := old.route(s.keyOf(e.key-1), s.servers); err != nil || part != p.Index {
			ne, _ := t.get(e.key - 1)
			*ne = *e
		}
	})
	for k, m := range model {
		ne, _ := t.get(k)
		ne.p, ne.g, ne.inStep = m.p, m.g, m.inStep
	}
	s.params = t
	s.numKeys, s.servers = numKeys, p.Of
	s.parts[p.Index] = fresh
	if p.Index == 0 {
		s.stats = stats
	}
	return s.release(nil), nil
}
