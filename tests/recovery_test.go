package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
)

// A server killed with SIGKILL in the middle of a job and started again
// replaces the dead server (same id, empty store), and the job completes:
// the worker's requests to the dead server are resent until the replacement
// answers.
func TestServerKilledAndRestarted(t *testing.T) {
	const rounds = 40
	env := append(os.Environ(),
		"DMLC_NUM_SERVER=2", "DMLC_NUM_WORKER=1",
		"DMLC_PS_ROOT_URI=127.0.0.1", fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", testcluster.FreePort(t)),
		"PS_RESEND=1", "PS_RESEND_TIMEOUT=200", "PS_RESEND_MAX_RETRY=60",
		"PS_HEARTBEAT_INTERVAL=1", "PS_HEARTBEAT_TIMEOUT=2", "PS_START_TIMEOUT=60")
	var out bytes.Buffer
	var mu sync.Mutex
	start := func(role string) *exec.Cmd {
		cmd := exec.Command(bin("test_recovery"), "-rounds", strconv.Itoa(rounds), "-pause", "100ms")
		cmd.Env = append(env, "DMLC_ROLE="+role)
		w := &lockedWriter{mu: &mu, w: &out}
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	procs := []*exec.Cmd{start("scheduler"), start("server"), start("server"), start("worker")}
	defer func() {
		for _, p := range procs {
			p.Process.Kill()
		}
	}()
	time.Sleep(1500 * time.Millisecond) // let a few rounds pass
	victim := procs[2]
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.Wait()
	killedAt := time.Now()
	time.Sleep(300 * time.Millisecond)
	procs[2] = start("server")

	done := make(chan error, 1)
	go func() {
		var firstErr error
		for i, p := range procs {
			if err := p.Wait(); err != nil && firstErr == nil {
				firstErr = fmt.Errorf("process %d: %w", i, err)
			}
		}
		done <- firstErr
	}()
	select {
	case err := <-done:
		if err != nil {
			mu.Lock()
			t.Fatalf("%v\n%s", err, out.String())
		}
	case <-time.After(90 * time.Second):
		mu.Lock()
		t.Fatalf("job did not finish\n%s", out.String())
	}
	mu.Lock()
	defer mu.Unlock()
	log := out.String()
	m := regexp.MustCompile(`after \d+ rounds: server0=(\d+) server1=(\d+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("worker did not report\n%s", log)
	}
	a, _ := strconv.Atoi(m[1])
	b, _ := strconv.Atoi(m[2])
	if !regexp.MustCompile(`serving \(recovery=true\)`).MatchString(log) {
		t.Errorf("no server reported being a recovery node\n%s", log)
	}
	// One server held every round; the replacement only those pushed after
	// it joined.
	full, partial := max(a, b), min(a, b)
	if full != rounds || partial < 1 || partial >= rounds {
		t.Errorf("server counts %d and %d, want one %d and one in [1, %d)\n%s", a, b, rounds, rounds, log)
	}
	t.Logf("job finished %v after the kill; the surviving server holds %d rounds, the replacement %d", time.Since(killedAt).Round(time.Millisecond), full, partial)
}

// Without resending, a worker waiting on a server that dies gets an error
// from Wait (and test_recovery exits saying so) instead of hanging.
func TestServerKilledWithoutResend(t *testing.T) {
	env := append(os.Environ(),
		"DMLC_NUM_SERVER=2", "DMLC_NUM_WORKER=1",
		"DMLC_PS_ROOT_URI=127.0.0.1", fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", testcluster.FreePort(t)),
		"PS_START_TIMEOUT=60")
	var out bytes.Buffer
	var mu sync.Mutex
	start := func(role string) *exec.Cmd {
		cmd := exec.Command(bin("test_recovery"), "-rounds", "400", "-pause", "20ms")
		cmd.Env = append(env, "DMLC_ROLE="+role)
		w := &lockedWriter{mu: &mu, w: &out}
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	procs := []*exec.Cmd{start("scheduler"), start("server"), start("server"), start("worker")}
	defer func() {
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
	}()
	time.Sleep(time.Second)
	procs[2].Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	done := make(chan error, 1)
	go func() { done <- procs[3].Wait() }()
	select {
	case err := <-done:
		mu.Lock()
		log := out.String()
		mu.Unlock()
		if err == nil {
			t.Fatalf("worker exited 0 although a server died\n%s", log)
		}
		if !strings.Contains(log, "server lost") && !strings.Contains(log, "connection to node lost") {
			t.Errorf("worker failed without saying the server was lost\n%s", log)
		}
		t.Logf("worker failed %v after the kill: %s", time.Since(killed).Round(time.Millisecond), firstLine(log, "FAIL"))
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("worker still waiting 30s after its server died\n%s", out.String())
	}
}

func firstLine(s, substr string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			return l
		}
	}
	return ""
}
