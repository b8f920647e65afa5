package main

import (
	"strings"
	"testing"
)

func TestReportTargetsAndComparison(t *testing.T) {
	in := strings.Join([]string{
		`RESULT {"name":"bulk_push","servers":1,"workers":1,"keys":10000000,"value":150,"unit":"ms","raw":300,"ratio":0.5}`,
		`RESULT {"name":"bulk_pull","servers":1,"workers":1,"keys":10000000,"value":400,"unit":"ms","raw":300,"ratio":1.33}`,
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
		// 1e7 pull at 1.33x misses the raw target; 1e6 is not a target.
		"| bulk push and pull of 1e7 keys: at most 1.25x the raw transfer of the same bytes | 1x1 push 0.50x; 1x1 pull 1.33x | no |",
		// 1x1: 100000/50000 = 2.00x; 2x2: rounds 100/100, 160/300 and
		// 150/200, whose median is 0.75x.
		"| 1-key pushes with 64 outstanding: at least 1.2x C++ ps-lite's rate (cost at most 0.83x) | 1x1 window64_push_rate 2.00x; 2x2 window64_push_rate 0.75x (rounds 0.53-1.00) | no |",
		"| warm bulk push and pull of 1e7 keys: at most 0.8x C++ ps-lite's time | 1x1 push 0.75x; 1x1 pull 1.00x | no |",
		"| 1-key push then pull, p50: at most 0.8x C++ ps-lite's | 1x1 latency_push_pull_p50 0.83x (rounds 0.37-0.86) | no |",
		"| 1x1 | latency_push_pull_p50 |  | us | 110.00 | 300.00 |  | 0.83x (rounds 0.37-0.86) |  | (median of 3 runs) |",
		// Round by round: 150/200, 170/220, 160/210; 190/200, 250/220, 230/210.
		"| test_kv_app_benchmark (cold, 1e7 keys), push and pull: at most 0.8x C++ ps-lite's time | push 0.76x (rounds 0.75-0.77) | yes |",
		"| a C++ test_kv_app_benchmark worker with our scheduler and server: at most 1.0x an all-C++ job | push 1.10x (rounds 0.95-1.14) | no |",
		"| push (ms) | 210.0 (200, 220, 210) | 160.0 (150, 170, 160) | 0.76x (rounds 0.75-0.77) | 230.0 (190, 250, 230) | 1.10x (rounds 0.95-1.14) |",
		"| 2x2 | window64_push_rate |  | req/s | 200.00 | 150.00 |  | 0.75x (rounds 0.53-1.00) |  | (median of 3 runs) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if err := report(strings.NewReader("RESULT {bad"), &out); err == nil {
		t.Error("a malformed RESULT line was accepted")
	}
}

// pairedCost pairs runs only when both programs ran as often; otherwise
// the report falls back to the ratio of the medians.
func TestPairedCost(t *testing.T) {
	for _, c := range []struct {
		ours, other []float64
		unit        string
		want        float64
		spread      string
	}{
		{[]float64{100, 300, 110}, []float64{120, 350, 300}, "us", 100.0 / 120, "0.37-0.86"},
		{[]float64{100, 300}, []float64{200, 150}, "req/s", 2, "0.50-2.00"}, // of two, the upper
		{[]float64{100}, []float64{200}, "ms", 0.5, ""},
		{[]float64{100, 200}, []float64{200}, "ms", 0, ""},
		{[]float64{100, 0}, []float64{200, 100}, "ms", 0, ""},
		{nil, nil, "ms", 0, ""},
	} {
		got, spread := pairedCost(c.ours, c.other, c.unit)
		if got != c.want || spread != c.spread {
			t.Errorf("pairedCost(%v, %v, %s) = %v, %q; want %v, %q", c.ours, c.other, c.unit, got, spread, c.want, c.spread)
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
