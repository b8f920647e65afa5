package psf

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// On-disk format (version 2). A saved matrix is a directory named after the
// matrix, inside the directory given to Save:
//
//	<dir>/<matrix>/meta.json         the matrix and its layout (metaFile)
//	<dir>/<matrix>/part-<id>.bin     one file per partition, written by its server
//
// meta.json has "format": 2 (1 in saves of the first version, whose part
// files are all "PSFPART1"; the reader takes either, and tells a part
// file's version by its magic).
//
// A part file is a 40-byte header, the rows that hold values, and a
// checksum. Version 2, which Save writes:
//
//	"PSFPART2"                       8 bytes, magic and format version
//	rowStart, rowEnd                 int64 little-endian each
//	colStart, colEnd                 int64 little-endian each
//	present                          ceil((rowEnd-rowStart)/8) bytes: bit i%8
//	                                 (least significant first) of byte i/8 is
//	                                 set if row rowStart+i is stored below;
//	                                 the bits past the last row are 0
//	values                           for each row present, in order,
//	                                 colEnd-colStart float64 little-endian
//	crc                              uint32 little-endian, CRC-32C of all the above
//
// A row not present is all zeros: Save leaves out the rows never written
// and the rows whose values are all +0, so a sparse matrix saves small,
// and Load leaves them unallocated. Version 1, which Load still reads, has
// no presence bytes and every row:
//
//	"PSFPART1", rowStart, rowEnd, colStart, colEnd (as above)
//	values                           (rowEnd-rowStart)*(colEnd-colStart) float64
//	                                 little-endian, row-major
//	crc                              uint32 little-endian, CRC-32C of all the above
//
// Saving is two-phase: every server first removes meta.json and writes its
// part files (each to a temporary name, then renamed), and only when all
// have succeeded does every server write meta.json (again through a
// rename), so a directory with a meta.json is complete. Loading reads
// meta.json, then each server reads the part files that overlap its own
// partitions, so a matrix can be loaded into a job with another number of
// servers or another block layout. Paths are opened by the servers: with
// servers on several machines the directory must be shared.
//
// Checkpoints use the same format: checkpoint id of matrix m is saved in
// <checkpoint dir>/ckpt-<id>/<m>, and <checkpoint dir>/latest/<m> holds the
// id of m's last complete checkpoint, in decimal. DeleteMatrix removes
// both.

// Magics of the part file versions.
const (
	partMagic1 = "PSFPART1"
	partMagic2 = "PSFPART2"
)

// metaFormat is the format of the meta.json Save writes; readMeta also
// takes 1.
const metaFormat = 2

const partHeaderSize = 8 + 4*8

// metaFile is the JSON in meta.json.
type metaFile struct {
	Format     int            `json:"format"` // 2, or 1 for the first version
	Name       string         `json:"name"`
	Rows       int            `json:"rows"`
	Cols       int64          `json:"cols"`
	RowBlock   int            `json:"rowBlock"`
	ColBlock   int64          `json:"colBlock"`
	NumServers int            `json:"numServers"`
	Partitions []metaFilePart `json:"partitions"`
}

type metaFilePart struct {
	ID       int    `json:"id"`
	File     string `json:"file"`
	RowStart int    `json:"rowStart"`
	RowEnd   int    `json:"rowEnd"`
	ColStart int64  `json:"colStart"`
	ColEnd   int64  `json:"colEnd"`
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func partFileName(id int) string { return fmt.Sprintf("part-%05d.bin", id) }

func checkpointDir(root string, id int64) string {
	return filepath.Join(root, fmt.Sprintf("ckpt-%d", id))
}

// savePartitions is phase one of a save: remove meta.json, write this
// server's part files.
func savePartitions(dir string, m *serverMatrix) error {
	mdir := filepath.Join(dir, m.meta.Name)
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(mdir, "meta.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, id := range sortedKeys(m.parts) {
		if err := writePart(mdir, m.parts[id]); err != nil {
			return fmt.Errorf("psf: saving %s of %q: %w", m.parts[id].meta, m.meta.Name, err)
		}
	}
	return nil
}

// writePart writes a partition's part file, version 2: the rows that are
// not all +0.
func writePart(mdir string, p *partition) error {
	present := make([]byte, (len(p.rows)+7)/8)
	for i, row := range p.rows {
		if row != nil && !allZero(row) {
			present[i/8] |= 1 << (i % 8)
		}
	}
	return writeAtomic(filepath.Join(mdir, partFileName(p.meta.ID)), func(w io.Writer) error {
		h := crc32.New(crcTable)
		bw := bufio.NewWriterSize(io.MultiWriter(w, h), 1<<20)
		hdr := make([]byte, 0, partHeaderSize+len(present))
		hdr = append(hdr, partMagic2...)
		for _, v := range []int64{int64(p.meta.RowStart), int64(p.meta.RowEnd), p.meta.ColStart, p.meta.ColEnd} {
			hdr = binary.LittleEndian.AppendUint64(hdr, uint64(v))
		}
		hdr = append(hdr, present...)
		if _, err := bw.Write(hdr); err != nil {
			return err
		}
		var buf []byte
		for i, row := range p.rows {
			if present[i/8]&(1<<(i%8)) == 0 {
				continue
			}
			if buf == nil {
				buf = make([]byte, 8*p.meta.Width())
			}
			for j, x := range row {
				binary.LittleEndian.PutUint64(buf[8*j:], math.Float64bits(x))
			}
			if _, err := bw.Write(buf); err != nil {
				return err
			}
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		_, err := w.Write(binary.LittleEndian.AppendUint32(nil, h.Sum32()))
		return err
	})
}

// allZero reports whether every value of x is +0 (a -0 must be kept).
func allZero(x []float64) bool {
	for _, v := range x {
		if math.Float64bits(v) != 0 {
			return false
		}
	}
	return true
}

// writeAtomic writes a file through a temporary file in the same directory
// and a rename, so readers see the old file or the complete new one.
func writeAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// commitSave is phase two of a save: write meta.json.
func commitSave(dir string, meta MatrixMeta) error {
	mf := metaFile{Format: metaFormat, Name: meta.Name, Rows: meta.Rows, Cols: meta.Cols,
		RowBlock: meta.RowBlock, ColBlock: meta.ColBlock, NumServers: meta.NumServers}
	for _, p := range meta.Partitions() {
		mf.Partitions = append(mf.Partitions, metaFilePart{ID: p.ID, File: partFileName(p.ID),
			RowStart: p.RowStart, RowEnd: p.RowEnd, ColStart: p.ColStart, ColEnd: p.ColEnd})
	}
	b, err := json.MarshalIndent(mf, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, meta.Name, "meta.json"), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

func writeLatest(root, name string, id int64) error {
	dir := filepath.Join(root, "latest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, name), func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%d\n", id)
		return err
	})
}

// removeCheckpoints removes matrix name's checkpoints from the checkpoint
// directory root: first latest/<name>, so that a server restoring the
// latest checkpoints from then on does not restore it, then every
// ckpt-<id>/<name>. Other matrices' checkpoints, and the ckpt-<id>
// directories, stay. Servers sharing root may do it at the same time.
func removeCheckpoints(root, name string) error {
	var errs []error
	if err := os.Remove(filepath.Join(root, "latest", name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	ents, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range ents {
		id, ok := strings.CutPrefix(e.Name(), "ckpt-")
		if !ok || !e.IsDir() {
			continue
		}
		if n, err := strconv.ParseInt(id, 10, 64); err != nil || n < 0 {
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, e.Name(), name)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// readMeta reads and checks dir/name/meta.json.
func readMeta(dir, name string) (metaFile, error) {
	var mf metaFile
	b, err := os.ReadFile(filepath.Join(dir, name, "meta.json"))
	if err != nil {
		return mf, fmt.Errorf("psf: loading matrix %q: %w (no complete save there?)", name, err)
	}
	if err := json.Unmarshal(b, &mf); err != nil {
		return mf, fmt.Errorf("psf: loading matrix %q: meta.json: %w", name, err)
	}
	if mf.Format != 1 && mf.Format != metaFormat {
		return mf, fmt.Errorf("psf: loading matrix %q: format %d (want 1 or %d)", name, mf.Format, metaFormat)
	}
	if mf.Name != name {
		return mf, fmt.Errorf("psf: loading matrix %q: meta.json is for %q", name, mf.Name)
	}
	saved := MatrixMeta{Name: mf.Name, Rows: mf.Rows, Cols: mf.Cols, RowBlock: mf.RowBlock, ColBlock: mf.ColBlock, NumServers: mf.NumServers}
	if err := saved.validate(); err != nil {
		return mf, fmt.Errorf("psf: loading matrix %q: %w", name, err)
	}
	if len(mf.Partitions) != saved.NumPartitions() {
		return mf, fmt.Errorf("psf: loading matrix %q: meta.json lists %d partitions, the layout has %d", name, len(mf.Partitions), saved.NumPartitions())
	}
	for i, p := range mf.Partitions {
		want := saved.Partition(i)
		if p.ID != i || p.RowStart != want.RowStart || p.RowEnd != want.RowEnd || p.ColStart != want.ColStart || p.ColEnd != want.ColEnd ||
			p.File != filepath.Base(p.File) || strings.HasPrefix(p.File, ".") {
			return mf, fmt.Errorf("psf: loading matrix %q: meta.json partition %d does not match the layout", name, i)
		}
	}
	return mf, nil
}

// readPart reads and checks a part file of either version and returns its
// rows, nil for the rows not stored (all zeros).
func readPart(path string, want metaFilePart) ([][]float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(b) < partHeaderSize+4 {
		return nil, fmt.Errorf("%s: %d bytes, too short for a psf part file", path, len(b))
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, fmt.Errorf("%s: checksum mismatch", path)
	}
	magic := string(b[:8])
	if magic != partMagic1 && magic != partMagic2 {
		return nil, fmt.Errorf("%s: not a psf part file", path)
	}
	var hdr [4]int64
	for i := range hdr {
		hdr[i] = int64(binary.LittleEndian.Uint64(b[8+8*i:]))
	}
	if hdr != [4]int64{int64(want.RowStart), int64(want.RowEnd), want.ColStart, want.ColEnd} {
		return nil, fmt.Errorf("%s: holds rows [%d,%d) cols [%d,%d), meta.json says otherwise", path, hdr[0], hdr[1], hdr[2], hdr[3])
	}
	nrows, width := want.RowEnd-want.RowStart, int(want.ColEnd-want.ColStart)
	data := body[partHeaderSize:]
	present := func(int) bool { return true }
	stored := nrows
	if magic == partMagic2 {
		n := (nrows + 7) / 8
		if len(data) < n {
			return nil, fmt.Errorf("%s: %d bytes, too short for the presence of %d rows", path, len(b), nrows)
		}
		bitmap := data[:n]
		data = data[n:]
		if nrows%8 != 0 && bitmap[n-1]>>(nrows%8) != 0 {
			return nil, fmt.Errorf("%s: presence bits set past the last row", path)
		}
		stored = 0
		for _, x := range bitmap {
			stored += bits.OnesCount8(x)
		}
		present = func(i int) bool { return bitmap[i/8]&(1<<(i%8)) != 0 }
	}
	if int64(len(data)) != int64(stored)*int64(width)*8 {
		return nil, fmt.Errorf("%s: %d bytes of values for %d rows of %d columns, want %d", path, len(data), stored, width, int64(stored)*int64(width)*8)
	}
	rows := make([][]float64, nrows)
	var vals []float64
	if stored > 0 {
		vals = make([]float64, stored*width)
	}
	for i := range vals {
		vals[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
	}
	for i := range rows {
		if present(i) {
			rows[i], vals = vals[:width:width], vals[width:]
		}
	}
	return rows, nil
}

// readSaved reads matrix name from dir/name into a new server matrix
// holding this server's partitions, filled with the values of the
// overlapping saved partitions; s is not changed. The layout is that of the
// matrix the server holds, else want, else the saved one.
func (s *Server) readSaved(dir, name string, want *MatrixMeta) (*serverMatrix, error) {
	mf, err := readMeta(dir, name)
	if err != nil {
		return nil, err
	}
	var meta MatrixMeta
	switch {
	case s.matrices[name] != nil:
		meta = s.matrices[name].meta
	case want != nil:
		meta = *want
	default:
		meta = MatrixMeta{Name: name, Rows: mf.Rows, Cols: mf.Cols, RowBlock: mf.RowBlock, ColBlock: mf.ColBlock, NumServers: s.po.NumServers()}
	}
	if err := meta.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if meta.Name != name || meta.NumServers != s.po.NumServers() {
		return nil, fmt.Errorf("%w: loading %q with the layout of %q for %d servers", ErrBadRequest, name, meta.Name, meta.NumServers)
	}
	if meta.Rows != mf.Rows || meta.Cols != mf.Cols {
		return nil, fmt.Errorf("psf: loading matrix %q: saved %dx%d, the matrix is %dx%d", name, mf.Rows, mf.Cols, meta.Rows, meta.Cols)
	}
	m := newServerMatrix(meta, s.po.MyRank())
	for _, sp := range mf.Partitions {
		var saved [][]float64
		for _, p := range m.parts {
			pm := p.meta
			r0, r1 := max(pm.RowStart, sp.RowStart), min(pm.RowEnd, sp.RowEnd)
			c0, c1 := max(pm.ColStart, sp.ColStart), min(pm.ColEnd, sp.ColEnd)
			if r0 >= r1 || c0 >= c1 {
				continue
			}
			if saved == nil {
				if saved, err = readPart(filepath.Join(dir, name, sp.File), sp); err != nil {
					return nil, fmt.Errorf("psf: loading matrix %q: %w", name, err)
				}
			}
			for r := r0; r < r1; r++ {
				src := saved[r-sp.RowStart]
				if src == nil {
					continue // not stored: zeros
				}
				src = src[c0-sp.ColStart : c1-sp.ColStart]
				if allZero(src) {
					continue // rows of zeros stay unallocated
				}
				copy(p.row(r - pm.RowStart)[c0-pm.ColStart:c1-pm.ColStart], src)
			}
		}
	}
	return m, nil
}

// RestoreLatest loads every matrix that has a checkpoint in the checkpoint
// directory from its latest checkpoint, as a server that replaced a dead
// one does (NewServer calls it then). Values changed after that checkpoint
// are lost.
func (s *Server) RestoreLatest() error {
	if s.opts.ckptDir == "" {
		return errors.New("psf: no checkpoint directory (WithCheckpointDir)")
	}
	ents, err := os.ReadDir(filepath.Join(s.opts.ckptDir, "latest"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if validName("matrix", name) != nil {
			continue // temporary files of writeAtomic, strangers
		}
		b, err := os.ReadFile(filepath.Join(s.opts.ckptDir, "latest", name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		id, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || id < 0 {
			errs = append(errs, fmt.Errorf("psf: checkpoint id of %q: %q", name, b))
			continue
		}
		m, err := s.readSaved(checkpointDir(s.opts.ckptDir, id), name, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.matrices[name] = m
	}
	return errors.Join(errs...)
}
