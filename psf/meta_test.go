package psf

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestDefaults(t *testing.T) {
	cases := []struct {
		in                 MatrixMeta
		servers            int
		rowBlock           int
		colBlock, colBlks  int64
		partitions         int
		lastWidth, lastRow int
	}{
		{MatrixMeta{Name: "a", Rows: 3, Cols: 10_000_000}, 2, 3, 5_000_000, 2, 2, 5_000_000, 3},
		{MatrixMeta{Name: "b", Rows: 1, Cols: 7}, 3, 1, 3, 3, 3, 1, 1},
		{MatrixMeta{Name: "c", Rows: 1, Cols: 1}, 4, 1, 1, 1, 1, 1, 1},
		// A partition would be too large: fewer rows per block.
		{MatrixMeta{Name: "d", Rows: 100, Cols: 1 << 22}, 1, 16, 1 << 22, 1, 7, 1 << 22, 100},
		// A row too wide for one partition per server: more column blocks.
		{MatrixMeta{Name: "e", Rows: 2, Cols: 1<<27 + 1}, 1, 1, 1 << 26, 3, 6, 1, 2},
	}
	for _, c := range cases {
		m, err := c.in.withDefaults(c.servers)
		if err != nil {
			t.Errorf("%s: %v", c.in.Name, err)
			continue
		}
		if m.RowBlock != c.rowBlock || m.ColBlock != c.colBlock || m.NumColBlocks() != c.colBlks || m.NumPartitions() != c.partitions {
			t.Errorf("%s: %+v: %d col blocks, %d partitions", c.in.Name, m, m.NumColBlocks(), m.NumPartitions())
		}
		last := m.Partition(m.NumPartitions() - 1)
		if last.Width() != c.lastWidth || last.RowEnd != c.lastRow {
			t.Errorf("%s: last partition %v", c.in.Name, last)
		}
		// Partitions tile the matrix.
		var area int64
		for _, p := range m.Partitions() {
			area += int64(p.RowEnd-p.RowStart) * int64(p.Width())
			if p.Server != p.ID%c.servers {
				t.Errorf("%s: %v", c.in.Name, p)
			}
		}
		if area != int64(m.Rows)*m.Cols {
			t.Errorf("%s: partitions cover %d of %d values", c.in.Name, area, int64(m.Rows)*m.Cols)
		}
	}
}

func TestValidate(t *testing.T) {
	bad := []MatrixMeta{
		{Name: "", Rows: 1, Cols: 1},
		{Name: ".hidden", Rows: 1, Cols: 1},
		{Name: "a/b", Rows: 1, Cols: 1},
		{Name: "x", Rows: 0, Cols: 1},
		{Name: "x", Rows: 1, Cols: -3},
		{Name: "x", Rows: math.MaxInt, Cols: 1},
		{Name: "x", Rows: 1, Cols: math.MaxInt64},
		{Name: "x", Rows: 10, Cols: 10, RowBlock: 11},
		{Name: "x", Rows: 10, Cols: 10, ColBlock: -1},
		{Name: "x", Rows: 1 << 20, Cols: 1 << 20, RowBlock: 1 << 20, ColBlock: 1 << 20},
		{Name: "x", Rows: 1 << 30, Cols: 1 << 30, RowBlock: 1, ColBlock: 1},
		{Name: "x", Rows: 1, Cols: 1, NumServers: -1},
		// More than a server may make at creation: rows (2^27 row headers
		// on a server), partitions (2^21 on each of 2 servers).
		{Name: "x", Type: Sparse, Rows: 1 << 27},
		{Name: "x", Type: Sparse, Rows: 1 << 27, RowBlock: 1 << 10},
		{Name: "x", Rows: 1 << 27, Cols: 2},
		{Name: "x", Rows: 1 << 22, Cols: 1, RowBlock: 1, ColBlock: 1},
	}
	for _, m := range bad {
		if _, err := m.withDefaults(2); err == nil {
			t.Errorf("%+v accepted", m)
		}
	}
	// Just within those bounds.
	for _, c := range []struct {
		m       MatrixMeta
		servers int
	}{
		{MatrixMeta{Name: "x", Type: Sparse, Rows: 1 << 26}, 2},
		{MatrixMeta{Name: "x", Rows: 1 << 27, Cols: 2, RowBlock: 1 << 20}, 4},
		{MatrixMeta{Name: "x", Rows: 1 << 21, Cols: 1, RowBlock: 1, ColBlock: 1}, 2},
	} {
		if _, err := c.m.withDefaults(c.servers); err != nil {
			t.Errorf("%+v on %d servers: %v", c.m, c.servers, err)
		}
	}
	_, err := MatrixMeta{Name: "x", Type: Sparse, Rows: 1 << 27}.withDefaults(2)
	if err == nil || !strings.Contains(err.Error(), "2^26 rows") {
		t.Errorf("a sparse matrix of 2^27 rows: %v", err)
	}
}

func TestColocated(t *testing.T) {
	m, _ := MatrixMeta{Name: "x", Rows: 10, Cols: 9, RowBlock: 5, ColBlock: 3}.withDefaults(2)
	// 3 column blocks: row block 1 starts on server 1, row block 0 on 0.
	if err := m.Colocated(0, 4); err != nil {
		t.Error(err)
	}
	if err := m.Colocated(0, 5); !errors.Is(err, ErrNotColocated) {
		t.Errorf("rows 0 and 5: %v", err)
	}
	if err := m.Colocated(0, 10); err == nil || errors.Is(err, ErrNotColocated) {
		t.Errorf("row 10: %v", err)
	}
	m, _ = MatrixMeta{Name: "x", Rows: 10, Cols: 9, RowBlock: 5, ColBlock: 3}.withDefaults(3)
	if err := m.Colocated(0, 9); err != nil { // 3 column blocks, 3 servers
		t.Error(err)
	}
}

func TestWireRoundTrip(t *testing.T) {
	e := NewEncoder(nil)
	e.Uint8(7)
	e.Bool(true)
	e.Uvarint(1 << 40)
	e.Varint(-5)
	e.Int(-1 << 40)
	e.Uint64(math.MaxUint64)
	e.Float64(math.Inf(-1))
	e.Blob([]byte("blob"))
	e.String("str")
	e.Float64s([]float64{1.5, math.NaN(), -0})
	e.Ints([]int{-1, 0, 1 << 50})
	e.Int64s([]int64{math.MinInt64, math.MaxInt64})
	d := NewDecoder(e.Bytes())
	if d.Uint8() != 7 || !d.Bool() || d.Uvarint() != 1<<40 || d.Varint() != -5 || d.Int() != -1<<40 ||
		d.Uint64() != math.MaxUint64 || !math.IsInf(d.Float64(), -1) || string(d.Blob()) != "blob" || d.String() != "str" {
		t.Fatal("scalars do not round-trip")
	}
	f := d.Float64s()
	if len(f) != 3 || f[0] != 1.5 || !math.IsNaN(f[1]) {
		t.Errorf("float64s: %v", f)
	}
	if is := d.Ints(); len(is) != 3 || is[2] != 1<<50 {
		t.Errorf("ints: %v", is)
	}
	if is := d.Int64s(); len(is) != 2 || is[0] != math.MinInt64 {
		t.Errorf("int64s: %v", is)
	}
	if err := d.Finish(); err != nil {
		t.Error(err)
	}
	// Lengths beyond the input fail without allocating.
	for _, b := range [][]byte{
		{0xff, 0xff, 0xff, 0xff, 0x0f},
		{0x80},
		{},
	} {
		d := NewDecoder(b)
		if d.Float64s(); d.Err() == nil {
			t.Errorf("% x decoded", b)
		}
		// Errors are sticky.
		if d.Uint8() != 0 || d.Finish() == nil {
			t.Error("a read after an error did not fail")
		}
	}
	if err := NewDecoder([]byte{1, 2}).Finish(); err == nil {
		t.Error("trailing bytes accepted")
	}
	if b := NewDecoder([]byte{2}); b.Bool() || b.Err() == nil {
		t.Error("bool 2 accepted")
	}
}

type gobbed struct {
	A int
	B []string
}

func TestGobCodec(t *testing.T) {
	c := Gob[gobbed]()
	b, err := encode(c, gobbed{A: 3, B: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	v, err := decode(c, b)
	if err != nil || v.A != 3 || v.B[0] != "x" {
		t.Errorf("%+v, %v", v, err)
	}
	if _, err := decode(c, []byte{3, 1, 2, 3}); err == nil {
		t.Error("garbage decoded")
	}
	if _, err := encode(Gob[func()](), nil); err == nil {
		t.Error("a func encoded")
	}
}

// FuzzKernels feeds arbitrary parameters to every registered kernel on a
// block: they must return errors, never panic.
func FuzzKernels(f *testing.F) {
	f.Add(uint8(0), []byte{})
	f.Add(uint8(1), []byte{2, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint8(2), []byte{1, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	meta, err := MatrixMeta{Name: "f", Rows: 6, Cols: 10, RowBlock: 3, ColBlock: 4}.withDefaults(2)
	if err != nil {
		f.Fatal(err)
	}
	smeta, err := MatrixMeta{Name: "s", Type: Sparse, Rows: 6, RowBlock: 3}.withDefaults(2)
	if err != nil {
		f.Fatal(err)
	}
	registry.RLock()
	var names []string
	for name := range registry.m {
		if strings.HasPrefix(name, "psf.") { // not the test's kernels that panic on purpose
			names = append(names, name)
		}
	}
	slices.Sort(names)
	kernels := make([]Kernel, len(names))
	for i, name := range names {
		kernels[i] = registry.m[name]
	}
	registry.RUnlock()
	f.Fuzz(func(t *testing.T, which uint8, param []byte) {
		k := kernels[int(which)%len(kernels)]
		for _, mm := range []MatrixMeta{meta, smeta} {
			m := newServerMatrix(mm, 0)
			if mm.Type == Sparse { // some entries, in column block 0
				for c := int64(-50); c < 50; c++ {
					if m.parts[0].meta.HasCol(c) {
						m.parts[0].table(int(c+50)%3).Set(c, float64(c))
					}
				}
			}
			b := &Block{m: m, part: m.parts[0], write: k.update()}
			_ = k.serve(b, param, NewEncoder(nil))
		}
	})
}

func TestNrm2Partials(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	norm := func(parts ...[]float64) float64 {
		var scale, ssq float64 = 0, 1
		for _, p := range parts {
			s, q := nrm2Partial(p)
			scale, ssq = combineNrm2(scale, ssq, s, q)
		}
		return scale * math.Sqrt(ssq)
	}
	cases := []struct {
		parts [][]float64
		want  float64
	}{
		{[][]float64{{3}, {4}}, 5},
		{[][]float64{{0, 0}, {0}}, 0},
		{[][]float64{{3e300}, {4e300}}, 5e300},
		{[][]float64{{3e-300, 0}, {4e-300}}, 5e-300},
		{[][]float64{{1, -inf}, {nan}}, inf},
		{[][]float64{{nan, inf}, {1}}, inf},
		{[][]float64{{nan}, {1}}, nan},
	}
	for _, c := range cases {
		got := norm(c.parts...)
		if !(got == c.want || math.IsNaN(got) && math.IsNaN(c.want) || math.Abs(got-c.want) <= 1e-15*c.want) {
			t.Errorf("%v: %v, want %v", c.parts, got, c.want)
		}
	}
}
