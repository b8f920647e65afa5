package faults_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// Managed jobs (PS_REPLICAS): every key range on two servers. A server
// lost costs no acknowledged push: the job goes on without it, and a
// replacement copies its ranges back.

func replicas(k int) func(*postoffice.Config) {
	return func(c *postoffice.Config) { c.Replicas = k }
}

// exact finishes the job and checks that every worker's key on every range
// holds exactly the rounds it pushed.
func (e *env) exact(others ...*postoffice.Postoffice) {
	e.t.Helper()
	errs := e.finish(others...)
	for n, err := range errs {
		if err != nil {
			e.t.Errorf("%s: %v", n, err)
		}
	}
	for _, r := range e.workers {
		if len(r.counts) != len(e.c.Servers) {
			e.t.Errorf("%s pulled %v", name(r.p), r.counts)
			continue
		}
		for rg, c := range r.counts {
			if c != r.rounds.Load() {
				e.t.Errorf("%s's key on range %d holds %d, pushed %d rounds", name(r.p), rg, c, r.rounds.Load())
			}
		}
	}
}

var debugRounds = false

// moreRounds advances time until every worker has done n more rounds.
func (e *env) moreRounds(n int64) {
	e.t.Helper()
	want := make([]int64, len(e.workers))
	for i, r := range e.workers {
		want[i] = r.rounds.Load() + n
	}
	e.within(bound, "rounds go on", func() bool {
		if debugRounds {
			var got []int64
			for _, r := range e.workers {
				got = append(got, r.rounds.Load())
			}
			e.t.Logf("rounds %v want %v at %v", got, want, e.clock.Now())
		}
		for i, r := range e.workers {
			if r.rounds.Load() < want[i] && !isDone(r.done) {
				return false
			}
		}
		return true
	})
}

// startReplacement starts a server to take a dead one's place.
func (e *env) startReplacement() *postoffice.Postoffice {
	e.t.Helper()
	repl := e.newNode(message.RoleServer)
	e.join(repl)
	e.serve(repl)
	return repl
}

// homeAgain waits until every range is back on its home set, headed by its
// home server.
func (e *env) homeAgain() {
	e.t.Helper()
	e.within(bound, "every range back home", func() bool {
		v := e.c.Scheduler.View()
		for r, rv := range v.Ranges {
			if rv.Head() != r || len(rv.Joining) > 0 || rv.Draining || len(rv.Chain) != v.Replicas+1 {
				return false
			}
		}
		return true
	})
}

var replicationCases = []struct {
	name  string
	tweak func(*postoffice.Config)
}{
	{"heartbeats", both(replicas(1), heartbeats(hbTimeout))},
	{"heartbeats and resend", both(replicas(1), heartbeats(hbTimeout), resend)},
	{"no heartbeats", replicas(1)},
}

// TestReplicatedServerKilled: a server killed, no replacement: its ranges
// fail over, the job goes on and completes with exact counts.
func TestReplicatedServerKilled(t *testing.T) {
	for _, c := range replicationCases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 3, 2, c.tweak)
			e.startWorkers()
			e.waitRounds(3)
			victim := e.c.Servers[1]
			e.kill(victim)
			e.moreRounds(5)
			e.advance(2 * hbTimeout) // past the recovery wait: nothing fails
			e.exact(without(e.c.Servers, victim)...)
		})
	}
}

// TestReplicatedServerReplaced: a server killed and replaced: the
// replacement copies its ranges, takes its home range back, and the job
// completes with exact counts.
func TestReplicatedServerReplaced(t *testing.T) {
	for _, c := range replicationCases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 3, 2, both(c.tweak, withMetrics))
			e.startWorkers()
			e.waitRounds(3)
			victim := e.c.Servers[1]
			e.kill(victim)
			e.moreRounds(2)
			repl := e.startReplacement()
			e.homeAgain()
			e.moreRounds(3)
			e.exact(append(without(e.c.Servers, victim), repl)...)
			// The replacement copied the ranges it holds (its home range
			// and the one it replicates); the workers took the views.
			if n := repl.Metrics().Value("pslite_ranges_copied_total", nil); n < 2 {
				t.Errorf("the replacement copied %v ranges, want 2", n)
			}
			for _, w := range e.c.Workers {
				if n := w.Metrics().Value("pslite_view_changes_total", nil); n < 3 {
					t.Errorf("a worker took %v views, want the first, the one without the victim and more", n)
				}
			}
		})
	}
}

// TestReplicatedKillEveryServer kills each server in turn, at several
// moments of a round, and replaces it.
func TestReplicatedKillEveryServer(t *testing.T) {
	for victim := 0; victim < 3; victim++ {
		for _, delay := range []time.Duration{0, 30 * time.Millisecond} {
			t.Run(fmt.Sprintf("server%d-after%v", victim, delay), func(t *testing.T) {
				e := newEnv(t, 3, 2, both(replicas(1), heartbeats(hbTimeout)))
				e.startWorkers()
				e.waitRounds(2)
				time.Sleep(delay)
				v := e.c.Servers[victim]
				e.kill(v)
				repl := e.startReplacement()
				e.homeAgain()
				e.moreRounds(2)
				e.exact(append(without(e.c.Servers, v), repl)...)
			})
		}
	}
}

func TestReplicatedNoFault(t *testing.T) {
	e := newEnv(t, 3, 2, replicas(1))
	e.startWorkers()
	e.waitRounds(3)
	e.exact(e.c.Servers...)
}

// TestReplicatedKillDuringCopy kills a second server at successive points
// of a replacement's copy (4 servers, 2 replicas: no range loses every
// holder): the copies start again from the new tails, and the job completes
// with exact counts.
func TestReplicatedKillDuringCopy(t *testing.T) {
	steps := []int{0, 1, 2, 3, 5, 8}
	if testing.Short() {
		steps = []int{0, 2}
	}
	for _, k := range steps {
		for _, second := range []int{0, 2} {
			t.Run(fmt.Sprintf("kill server %d after %d steps", second, k), func(t *testing.T) {
				e := newEnv(t, 4, 2, both(replicas(2), heartbeats(hbTimeout)))
				e.startWorkers()
				e.waitRounds(2)
				victim := e.c.Servers[1]
				e.kill(victim)
				e.moreRounds(1)
				repl := e.startReplacement()
				for range k {
					e.advance(step)
				}
				other := e.c.Servers[second]
				e.kill(other)
				e.copiesDone()
				e.moreRounds(2)
				e.exact(append(without(e.c.Servers, victim, other), repl)...)
			})
		}
	}
}

// copiesDone waits until no range is being copied or moved (a range whose
// home server is dead stays elsewhere).
func (e *env) copiesDone() {
	e.t.Helper()
	e.within(bound, "the copies done", func() bool {
		v := e.c.Scheduler.View()
		for _, rv := range v.Ranges {
			if len(rv.Joining) > 0 || rv.Draining || len(rv.Chain) == 0 {
				return false
			}
		}
		return true
	})
}

// garbler returns a tamper function that makes every third replication
// message of the given kinds (forwards, batches of them, acks, copies;
// the kind byte after kv's "pslite:" body prefix) unreadable, up to most
// of them, by cutting its body short; hit counts them.
func garbler(kinds string, most int32, hit *atomic.Int32) func([][]byte) [][]byte {
	var seen int32
	return func(frames [][]byte) [][]byte {
		if len(frames) == 0 {
			return frames
		}
		meta, err := message.Decode(frames[0])
		const prefix = "pslite:"
		if err != nil || len(meta.Body) <= len(prefix)+1 || string(meta.Body[:len(prefix)]) != prefix ||
			!strings.ContainsRune(kinds, rune(meta.Body[len(prefix)])) {
			return frames
		}
		seen++
		if seen%3 != 1 || hit.Load() >= most {
			return frames
		}
		meta.Body = meta.Body[:len(prefix)+2]
		b, err := message.Encode(&meta)
		if err != nil {
			return frames
		}
		hit.Add(1)
		frames[0] = b
		return frames
	}
}

// TestReplicatedUnreadableMessages: entries, batches, acks and copies
// between servers arrive unreadable (a damaged peer, or a bug such as the
// one TestBatchEntriesOwnTheirTypes guards against). The server that drops
// one asks the sender for a copy of its ranges and to say again how far
// it is; before, the range's chain stalled for good. The job completes
// with exact counts, with and without a server killed and replaced.
func TestReplicatedUnreadableMessages(t *testing.T) {
	for _, c := range []struct {
		name    string
		servers int
		k       int
		kinds   string
		replace bool
	}{
		{"entries, 2 replicas of 3", 3, 1, "FB", false},
		{"acks", 3, 1, "A", false},
		{"everything, 3 servers per chain", 4, 2, "FBAS", false},
		{"everything, server replaced", 3, 1, "FBAS", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.servers, 2, both(replicas(c.k), heartbeats(hbTimeout), withMetrics))
			var hit atomic.Int32
			for i, a := range e.c.Servers {
				for j, b := range e.c.Servers {
					if i != j {
						e.net.Tamper(testcluster.Addr(a), testcluster.Addr(b), garbler(c.kinds, 6, &hit))
					}
				}
			}
			e.startWorkers()
			e.waitRounds(4)
			survivors := e.c.Servers
			if c.replace {
				victim := e.c.Servers[1]
				e.kill(victim)
				e.moreRounds(1)
				repl := e.startReplacement()
				for i, a := range e.c.Servers {
					if i != 1 {
						e.net.Tamper(testcluster.Addr(a), testcluster.Addr(repl), garbler(c.kinds, 12, &hit))
					}
				}
				e.homeAgain()
				survivors = append(without(e.c.Servers, victim), repl)
			}
			e.moreRounds(4)
			if hit.Load() == 0 {
				t.Fatal("no message was made unreadable")
			}
			var dropped float64
			for _, s := range survivors {
				dropped += s.Metrics().Value("pslite_replication_unreadable_total", nil)
			}
			if dropped == 0 {
				t.Errorf("%d messages made unreadable, none counted as dropped", hit.Load())
			}
			t.Logf("%d messages made unreadable, %v dropped as such", hit.Load(), dropped)
			e.exact(survivors...)
		})
	}
}
