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
	"sync"
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
// and the rows whose values are all +0, so a matrix of few rows written
// saves small, and Load leaves them unallocated. Version 1, which Load
// still reads, has no presence bytes and every row:
//
//	"PSFPART1", rowStart, rowEnd, colStart, colEnd (as above)
//	values                           (rowEnd-rowStart)*(colEnd-colStart) float64
//	                                 little-endian, row-major
//	crc                              uint32 little-endian, CRC-32C of all the above
//
// Sparse matrices (meta.json "format": 3, "type": "sparse"; the partitions
// have "colBlockIndex" instead of column ranges) have part files of their
// own, holding only the stored entries, sorted by column:
//
//	"PSFSPAR1"                       8 bytes, magic and format version
//	rowStart, rowEnd                 int64 little-endian each
//	colBlock, numColBlocks           int64 little-endian each: the partition
//	                                 holds the columns c whose column block
//	                                 (MatrixMeta.ColBlockOf, a hash) among
//	                                 numColBlocks is colBlock
//	counts                           rowEnd-rowStart uint64 little-endian: the
//	                                 number of entries of each row
//	entries                          for each row with entries, in order: its
//	                                 columns (count int64 little-endian,
//	                                 strictly increasing), then its values
//	                                 (count float64 little-endian, never +0)
//	crc                              uint32 little-endian, CRC-32C of all the above
//
// A part file is about 16 bytes per entry. Loading a sparse save into
// another number of servers reads every part file of the rows a server
// holds and keeps the entries whose column block (by the new number of
// blocks) is the server's; with the same number, only the part files of
// its own column blocks. Dense saves keep "format": 2, so that earlier
// versions read them.
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
	partMagic1      = "PSFPART1"
	partMagic2      = "PSFPART2"
	sparsePartMagic = "PSFSPAR1"
)

// metaFormat is the format of the meta.json Save writes for a dense
// matrix; readMeta also takes 1. sparseMetaFormat is that of a sparse one.
const (
	metaFormat       = 2
	sparseMetaFormat = 3
)

const partHeaderSize = 8 + 4*8

// metaFile is the JSON in meta.json.
type metaFile struct {
	Format     int            `json:"format"` // 2, or 1 for the first version; 3 for a sparse matrix
	Name       string         `json:"name"`
	Type       MatrixType     `json:"type,omitempty"` // "sparse", or "dense" (or absent) for a dense matrix
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
	// ColBlock is a sparse partition's column block (its columns are
	// those with ColBlockOf(c) == ColBlock).
	ColBlock int `json:"colBlockIndex,omitempty"`
}

// crcTable is CRC-32C's table, made when first needed: making it at
// start-up cost every process, snapshots or not, a fraction of a
// millisecond (it matters to jobs of hundreds of processes).
var crcTable = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

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
		write := writePart
		if m.meta.Type == Sparse {
			write = writeSparsePart
		}
		if err := write(mdir, m.parts[id]); err != nil {
			return fmt.Errorf("psf: saving %s of %q: %w", m.parts[id].meta, m.meta.Name, err)
		}
	}
	return nil
}

// writePart writes a partition's part file, version 2: the rows that are
// not all +0.
func writePart(mdir string, p *partition) error {
	return writeChecked(filepath.Join(mdir, partFileName(p.meta.ID)), func(bw *bufio.Writer) error {
		return encodeDensePart(bw, p, false)
	})
}

// densePresent returns the presence bits of a dense partition's rows (see
// the version 2 part file): the rows allocated, with allocated, else the
// rows that are not all +0.
func densePresent(p *partition, allocated bool) (present []byte, n int) {
	present = make([]byte, (len(p.rows)+7)/8)
	for i, row := range p.rows {
		if row != nil && (allocated || !allZero(row)) {
			present[i/8] |= 1 << (i % 8)
			n++
		}
	}
	return present, n
}

// encodeDensePart writes the body of a version 2 part file of p (all but
// the checksum) to w: the rows allocated if allocated, else those that are
// not all +0.
func encodeDensePart(w io.Writer, p *partition, allocated bool) error {
	present, _ := densePresent(p, allocated)
	hdr := make([]byte, 0, partHeaderSize+len(present))
	hdr = append(hdr, partMagic2...)
	for _, v := range []int64{int64(p.meta.RowStart), int64(p.meta.RowEnd), p.meta.ColStart, p.meta.ColEnd} {
		hdr = binary.LittleEndian.AppendUint64(hdr, uint64(v))
	}
	hdr = append(hdr, present...)
	if _, err := w.Write(hdr); err != nil {
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
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// densePartSize returns the bytes encodeDensePart writes.
func densePartSize(p *partition, allocated bool) int64 {
	present, n := densePresent(p, allocated)
	return int64(partHeaderSize+len(present)) + int64(n)*int64(p.meta.Width())*8
}

// writeChecked writes a part file at path atomically: what body writes to
// bw, then the CRC-32 of it.
func writeChecked(path string, body func(bw *bufio.Writer) error) error {
	return writeAtomic(path, func(w io.Writer) error {
		h := crc32.New(crcTable())
		bw := bufio.NewWriterSize(io.MultiWriter(w, h), 1<<20)
		if err := body(bw); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		_, err := w.Write(binary.LittleEndian.AppendUint32(nil, h.Sum32()))
		return err
	})
}

// writeSparsePart writes a sparse partition's part file: its entries,
// sorted by column.
func writeSparsePart(mdir string, p *partition) error {
	return writeChecked(filepath.Join(mdir, partFileName(p.meta.ID)), func(bw *bufio.Writer) error {
		b := make([]byte, 0, partHeaderSize+8*len(p.srows))
		b = append(b, sparsePartMagic...)
		for _, v := range []int64{int64(p.meta.RowStart), int64(p.meta.RowEnd), int64(p.meta.ColBlock), int64(p.meta.NumColBlocks)} {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		for _, t := range p.srows {
			b = binary.LittleEndian.AppendUint64(b, uint64(t.Len()))
		}
		if _, err := bw.Write(b); err != nil {
			return err
		}
		for _, t := range p.srows {
			if t.Len() == 0 {
				continue
			}
			v := sortedEntries(t)
			b = b[:0]
			for _, k := range v.Indices {
				b = binary.LittleEndian.AppendUint64(b, uint64(k))
			}
			for _, x := range v.Values {
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
			}
			if _, err := bw.Write(b); err != nil {
				return err
			}
		}
		return nil
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
	if meta.Type == Sparse {
		mf.Format, mf.Type = sparseMetaFormat, Sparse
	}
	for _, p := range meta.Partitions() {
		fp := metaFilePart{ID: p.ID, File: partFileName(p.ID),
			RowStart: p.RowStart, RowEnd: p.RowEnd, ColStart: p.ColStart, ColEnd: p.ColEnd}
		if p.Sparse {
			fp.ColBlock = p.ColBlock
		}
		mf.Partitions = append(mf.Partitions, fp)
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
	switch {
	case (mf.Format == 1 || mf.Format == metaFormat) && (mf.Type == "" || mf.Type == Dense):
		mf.Type = Dense
	case mf.Format == sparseMetaFormat && mf.Type == Sparse:
	default:
		return mf, fmt.Errorf("psf: loading matrix %q: format %d, type %q (want format 1 or %d for a dense matrix, %d for a sparse one)",
			name, mf.Format, mf.Type, metaFormat, sparseMetaFormat)
	}
	if mf.Name != name {
		return mf, fmt.Errorf("psf: loading matrix %q: meta.json is for %q", name, mf.Name)
	}
	saved := mf.meta()
	if err := saved.validate(); err != nil {
		return mf, fmt.Errorf("psf: loading matrix %q: %w", name, err)
	}
	if len(mf.Partitions) != saved.NumPartitions() {
		return mf, fmt.Errorf("psf: loading matrix %q: meta.json lists %d partitions, the layout has %d", name, len(mf.Partitions), saved.NumPartitions())
	}
	for i, p := range mf.Partitions {
		want := saved.Partition(i)
		if p.ID != i || p.RowStart != want.RowStart || p.RowEnd != want.RowEnd || p.ColStart != want.ColStart || p.ColEnd != want.ColEnd ||
			want.Sparse && p.ColBlock != want.ColBlock || p.File != filepath.Base(p.File) || strings.HasPrefix(p.File, ".") {
			return mf, fmt.Errorf("psf: loading matrix %q: meta.json partition %d does not match the layout", name, i)
		}
	}
	return mf, nil
}

// meta returns the saved matrix's meta.
func (mf *metaFile) meta() MatrixMeta {
	return MatrixMeta{Name: mf.Name, Type: mf.Type, Rows: mf.Rows, Cols: mf.Cols, RowBlock: mf.RowBlock, ColBlock: mf.ColBlock, NumServers: mf.NumServers}
}

// readSparsePart reads and checks a sparse part file and returns its rows'
// entries, sorted by column (empty vectors for rows without entries).
func readSparsePart(path string, want metaFilePart, numColBlocks int) ([]SparseVector, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	nrows := want.RowEnd - want.RowStart
	if len(b) < partHeaderSize+4 {
		return nil, fmt.Errorf("%s: %d bytes, too short for a psf part file", path, len(b))
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable()) != sum {
		return nil, fmt.Errorf("%s: checksum mismatch", path)
	}
	if string(b[:8]) != sparsePartMagic {
		return nil, fmt.Errorf("%s: not a psf sparse part file", path)
	}
	var hdr [4]int64
	for i := range hdr {
		hdr[i] = int64(binary.LittleEndian.Uint64(b[8+8*i:]))
	}
	if hdr != [4]int64{int64(want.RowStart), int64(want.RowEnd), int64(want.ColBlock), int64(numColBlocks)} {
		return nil, fmt.Errorf("%s: holds rows [%d,%d) column block %d of %d, meta.json says otherwise", path, hdr[0], hdr[1], hdr[2], hdr[3])
	}
	data := body[partHeaderSize:]
	if int64(len(data)) < 8*int64(nrows) {
		return nil, fmt.Errorf("%s: %d bytes, too short for the counts of %d rows", path, len(b), nrows)
	}
	counts, data := data[:8*nrows], data[8*nrows:]
	var total uint64
	for i := range nrows {
		c := binary.LittleEndian.Uint64(counts[8*i:])
		if total += c; c > uint64(len(data))/16 || total > uint64(len(data))/16 {
			return nil, fmt.Errorf("%s: the counts exceed the %d bytes of entries", path, len(data))
		}
	}
	if total*16 != uint64(len(data)) {
		return nil, fmt.Errorf("%s: %d bytes of entries for %d entries", path, len(data), total)
	}
	rows := make([]SparseVector, nrows)
	for i := range rows {
		n := int(binary.LittleEndian.Uint64(counts[8*i:]))
		v := SparseVector{Indices: make([]int64, n), Values: make([]float64, n)}
		for j := range n {
			v.Indices[j] = int64(binary.LittleEndian.Uint64(data[8*j:]))
			v.Values[j] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*(n+j):]))
			if j > 0 && v.Indices[j] <= v.Indices[j-1] {
				return nil, fmt.Errorf("%s: row %d: columns not increasing", path, want.RowStart+i)
			}
			if sparseColBlock(v.Indices[j], numColBlocks) != want.ColBlock {
				return nil, fmt.Errorf("%s: row %d: column %d is not in column block %d", path, want.RowStart+i, v.Indices[j], want.ColBlock)
			}
		}
		data = data[16*n:]
		rows[i] = v
	}
	return rows, nil
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
	if crc32.Checksum(body, crcTable()) != sum {
		return nil, fmt.Errorf("%s: checksum mismatch", path)
	}
	return parseDensePart(path, body, want)
}

// parseDensePart reads and checks the body of a part file of either
// version (all but the checksum), named path in errors, and returns its
// rows, nil for the rows not stored (all zeros).
func parseDensePart(path string, body []byte, want metaFilePart) ([][]float64, error) {
	if len(body) < partHeaderSize {
		return nil, fmt.Errorf("%s: %d bytes, too short for a psf part", path, len(body))
	}
	b := body
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
			return nil, fmt.Errorf("%s: %d bytes, too short for the presence of %d rows", path, len(body), nrows)
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
// holding rank's partitions, filled with the values of the overlapping
// saved partitions; s is not changed. The layout is that of the matrix
// range rank holds, else want, else the saved one. s.mu is held.
func (s *Server) readSaved(dir, name string, want *MatrixMeta, rank int) (*serverMatrix, error) {
	mf, err := readMeta(dir, name)
	if err != nil {
		return nil, err
	}
	var meta MatrixMeta
	switch {
	case s.matrixLocked(rank, name) != nil:
		meta = s.matrixLocked(rank, name).meta
	case want != nil:
		meta = *want
	default:
		meta = mf.meta()
		meta.NumServers = s.po.NumServers()
	}
	if err := meta.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if meta.Name != name || meta.NumServers != s.po.NumServers() {
		return nil, fmt.Errorf("%w: loading %q with the layout of %q for %d servers", ErrBadRequest, name, meta.Name, meta.NumServers)
	}
	if meta.Type != mf.Type {
		return nil, fmt.Errorf("psf: loading matrix %q: saved a %s matrix, the matrix is %s", name, mf.Type, meta.Type)
	}
	if meta.Rows != mf.Rows || meta.Cols != mf.Cols {
		return nil, fmt.Errorf("psf: loading matrix %q: saved %dx%d, the matrix is %dx%d", name, mf.Rows, mf.Cols, meta.Rows, meta.Cols)
	}
	m := newServerMatrix(meta, rank)
	if meta.Type == Sparse {
		if err := readSparseSaved(dir, mf, m); err != nil {
			return nil, err
		}
		return m, nil
	}
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

// readSparseSaved fills the partitions of m, a sparse matrix, with the
// entries of the save described by mf whose rows and columns they hold.
func readSparseSaved(dir string, mf metaFile, m *serverMatrix) error {
	saved := mf.meta()
	sameBlocks := saved.NumColBlocks() == m.meta.NumColBlocks()
	ncb := int(m.meta.NumColBlocks())
	for _, sp := range mf.Partitions {
		needed := false
		for _, p := range m.parts {
			pm := p.meta
			if max(pm.RowStart, sp.RowStart) < min(pm.RowEnd, sp.RowEnd) && (!sameBlocks || pm.ColBlock == sp.ColBlock) {
				needed = true
				break
			}
		}
		if !needed {
			continue
		}
		rows, err := readSparsePart(filepath.Join(dir, mf.Name, sp.File), sp, int(saved.NumColBlocks()))
		if err != nil {
			return fmt.Errorf("psf: loading matrix %q: %w", mf.Name, err)
		}
		for i, v := range rows {
			r := sp.RowStart + i
			base := r / m.meta.RowBlock * ncb
			if sameBlocks { // every entry goes to one partition
				if p := m.parts[base+sp.ColBlock]; p != nil && v.Len() > 0 {
					t := newLongTable[float64](v.Len())
					for j, k := range v.Indices {
						if !isPosZero(v.Values[j]) {
							t.Set(k, v.Values[j])
						}
					}
					p.setTable(r-p.meta.RowStart, t)
				}
				continue
			}
			for j, k := range v.Indices {
				if p := m.parts[base+sparseColBlock(k, ncb)]; p != nil && !isPosZero(v.Values[j]) {
					p.table(r-p.meta.RowStart).Set(k, v.Values[j])
				}
			}
		}
	}
	return nil
}

// RestoreLatest loads every matrix that has a checkpoint in the checkpoint
// directory from its latest checkpoint, as a server that replaced a dead
// one does (NewServer calls it then): the partitions of the server's own
// rank. Values changed after that checkpoint are lost. A server NewServer
// made the store of a managed job refuses: the framework restores its
// ranges there, and a change outside its requests would set the server
// apart from the others holding them (use Matrix.Recover).
func (s *Server) RestoreLatest() error {
	if s.opts.ckptDir == "" {
		return errors.New("psf: no checkpoint directory (WithCheckpointDir)")
	}
	if s.managed {
		return errors.New("psf: RestoreLatest in a managed job: the framework restores the servers' ranges; use Matrix.Recover to go back to a checkpoint")
	}
	rank := s.po.MyRank()
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
		m, err := s.readSaved(checkpointDir(s.opts.ckptDir, id), name, nil, rank)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.state(rank).matrices[name] = m
	}
	return errors.Join(errs...)
}
