package replica

import (
	"fmt"
	"slices"
)

// Planner makes the views of a job: the scheduler's part of replication.
// It does no I/O and reads no clock; the scheduler's control core feeds it
// what happens (a server dead, a replacement, reports from servers) and
// sends every new view it makes to the job's servers and workers.
//
// The rules:
//   - At start every range is held by its home set (Home), home server
//     first.
//   - A dead server leaves every range: a head is followed by the next
//     server of the chain at once; a server in the middle of a chain is
//     skipped, and the servers after it copy the range again (they may
//     lack what it had not passed on); a tail is simply dropped. A range
//     whose chain becomes empty is lost (see Lost).
//   - A replacement (a new process taking a dead server's rank) joins
//     every range of its home set that some server still holds: it copies
//     the range from the tail, then joins the chain as its tail (Synced).
//     A lost range is given to the replacement, restored from the last
//     snapshot (or empty): the view records the loss.
//   - A range whose home server is back in its chain but is not its head
//     drains (the head stops taking requests and reports once all it
//     applied is replicated, Drained) and then moves to its home server,
//     so that C++ workers, which route every range to its home server,
//     find it there.
type Planner struct {
	n, k int
	v    *View
	// dead marks ranks found dead and not replaced.
	dead []bool
	// committed is the last snapshot taken of every range (0: none): a lost
	// range is restored from it.
	committed uint64
}

// NewPlanner returns the planner of a job of n servers with k replicas of
// each range (at most n-1 count), and its first view.
func NewPlanner(n, k int) (*Planner, error) {
	if n <= 0 || n > MaxServers {
		return nil, fmt.Errorf("replica: %d servers", n)
	}
	if k < 0 {
		return nil, fmt.Errorf("replica: %d replicas", k)
	}
	k = min(k, n-1)
	v := &View{Epoch: 1, Replicas: k, Ranges: make([]Range, n), Inc: make([]uint64, n)}
	for r := range v.Ranges {
		v.Ranges[r] = Range{Version: 1, Chain: Home(r, n, k)}
		v.Inc[r] = 1
	}
	return &Planner{n: n, k: k, v: v, dead: make([]bool, n)}, nil
}

// View returns the current view; the caller must not change it.
func (p *Planner) View() *View { return p.v }

// SetRestored records the snapshot the job's servers restored at start.
func (p *Planner) SetRestored(gen uint64, meta string) {
	p.v.Restored, p.v.RestoredMeta = gen, meta
	p.committed = max(p.committed, gen)
	p.v.Epoch++
}

// SetCommitted records that snapshot gen of every range is complete: a
// range lost from now on is restored from it.
func (p *Planner) SetCommitted(gen uint64) { p.committed = max(p.committed, gen) }

// Committed returns the last complete snapshot (0: none).
func (p *Planner) Committed() uint64 { return p.committed }

// change bumps range r's version; the caller bumps the epoch once.
func (p *Planner) change(r int) { p.v.Ranges[r].Version++ }

// Dead removes rank from every range. It reports whether the view changed,
// and the ranges that now have no server (lost until a replacement
// restores them).
func (p *Planner) Dead(rank int) (changed bool, lost []int) {
	if rank < 0 || rank >= p.n || p.dead[rank] {
		return false, nil
	}
	p.dead[rank] = true
	for r := range p.v.Ranges {
		rv := &p.v.Ranges[r]
		touched := false
		if i := slices.Index(rv.Joining, rank); i >= 0 {
			rv.Joining = slices.Delete(rv.Joining, i, i+1)
			touched = true
		}
		if i := rv.Position(rank); i >= 0 {
			touched = true
			after := slices.Clone(rv.Chain[i+1:])
			rv.Chain = rv.Chain[:i]
			if i == 0 {
				rv.Chain = append(rv.Chain, after...)
			} else {
				// In the middle: the servers after it may lack what it
				// had not passed on; they copy the range again.
				rv.Joining = append(after, rv.Joining...)
			}
			if len(rv.Chain) == 0 {
				// Nobody holds the range in full: the partial copies of
				// joiners are worth nothing.
				rv.Joining = nil
				lost = append(lost, r)
			}
		}
		if rv.Draining && (touched || rv.Head() == rank) {
			rv.Draining = false
			touched = true
		}
		if touched {
			p.change(r)
			changed = true
		}
	}
	if changed {
		p.v.Epoch++
	}
	return changed, lost
}

// Lost returns the ranges no server holds.
func (p *Planner) Lost() []int {
	var out []int
	for r, rv := range p.v.Ranges {
		if len(rv.Chain) == 0 {
			out = append(out, r)
		}
	}
	return out
}

// Replaced records that a new process took dead rank's place: it joins the
// ranges of its home set, and takes over, restored from the last snapshot,
// those nobody holds. It reports the ranges restored that way.
func (p *Planner) Replaced(rank int) (restored []int) {
	if rank < 0 || rank >= p.n {
		return nil
	}
	// A replacement whose predecessor was still listed (it took the place
	// of a node that left rather than died) starts from nothing as well.
	p.Dead(rank)
	p.dead[rank] = false
	p.v.Inc[rank]++
	for _, r := range HomeRanges(rank, p.n, p.k) {
		rv := &p.v.Ranges[r]
		switch {
		case len(rv.Chain) == 0:
			rv.Chain = []int{rank}
			p.change(r)
			rv.LossGen, rv.LossVersion = p.committed, rv.Version
			restored = append(restored, r)
		case !rv.Holds(rank):
			rv.Joining = append(rv.Joining, rank)
			p.change(r)
		}
	}
	p.v.Epoch++
	return restored
}

// Synced records that tail, range r's tail, says rank has copied the
// range and caught up, as of version: rank becomes the chain's tail. It
// reports whether the view changed (a report about an older version of the
// range, or not from its tail, is ignored: the copy may have to start
// again).
func (p *Planner) Synced(tail, rank, r int, version uint64) bool {
	if r < 0 || r >= p.n {
		return false
	}
	rv := &p.v.Ranges[r]
	i := slices.Index(rv.Joining, rank)
	if rv.Version != version || i < 0 || len(rv.Chain) == 0 || rv.Tail() != tail {
		return false
	}
	rv.Joining = slices.Delete(rv.Joining, i, i+1)
	rv.Chain = append(rv.Chain, rank)
	if rv.Head() != r && rv.Position(r) > 0 {
		rv.Draining = true
	}
	p.change(r)
	p.v.Epoch++
	return true
}

// Drained records that rank, range r's head, has replicated everything it
// applied at version: the range moves to its home server, the chain in
// home order. It reports whether the view changed.
func (p *Planner) Drained(rank, r int, version uint64) bool {
	if r < 0 || r >= p.n {
		return false
	}
	rv := &p.v.Ranges[r]
	if rv.Version != version || !rv.Draining || rv.Head() != rank || rv.Position(r) < 0 {
		return false
	}
	slices.SortFunc(rv.Chain, func(a, b int) int { return p.dist(r, a) - p.dist(r, b) })
	rv.Draining = false
	p.change(r)
	p.v.Epoch++
	return true
}

// dist is how far rank is from r going up the ring.
func (p *Planner) dist(r, rank int) int { return ((rank-r)%p.n + p.n) % p.n }
