package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// psbench in a 2x2 job, small sizes: every measurement of bulk, latency
// and window modes comes with both baselines (raw libzmq and the TCP limit)
// measured, and the report turns the lines into its tables.
func TestPsbenchMeasuresBaselines(t *testing.T) {
	psbench := filepath.Join(t.TempDir(), "psbench")
	build := exec.Command("go", "build", "-o", psbench, "../bench/psbench")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building psbench: %v\n%s", err, b)
	}
	out := launch(t, []string{"DMLC_NODE_HOST=127.0.0.1"}, "local.sh", "2", "2", psbench,
		"-mode=bulk,latency,window", "-n=20000", "-repeat=1", "-iters=200", "-requests=2000")
	var lines []string
	n := 0
	for _, l := range strings.Split(out, "\n") {
		i := strings.Index(l, "RESULT ")
		if i < 0 {
			continue
		}
		lines = append(lines, l[i:])
		var r struct {
			Name     string
			Value    float64
			Raw, TCP float64
			Ratio    float64
			Tratio   float64 `json:"tcp_ratio"`
		}
		if err := json.Unmarshal([]byte(l[i+len("RESULT "):]), &r); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		n++
		if r.Value <= 0 || r.Raw <= 0 || r.TCP <= 0 || r.Ratio <= 0 || r.Tratio <= 0 {
			t.Errorf("%s: ours %v, raw zmq %v (cost %v), tcp %v (cost %v): want all measured", r.Name, r.Value, r.Raw, r.Ratio, r.TCP, r.Tratio)
		}
	}
	// 3 bulk operations, 4 latency figures, 2 rates.
	if n != 9 {
		t.Fatalf("%d results, want 9:\n%s", n, out)
	}
	report := exec.Command(psbench, "report")
	report.Stdin = strings.NewReader(strings.Join(lines, "\n"))
	report.Stderr = os.Stderr
	md, err := report.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 2x2 | bulk_push | 20000 | ms |", "| ours / TCP |", "| TCP limit |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
}
