package ctr

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// Feature ids. Without hashing an id is an integer 1..maxFeatureID; with
// -hash-bits=b every id (a number or any other string) is hashed to
// 1..2^b-1. Id 0 is the bias. Nothing is allocated per possible id: a
// process numbers the ids its data holds (Vocab) and the servers keep the
// keys that are pushed, so a large id costs no more than a small one.
const (
	maxFeatureID = 1<<44 - 1
	maxHashBits  = 40
)

// maxFields bounds the fields of libffm input (the views of a multi-view
// machine).
const maxFields = 1 << 10

// maxLabel bounds class numbers, so that every label is exact in a float32
// and a stray huge label cannot ask for millions of classes.
const maxLabel = 1 << 16

// Vocab numbers the feature ids a process has seen 0..n-1 (its local
// indices); the data sets of a process share one. After Sort the local order
// is the order of the ids, so that a sorted list of local indices maps to a
// sorted list of keys.
type Vocab struct {
	// IDs holds the feature id of each local index.
	IDs    []uint64
	dense  []int32 // id -> local index + 1, for ids below denseIDs (0: not seen)
	sparse map[uint64]int32
}

// denseIDs bounds the ids a Vocab looks up in a slice rather than a map.
const denseIDs = 1 << 20

// NewVocab returns an empty vocabulary.
func NewVocab() *Vocab { return &Vocab{sparse: make(map[uint64]int32)} }

// Len returns the number of ids seen.
func (v *Vocab) Len() int { return len(v.IDs) }

// index returns id's local index, adding id when it is new.
func (v *Vocab) index(id uint64) int32 {
	if id < denseIDs {
		if id < uint64(len(v.dense)) {
			if p := v.dense[id]; p > 0 {
				return p - 1
			}
		} else {
			n := min(max(int(id)+1, 2*len(v.dense)), denseIDs)
			v.dense = append(v.dense, make([]int32, n-len(v.dense))...)
		}
		p := int32(len(v.IDs))
		v.IDs = append(v.IDs, id)
		v.dense[id] = p + 1
		return p
	}
	if p, ok := v.sparse[id]; ok {
		return p
	}
	p := int32(len(v.IDs))
	v.IDs = append(v.IDs, id)
	v.sparse[id] = p
	return p
}

// Lookup returns id's local index, or -1.
func (v *Vocab) Lookup(id uint64) int32 {
	if id < uint64(len(v.dense)) {
		return v.dense[id] - 1
	}
	if p, ok := v.sparse[id]; ok {
		return p
	}
	return -1
}

// Sort renumbers the local indices in ascending order of the ids and
// rewrites the rows of sets, which must be every data set using v.
func (v *Vocab) Sort(sets ...*Dataset) {
	if slices.IsSorted(v.IDs) {
		return
	}
	order := make([]int32, len(v.IDs)) // new index -> old index
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		x, y := v.IDs[a], v.IDs[b]
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	remap := make([]int32, len(order)) // old -> new
	ids := make([]uint64, len(order))
	for n, o := range order {
		remap[o] = int32(n)
		ids[n] = v.IDs[o]
	}
	v.IDs = ids
	for id, p := range v.dense {
		if p > 0 {
			v.dense[id] = remap[p-1] + 1
		}
	}
	for id, p := range v.sparse {
		v.sparse[id] = remap[p]
	}
	for _, d := range sets {
		if d == nil {
			continue
		}
		for i, f := range d.Idx {
			d.Idx[i] = remap[f]
		}
	}
}

// Dataset holds examples in compressed sparse rows over the local indices of
// a Vocab: row i has the features Idx[Start[i]:Start[i+1]] with values
// Val[...] (Val is nil when every value is 1, as in binary data) and the raw
// label Label[i]. The bias is not stored: the model adds it to every row.
type Dataset struct {
	Start []int
	Idx   []int32
	Val   []float32
	// Field holds each entry's field (libffm input, "field:feature:value"),
	// or is nil when the data has none. Multi-view machines use the fields
	// as their views; the other models ignore them.
	Field []int32
	Label []float64
	// Class holds each row's class index, set by Labels.Assign.
	Class []int32
	// Vocab maps Idx to feature ids.
	Vocab *Vocab
}

// Len returns the number of rows.
func (d *Dataset) Len() int { return len(d.Label) }

// Row returns row i's local feature indices and values (nil: all 1).
func (d *Dataset) Row(i int) ([]int32, []float32) {
	lo, hi := d.Start[i], d.Start[i+1]
	if d.Val == nil {
		return d.Idx[lo:hi], nil
	}
	return d.Idx[lo:hi], d.Val[lo:hi]
}

// NNZ returns the number of stored features.
func (d *Dataset) NNZ() int { return len(d.Idx) }

func newDataset(v *Vocab) *Dataset { return &Dataset{Start: []int{0}, Vocab: v} }

// appendRow adds a row of local indices; val nil means all values are 1,
// fld nil that the row has no fields (field 0 when others have).
func (d *Dataset) appendRow(label float64, idx []int32, val []float32, fld []int32) {
	if fld != nil && d.Field == nil {
		d.Field = make([]int32, len(d.Idx), cap(d.Idx))
	}
	if d.Field != nil {
		if fld == nil {
			d.Field = append(d.Field, make([]int32, len(idx))...)
		} else {
			d.Field = append(d.Field, fld...)
		}
	}
	if val != nil && d.Val == nil {
		d.Val = make([]float32, len(d.Idx), cap(d.Idx))
		for i := range d.Val {
			d.Val[i] = 1
		}
	}
	d.Idx = append(d.Idx, idx...)
	if d.Val != nil {
		if val == nil {
			for range idx {
				d.Val = append(d.Val, 1)
			}
		} else {
			d.Val = append(d.Val, val...)
		}
	}
	d.Start = append(d.Start, len(d.Idx))
	d.Label = append(d.Label, label)
}

// Subset returns a new dataset (sharing the Vocab) holding the given rows,
// in that order.
func (d *Dataset) Subset(rows []int) *Dataset {
	s := newDataset(d.Vocab)
	nnz := 0
	for _, r := range rows {
		nnz += d.Start[r+1] - d.Start[r]
	}
	s.Idx = make([]int32, 0, nnz)
	if d.Val != nil {
		s.Val = make([]float32, 0, nnz)
	}
	if d.Field != nil {
		s.Field = make([]int32, 0, nnz)
	}
	s.Start = make([]int, 1, len(rows)+1)
	s.Label = make([]float64, 0, len(rows))
	for _, r := range rows {
		idx, val := d.Row(r)
		s.Idx = append(s.Idx, idx...)
		if d.Val != nil {
			s.Val = append(s.Val, val...)
		}
		if d.Field != nil {
			s.Field = append(s.Field, d.Field[d.Start[r]:d.Start[r+1]]...)
		}
		s.Start = append(s.Start, len(s.Idx))
		s.Label = append(s.Label, d.Label[r])
		if d.Class != nil {
			s.Class = append(s.Class, d.Class[r])
		}
	}
	return s
}

// seq returns lo, lo+1, ..., hi-1.
func seq(lo, hi int) []int {
	s := make([]int, 0, max(hi-lo, 0))
	for i := lo; i < hi; i++ {
		s = append(s, i)
	}
	return s
}

// Permutation returns the row indices 0..n-1 shuffled with seed.
func Permutation(n int, seed uint64) []int {
	p := seq(0, n)
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	r.Shuffle(n, func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}

// ParseError is a malformed line of a LIBSVM file.
type ParseError struct {
	Name string // file name, may be empty
	Line int    // 1-based
	Msg  string
}

// Error formats the error as "file:line: message".
func (e *ParseError) Error() string {
	if e.Name != "" {
		return fmt.Sprintf("%s:%d: %s", e.Name, e.Line, e.Msg)
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// ReadOptions says which part of a file a process reads and how it turns
// feature ids into model features.
type ReadOptions struct {
	// Rank and Workers select the shard: a process reads the examples of
	// its rank of Workers (Workers 0 or 1: all of them). A plain LIBSVM
	// file is split into Workers byte ranges, each aligned to whole lines
	// (a line belongs to the range holding its first byte), and a process
	// reads only its own; gzipped files, standard input, IDX files and
	// reads with a Limit go through the examples in order and keep every
	// Workers-th, starting with the Rank-th.
	Rank, Workers int
	// Limit, when positive, reads only the file's first Limit examples.
	Limit int
	// HashBits, when positive, hashes every feature id (its text) to
	// 1..2^HashBits-1.
	HashBits int
	// Vocab numbers the features; nil for a new one.
	Vocab *Vocab
	// Binary reads every non-zero value as 1 (xflow's reader keeps no
	// values).
	Binary bool
}

func (o *ReadOptions) sharded() bool { return o.Workers > 1 }

// keeps reports whether example i (0-based, in file order) is this shard's
// when reading in order.
func (o *ReadOptions) keeps(i int) bool { return !o.sharded() || i%o.Workers == o.Rank }

// ReadLIBSVM parses LIBSVM text: one example per line, "label id:value
// id:value ...", ids 1-based and strictly ascending (any order, and any
// string, with hashing). It also reads libffm text, whose entries are
// "field:id:value" with fields 0..maxFields-1 and ids in any order; the
// fields are kept in Dataset.Field and the id alone names the feature. Blank lines and lines starting with '#' are
// skipped, as is anything after a '#'. name is used in error messages only.
// A malformed line yields a *ParseError with its number.
func ReadLIBSVM(r io.Reader, name string, o ReadOptions) (*Dataset, error) {
	if o.Vocab == nil {
		o.Vocab = NewVocab()
	}
	p := newLIBSVMParser(name, o)
	if err := p.scan(r, -1); err != nil {
		return nil, err
	}
	return p.d, nil
}

// libsvmParser turns lines into rows of a Dataset.
type libsvmParser struct {
	name     string
	o        ReadOptions
	d        *Dataset
	idx      []int32
	val      []float32
	fld      []int32
	ones     bool
	fields   bool // the row has "field:feature:value" entries
	examples int  // examples seen, kept or not
	// onRow, when set, receives the rows instead of d (streaming).
	onRow func(label float64, idx []int32, val []float32, fld []int32) error
}

func newLIBSVMParser(name string, o ReadOptions) *libsvmParser {
	return &libsvmParser{name: name, o: o, d: newDataset(o.Vocab)}
}

// isSpace reports LIBSVM's separators.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

// content strips a line's comment and surrounding blanks; empty means no
// example.
func content(line []byte) []byte {
	if i := bytes.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	for len(line) > 0 && (isSpace(line[len(line)-1]) || line[len(line)-1] == '\n') {
		line = line[:len(line)-1]
	}
	for len(line) > 0 && isSpace(line[0]) {
		line = line[1:]
	}
	return line
}

// scan reads lines from r until EOF or, when end >= 0, until the line
// starting at byte offset end (relative to r's start); lines are numbered
// from 1. Every example line is counted, and this shard's are parsed. It
// stops after Limit examples.
func (p *libsvmParser) scan(r io.Reader, end int64) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var long []byte
	var off int64
	lineNo := 0
	for {
		if end >= 0 && off >= end {
			return nil
		}
		if p.o.Limit > 0 && p.examples >= p.o.Limit {
			return nil
		}
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) == 0 && err != nil {
			if err == io.EOF {
				return nil
			}
			return p.fail(lineNo+1, "%v", err)
		}
		lineNo++
		off += int64(len(line))
		text := content(line)
		if len(text) > 0 {
			keep := p.o.keeps(p.examples)
			p.examples++
			if keep {
				if err := p.parse(text, lineNo); err != nil {
					return err
				}
			}
		}
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return p.fail(lineNo+1, "%v", err)
		}
	}
}

func (p *libsvmParser) fail(line int, format string, args ...any) error {
	return &ParseError{Name: p.name, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// str views b as a string without copying, for strconv; the string must
// not outlive b's contents.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// parse adds one example line (comment and blanks stripped, not empty).
func (p *libsvmParser) parse(text []byte, lineNo int) error {
	i := 0
	for i < len(text) && !isSpace(text[i]) {
		i++
	}
	label, ok := parseNumber(text[:i])
	if !ok {
		return p.fail(lineNo, "bad label %q", text[:i])
	}
	if label != math.Trunc(label) || label < -1 || label > maxLabel {
		return p.fail(lineNo, "label %s: labels are -1/+1 or class numbers 0, 1, 2, ... (at most %d)", text[:i], maxLabel)
	}
	p.idx, p.val, p.fld, p.ones, p.fields = p.idx[:0], p.val[:0], p.fld[:0], true, false
	var prev uint64 // the last id parsed, kept or not (zero values are not)
	for i < len(text) {
		for i < len(text) && isSpace(text[i]) {
			i++
		}
		if i == len(text) {
			break
		}
		j := i
		for j < len(text) && !isSpace(text[j]) {
			j++
		}
		tok := text[i:j]
		i = j
		colon := bytes.LastIndexByte(tok, ':')
		if colon < 0 {
			return p.fail(lineNo, "feature %q is not id:value", tok)
		}
		idText, valText := tok[:colon], tok[colon+1:]
		field := int32(-1)
		if c := bytes.IndexByte(idText, ':'); c >= 0 {
			// libffm: field:feature:value.
			f, ok := parseNumber(idText[:c])
			if !ok || f != math.Trunc(f) || f < 0 || f >= maxFields {
				return p.fail(lineNo, "field %q in %q: fields are integers 0..%d", idText[:c], tok, maxFields-1)
			}
			field, idText = int32(f), idText[c+1:]
			if !p.fields {
				p.fields = true
				p.fld = append(p.fld[:0], make([]int32, len(p.idx))...)
			}
		}
		var id uint64
		if p.o.HashBits > 0 {
			if len(idText) == 0 {
				return p.fail(lineNo, "empty feature id in %q", tok)
			}
			id = HashFeature(idText, p.o.HashBits)
		} else {
			var msg string
			if id, msg = parseID(idText); msg != "" {
				return p.fail(lineNo, "feature id %q %s", idText, msg)
			}
			if id <= prev && field < 0 {
				// (libffm rows go by field: their ids need no order.)
				return p.fail(lineNo, "feature id %d is not above the previous one (%d)", id, prev)
			}
			prev = id
		}
		v, ok := parseNumber(valText)
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) || math.IsInf(float64(float32(v)), 0) {
			return p.fail(lineNo, "bad feature value in %q", tok)
		}
		if v == 0 {
			continue
		}
		if p.o.Binary {
			v = 1
		}
		p.idx = append(p.idx, p.o.Vocab.index(id))
		if p.fields {
			p.fld = append(p.fld, max(field, 0))
		}
		if v != 1 && p.ones {
			p.ones = false
			p.val = p.val[:0]
			for range len(p.idx) - 1 {
				p.val = append(p.val, 1)
			}
		}
		if !p.ones {
			p.val = append(p.val, float32(v))
		}
	}
	val := p.val
	if p.ones {
		val = nil
	}
	var fld []int32
	if p.fields {
		fld = p.fld
	}
	if p.onRow != nil {
		if err := p.onRow(label, p.idx, val, fld); err != nil {
			return p.fail(lineNo, "%v", err)
		}
		return nil
	}
	p.d.appendRow(label, p.idx, val, fld)
	return nil
}

// parseID parses a feature id without hashing: a decimal integer in
// 1..maxFeatureID. It returns the reason when the text is not one.
func parseID(b []byte) (uint64, string) {
	if len(b) == 0 {
		return 0, "is empty"
	}
	var id uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			if len(b) > 0 && b[0] == '-' {
				return 0, "is negative: ids start at 1"
			}
			return 0, "is not a positive integer (to use ids that are strings, hash them with -hash-bits)"
		}
		id = id*10 + uint64(c-'0')
		if id > maxFeatureID {
			return 0, fmt.Sprintf("is above %d, the largest id without hashing (hash larger ids with -hash-bits)", uint64(maxFeatureID))
		}
	}
	if id == 0 {
		return 0, "is 0: ids start at 1"
	}
	return id, ""
}

// parseNumber parses a label or value: small integers directly, anything
// else with strconv. NaN and infinities are refused.
func parseNumber(b []byte) (float64, bool) {
	if n := len(b); n > 0 && n <= 9 {
		neg := b[0] == '-'
		s := b
		if neg || b[0] == '+' {
			s = b[1:]
		}
		if len(s) > 0 {
			v := 0
			for _, c := range s {
				if c < '0' || c > '9' {
					goto slow
				}
				v = v*10 + int(c-'0')
			}
			if neg {
				return -float64(v), true
			}
			return float64(v), true
		}
	}
slow:
	v, err := strconv.ParseFloat(str(b), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}

// HashFeature maps a feature id's text to 1..2^bits-1: FNV-1a over the
// bytes, then a 64-bit finaliser (splitmix64) so that the low bits mix.
func HashFeature(text []byte, bits int) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range text {
		h ^= uint64(c)
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return 1 + h%(uint64(1)<<bits-1)
}

// WriteLIBSVM writes d in LIBSVM text with its feature ids.
func WriteLIBSVM(w io.Writer, d *Dataset) error {
	bw := bufio.NewWriter(w)
	var buf []byte
	for i := 0; i < d.Len(); i++ {
		buf = strconv.AppendFloat(buf[:0], d.Label[i], 'g', -1, 64)
		idx, val := d.Row(i)
		for j, f := range idx {
			buf = append(buf, ' ')
			buf = strconv.AppendUint(buf, d.Vocab.IDs[f], 10)
			buf = append(buf, ':')
			v := float32(1)
			if val != nil {
				v = val[j]
			}
			buf = strconv.AppendFloat(buf, float64(v), 'g', -1, 32)
		}
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// LoadData reads this process's shard of a data set from path: a LIBSVM
// text file (gzipped or not; "-" is standard input), or an IDX image file
// (gzipped or not) whose labels are in the file named "IMAGES,LABELS" or
// found by replacing "images-idx3" with "labels-idx1" in its name. IDX
// pixels become features 1..rows*cols scaled to [0,1].
func LoadData(path string, o ReadOptions) (*Dataset, error) {
	if o.Vocab == nil {
		o.Vocab = NewVocab()
	}
	images, labels, isPair := strings.Cut(path, ",")
	if path == "-" {
		if o.sharded() {
			return nil, fmt.Errorf("standard input (-) is for one process: in a job of %d workers each has its own; give a file", o.Workers)
		}
		return ReadLIBSVM(os.Stdin, "standard input", o)
	}
	f, err := os.Open(images)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	gz := len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b
	var in io.Reader = f
	if gz {
		zr, err := openMaybeGzip(images)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		br := bufio.NewReaderSize(zr, 1<<20)
		if head, err = br.Peek(4); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: %w", images, err)
		}
		in = br
	}
	if len(head) == 4 && head[0] == 0 && head[1] == 0 && head[2] == 0x08 && head[3] == 3 {
		if !isPair {
			labels = strings.Replace(images, "images-idx3", "labels-idx1", 1)
			if labels == images {
				return nil, fmt.Errorf("%s: IDX images whose labels file is not named *labels-idx1*; give IMAGES,LABELS", images)
			}
		}
		return readIDXPair(bufio.NewReaderSize(in, 1<<20), images, labels, o)
	}
	if isPair {
		return nil, fmt.Errorf("%s: not an IDX image file (magic 0x00000803)", images)
	}
	if gz || !o.sharded() || o.Limit > 0 {
		return ReadLIBSVM(in, images, o)
	}
	return readLIBSVMRange(f, images, o)
}

// readLIBSVMRange reads the lines of a plain LIBSVM file whose first byte
// lies in the byte range of o.Rank of o.Workers.
func readLIBSVMRange(f *os.File, name string, o ReadOptions) (*Dataset, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	start := size * int64(o.Rank) / int64(o.Workers)
	end := size * int64(o.Rank+1) / int64(o.Workers)
	if start > 0 {
		// The line holding byte start-1 belongs to the range before; ours
		// start after its newline.
		if _, err := f.Seek(start-1, io.SeekStart); err != nil {
			return nil, err
		}
		br := bufio.NewReader(f)
		skipped, err := br.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) {
			var more []byte
			more, err = br.ReadSlice('\n')
			skipped = append(skipped[:len(skipped):len(skipped)], more...)
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		start += int64(len(skipped)) - 1
	}
	o.Workers, o.Rank = 1, 0 // within the range, every example is ours
	p := newLIBSVMParser(name, o)
	if start >= end {
		return p.d, nil
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return nil, err
	}
	err = p.scan(f, end-start)
	var pe *ParseError
	if errors.As(err, &pe) && start > 0 {
		// Number the line within the whole file: count the lines before
		// the range (only on this error path).
		before, cerr := countLines(name, start)
		if cerr == nil {
			pe.Line += before
		}
	}
	if err != nil {
		return nil, err
	}
	return p.d, nil
}

// countLines counts the newlines in the first n bytes of the file at path.
func countLines(path string, n int64) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	lines := 0
	r := io.LimitReader(f, n)
	for {
		k, err := r.Read(buf)
		lines += bytes.Count(buf[:k], []byte{'\n'})
		if err == io.EOF {
			return lines, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// readIDXPair reads IDX images from r (named name) and labels from the file
// labels, keeping the shard's examples.
func readIDXPair(r io.Reader, name, labels string, o ReadOptions) (*Dataset, error) {
	img, err := ReadIDX(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	lf, err := openMaybeGzip(labels)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	lab, err := ReadIDX(bufio.NewReader(lf))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", labels, err)
	}
	d, err := ImagesToDataset(img, lab, o)
	if err != nil {
		return nil, fmt.Errorf("%s with %s: %w", name, labels, err)
	}
	return d, nil
}

// ImagesToDataset turns IDX images (n × rows × cols bytes) and labels (n
// bytes) into a data set: pixel p of an image (row-major) is feature p+1
// with value byte/255; zero pixels are left out. o selects the shard and a
// limit.
func ImagesToDataset(img, lab *IDX, o ReadOptions) (*Dataset, error) {
	if img.Type != idxUint8 || len(img.Dims) < 2 {
		return nil, fmt.Errorf("images: want unsigned bytes with at least 2 dimensions, got type 0x%02x dims %v", img.Type, img.Dims)
	}
	if lab.Type != idxUint8 || len(lab.Dims) != 1 {
		return nil, fmt.Errorf("labels: want unsigned bytes with 1 dimension, got type 0x%02x dims %v", lab.Type, lab.Dims)
	}
	n := img.Dims[0]
	if lab.Dims[0] != n {
		return nil, fmt.Errorf("%d images but %d labels", n, lab.Dims[0])
	}
	per := 1
	for _, x := range img.Dims[1:] {
		per *= x
	}
	if o.Vocab == nil {
		o.Vocab = NewVocab()
	}
	if o.Limit > 0 {
		n = min(n, o.Limit)
	}
	d := newDataset(o.Vocab)
	loc := make([]int32, per)
	for p := range loc {
		loc[p] = o.Vocab.index(uint64(p + 1))
	}
	idx := make([]int32, 0, per)
	val := make([]float32, 0, per)
	d.Val = []float32{}
	for i := 0; i < n; i++ {
		if !o.keeps(i) {
			continue
		}
		idx, val = idx[:0], val[:0]
		for p, b := range img.Data[i*per : (i+1)*per] {
			if b != 0 {
				idx = append(idx, loc[p])
				val = append(val, float32(b)/255)
			}
		}
		d.appendRow(float64(lab.Data[i]), idx, val, nil)
	}
	return d, nil
}

// writeFileAtomic writes path through a temporary file renamed into place;
// "-" writes to standard output.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	if path == "-" {
		bw := bufio.NewWriter(os.Stdout)
		if err := write(bw); err != nil {
			return err
		}
		return bw.Flush()
	}
	tmp, err := os.CreateTemp(dirOf(path), ".lr-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file private; a model or plot is for everyone.
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i+1]
	}
	return "."
}
