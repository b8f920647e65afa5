package main

import (
	"fmt"
	"strings"
	"testing"
)

func TestReportTargetsAndComparison(t *testing.T) {
	in := strings.Join([]string{
		`CPPMALLOC glibc.malloc.arena_max=1`,
		`LOAD 1.5`,
		`FAULT 4.5`,
		`RESULT {"name":"bulk_push","servers":1,"workers":1,"keys":10000000,"value":150,"unit":"ms","raw":300,"ratio":0.5,"tcp":100}`,
		`LOAD 3.0`,
		`FAULT 30`,
		`FAULT 2.25`,
		`RESULT {"name":"bulk_pull","servers":1,"workers":1,"keys":10000000,"value":400,"unit":"ms","raw":300,"ratio":1.33,"tcp":200}`,
		`LOAD 2`,
		`RESULT {"name":"bulk_push","servers":1,"workers":1,"keys":1000000,"value":99,"unit":"ms","raw":10,"ratio":9.9}`,
		`noise from a job`,
		`RESULT {"name":"window64_push_rate","servers":1,"workers":1,"value":50000,"unit":"req/s","raw":100000,"ratio":2}`,
		// Three rounds of ours and of C++ for one measurement: medians.
		`RESULT {"name":"window64_push_rate","servers":2,"workers":2,"value":100,"unit":"req/s"}`,
		`RESULT {"name":"window64_push_rate","servers":2,"workers":2,"value":300,"unit":"req/s"}`,
		`RESULT {"name":"window64_push_rate","servers":2,"workers":2,"value":200,"unit":"req/s"}`,
		`RESULT {"name":"window64_push_rate","label":"C++ ps-lite","servers":2,"workers":2,"value":100,"unit":"req/s"}`,
		`RESULT {"name":"window64_push_rate","label":"C++ ps-lite","servers":2,"workers":2,"value":160,"unit":"req/s"}`,
		`RESULT {"name":"window64_push_rate","label":"C++ ps-lite","servers":2,"workers":2,"value":150,"unit":"req/s"}`,
		`RESULT {"name":"window64_push_rate","label":"C++ ps-lite","servers":1,"workers":1,"value":100000,"unit":"req/s"}`,
		// A machine that slowed down in the second round and for C++'s
		// third run: round by round ours costs 0.83x, 0.86x and 0.37x; the
		// medians alone (110 and 300) would give 0.37x.
		`RESULT {"name":"latency_push_pull_p50","servers":1,"workers":1,"value":100,"unit":"us"}`,
		`RESULT {"name":"latency_push_pull_p50","label":"C++ ps-lite","servers":1,"workers":1,"value":120,"unit":"us"}`,
		`RESULT {"name":"latency_push_pull_p50","servers":1,"workers":1,"value":300,"unit":"us"}`,
		`RESULT {"name":"latency_push_pull_p50","label":"C++ ps-lite","servers":1,"workers":1,"value":350,"unit":"us"}`,
		`RESULT {"name":"latency_push_pull_p50","servers":1,"workers":1,"value":110,"unit":"us"}`,
		`RESULT {"name":"latency_push_pull_p50","label":"C++ ps-lite","servers":1,"workers":1,"value":300,"unit":"us"}`,
		`RESULT {"name":"bulk_push","label":"C++ ps-lite","servers":1,"workers":1,"keys":10000000,"value":200,"unit":"ms"}`,
		`RESULT {"name":"bulk_pull","label":"C++ ps-lite","servers":1,"workers":1,"keys":10000000,"value":400,"unit":"ms"}`,
		`RESULT {"name":"kv_app_benchmark_push","label":"C++ ps-lite","servers":1,"workers":1,"value":200,"unit":"ms"}`,
		`RESULT {"name":"kv_app_benchmark_push","label":"ours","servers":1,"workers":1,"value":150,"unit":"ms"}`,
		`RESULT {"name":"kv_app_benchmark_push","label":"C++ worker, our servers","servers":1,"workers":1,"value":190,"unit":"ms"}`,
		`RESULT {"name":"kv_app_benchmark_push","label":"C++ ps-lite","servers":1,"workers":1,"value":220,"unit":"ms"}`,
		`RESULT {"name":"kv_app_benchmark_push","label":"ours","servers":1,"workers":1,"value":170,"unit":"ms"}`,
		`RESULT {"name":"kv_app_benchmark_push","label":"C++ worker, our servers","servers":1,"workers":1,"value":250,"unit":"ms"}`,
		`RESULT {"name":"kv_app_benchmark_push","label":"C++ ps-lite","servers":1,"workers":1,"value":210,"unit":"ms"}`,
		`RESULT {"name":"kv_app_benchmark_push","label":"ours","servers":1,"workers":1,"value":160,"unit":"ms"}`,
		`RESULT {"name":"kv_app_benchmark_push","label":"C++ worker, our servers","servers":1,"workers":1,"value":230,"unit":"ms"}`,
	}, "\n")
	var out strings.Builder
	if err := report(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	md := out.String()
	for _, want := range []string{
		"The machine's load (1-minute load average) at the start of the 3 runs: median 2.00, max 3.00.",
		"The time to fault in a fresh 4 KiB page (`psbench faultcost`, before each run): median 4.5 us, from 2.2 to 30.0.",
		"C++ ps-lite's psbench ran with glibc's allocator kept warm (`GLIBC_TUNABLES=glibc.malloc.arena_max=1`:",
		// 1e7 pull at 2x misses the TCP target; 1e6 is not a target.
		"| warm bulk push and pull of 1e7 keys: within 1.5x of the TCP limit | 1x1 push 1.50x; 1x1 pull 2.00x | no |",
		// 1x1: 100000/50000 = 2.00x; 2x2: rounds 100/100, 160/300 and
		// 150/200, whose median is 0.75x.
		"| 1-key pushes with 64 outstanding: at least 1.5x C++ ps-lite's rate (cost at most 0.67x) | 1x1 window64_push_rate 2.00x; 2x2 window64_push_rate 0.75x [0.64, 0.88] | no |",
		"| warm bulk push and pull of 1e7 keys: at most 0.8x C++ ps-lite's time | 1x1 push 0.75x; 1x1 pull 1.00x | no |",
		// Rounds 0.83, 0.86 and 0.37.
		"| 1-key push then pull, p50: at most 0.8x C++ ps-lite's | 1x1 latency_push_pull_p50 0.83x [0.60, 0.85] | no |",
		"| 1x1 | latency_push_pull_p50 |  | us | 110.00 | 300.00 | 0.83x [0.60, 0.85] |  |  |  |  | (median of 3 runs) |",
		"| 1x1 | bulk_push | 10000000 | ms | 150.00 | 200.00 | 0.75x | 100.00 | 1.50x | 300.00 | 0.50x |  |",
		// Round by round: 150/200, 170/220, 160/210; 190/200, 250/220, 230/210.
		"| test_kv_app_benchmark (cold, 1e7 keys), push and pull: at most 0.8x C++ ps-lite's time | push 0.76x [0.76, 0.77] | yes |",
		"| a C++ test_kv_app_benchmark worker with our scheduler and server: at most 1.0x an all-C++ job | push 1.10x [1.02, 1.12] | no |",
		"| push (ms) | 210.0 (200, 220, 210) | 160.0 (150, 170, 160) | 0.76x [0.76, 0.77] | 230.0 (190, 250, 230) | 1.10x [1.02, 1.12] |",
		"| 2x2 | window64_push_rate |  | req/s | 200.00 | 150.00 | 0.75x [0.64, 0.88] |  |  |  |  | (median of 3 runs) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if err := report(strings.NewReader("RESULT {bad"), &out); err == nil {
		t.Error("a malformed RESULT line was accepted")
	}
}

// A target is met only when the worse quartile of the rounds meets it, not
// the median alone.
func TestTargetNeedsTheWorseQuartile(t *testing.T) {
	for _, c := range []struct {
		ours []int // against C++ runs of 100 us each
		want string
	}{
		{[]int{50, 60, 70, 85, 90}, "2x2 latency_push_pull_p50 0.70x [0.60, 0.85] | no |"},
		{[]int{50, 60, 70, 75, 90}, "2x2 latency_push_pull_p50 0.70x [0.60, 0.75] | yes |"},
	} {
		var in strings.Builder
		for _, v := range c.ours {
			fmt.Fprintf(&in, `RESULT {"name":"latency_push_pull_p50","servers":2,"workers":2,"value":%d,"unit":"us"}`+"\n", v)
			fmt.Fprintf(&in, `RESULT {"name":"latency_push_pull_p50","label":"C++ ps-lite","servers":2,"workers":2,"value":100,"unit":"us"}`+"\n")
		}
		var out strings.Builder
		if err := report(strings.NewReader(in.String()), &out); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("rounds %v: the report lacks %q:\n%s", c.ours, c.want, out.String())
		}
	}
}

// pairedCost pairs runs only when both programs ran as often; otherwise
// the report falls back to the ratio of the medians.
func TestPairedCost(t *testing.T) {
	for _, c := range []struct {
		ours, other []float64
		unit        string
		want        string
	}{
		{[]float64{100, 300, 110}, []float64{120, 350, 300}, "us", "0.83x [0.60, 0.85]"},
		{[]float64{100, 300}, []float64{200, 150}, "req/s", "1.25x [0.88, 1.62]"},
		{[]float64{100}, []float64{200}, "ms", "0.50x"},
		{[]float64{100, 200}, []float64{200}, "ms", ""},
		{[]float64{100, 0}, []float64{200, 100}, "ms", ""},
		{nil, nil, "ms", ""},
	} {
		sp := pairedCost(c.ours, c.other, c.unit)
		got := ""
		if sp.n > 0 {
			got = sp.String()
		}
		if got != c.want {
			t.Errorf("pairedCost(%v, %v, %s) = %q; want %q", c.ours, c.other, c.unit, got, c.want)
		}
	}
}

func TestReportNamesTheTransport(t *testing.T) {
	defer func(v string) { reportVan = v }(reportVan)
	in := `RESULT {"name":"window64_push_rate","servers":1,"workers":1,"value":100,"unit":"req/s"}` + "\n"
	for van, want := range map[string][]string{
		"zmq":  {"Generated by `make bench-zmq` on", "the ZeroMQ transport (`DMLC_PS_VAN_TYPE=zmq`"},
		"zmtp": {"Generated by `make bench` on", "the ZMTP transport (the default, `DMLC_PS_VAN_TYPE=zmtp`"},
	} {
		reportVan = van
		var out strings.Builder
		if err := report(strings.NewReader(in), &out); err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("-van=%s: the report lacks %q", van, w)
			}
		}
	}
}
