package control

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/replica"
)

// Views: in a managed job (Config.Managed: PS_REPLICAS or
// PS_CHECKPOINT_DIR), the scheduler says which servers hold each key range
// (a replica.View, made by a replica.Planner) and every Go server and
// worker follows it.
//
// Start-up: every server, once it has its id, says hello to the scheduler
// (NoticeHello); when all have, the scheduler sends the first view to
// every server and worker, which wait for it before their start barrier.
// A server that never says hello (a C++ ps-lite server cannot take part
// in a managed job) fails the start-up after ConnectTimeout, naming it.
//
// Then: a server found dead leaves every range at once (its ranges fail
// over to the next server of their chains) and the job goes on without a
// deadline; only a range that no server holds any more waits for a
// replacement, for RecoveryWait, before the job fails. A replacement joins
// the ranges of its home set; servers report copies done, ranges drained
// and snapshots written (NoticeReport), and each report that changes the
// view sends the new one to everyone. A server found dead and left out of
// the view never comes back: heard from again, it is told to stop
// (NoticeEvict), and its old messages are refused by the others (they
// carry its old incarnation).

// Notice kinds of managed jobs.
const (
	// NoticeHello, from a server to the scheduler: it takes part in a
	// managed job. The text is what it has on disk (see Hello).
	NoticeHello NoticeKind = "hello"
	// NoticeView, from the scheduler: the text is a replica.View.
	NoticeView NoticeKind = "view"
	// NoticeReport, from a server to the scheduler: a replica.Report
	// (see FormatReport).
	NoticeReport NoticeKind = "report"
	// NoticeEvict, from the scheduler to a node it found dead and did not
	// take back: stop, the job goes on without you. The text says why.
	NoticeEvict NoticeKind = "evict"
)

// EvictedError is the error of a node told by the scheduler that it was
// found dead and the job went on without it (its ranges moved to other
// servers, or a replacement took its place).
type EvictedError struct {
	Reason string
}

func (e *EvictedError) Error() string {
	return "this node was left out of the job: " + e.Reason
}

// Unwrap makes errors.Is(err, ErrJobFailed) true: for this node the job is
// over.
func (e *EvictedError) Unwrap() error { return ErrJobFailed }

// RangeLostError is the error of a managed job in which a key range lost
// every server holding it and no replacement restored it in time.
type RangeLostError struct {
	Range      int
	NumServers int
	Servers    []message.Node // the servers of its home set, dead
	Wait       time.Duration
}

func (e *RangeLostError) Error() string {
	var names []string
	for _, n := range e.Servers {
		names = append(names, describe(n))
	}
	return fmt.Sprintf("key %s lost: every server holding it died (%s), and no replacement joined within %v (PS_RECOVERY_WAIT)",
		replica.RangeString(e.Range, e.NumServers), strings.Join(names, ", "), e.Wait)
}

// Unwrap makes errors.Is(err, ErrJobFailed) true.
func (e *RangeLostError) Unwrap() error { return ErrJobFailed }

// FormatReport writes a replica.Report as a notice's text.
func FormatReport(r replica.Report) string {
	return fmt.Sprintf("%d %d %d %d %d %d", r.Kind, r.Range, r.Version, r.LSN, r.Gen, r.Joiner)
}

// ParseReport reads FormatReport's text.
func ParseReport(s string) (replica.Report, error) {
	f := strings.Fields(s)
	if len(f) != 6 {
		return replica.Report{}, fmt.Errorf("control: a report of %d fields", len(f))
	}
	var n [6]uint64
	for i, x := range f {
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return replica.Report{}, fmt.Errorf("control: bad report %q", s)
		}
		n[i] = v
	}
	if n[1] >= replica.MaxServers || n[5] >= replica.MaxServers || n[0] > 255 {
		return replica.Report{}, fmt.Errorf("control: bad report %q", s)
	}
	return replica.Report{Kind: replica.ReportKind(n[0]), Range: int(n[1]), Version: n[2], LSN: n[3], Gen: n[4], Joiner: int(n[5])}, nil
}

// View returns the view this node follows (nil before the first, and in an
// unmanaged job).
func (c *Core) View() *replica.View {
	if c.planner != nil {
		return c.planner.View()
	}
	return c.view
}

// Notice sends a notice to node to (the scheduler, usually).
func (c *Core) Notice(to int, kind NoticeKind, text string) []Output {
	if c.phase != PhaseReady && c.phase != PhaseJoining {
		return nil
	}
	var o out
	o.send(NewNotice(to, kind, text, c.nextTS()))
	return o
}

// startViews sets up the scheduler's planner once the job has filled up.
func (c *Core) startViews(now time.Time) {
	if !c.cfg.Managed || !c.IsScheduler() || c.planner != nil {
		return
	}
	p, err := replica.NewPlanner(c.cfg.NumServers, c.cfg.Replicas)
	if err != nil {
		c.log.Error().Err(err).Msg("no views")
		return
	}
	c.planner = p
	c.hellos = map[int]string{}
	c.viewsSince = now
	c.lostSince = map[int]time.Time{}
	c.marking = map[uint64]map[int]bool{}
}

// hello takes a server's hello at the scheduler.
func (c *Core) hello(o *out, sender int, text string) {
	if c.planner == nil || !message.IsServerID(sender) {
		return
	}
	c.hellos[sender] = text
	if c.viewSent {
		// A replacement: it gets views with everyone (see replace).
		return
	}
	for _, id := range c.members(message.ServerGroup) {
		if _, ok := c.hellos[id]; !ok {
			return
		}
	}
	gen, meta, err := c.restorePoint()
	if err != nil {
		c.fail(o, &RestoreError{Err: err})
		return
	}
	if gen != 0 {
		c.planner.SetRestored(gen, meta)
		c.nextGen = gen
		c.log.Warn().Uint64("snapshot", gen).Str("meta", meta).Msg("the job resumes from a snapshot")
	}
	c.viewSent = true
	c.log.Info().Str("view", c.planner.View().String()).Msg("first view")
	c.sendView(o)
}

// RestoreError is the error of a managed job that cannot start from its
// snapshot directory.
type RestoreError struct{ Err error }

func (e *RestoreError) Error() string { return "cannot restore the snapshot: " + e.Err.Error() }

// Unwrap makes errors.Is(err, ErrJobFailed) true.
func (e *RestoreError) Unwrap() error { return ErrJobFailed }

// sendView sends the current view to every server and worker that is not
// dead.
func (c *Core) sendView(o *out) {
	if c.planner == nil || !c.viewSent {
		return
	}
	text := string(c.planner.View().Encode())
	for _, id := range c.members(message.ServerGroup + message.WorkerGroup) {
		if _, shared := c.shared[id]; shared {
			continue
		}
		if p := c.peers[id]; p == nil || p.dead || p.left {
			continue
		}
		o.send(NewNotice(id, NoticeView, text, c.nextTS()))
	}
}

// serverDead takes a server's death into the view: it fails over every
// range it headed. It reports whether the node's place may wait without a
// deadline (every range is still held by someone).
func (c *Core) serverDead(o *out, id int, now time.Time) (covered bool) {
	if c.planner == nil || !message.IsServerID(id) {
		return false
	}
	changed, lost := c.planner.Dead(message.IDToRank(id))
	for _, r := range lost {
		if _, ok := c.lostSince[r]; !ok {
			c.lostSince[r] = now
		}
	}
	if changed {
		c.log.Warn().Str("view", c.planner.View().String()).Msg("a server's ranges moved")
		c.sendView(o)
	}
	c.answerMarked(o)
	return len(c.lostSince) == 0
}

// serverReplaced gives a replacement its ranges.
func (c *Core) serverReplaced(o *out, id int) {
	if c.planner == nil {
		return
	}
	if message.IsServerID(id) {
		restored := c.planner.Replaced(message.IDToRank(id))
		for _, r := range restored {
			delete(c.lostSince, r)
			c.log.Warn().Int("range", r).Uint64("snapshot", c.planner.Committed()).Msg("a lost range restarts on a replacement, restored from the last snapshot (0: none)")
		}
	}
	c.sendView(o)
}

// report takes a server's report at the scheduler.
func (c *Core) report(o *out, sender int, text string) {
	if c.planner == nil || !message.IsServerID(sender) {
		return
	}
	r, err := ParseReport(text)
	if err != nil {
		c.log.Warn().Err(err).Msg("dropping a report")
		return
	}
	rank := message.IDToRank(sender)
	changed := false
	switch r.Kind {
	case replica.ReportSynced:
		changed = c.planner.Synced(rank, r.Joiner, r.Range, r.Version)
	case replica.ReportDrained:
		changed = c.planner.Drained(rank, r.Range, r.Version)
	case replica.ReportCut:
		c.cutDone(o, rank, r)
	}
	if changed {
		c.log.Info().Str("view", c.planner.View().String()).Msg("new view")
		c.sendView(o)
	}
}

// checkViews fails a managed job whose servers did not all say hello in
// time, or whose lost ranges were not restored in time.
func (c *Core) checkViews(o *out, now time.Time) {
	if c.planner == nil {
		return
	}
	if !c.viewSent && now.Sub(c.viewsSince) >= c.cfg.ConnectTimeout {
		var missing []string
		for _, id := range c.members(message.ServerGroup) {
			if _, ok := c.hellos[id]; !ok {
				missing = append(missing, describe(c.peers[c.process(id)].node))
			}
		}
		c.fail(o, &NodeLostError{Node: c.peers[c.process(message.ServerRankToID(0))].node,
			Cause: fmt.Sprintf("%s did not join the managed job within %v: PS_REPLICAS and PS_CHECKPOINT_DIR need every server to be a Go pslite server with them set (a C++ ps-lite server cannot take part)",
				strings.Join(missing, ", "), c.cfg.ConnectTimeout)})
		return
	}
	for _, r := range slices.Sorted(mapKeys(c.lostSince)) {
		if now.Sub(c.lostSince[r]) < c.cfg.RecoveryWait {
			continue
		}
		var dead []message.Node
		for _, rank := range replica.Home(r, c.cfg.NumServers, c.cfg.Replicas) {
			if p := c.peers[message.ServerRankToID(rank)]; p != nil {
				dead = append(dead, p.node)
			}
		}
		c.fail(o, &RangeLostError{Range: r, NumServers: c.cfg.NumServers, Servers: dead, Wait: c.cfg.RecoveryWait})
		return
	}
}

func mapKeys[V any](m map[int]V) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// evict tells a node the scheduler found dead and left out of the job to
// stop.
func (c *Core) evict(o *out, id int, why string) {
	c.log.Warn().Str("node", message.DescribeID(id)).Str("reason", why).Msg("telling a node left out of the job to stop")
	o.send(NewNotice(id, NoticeEvict, why, c.nextTS()))
}

// takeView takes a view from the scheduler at a server or worker.
func (c *Core) takeView(o *out, text string, now time.Time) {
	v, err := replica.DecodeView([]byte(text))
	if err != nil {
		c.log.Warn().Err(err).Msg("dropping a view")
		return
	}
	if c.view != nil && v.Epoch <= c.view.Epoch {
		return
	}
	c.view = v
	if c.cfg.Role == message.RoleServer && v.Replicas > 0 && !c.mesh {
		// Servers pass entries to each other: connect to every server.
		c.mesh = true
		for _, n := range c.nodes {
			if n.Role == message.RoleServer && n.ID != c.me.ID {
				if _, ok := c.connected[int(n.ID)]; !ok {
					c.connected[int(n.ID)] = n.Addr()
					c.connect(o, n, now)
				}
			}
		}
	}
	o.notify(Event{Type: EventView, View: v})
}

// Hello is what a server says of its snapshot directory when it joins a
// managed job: each snapshot it can restore its ranges from, with what the
// program stored with it, or why it cannot restore one that is there.
type Hello struct {
	Snapshots map[uint64]string // gen -> meta
	Problems  []string
}

// Format writes h as a hello notice's text: a line "<gen> <quoted meta>"
// per snapshot, "! <quoted reason>" per problem.
func (h Hello) Format() string {
	var b strings.Builder
	b.WriteString("v1\n")
	for _, g := range slices.Sorted(func(yield func(uint64) bool) {
		for g := range h.Snapshots {
			if !yield(g) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "%d %s\n", g, strconv.Quote(h.Snapshots[g]))
	}
	for _, p := range h.Problems {
		fmt.Fprintf(&b, "! %s\n", strconv.Quote(p))
	}
	return b.String()
}

// ParseHello reads Format's text (an empty text: nothing on disk).
func ParseHello(s string) (Hello, error) {
	h := Hello{Snapshots: map[uint64]string{}}
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) == 0 || lines[0] == "" {
		return h, nil
	}
	if lines[0] != "v1" {
		return h, fmt.Errorf("control: hello of an unknown format %q", lines[0])
	}
	for _, l := range lines[1:] {
		first, rest, _ := strings.Cut(l, " ")
		q, err := strconv.Unquote(rest)
		if err != nil {
			return h, fmt.Errorf("control: bad hello line %q", l)
		}
		if first == "!" {
			h.Problems = append(h.Problems, q)
			continue
		}
		g, err := strconv.ParseUint(first, 10, 64)
		if err != nil || g == 0 {
			return h, fmt.Errorf("control: bad hello line %q", l)
		}
		h.Snapshots[g] = q
	}
	return h, nil
}

// restorePoint picks, from every server's hello, the snapshot the job
// resumes from: the latest that every server can restore its ranges from.
// Servers that have snapshots but share none, or that cannot restore one,
// fail the start-up with the reason: a job never silently starts afresh
// next to a snapshot.
func (c *Core) restorePoint() (uint64, string, error) {
	var common map[uint64]string
	var problems []string
	any := false
	ids := c.members(message.ServerGroup)
	for _, id := range ids {
		h, err := ParseHello(c.hellos[id])
		if err != nil {
			return 0, "", fmt.Errorf("%s: %w", message.DescribeID(id), err)
		}
		for _, p := range h.Problems {
			problems = append(problems, message.DescribeID(id)+": "+p)
		}
		if len(h.Snapshots) > 0 {
			any = true
		}
		if common == nil {
			common = h.Snapshots
			continue
		}
		for g := range common {
			if _, ok := h.Snapshots[g]; !ok {
				delete(common, g)
			}
		}
	}
	if len(problems) > 0 {
		return 0, "", errors.New(strings.Join(problems, "; "))
	}
	if len(common) == 0 {
		if any {
			var have []string
			for _, id := range ids {
				h, _ := ParseHello(c.hellos[id])
				have = append(have, fmt.Sprintf("%s has %v", message.DescribeID(id), slices.Sorted(maps.Keys(h.Snapshots))))
			}
			return 0, "", fmt.Errorf("no snapshot that every server can restore (%s): give every server the same PS_CHECKPOINT_DIR (shared, or copied to each host), or an empty one to start afresh", strings.Join(have, ", "))
		}
		return 0, "", nil
	}
	best := slices.Max(slices.Collect(maps.Keys(common)))
	return best, common[best], nil
}

// Checkpoint notices.
const (
	// NoticeCheckpoint, from a worker to the scheduler: take a snapshot now.
	// The text is "<request id> <quoted meta>".
	NoticeCheckpoint NoticeKind = "checkpoint"
	// NoticeCut, from the scheduler to every server: cut snapshot gen.
	// The text is "<gen> <quoted meta>".
	NoticeCut NoticeKind = "cut"
	// NoticeCommitted, from the scheduler to every server and to the
	// worker that asked: every range of snapshot gen is written (to the
	// servers: mark it so on disk; to the worker: they have). The text is
	// "<gen> <request id or 0>".
	NoticeCommitted NoticeKind = "committed"
	// NoticeMarked, from a server to the scheduler: it has marked snapshot
	// gen complete on disk. The text is "<gen>".
	NoticeMarked NoticeKind = "marked"
)

// Checkpoint asks the scheduler, from a worker, for a snapshot of every
// server's store now, with meta stored next to it; id names the request in
// the EventCommitted that answers it.
func (c *Core) Checkpoint(id int32, meta string) []Output {
	if c.phase != PhaseReady {
		return nil
	}
	if c.IsScheduler() {
		var o out
		c.startCut(&o, meta, c.me.ID, id)
		return o
	}
	return c.Notice(message.Scheduler, NoticeCheckpoint, fmt.Sprintf("%d %s", id, strconv.Quote(meta)))
}

// cutRequest is a worker waiting for a snapshot.
type cutRequest struct {
	node int32
	id   int32
}

// startCut starts snapshot gen at every server.
func (c *Core) startCut(o *out, meta string, node, id int32) {
	if c.planner == nil || !c.viewSent {
		if node != 0 && node != c.me.ID {
			o.send(NewNotice(int(node), NoticeCommitted, fmt.Sprintf("0 %d not a managed job (set PS_CHECKPOINT_DIR)", id), c.nextTS()))
		}
		return
	}
	c.nextGen++
	gen := c.nextGen
	c.cuts[gen] = map[int]bool{}
	if node != 0 {
		c.cutWaiters[gen] = append(c.cutWaiters[gen], cutRequest{node: node, id: id})
	}
	c.log.Info().Uint64("snapshot", gen).Str("meta", meta).Msg("taking a snapshot")
	text := fmt.Sprintf("%d %s", gen, strconv.Quote(meta))
	for _, sid := range c.members(message.ServerGroup) {
		if p := c.peers[sid]; p != nil && !p.dead && !p.left {
			o.send(NewNotice(sid, NoticeCut, text, c.nextTS()))
		}
	}
}

// cutDone counts a range of a snapshot written; once every range is,
// the snapshot is committed.
func (c *Core) cutDone(o *out, rank int, r replica.Report) {
	done := c.cuts[r.Gen]
	if done == nil || r.Range < 0 || r.Range >= c.cfg.NumServers {
		return
	}
	done[r.Range] = true
	if len(done) < c.cfg.NumServers {
		return
	}
	delete(c.cuts, r.Gen)
	c.planner.SetCommitted(r.Gen)
	c.log.Info().Uint64("snapshot", r.Gen).Msg("snapshot written; servers mark it complete")
	marking := map[int]bool{}
	for _, sid := range c.members(message.ServerGroup) {
		if p := c.peers[sid]; p != nil && !p.dead && !p.left {
			marking[sid] = true
			o.send(NewNotice(sid, NoticeCommitted, fmt.Sprintf("%d 0", r.Gen), c.nextTS()))
		}
	}
	c.marking[r.Gen] = marking
}

// marked takes a server's word that snapshot gen is marked complete on its
// disk; once every live server has, the workers that asked are answered.
func (c *Core) marked(o *out, sender int, text string) {
	gen, err := strconv.ParseUint(strings.TrimSpace(text), 10, 64)
	if err != nil {
		return
	}
	if m := c.marking[gen]; m != nil {
		delete(m, sender)
	}
	c.answerMarked(o)
}

// answerMarked answers the requests for snapshots every live server has
// marked complete (a server found dead meanwhile is not waited for).
func (c *Core) answerMarked(o *out) {
	for _, gen := range slices.Sorted(maps.Keys(c.marking)) {
		m := c.marking[gen]
		for sid := range m {
			if p := c.peers[sid]; p == nil || p.dead || p.left {
				delete(m, sid)
			}
		}
		if len(m) > 0 {
			continue
		}
		delete(c.marking, gen)
		c.log.Info().Uint64("snapshot", gen).Msg("snapshot complete")
		for _, w := range c.cutWaiters[gen] {
			if w.node == c.me.ID {
				o.notify(Event{Type: EventCommitted, Gen: gen, RequestID: w.id})
				continue
			}
			o.send(NewNotice(int(w.node), NoticeCommitted, fmt.Sprintf("%d %d", gen, w.id), c.nextTS()))
		}
		delete(c.cutWaiters, gen)
	}
}

// ParseCommitted reads a NoticeCommitted's text: the gen (0 when the
// snapshot was refused), the request id and, when refused, why.
func ParseCommitted(text string) (gen uint64, id int32, why string, err error) {
	f := strings.SplitN(text, " ", 3)
	if len(f) < 2 {
		return 0, 0, "", fmt.Errorf("control: bad committed notice %q", text)
	}
	gen, err1 := strconv.ParseUint(f[0], 10, 64)
	i, err2 := strconv.ParseInt(f[1], 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, "", fmt.Errorf("control: bad committed notice %q", text)
	}
	if len(f) == 3 {
		why = f[2]
	}
	return gen, int32(i), why, nil
}

// ParseCut reads a NoticeCut's text.
func ParseCut(text string) (gen uint64, meta string, err error) {
	g, rest, _ := strings.Cut(text, " ")
	gen, err = strconv.ParseUint(g, 10, 64)
	if err == nil {
		meta, err = strconv.Unquote(rest)
	}
	if err != nil || gen == 0 {
		return 0, "", fmt.Errorf("control: bad cut notice %q", text)
	}
	return gen, meta, nil
}

// checkpointRequest takes a worker's NoticeCheckpoint.
func (c *Core) checkpointRequest(o *out, sender int, text string) {
	idText, rest, _ := strings.Cut(text, " ")
	id, err1 := strconv.ParseInt(idText, 10, 32)
	meta, err2 := strconv.Unquote(rest)
	if err1 != nil || err2 != nil || !message.IsWorkerID(sender) {
		c.log.Warn().Str("text", text).Msg("dropping a bad checkpoint request")
		return
	}
	c.startCut(o, meta, int32(sender), int32(id))
}

// tickCheckpoints starts a snapshot every CheckpointInterval.
func (c *Core) tickCheckpoints(o *out, now time.Time) {
	if c.cfg.CheckpointInterval <= 0 || c.planner == nil || !c.viewSent {
		return
	}
	if c.lastCut.IsZero() {
		c.lastCut = now
		return
	}
	if now.Sub(c.lastCut) >= c.cfg.CheckpointInterval {
		c.lastCut = now
		c.startCut(o, "", 0, 0)
	}
}
