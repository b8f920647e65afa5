package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// maxFeatureID bounds feature ids, and maxModelKeys a model's features ×
// outputs: workers and servers keep arrays indexed by them, so one stray
// huge id in a file must be an error rather than gigabytes of memory.
const (
	maxFeatureID = 1<<26 - 1
	maxModelKeys = 1 << 26
)

// Dataset holds examples in compressed sparse rows. Row i has the features
// Idx[Start[i]:Start[i+1]] (ascending ids) with values Val[...] and the raw
// label Label[i]. Feature ids are the file's (1-based); id 0 is the bias,
// which AddBias puts at the front of every row.
type Dataset struct {
	Start []int
	Idx   []int32
	Val   []float32
	Label []float64
	// Class holds each row's class index, set by Labels.Assign.
	Class []int32
	// MaxFeature is the largest feature id in the rows.
	MaxFeature int32
}

// Len returns the number of rows.
func (d *Dataset) Len() int { return len(d.Label) }

// Row returns row i's feature ids and values.
func (d *Dataset) Row(i int) ([]int32, []float32) {
	return d.Idx[d.Start[i]:d.Start[i+1]], d.Val[d.Start[i]:d.Start[i+1]]
}

// NNZ returns the number of stored features.
func (d *Dataset) NNZ() int { return len(d.Idx) }

func newDataset() *Dataset { return &Dataset{Start: []int{0}} }

// appendRow adds a row; ids must be ascending.
func (d *Dataset) appendRow(label float64, idx []int32, val []float32) {
	d.Idx = append(d.Idx, idx...)
	d.Val = append(d.Val, val...)
	d.Start = append(d.Start, len(d.Idx))
	d.Label = append(d.Label, label)
	if n := len(idx); n > 0 && idx[n-1] > d.MaxFeature {
		d.MaxFeature = idx[n-1]
	}
}

// Subset returns a new dataset holding the given rows, in that order.
func (d *Dataset) Subset(rows []int) *Dataset {
	s := newDataset()
	nnz := 0
	for _, r := range rows {
		nnz += d.Start[r+1] - d.Start[r]
	}
	s.Idx = make([]int32, 0, nnz)
	s.Val = make([]float32, 0, nnz)
	s.Start = make([]int, 1, len(rows)+1)
	s.Label = make([]float64, 0, len(rows))
	for _, r := range rows {
		idx, val := d.Row(r)
		s.appendRow(d.Label[r], idx, val)
		if d.Class != nil {
			s.Class = append(s.Class, d.Class[r])
		}
	}
	return s
}

// Head returns the first n rows (all of them when n <= 0 or n >= Len).
func (d *Dataset) Head(n int) *Dataset {
	if n <= 0 || n >= d.Len() {
		return d
	}
	return d.Subset(seq(0, n))
}

// AddBias puts feature 0 with value v at the front of every row. Rows must
// not already hold feature 0.
func (d *Dataset) AddBias(v float32) {
	n := d.Len()
	idx := make([]int32, 0, len(d.Idx)+n)
	val := make([]float32, 0, len(d.Val)+n)
	start := make([]int, 1, n+1)
	for i := 0; i < n; i++ {
		ri, rv := d.Row(i)
		idx = append(append(idx, 0), ri...)
		val = append(append(val, v), rv...)
		start = append(start, len(idx))
	}
	d.Idx, d.Val, d.Start = idx, val, start
}

// seq returns lo, lo+1, ..., hi-1.
func seq(lo, hi int) []int {
	s := make([]int, 0, max(hi-lo, 0))
	for i := lo; i < hi; i++ {
		s = append(s, i)
	}
	return s
}

// Permutation returns the row indices 0..n-1 shuffled with seed.
func Permutation(n int, seed uint64) []int {
	p := seq(0, n)
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	r.Shuffle(n, func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}

// Shard returns worker rank's contiguous part of rows, split into parts of
// nearly equal size (the first len(rows)%workers parts hold one more).
func Shard(rows []int, rank, workers int) []int {
	n := len(rows)
	lo := rank * n / workers
	hi := (rank + 1) * n / workers
	return rows[lo:hi]
}

// ParseError is a malformed line of a LIBSVM file.
type ParseError struct {
	Name string // file name, may be empty
	Line int    // 1-based
	Msg  string
}

// Error formats the error as "file:line: message".
func (e *ParseError) Error() string {
	if e.Name != "" {
		return fmt.Sprintf("%s:%d: %s", e.Name, e.Line, e.Msg)
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// ReadLIBSVM parses LIBSVM text: one example per line, "label id:value
// id:value ...", ids 1-based and strictly ascending. Blank lines and lines
// starting with '#' are skipped, as is anything after a '#'. name is used in
// error messages only. A malformed line yields a *ParseError with its number.
func ReadLIBSVM(r io.Reader, name string) (*Dataset, error) {
	d := newDataset()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
	var idx []int32
	var val []float32
	line := 0
	for sc.Scan() {
		line++
		text := sc.Bytes()
		if i := bytes.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(string(text))
		if len(fields) == 0 {
			continue
		}
		fail := func(format string, args ...any) error {
			return &ParseError{Name: name, Line: line, Msg: fmt.Sprintf(format, args...)}
		}
		label, err := strconv.ParseFloat(fields[0], 64)
		if err != nil || math.IsNaN(label) || math.IsInf(label, 0) {
			return nil, fail("bad label %q", fields[0])
		}
		idx, val = idx[:0], val[:0]
		prev := int64(0) // the last id parsed, kept or not (zero values are not)
		for _, f := range fields[1:] {
			colon := strings.IndexByte(f, ':')
			if colon < 0 {
				return nil, fail("feature %q is not id:value", f)
			}
			id, err := strconv.ParseInt(f[:colon], 10, 32)
			if err != nil {
				return nil, fail("bad feature id in %q", f)
			}
			if id < 1 {
				return nil, fail("feature id %d in %q: ids start at 1", id, f)
			}
			if id > maxFeatureID {
				return nil, fail("feature id %d is above %d: number the features densely", id, maxFeatureID)
			}
			if id <= prev {
				return nil, fail("feature id %d is not above the previous one (%d)", id, prev)
			}
			prev = id
			v, err := strconv.ParseFloat(f[colon+1:], 32)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fail("bad feature value in %q", f)
			}
			if v == 0 {
				continue
			}
			idx = append(idx, int32(id))
			val = append(val, float32(v))
		}
		d.appendRow(label, idx, val)
	}
	if err := sc.Err(); err != nil {
		if name != "" {
			return nil, fmt.Errorf("%s: after line %d: %w", name, line, err)
		}
		return nil, fmt.Errorf("after line %d: %w", line, err)
	}
	return d, nil
}

// WriteLIBSVM writes d in LIBSVM text, skipping the bias feature 0.
func WriteLIBSVM(w io.Writer, d *Dataset) error {
	bw := bufio.NewWriter(w)
	var buf []byte
	for i := 0; i < d.Len(); i++ {
		buf = strconv.AppendFloat(buf[:0], d.Label[i], 'g', -1, 64)
		idx, val := d.Row(i)
		for j, id := range idx {
			if id == 0 {
				continue
			}
			buf = append(buf, ' ')
			buf = strconv.AppendInt(buf, int64(id), 10)
			buf = append(buf, ':')
			buf = strconv.AppendFloat(buf, float64(val[j]), 'g', -1, 32)
		}
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// Labels maps a data set's raw labels to class indices 0..K-1. Values[c] is
// the raw label of class c. A model with K == 2 is binary logistic
// regression (class 1 positive) unless Softmax is set.
type Labels struct {
	Values  []float64
	Softmax bool
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

// InferLabels chooses the classes from the raw labels of the given data
// sets: labels in {-1, +1} are binary with +1 positive; otherwise labels
// must be non-negative integers, read as 0..K-1 when 0 occurs and as 1..K
// otherwise. Two classes give binary logistic regression, more give softmax
// regression; loss "logistic" or "softmax" forces one (logistic needs two
// classes), "auto" or "" chooses.
func InferLabels(loss string, sets ...*Dataset) (*Labels, error) {
	seen := map[float64]bool{}
	for _, d := range sets {
		if d == nil {
			continue
		}
		for _, y := range d.Label {
			seen[y] = true
		}
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("no examples")
	}
	vals := make([]float64, 0, len(seen))
	for y := range seen {
		vals = append(vals, y)
	}
	sort.Float64s(vals)
	var l Labels
	switch {
	case seen[-1] && len(seen) <= 2 && (len(seen) == 1 || seen[1]):
		l.Values = []float64{-1, 1}
	default:
		lo, hi := vals[0], vals[len(vals)-1]
		for _, y := range vals {
			if y != math.Trunc(y) || y < 0 {
				return nil, fmt.Errorf("label %v: want -1/+1 or class numbers 0..K-1 or 1..K", y)
			}
		}
		// Classes are every integer up to the largest label: a stray large
		// label would make a softmax model of that many classes, mostly
		// never seen. Want most of them to occur.
		if classes := hi + 1 - min(lo, 1); classes > 2*float64(len(seen))+8 {
			return nil, fmt.Errorf("label %v: classes 0..%v (or 1..%v), but only %d of them occur; number the classes densely", hi, hi, hi, len(seen))
		}
		first := 1.0
		if lo == 0 {
			first = 0
		}
		for y := first; y <= max(hi, first+1); y++ {
			l.Values = append(l.Values, y)
		}
	}
	switch loss {
	case "", "auto":
		l.Softmax = l.K() > 2
	case "logistic":
		if l.K() != 2 {
			return nil, fmt.Errorf("logistic loss needs two classes, the data has %d", l.K())
		}
	case "softmax":
		l.Softmax = true
	default:
		return nil, fmt.Errorf("unknown loss %q (want auto, logistic or softmax)", loss)
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

// LoadData reads a data set from path: a LIBSVM text file, or an IDX image
// file (gzipped or not) whose labels are in the file named "IMAGES,LABELS"
// or found by replacing "images-idx3" with "labels-idx1" in its name. IDX
// pixels become features 1..rows*cols scaled to [0,1].
func LoadData(path string) (*Dataset, error) {
	images, labels, isPair := strings.Cut(path, ",")
	f, err := openMaybeGzip(images)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	head, err := br.Peek(4)
	if err == nil && head[0] == 0 && head[1] == 0 && head[2] == 0x08 && head[3] == 3 {
		if !isPair {
			labels = strings.Replace(images, "images-idx3", "labels-idx1", 1)
			if labels == images {
				return nil, fmt.Errorf("%s: IDX images whose labels file is not named *labels-idx1*; give IMAGES,LABELS", images)
			}
		}
		return readIDXPair(br, images, labels)
	}
	if isPair {
		return nil, fmt.Errorf("%s: not an IDX image file (magic 0x00000803)", images)
	}
	return ReadLIBSVM(br, images)
}

// readIDXPair reads IDX images from r (named name) and labels from the file
// labels.
func readIDXPair(r io.Reader, name, labels string) (*Dataset, error) {
	img, err := ReadIDX(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	lf, err := openMaybeGzip(labels)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	lab, err := ReadIDX(bufio.NewReader(lf))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", labels, err)
	}
	d, err := ImagesToDataset(img, lab)
	if err != nil {
		return nil, fmt.Errorf("%s with %s: %w", name, labels, err)
	}
	return d, nil
}

// ImagesToDataset turns IDX images (n × rows × cols bytes) and labels (n
// bytes) into a data set: pixel p of an image (row-major) is feature p+1
// with value byte/255; zero pixels are left out.
func ImagesToDataset(img, lab *IDX) (*Dataset, error) {
	if img.Type != idxUint8 || len(img.Dims) < 2 {
		return nil, fmt.Errorf("images: want unsigned bytes with at least 2 dimensions, got type 0x%02x dims %v", img.Type, img.Dims)
	}
	if lab.Type != idxUint8 || len(lab.Dims) != 1 {
		return nil, fmt.Errorf("labels: want unsigned bytes with 1 dimension, got type 0x%02x dims %v", lab.Type, lab.Dims)
	}
	n := img.Dims[0]
	if lab.Dims[0] != n {
		return nil, fmt.Errorf("%d images but %d labels", n, lab.Dims[0])
	}
	per := 1
	for _, x := range img.Dims[1:] {
		per *= x
	}
	if per > maxFeatureID {
		return nil, fmt.Errorf("images of %d pixels: more features than %d", per, maxFeatureID)
	}
	d := newDataset()
	d.Start = make([]int, 1, n+1)
	d.Label = make([]float64, 0, n)
	idx := make([]int32, 0, per)
	val := make([]float32, 0, per)
	for i := 0; i < n; i++ {
		idx, val = idx[:0], val[:0]
		for p, b := range img.Data[i*per : (i+1)*per] {
			if b != 0 {
				idx = append(idx, int32(p+1))
				val = append(val, float32(b)/255)
			}
		}
		d.appendRow(float64(lab.Data[i]), idx, val)
	}
	d.MaxFeature = max(d.MaxFeature, int32(per))
	return d, nil
}

// loadFile reads path with LoadData and keeps its first limit rows.
func loadFile(path string, limit int) (*Dataset, error) {
	d, err := LoadData(path)
	if err != nil {
		return nil, err
	}
	return d.Head(limit), nil
}

// writeFileAtomic writes path through a temporary file renamed into place.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(dirOf(path), ".lr-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file private; a model or plot is for everyone.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i+1]
	}
	return "."
}

// uniqueFeatures returns the sorted distinct feature ids of rows (appended
// to out[:0]) and sets mark[f] to f's position among them. mark must have an
// entry per feature id, all -1 on entry; the caller resets the entries of
// the returned ids to -1 when done with them.
func uniqueFeatures(d *Dataset, rows []int, mark []int32, out []int32) []int32 {
	out = out[:0]
	for _, r := range rows {
		idx, _ := d.Row(r)
		for _, f := range idx {
			if mark[f] < 0 {
				mark[f] = 0
				out = append(out, f)
			}
		}
	}
	slices.Sort(out)
	for i, f := range out {
		mark[f] = int32(i)
	}
	return out
}
