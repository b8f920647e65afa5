package replica

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/rs/zerolog"
)

// The simulation: a scheduler (a Planner), servers (a Core each, over a
// store of counters) and workers that push increments, on a network the
// test drives one delivery at a time, in the style of etcd raft's tests.
// Links keep order (as TCP does); which link delivers next is chosen by a
// seeded random source, so every run is one of the possible interleavings
// and can be replayed from its seed. Servers can be killed (what they sent
// may or may not still arrive) and replaced at any step.

const keysPerRange = 1000

type simPayload struct {
	key  uint64
	add  int64
	part map[uint64]int64 // a snapshot's data
}

type simMsgKind int

const (
	mReq simMsgKind = iota + 1
	mResp
	mRedirect
	mFwd
	mAck
	mSnap
	mView
	mReport
	mRefuse
	mAskCopy
	mSayAgain
)

type simMsg struct {
	kind   simMsgKind
	from   string // node name
	req    *Request[simPayload]
	fwd    *Forward[simPayload]
	ack    Ack
	snap   *Snapshot[simPayload]
	view   *View
	report Report
	rank   int
	origin Origin
	rng    int
	epoch  uint64
}

type simServer struct {
	rank  int
	inc   uint64
	name  string
	core  *Core[simPayload]
	store map[uint64]int64
	alive bool
}

type simWorker struct {
	id      int32
	name    string
	view    *View
	next    int32 // next timestamp
	pending map[int32]*simPending
	acked   map[uint64]int64 // per key: increments answered
	sent    int
}

type simPending struct {
	origin Origin
	rng    int
	key    uint64
	dest   int
	inc    uint64
	after  uint64 // redirected: send again once the view reaches this epoch
	waits  bool   // waiting for after
}

type simNet struct {
	t       *testing.T
	rng     *rand.Rand
	n, k    int
	planner *Planner
	servers []*simServer
	workers []*simWorker
	links   map[[2]string][]simMsg
	steps   int
	// dropOnKill: messages a killed server had sent are lost.
	dropOnKill bool
	// resendRate is the chance that a message delivered is also sent again
	// later, behind what its link carries (what PS_RESEND does to a
	// message whose ACK is late: a duplicate, out of order).
	resendRate float64
	// unreadableAt is the delivery at or after which the first entry,
	// copy or ack for a server arrives unreadable (the driver drops it and tells
	// the core); unreadableRate the chance that any does. unreadable
	// counts them.
	unreadableAt   int
	unreadableRate float64
	unreadable     int
	log            []string
	disk           map[uint64]map[int]map[uint64]int64 // shared snapshot directory
}

func newSimNet(t *testing.T, seed uint64, n, k, workers int) *simNet {
	p, err := NewPlanner(n, k)
	if err != nil {
		t.Fatal(err)
	}
	s := &simNet{t: t, rng: rand.New(rand.NewPCG(seed, 99)), n: n, k: k, planner: p,
		links: map[[2]string][]simMsg{}, disk: map[uint64]map[int]map[uint64]int64{}, unreadableAt: -1}
	for r := 0; r < n; r++ {
		s.servers = append(s.servers, s.newServer(r))
	}
	for w := 0; w < workers; w++ {
		s.workers = append(s.workers, &simWorker{id: int32(9 + 2*w), name: fmt.Sprintf("w%d", w),
			pending: map[int32]*simPending{}, acked: map[uint64]int64{}, next: int32(1000 * (w + 1))})
	}
	s.broadcast()
	return s
}

func (s *simNet) newServer(rank int) *simServer {
	return &simServer{rank: rank, inc: s.planner.View().IncOf(rank), name: fmt.Sprintf("s%d", rank),
		core: NewCore[simPayload](rank, zerolog.Nop()), store: map[uint64]int64{}, alive: true}
}

func (s *simNet) server(name string) *simServer {
	for _, sv := range s.servers {
		if sv.name == name {
			return sv
		}
	}
	return nil
}

func (s *simNet) worker(name string) *simWorker {
	for _, w := range s.workers {
		if w.name == name {
			return w
		}
	}
	return nil
}

func srvName(rank int) string { return fmt.Sprintf("s%d", rank) }

func rangeOf(key uint64) int { return int(key / keysPerRange) }

func (s *simNet) send(from, to string, m simMsg) {
	m.from = from
	s.links[[2]string{from, to}] = append(s.links[[2]string{from, to}], m)
}

// broadcast sends the planner's view to every server and worker.
func (s *simNet) broadcast() {
	v := s.planner.View().Clone()
	for _, sv := range s.servers {
		s.send("sched", sv.name, simMsg{kind: mView, view: v})
	}
	for _, w := range s.workers {
		s.send("sched", w.name, simMsg{kind: mView, view: v})
	}
}

// push makes worker w push add to key.
func (s *simNet) push(w *simWorker, key uint64, add int64) {
	w.next++
	p := &simPending{origin: Origin{Sender: w.id, TS: w.next}, rng: rangeOf(key), key: key}
	w.pending[w.next] = p
	w.sent++
	s.sendPending(w, p, add)
}

func (s *simNet) sendPending(w *simWorker, p *simPending, add int64) {
	dest := w.view.HeadOf(p.rng)
	if dest < 0 {
		p.waits, p.after = true, w.view.Epoch+1
		return
	}
	p.dest, p.inc, p.waits = dest, w.view.IncOf(dest), false
	req := &Request[simPayload]{Origin: p.origin, Range: p.rng, Epoch: w.view.Epoch, Tagged: true, Changes: true,
		Payload: simPayload{key: p.key, add: add}}
	s.send(w.name, srvName(dest), simMsg{kind: mReq, req: req})
}

// step delivers one message, from a link chosen at random. It reports
// false when nothing is in flight.
func (s *simNet) step() bool {
	var keys [][2]string
	for k, q := range s.links {
		if len(q) > 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return false
	}
	slices.SortFunc(keys, func(a, b [2]string) int {
		if a[0] != b[0] {
			return cmpStr(a[0], b[0])
		}
		return cmpStr(a[1], b[1])
	})
	k := keys[s.rng.IntN(len(keys))]
	m := s.links[k][0]
	s.links[k] = s.links[k][1:]
	s.steps++
	if s.resendRate > 0 && s.rng.Float64() < s.resendRate {
		s.links[k] = append(s.links[k], m)
	}
	if (m.kind == mFwd || m.kind == mSnap || m.kind == mAck) && s.garble() {
		s.unreadable++
		s.logf("%s->%s unreadable %s", m.from, k[1], m)
		if sv := s.server(k[1]); sv != nil && sv.alive {
			s.run(sv, sv.core.Unreadable(s.server(m.from).rank))
		}
		return true
	}
	s.deliver(k[1], m)
	return true
}

// garble reports whether the entry or copy delivered now arrives
// unreadable.
func (s *simNet) garble() bool {
	if s.unreadableAt >= 0 && s.steps >= s.unreadableAt {
		s.unreadableAt = -1
		return true
	}
	return s.unreadableRate > 0 && s.rng.Float64() < s.unreadableRate
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (m simMsg) String() string {
	switch m.kind {
	case mReq:
		return fmt.Sprintf("req %v r%d", m.req.Origin, m.req.Range)
	case mResp:
		return fmt.Sprintf("resp %v r%d", m.origin, m.rng)
	case mRedirect:
		return fmt.Sprintf("redirect %v r%d e%d", m.origin, m.rng, m.epoch)
	case mFwd:
		return fmt.Sprintf("fwd r%d lsn%d kind%d e%d", m.fwd.Range, m.fwd.LSN, m.fwd.Kind, m.fwd.Epoch)
	case mAck:
		return fmt.Sprintf("ack r%d lsn%d e%d", m.ack.Range, m.ack.LSN, m.ack.Epoch)
	case mSnap:
		return fmt.Sprintf("snap r%d lsn%d e%d %v", m.snap.Range, m.snap.LSN, m.snap.Epoch, sortedMap(m.snap.Data.part))
	case mView:
		return "view " + m.view.String()
	case mReport:
		return fmt.Sprintf("report %+v", m.report)
	case mRefuse:
		return "refuse"
	case mAskCopy:
		return fmt.Sprintf("ask copy r%d lsn%d e%d", m.ack.Range, m.ack.LSN, m.ack.Epoch)
	case mSayAgain:
		return "say again"
	}
	return "?"
}

func (s *simNet) deliver(to string, m simMsg) {
	s.logf("%s->%s %s", m.from, to, m)
	if to == "sched" {
		s.schedReport(m)
		return
	}
	if w := s.worker(to); w != nil {
		s.workerMsg(w, m)
		return
	}
	sv := s.server(to)
	if sv == nil || !sv.alive {
		return
	}
	var outs []Output[simPayload]
	switch m.kind {
	case mView:
		outs = sv.core.SetView(m.view)
	case mReq:
		outs = sv.core.Request(m.req)
	case mFwd:
		outs = sv.core.Forward(m.fwd)
	case mAck:
		outs = sv.core.Ack(m.ack)
	case mSnap:
		outs = sv.core.Snapshot(m.snap)
	case mAskCopy:
		outs = sv.core.AskCopy(m.ack)
	case mSayAgain:
		outs = sv.core.SayAgain(m.rank)
	case mRefuse:
		return
	}
	s.run(sv, outs)
}

func (s *simNet) run(sv *simServer, outs []Output[simPayload]) {
	for len(outs) > 0 {
		o := outs[0]
		outs = outs[1:]
		switch o.Kind {
		case OutApply:
			var p simPayload
			if o.Request != nil {
				p = o.Request.Payload
			} else {
				p = o.Forward.Payload
			}
			if rangeOf(p.key) != o.Range {
				s.t.Fatalf("%s: entry for key %d applied to range %d", sv.name, p.key, o.Range)
			}
			sv.store[p.key] += p.add
			s.logf("APPLY %s key %d +%d lsn %d -> %d", sv.name, p.key, p.add, o.LSN, sv.store[p.key])
		case OutRead:
			s.t.Fatalf("no reads in this simulation")
		case OutCut:
			part := map[uint64]int64{}
			for k, v := range sv.store {
				if rangeOf(k) == o.Range {
					part[k] = v
				}
			}
			if s.disk[o.Gen] == nil {
				s.disk[o.Gen] = map[int]map[uint64]int64{}
			}
			if prev, ok := s.disk[o.Gen][o.Range]; ok && !maps.Equal(prev, part) {
				s.t.Fatalf("%s: snapshot %d of range %d differs from another server's: %v vs %v", sv.name, o.Gen, o.Range, part, prev)
			}
			s.disk[o.Gen][o.Range] = part
			outs = append(outs, sv.core.CutWritten(o.Range, o.Gen)...)
		case OutForward:
			s.send(sv.name, srvName(o.To), simMsg{kind: mFwd, fwd: o.Forward})
		case OutAck:
			s.send(sv.name, srvName(o.To), simMsg{kind: mAck, ack: o.Ack})
		case OutAskCopy:
			s.send(sv.name, srvName(o.To), simMsg{kind: mAskCopy, ack: o.Ack})
		case OutSayAgain:
			s.send(sv.name, srvName(o.To), simMsg{kind: mSayAgain, rank: sv.rank})
		case OutSnapshot:
			part := map[uint64]int64{}
			for k, v := range sv.store {
				if rangeOf(k) == o.Range {
					part[k] = v
				}
			}
			snap := &Snapshot[simPayload]{From: sv.rank, Inc: sv.core.View().IncOf(sv.rank), Epoch: sv.core.Epoch(),
				Range: o.Range, LSN: o.LSN, Gen: o.Gen, Applied: o.Applied, Data: simPayload{part: part}}
			s.send(sv.name, srvName(o.To), simMsg{kind: mSnap, snap: snap})
		case OutRestore:
			for k := range sv.store {
				if rangeOf(k) == o.Range {
					delete(sv.store, k)
				}
			}
			maps.Copy(sv.store, o.Snapshot.Data.part)
		case OutLoad:
			for k := range sv.store {
				if rangeOf(k) == o.Range {
					delete(sv.store, k)
				}
			}
			if o.Gen != 0 {
				maps.Copy(sv.store, s.disk[o.Gen][o.Range])
			}
		case OutRespond, OutRespondAgain:
			w := s.workerByID(o.Request.Origin.Sender)
			s.send(sv.name, w.name, simMsg{kind: mResp, origin: o.Request.Origin, rng: o.Range, rank: sv.rank})
		case OutRedirect:
			w := s.workerByID(o.Request.Origin.Sender)
			s.send(sv.name, w.name, simMsg{kind: mRedirect, origin: o.Request.Origin, rng: o.Range, epoch: o.Epoch, rank: sv.rank})
		case OutRefuse:
			s.send(sv.name, srvName(o.To), simMsg{kind: mRefuse})
		case OutReport:
			s.send(sv.name, "sched", simMsg{kind: mReport, report: o.Report, rank: sv.rank})
		case OutRelease:
		}
	}
}

func (s *simNet) workerByID(id int32) *simWorker {
	for _, w := range s.workers {
		if w.id == id {
			return w
		}
	}
	s.t.Fatalf("no worker %d", id)
	return nil
}

func (s *simNet) schedReport(m simMsg) {
	if !s.servers[m.rank].alive {
		return // a dead server's last words
	}
	changed := false
	switch m.report.Kind {
	case ReportSynced:
		changed = s.planner.Synced(m.rank, m.report.Joiner, m.report.Range, m.report.Version)
	case ReportDrained:
		changed = s.planner.Drained(m.rank, m.report.Range, m.report.Version)
	case ReportCut:
	}
	if changed {
		s.broadcast()
	}
}

func (s *simNet) workerMsg(w *simWorker, m simMsg) {
	switch m.kind {
	case mView:
		if w.view != nil && m.view.Epoch <= w.view.Epoch {
			return
		}
		w.view = m.view
		for _, ts := range sortedTS(w.pending) {
			p := w.pending[ts]
			switch {
			case p.waits && w.view.Epoch >= p.after:
				s.sendPending(w, p, 1)
			case !p.waits && (w.view.IncOf(p.dest) != p.inc || !w.view.Ranges[p.rng].Holds(p.dest)):
				// Its server died: send it to the range's head now.
				s.sendPending(w, p, 1)
			}
		}
	case mResp:
		p := w.pending[m.origin.TS]
		if p == nil || p.waits || p.dest != m.rank {
			return // answered already, or from a server it no longer waits on
		}
		delete(w.pending, m.origin.TS)
		w.acked[p.key]++
	case mRedirect:
		p := w.pending[m.origin.TS]
		if p == nil || p.waits || p.dest != m.rank {
			return
		}
		// The server was not the head in view m.epoch: send it to the head
		// of a view at least that recent.
		if w.view.Epoch >= m.epoch {
			s.sendPending(w, p, 1)
			return
		}
		p.waits, p.after = true, m.epoch
	}
}

func sortedTS(m map[int32]*simPending) []int32 {
	out := make([]int32, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// kill stops server rank; the scheduler finds it dead at once.
func (s *simNet) kill(rank int) {
	sv := s.servers[rank]
	sv.alive = false
	if s.dropOnKill {
		for k := range s.links {
			if k[0] == sv.name {
				delete(s.links, k)
			}
		}
	}
	s.logf("kill %s", sv.name)
	if changed, _ := s.planner.Dead(rank); changed {
		s.broadcast()
	}
}

// replace starts a new process for dead rank.
func (s *simNet) replace(rank int) {
	for k := range s.links {
		if k[1] == srvName(rank) {
			delete(s.links, k) // what was on its way to the dead process
		}
	}
	s.planner.Replaced(rank)
	s.servers[rank] = s.newServer(rank)
	s.logf("replace %s", srvName(rank))
	s.broadcast()
}

func (s *simNet) logf(format string, a ...any) { s.log = append(s.log, fmt.Sprintf(format, a...)) }

// settle delivers messages until nothing is in flight.
func (s *simNet) settle() {
	for i := 0; s.step(); i++ {
		if i > 1_000_000 {
			s.t.Fatal("the network does not settle")
		}
	}
}

// check verifies that every push was answered and that every server of
// every range's chain holds exactly what was answered.
func (s *simNet) check(label string) {
	s.t.Helper()
	want := map[uint64]int64{}
	for _, w := range s.workers {
		if len(w.pending) > 0 {
			s.t.Fatalf("%s: %s has %d requests unanswered (view %s); log %v", label, w.name, len(w.pending), w.view, s.log)
		}
		for k, v := range w.acked {
			want[k] += v
		}
	}
	v := s.planner.View()
	for r, rv := range v.Ranges {
		if len(rv.Chain) == 0 {
			s.t.Fatalf("%s: range %d lost; view %s", label, r, v)
		}
		for _, rank := range rv.Chain {
			sv := s.servers[rank]
			got := map[uint64]int64{}
			for k, x := range sv.store {
				if rangeOf(k) == r {
					got[k] = x
				}
			}
			exp := map[uint64]int64{}
			for k, x := range want {
				if rangeOf(k) == r {
					exp[k] = x
				}
			}
			if !maps.Equal(got, exp) {
				s.t.Fatalf("%s: server %d holds %v of range %d, want %v; view %s; log %v", label, rank, sortedMap(got), r, sortedMap(exp), v, s.log)
			}
		}
	}
}

func sortedMap(m map[uint64]int64) string {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	out := "{"
	for _, k := range keys {
		out += fmt.Sprintf("%d:%d ", k, m[k])
	}
	return out + "}"
}
