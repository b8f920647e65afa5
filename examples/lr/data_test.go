package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestReadLIBSVM(t *testing.T) {
	in := `# a comment line
+1 1:0.5 3:-2 7:1e-1
-1 2:1   # trailing comment

0.0
2 4:0 5:3
`
	d, err := ReadLIBSVM(strings.NewReader(in), "x")
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 4 {
		t.Fatalf("%d rows, want 4", d.Len())
	}
	if want := []float64{1, -1, 0, 2}; !slices.Equal(d.Label, want) {
		t.Errorf("labels %v, want %v", d.Label, want)
	}
	idx, val := d.Row(0)
	if !slices.Equal(idx, []int32{1, 3, 7}) || !slices.Equal(val, []float32{0.5, -2, 0.1}) {
		t.Errorf("row 0: %v %v", idx, val)
	}
	if idx, _ := d.Row(2); len(idx) != 0 {
		t.Errorf("row 2 has features %v", idx)
	}
	// Zero values are not stored.
	if idx, val := d.Row(3); !slices.Equal(idx, []int32{5}) || !slices.Equal(val, []float32{3}) {
		t.Errorf("row 3: %v %v", idx, val)
	}
	if d.MaxFeature != 7 {
		t.Errorf("MaxFeature %d, want 7", d.MaxFeature)
	}
}

func TestReadLIBSVMErrors(t *testing.T) {
	good := "+1 1:1 2:1\n"
	cases := []struct {
		bad, msg string
	}{
		{"abc 1:1", "bad label"},
		{"nan 1:1", "bad label"},
		{"1 1:1 2", "not id:value"},
		{"1 x:1", "bad feature id"},
		{"1 0:1", "ids start at 1"},
		{"1 -3:1", "ids start at 1"},
		{"1 3:1 2:1", "not above the previous"},
		{"1 3:1 3:1", "not above the previous"},
		{"1 3:0 2:1", "not above the previous"}, // a zero value still counts for the order
		{"1 67108864:1", "number the features densely"},
		{"1 3:abc", "bad feature value"},
		{"1 3:inf", "bad feature value"},
		{"1 99999999999:1", "bad feature id"},
	}
	for _, c := range cases {
		in := good + "\n# comment\n" + c.bad + "\n" + good
		_, err := ReadLIBSVM(strings.NewReader(in), "f.txt")
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
}

func TestWriteLIBSVMRoundTrip(t *testing.T) {
	in := "1 1:0.5 3:-2\n-1 2:0.25\n3\n"
	d, err := ReadLIBSVM(strings.NewReader(in), "")
	if err != nil {
		t.Fatal(err)
	}
	d.AddBias(1) // the bias is not written
	var buf bytes.Buffer
	if err := WriteLIBSVM(&buf, d); err != nil {
		t.Fatal(err)
	}
	if buf.String() != in {
		t.Errorf("wrote\n%s\nwant\n%s", buf.String(), in)
	}
}

func TestInferLabels(t *testing.T) {
	cases := []struct {
		labels  []float64
		loss    string
		values  []float64
		softmax bool
		err     string
	}{
		{labels: []float64{1, -1, 1}, values: []float64{-1, 1}},
		{labels: []float64{-1}, values: []float64{-1, 1}},
		{labels: []float64{0, 1, 1}, values: []float64{0, 1}},
		{labels: []float64{1, 2}, values: []float64{1, 2}},
		{labels: []float64{0, 3, 1}, values: []float64{0, 1, 2, 3}, softmax: true},
		{labels: []float64{1, 3, 2}, values: []float64{1, 2, 3}, softmax: true},
		{labels: []float64{0, 1}, loss: "softmax", values: []float64{0, 1}, softmax: true},
		{labels: []float64{0, 1, 2}, loss: "logistic", err: "two classes"},
		{labels: []float64{0.5, 1}, err: "label 0.5"},
		{labels: []float64{-1, 2}, err: "label -1"},
		{labels: []float64{0, 1, 2, 999999}, err: "only 4 of them occur"},
		{labels: []float64{0, 1}, loss: "hinge", err: "unknown loss"},
	}
	for _, c := range cases {
		d := newDataset()
		for _, y := range c.labels {
			d.appendRow(y, nil, nil)
		}
		l, err := InferLabels(c.loss, d, nil)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v %q: error %v, want %q", c.labels, c.loss, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v %q: %v", c.labels, c.loss, err)
			continue
		}
		if !slices.Equal(l.Values, c.values) || l.Softmax != c.softmax {
			t.Errorf("%v %q: %+v, want values %v softmax %v", c.labels, c.loss, *l, c.values, c.softmax)
		}
		if err := l.Assign(d); err != nil {
			t.Errorf("%v: assign: %v", c.labels, err)
		}
		for i, y := range c.labels {
			if l.Values[d.Class[i]] != y {
				t.Errorf("%v: row %d has class %d", c.labels, i, d.Class[i])
			}
		}
	}
	l := &Labels{Values: []float64{0, 1}}
	d := newDataset()
	d.appendRow(7, nil, nil)
	if err := l.Assign(d); err == nil || !strings.Contains(err.Error(), "label 7") {
		t.Errorf("assigning an unknown label: %v", err)
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
		d, err := LoadData(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if d.Len() != 3 || !slices.Equal(d.Label, []float64{7, 0, 9}) {
			t.Fatalf("%s: %d rows, labels %v", path, d.Len(), d.Label)
		}
		idx, val := d.Row(0)
		if !slices.Equal(idx, []int32{2, 4}) || !slices.Equal(val, []float32{1, 0.2}) {
			t.Errorf("%s: row 0: %v %v", path, idx, val)
		}
		if idx, _ := d.Row(1); len(idx) != 0 {
			t.Errorf("%s: row 1: %v", path, idx)
		}
		if idx, _ := d.Row(2); !slices.Equal(idx, []int32{1, 2, 3, 4}) {
			t.Errorf("%s: row 2: %v", path, idx)
		}
		if d.MaxFeature != 4 {
			t.Errorf("%s: MaxFeature %d", path, d.MaxFeature)
		}
	}
	if _, err := LoadData(other); err == nil || !strings.Contains(err.Error(), "IMAGES,LABELS") {
		t.Errorf("images without labels: %v", err)
	}
	if _, err := LoadData(other + "," + short); err == nil || !strings.Contains(err.Error(), "3 images but 2 labels") {
		t.Errorf("label count mismatch: %v", err)
	}
	if _, err := LoadData(lab + "," + lab); err == nil || !strings.Contains(err.Error(), "not an IDX image file") {
		t.Errorf("labels as images: %v", err)
	}
}

func TestShardAndPermutation(t *testing.T) {
	p := Permutation(103, 5)
	if !slices.Equal(p, Permutation(103, 5)) {
		t.Error("Permutation is not deterministic")
	}
	seen := make([]bool, 103)
	total := 0
	for r := 0; r < 4; r++ {
		s := Shard(p, r, 4)
		if len(s) < 103/4 || len(s) > 103/4+1 {
			t.Errorf("shard %d has %d rows", r, len(s))
		}
		for _, i := range s {
			if seen[i] {
				t.Errorf("row %d in two shards", i)
			}
			seen[i] = true
		}
		total += len(s)
	}
	if total != 103 {
		t.Errorf("shards hold %d rows", total)
	}
}

func TestUniqueFeatures(t *testing.T) {
	d, err := ReadLIBSVM(strings.NewReader("1 3:1 5:1\n1 1:1 5:1\n1 2:1\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	mark := []int32{-1, -1, -1, -1, -1, -1}
	f := uniqueFeatures(d, []int{0, 1}, mark, nil)
	if !slices.Equal(f, []int32{1, 3, 5}) {
		t.Errorf("features %v", f)
	}
	if mark[1] != 0 || mark[3] != 1 || mark[5] != 2 || mark[2] != -1 {
		t.Errorf("mark %v", mark)
	}
}
