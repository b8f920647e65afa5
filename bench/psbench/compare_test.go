package main

import (
	"bytes"
	"strings"
	"testing"
)

// compare pairs the builds round by round and reports the median cost with
// its quartiles: times as b over a, rates as a over b.
func TestCompare(t *testing.T) {
	in := strings.Join([]string{
		"noise",
		`AB before 1 0.5 RESULT {"name":"bulk_push","servers":1,"workers":1,"keys":100,"value":10,"unit":"ms"}`,
		`AB after 1 0.5 RESULT {"name":"bulk_push","servers":1,"workers":1,"keys":100,"value":11,"unit":"ms"}`,
		`AB after 2 1.5 RESULT {"name":"bulk_push","servers":1,"workers":1,"keys":100,"value":20,"unit":"ms"}`,
		`AB before 2 1.5 RESULT {"name":"bulk_push","servers":1,"workers":1,"keys":100,"value":20,"unit":"ms"}`,
		`AB before 3 1 RESULT {"name":"bulk_push","servers":1,"workers":1,"keys":100,"value":10,"unit":"ms"}`,
		`AB after 3 1 RESULT {"name":"bulk_push","servers":1,"workers":1,"keys":100,"value":12,"unit":"ms"}`,
		`AB before 1 1 RESULT {"name":"rate","servers":2,"workers":2,"value":100,"unit":"req/s"}`,
		`AB after 1 1 RESULT {"name":"rate","servers":2,"workers":2,"value":200,"unit":"req/s"}`,
		`AB after 2 1 RESULT {"name":"rate","servers":2,"workers":2,"value":200,"unit":"req/s"}`, // no pair
	}, "\n")
	var out bytes.Buffer
	if err := compare(strings.NewReader(in), &out, "before", "after"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"median 1.00, max 1.50",
		"| bulk_push, 100 keys | 1x1 | 10 ms | 12 ms | 1.100 [1.050, 1.150] | 3 | 1.500 |",
		"| rate | 2x2 | 100 req/s | 200 req/s | 0.500 [0.500, 0.500] | 1 | 1.000 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := compare(strings.NewReader("nothing"), &out, "a", "b"); err == nil {
		t.Error("no error without results")
	}
}
