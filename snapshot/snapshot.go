// Package snapshot is the on-disk form of a managed job's snapshots
// (PS_CHECKPOINT_DIR): one directory per snapshot, with a file per store
// and key range written by every server that holds the range, a
// description, and a mark written once every range of the snapshot is on
// disk. Files are written crash-safely (to a temporary name, synced,
// renamed, the directory synced) and checked on reading (a CRC-32C), so a
// job killed at any moment leaves either a complete file or none.
//
// Layout:
//
//	<dir>/snap-<gen>/meta.json                          Meta: the job's shape, the program's meta
//	<dir>/snap-<gen>/app-<app>/range-<r>-of-<n>.s<w>.snap   range r of n servers of store app, written by server w
//	<dir>/snap-<gen>/COMMITTED                          every range of every store is written
//
// A range file is a header (the magic "PSLSNAP1", then app, range, number
// of ranges, writer, LSN and gen as uint64 little-endian), the store's
// bytes, and the CRC-32C (uint32 little-endian) of everything before it.
package snapshot

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	magic      = "PSLSNAP1"
	headerSize = 8 + 6*8
	committed  = "COMMITTED"
	metaFile   = "meta.json"
)

// crcTable is CRC-32C's table, made when first needed: making it at
// start-up cost every process, snapshots or not, a fraction of a
// millisecond (it matters to jobs of hundreds of processes).
var crcTable = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// ErrCorrupt is wrapped by the errors of a range file that is not whole.
var ErrCorrupt = errors.New("snapshot: corrupt file")

// Meta describes a snapshot.
type Meta struct {
	Gen      uint64    `json:"gen"`
	Servers  int       `json:"servers"`
	Replicas int       `json:"replicas"`
	Meta     string    `json:"meta"` // what the program stored with it
	Time     time.Time `json:"time"`
}

// Header is what a range file says of itself.
type Header struct {
	App, Range, Ranges, Writer int
	LSN, Gen                   uint64
}

// GenDir returns the directory of snapshot gen.
func GenDir(root string, gen uint64) string {
	return filepath.Join(root, fmt.Sprintf("snap-%012d", gen))
}

// RangePath returns the file server writer writes range r of n of store
// app to.
func RangePath(root string, gen uint64, app, r, n, writer int) string {
	return filepath.Join(GenDir(root, gen), fmt.Sprintf("app-%d", app), fmt.Sprintf("range-%d-of-%d.s%d.snap", r, n, writer))
}

// WriteRange writes a range file crash-safely; body writes the store's
// bytes.
func WriteRange(root string, h Header, body func(io.Writer) error) error {
	path := RangePath(root, h.Gen, h.App, h.Range, h.Ranges, h.Writer)
	return writeFile(path, func(w io.Writer) error {
		crc := crc32.New(crcTable())
		mw := io.MultiWriter(w, crc)
		hdr := make([]byte, 0, headerSize)
		hdr = append(hdr, magic...)
		for _, x := range []uint64{uint64(h.App), uint64(h.Range), uint64(h.Ranges), uint64(h.Writer), h.LSN, h.Gen} {
			hdr = binary.LittleEndian.AppendUint64(hdr, x)
		}
		if _, err := mw.Write(hdr); err != nil {
			return err
		}
		if err := body(mw); err != nil {
			return err
		}
		_, err := w.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32()))
		return err
	})
}

// ReadRange reads and checks a range file; body is the store's bytes.
func ReadRange(path string) (Header, []byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Header{}, nil, err
	}
	if len(b) < headerSize+4 || string(b[:8]) != magic {
		return Header{}, nil, fmt.Errorf("%w: %s: no snapshot header", ErrCorrupt, path)
	}
	n := len(b) - 4
	if crc32.Checksum(b[:n], crcTable()) != binary.LittleEndian.Uint32(b[n:]) {
		return Header{}, nil, fmt.Errorf("%w: %s: checksum mismatch", ErrCorrupt, path)
	}
	f := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8+8*i:]) }
	h := Header{App: int(f(0)), Range: int(f(1)), Ranges: int(f(2)), Writer: int(f(3)), LSN: f(4), Gen: f(5)}
	return h, b[headerSize:n], nil
}

// WriteMeta writes a snapshot's meta.json (each server writes the same).
func WriteMeta(root string, m Meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(GenDir(root, m.Gen), metaFile), func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// ReadMeta reads a snapshot's meta.json.
func ReadMeta(root string, gen uint64) (Meta, error) {
	var m Meta
	b, err := os.ReadFile(filepath.Join(GenDir(root, gen), metaFile))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: %s: %v", ErrCorrupt, metaFile, err)
	}
	return m, nil
}

// Commit marks snapshot gen complete: every range of every store is
// written.
func Commit(root string, gen uint64) error {
	return writeFile(filepath.Join(GenDir(root, gen), committed), func(w io.Writer) error {
		_, err := io.WriteString(w, strconv.FormatUint(gen, 10)+"\n")
		return err
	})
}

// Committed lists the complete snapshots in root, oldest first.
func Committed(root string) ([]uint64, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var gens []uint64
	for _, e := range ents {
		g, ok := parseGenDir(e.Name())
		if !ok {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, e.Name(), committed)); err == nil {
			gens = append(gens, g)
		}
	}
	slices.Sort(gens)
	return gens, nil
}

func parseGenDir(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, "snap-")
	if !ok {
		return 0, false
	}
	g, err := strconv.ParseUint(s, 10, 64)
	return g, err == nil && g > 0
}

// Apps lists the stores (app ids) snapshot gen holds.
func Apps(root string, gen uint64) ([]int, error) {
	ents, err := os.ReadDir(GenDir(root, gen))
	if err != nil {
		return nil, err
	}
	var apps []int
	for _, e := range ents {
		if s, ok := strings.CutPrefix(e.Name(), "app-"); ok && e.IsDir() {
			if a, err := strconv.Atoi(s); err == nil {
				apps = append(apps, a)
			}
		}
	}
	slices.Sort(apps)
	return apps, nil
}

// rangeFile is a range file's place in a snapshot.
type rangeFile struct {
	path      string
	r, n, who int
}

func listRanges(root string, gen uint64, app int) ([]rangeFile, error) {
	dir := filepath.Join(GenDir(root, gen), fmt.Sprintf("app-%d", app))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []rangeFile
	for _, e := range ents {
		var f rangeFile
		if _, err := fmt.Sscanf(e.Name(), "range-%d-of-%d.s%d.snap", &f.r, &f.n, &f.who); err != nil || !strings.HasSuffix(e.Name(), ".snap") {
			continue
		}
		f.path = filepath.Join(dir, e.Name())
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b rangeFile) int { return a.r - b.r })
	return out, nil
}

// Files returns the files to read to restore range r of a job of n
// servers for store app from snapshot gen: the range's own file (any
// server's copy) when the snapshot was taken with n servers too, else one
// copy of every range of the snapshot's layout (a store whose workers
// route keys with a slicer of their own decides which of their entries
// are range r's; kv.Store.Restore). It fails, naming what is missing, when
// they are not all there (with several hosts, PS_CHECKPOINT_DIR must be
// shared or copied to each).
func Files(root string, gen uint64, app, r, n int) ([]string, error) {
	files, err := listRanges(root, gen, app)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("snapshot %d holds no range of store %d", gen, app)
	}
	old := files[0].n
	for _, f := range files {
		if f.n != old {
			return nil, fmt.Errorf("snapshot %d of store %d mixes layouts of %d and %d servers", gen, app, old, f.n)
		}
	}
	var out []string
	var missing []int
	for or := 0; or < old; or++ {
		if old == n && or != r {
			continue
		}
		i := slices.IndexFunc(files, func(f rangeFile) bool { return f.r == or })
		if i < 0 {
			missing = append(missing, or)
			continue
		}
		out = append(out, files[i].path)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("snapshot %d of store %d (%d servers) lacks ranges %v in %s", gen, app, old, missing, root)
	}
	return out, nil
}

// Restorable lists the complete snapshots in root from which a server of
// a job of n servers can restore ranges (of every store they hold), with
// the meta stored with each, and why it cannot restore the others.
func Restorable(root string, n int, ranges []int) (map[uint64]string, []string) {
	out := map[uint64]string{}
	gens, err := Committed(root)
	if err != nil {
		return out, []string{err.Error()}
	}
	var problems []string
	for _, g := range gens {
		m, err := ReadMeta(root, g)
		if err != nil {
			problems = append(problems, fmt.Sprintf("snapshot %d: %v", g, err))
			continue
		}
		apps, err := Apps(root, g)
		if err != nil {
			problems = append(problems, fmt.Sprintf("snapshot %d: %v", g, err))
			continue
		}
		ok := true
		for _, app := range apps {
			for _, r := range ranges {
				if _, err := Files(root, g, app, r, n); err != nil {
					ok = false
					if g == gens[len(gens)-1] {
						problems = append(problems, err.Error())
					}
				}
			}
		}
		if ok {
			out[g] = m.Meta
		}
	}
	if len(out) > 0 {
		problems = nil // an older snapshot restores: that one is used
	}
	return out, problems
}

// Prune removes the snapshots of root before the keep latest complete
// ones (and incomplete ones older than those).
func Prune(root string, keep int) error {
	gens, err := Committed(root)
	if err != nil || len(gens) <= keep {
		return err
	}
	oldest := gens[len(gens)-keep]
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if g, ok := parseGenDir(e.Name()); ok && g < oldest {
			if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// writeFile writes path crash-safely: a temporary file, synced, renamed,
// and the directory synced.
func writeFile(path string, fill func(io.Writer) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	bw := &bufWriter{f: tmp}
	if err := fill(bw); err != nil {
		tmp.Close()
		return err
	}
	if err := bw.flush(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// bufWriter buffers writes to a file in 1 MiB blocks.
type bufWriter struct {
	f   *os.File
	buf bytes.Buffer
}

func (w *bufWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if w.buf.Len() >= 1<<20 {
		if err := w.flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (w *bufWriter) flush() error {
	_, err := w.f.Write(w.buf.Bytes())
	w.buf.Reset()
	return err
}
