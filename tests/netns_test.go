package tests

// Multi-host tests: ps-lite jobs whose nodes run in separate Linux network
// namespaces (simulated hosts on one bridge, made by scripts/netns.sh), with
// faults injected from the test: kill a process, SIGSTOP/SIGCONT it, take a
// host's link down and up.
//
// They need root (network namespaces) and iproute2, and skip otherwise, and
// with -short:
//
//	sudo go test -count=1 -run Netns -v ./tests/
//
// The harness, for fault tests built on it:
//
//	h := newHosts(t, n)                // hosts 0..n-1; cleaned up by t.Cleanup
//	j := h.startJob(t, servers, workers, env, bin, args...) // scheduler in host 0, servers, then workers
//	h.servers, h.workers = 2, 1        // or by hand: DMLC_NUM_SERVER, DMLC_NUM_WORKER, then
//	p := h.start(t, i, role, env, bin, args...) // one node in host i
//	p.kill(); p.stop(); p.cont()       // SIGKILL (reaped), SIGSTOP, SIGCONT
//	h.linkDown(t, i); h.linkUp(t, i)   // cut and restore host i's link
//	h.rate(t, i, "1gbit"); h.netem(t, i, "delay", "10ms") // tc on host i's link
//	h.inHost(i, "ss", "-tin")          // a diagnostic command in host i
//	rs := h.wait(t, ref, within)       // every node: exit status or "running", time since ref, output
//	t.Logf("%s", summary(rs))          // one line per node
//	h.output()                         // every node's output, lines prefixed with the node's name
//
// Each test gets its own namespace prefix, so each has its own switch and
// addresses and its scheduler port cannot clash with another test's: tests
// may run in parallel. Those that mostly wait (for faults' timeouts, slow
// links) are marked so and run together at the end; the rest run one at a
// time, to keep their timings honest on small machines.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
)

const (
	// netnsNet and netnsIface are passed to scripts/netns.sh (PSNS_NET,
	// PSNS_IFACE): host i is netnsNet.(i+1) on netnsIface.
	netnsNet   = "10.213.47"
	netnsIface = "eth0"
	// netnsPort is the scheduler's port. Every test has its own hosts, so
	// a fixed port never clashes.
	netnsPort = 9000
	// netnsReap bounds the wait for a killed process to be reaped.
	netnsReap = 5 * time.Second
)

var netnsScript = filepath.Join("..", "scripts", "netns.sh")

// netnsSeq numbers the hosts of this test process: the prefix of a set of
// hosts is pst<pid>n<seq>.
var netnsSeq atomic.Int64

var (
	netnsOnce   sync.Once
	netnsReason string // why multi-host tests cannot run here; "" when they can
)

// netnsUsable says why network namespaces cannot be used, or "".
func netnsUsable() string {
	netnsOnce.Do(func() {
		if os.Geteuid() != 0 {
			netnsReason = "multi-host tests need root to create network namespaces (sudo go test -run Netns ./tests/)"
			return
		}
		if _, err := exec.LookPath("ip"); err != nil {
			netnsReason = "multi-host tests need ip from iproute2: " + err.Error()
			return
		}
		out, err := exec.Command(netnsScript, "check").CombinedOutput()
		if err != nil {
			netnsReason = fmt.Sprintf("multi-host tests skipped: scripts/netns.sh check: %v: %s", err, strings.TrimSpace(string(out)))
			return
		}
		removeStaleHosts()
	})
	return netnsReason
}

// removeStaleHosts removes the namespaces of earlier test processes that
// died without cleaning up (their prefix holds a pid no longer running).
func removeStaleHosts() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	re := regexp.MustCompile(`^(pst(\d+)n\d+)-(sw|h\d+)\b`)
	seen := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil || seen[m[1]] {
			continue
		}
		seen[m[1]] = true
		pid, _ := strconv.Atoi(m[2])
		if pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		cmd := exec.Command(netnsScript, "down")
		cmd.Env = append(os.Environ(), "PSNS_PREFIX="+m[1])
		cmd.Run()
	}
}

// hosts is a set of simulated hosts and the node processes started in them.
type hosts struct {
	n      int
	prefix string
	// servers and workers are DMLC_NUM_SERVER and DMLC_NUM_WORKER for the
	// nodes start starts; startJob sets them from its arguments.
	servers, workers int
	// linkMode is PSNS_LINK_MODE for linkDown: "" or "port" disables the
	// host's switch port (the host keeps its carrier), "carrier" sets the
	// switch-side veth down (the host sees NO-CARRIER).
	linkMode string

	// loopback: the hosts are all this machine's loopback (no namespaces:
	// no link faults), for fault tests that also run without root.
	loopback bool
	port     int // the scheduler's port
	// decoy: every host's first interface leads nowhere, and the nodes get
	// no DMLC_INTERFACE (see newHostsWith).
	decoy bool

	mu     sync.Mutex
	procs  []*proc
	counts map[string]int // nodes started per role, for names
	log    bytes.Buffer   // every node's output, lines prefixed
}

// newHosts creates n hosts (network namespaces on one switch) for this
// test and removes them, and kills every process started in them, when the
// test ends. It skips the test with -short, when not root, or when network
// namespaces cannot be made here.
func newHosts(t *testing.T, n int) *hosts {
	t.Helper()
	return newHostsWith(t, n, false)
}

// newHostsWith is newHosts; with decoy, every host's first interface is a
// decoy that leads nowhere (scripts/netns.sh's PSNS_DECOY), and the nodes
// get no DMLC_INTERFACE: they must find the job network themselves.
func newHostsWith(t *testing.T, n int, decoy bool) *hosts {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-host tests start network namespaces and whole jobs; skipped with -short")
	}
	if reason := netnsUsable(); reason != "" {
		t.Skip(reason)
	}
	h := &hosts{
		n:      n,
		prefix: fmt.Sprintf("pst%dn%d", os.Getpid(), netnsSeq.Add(1)),
		counts: map[string]int{},
		port:   netnsPort,
		decoy:  decoy,
	}
	t.Cleanup(func() { h.cleanup(t) })
	if out, err := h.script("up", strconv.Itoa(n)); err != nil {
		t.Fatalf("netns.sh up %d: %v\n%s", n, err, out)
	}
	return h
}

// newHostsOrLoopback is newHosts where network namespaces can be made, and
// n "hosts" on this machine's loopback otherwise (faults that need no link:
// kills and stops).
func newHostsOrLoopback(t *testing.T, n int) *hosts {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process tests start whole jobs; skipped with -short")
	}
	if reason := netnsUsable(); reason == "" {
		return newHosts(t, n)
	}
	return newLoopbackHosts(t, n)
}

// newLoopbackHosts returns n hosts that are all this one: every node runs
// here, on loopback.
func newLoopbackHosts(t *testing.T, n int) *hosts {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process tests start whole jobs; skipped with -short")
	}
	h := &hosts{n: n, loopback: true, counts: map[string]int{}, port: testcluster.FreePort(t)}
	t.Cleanup(func() { h.cleanup(t) })
	return h
}

func (h *hosts) cleanup(t *testing.T) {
	h.mu.Lock()
	procs := append([]*proc(nil), h.procs...)
	h.mu.Unlock()
	for _, p := range procs {
		if !p.exited() {
			t.Logf("%s still running at the end of the test; killed", p.name)
			p.kill()
		}
	}
	if h.loopback {
		// nothing to remove
	} else if out, err := h.script("down"); err != nil {
		t.Errorf("netns.sh down: %v\n%s", err, out)
	}
	if t.Failed() {
		t.Logf("output of every node:\n%s", h.output())
	}
}

// script runs scripts/netns.sh with this set's prefix and returns its
// combined output.
func (h *hosts) script(args ...string) (string, error) {
	out, err := h.command(args...).CombinedOutput()
	return string(out), err
}

// command is the scripts/netns.sh command for these hosts.
func (h *hosts) command(args ...string) *exec.Cmd {
	cmd := exec.Command(netnsScript, args...)
	cmd.Env = append(os.Environ(), "PSNS_PREFIX="+h.prefix, "PSNS_NET="+netnsNet, "PSNS_IFACE="+netnsIface)
	if h.decoy {
		cmd.Env = append(cmd.Env, "PSNS_DECOY=1")
	}
	if h.linkMode != "" {
		cmd.Env = append(cmd.Env, "PSNS_LINK_MODE="+h.linkMode)
	}
	return cmd
}

// addr is host i's address.
func (h *hosts) addr(i int) string {
	if h.loopback {
		return "127.0.0.1"
	}
	return fmt.Sprintf("%s.%d", netnsNet, i+1)
}

// must runs the script and fails the test if it fails. Call it from the
// test's goroutine.
func (h *hosts) must(t *testing.T, args ...string) {
	t.Helper()
	if h.loopback {
		t.Skipf("netns.sh %s needs network namespaces: %s", strings.Join(args, " "), netnsUsable())
	}
	if out, err := h.script(args...); err != nil {
		t.Fatalf("netns.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// linkDown cuts host i's link as h.linkMode says (by default its switch
// port drops every frame and the host keeps its carrier; see
// scripts/netns.sh). linkUp restores it.
func (h *hosts) linkDown(t *testing.T, i int) { t.Helper(); h.must(t, "link", strconv.Itoa(i), "down") }
func (h *hosts) linkUp(t *testing.T, i int)   { t.Helper(); h.must(t, "link", strconv.Itoa(i), "up") }

// rate limits host i's egress with tc tbf ("1gbit"; "off" removes it).
func (h *hosts) rate(t *testing.T, i int, rate string) {
	t.Helper()
	h.must(t, "rate", strconv.Itoa(i), rate)
}

// netem adds tc netem with args on host i's egress; it skips the test when
// the kernel has no sch_netem.
func (h *hosts) netem(t *testing.T, i int, args ...string) {
	t.Helper()
	out, err := h.script(append([]string{"netem", strconv.Itoa(i)}, args...)...)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		t.Skipf("no netem here: %s", strings.TrimSpace(out))
	}
	if err != nil {
		t.Fatalf("netns.sh netem %d %s: %v\n%s", i, strings.Join(args, " "), err, out)
	}
}

// impair delays host i's outgoing packets by delay ± jitter ms and drops
// loss percent of them (scripts/netns.sh impair, an NFQUEUE program of
// ours, as this kernel has no sch_netem); it skips the test when that
// cannot run here.
func (h *hosts) impair(t *testing.T, i int, delay, jitter int, loss float64) {
	t.Helper()
	out, err := h.script("impair", strconv.Itoa(i), strconv.Itoa(delay), strconv.Itoa(jitter), strconv.FormatFloat(loss, 'f', -1, 64))
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		t.Skipf("cannot impair links here: %s", strings.TrimSpace(out))
	}
	if err != nil {
		t.Fatalf("netns.sh impair %d: %v\n%s", i, err, out)
	}
}

// txBytes returns the bytes host i has sent on its interface. It reads the
// count from standard output alone: ip may warn on standard error (it
// printed "Peer netns reference is invalid." twice, once, while other
// tests' namespaces came and went).
func (h *hosts) txBytes(t *testing.T, i int) int64 {
	t.Helper()
	cmd := h.command("exec", strconv.Itoa(i), "cat", "/sys/class/net/"+netnsIface+"/statistics/tx_bytes")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tx_bytes of host %d: %v\n%s%s", i, err, out, stderr.Bytes())
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatalf("tx_bytes of host %d: %q (standard error: %q)", i, out, stderr.Bytes())
	}
	return n
}

// inHost runs a command in host i (ip, ss, ...) and returns its combined
// output, for diagnostics.
func (h *hosts) inHost(i int, name string, args ...string) (string, error) {
	return h.script(append([]string{"exec", strconv.Itoa(i), name}, args...)...)
}

// inHostOrHere is inHost, or the command run here when the hosts are this
// machine's loopback.
func (h *hosts) inHostOrHere(i int, name string, args ...string) (string, error) {
	if h.loopback {
		out, err := exec.Command(name, args...).CombinedOutput()
		return string(out), err
	}
	return h.inHost(i, name, args...)
}

// resetConnection destroys (ss -K) the TCP connection from's process made
// to the port to's process listens on, in from's host, and fails the test
// if there is none or the kernel cannot destroy sockets.
func (h *hosts) resetConnection(t *testing.T, from, to *proc) {
	t.Helper()
	port := h.socketPort(t, to, 3, "-tlnpH")
	sport := h.socketPort(t, from, 2, "-tnpH", "state", "established", "dport", "=", ":"+port)
	out, err := h.inHostOrHere(from.host, "ss", "-K", "state", "established", "sport", "=", ":"+sport, "dport", "=", ":"+port)
	if err != nil || !strings.Contains(out, ":"+sport) {
		t.Fatalf("ss -K did not destroy the connection from port %s to %s (a kernel without CONFIG_INET_DIAG_DESTROY?): %v\n%s", sport, port, err, out)
	}
}

// socketPort runs ss with args in p's host and returns the port of the
// address in column col of the (last) socket p's process owns.
func (h *hosts) socketPort(t *testing.T, p *proc, col int, args ...string) string {
	t.Helper()
	out, err := h.inHostOrHere(p.host, "ss", args...)
	if err != nil {
		t.Fatalf("ss %v in host %d: %v\n%s", args, p.host, err, out)
	}
	port := ""
	owner := fmt.Sprintf("pid=%d,", p.cmd.Process.Pid)
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); strings.Contains(line, owner) && len(f) > col {
			port = f[col][strings.LastIndexByte(f[col], ':')+1:]
		}
	}
	if port == "" {
		t.Fatalf("%s owns no socket in ss %v:\n%s", p.name, args, out)
	}
	return port
}

// proc is one node process running in a host.
type proc struct {
	name  string // role, ordinal among its role and host: "server1@h2"
	role  string
	host  int
	cmd   *exec.Cmd
	out   *nodeOutput
	done  chan struct{} // closed once the process is reaped
	ended time.Time     // when it was reaped; set before done closes
}

// start runs bin with args as a node of role ("scheduler", "server",
// "worker") in host i, with DMLC_ROLE, DMLC_PS_ROOT_URI (host 0: the
// scheduler's host), DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER, DMLC_NUM_WORKER
// (h.servers, h.workers), DMLC_INTERFACE and PS_START_TIMEOUT=30 set; env
// is added last, so it overrides them. The process is in its own process
// group and is killed if the test process dies.
func (h *hosts) start(t *testing.T, i int, role string, env []string, bin string, args ...string) *proc {
	t.Helper()
	if i < 0 || i >= h.n {
		t.Fatalf("start %s in host %d: there are %d hosts", role, i, h.n)
	}
	h.mu.Lock()
	name := fmt.Sprintf("%s%d@h%d", role, h.counts[role], i)
	h.counts[role]++
	h.mu.Unlock()
	cmd := exec.Command(netnsScript, append([]string{"exec", strconv.Itoa(i), bin}, args...)...)
	if h.loopback {
		cmd = exec.Command(bin, args...)
	}
	cmd.Env = append(os.Environ(),
		"PSNS_PREFIX="+h.prefix, "PSNS_NET="+netnsNet, "PSNS_IFACE="+netnsIface,
		"DMLC_ROLE="+role,
		"DMLC_PS_ROOT_URI="+h.addr(0),
		fmt.Sprintf("DMLC_PS_ROOT_PORT=%d", h.port),
		fmt.Sprintf("DMLC_NUM_SERVER=%d", h.servers),
		fmt.Sprintf("DMLC_NUM_WORKER=%d", h.workers),
		"PS_START_TIMEOUT=30")
	if !h.loopback && !h.decoy {
		cmd.Env = append(cmd.Env, "DMLC_INTERFACE="+netnsIface)
	}
	cmd.Env = append(cmd.Env, env...)
	p := &proc{name: name, role: role, host: i, cmd: cmd, done: make(chan struct{})}
	p.out = &nodeOutput{name: name, h: h}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		cmd.Wait()
		p.out.flush()
		p.ended = time.Now()
		close(p.done)
	}()
	h.mu.Lock()
	h.procs = append(h.procs, p)
	h.mu.Unlock()
	return p
}

// job is a ps-lite job started by startJob.
type job struct {
	sched            *proc
	servers, workers []*proc
}

// startJob starts a job of bin with args: the scheduler in host 0, then
// h.servers servers in hosts 1.., then h.workers workers in the hosts after
// them, all with env. It needs 1+servers+workers hosts.
func (h *hosts) startJob(t *testing.T, servers, workers int, env []string, bin string, args ...string) *job {
	t.Helper()
	if 1+servers+workers > h.n {
		t.Fatalf("a job of %d servers and %d workers needs %d hosts, have %d", servers, workers, 1+servers+workers, h.n)
	}
	h.servers, h.workers = servers, workers
	j := &job{sched: h.start(t, 0, "scheduler", env, bin, args...)}
	for r := 0; r < servers; r++ {
		j.servers = append(j.servers, h.start(t, 1+r, "server", env, bin, args...))
	}
	for r := 0; r < workers; r++ {
		j.workers = append(j.workers, h.start(t, 1+servers+r, "worker", env, bin, args...))
	}
	return j
}

func (p *proc) signal(sig syscall.Signal) error {
	if p.exited() {
		return nil
	}
	// The group: the node and anything it started.
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// kill sends SIGKILL and waits (bounded) until the process is reaped.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(netnsReap):
	}
}

// stop sends SIGSTOP, cont SIGCONT.
func (p *proc) stop() error { return p.signal(syscall.SIGSTOP) }
func (p *proc) cont() error { return p.signal(syscall.SIGCONT) }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// output is what the process printed so far (stdout and stderr, colour
// codes removed).
func (p *proc) output() string { return p.out.String() }

// waitOutput waits until the process has printed s, and fails the test if
// it exits first or within passes.
func (p *proc) waitOutput(t *testing.T, s string, within time.Duration) {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		p.out.mu.Lock()
		found := strings.Contains(p.out.all.String(), s)
		if p.out.changed == nil {
			p.out.changed = make(chan struct{})
		}
		changed := p.out.changed
		p.out.mu.Unlock()
		if found {
			return
		}
		select {
		case <-changed:
		case <-p.done:
			if !strings.Contains(p.output(), s) {
				t.Fatalf("%s exited without printing %q:\n%s", p.name, s, p.output())
			}
			return
		case <-timer.C:
			t.Fatalf("%s did not print %q within %v:\n%s", p.name, s, within, p.output())
		}
	}
}

// result is how one process ended.
type result struct {
	name    string
	role    string
	running bool          // still running at the deadline (and then killed)
	code    int           // exit status; -1 when a signal ended it
	signal  string        // the signal that ended it, if one did
	at      time.Duration // when it ended (running: the deadline), from the reference instant
	out     string
	maxRSS  int64 // peak resident memory in bytes, once it ended
}

func (r result) ok() bool { return !r.running && r.code == 0 }

func (r result) status() string {
	switch {
	case r.running:
		return "still running"
	case r.signal != "":
		return r.signal
	default:
		return fmt.Sprintf("exit %d", r.code)
	}
}

// String is the summary line: name, status, time.
func (r result) String() string {
	if r.running {
		return fmt.Sprintf("%-14s %-18s at the deadline, %+.1fs", r.name, r.status(), r.at.Seconds())
	}
	return fmt.Sprintf("%-14s %-18s at %+.1fs", r.name, r.status(), r.at.Seconds())
}

// summary formats one line per process, for t.Logf.
func summary(rs []result) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString("\n  ")
		b.WriteString(r.String())
	}
	return b.String()
}

func allOK(rs []result) bool {
	for _, r := range rs {
		if !r.ok() {
			return false
		}
	}
	return true
}

// find returns the result of the named process.
func find(rs []result, name string) result {
	for _, r := range rs {
		if r.name == name {
			return r
		}
	}
	return result{name: name, running: true}
}

// wait waits until every process of h has ended, or for at most within;
// processes still running then are killed. It returns, in start order, how
// each ended, with times measured from ref.
func (h *hosts) wait(t *testing.T, ref time.Time, within time.Duration) []result {
	t.Helper()
	h.mu.Lock()
	procs := append([]*proc(nil), h.procs...)
	h.mu.Unlock()
	deadline := time.Now().Add(within)
	timer := time.NewTimer(within)
	defer timer.Stop()
	running := map[*proc]bool{}
	late := false
	for _, p := range procs {
		if !late {
			select {
			case <-p.done:
			case <-timer.C:
				late = true
			}
		}
		if late && !p.exited() {
			running[p] = true
		}
	}
	for p := range running {
		p.kill()
	}
	rs := make([]result, len(procs))
	for k, p := range procs {
		r := result{name: p.name, role: p.role}
		if running[p] {
			r.running, r.code, r.at = true, -1, deadline.Sub(ref)
		} else {
			r.at = p.ended.Sub(ref)
			st := p.cmd.ProcessState
			r.code = st.ExitCode()
			if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
				r.maxRSS = ru.Maxrss << 10
			}
			if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				r.signal = fmt.Sprintf("signal %d (%v)", int(ws.Signal()), ws.Signal())
			}
		}
		r.out = p.output()
		rs[k] = r
	}
	return rs
}

// output is every node's output so far, each line prefixed with its name.
func (h *hosts) output() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.log.String()
}

var ansiColour = regexp.MustCompile("\x1b\\[[0-9;]*m")

// nodeOutput collects one process's output and copies each complete line,
// prefixed with the process's name, to the hosts' combined log.
type nodeOutput struct {
	name    string
	h       *hosts
	mu      sync.Mutex
	all     bytes.Buffer
	partial []byte
	changed chan struct{} // closed and replaced at each line
}

func (o *nodeOutput) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.partial = append(o.partial, b...)
	for {
		k := bytes.IndexByte(o.partial, '\n')
		if k < 0 {
			break
		}
		o.line(o.partial[:k])
		o.partial = o.partial[k+1:]
	}
	return len(b), nil
}

// line records one line; o.mu is held.
func (o *nodeOutput) line(l []byte) {
	s := ansiColour.ReplaceAllString(string(l), "")
	o.all.WriteString(s)
	o.all.WriteByte('\n')
	if o.changed != nil {
		close(o.changed)
	}
	o.changed = make(chan struct{})
	o.h.mu.Lock()
	fmt.Fprintf(&o.h.log, "%-14s| %s\n", o.name, s)
	o.h.mu.Unlock()
}

func (o *nodeOutput) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.partial) > 0 {
		o.line(o.partial)
		o.partial = nil
	}
}

func (o *nodeOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.all.String()
}

// The tests.

// checkAllOK fails the test unless every process exited 0.
func checkAllOK(t *testing.T, rs []result) {
	t.Helper()
	if !allOK(rs) {
		t.Errorf("not every node exited 0:%s", summary(rs))
	}
}

func TestNetnsKVApp(t *testing.T) {
	h := newHosts(t, 5)
	start := time.Now()
	h.startJob(t, 2, 2, nil, bin("test_kv_app"))
	rs := h.wait(t, start, 30*time.Second)
	t.Logf("test_kv_app, 2 servers and 2 workers on 5 hosts:%s", summary(rs))
	checkAllOK(t, rs)
	if n := strings.Count(h.output(), "error: 0, 0"); n != 2 {
		t.Errorf("%d of 2 workers reported exact results", n)
	}
}

func TestNetnsKVAppBenchmark(t *testing.T) {
	for _, rate := range []string{"", "1gbit"} {
		name := "unlimited"
		if rate != "" {
			name = "tbf " + rate
		}
		t.Run(name, func(t *testing.T) {
			h := newHosts(t, 3)
			if rate != "" {
				h.rate(t, 2, rate) // the worker's host: its pushes
				h.rate(t, 1, rate) // the server's: the pulled values
			}
			start := time.Now()
			h.startJob(t, 1, 1, nil, bin("test_kv_app_benchmark"))
			rs := h.wait(t, start, 45*time.Second) // 2-5s here
			t.Logf("test_kv_app_benchmark, 1 server and 1 worker on 3 hosts, %s:%s", name, summary(rs))
			checkAllOK(t, rs)
			out := h.output()
			if !strings.Contains(out, "Pull average time cost") {
				t.Errorf("the worker did not finish its pull")
			}
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "average time cost") {
					t.Log(strings.TrimSpace(l))
				}
			}
		})
	}
}

// test_kv_app across hosts whose links add delay and lose packets (tc
// netem): TCP retransmits, the job completes exactly. It skips, saying so,
// where the kernel has no sch_netem.
func TestNetnsKVAppNetem(t *testing.T) {
	h := newHosts(t, 5)
	for i := 0; i < 5; i++ {
		h.netem(t, i, "delay", "5ms", "1ms", "loss", "1%")
	}
	start := time.Now()
	h.startJob(t, 2, 2, nil, bin("test_kv_app"))
	rs := h.wait(t, start, 60*time.Second)
	t.Logf("test_kv_app, 2 servers and 2 workers on 5 hosts, 5 ms delay and 1%% loss:%s", summary(rs))
	checkAllOK(t, rs)
}

// A host whose first interface is not on the job's network: without
// DMLC_INTERFACE or DMLC_NODE_HOST every node announces the address it
// reaches the scheduler from, and the job completes. A node told to use the
// decoy (DMLC_INTERFACE=d0) announces an address nobody reaches: the
// scheduler fails the start-up naming it and that address, and the node
// itself fails once the scheduler has ended, instead of waiting for ever.
func TestNetnsFirstInterfaceNotOnTheJobNetwork(t *testing.T) {
	// Parallel: its second row waits for a connection timeout, so it runs beside the other waiting rows once the package's sequential tests are done (make test's -parallel).
	t.Parallel()
	t.Run("found by the route", func(t *testing.T) {
		t.Parallel()
		h := newHostsWith(t, 5, true)
		if out, _ := h.inHost(1, "ip", "-o", "-4", "addr"); !strings.Contains(out, "d0") || strings.Index(out, "d0") > strings.Index(out, netnsIface) {
			t.Fatalf("the decoy is not the first interface:\n%s", out)
		}
		start := time.Now()
		h.startJob(t, 2, 2, nil, bin("test_kv_app"))
		rs := h.wait(t, start, 60*time.Second)
		t.Logf("test_kv_app, 2x2, hosts with a decoy first interface, no DMLC_INTERFACE:%s", summary(rs))
		checkAllOK(t, rs)
		if n := strings.Count(h.output(), "error: 0, 0"); n != 2 {
			t.Errorf("%d of 2 workers reported exact results", n)
		}
		if strings.Contains(h.output(), "198.18.") {
			t.Errorf("a node announced its decoy address:\n%s", lastLines(h.output(), 20))
		}
	})
	t.Run("told the wrong interface", func(t *testing.T) {
		t.Parallel()
		h := newHostsWith(t, 3, true)
		h.servers, h.workers = 1, 1
		start := time.Now()
		sched := h.start(t, 0, "scheduler", []string{"PS_START_TIMEOUT=0"}, bin("test_kv_app"))
		srv := h.start(t, 1, "server", []string{"DMLC_INTERFACE=d0", "PS_START_TIMEOUT=0"}, bin("test_kv_app"))
		worker := h.start(t, 2, "worker", []string{"PS_START_TIMEOUT=0"}, bin("test_kv_app"))
		rs := h.wait(t, start, 40*time.Second)
		t.Logf("the server announces its decoy address:%s", summary(rs))
		for _, r := range rs {
			if r.running || r.code == 0 {
				t.Errorf("%s: %s, want a failure", r.name, r.status())
			}
		}
		decoy := "198.18.1.1"
		if out := find(rs, sched.name).out; !strings.Contains(out, "server 0 (node 8)") || !strings.Contains(out, decoy) || !strings.Contains(out, "could not connect") {
			t.Errorf("the scheduler's error does not name the server and its address:\n%s", lastLines(out, 5))
		}
		if out := find(rs, worker.name).out; !strings.Contains(out, "server 0 (node 8)") || !strings.Contains(out, decoy) {
			t.Errorf("the worker's error does not name the server and its address (the scheduler's notice):\n%s", lastLines(out, 5))
		}
		if out := find(rs, srv.name).out; !strings.Contains(out, decoy) || !strings.Contains(out, "DMLC_INTERFACE") {
			t.Errorf("the server's error does not name its address:\n%s", lastLines(out, 5))
		}
	})
}
