package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// binDir holds the test programs, built once by TestMain.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pslite-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./...")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the test programs:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// launch runs script (relative to scripts/) with args and extra environment,
// and returns its combined output; the test fails if it exits non-zero.
func launch(t *testing.T, env []string, script string, args ...string) string {
	t.Helper()
	out, err := run(env, script, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out)
	}
	return out
}

func run(env []string, script string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join("..", "scripts", script), args...)
	cmd.Env = append(append(os.Environ(), "PS_LOCAL_TIMEOUT=120", "PS_START_TIMEOUT=60"), env...)
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	return buf.String(), err
}

func bin(name string) string { return filepath.Join(binDir, name) }

func TestProgramsThroughLocalSh(t *testing.T) {
	cases := []struct {
		prog string
		s, w int
		want string // must appear in the output
	}{
		{"test_connection", 1, 1, ""},
		{"test_connection", 2, 2, ""},
		{"test_simple_app", 2, 2, "handled 100 requests"},
		{"test_kv_app", 1, 1, "error: 0, 0"},
		{"test_kv_app", 2, 2, "error: 0, 0"},
		{"test_kv_app", 3, 3, "error: 0, 0"},
		{"test_kv_app_multi_workers", 2, 2, "error: 0, 0"},
		{"test_kv_app_benchmark", 1, 1, "Pull average time cost"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%dx%d", c.prog, c.s, c.w), func(t *testing.T) {
			out := launch(t, nil, "local.sh", fmt.Sprint(c.s), fmt.Sprint(c.w), bin(c.prog))
			if !strings.Contains(out, c.want) {
				t.Errorf("output lacks %q:\n%s", c.want, out)
			}
			if c.want != "" && strings.Count(out, c.want) < c.w && c.prog != "test_simple_app" && c.prog != "test_kv_app_benchmark" {
				t.Errorf("only %d of %d workers reported %q:\n%s", strings.Count(out, c.want), c.w, c.want, out)
			}
		})
	}
}

func TestKVApp8x8(t *testing.T) {
	if testing.Short() {
		t.Skip("17 processes; skipped with -short")
	}
	start := time.Now()
	out := launch(t, nil, "local.sh", "8", "8", bin("test_kv_app"))
	if n := strings.Count(out, "error: 0, 0"); n != 8 {
		t.Errorf("%d of 8 workers reported exact results:\n%s", n, out)
	}
	t.Logf("8 servers x 8 workers in %v", time.Since(start))
}

// Two workers in one process, with and without resending (a row of the
// failure model: customers of one process number their requests from one
// counter, so no two share a resend signature; they used to, and the job
// deadlocked).
func TestMultiWorkersInOneProcess(t *testing.T) {
	for _, env := range [][]string{nil, {"PS_RESEND=1"}, {"PS_RESEND=1", "PS_DROP_MSG=10", "PS_RESEND_TIMEOUT=100"}} {
		t.Run(strings.Join(env, " "), func(t *testing.T) {
			out := launch(t, append([]string{"PS_LOCAL_TIMEOUT=60"}, env...), "local_multi_workers.sh", "2", "2", bin("test_kv_app_multi_workers"))
			if n := strings.Count(out, "error: 0, 0"); n != 2 {
				t.Errorf("%d of 2 in-process workers reported exact results:\n%s", n, out)
			}
		})
	}
}

func TestRepeat(t *testing.T) {
	out := launch(t, nil, "repeat.sh", "2", filepath.Join("..", "scripts", "local.sh"), "2", "2", bin("test_kv_app"))
	if n := strings.Count(out, "error: 0, 0"); n != 4 {
		t.Errorf("%d of 4 worker runs reported exact results:\n%s", n, out)
	}
}

func TestLocalIPC(t *testing.T) {
	out := launch(t, []string{"DMLC_LOCAL=1"}, "local.sh", "2", "2", bin("test_kv_app"))
	if n := strings.Count(out, "error: 0, 0"); n != 2 {
		t.Errorf("%d of 2 workers reported exact results over ipc:\n%s", n, out)
	}
}

// Nodes that fail make local.sh fail (upstream's always exits 0), quickly.
func TestLocalShReportsFailure(t *testing.T) {
	start := time.Now()
	out, err := run([]string{"DMLC_PS_VAN_TYPE=ibverbs"}, "local.sh", "1", "1", bin("test_connection"))
	if err == nil {
		t.Errorf("local.sh exited 0 although every node failed:\n%s", out)
	}
	if !strings.Contains(out, "DMLC_PS_VAN_TYPE") {
		t.Errorf("the nodes' error does not name the bad variable:\n%s", out)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("failing job took %v", d)
	}
}

// test_kv_app's 2x2 job checks every value it pulls, at sizes on both sides
// of the transports' lending threshold (frames of 512 KiB): 100,000 keys
// send 400 KB of keys to each server, 200,000 lend the keys' frames, and
// 1,000,000 lend keys and values (4 MB and 2 MB a server), on both socket
// transports, with given-back memory reused and poisoned. At 1,000,000 keys
// the default transport returned wrong values in every run, until lent
// buffers were given back by their loans (message.Loan).
func TestKVAppExactAcrossTheLendingThreshold(t *testing.T) {
	for _, van := range [][]string{nil, zmqEnv} {
		for _, poison := range []string{"PS_POISON_LENT=0", "PS_POISON_LENT=1"} {
			for _, keys := range []int{100000, 200000, 1000000} {
				env := append(append([]string{}, van...), poison)
				t.Run(fmt.Sprintf("%s/keys=%d", strings.Join(env, " "), keys), func(t *testing.T) {
					out := launch(t, env, "local.sh", "2", "2", bin("test_kv_app"), fmt.Sprintf("-keys=%d", keys), "-repeat=3")
					if n := strings.Count(out, "error: 0, 0"); n != 2 {
						t.Errorf("%d of 2 workers reported exact values:\n%s", n, out)
					}
				})
			}
		}
	}
}
