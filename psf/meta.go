package psf

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// maxPartitionElems caps the size of a default partition (2^26 float64s,
// 512 MiB) so that a partition's values fit one wire payload (int32 length).
const maxPartitionElems = 1 << 26

// maxNameLen bounds matrix and function names.
const maxNameLen = 200

// ErrNotColocated is returned for a function over several rows whose
// partitions of some column block lie on different servers: functions run
// inside one server, so every row they read or write must be there. Rows in
// the same row block (the default layout has one) are always colocated.
var ErrNotColocated = errors.New("psf: rows are not on the same server")

// MatrixMeta describes a matrix and how it is partitioned.
//
// A dense matrix (Type Dense, the default) holds Rows x Cols float64
// values cut into blocks of RowBlock rows by ColBlock columns (the last
// ones smaller); block (rb, cb) is partition rb*NumColBlocks()+cb, held by
// server (partition id) mod NumServers.
//
// A sparse matrix (Type Sparse) has Rows rows and a column for every
// int64, negative ones too (Cols and ColBlock are 0); it stores only the
// entries that are not +0. Its columns are cut into NumServers column
// blocks by a hash of the column id (ColBlockOf), and its rows into blocks
// of RowBlock rows as for a dense matrix, so that partition rb*NumServers+cb
// is on server cb: every row is spread evenly over all servers, whatever
// the ids, and all rows are colocated.
type MatrixMeta struct {
	// Name identifies the matrix: letters, digits, '.', '_' and '-', not
	// starting with '.' (it names a directory when saved).
	Name string `json:"name"`
	// Type is Dense or Sparse; empty means Dense.
	Type MatrixType `json:"type,omitempty"`
	// Rows and Cols are the matrix's size; both at least 1 for a dense
	// matrix. A sparse matrix has Cols 0: its columns are every int64.
	Rows int   `json:"rows"`
	Cols int64 `json:"cols"`
	// RowBlock is the number of rows per partition; 0 means all rows (for
	// a dense matrix, fewer if a partition would exceed 2^26 values).
	RowBlock int `json:"rowBlock"`
	// ColBlock is the number of columns per partition of a dense matrix;
	// 0 means ceil(Cols/NumServers), so that every row is spread over all
	// servers (or fewer if a partition would exceed 2^26 values). It is 0
	// for a sparse matrix.
	ColBlock int64 `json:"colBlock"`
	// NumServers is the number of servers of the job; CreateMatrix fills it.
	NumServers int `json:"numServers"`
}

// PartitionMeta is one partition: rows [RowStart, RowEnd) by the columns
// of column block ColBlock (of NumColBlocks), held by server rank Server.
// The columns of a dense matrix's partition are [ColStart, ColEnd); those
// of a sparse matrix's partition (Sparse) are the int64s c with
// MatrixMeta.ColBlockOf(c) == ColBlock, and ColStart and ColEnd are 0.
type PartitionMeta struct {
	ID           int
	Server       int
	RowStart     int
	RowEnd       int
	ColStart     int64
	ColEnd       int64
	ColBlock     int
	NumColBlocks int
	Sparse       bool
}

// Width returns the number of columns of p (0 for a sparse partition).
func (p PartitionMeta) Width() int { return int(p.ColEnd - p.ColStart) }

// HasRow reports whether row r lies in p.
func (p PartitionMeta) HasRow(r int) bool { return r >= p.RowStart && r < p.RowEnd }

// HasCol reports whether column c lies in p.
func (p PartitionMeta) HasCol(c int64) bool {
	if p.Sparse {
		return p.NumColBlocks > 0 && sparseColBlock(c, p.NumColBlocks) == p.ColBlock
	}
	return c >= p.ColStart && c < p.ColEnd
}

// String returns the partition's id and rectangle.
func (p PartitionMeta) String() string {
	if p.Sparse {
		return fmt.Sprintf("partition %d rows [%d,%d) column block %d of %d (by hash) on server %d",
			p.ID, p.RowStart, p.RowEnd, p.ColBlock, p.NumColBlocks, p.Server)
	}
	return fmt.Sprintf("partition %d rows [%d,%d) cols [%d,%d) on server %d",
		p.ID, p.RowStart, p.RowEnd, p.ColStart, p.ColEnd, p.Server)
}

func validName(what, s string) error {
	if s == "" || len(s) > maxNameLen {
		return fmt.Errorf("psf: %s name %q must have 1 to %d characters", what, s, maxNameLen)
	}
	if s[0] == '.' {
		return fmt.Errorf("psf: %s name %q must not start with '.'", what, s)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("psf: %s name %q: only letters, digits, '.', '_' and '-' are allowed", what, s)
		}
	}
	return nil
}

// withDefaults returns m with NumServers set to servers and zero block
// sizes replaced by their defaults, checked.
func (m MatrixMeta) withDefaults(servers int) (MatrixMeta, error) {
	if m.NumServers == 0 {
		m.NumServers = servers
	}
	if m.Type == "" {
		m.Type = Dense
	}
	if m.Type == Sparse {
		if m.RowBlock == 0 {
			m.RowBlock = m.Rows
		}
		return m, m.validate()
	}
	if m.ColBlock == 0 && m.Cols > 0 && m.NumServers > 0 {
		m.ColBlock = (m.Cols + int64(m.NumServers) - 1) / int64(m.NumServers)
		if m.ColBlock > maxPartitionElems {
			m.ColBlock = maxPartitionElems
		}
	}
	if m.RowBlock == 0 && m.Rows > 0 && m.ColBlock > 0 {
		m.RowBlock = m.Rows
		if int64(m.RowBlock)*m.ColBlock > maxPartitionElems {
			m.RowBlock = int(max(1, maxPartitionElems/m.ColBlock))
		}
	}
	return m, m.validate()
}

// Limits of a matrix's shape.
const (
	maxRows       = 1 << 31
	maxCols       = 1 << 48
	maxServers    = 1 << 16
	maxPartitions = 1 << 24
	// A server makes its partitions of a matrix when the matrix is
	// created, with a header per row of each (8 bytes sparse, 24 dense),
	// before any value is written: at most this many partitions and rows
	// per server (512 MiB of headers for a sparse matrix), so that a
	// mistaken size is refused instead of taking every server's memory.
	maxServerPartitions = 1 << 20
	maxServerRows       = 1 << 26
)

// checkServerShare checks what one server makes when the matrix is
// created (maxServerPartitions, maxServerRows); the partition count must
// be within maxPartitions.
func (m MatrixMeta) checkServerShare() error {
	parts := int64(m.NumRowBlocks()) * m.NumColBlocks()
	per := (parts + int64(m.NumServers) - 1) / int64(m.NumServers)
	switch {
	case per > maxServerPartitions:
		return fmt.Errorf("psf: matrix %q: %d partitions on a server (at most 2^20); use larger blocks or more servers", m.Name, per)
	case per*int64(m.RowBlock) > maxServerRows && m.Type == Sparse:
		return fmt.Errorf("psf: sparse matrix %q: %d rows; every server holds a column block of every row, and at most 2^26 rows", m.Name, m.Rows)
	case per*int64(m.RowBlock) > maxServerRows:
		return fmt.Errorf("psf: matrix %q: up to %d rows of partitions on a server (at most 2^26); use more servers or fewer rows", m.Name, per*int64(m.RowBlock))
	}
	return nil
}

// validate checks a complete meta (which may come from the network: no
// arithmetic here may overflow).
func (m MatrixMeta) validate() error {
	if err := validName("matrix", m.Name); err != nil {
		return err
	}
	switch m.Type {
	case Dense:
	case Sparse:
		return m.validateSparse()
	default:
		return fmt.Errorf("psf: matrix %q: type %q (want %q or %q)", m.Name, m.Type, Dense, Sparse)
	}
	switch {
	case m.Rows < 1 || m.Cols < 1 || m.Rows > maxRows || m.Cols > maxCols:
		return fmt.Errorf("psf: matrix %q: size %dx%d (rows from 1 to 2^31, columns from 1 to 2^48)", m.Name, m.Rows, m.Cols)
	case m.RowBlock < 1 || m.ColBlock < 1:
		return fmt.Errorf("psf: matrix %q: block %dx%d (must be at least 1x1)", m.Name, m.RowBlock, m.ColBlock)
	case m.NumServers < 1 || m.NumServers > maxServers:
		return fmt.Errorf("psf: matrix %q: %d servers", m.Name, m.NumServers)
	case m.RowBlock > m.Rows:
		return fmt.Errorf("psf: matrix %q: row block %d exceeds %d rows", m.Name, m.RowBlock, m.Rows)
	case m.ColBlock > m.Cols:
		return fmt.Errorf("psf: matrix %q: column block %d exceeds %d columns", m.Name, m.ColBlock, m.Cols)
	case m.ColBlock > math.MaxInt32/8/int64(m.RowBlock):
		return fmt.Errorf("psf: matrix %q: a %dx%d partition does not fit one message (2 GiB); use smaller blocks", m.Name, m.RowBlock, m.ColBlock)
	case m.NumColBlocks() > maxPartitions/int64(m.NumRowBlocks()):
		return fmt.Errorf("psf: matrix %q: more than %d partitions; use larger blocks", m.Name, maxPartitions)
	}
	return m.checkServerShare()
}

// validateSparse checks the meta of a sparse matrix.
func (m MatrixMeta) validateSparse() error {
	switch {
	case m.Cols != 0 || m.ColBlock != 0:
		return fmt.Errorf("psf: sparse matrix %q: Cols %d and ColBlock %d must be 0 (its columns are every int64, cut by hash into one block per server)", m.Name, m.Cols, m.ColBlock)
	case m.Rows < 1 || m.Rows > maxRows:
		return fmt.Errorf("psf: matrix %q: %d rows (from 1 to 2^31)", m.Name, m.Rows)
	case m.NumServers < 1 || m.NumServers > maxServers:
		return fmt.Errorf("psf: matrix %q: %d servers", m.Name, m.NumServers)
	case m.RowBlock < 1 || m.RowBlock > m.Rows:
		return fmt.Errorf("psf: matrix %q: row block %d (from 1 to the %d rows)", m.Name, m.RowBlock, m.Rows)
	case m.NumColBlocks() > maxPartitions/int64(m.NumRowBlocks()):
		return fmt.Errorf("psf: matrix %q: more than %d partitions; use larger row blocks", m.Name, maxPartitions)
	}
	return m.checkServerShare()
}

// NumRowBlocks returns the number of row blocks.
func (m *MatrixMeta) NumRowBlocks() int { return (m.Rows + m.RowBlock - 1) / m.RowBlock }

// NumColBlocks returns the number of column blocks: NumServers for a
// sparse matrix.
func (m *MatrixMeta) NumColBlocks() int64 {
	if m.Type == Sparse {
		return int64(m.NumServers)
	}
	return (m.Cols + m.ColBlock - 1) / m.ColBlock
}

// ColBlockOf returns the column block of column c: c/ColBlock for a dense
// matrix (c must be in [0, Cols)), and for a sparse matrix the high half
// of the 128-bit product of SplitMix64(c) and the number of column blocks,
// which spreads any distribution of ids evenly.
func (m *MatrixMeta) ColBlockOf(c int64) int {
	if m.Type == Sparse {
		return sparseColBlock(c, m.NumServers)
	}
	return int(c / m.ColBlock)
}

// checkCol returns an error unless the matrix has column c: any int64 for
// a sparse matrix, [0, Cols) for a dense one.
func (m *MatrixMeta) checkCol(c int64) error {
	if m.Type != Sparse && (c < 0 || c >= m.Cols) {
		return fmt.Errorf("psf: matrix %q has no column %d (it has %d)", m.Name, c, m.Cols)
	}
	return nil
}

// NumPartitions returns the number of partitions.
func (m *MatrixMeta) NumPartitions() int { return m.NumRowBlocks() * int(m.NumColBlocks()) }

// Partition returns partition id's meta; id must be in [0, NumPartitions()).
func (m *MatrixMeta) Partition(id int) PartitionMeta {
	ncb := int(m.NumColBlocks())
	rb, cb := id/ncb, id%ncb
	p := PartitionMeta{
		ID:           id,
		Server:       id % m.NumServers,
		RowStart:     rb * m.RowBlock,
		RowEnd:       min(m.Rows, (rb+1)*m.RowBlock),
		ColBlock:     cb,
		NumColBlocks: ncb,
	}
	if m.Type == Sparse {
		p.Sparse = true
	} else {
		p.ColStart = int64(cb) * m.ColBlock
		p.ColEnd = min(m.Cols, int64(cb+1)*m.ColBlock)
	}
	return p
}

// Partitions returns every partition, by id.
func (m *MatrixMeta) Partitions() []PartitionMeta {
	out := make([]PartitionMeta, m.NumPartitions())
	for i := range out {
		out[i] = m.Partition(i)
	}
	return out
}

// PartitionAt returns the partition holding row r, column c.
func (m *MatrixMeta) PartitionAt(r int, c int64) PartitionMeta {
	return m.Partition(r/m.RowBlock*int(m.NumColBlocks()) + m.ColBlockOf(c))
}

// RowPartitions returns the partitions that hold row r, by column.
func (m *MatrixMeta) RowPartitions(r int) []PartitionMeta {
	ncb := int(m.NumColBlocks())
	out := make([]PartitionMeta, ncb)
	base := r / m.RowBlock * ncb
	for cb := range out {
		out[cb] = m.Partition(base + cb)
	}
	return out
}

// CheckRows returns an error unless every row is in [0, Rows).
func (m *MatrixMeta) CheckRows(rows ...int) error {
	for _, r := range rows {
		if r < 0 || r >= m.Rows {
			return fmt.Errorf("psf: matrix %q has no row %d (it has %d)", m.Name, r, m.Rows)
		}
	}
	return nil
}

// Colocated returns an error unless the rows exist and, for every column
// block, their partitions are on the same server, which is what a function
// that reads or writes several rows at once needs (ErrNotColocated).
func (m *MatrixMeta) Colocated(rows ...int) error {
	if err := m.CheckRows(rows...); err != nil {
		return err
	}
	if len(rows) < 2 {
		return nil
	}
	ncb := int(m.NumColBlocks())
	first := rows[0] / m.RowBlock
	for _, r := range rows[1:] {
		rb := r / m.RowBlock
		if rb == first {
			continue
		}
		for cb := 0; cb < ncb; cb++ {
			if (first*ncb+cb)%m.NumServers != (rb*ncb+cb)%m.NumServers {
				return fmt.Errorf("%w: in matrix %q rows %d and %d are in row blocks %d and %d, whose column block %d are on servers %d and %d",
					ErrNotColocated, m.Name, rows[0], r, first, rb, cb, (first*ncb+cb)%m.NumServers, (rb*ncb+cb)%m.NumServers)
			}
		}
	}
	return nil
}

func encodeMeta(e *Encoder, m MatrixMeta) {
	e.String(m.Name)
	e.String(string(m.Type))
	e.Int(m.Rows)
	e.Varint(m.Cols)
	e.Int(m.RowBlock)
	e.Varint(m.ColBlock)
	e.Int(m.NumServers)
}

func decodeMeta(d *Decoder) MatrixMeta {
	return MatrixMeta{
		Name:       d.String(),
		Type:       MatrixType(d.String()),
		Rows:       d.Int(),
		Cols:       d.Varint(),
		RowBlock:   d.Int(),
		ColBlock:   d.Varint(),
		NumServers: d.Int(),
	}
}

// rowsByBlock groups rows (in the order given) by row block.
func (m *MatrixMeta) rowsByBlock(rows []int) map[int][]int {
	g := make(map[int][]int)
	for _, r := range rows {
		rb := r / m.RowBlock
		g[rb] = append(g[rb], r)
	}
	return g
}

// sortedKeys returns the keys of a map in ascending order.
func sortedKeys[V any](m map[int]V) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
