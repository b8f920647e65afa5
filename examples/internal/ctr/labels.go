package ctr

import (
	"fmt"
	"slices"
	"strings"
)

// Labels maps a data set's raw labels to class indices 0..K-1. Values[c] is
// the raw label of class c. A model with K == 2 is binary logistic
// regression (class 1 positive) unless Softmax is set.
type Labels struct {
	Values  []float64
	Softmax bool
	// Missing lists the classes of a softmax model that no training
	// example has (reported, not an error).
	Missing []float64
}

// K returns the number of classes.
func (l *Labels) K() int { return len(l.Values) }

// Outputs returns the model's outputs per feature: 1 for binary logistic
// regression, K for softmax.
func (l *Labels) Outputs() int {
	if l.Softmax {
		return l.K()
	}
	return 1
}

// LabelCount is a raw label with its numbers of training and test
// examples.
type LabelCount struct {
	Value       float64
	Train, Test int
}

// CountLabels counts the labels of the training sets and the test sets
// (nil entries are skipped), sorted by label.
func CountLabels(train, test []*Dataset) []LabelCount {
	counts := map[float64]*LabelCount{}
	add := func(sets []*Dataset, isTrain bool) {
		for _, d := range sets {
			if d == nil {
				continue
			}
			for _, y := range d.Label {
				c := counts[y]
				if c == nil {
					c = &LabelCount{Value: y}
					counts[y] = c
				}
				if isTrain {
					c.Train++
				} else {
					c.Test++
				}
			}
		}
	}
	add(train, true)
	add(test, false)
	var out []LabelCount
	for _, c := range counts {
		out = append(out, *c)
	}
	return MergeLabelCounts(out)
}

// MergeLabelCounts adds up lists of counts, sorted by label.
func MergeLabelCounts(lists ...[]LabelCount) []LabelCount {
	var all []LabelCount
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.SortFunc(all, func(a, b LabelCount) int {
		switch {
		case a.Value < b.Value:
			return -1
		case a.Value > b.Value:
			return 1
		}
		return 0
	})
	var out []LabelCount
	for _, c := range all {
		if n := len(out); n > 0 && out[n-1].Value == c.Value {
			out[n-1].Train += c.Train
			out[n-1].Test += c.Test
			continue
		}
		out = append(out, c)
	}
	return out
}

// describeLabels lists labels with their counts, "0 (500), 1 (480), 3
// (1)", the training counts when train is set, else the test counts.
func describeLabels(counts []LabelCount, train bool) string {
	var parts []string
	for _, c := range counts {
		n := c.Test
		if train {
			n = c.Train
		}
		if n == 0 {
			continue
		}
		if len(parts) == 12 {
			parts = append(parts, "...")
			break
		}
		parts = append(parts, fmt.Sprintf("%v (%d)", c.Value, n))
	}
	return strings.Join(parts, ", ")
}

// InferLabels chooses the classes from the labels of the training data
// (and checks the test data's against them). Labels -1 and +1 are binary
// with +1 positive; otherwise labels are class numbers. With loss "auto" (or
// "") or "logistic" the training data must have exactly two labels (the
// larger is positive): more are an error that says how to ask for softmax
// regression, rather than a silent switch to it. With "softmax" the classes
// are 0..K-1 when label 0 occurs, else 1..K, K the largest label. The
// training data must have two classes at least, and every test label must
// be a class.
func InferLabels(loss string, counts []LabelCount) (*Labels, error) {
	var train []float64
	nTrain := 0
	for _, c := range counts {
		if c.Train > 0 {
			train = append(train, c.Value)
			nTrain += c.Train
		}
	}
	switch loss {
	case "", "auto", "logistic", "softmax":
	default:
		return nil, fmt.Errorf("unknown loss %q (want auto, logistic or softmax)", loss)
	}
	switch len(train) {
	case 0:
		return nil, fmt.Errorf("no training examples")
	case 1:
		return nil, fmt.Errorf("all %d training examples have label %v: a classifier needs examples of two classes", nTrain, train[0])
	}
	for _, c := range counts {
		if c.Train == 0 && c.Test > 0 && (loss != "softmax" || c.Value < 0) {
			return nil, fmt.Errorf("the test data has label %v (%d examples), which no training example has (training labels: %s)",
				c.Value, c.Test, describeLabels(counts, true))
		}
	}
	all := make([]float64, 0, len(counts))
	for _, c := range counts {
		all = append(all, c.Value)
	}
	var l Labels
	pm1 := all[0] == -1 && len(all) == 2 && all[1] == 1
	if all[0] < 0 && !pm1 {
		return nil, fmt.Errorf("labels %s: -1 goes only with +1 (binary); class numbers start at 0", describeLabels(counts, true))
	}
	if loss != "softmax" {
		if len(train) > 2 {
			if loss == "logistic" {
				return nil, fmt.Errorf("logistic loss needs two classes, the training data has %d: %s", len(train), describeLabels(counts, true))
			}
			return nil, fmt.Errorf("the training data has %d labels, %s: for multinomial (softmax) regression over them give -loss=softmax; for binary regression fix the labels",
				len(train), describeLabels(counts, true))
		}
		l.Values = train
		return &l, nil
	}
	l.Softmax = true
	if pm1 {
		l.Values = []float64{-1, 1}
		return &l, nil
	}
	lo, hi := all[0], all[len(all)-1]
	first := 1.0
	if lo == 0 {
		first = 0
	}
	// Classes are every integer up to the largest label: a stray large
	// label would make a softmax model of that many classes, mostly never
	// seen. Want most of them to occur.
	if classes := hi + 1 - first; classes > 2*float64(len(all))+8 {
		return nil, fmt.Errorf("label %v: classes %v..%v, but only %d of them occur (%s); number the classes densely",
			hi, first, hi, len(all), describeLabels(counts, true))
	}
	for y := first; y <= hi; y++ {
		l.Values = append(l.Values, y)
		if !slices.Contains(train, y) {
			l.Missing = append(l.Missing, y)
		}
	}
	return &l, nil
}

// Assign sets d.Class from d.Label; a label that is no class is an error.
func (l *Labels) Assign(d *Dataset) error {
	pos := make(map[float64]int32, len(l.Values))
	for i, v := range l.Values {
		pos[v] = int32(i)
	}
	d.Class = make([]int32, d.Len())
	for i, y := range d.Label {
		c, ok := pos[y]
		if !ok {
			return fmt.Errorf("example %d: label %v is not one of the model's %v", i+1, y, l.Values)
		}
		d.Class[i] = c
	}
	return nil
}

// classOf returns the class of raw label y, or -1.
func (l *Labels) classOf(y float64) int {
	for i, v := range l.Values {
		if v == y {
			return i
		}
	}
	return -1
}
