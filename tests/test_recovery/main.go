// Command test_recovery is a job that survives losing a server or a worker
// and says exactly what, if anything, the loss cost. Workers push ones to a
// key of their own on every server in rounds (printing "round N done"
// after each) and pull them back at the end, where each key must hold
// every round pushed, less exactly the pushes the worker was told were
// lost (kv.StateLostError): nothing lost with PS_REPLICAS; with a
// replacement of a server that had no replica, what it had.
//
//	PS_RESEND=1 PS_HEARTBEAT_INTERVAL=1 PS_HEARTBEAT_TIMEOUT=5 scripts/local.sh 2 1 build/test_recovery
//	PS_REPLICAS=1 PS_HEARTBEAT_INTERVAL=1 PS_HEARTBEAT_TIMEOUT=5 scripts/local.sh 3 2 build/test_recovery
//
// and kill, stop or cut off a node while it runs (tests/failure_model_test.go
// and tests/replication_test.go do). The program accepts losing state
// (AcceptStateLoss) unless -strict: then a loss stops the job, naming the
// server, its keys and the pushes lost.
//
// With PS_CHECKPOINT_DIR and -checkpoint=N, the workers take a snapshot
// every N rounds (between two barriers, so that it holds exactly those
// rounds); a job killed whole and launched again with the same directory
// resumes after the last snapshot's round and ends with the same totals
// (with -key-layout, also when launched with another number of servers).
// Every node exits 1, saying why, when the job fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gopslite/pslite/internal/prog"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/ps"
)

var (
	rounds     = flag.Int("rounds", 40, "push rounds")
	pause      = flag.Duration("pause", 100*time.Millisecond, "pause between rounds")
	strict     = flag.Bool("strict", false, "stop the job when a server loses pushes, instead of accepting the loss")
	checkpoint = flag.Int("checkpoint", 0, "with PS_CHECKPOINT_DIR: take a snapshot every this many rounds (0: never)")
	keyLayout  = flag.Int("key-layout", 0, "push to one key in each range of a job of this many servers (0: this job's), so that a job launched again with another number of servers pushes to the same keys")
)

func main() {
	flag.Parse()
	prog.Check(ps.Start(0), "start")
	node, _ := ps.Node()
	if ps.IsServer() {
		s, err := ps.NewKVServer[int64](0)
		prog.Check(err, "server")
		prog.Check(s.SetStore(kv.NewDefaultHandle[int64]()), "store")
		ps.RegisterExitCallback(s.Close)
		prog.Logf("serving (recovery=%t)", node.IsRecovery())
	}
	if ps.IsWorker() {
		work(node.IsRecovery())
	}
	prog.Check(ps.Finalize(0, true), "finalize")
}

func work(recovery bool) {
	node, _ := ps.Node()
	w, err := ps.NewKVWorker[int64](0, 0)
	prog.Check(err, "worker")
	if !*strict {
		w.AcceptStateLoss()
	}
	first := 0
	if gen, meta := ps.Restored(); gen != 0 {
		r, err := strconv.Atoi(strings.TrimPrefix(meta, "round="))
		prog.Check(err, "the snapshot's meta "+strconv.Quote(meta))
		first = r
		prog.Logf("resumed from snapshot %d after round %d", gen, r)
	}
	prog.Logf("working (recovery=%t)", recovery)
	n := ps.NumServers()
	layout := node.ServerKeyRanges()
	if *keyLayout > 0 {
		layout = postoffice.KeyRanges(*keyLayout)
	}
	keys := make([]uint64, len(layout))
	ones := make([]int64, len(layout))
	owner := make([]int, len(layout)) // the rank of the server holding each key
	for i, r := range layout {
		keys[i] = r.Begin + uint64(ps.MyRank())
		ones[i] = 1
		for s, sr := range node.ServerKeyRanges() {
			if sr.Contains(keys[i]) {
				owner[i] = s
			}
		}
	}
	for round := first; round < *rounds; round++ {
		ts, err := w.Push(keys, ones, nil)
		prog.Check(err, "push")
		prog.Check(w.Wait(ts), fmt.Sprintf("push round %d", round))
		prog.Logf("round %d done", round)
		if *checkpoint > 0 && (round+1)%*checkpoint == 0 && round+1 < *rounds {
			snap(round + 1)
		}
		time.Sleep(*pause)
	}
	var got []int64
	ts, err := w.Pull(keys, &got, nil)
	prog.Check(err, "pull")
	prog.Check(w.Wait(ts), "pull")
	lost := make([]int64, n)
	var se *kv.StateLostError
	for _, e := range unjoin(w.StateLoss()) {
		if errors.As(e, &se) && se.Server < n {
			lost[se.Server] += se.Pushes
			prog.Logf("lost: %v", se)
		}
	}
	var parts []string
	for i, v := range got {
		want := int64(*rounds) - lost[owner[i]]
		switch {
		case recovery:
			// A replacement's keys also hold what its predecessor pushed.
			if v < want || v > int64(2**rounds) {
				prog.Failf("server %d holds %d for %d rounds (%d lost), want %d to %d", owner[i], v, *rounds, lost[owner[i]], want, 2**rounds)
			}
		case v != want:
			prog.Failf("server %d's key %d holds %d for %d rounds with %d lost, want exactly %d", owner[i], keys[i], v, *rounds, lost[owner[i]], want)
		}
		parts = append(parts, fmt.Sprintf("server%d=%d", i, v))
	}
	prog.Logf("after %d rounds: %s (lost %v)", *rounds, strings.Join(parts, " "), lost)
}

// snap takes a snapshot holding exactly round rounds: every worker waits
// at a barrier, worker 0 takes it, and they wait again.
func snap(round int) {
	prog.Check(ps.Barrier(0, message.WorkerGroup), "barrier")
	if ps.MyRank() == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		gen, err := ps.Checkpoint(ctx, fmt.Sprintf("round=%d", round))
		cancel()
		prog.Check(err, "checkpoint")
		prog.Logf("snapshot %d after round %d", gen, round)
	}
	prog.Check(ps.Barrier(0, message.WorkerGroup), "barrier")
}

// unjoin returns the errors errors.Join made err of.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err != nil {
		return []error{err}
	}
	return nil
}
