// Command test_recovery is a job that survives losing a server or a worker
// when a replacement is started, and fails cleanly when none is. Workers
// push ones to keys spread over all servers in rounds (printing "round N
// done" after each) and pull them back at the end; a server killed mid-job
// and started again takes the dead server's id (its store starts empty) and
// the job carries on, and so does a worker's replacement. Run it with
// resending and heartbeats on:
//
//	PS_RESEND=1 PS_HEARTBEAT_INTERVAL=1 PS_HEARTBEAT_TIMEOUT=5 scripts/local.sh 2 1 build/test_recovery
//
// and kill and restart a node while it runs (tests/faults_test.go does).
// Each worker prints, per server rank, the count it pulled for its own key
// on that server after the last round: a server that never died holds
// every round; a replaced one holds only the rounds pushed after it came
// back; a replaced worker's keys hold its predecessor's rounds too. Every
// node exits 1, saying why, when the job fails.
package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/gopslite/pslite/internal/prog"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/ps"
)

var (
	rounds = flag.Int("rounds", 40, "push rounds")
	pause  = flag.Duration("pause", 100*time.Millisecond, "pause between rounds")
)

func main() {
	flag.Parse()
	prog.Check(ps.Start(0), "start")
	node, _ := ps.Node()
	if ps.IsServer() {
		s, err := ps.NewKVServer[int64](0)
		prog.Check(err, "server")
		prog.Check(s.SetRequestHandle(kv.NewDefaultHandle[int64]().Handle), "handle")
		ps.RegisterExitCallback(s.Close)
		prog.Logf("serving (recovery=%t)", node.IsRecovery())
	}
	if ps.IsWorker() {
		prog.Logf("working (recovery=%t)", node.IsRecovery())
		w, err := ps.NewKVWorker[int64](0, 0)
		prog.Check(err, "worker")
		n := ps.NumServers()
		keys := make([]uint64, n)
		ones := make([]int64, n)
		for i, r := range node.ServerKeyRanges() {
			keys[i] = r.Begin + uint64(ps.MyRank())
			ones[i] = 1
		}
		for round := 0; round < *rounds; round++ {
			ts, err := w.Push(keys, ones, nil)
			prog.Check(err, "push")
			prog.Check(w.Wait(ts), fmt.Sprintf("push round %d", round))
			prog.Logf("round %d done", round)
			time.Sleep(*pause)
		}
		var got []int64
		ts, err := w.Pull(keys, &got, nil)
		prog.Check(err, "pull")
		prog.Check(w.Wait(ts), "pull")
		// A replacement's keys also hold what its predecessor pushed.
		most := int64(*rounds)
		if node.IsRecovery() {
			most = 2 * int64(*rounds)
		}
		var parts []string
		for i, v := range got {
			if v < 1 || v > most {
				prog.Failf("server %d holds %d for %d rounds", i, v, *rounds)
			}
			parts = append(parts, fmt.Sprintf("server%d=%d", i, v))
		}
		prog.Logf("after %d rounds: %s", *rounds, strings.Join(parts, " "))
	}
	prog.Check(ps.Finalize(0, true), "finalize")
}
