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
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// On-disk format (version 1). A saved matrix is a directory named after the
// matrix, inside the directory given to Save:
//
//	<dir>/<matrix>/meta.json         the matrix and its layout (metaFile)
//	<dir>/<matrix>/part-<id>.bin     one file per partition, written by its server
//
// A part file is a 40-byte header, the values, and a checksum:
//
//	"PSFPART1"                       8 bytes, magic and format version
//	rowStart, rowEnd                 int64 little-endian each
//	colStart, colEnd                 int64 little-endian each
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
// id of m's last complete checkpoint, in decimal.

const partMagic = "PSFPART1"

const partHeaderSize = 8 + 4*8

// metaFile is the JSON in meta.json.
type metaFile struct {
	Format     int            `json:"format"` // 1
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

func writePart(mdir string, p *partition) error {
	return writeAtomic(filepath.Join(mdir, partFileName(p.meta.ID)), func(w io.Writer) error {
		h := crc32.New(crcTable)
		bw := bufio.NewWriterSize(io.MultiWriter(w, h), 1<<20)
		hdr := make([]byte, 0, partHeaderSize)
		hdr = append(hdr, partMagic...)
		for _, v := range []int64{int64(p.meta.RowStart), int64(p.meta.RowEnd), p.meta.ColStart, p.meta.ColEnd} {
			hdr = binary.LittleEndian.AppendUint64(hdr, uint64(v))
		}
		if _, err := bw.Write(hdr); err != nil {
			return err
		}
		buf := make([]byte, 8*p.meta.Width())
		for _, row := range p.rows {
			clear(buf)
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
	mf := metaFile{Format: 1, Name: meta.Name, Rows: meta.Rows, Cols: meta.Cols,
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
	if mf.Format != 1 {
		return mf, fmt.Errorf("psf: loading matrix %q: format %d (want 1)", name, mf.Format)
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

// readPart reads and checks a part file.
func readPart(path string, want metaFilePart) ([]float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	rows, width := int64(want.RowEnd-want.RowStart), want.ColEnd-want.ColStart
	if int64(len(b)) != partHeaderSize+rows*width*8+4 {
		return nil, fmt.Errorf("%s: %d bytes, want %d", path, len(b), partHeaderSize+rows*width*8+4)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, fmt.Errorf("%s: checksum mismatch", path)
	}
	if string(b[:8]) != partMagic {
		return nil, fmt.Errorf("%s: not a psf part file", path)
	}
	var hdr [4]int64
	for i := range hdr {
		hdr[i] = int64(binary.LittleEndian.Uint64(b[8+8*i:]))
	}
	if hdr != [4]int64{int64(want.RowStart), int64(want.RowEnd), want.ColStart, want.ColEnd} {
		return nil, fmt.Errorf("%s: holds rows [%d,%d) cols [%d,%d), meta.json says otherwise", path, hdr[0], hdr[1], hdr[2], hdr[3])
	}
	vals := make([]float64, rows*width)
	for i := range vals {
		vals[i] = math.Float64frombits(binary.LittleEndian.Uint64(body[partHeaderSize+8*i:]))
	}
	return vals, nil
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
		var vals []float64
		for _, p := range m.parts {
			pm := p.meta
			r0, r1 := max(pm.RowStart, sp.RowStart), min(pm.RowEnd, sp.RowEnd)
			c0, c1 := max(pm.ColStart, sp.ColStart), min(pm.ColEnd, sp.ColEnd)
			if r0 >= r1 || c0 >= c1 {
				continue
			}
			if vals == nil {
				if vals, err = readPart(filepath.Join(dir, name, sp.File), sp); err != nil {
					return nil, fmt.Errorf("psf: loading matrix %q: %w", name, err)
				}
			}
			sw := sp.ColEnd - sp.ColStart
			for r := r0; r < r1; r++ {
				row := p.row(r)
				src := int64(r-sp.RowStart)*sw + (c0 - sp.ColStart)
				copy(row[c0-pm.ColStart:c1-pm.ColStart], vals[src:src+(c1-c0)])
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
