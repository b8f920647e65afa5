package psf

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/gopslite/pslite/kv"
)

// A Server is a kv.Store of bytes: in a managed job (PS_REPLICAS,
// PS_CHECKPOINT_DIR) NewServer makes it its KV server's store, and the
// framework keeps every key range's matrices on several servers and in
// its snapshots.
var _ kv.Store[uint8] = (*Server)(nil)

// Changes implements kv.Store: it reports whether a request changes the
// server's matrices, so that it must be applied by every server holding
// its key range. Those are function calls that run an update kernel (one
// key of the request calling one is enough), and the matrix operations
// create, drop, delete, load (which stages the values read), load commit
// and load abort. Get kernels, meta, save and commit are reads, run by the
// head of the range alone: a save writes files but changes nothing. So
// are commands outside psf's range.
func (s *Server) Changes(meta kv.KVMeta, data kv.KVPairs[uint8]) bool {
	if meta.Cmd != CmdFunc && meta.Cmd != CmdSystem {
		return false
	}
	payloads, err := splitPayloads(data)
	if err != nil {
		return false // answered as a bad request: nothing changes
	}
	for _, p := range payloads {
		// Both payloads start with the wire version, then the kind of
		// function call or the operation.
		if len(p) < 2 || p[0] != wireVersion {
			continue
		}
		if meta.Cmd == CmdFunc && p[1] == kindUpdate || meta.Cmd == CmdSystem && sysChanges(p[1]) {
			return true
		}
	}
	return false
}

// Apply implements kv.Store: it runs a request as Handle does and returns
// the answer Handle would send, one payload per key (a result or an
// error: Apply itself never fails). The key's range says whose partitions
// are meant, so a server holding several ranges serves each.
//
// Apply is deterministic: a request changes only the state of its key
// range, and only as its contents say (a create's generation, which the
// drop that undoes it names, is derived from the request), so every
// server holding the range that applies the same requests in the same
// order holds the same. Loads read files: the directory must be readable,
// with the same contents, by every server holding the range.
//
// A request without push (Push false) changes nothing. The framework
// sends one to answer again a request it applied before whose answer was
// too large to keep: an update kernel is then not run and answers success
// (its answer the first time, unless it failed), and a matrix operation
// that changes state answers an error.
func (s *Server) Apply(meta kv.KVMeta, data kv.KVPairs[uint8]) (kv.KVPairs[uint8], error) {
	return s.apply(meta, data, true), nil
}

// The snapshot of a key range (Server.Snapshot), all little-endian:
//
//	"PSFSNAP1"            8 bytes, magic and format version
//	index, of             uint32 each: the range (the rank whose partitions
//	                      these are) and the number of servers of the job
//	count                 uint32: the number of matrix records
//	records               count of them, the matrices by name, then the
//	                      loads staged (waiting for their commit) by name
//
// A record:
//
//	state                 uint8: 0 a matrix, 1 a load staged
//	meta                  uint32 length + the meta (as on the wire)
//	gen                   uint64: the generation of the create that made it
//	parts                 uint32: the number of partitions, all of the
//	                      rank's, by id, each:
//	  id                  uint32
//	  size                uint64: the bytes of the body
//	  body                a dense partition: a version 2 part file without
//	                      its checksum, its rows present being those
//	                      allocated; a sparse one: its tables (below)
//
// The tables of a sparse partition keep the hash tables' slots, so that a
// restored table is the same, slot for slot, as the one written, and
// everything that walks a table (SparseRow.All) goes the same way on every
// server holding it:
//
//	"PSFSTAB1"            8 bytes
//	rowStart, rowEnd      int64 each
//	colBlock, numColBlocks int64 each
//	rows                  for each row of the partition: uint8 1 if it has a
//	                      table (else 0, and nothing more), then its
//	                      capacity (uint64), number of slots used (uint64),
//	                      whether it has column 0 (uint8) and column 0's
//	                      value (float64), then each slot used, in order:
//	                      slot (uint64), column (int64), value (float64)
//
// The framework checksums what it writes and sends, so the format has no
// checksum of its own.
const (
	snapMagic       = "PSFSNAP1"
	snapMagicPrefix = "PSFSNAP"
	tableMagic      = "PSFSTAB1"
	snapHeaderSize  = 8 + 3*4
)

// Record states.
const (
	snapLive   = 0
	snapStaged = 1
)

// Bounds on what a snapshot may announce.
const (
	maxSnapMeta  = 1 << 12
	maxTableCap  = 1 << 31
	tableRowSize = 1 + 8 + 8 + 1 + 8 // flag, capacity, slots used, has 0, value of 0
)

// layoutError refuses matrices laid out for another number of servers.
func layoutError(laidOut, servers int) error {
	return fmt.Errorf("psf matrices are laid out for %d servers; this job has %d, and their partitions cannot be moved by a snapshot "+
		"(use Matrix.Save and Client.LoadMatrix to move them to another number of servers)", laidOut, servers)
}

// Snapshot implements kv.Store: it writes every matrix's meta and rank
// p.Index's partitions of it, with the loads staged, in the format above.
func (s *Server) Snapshot(w io.Writer, p kv.Part) error {
	if p.Index < 0 || p.Of < 1 || p.Index >= p.Of {
		return fmt.Errorf("psf: snapshot of range %d of %d", p.Index, p.Of)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	type record struct {
		state uint8
		m     *serverMatrix
	}
	var recs []record
	if st := s.ranks[p.Index]; st != nil {
		for _, name := range sortedNames(st.matrices) {
			recs = append(recs, record{snapLive, st.matrices[name]})
		}
		for _, name := range sortedNames(st.staged) {
			recs = append(recs, record{snapStaged, st.staged[name]})
		}
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	b := make([]byte, 0, 64)
	b = append(b, snapMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(p.Index))
	b = binary.LittleEndian.AppendUint32(b, uint32(p.Of))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(recs)))
	if _, err := bw.Write(b); err != nil {
		return err
	}
	for _, r := range recs {
		if err := writeSnapRecord(bw, r.state, r.m); err != nil {
			return fmt.Errorf("psf: snapshot of matrix %q: %w", r.m.meta.Name, err)
		}
	}
	return bw.Flush()
}

// writeSnapRecord writes one matrix record.
func writeSnapRecord(w io.Writer, state uint8, m *serverMatrix) error {
	meta, err := encode(metaCodec, m.meta)
	if err != nil {
		return err
	}
	b := []byte{state}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(meta)))
	b = append(b, meta...)
	b = binary.LittleEndian.AppendUint64(b, m.gen)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.parts)))
	if _, err := w.Write(b); err != nil {
		return err
	}
	for _, id := range sortedKeys(m.parts) {
		p := m.parts[id]
		size, encode := densePartSize(p, true), func(w io.Writer) error { return encodeDensePart(w, p, true) }
		if p.sparse() {
			size, encode = tablesSize(p), func(w io.Writer) error { return encodeTables(w, p) }
		}
		b = binary.LittleEndian.AppendUint32(b[:0], uint32(id))
		b = binary.LittleEndian.AppendUint64(b, uint64(size))
		if _, err := w.Write(b); err != nil {
			return err
		}
		cw := &countingWriter{w: w}
		if err := encode(cw); err != nil {
			return err
		}
		if cw.n != size {
			return fmt.Errorf("partition %d: wrote %d bytes, announced %d", id, cw.n, size)
		}
	}
	return nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// tablesSize returns the bytes encodeTables writes.
func tablesSize(p *partition) int64 {
	n := int64(partHeaderSize)
	for _, t := range p.srows {
		if t == nil {
			n++
			continue
		}
		n += tableRowSize + 24*int64(t.n)
	}
	return n
}

// encodeTables writes the tables of a sparse partition, slot for slot.
func encodeTables(w io.Writer, p *partition) error {
	b := make([]byte, 0, partHeaderSize)
	b = append(b, tableMagic...)
	for _, v := range []int64{int64(p.meta.RowStart), int64(p.meta.RowEnd), int64(p.meta.ColBlock), int64(p.meta.NumColBlocks)} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	for _, t := range p.srows {
		b = b[:0]
		if t == nil {
			b = append(b, 0)
		} else {
			b = append(b, 1)
			b = binary.LittleEndian.AppendUint64(b, uint64(len(t.keys)))
			b = binary.LittleEndian.AppendUint64(b, uint64(t.n))
			var zero uint8
			if t.hasZero {
				zero = 1
			}
			b = append(b, zero)
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(t.zeroVal))
			for i, k := range t.keys {
				if k == 0 {
					continue
				}
				b = binary.LittleEndian.AppendUint64(b, uint64(i))
				b = binary.LittleEndian.AppendUint64(b, uint64(k))
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(t.vals[i]))
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// parseTables reads the tables of sparse partition pm written by
// encodeTables, checking that every table is one a server could hold: its
// slots within its capacity, each column where a lookup finds it, in the
// partition's column block.
func parseTables(body []byte, pm PartitionMeta) ([]*longTable[float64], error) {
	if len(body) < partHeaderSize || string(body[:8]) != tableMagic {
		return nil, errors.New("not the tables of a sparse partition")
	}
	var hdr [4]int64
	for i := range hdr {
		hdr[i] = int64(binary.LittleEndian.Uint64(body[8+8*i:]))
	}
	if hdr != [4]int64{int64(pm.RowStart), int64(pm.RowEnd), int64(pm.ColBlock), int64(pm.NumColBlocks)} {
		return nil, fmt.Errorf("holds rows [%d,%d) column block %d of %d, the layout says %s", hdr[0], hdr[1], hdr[2], hdr[3], pm)
	}
	d := body[partHeaderSize:]
	if len(d) < pm.RowEnd-pm.RowStart { // every row takes a byte at least
		return nil, fmt.Errorf("%d bytes for %d rows: truncated", len(d), pm.RowEnd-pm.RowStart)
	}
	rows := make([]*longTable[float64], pm.RowEnd-pm.RowStart)
	for i := range rows {
		if len(d) < 1 {
			return nil, fmt.Errorf("row %d: truncated", pm.RowStart+i)
		}
		flag := d[0]
		if flag == 0 {
			d = d[1:]
			continue
		}
		if flag != 1 || len(d) < tableRowSize {
			return nil, fmt.Errorf("row %d: bad or truncated table", pm.RowStart+i)
		}
		capacity := binary.LittleEndian.Uint64(d[1:])
		used := binary.LittleEndian.Uint64(d[9:])
		hasZero := d[17]
		zeroVal := math.Float64frombits(binary.LittleEndian.Uint64(d[18:]))
		d = d[tableRowSize:]
		if hasZero > 1 || capacity > maxTableCap || used > uint64(len(d))/24 {
			return nil, fmt.Errorf("row %d: a table of capacity %d with %d slots used (%d bytes left)", pm.RowStart+i, capacity, used, len(d))
		}
		if used > 0 && int(used) > tableLimit(int(capacity)) {
			return nil, fmt.Errorf("row %d: %d slots used of a table of capacity %d", pm.RowStart+i, used, capacity)
		}
		// The slots are checked before the table is made: a capacity or
		// a slot damaged in transit must not cost gigabytes first.
		if err := checkSlots(d[:24*used], int(capacity)); err != nil {
			return nil, fmt.Errorf("row %d: %w", pm.RowStart+i, err)
		}
		t := &longTable[float64]{}
		if capacity > 0 && (used > 0 || capacity <= maxEmptyTableCap) {
			t.alloc(int(capacity)) // a larger empty one holds no slots (setTable)
		}
		for j := 0; j < int(used); j++ {
			slot := binary.LittleEndian.Uint64(d[24*j:])
			k := int64(binary.LittleEndian.Uint64(d[24*j+8:]))
			t.keys[slot] = k
			t.vals[slot] = math.Float64frombits(binary.LittleEndian.Uint64(d[24*j+16:]))
		}
		t.n = int(used)
		for j := 0; j < int(used); j++ {
			slot := int(binary.LittleEndian.Uint64(d[24*j:]))
			k := t.keys[slot]
			if t.find(k) != slot {
				return nil, fmt.Errorf("row %d: column %d is in slot %d, where a lookup does not find it", pm.RowStart+i, k, slot)
			}
			if sparseColBlock(k, pm.NumColBlocks) != pm.ColBlock {
				return nil, fmt.Errorf("row %d: column %d is not in column block %d", pm.RowStart+i, k, pm.ColBlock)
			}
		}
		d = d[24*used:]
		if hasZero == 1 {
			if sparseColBlock(0, pm.NumColBlocks) != pm.ColBlock {
				return nil, fmt.Errorf("row %d: column 0 is not in column block %d", pm.RowStart+i, pm.ColBlock)
			}
			t.hasZero, t.zeroVal = true, zeroVal
		}
		rows[i] = t
	}
	if len(d) != 0 {
		return nil, fmt.Errorf("%d bytes past the last row", len(d))
	}
	return rows, nil
}

// checkSlots checks the used slots of a table of capacity c, as
// encodeTables writes them (slot, column, value, in slot order), without
// allocating: every slot is within c, after the one before it, and holds a
// column other than 0, and the slots from the column's home to its own
// are all used, as linear probing leaves them. One pass over the runs of
// used slots: an entry's home must be in its run, at or before it.
func checkSlots(ents []byte, c int) error {
	u := len(ents) / 24
	slot := func(j int) int { return int(binary.LittleEndian.Uint64(ents[24*j:])) }
	prev := -1
	for j := range u {
		s := binary.LittleEndian.Uint64(ents[24*j:])
		k := int64(binary.LittleEndian.Uint64(ents[24*j+8:]))
		if s >= uint64(c) || int(s) <= prev || k == 0 {
			return fmt.Errorf("slot %d of capacity %d holds column %d", s, c, k)
		}
		prev = int(s)
	}
	// A run that holds the last slot goes on at slot 0 when that is used:
	// wrap is where it starts (-1: no run wraps).
	wrap := -1
	if u > 0 && slot(0) == 0 && slot(u-1) == c-1 {
		j := u - 1
		for j > 0 && slot(j-1) == slot(j)-1 {
			j--
		}
		wrap = slot(j)
	}
	start := 0
	for j := range u {
		s, k := slot(j), int64(binary.LittleEndian.Uint64(ents[24*j+8:]))
		if j == 0 || s != slot(j-1)+1 {
			start = s
		}
		h := homeSlot(k, c)
		ok := start <= h && h <= s
		if start == 0 && wrap >= 0 {
			ok = h <= s || h >= wrap
		}
		if !ok {
			return fmt.Errorf("column %d is in slot %d of capacity %d, where a lookup does not find it", k, s, c)
		}
	}
	return nil
}

// Restore implements kv.Store: rank p.Index's partitions of every matrix,
// and its staged loads, become what the readers hold (no reader: none).
// Matrices the readers have are created, the others lose rank p.Index's
// partitions (and the server forgets a matrix it holds no range of). A
// reader of another range of this job's layout holds nothing of p, and is
// passed over. Matrices laid out for another number of servers cannot be
// restored: their partitions would belong to other servers (see
// layoutError); a snapshot of another layout that holds no matrix is
// passed over.
func (s *Server) Restore(rs []io.Reader, p kv.Part) error {
	if p.Index < 0 || p.Of < 1 || p.Index >= p.Of {
		return fmt.Errorf("psf: restore of range %d of %d", p.Index, p.Of)
	}
	fresh := newRankState()
	for i, r := range rs {
		if err := readSnapshot(r, p, fresh); err != nil {
			if len(rs) > 1 {
				return fmt.Errorf("%w (snapshot %d of %d)", err, i+1, len(rs))
			}
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fresh.empty() {
		delete(s.ranks, p.Index)
	} else {
		s.ranks[p.Index] = fresh
	}
	return nil
}

// readSnapshot adds to st the matrices and staged loads of range p that a
// snapshot holds.
func readSnapshot(r io.Reader, p kv.Part, st *rankState) error {
	br := bufio.NewReaderSize(r, 1<<16)
	var hdr [snapHeaderSize]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return fmt.Errorf("psf: snapshot of range %d: header: %w", p.Index, err)
	}
	switch magic := string(hdr[:8]); {
	case magic == snapMagic:
	case magic[:7] == snapMagicPrefix:
		return fmt.Errorf("psf: snapshot of range %d: format version %q, this server reads %q", p.Index, magic[7:], snapMagic[7:])
	default:
		return fmt.Errorf("psf: snapshot of range %d: not a psf snapshot", p.Index)
	}
	index := int(binary.LittleEndian.Uint32(hdr[8:]))
	of := int(binary.LittleEndian.Uint32(hdr[12:]))
	count := binary.LittleEndian.Uint32(hdr[16:])
	switch {
	case of != p.Of && count == 0:
		return nil // no matrix: nothing to move
	case of != p.Of:
		return layoutError(of, p.Of)
	case index != p.Index:
		return nil // another range: none of its partitions are p's
	}
	for i := uint32(0); i < count; i++ {
		if err := readSnapRecord(br, p, st); err != nil {
			return fmt.Errorf("psf: snapshot of range %d: record %d: %w", p.Index, i, err)
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return fmt.Errorf("psf: snapshot of range %d: bytes past its %d records", p.Index, count)
	}
	return nil
}

// readSnapRecord reads one matrix record into st.
func readSnapRecord(br *bufio.Reader, p kv.Part, st *rankState) error {
	var b [12]byte
	if _, err := io.ReadFull(br, b[:5]); err != nil {
		return err
	}
	state, n := b[0], binary.LittleEndian.Uint32(b[1:])
	if state != snapLive && state != snapStaged {
		return fmt.Errorf("state %d", state)
	}
	if n > maxSnapMeta {
		return fmt.Errorf("a meta of %d bytes", n)
	}
	raw := make([]byte, n)
	if _, err := io.ReadFull(br, raw); err != nil {
		return err
	}
	meta, err := decode(metaCodec, raw)
	if err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	if err := meta.validate(); err != nil {
		return err
	}
	if meta.NumServers != p.Of {
		return layoutError(meta.NumServers, p.Of)
	}
	into := st.matrices
	if state == snapStaged {
		into = st.staged
	}
	if into[meta.Name] != nil {
		return fmt.Errorf("matrix %q is there twice", meta.Name)
	}
	if _, err := io.ReadFull(br, b[:12]); err != nil {
		return err
	}
	// The partitions are made as their records are read, not from the
	// meta first: a damaged meta that is still valid could ask for
	// gigabytes of partitions (one did, 7.5 GB) that no record backs.
	m := &serverMatrix{meta: meta, parts: make(map[int]*partition), gen: binary.LittleEndian.Uint64(b[:])}
	first, count := rankPartitions(meta, p.Index)
	if nparts := binary.LittleEndian.Uint32(b[8:]); int64(nparts) != int64(count) {
		return fmt.Errorf("matrix %q: %d partitions, rank %d has %d", meta.Name, nparts, p.Index, count)
	}
	var body bytes.Buffer
	for want := first; want < meta.NumPartitions(); want += meta.NumServers {
		if _, err := io.ReadFull(br, b[:12]); err != nil {
			return err
		}
		id, size := binary.LittleEndian.Uint32(b[:]), binary.LittleEndian.Uint64(b[4:])
		if int64(id) != int64(want) {
			return fmt.Errorf("matrix %q: partition %d where %d was due", meta.Name, id, want)
		}
		if size > math.MaxInt64 {
			return fmt.Errorf("matrix %q: partition %d of %d bytes", meta.Name, id, size)
		}
		// Read as the bytes come: a corrupt size ends at the end of the
		// data, without allocating it first.
		body.Reset()
		if k, err := io.CopyN(&body, br, int64(size)); err != nil {
			return fmt.Errorf("matrix %q: partition %d: %d bytes of %d: %w", meta.Name, id, k, size, err)
		}
		pm := meta.Partition(want)
		part := &partition{meta: pm}
		m.parts[want] = part
		if part.sparse() {
			rows, err := parseTables(body.Bytes(), pm)
			if err != nil {
				return fmt.Errorf("matrix %q: partition %d: %w", meta.Name, id, err)
			}
			part.srows = rows
			continue
		}
		rows, err := parseDensePart(fmt.Sprintf("matrix %q partition %d", meta.Name, id), body.Bytes(),
			metaFilePart{ID: pm.ID, RowStart: pm.RowStart, RowEnd: pm.RowEnd, ColStart: pm.ColStart, ColEnd: pm.ColEnd})
		if err != nil {
			return err
		}
		part.rows = rows
	}
	into[meta.Name] = m
	return nil
}

// sortedNames returns the names of a map of matrices in order.
func sortedNames(m map[string]*serverMatrix) []string {
	out := make([]string, 0, len(m))
	for name := range m {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
