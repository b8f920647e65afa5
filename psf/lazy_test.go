package psf_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/psf"
)

// allocated returns the row segments of matrix name allocated on all
// servers of j.
func allocated(j *job, name string) int {
	n := 0
	for _, s := range j.servers {
		n += psf.AllocatedRows(s, name)
	}
	return n
}

// Reading a row never written sees zeros and allocates nothing on the
// servers; writing it allocates it.
func TestNeverWrittenRowsStayUnallocated(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	ctx := ctxT(t)
	const cols = 1000
	m, err := j.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "lazy", Rows: 4, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []psf.GetFunc[float64]{psf.Sum(0), psf.Asum(0), psf.Nrm2(0), psf.Max(0), psf.Min(0),
		psf.Amax(0), psf.Amin(0), psf.Dot(0, 1)} {
		if v := get0(t, ctx, m, f); v != 0 || math.Signbit(v) {
			t.Errorf("%s of a row never written = %v, want 0", f.Name(), v)
		}
	}
	for _, f := range []psf.GetFunc[int64]{psf.Nnz(0), psf.Size(0)} {
		want := int64(0)
		if f.Name() == "psf.Size" {
			want = cols
		}
		if v := get0(t, ctx, m, f); v != want {
			t.Errorf("%s of a row never written = %v, want %d", f.Name(), v, want)
		}
	}
	if eq := get0(t, ctx, m, psf.Equal(0, 1)); !eq {
		t.Error("two rows never written are not Equal")
	}
	zeros := make([]float64, cols)
	row, err := m.GetRow(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkRow(t, "GetRow", row, zeros)
	rows, err := m.GetRows(ctx, []int{3, 0, 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		checkRow(t, "GetRows", r, zeros)
	}
	at, err := m.GetAt(ctx, 2, []int{0, 999, 500})
	if err != nil || !slices.Equal(at, []float64{0, 0, 0}) {
		t.Errorf("GetAt: %v, %v", at, err)
	}
	// Functions from a row never written into another read it as zeros.
	if err := m.Update(ctx, psf.Exp(0, 2)); err != nil {
		t.Fatal(err)
	}
	if n := allocated(j, "lazy"); n != 2 {
		t.Errorf("after reads and Exp(0, 2): %d row segments allocated, want 2 (row 2 on both servers)", n)
	}
	got, err := m.GetRow(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Min(got) != 1 || slices.Max(got) != 1 {
		t.Errorf("Exp of a row never written: min %v max %v, want 1", slices.Min(got), slices.Max(got))
	}
	// Dot with a row never written is that of zeros: NaN next to an
	// infinity, as with a row written with zeros.
	if err := m.UpdateAt(ctx, 2, []int64{7}, []float64{math.Inf(1)}); err != nil {
		t.Fatal(err)
	}
	if v := get0(t, ctx, m, psf.Dot(2, 0)); !math.IsNaN(v) {
		t.Errorf("Dot of [.. +Inf ..] with zeros = %v, want NaN", v)
	}
	if n := allocated(j, "lazy"); n != 2 {
		t.Errorf("%d row segments allocated, want 2", n)
	}
	// Filling a row with zeros frees it again.
	if err := m.Update(ctx, psf.Fill(2, 0)); err != nil {
		t.Fatal(err)
	}
	if n := allocated(j, "lazy"); n != 0 {
		t.Errorf("after Fill(2, 0): %d row segments allocated, want 0", n)
	}
}

// An aggregate over a huge row never written neither allocates it nor
// takes long.
func TestHugeRowNeverWritten(t *testing.T) {
	j := newJob(t, 1, 1, testcluster.Options{Mem: true, Quiet: true})
	// ReadMemStats stops the world, which waits for the sweeper: under
	// -race, freeing a huge object clears its shadow memory in one step.
	// When a damaged snapshot could still make a restore allocate 15 GB
	// (TestStoreRestoreRefuses), that took longer than ctxT's 30 s in 4
	// of 5 full runs of the package here. The calls' deadline starts
	// after it.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx := ctxT(t)
	const cols = 1 << 24 // 128 MiB if allocated
	m, err := j.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "huge", Rows: 1, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []psf.GetFunc[float64]{psf.Sum(0), psf.Nrm2(0), psf.Max(0), psf.Dot(0, 0)} {
		if v := get0(t, ctx, m, f); v != 0 {
			t.Errorf("%s = %v", f.Name(), v)
		}
	}
	if n := get0(t, ctx, m, psf.Nnz(0)); n != 0 {
		t.Errorf("Nnz = %v", n)
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 16<<20 {
		t.Errorf("aggregates over a %d-column row never written allocated %d MiB", cols, d>>20)
	}
	if n := allocated(j, "huge"); n != 0 {
		t.Errorf("%d row segments allocated", n)
	}
}

// partBytes returns the total size of the part files of a save.
func partBytes(t *testing.T, dir string) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "part-*.bin"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no part files in %s: %v", dir, err)
	}
	var n int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		n += st.Size()
	}
	return n
}

// A save writes the rows that hold values, not zeros for the rows never
// written; loading it back allocates only those.
func TestSaveSkipsRowsNeverWritten(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	ctx := ctxT(t)
	dir := t.TempDir()
	const rows, cols = 10, 100_000
	m, err := j.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "sparse", Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	model := make([][]float64, rows)
	for r := range model {
		model[r] = make([]float64, cols)
	}
	for _, r := range []int{3, 7} {
		for c := range model[r] {
			model[r][c] = float64(r*cols + c)
		}
		if err := m.UpdateRow(ctx, r, model[r]); err != nil {
			t.Fatal(err)
		}
	}
	// Row 5 is written with zeros: nothing to save either.
	if err := m.Update(ctx, psf.MulS(3, 5, 0)); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(ctx, dir); err != nil {
		t.Fatal(err)
	}
	dense := int64(rows * cols * 8)
	if n := partBytes(t, filepath.Join(dir, "sparse")); n > 2*cols*8+4096 {
		t.Errorf("saving 2 rows of %d columns wrote %d bytes (dense: %d)", cols, n, dense)
	}
	if err := j.clients[0].DeleteMatrix(ctx, "sparse"); err != nil {
		t.Fatal(err)
	}
	m, err = j.clients[0].LoadMatrix(ctx, "sparse", dir)
	if err != nil {
		t.Fatal(err)
	}
	checkAll(t, ctx, m, model)
	if n := allocated(j, "sparse"); n != 4 {
		t.Errorf("loaded: %d row segments allocated, want 4 (rows 3 and 7 on both servers)", n)
	}
	// Into another layout.
	m2, err := j.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "sparse2", Rows: rows, Cols: cols, RowBlock: 3, ColBlock: 30_000})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "sparse"), filepath.Join(dir, "sparse2")); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "sparse2", "meta.json"))
	if err := os.WriteFile(filepath.Join(dir, "sparse2", "meta.json"), []byte(replaceName(t, raw, "sparse2")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m2.Load(ctx, dir); err != nil {
		t.Fatal(err)
	}
	checkAll(t, ctx, m2, model)
	if n := allocated(j, "sparse2"); n != 2*4 {
		t.Errorf("loaded into 4 column blocks: %d row segments allocated, want 8", n)
	}
}

// replaceName returns meta.json with another matrix name.
func replaceName(t *testing.T, raw []byte, name string) string {
	t.Helper()
	var mf map[string]any
	if err := json.Unmarshal(raw, &mf); err != nil {
		t.Fatal(err)
	}
	mf["name"] = name
	b, err := json.Marshal(mf)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// writeV1Save writes a save of a matrix in format 1 (meta.json format 1,
// "PSFPART1" part files with every value), as the first version of psf
// wrote it, with the given layout.
func writeV1Save(t *testing.T, dir, name string, meta psf.MatrixMeta, model [][]float64) {
	t.Helper()
	mdir := filepath.Join(dir, name)
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		t.Fatal(err)
	}
	type part struct {
		ID       int    `json:"id"`
		File     string `json:"file"`
		RowStart int    `json:"rowStart"`
		RowEnd   int    `json:"rowEnd"`
		ColStart int64  `json:"colStart"`
		ColEnd   int64  `json:"colEnd"`
	}
	mf := struct {
		Format     int    `json:"format"`
		Name       string `json:"name"`
		Rows       int    `json:"rows"`
		Cols       int64  `json:"cols"`
		RowBlock   int    `json:"rowBlock"`
		ColBlock   int64  `json:"colBlock"`
		NumServers int    `json:"numServers"`
		Partitions []part `json:"partitions"`
	}{Format: 1, Name: name, Rows: meta.Rows, Cols: meta.Cols, RowBlock: meta.RowBlock, ColBlock: meta.ColBlock, NumServers: meta.NumServers}
	for _, p := range meta.Partitions() {
		file := fmt.Sprintf("part-%05d.bin", p.ID)
		mf.Partitions = append(mf.Partitions, part{p.ID, file, p.RowStart, p.RowEnd, p.ColStart, p.ColEnd})
		b := []byte("PSFPART1")
		for _, v := range []int64{int64(p.RowStart), int64(p.RowEnd), p.ColStart, p.ColEnd} {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		for r := p.RowStart; r < p.RowEnd; r++ {
			for c := p.ColStart; c < p.ColEnd; c++ {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(model[r][c]))
			}
		}
		b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
		if err := os.WriteFile(filepath.Join(mdir, file), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.MarshalIndent(mf, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mdir, "meta.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Saves of the first format ("PSFPART1", every value) still load, into
// the saved layout or another one; their rows of zeros are not allocated.
func TestLoadFormat1(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	ctx := ctxT(t)
	dir := t.TempDir()
	const rows, cols = 5, 17
	model := randomModel(rows, cols, 31) // row 1 is zeros
	model[4][3] = math.Copysign(0, -1)   // -0 survives
	meta := psf.MatrixMeta{Name: "v1", Rows: rows, Cols: cols, RowBlock: 2, ColBlock: 5, NumServers: 3}
	writeV1Save(t, dir, "v1", meta, model)
	m, err := j.clients[0].LoadMatrix(ctx, "v1", dir)
	if err != nil {
		t.Fatal(err)
	}
	checkAll(t, ctx, m, model)
	got, err := m.GetRow(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !math.Signbit(got[3]) {
		t.Error("-0 loaded as +0")
	}
	// Rows 0, 2, 3, 4 hold values: 4 rows x 4 column blocks.
	if n := allocated(j, "v1"); n != 16 {
		t.Errorf("%d row segments allocated, want 16", n)
	}
	other, err := j.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "v1b", Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	writeV1Save(t, dir, "v1b", meta, model)
	if err := other.Load(ctx, dir); err != nil {
		t.Fatal(err)
	}
	checkAll(t, ctx, other, model)
	// A save in the new format reads back the same.
	dir2 := t.TempDir()
	if err := m.Save(ctx, dir2); err != nil {
		t.Fatal(err)
	}
	if err := other.Update(ctx, psf.Fill(0, 9)); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir2, "v1"), filepath.Join(dir2, "v1b")); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir2, "v1b", "meta.json"))
	if err := os.WriteFile(filepath.Join(dir2, "v1b", "meta.json"), []byte(replaceName(t, raw, "v1b")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := other.Load(ctx, dir2); err != nil {
		t.Fatal(err)
	}
	checkAll(t, ctx, other, model)
}
