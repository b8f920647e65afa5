package postoffice

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/replica"
	"github.com/gopslite/pslite/snapshot"
	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/control"
)

// A managed job (Config.Managed: PS_REPLICAS or PS_CHECKPOINT_DIR) follows
// the scheduler's views of which servers hold each key range. This file is
// the node's side of it that is not a store's: the start-up (a server's
// hello, everyone waiting for the first view), passing views, snapshots
// and replacements on to the layers above, and a worker's Checkpoint.

// firstViewWait bounds how long Start waits for the first view of a
// managed job after joining it: the scheduler sends it as soon as every
// server has said hello, which every server does at once.
const firstViewWait = 30 * time.Second

// snapshotsKept is how many complete snapshots a checkpoint directory
// keeps; older ones are removed once a newer one is complete.
const snapshotsKept = 3

// Cutter is a store of a server that writes snapshots (a kv.KVServer with
// a store): Cut writes snapshot gen of the ranges the store holds, and
// calls Postoffice.CutDone for each range it heads once every server
// holding the range has written it.
type Cutter interface {
	Cut(gen uint64)
}

type managedState struct {
	viewCh   chan struct{} // closed by the first view
	viewOnce sync.Once
	helloed  atomic.Bool

	mu         sync.Mutex // guards the rest
	viewFns    map[int]func(*replica.View)
	replaceFns map[int]func(id int)
	nextFn     int
	cutters    map[int]registeredCutter        // by app id
	cutting    map[uint64]map[int]bool         // per snapshot, the apps that cut it
	cutsDone   map[uint64]map[int]map[int]bool // per snapshot and range, the apps done
	waiters    map[int32]chan checkpointAnswer // worker: Checkpoint calls by request id
	metas      map[uint64]string               // server: the meta of snapshots in progress
	// disk runs a server's writes of snapshot descriptions and marks, in
	// order, off the van's goroutine.
	disk serial
}

// serial runs functions one at a time, in order, on a goroutine of its
// own (started with the first), never making the caller wait.
type serial struct {
	mu      sync.Mutex
	queue   []func()
	running bool
	stopped bool
}

// do queues f.
func (s *serial) do(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.queue = append(s.queue, f)
	if !s.running {
		s.running = true
		go s.run()
	}
}

func (s *serial) run() {
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		f := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		f()
	}
}

// stop drops what is queued and takes nothing more.
func (s *serial) stop() {
	s.mu.Lock()
	s.stopped = true
	s.queue = nil
	s.mu.Unlock()
}

type checkpointAnswer struct {
	gen uint64
	why string
}

func (m *managedState) init() {
	m.viewCh = make(chan struct{})
	m.viewFns = map[int]func(*replica.View){}
	m.replaceFns = map[int]func(int){}
	m.cutters = map[int]registeredCutter{}
	m.cutting = map[uint64]map[int]bool{}
	m.cutsDone = map[uint64]map[int]map[int]bool{}
	m.waiters = map[int32]chan checkpointAnswer{}
	m.metas = map[uint64]string{}
}

// Managed reports whether the node is part of a managed job.
func (p *Postoffice) Managed() bool { return p.cfg.Managed() }

// View returns the view of a managed job the node follows (nil before the
// first, and in an unmanaged job).
func (p *Postoffice) View() *replica.View { return p.van.View() }

// startManaged, at a server or worker of a managed job that has joined,
// says hello (a server) and waits for the first view.
func (p *Postoffice) startManaged(ctx context.Context) error {
	if !p.cfg.Managed() || p.IsScheduler() {
		return nil
	}
	if p.IsServer() && p.managed.helloed.CompareAndSwap(false, true) {
		p.van.Report(control.NoticeHello, p.hello())
	}
	timer := time.NewTimer(firstViewWait)
	defer timer.Stop()
	select {
	case <-p.managed.viewCh:
		return nil
	case <-p.van.Failed():
		return p.van.Err()
	case <-ctx.Done():
		return fmt.Errorf("postoffice: waiting for the scheduler's first view: %w", ctx.Err())
	case <-timer.C:
		return fmt.Errorf("postoffice: PS_REPLICAS or PS_CHECKPOINT_DIR is set but the scheduler sent no view within %v: set them on the scheduler too (a C++ ps-lite scheduler cannot run a managed job)", firstViewWait)
	}
}

// hello is what a server tells the scheduler of its checkpoint directory:
// the snapshots it can restore the ranges it will hold from.
func (p *Postoffice) hello() string {
	dir := p.cfg.CheckpointDir
	if dir == "" {
		return control.Hello{}.Format()
	}
	ranges := replica.HomeRanges(p.MyRank(), p.cfg.NumServers, p.cfg.Replicas)
	snaps, problems := snapshot.Restorable(dir, p.cfg.NumServers, ranges)
	return control.Hello{Snapshots: snaps, Problems: problems}.Format()
}

// OnView registers f, called with every new view (on the van's goroutine:
// it must not block). It returns a function that unregisters it.
func (p *Postoffice) OnView(f func(*replica.View)) (cancel func()) {
	return register(p, p.managed.viewFns, f)
}

// OnNodeReplaced registers f, called with the id of every node a
// replacement took the place of (on the van's goroutine: it must not
// block).
func (p *Postoffice) OnNodeReplaced(f func(id int)) (cancel func()) {
	return register(p, p.managed.replaceFns, f)
}

// register adds f to one of the postoffice's registries of functions and
// returns the function that removes it.
func register[F any](p *Postoffice, m map[int]F, f F) func() {
	p.managed.mu.Lock()
	defer p.managed.mu.Unlock()
	p.managed.nextFn++
	k := p.managed.nextFn
	m[k] = f
	return func() {
		p.managed.mu.Lock()
		delete(m, k)
		p.managed.mu.Unlock()
	}
}

// RegisterCutter adds a server's store that writes snapshots, as app.
func (p *Postoffice) RegisterCutter(app int, c Cutter) (cancel func()) {
	p.managed.mu.Lock()
	p.managed.nextFn++
	reg := registeredCutter{Cutter: c, token: p.managed.nextFn}
	p.managed.cutters[app] = reg
	p.managed.mu.Unlock()
	return func() {
		p.managed.mu.Lock()
		if p.managed.cutters[app].token == reg.token {
			delete(p.managed.cutters, app)
		}
		p.managed.mu.Unlock()
	}
}

// registeredCutter is a Cutter with the token of its registration.
type registeredCutter struct {
	Cutter
	token int
}

// ReportReplica tells the scheduler what a store's replication did (a
// range copied by a joiner, a range drained).
func (p *Postoffice) ReportReplica(r replica.Report) {
	p.van.Report(control.NoticeReport, control.FormatReport(r))
}

// CutDone says that store app has snapshot gen of range r, which this
// server heads, on disk at every server holding it. Once every store of
// the server has, the scheduler is told.
func (p *Postoffice) CutDone(app, r int, gen uint64) {
	m := &p.managed
	m.mu.Lock()
	apps := m.cutting[gen]
	if apps == nil || !apps[app] {
		m.mu.Unlock()
		return
	}
	done := m.cutsDone[gen]
	if done == nil {
		done = map[int]map[int]bool{}
		m.cutsDone[gen] = done
	}
	if done[r] == nil {
		done[r] = map[int]bool{}
	}
	done[r][app] = true
	complete := len(done[r]) == len(apps)
	m.mu.Unlock()
	if complete {
		p.ReportReplica(replica.Report{Kind: replica.ReportCut, Range: r, Gen: gen})
	}
}

// SnapshotMeta returns what the program stored with snapshot gen, at a
// server cutting it.
func (p *Postoffice) SnapshotMeta(gen uint64) string {
	p.managed.mu.Lock()
	defer p.managed.mu.Unlock()
	return p.managed.metas[gen]
}

// ErrNotManaged is returned by Checkpoint in a job without
// PS_CHECKPOINT_DIR.
var ErrNotManaged = errors.New("postoffice: not a job with PS_CHECKPOINT_DIR")

// Checkpoint has every server write a snapshot of its stores now, with
// meta (what the program wants back when the job resumes from it, say the
// round it is at), and returns the snapshot's number once every range is
// on disk. A snapshot taken between two barriers of all workers holds
// exactly the pushes made before the first. Called by a worker (or the
// scheduler) of a job with PS_CHECKPOINT_DIR.
func (p *Postoffice) Checkpoint(ctx context.Context, meta string) (uint64, error) {
	if p.cfg.CheckpointDir == "" {
		return 0, ErrNotManaged
	}
	if p.IsServer() {
		return 0, errors.New("postoffice: Checkpoint is a worker's (or the scheduler's) call")
	}
	if !p.van.IsReady() {
		return 0, ErrNotStarted
	}
	id := p.van.NextTimestamp()
	ch := make(chan checkpointAnswer, 1)
	p.managed.mu.Lock()
	p.managed.waiters[id] = ch
	p.managed.mu.Unlock()
	defer func() {
		p.managed.mu.Lock()
		delete(p.managed.waiters, id)
		p.managed.mu.Unlock()
	}()
	p.van.Checkpoint(id, meta)
	select {
	case a := <-ch:
		if a.gen == 0 {
			return 0, fmt.Errorf("postoffice: the scheduler refused the snapshot: %s", a.why)
		}
		return a.gen, nil
	case <-p.van.Failed():
		return 0, p.van.Err()
	case <-ctx.Done():
		return 0, fmt.Errorf("postoffice: checkpoint: %w", ctx.Err())
	}
}

// Restored returns the snapshot a managed job resumed from when it
// started, and what the program stored with it (0 and "" when it started
// afresh).
func (p *Postoffice) Restored() (gen uint64, meta string) {
	if v := p.View(); v != nil {
		return v.Restored, v.RestoredMeta
	}
	return 0, ""
}

// HandleEvent implements van.Handler.
func (h *handler) HandleEvent(e control.Event) {
	p := (*Postoffice)(h)
	m := &p.managed
	switch e.Type {
	case control.EventView:
		p.metrics.ViewChange()
		m.viewOnce.Do(func() { close(m.viewCh) })
		m.mu.Lock()
		fns := make([]func(*replica.View), 0, len(m.viewFns))
		for _, f := range m.viewFns {
			fns = append(fns, f)
		}
		m.mu.Unlock()
		for _, f := range fns {
			f(e.View)
		}
	case control.EventNodeReplaced:
		m.mu.Lock()
		fns := make([]func(int), 0, len(m.replaceFns))
		for _, f := range m.replaceFns {
			fns = append(fns, f)
		}
		m.mu.Unlock()
		for _, f := range fns {
			f(e.ID)
		}
	case control.EventCut:
		m.disk.do(func() { p.cut(e.Gen, e.Text) })
	case control.EventCommitted:
		if p.IsServer() {
			m.disk.do(func() { p.committed(e) })
		} else {
			p.committed(e)
		}
	}
}

// cut starts snapshot gen at a server: its meta is written, and every
// store cuts; a server without stores reports its ranges at once.
func (p *Postoffice) cut(gen uint64, meta string) {
	if !p.IsServer() {
		return
	}
	if dir := p.cfg.CheckpointDir; dir != "" {
		err := snapshot.WriteMeta(dir, snapshot.Meta{Gen: gen, Servers: p.cfg.NumServers, Replicas: p.cfg.Replicas, Meta: meta, Time: time.Now()})
		if err != nil {
			p.log.Error().Err(err).Uint64("snapshot", gen).Msg("writing the snapshot's meta failed; it will not complete")
			return
		}
	}
	m := &p.managed
	m.mu.Lock()
	m.metas[gen] = meta
	cutters := make([]Cutter, 0, len(m.cutters))
	apps := map[int]bool{}
	for app, c := range m.cutters {
		cutters = append(cutters, c)
		apps[app] = true
	}
	m.cutting[gen] = apps
	m.mu.Unlock()
	if len(cutters) == 0 {
		if v := p.View(); v != nil {
			for r := range v.Ranges {
				if v.HeadOf(r) == p.MyRank() {
					p.ReportReplica(replica.Report{Kind: replica.ReportCut, Range: r, Gen: gen})
				}
			}
		}
		return
	}
	for _, c := range cutters {
		c.Cut(gen)
	}
}

// committed takes the news that a snapshot is complete: a server marks
// it so on disk; a worker answers the Checkpoint that asked for it.
func (p *Postoffice) committed(e control.Event) {
	m := &p.managed
	if p.IsServer() {
		m.mu.Lock()
		delete(m.cutting, e.Gen)
		delete(m.cutsDone, e.Gen)
		delete(m.metas, e.Gen)
		m.mu.Unlock()
		if dir := p.cfg.CheckpointDir; dir != "" && e.Gen != 0 {
			if err := snapshot.Commit(dir, e.Gen); err != nil {
				p.log.Error().Err(err).Uint64("snapshot", e.Gen).Msg("marking the snapshot complete failed")
				return
			}
			p.metrics.SnapshotCommitted(e.Gen)
			if err := snapshot.Prune(dir, snapshotsKept); err != nil {
				p.log.Warn().Err(err).Msg("removing old snapshots failed")
			}
			p.van.Report(control.NoticeMarked, strconv.FormatUint(e.Gen, 10))
		}
		return
	}
	m.mu.Lock()
	ch := m.waiters[e.RequestID]
	m.mu.Unlock()
	if ch != nil {
		select {
		case ch <- checkpointAnswer{gen: e.Gen, why: e.Text}:
		default:
		}
	}
}

// JobError is a fault found above the van (by a store, or a worker that
// lost state it did not accept losing), which stops the job.
type JobError struct{ Err error }

func (e *JobError) Error() string { return e.Err.Error() }

// Unwrap returns both the fault and van.ErrJobFailed, so that errors.Is
// matches either.
func (e *JobError) Unwrap() []error { return []error{e.Err, van.ErrJobFailed} }

// Fail stops the job because of err: every node's Wait, Barrier and
// Finalize return it (wrapped in a JobError), and the other nodes are told.
func (p *Postoffice) Fail(err error) {
	p.log.Error().Err(err).Msg("stopping the job")
	p.van.Abort(&JobError{Err: err})
}

// IsMemberServer reports whether id names a server of the job.
func (p *Postoffice) IsMemberServer(id int) bool {
	return message.IsServerID(id) && message.IDToRank(id) < p.cfg.NumServers
}
