package psf

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
)

// Block is what a kernel runs on: one partition of a matrix, on the server
// that holds it. Its rows are read and written through Row (dense
// matrices) or SparseRow (sparse matrices).
type Block struct {
	m     *serverMatrix
	part  *partition
	write bool      // an update kernel's block: Row allocates rows never written
	undo  *undoLog  // non-nil: rows are saved before the kernel may change them
	zeros []float64 // what a get kernel reads for rows never written
}

// Matrix returns the meta of the block's matrix.
func (b *Block) Matrix() MatrixMeta { return b.m.meta }

// Partition returns the block's partition.
func (b *Block) Partition() PartitionMeta { return b.part.meta }

// Row returns row r's values in the block's columns (Partition().ColStart
// to ColEnd): element i is column ColStart+i. The slice is the server's
// storage: an update kernel writes its results into it; a get kernel must
// not change it. Row r need not be in the block's rows: any row whose
// partition for the same columns is on this server can be reached, which is
// how functions over several rows work; other rows give ErrNotColocated.
//
// A row never written holds zeros and takes no memory: Row allocates it in
// an update kernel, and in a get kernel returns zeros that are not stored
// (the same slice for every such row of the call).
//
// Row fails with ErrSparse on a sparse matrix: use SparseRow.
func (b *Block) Row(r int) ([]float64, error) {
	if b.part.sparse() {
		return nil, fmt.Errorf("%w: Block.Row on matrix %q, which is sparse (use Block.SparseRow)", ErrSparse, b.m.meta.Name)
	}
	p, i, err := b.locate(r)
	if err != nil {
		return nil, err
	}
	if !b.write {
		if x := p.rows[i]; x != nil {
			return x, nil
		}
		return b.zeroRow(), nil
	}
	if b.undo != nil && b.undo.auto {
		b.undo.save(p, i)
	}
	return p.row(i), nil
}

// Rows returns the values of several rows, as Row does for each. It checks
// every row before it returns (or allocates) any.
func (b *Block) Rows(rows ...int) ([][]float64, error) {
	for _, r := range rows {
		if _, _, err := b.locate(r); err != nil {
			return nil, err
		}
	}
	out := make([][]float64, len(rows))
	for i, r := range rows {
		v, err := b.Row(r)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// locate returns the partition on this server holding row r in the
// block's columns, and r's index in it.
func (b *Block) locate(r int) (*partition, int, error) {
	if b.part.meta.HasRow(r) {
		return b.part, r - b.part.meta.RowStart, nil
	}
	meta := &b.m.meta
	if err := meta.CheckRows(r); err != nil {
		return nil, 0, err
	}
	ncb := int(meta.NumColBlocks())
	id := r/meta.RowBlock*ncb + b.part.meta.ID%ncb
	p := b.m.parts[id]
	if p == nil {
		return nil, 0, fmt.Errorf("%w: matrix %q row %d, columns [%d,%d) are on server %d, not with %s",
			ErrNotColocated, meta.Name, r, b.part.meta.ColStart, b.part.meta.ColEnd, id%meta.NumServers, b.part.meta)
	}
	return p, r - p.meta.RowStart, nil
}

// peek returns row r's storage without allocating it: nil for a row never
// written (all zeros). For the library's kernels, which must not change
// what it returns.
func (b *Block) peek(r int) ([]float64, error) {
	p, i, err := b.locate(r)
	if err != nil {
		return nil, err
	}
	if p.sparse() {
		return nil, fmt.Errorf("%w: matrix %q is sparse", ErrSparse, b.m.meta.Name)
	}
	return p.rows[i], nil
}

// input returns row r's values for reading: its storage, or zeros that are
// not stored for a row never written.
func (b *Block) input(r int) ([]float64, error) {
	x, err := b.peek(r)
	if x == nil && err == nil {
		x = b.zeroRow()
	}
	return x, err
}

// protect saves row r, if the block keeps an undo log, before a kernel
// that saves rows itself (guardOutput) changes it.
func (b *Block) protect(r int) error {
	p, i, err := b.locate(r)
	if err == nil && b.undo != nil {
		b.undo.save(p, i)
	}
	return err
}

// clearRow sets row r to zeros by freeing its storage.
func (b *Block) clearRow(r int) error {
	p, i, err := b.locate(r)
	if err != nil {
		return err
	}
	if b.undo != nil {
		b.undo.save(p, i)
	}
	if p.sparse() {
		p.srows[i] = nil
	} else {
		p.rows[i] = nil
	}
	return nil
}

// SparseRow returns access to row r of a sparse matrix in the block's
// columns: the row's entries whose columns are in the partition (see
// PartitionMeta.HasCol). As with Row, r may be any row whose partition for
// the same columns is on this server (with one column block per server,
// every row of a sparse matrix is), else the error is ErrNotColocated. In
// an update kernel the row can be changed (SparseRow.Set); the server
// first saves it, so that it can put it back if the kernel fails. On a
// dense matrix SparseRow fails: use Row.
func (b *Block) SparseRow(r int) (SparseRow, error) {
	if !b.part.sparse() {
		return SparseRow{}, fmt.Errorf("psf: Block.SparseRow on matrix %q, which is dense (use Block.Row)", b.m.meta.Name)
	}
	p, i, err := b.locate(r)
	if err != nil {
		return SparseRow{}, err
	}
	if b.write && b.undo != nil && b.undo.auto {
		b.undo.save(p, i)
	}
	return SparseRow{p: p, i: i, write: b.write}, nil
}

// sparse reports whether the block is a sparse matrix's.
func (b *Block) sparse() bool { return b.part.sparse() }

// table returns row r's table in a sparse block, nil for a row holding
// nothing. For the library's kernels, which must not change it.
func (b *Block) table(r int) (*longTable[float64], error) {
	p, i, err := b.locate(r)
	if err != nil {
		return nil, err
	}
	return p.srows[i], nil
}

// tables returns the tables of rows, as table does for each.
func (b *Block) tables(rows []int) ([]*longTable[float64], error) {
	out := make([]*longTable[float64], len(rows))
	for j, r := range rows {
		t, err := b.table(r)
		if err != nil {
			return nil, err
		}
		out[j] = t
	}
	return out, nil
}

// setTable replaces row r of a sparse block by t (saving the old one when
// the block keeps an undo log).
func (b *Block) setTable(r int, t *longTable[float64]) error {
	p, i, err := b.locate(r)
	if err != nil {
		return err
	}
	if b.undo != nil {
		b.undo.save(p, i)
	}
	p.setTable(i, t)
	return nil
}

// SparseRow is a kernel's access to a row of a sparse matrix in its block's
// columns, from Block.SparseRow: the entries of the row that are not +0
// and whose columns are in the partition. Columns not stored hold 0.
type SparseRow struct {
	p     *partition
	i     int
	write bool
}

// Len returns the number of entries stored.
func (r SparseRow) Len() int { return r.p.srows[r.i].Len() }

// Get returns the value at column col (0 when it is not stored).
func (r SparseRow) Get(col int64) float64 {
	v, _ := r.p.srows[r.i].Get(col)
	return v
}

// All yields the stored entries, column and value, in no particular
// order. The row must not change during the iteration.
func (r SparseRow) All() iter.Seq2[int64, float64] { return r.p.srows[r.i].All }

// Set stores v at column col, which must be in the partition's columns
// (PartitionMeta.HasCol); storing +0 removes the entry. It fails in a get
// kernel.
func (r SparseRow) Set(col int64, v float64) error {
	if err := r.writable(col); err != nil {
		return err
	}
	r.store(col, v)
	return nil
}

// Add adds v to the value at column col, as Set does.
func (r SparseRow) Add(col int64, v float64) error {
	if err := r.writable(col); err != nil {
		return err
	}
	old, _ := r.p.srows[r.i].Get(col)
	r.store(col, old+v)
	return nil
}

func (r SparseRow) writable(col int64) error {
	if !r.write {
		return errors.New("psf: a get kernel changed a sparse row")
	}
	if !r.p.meta.HasCol(col) {
		return fmt.Errorf("%w: column %d is not in %s", ErrBadRequest, col, r.p.meta)
	}
	return nil
}

// store sets col to v, removing the entry for +0.
func (r SparseRow) store(col int64, v float64) {
	if isPosZero(v) {
		if t := r.p.srows[r.i]; t != nil {
			t.Delete(col)
			r.p.setTable(r.i, t)
		}
		return
	}
	r.p.table(r.i).Set(col, v)
}

// zeroRow returns a slice of zeros as wide as the block (every row a
// kernel reaches is), made once per call.
func (b *Block) zeroRow() []float64 {
	if b.zeros == nil {
		b.zeros = make([]float64, b.part.meta.Width())
	}
	return b.zeros
}

// guardMode says how a server keeps a partition unchanged when an update
// kernel fails (returns an error or panics) half-way.
type guardMode uint8

const (
	// guardAll saves every row Row returns before the kernel sees it: for
	// kernels that may fail after changing something (user kernels).
	guardAll guardMode = iota
	// guardOutput saves the rows the kernel announces with protect (the
	// element-wise kernels, which write one row).
	guardOutput
	// guardNone saves nothing: the kernel checks everything that can fail
	// before it changes anything (the library's kernels).
	guardNone
)

// undoLog holds the values rows had before an update kernel could change
// them, so that a kernel that fails leaves its partition as it was.
type undoLog struct {
	auto    bool // Row saves the rows it returns (guardAll)
	entries []undoEntry
	seen    map[undoKey]bool
	buf     []float64 // saved values, back to back
}

type undoKey struct {
	p *partition
	i int
}

type undoEntry struct {
	undoKey
	off int                 // of the values in buf; -1 for a row never written
	sp  *longTable[float64] // a sparse row's copy (nil: it held nothing)
}

// maxKeptUndo is the largest undo buffer (in values) a server keeps for
// the next call; larger ones are left to the garbage collector.
const maxKeptUndo = 1 << 20

// reset empties the log for a new call.
func (u *undoLog) reset(auto bool) {
	u.auto = auto
	clear(u.entries) // drop the partitions they point to
	u.entries = u.entries[:0]
	clear(u.seen)
	if cap(u.buf) > maxKeptUndo {
		u.buf = nil
	}
	u.buf = u.buf[:0]
}

// save records row i of p, once per call.
func (u *undoLog) save(p *partition, i int) {
	k := undoKey{p, i}
	if u.seen == nil {
		u.seen = make(map[undoKey]bool)
	}
	if u.seen[k] {
		return
	}
	u.seen[k] = true
	e := undoEntry{undoKey: k, off: -1}
	if p.sparse() {
		e.sp = p.srows[i].Clone()
	} else if x := p.rows[i]; x != nil {
		e.off = len(u.buf)
		u.buf = append(u.buf, x...)
	}
	u.entries = append(u.entries, e)
}

// restore puts back every saved row.
func (u *undoLog) restore() {
	for _, e := range u.entries {
		if e.p.sparse() {
			e.p.setTable(e.i, e.sp)
			continue
		}
		if e.off < 0 {
			e.p.rows[e.i] = nil
			continue
		}
		w := e.p.meta.Width()
		if e.p.rows[e.i] == nil {
			e.p.rows[e.i] = make([]float64, w)
		}
		copy(e.p.rows[e.i], u.buf[e.off:e.off+w])
	}
}

// Kernel is the server half of a function, known by its name in a
// process-wide registry (Register). Make one with NewGetKernel,
// NewUpdateKernel or the element-wise helpers (NewMap, NewZip2Map, ...).
type Kernel interface {
	// Name returns the name the kernel is registered and called by.
	Name() string
	// update reports whether the kernel changes the matrix.
	update() bool
	// serve decodes param, runs on b and appends the encoded result to out.
	serve(b *Block, param []byte, out *Encoder) error
	// guard says what an update kernel needs saved to be undone.
	guard() guardMode
}

// GetKernel is the server half of a get function: it reads one partition
// with a parameter of type P and returns a partial result of type Q.
type GetKernel[P, Q any] struct {
	name   string
	param  Codec[P]
	result Codec[Q]
	fn     func(b *Block, param P) (Q, error)
}

// NewGetKernel returns the server half of a get function named name: fn
// runs on every partition a request reaches, with the parameter the worker
// made for that partition. Register it (in every process of the job, e.g.
// in a package-level var with MustRegister) before use.
func NewGetKernel[P, Q any](name string, param Codec[P], result Codec[Q], fn func(b *Block, param P) (Q, error)) *GetKernel[P, Q] {
	return &GetKernel[P, Q]{name: name, param: param, result: result, fn: fn}
}

// Name returns the kernel's name.
func (k *GetKernel[P, Q]) Name() string { return k.name }

func (k *GetKernel[P, Q]) update() bool { return false }

func (k *GetKernel[P, Q]) guard() guardMode { return guardNone }

func (k *GetKernel[P, Q]) serve(b *Block, param []byte, out *Encoder) error {
	p, err := decode(k.param, param)
	if err != nil {
		return fmt.Errorf("%w: decoding the parameters: %v", ErrBadRequest, err)
	}
	q, err := k.fn(b, p)
	if err != nil {
		return err
	}
	k.result.Encode(out, q)
	return out.Err()
}

// UpdateKernel is the server half of an update function: it changes one
// partition, given a parameter of type P.
type UpdateKernel[P any] struct {
	name  string
	param Codec[P]
	fn    func(b *Block, param P) error
	g     guardMode
}

// NewUpdateKernel returns the server half of an update function named
// name: fn runs on every partition a request reaches, with the parameter
// the worker made for that partition. Register it before use.
//
// The partition's change is all or nothing: the server saves every row fn
// obtains through Block.Row or Block.SparseRow before fn sees it, and if
// fn returns an error or panics, puts them back (rows never written become
// unwritten again). That costs a copy of each row fn reaches.
func NewUpdateKernel[P any](name string, param Codec[P], fn func(b *Block, param P) error) *UpdateKernel[P] {
	return &UpdateKernel[P]{name: name, param: param, fn: fn, g: guardAll}
}

// newLibUpdateKernel returns an update kernel that needs no undo log: fn
// checks everything that can fail before it changes anything.
func newLibUpdateKernel[P any](name string, param Codec[P], fn func(b *Block, param P) error) *UpdateKernel[P] {
	return &UpdateKernel[P]{name: name, param: param, fn: fn, g: guardNone}
}

// Name returns the kernel's name.
func (k *UpdateKernel[P]) Name() string { return k.name }

func (k *UpdateKernel[P]) update() bool { return true }

func (k *UpdateKernel[P]) guard() guardMode { return k.g }

func (k *UpdateKernel[P]) serve(b *Block, param []byte, _ *Encoder) error {
	p, err := decode(k.param, param)
	if err != nil {
		return fmt.Errorf("%w: decoding the parameters: %v", ErrBadRequest, err)
	}
	return k.fn(b, p)
}

var registry = struct {
	sync.RWMutex
	m map[string]Kernel
}{m: make(map[string]Kernel)}

// ErrUnknownFunction is the error a server answers for a function name it
// has no kernel for (typically: the kernel is registered in the worker's
// binary but not the server's).
var ErrUnknownFunction = errors.New("psf: unknown function")

// Register adds k to the process-wide registry under k.Name(). Names are
// checked like matrix names (letters, digits, '.', '_', '-'); by
// convention they are qualified, e.g. "mypkg.Clip". The built-in functions
// use the prefix "psf.". Registering a name twice is an error.
func Register(k Kernel) error {
	if k == nil {
		return errors.New("psf: nil kernel")
	}
	name := k.Name()
	if err := validName("function", name); err != nil {
		return err
	}
	registry.Lock()
	defer registry.Unlock()
	if _, ok := registry.m[name]; ok {
		return fmt.Errorf("psf: function %q is registered already", name)
	}
	registry.m[name] = k
	return nil
}

// MustRegister is Register for package-level variables: it returns k, and
// panics if k cannot be registered (a programming error, like registering
// a database/sql driver twice).
func MustRegister[K Kernel](k K) K {
	if err := Register(k); err != nil {
		panic(err)
	}
	return k
}

// Lookup returns the kernel registered under name.
func Lookup(name string) (Kernel, bool) {
	registry.RLock()
	defer registry.RUnlock()
	k, ok := registry.m[name]
	return k, ok
}

// Part is a value for, or from, one partition.
type Part[T any] struct {
	Partition PartitionMeta
	Value     T
}

// GetFunc is the worker half of a function that reads a matrix: Split
// makes the encoded parameter of each partition to ask, the server runs the
// kernel called Name on each, and Merge combines the encoded partial
// results (given in partition id order) into the result. NewGet builds one
// from a GetKernel and typed split and merge functions.
type GetFunc[R any] interface {
	Name() string
	Split(m *MatrixMeta) ([]Part[[]byte], error)
	Merge(m *MatrixMeta, results []Part[[]byte]) (R, error)
}

// UpdateFunc is the worker half of a function that changes a matrix: Split
// makes the encoded parameter of each partition to change, and the server
// runs the kernel called Name on each. NewUpdate builds one from an
// UpdateKernel and a typed split function.
type UpdateFunc interface {
	Name() string
	Split(m *MatrixMeta) ([]Part[[]byte], error)
}

type getFunc[P, Q, R any] struct {
	k     *GetKernel[P, Q]
	split func(m *MatrixMeta) ([]Part[P], error)
	merge func(m *MatrixMeta, parts []Part[Q]) (R, error)
}

// NewGet returns the get function that calls kernel k on the partitions
// split chooses, with the parameters it makes, and merges the partial
// results with merge (which gets them in partition id order).
func NewGet[P, Q, R any](k *GetKernel[P, Q], split func(m *MatrixMeta) ([]Part[P], error), merge func(m *MatrixMeta, parts []Part[Q]) (R, error)) GetFunc[R] {
	return &getFunc[P, Q, R]{k: k, split: split, merge: merge}
}

func (f *getFunc[P, Q, R]) Name() string { return f.k.name }

func (f *getFunc[P, Q, R]) Split(m *MatrixMeta) ([]Part[[]byte], error) {
	parts, err := f.split(m)
	if err != nil {
		return nil, err
	}
	return encodeParts(f.k.param, parts)
}

func (f *getFunc[P, Q, R]) Merge(m *MatrixMeta, results []Part[[]byte]) (R, error) {
	parts := make([]Part[Q], len(results))
	for i, r := range results {
		q, err := decode(f.k.result, r.Value)
		if err != nil {
			var zero R
			return zero, fmt.Errorf("psf: %s: decoding the result of %s: %w", f.k.name, r.Partition, err)
		}
		parts[i] = Part[Q]{Partition: r.Partition, Value: q}
	}
	return f.merge(m, parts)
}

type updateFunc[P any] struct {
	k     *UpdateKernel[P]
	split func(m *MatrixMeta) ([]Part[P], error)
}

// NewUpdate returns the update function that calls kernel k on the
// partitions split chooses, with the parameters it makes.
func NewUpdate[P any](k *UpdateKernel[P], split func(m *MatrixMeta) ([]Part[P], error)) UpdateFunc {
	return &updateFunc[P]{k: k, split: split}
}

func (f *updateFunc[P]) Name() string { return f.k.name }

func (f *updateFunc[P]) Split(m *MatrixMeta) ([]Part[[]byte], error) {
	parts, err := f.split(m)
	if err != nil {
		return nil, err
	}
	return encodeParts(f.k.param, parts)
}

func encodeParts[P any](c Codec[P], parts []Part[P]) ([]Part[[]byte], error) {
	out := make([]Part[[]byte], len(parts))
	for i, p := range parts {
		b, err := encode(c, p.Value)
		if err != nil {
			return nil, err
		}
		out[i] = Part[[]byte]{Partition: p.Partition, Value: b}
	}
	return out, nil
}

// SplitRows is the split of most functions over rows: one part per
// partition of rows[0], each with the same param, after checking that the
// rows exist and are colocated (see MatrixMeta.Colocated). The kernel then
// reaches every row with Block.Row.
func SplitRows[P any](m *MatrixMeta, param P, rows ...int) ([]Part[P], error) {
	if len(rows) == 0 {
		return nil, errors.New("psf: no rows")
	}
	if err := m.Colocated(rows...); err != nil {
		return nil, err
	}
	ps := m.RowPartitions(rows[0])
	out := make([]Part[P], len(ps))
	for i, p := range ps {
		out[i] = Part[P]{Partition: p, Value: param}
	}
	return out, nil
}

// sortParts orders parts by partition id.
func sortParts[T any](parts []Part[T]) {
	slices.SortStableFunc(parts, func(a, b Part[T]) int { return a.Partition.ID - b.Partition.ID })
}
