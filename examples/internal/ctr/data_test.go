package ctr

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ids returns the feature ids of row i of d.
func ids(d *Dataset, i int) []uint64 {
	idx, _ := d.Row(i)
	out := make([]uint64, len(idx))
	for j, f := range idx {
		out[j] = d.Vocab.IDs[f]
	}
	return out
}

func readString(t *testing.T, in string, o ReadOptions) *Dataset {
	t.Helper()
	d, err := ReadLIBSVM(strings.NewReader(in), "x", o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestReadLIBSVM(t *testing.T) {
	in := `# a comment line
+1 1:0.5 3:-2 7:1e-1
-1 2:1   # trailing comment

0.0
2 4:0 5:3
`
	d := readString(t, in, ReadOptions{})
	if d.Len() != 4 {
		t.Fatalf("%d rows, want 4", d.Len())
	}
	if want := []float64{1, -1, 0, 2}; !slices.Equal(d.Label, want) {
		t.Errorf("labels %v, want %v", d.Label, want)
	}
	_, val := d.Row(0)
	if !slices.Equal(ids(d, 0), []uint64{1, 3, 7}) || !slices.Equal(val, []float32{0.5, -2, 0.1}) {
		t.Errorf("row 0: %v %v", ids(d, 0), val)
	}
	if len(ids(d, 2)) != 0 {
		t.Errorf("row 2 has features %v", ids(d, 2))
	}
	// Zero values are not stored.
	if _, val := d.Row(3); !slices.Equal(ids(d, 3), []uint64{5}) || !slices.Equal(val, []float32{3}) {
		t.Errorf("row 3: %v %v", ids(d, 3), val)
	}
	// Binary data stores no values.
	b := readString(t, "1 1:1 5:1\n-1 3:1\n", ReadOptions{})
	if b.Val != nil {
		t.Errorf("binary data has values %v", b.Val)
	}
	// A value other than 1 after binary rows keeps the earlier ones.
	b = readString(t, "1 1:1 5:1\n-1 3:2\n", ReadOptions{})
	if !slices.Equal(b.Val, []float32{1, 1, 2}) {
		t.Errorf("values %v", b.Val)
	}
}

func TestReadLIBSVMErrors(t *testing.T) {
	good := "+1 1:1 2:1\n"
	cases := []struct {
		bad, msg string
	}{
		{"abc 1:1", "bad label"},
		{"nan 1:1", "bad label"},
		{"0.5 1:1", "label 0.5: labels are -1/+1 or class numbers"},
		{"-2 1:1", "label -2"},
		{"1 1:1 2", "not id:value"},
		{"1 x:1", `feature id "x" is not a positive integer (to use ids that are strings, hash them with -hash-bits)`},
		{"1 0:1", "ids start at 1"},
		{"1 -3:1", "is negative: ids start at 1"},
		{"1 3:1 2:1", "not above the previous"},
		{"1 3:1 3:1", "not above the previous"},
		{"1 3:0 2:1", "not above the previous"}, // a zero value still counts for the order
		{"1 17592186044416:1", "is above 17592186044415, the largest id without hashing (hash larger ids with -hash-bits)"},
		{"1 99999999999999999999999:1", "the largest id without hashing"},
		{"1 3:abc", "bad feature value"},
		{"1 3:inf", "bad feature value"},
		{"1 3:1e39", "bad feature value"}, // not a float32
	}
	for _, c := range cases {
		in := good + "\n# comment\n" + c.bad + "\n" + good
		_, err := ReadLIBSVM(strings.NewReader(in), "f.txt", ReadOptions{})
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%q: error %v, want a *ParseError", c.bad, err)
			continue
		}
		if pe.Line != 4 || pe.Name != "f.txt" {
			t.Errorf("%q: at %s:%d, want f.txt:4", c.bad, pe.Name, pe.Line)
		}
		if !strings.Contains(err.Error(), c.msg) || !strings.HasPrefix(err.Error(), "f.txt:4: ") {
			t.Errorf("%q: error %q, want f.txt:4: ...%s...", c.bad, err, c.msg)
		}
	}
	// Large ids are fine: nothing is allocated per possible id.
	d := readString(t, "1 5000000000:1 60000000000:1\n", ReadOptions{})
	if !slices.Equal(ids(d, 0), []uint64{5000000000, 60000000000}) || d.Vocab.Len() != 2 {
		t.Errorf("large ids: %v", ids(d, 0))
	}
}

func TestHashedIDs(t *testing.T) {
	in := "1 user=alice:1 item=42:1 18446744073709551615:2\n-1 item=42:1 user=bob:1\n"
	d := readString(t, in, ReadOptions{HashBits: 20})
	for i := 0; i < d.Len(); i++ {
		for _, id := range ids(d, i) {
			if id < 1 || id >= 1<<20 {
				t.Errorf("row %d: hashed id %d out of 1..2^20-1", i, id)
			}
		}
	}
	// The same text hashes alike in every row and every process.
	if h := HashFeature([]byte("item=42"), 20); !slices.Contains(ids(d, 0), h) || !slices.Contains(ids(d, 1), h) {
		t.Errorf("item=42 -> %d, rows %v %v", h, ids(d, 0), ids(d, 1))
	}
	if HashFeature([]byte("a"), 1) != 1 {
		t.Error("one bit: every id must be 1")
	}
	if _, err := ReadLIBSVM(strings.NewReader("1 :1\n"), "x", ReadOptions{HashBits: 8}); err == nil || !strings.Contains(err.Error(), "empty feature id") {
		t.Errorf("empty id: %v", err)
	}
}

func TestWriteLIBSVMRoundTrip(t *testing.T) {
	in := "1 1:0.5 3:-2\n-1 2:0.25\n3\n"
	d := readString(t, in, ReadOptions{})
	d.Vocab.Sort(d)
	var buf bytes.Buffer
	if err := WriteLIBSVM(&buf, d); err != nil {
		t.Fatal(err)
	}
	if buf.String() != in {
		t.Errorf("wrote\n%s\nwant\n%s", buf.String(), in)
	}
}

func TestVocabSort(t *testing.T) {
	v := NewVocab()
	d := readString(t, "1 7:1 9000000:1\n1 2:1 7:1\n", ReadOptions{Vocab: v})
	v.Sort(d)
	if !slices.Equal(v.IDs, []uint64{2, 7, 9000000}) {
		t.Errorf("ids %v", v.IDs)
	}
	if !slices.Equal(ids(d, 0), []uint64{7, 9000000}) || !slices.Equal(ids(d, 1), []uint64{2, 7}) {
		t.Errorf("rows %v %v", ids(d, 0), ids(d, 1))
	}
	if v.Lookup(9000000) != 2 || v.Lookup(2) != 0 || v.Lookup(3) != -1 || v.Lookup(1<<40) != -1 {
		t.Errorf("lookups %d %d %d", v.Lookup(9000000), v.Lookup(2), v.Lookup(3))
	}
}

// writeLines writes n LIBSVM lines (label i%2, feature i+1) to a file; line
// i is longer for some i, so that byte ranges fall mid-line.
func writeLines(t *testing.T, n int, gz bool) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%d %d:1", i%2, i+1)
		if i%7 == 3 {
			b.WriteString(strings.Repeat(" ", 50) + "# padding")
		}
		if i%11 == 0 {
			b.WriteString("\n# a comment line\n\n")
		} else {
			b.WriteString("\n")
		}
	}
	data := []byte(b.String())
	name := "lines.svm"
	if gz {
		data, name = gzipped(t, data), "lines.svm.gz"
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestShards reads a file as 1..5 workers: the shards hold every example
// exactly once, by byte ranges for a plain file and every W-th example for
// a gzipped one or with a limit.
func TestShards(t *testing.T) {
	const n = 103
	for _, gz := range []bool{false, true} {
		path := writeLines(t, n, gz)
		for workers := 1; workers <= 5; workers++ {
			for _, limit := range []int{0, 50} {
				seen := map[uint64]int{}
				total := 0
				for rank := 0; rank < workers; rank++ {
					d, err := LoadData(path, ReadOptions{Rank: rank, Workers: workers, Limit: limit})
					if err != nil {
						t.Fatal(err)
					}
					if limit == 0 && !gz && workers > 1 && (d.Len() < n/workers-8 || d.Len() > n/workers+8) {
						t.Errorf("gz %v, %d workers: rank %d has %d rows", gz, workers, rank, d.Len())
					}
					for i := 0; i < d.Len(); i++ {
						id := ids(d, i)[0]
						seen[id]++
						if (gz || limit > 0) && workers > 1 && int(id-1)%workers != rank {
							t.Errorf("example %d went to rank %d of %d", id, rank, workers)
						}
						if d.Label[i] != float64((id-1)%2) {
							t.Errorf("example %d has label %v", id, d.Label[i])
						}
					}
					total += d.Len()
				}
				want := n
				if limit > 0 {
					want = limit
				}
				if total != want || len(seen) != want {
					t.Errorf("gz %v, %d workers, limit %d: %d rows, %d distinct, want %d", gz, workers, limit, total, len(seen), want)
				}
			}
		}
	}
}

// TestShardErrorLine checks that a worker reading a byte range names the
// line within the whole file.
func TestShardErrorLine(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 100; i++ {
		if i == 90 {
			b.WriteString("1 2:1 1:1\n")
			continue
		}
		b.WriteString("1 1:1\n")
	}
	p := filepath.Join(t.TempDir(), "bad.svm")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadData(p, ReadOptions{Rank: 1, Workers: 2})
	if err == nil || !strings.Contains(err.Error(), "bad.svm:91: feature id 1 is not above") {
		t.Errorf("error %v, want line 91", err)
	}
	if _, err := LoadData("-", ReadOptions{Rank: 0, Workers: 2}); err == nil || !strings.Contains(err.Error(), "standard input") {
		t.Errorf("stdin for 2 workers: %v", err)
	}
}

func TestInferLabels(t *testing.T) {
	cases := []struct {
		train, test []float64
		loss        string
		values      []float64
		softmax     bool
		err         string
	}{
		{train: []float64{1, -1, 1}, values: []float64{-1, 1}},
		{train: []float64{0, 1, 1}, values: []float64{0, 1}},
		{train: []float64{1, 2}, values: []float64{1, 2}},
		{train: []float64{0, 5}, values: []float64{0, 5}},
		{train: []float64{0, 3, 1}, loss: "softmax", values: []float64{0, 1, 2, 3}, softmax: true},
		{train: []float64{1, 3, 2}, loss: "softmax", values: []float64{1, 2, 3}, softmax: true},
		{train: []float64{0, 1}, loss: "softmax", values: []float64{0, 1}, softmax: true},
		{train: []float64{0, 1}, test: []float64{2}, loss: "softmax", values: []float64{0, 1, 2}, softmax: true},
		// A stray label is an error, not a silent switch to softmax.
		{train: []float64{0, 1, 1, 3}, err: "the training data has 3 labels, 0 (1), 1 (2), 3 (1): for multinomial (softmax) regression over them give -loss=softmax"},
		{train: []float64{0, 1, 2}, loss: "logistic", err: "logistic loss needs two classes"},
		{train: []float64{1, 1, 1}, err: "all 3 training examples have label 1: a classifier needs examples of two classes"},
		{train: []float64{1, 1}, loss: "softmax", err: "all 2 training examples have label 1"},
		{train: []float64{0, 1}, test: []float64{3}, err: "the test data has label 3 (1 examples), which no training example has"},
		{train: []float64{-1, 2}, err: "-1 goes only with +1"},
		{train: []float64{0, 1, 2, 999}, loss: "softmax", err: "only 4 of them occur"},
		{train: []float64{0, 1}, loss: "hinge", err: "unknown loss"},
		{err: "no training examples"},
	}
	for _, c := range cases {
		d, e := newDataset(nil), newDataset(nil)
		for _, y := range c.train {
			d.appendRow(y, nil, nil, nil)
		}
		for _, y := range c.test {
			e.appendRow(y, nil, nil, nil)
		}
		l, err := InferLabels(c.loss, CountLabels([]*Dataset{d}, []*Dataset{e}))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v %v %q: error %v, want %q", c.train, c.test, c.loss, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v %q: %v", c.train, c.loss, err)
			continue
		}
		if !slices.Equal(l.Values, c.values) || l.Softmax != c.softmax {
			t.Errorf("%v %q: %+v, want values %v softmax %v", c.train, c.loss, *l, c.values, c.softmax)
		}
		if err := l.Assign(d); err != nil {
			t.Errorf("%v: assign: %v", c.train, err)
		}
		for i, y := range c.train {
			if l.Values[d.Class[i]] != y {
				t.Errorf("%v: row %d has class %d", c.train, i, d.Class[i])
			}
		}
	}
	l := &Labels{Values: []float64{0, 1}}
	d := newDataset(nil)
	d.appendRow(7, nil, nil, nil)
	if err := l.Assign(d); err == nil || !strings.Contains(err.Error(), "label 7") {
		t.Errorf("assigning an unknown label: %v", err)
	}
	// Counts from several workers add up.
	m := MergeLabelCounts([]LabelCount{{Value: 1, Train: 2}}, []LabelCount{{Value: 0, Test: 1}, {Value: 1, Train: 1, Test: 3}})
	if !slices.Equal(m, []LabelCount{{Value: 0, Test: 1}, {Value: 1, Train: 3, Test: 3}}) {
		t.Errorf("merged %v", m)
	}
}

// idxBytes encodes an unsigned-byte IDX file.
func idxBytes(dims []uint32, data []byte) []byte {
	var b bytes.Buffer
	b.Write([]byte{0, 0, idxUint8, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, d)
	}
	b.Write(data)
	return b.Bytes()
}

func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestReadIDX(t *testing.T) {
	x, err := ReadIDX(bytes.NewReader(idxBytes([]uint32{2, 3}, []byte{1, 2, 3, 4, 5, 6})))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(x.Dims, []int{2, 3}) || !bytes.Equal(x.Data, []byte{1, 2, 3, 4, 5, 6}) {
		t.Errorf("got %+v", x)
	}
	bad := map[string][]byte{
		"not an IDX":            {1, 2, 8, 1, 0, 0, 0, 1, 0},
		"only":                  {0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0},
		"dimension 1":           {0, 0, 8, 2, 0, 0, 0, 1, 0},
		"1 of 3 bytes":          idxBytes([]uint32{3}, []byte{9}),
		"too large":             idxBytes([]uint32{1 << 20, 1 << 20}, nil),
		"0 of 1000000000 bytes": idxBytes([]uint32{1000, 1000, 1000}, nil), // no gigabyte allocated first
		"header":                {0, 0},
	}
	for want, in := range bad {
		if _, err := ReadIDX(bytes.NewReader(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v, want %q", in, err, want)
		}
	}
}

func TestLoadIDXImages(t *testing.T) {
	dir := t.TempDir()
	// Three 2×2 images.
	pixels := []byte{
		0, 255, 0, 51,
		0, 0, 0, 0,
		255, 255, 255, 255,
	}
	images := idxBytes([]uint32{3, 2, 2}, pixels)
	labels := idxBytes([]uint32{3}, []byte{7, 0, 9})
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("train-images-idx3-ubyte", images)
	write("train-labels-idx1-ubyte", labels)
	gz := write("t10k-images-idx3-ubyte.gz", gzipped(t, images))
	write("t10k-labels-idx1-ubyte.gz", gzipped(t, labels))
	other := write("other.idx", images)
	lab := write("lab.idx", labels)
	short := write("short.idx", idxBytes([]uint32{2}, []byte{1, 2}))

	for _, path := range []string{plain, gz, other + "," + lab} {
		d, err := LoadData(path, ReadOptions{})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d.Len() != 3 || !slices.Equal(d.Label, []float64{7, 0, 9}) {
			t.Fatalf("%s: %d rows, labels %v", path, d.Len(), d.Label)
		}
		_, val := d.Row(0)
		if !slices.Equal(ids(d, 0), []uint64{2, 4}) || !slices.Equal(val, []float32{1, 0.2}) {
			t.Errorf("%s: row 0: %v %v", path, ids(d, 0), val)
		}
		if len(ids(d, 1)) != 0 {
			t.Errorf("%s: row 1: %v", path, ids(d, 1))
		}
		if !slices.Equal(ids(d, 2), []uint64{1, 2, 3, 4}) {
			t.Errorf("%s: row 2: %v", path, ids(d, 2))
		}
	}
	// Shards: every second image, from the rank-th.
	d, err := LoadData(gz, ReadOptions{Rank: 1, Workers: 2})
	if err != nil || d.Len() != 1 || d.Label[0] != 0 {
		t.Errorf("rank 1 of 2: %v %v", d, err)
	}
	if _, err := LoadData(other, ReadOptions{}); err == nil || !strings.Contains(err.Error(), "IMAGES,LABELS") {
		t.Errorf("images without labels: %v", err)
	}
	if _, err := LoadData(other+","+short, ReadOptions{}); err == nil || !strings.Contains(err.Error(), "3 images but 2 labels") {
		t.Errorf("label count mismatch: %v", err)
	}
	if _, err := LoadData(lab+","+lab, ReadOptions{}); err == nil || !strings.Contains(err.Error(), "not an IDX image file") {
		t.Errorf("labels as images: %v", err)
	}
}

func TestPermutation(t *testing.T) {
	p := Permutation(103, 5)
	if !slices.Equal(p, Permutation(103, 5)) {
		t.Error("Permutation is not deterministic")
	}
	s := slices.Clone(p)
	slices.Sort(s)
	if !slices.Equal(s, seq(0, 103)) {
		t.Error("not a permutation")
	}
}

func TestNewBatch(t *testing.T) {
	d := readString(t, "1 3:1 5:1\n0 1:1 5:1\n1 2:1\n", ReadOptions{})
	d.Vocab.Sort(d)
	d.Class = []int32{1, 0, 1}
	mark := newMark(d.Vocab.Len())
	b := NewBatch(d, []int{0, 1}, mark)
	var feats []uint64
	for _, f := range b.Feats {
		feats = append(feats, d.Vocab.IDs[f])
	}
	if !slices.Equal(feats, []uint64{1, 3, 5}) {
		t.Errorf("features %v", feats)
	}
	// Row 0 is features 3, 5: positions 1, 2; row 1 is 1, 5: 0, 2.
	if !slices.Equal(b.Pos, []int32{1, 2, 0, 2}) || !slices.Equal(b.Start, []int32{0, 2, 4}) || !slices.Equal(b.Class, []int32{1, 0}) {
		t.Errorf("batch %+v", b)
	}
	if !slices.Equal(mark, newMark(d.Vocab.Len())) {
		t.Errorf("mark left as %v", mark)
	}
	keys := Weights{C: 2, Bias: 1}.appendKeys(nil, b.Feats, d.Vocab.IDs, 100)
	if !slices.Equal(keys, []uint64{100, 101, 102, 103, 106, 107, 110, 111}) {
		t.Errorf("keys %v", keys)
	}
}

// TestSynthesize checks that the synthetic data is reproducible and shaped
// as asked.
func TestSynthesize(t *testing.T) {
	c := SynthConfig{Rows: 300, TestRows: 100, IDs: 1000, NNZ: 10, Informative: 0.1, Zipf: 1.3, ZipfV: 20, Scale: 1, Seed: 7}
	var a, at, b, bt bytes.Buffer
	st, err := Synthesize(c, &a, &at)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Synthesize(c, &b, &bt); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || !bytes.Equal(at.Bytes(), bt.Bytes()) {
		t.Error("the same seed wrote different data")
	}
	d := readString(t, a.String(), ReadOptions{})
	if d.Len() != 300 || d.Val != nil || st.NNZ < 300*5 || st.NNZ > 400*10 {
		t.Errorf("%d rows, %d non-zeros, values %v", d.Len(), st.NNZ, d.Val != nil)
	}
	if st.BayesTestAcc < 0.5 || st.BayesTestAcc > 1 || st.Positive <= 0 || st.Positive >= 1 {
		t.Errorf("stats %+v", st)
	}
	c.Zipf = 1
	if _, err := Synthesize(c, &a, nil); err == nil {
		t.Error("Zipf exponent 1 accepted")
	}
}
