package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// abLine is one result of scripts/bench_ab.sh: which build ran it, in
// which round, the machine's load then, and the result.
type abLine struct {
	build string
	round int
	load  float64
	r     Result
}

// parseAB reads "AB <build> <round> <load> RESULT {json}" lines, skipping
// every other line.
func parseAB(r io.Reader) ([]abLine, error) {
	var out []abLine
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for n := 1; sc.Scan(); n++ {
		f := strings.SplitN(sc.Text(), " ", 6)
		if len(f) != 6 || f[0] != "AB" || f[4] != "RESULT" {
			continue
		}
		round, err1 := strconv.Atoi(f[2])
		load, err2 := strconv.ParseFloat(f[3], 64)
		var res Result
		err3 := json.Unmarshal([]byte(f[5]), &res)
		if err := firstErr(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, abLine{f[1], round, load, res})
	}
	return out, sc.Err()
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// quartiles returns the first quartile, the median and the third quartile
// of v (not empty), interpolating between ranks.
func quartiles(v []float64) (q1, med, q3 float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	at := func(p float64) float64 {
		x := p * float64(len(s)-1)
		i := int(x)
		if i+1 >= len(s) {
			return s[len(s)-1]
		}
		return s[i] + (x-float64(i))*(s[i+1]-s[i])
	}
	return at(0.25), at(0.5), at(0.75)
}

// compare writes, for each measurement that both builds a and b ran in the
// same rounds, b's cost over a's taken round by round (time over time, or
// a's rate over b's: above 1 means b is slower), as the median with its
// quartiles, next to the spread of a's own rounds (third quartile over
// first), and the machine's load during the runs.
func compare(r io.Reader, w io.Writer, a, b string) error {
	lines, err := parseAB(r)
	if err != nil {
		return err
	}
	type byRound = map[int]map[string]float64
	groups := map[key]byRound{}
	units := map[key]string{}
	var loads []float64
	for _, l := range lines {
		k := keyOf(l.r)
		if groups[k] == nil {
			groups[k] = byRound{}
		}
		if groups[k][l.round] == nil {
			groups[k][l.round] = map[string]float64{}
		}
		groups[k][l.round][l.build] = l.r.Value
		units[k] = l.r.Unit
		loads = append(loads, l.load)
	}
	if len(loads) == 0 {
		return fmt.Errorf("no AB result lines")
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		x, y := keys[i], keys[j]
		if x.name != y.name {
			return x.name < y.name
		}
		if x.layout != y.layout {
			return x.layout < y.layout
		}
		return x.keys < y.keys
	})
	_, lm, _ := quartiles(loads)
	fmt.Fprintf(w, "%s against %s, round by round; load average (1 min) at the runs' starts: median %.2f, max %.2f\n\n",
		b, a, lm, slices.Max(loads))
	fmt.Fprintf(w, "| measurement | layout | %s (median) | %s (median) | cost %s/%s: median [Q1, Q3] | rounds | %s's own spread (Q3/Q1) |\n", a, b, b, a, a)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, k := range keys {
		var av, bv, costs []float64
		for _, vals := range groups[k] {
			x, okA := vals[a]
			y, okB := vals[b]
			if c := cost(y, x, units[k]); okA && okB && c > 0 {
				av, bv, costs = append(av, x), append(bv, y), append(costs, c)
			}
		}
		if len(costs) == 0 {
			continue
		}
		q1, m, q3 := quartiles(costs)
		a1, am, a3 := quartiles(av)
		_, bm, _ := quartiles(bv)
		name := k.name
		if k.keys > 0 {
			name = fmt.Sprintf("%s, %d keys", name, k.keys)
		}
		fmt.Fprintf(w, "| %s | %s | %.4g %s | %.4g %s | %.3f [%.3f, %.3f] | %d | %.3f |\n",
			name, k.layout, am, units[k], bm, units[k], m, q1, q3, len(costs), a3/a1)
	}
	return nil
}
