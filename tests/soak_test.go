package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReplicationSoak runs PSLITE_SOAK jobs (default: skipped) of
// test_recovery with PS_REPLICAS=1, 3 servers and 2 workers, each in
// network namespaces, where a random server is SIGKILLed, stopped (SIGSTOP
// for longer than PS_HEARTBEAT_TIMEOUT, then continued) or cut off (its
// link down for good, or for a while) at a random round, with or without
// a replacement started at a random delay. Every run must end with exact
// totals and no push lost (test_recovery checks every key), or with a
// clear error, within the failure model's bound; never a hang or a silent
// wrong result. PSLITE_SOAK_SEED picks the runs (default 1),
// PSLITE_SOAK_ONLY=i repeats the i-th alone. The table of outcomes goes to
// the log, with every failed process's error lines.
func TestReplicationSoak(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("PSLITE_SOAK"))
	if n <= 0 {
		t.Skip("set PSLITE_SOAK to a number of runs")
	}
	seed := uint64(1)
	if s, err := strconv.ParseUint(os.Getenv("PSLITE_SOAK_SEED"), 10, 64); err == nil {
		seed = s
	}
	rng := rand.New(rand.NewPCG(seed, 77))
	type run struct {
		fault    string
		replaced bool
		outcome  string
		took     time.Duration
	}
	only := -1 // PSLITE_SOAK_ONLY=i repeats run i of the seed alone
	if s, err := strconv.Atoi(os.Getenv("PSLITE_SOAK_ONLY")); err == nil {
		only = s
	}
	var runs []run
	for i := range n {
		fault := []string{"kill", "stop", "cut for good", "cut 8s"}[rng.IntN(4)]
		replace := rng.IntN(2) == 0
		victim := rng.IntN(3)
		at := 3 + rng.IntN(50)
		delay := time.Duration(rng.IntN(5000)) * time.Millisecond
		if only >= 0 && i != only {
			continue
		}
		name := fmt.Sprintf("%d-%s-server%d-round%d-replace%t", i, strings.ReplaceAll(fault, " ", ""), victim, at, replace)
		var r run
		t.Run(name, func(t *testing.T) {
			r = run{fault: fault, replaced: replace}
			r.outcome, r.took = soakOnce(t, fault, victim, at, replace, delay)
		})
		runs = append(runs, r)
	}
	// The table: per fault and replacement, the outcomes.
	counts := map[string]map[string]int{}
	var longest time.Duration
	for _, r := range runs {
		k := fmt.Sprintf("%-13s replacement=%-5t", r.fault, r.replaced)
		if counts[k] == nil {
			counts[k] = map[string]int{}
		}
		counts[k][r.outcome]++
		longest = max(longest, r.took)
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "\n| fault | runs | completed exact | failed clearly | silent wrong | hang |\n|---|---|---|---|---|---|\n")
	for _, k := range keys {
		c := counts[k]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d |\n", k, c["completed"]+c["failed"]+c["wrong"]+c["hang"], c["completed"], c["failed"], c["wrong"], c["hang"])
	}
	fmt.Fprintf(&b, "longest run, fault to the last exit: %v (seed %d)\n", longest.Round(100*time.Millisecond), seed)
	t.Log(b.String())
}

// soakOnce runs one job with a fault and returns how it ended:
// "completed" (every process but the victim exited 0, no push lost),
// "failed" (processes exited non-zero, naming the fault), "wrong" (a
// process exited 0 having lost pushes, or test_recovery found a wrong
// value) or "hang" (a process still ran at the deadline).
func soakOnce(t *testing.T, fault string, victimRank, at int, replace bool, delay time.Duration) (string, time.Duration) {
	const rounds = 100
	h := newHosts(t, 7)
	j := h.startJob(t, 3, 2, replicaEnv, bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "50ms")
	j.workers[0].waitOutput(t, fmt.Sprintf("round %d done", at), 60*time.Second)
	var victim *proc
	for _, s := range j.servers {
		if strings.Contains(s.output(), fmt.Sprintf("[server %d]", victimRank)) {
			victim = s
		}
	}
	if victim == nil {
		victim = j.servers[victimRank]
	}
	ref := time.Now()
	heal := make(chan struct{}) // closed once the fault's end (if any) is done
	switch fault {
	case "kill":
		victim.kill()
		close(heal)
	case "stop":
		victim.stop()
		go func() {
			defer close(heal)
			time.Sleep(12 * time.Second) // the fault's length, not a synchronisation
			victim.cont()
		}()
	case "cut for good":
		h.linkDown(t, victim.host)
		close(heal)
	case "cut 8s":
		h.linkDown(t, victim.host)
		go func() {
			defer close(heal)
			time.Sleep(8 * time.Second) // the fault's length
			if _, err := h.script("link", strconv.Itoa(victim.host), "up"); err != nil {
				t.Errorf("link up: %v", err)
			}
		}()
	}
	var spare *proc
	var spareAt time.Duration
	if replace {
		time.Sleep(delay) // a replacement started some time after the fault, not a synchronisation
		spareAt = time.Since(ref)
		spare = h.start(t, 6, "server", replicaEnv, bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "50ms")
	}
	rs := h.wait(t, ref, 120*time.Second)
	<-heal
	// A replacement started after the job had already ended has no job to
	// join; it gives up after PS_START_TIMEOUT, which is not the fault's
	// outcome.
	var jobEnd time.Duration
	for _, r := range rs {
		if r.name != victim.name && (spare == nil || r.name != spare.name) {
			jobEnd = max(jobEnd, r.at)
		}
	}
	var took time.Duration
	var failures strings.Builder
	outcome := "completed"
	for _, r := range rs {
		if r.name == victim.name || (spare != nil && r.name == spare.name && spareAt > jobEnd) {
			continue
		}
		took = max(took, r.at)
		if !r.ok() {
			fmt.Fprintf(&failures, "\n  %s: %s", r.name, lastErrorLine(r.out))
		}
		switch {
		case r.running:
			outcome = "hang"
		case r.ok() && r.role == "worker":
			if l := lostReports(r.out); len(l) != 1 || strings.Trim(fmt.Sprint(l[0]), "[]0 ") != "" {
				outcome = "wrong"
			}
		case r.ok():
		case strings.Contains(r.out, " holds "):
			outcome = "wrong"
		case outcome == "completed":
			outcome = "failed"
		}
	}
	t.Logf("%s on %s (replacement %t after %v):%s%s", fault, victim.name, replace, delay, summary(rs), failures.String())
	if outcome == "wrong" || outcome == "hang" {
		t.Errorf("%s:\n%s", outcome, h.output())
	}
	return outcome, took
}

// lastErrorLine returns the last error-level log line of out, or its last
// line when there is none.
func lastErrorLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "ERR") || strings.Contains(lines[i], "FTL") || strings.Contains(lines[i], "error") {
			return lines[i]
		}
	}
	return lines[len(lines)-1]
}
