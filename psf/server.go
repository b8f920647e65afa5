package psf

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime/debug"
	"slices"
	"sort"
	"sync"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/postoffice"
)

// Option configures a Server or a Client.
type Option func(*options)

type options struct {
	appID      int
	customerID int
	ckptDir    string
	fallback   kv.ReqHandle[uint8]
}

func collectOptions(opts []Option) options {
	o := options{appID: DefaultAppID}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithAppID sets the KV app id psf's servers and clients use (DefaultAppID
// by default); servers and clients of one job must agree.
func WithAppID(id int) Option { return func(o *options) { o.appID = id } }

// WithCustomerID sets a Client's customer id (default 0); several clients
// in one process need different ones.
func WithCustomerID(id int) Option { return func(o *options) { o.customerID = id } }

// WithCheckpointDir sets the directory a Server writes checkpoints to and
// restores them from (Matrix.Checkpoint, Matrix.Recover,
// Server.RestoreLatest). Without it checkpoints are refused.
func WithCheckpointDir(dir string) Option { return func(o *options) { o.ckptDir = dir } }

// WithFallback sets the handle a Server's Handle passes requests with
// commands outside psf's range to (see CmdBase). Without one such requests
// are answered with no values. A managed job (see NewServer) refuses it:
// the requests of a fallback handle cannot be replicated.
func WithFallback(h kv.ReqHandle[uint8]) Option { return func(o *options) { o.fallback = h } }

// Server holds the partitions of psf matrices assigned to one server node
// and runs kernels on them. Requests are handled one at a time, in the
// order the KV server delivers them.
//
// A Server is also a kv.Store[uint8] (Changes, Apply, Snapshot, Restore),
// which is how NewServer installs it in a managed job: its state is kept
// by key range, a range being that of the server of one rank, and a
// request changes only the range of its keys. A server may hold several
// ranges at once (its own and, in a replicated job, those it holds as a
// backup or took over).
type Server struct {
	po   *postoffice.Postoffice
	kvs  *kv.KVServer[uint8] // nil for NewHandler
	opts options
	log  zerolog.Logger
	// managed: NewServer installed the server as its KV server's store in
	// a managed job.
	managed bool

	mu    sync.Mutex         // guards ranks and the data of every matrix
	ranks map[int]*rankState // by the rank of the key range
	undo  undoLog            // of the update kernel running
}

// rankState is what a server holds of one key range, that of the server
// of one rank: that rank's partitions of every matrix. Requests with keys
// in the range change it, and nothing else does, so that every server
// holding the range holds the same.
type rankState struct {
	matrices map[string]*serverMatrix
	staged   map[string]*serverMatrix // loaded, waiting for opLoadCommit
}

func newRankState() *rankState {
	return &rankState{matrices: make(map[string]*serverMatrix), staged: make(map[string]*serverMatrix)}
}

func (st *rankState) empty() bool { return len(st.matrices) == 0 && len(st.staged) == 0 }

// serverMatrix is the part of a matrix that one key range holds: the
// partitions of one rank.
type serverMatrix struct {
	meta  MatrixMeta
	parts map[int]*partition // by partition id, only this rank's
	gen   uint64             // set by a create, so that only it can undo itself (opDrop); 0 if a load made the matrix
}

// partition holds one partition's values, row by row. For a dense matrix
// rows[i] is row RowStart+i, nil until first written (a nil row is all
// zeros), so rows never written take no memory, are read as zeros without
// being allocated, and are not saved. For a sparse matrix srows[i] holds
// the entries of row RowStart+i that are not +0 (nil: none).
type partition struct {
	meta  PartitionMeta
	rows  [][]float64
	srows []*longTable[float64]
}

// sparse reports whether p is a sparse matrix's partition.
func (p *partition) sparse() bool { return p.meta.Sparse }

// table returns the table of the partition's i-th row, allocating it if
// the row holds nothing.
func (p *partition) table(i int) *longTable[float64] {
	if p.srows[i] == nil {
		p.srows[i] = newLongTable[float64](0)
	}
	return p.srows[i]
}

// setTable makes t the partition's i-th row (nil if t is empty). A table
// presized for more entries than it got keeps its slots unless it has
// none, as after Delete: a snapshot then states no large empty table,
// which a restore would have to allocate.
func (p *partition) setTable(i int, t *longTable[float64]) {
	switch {
	case t.Len() == 0:
		t = nil
	case t.n == 0 && len(t.keys) > maxEmptyTableCap:
		t.keys, t.vals, t.limit = nil, nil, 0
	}
	p.srows[i] = t
}

// row returns the storage of the partition's i-th row, allocating it
// (zeros) if it was never written.
func (p *partition) row(i int) []float64 {
	if p.rows[i] == nil {
		p.rows[i] = make([]float64, p.meta.Width())
	}
	return p.rows[i]
}

// newServerMatrix returns rank's partitions of a matrix, of zeros.
func newServerMatrix(meta MatrixMeta, rank int) *serverMatrix {
	m := &serverMatrix{meta: meta, parts: make(map[int]*partition)}
	n := meta.NumPartitions()
	for id := rank % meta.NumServers; id < n; id += meta.NumServers {
		m.parts[id] = newPartition(meta.Partition(id))
	}
	return m
}

// rankPartitions returns the first of the partitions of meta that server
// rank holds (the others follow every NumServers), and how many it holds.
func rankPartitions(meta MatrixMeta, rank int) (first, count int) {
	n, first := meta.NumPartitions(), rank%meta.NumServers
	if first >= n {
		return first, 0
	}
	return first, (n - first + meta.NumServers - 1) / meta.NumServers
}

func newPartition(pm PartitionMeta) *partition {
	if pm.Sparse {
		return &partition{meta: pm, srows: make([]*longTable[float64], pm.RowEnd-pm.RowStart)}
	}
	return &partition{meta: pm, rows: make([][]float64, pm.RowEnd-pm.RowStart)}
}

// NewServer starts psf on a server node: it registers a KV server of bytes
// under the app id (DefaultAppID unless WithAppID) whose handle is
// s.Handle. Call it after the node has started. A node that replaced a
// dead server (po.IsRecovery()) and has a checkpoint directory first
// restores every matrix from its latest checkpoint, before answering any
// request.
//
// In a managed job (po.Managed(): PS_REPLICAS or PS_CHECKPOINT_DIR) the
// server is instead its KV server's store (kv.KVServer.SetStore): the
// framework replicates the requests that change matrices to every server
// holding their key range, copies ranges to servers that join them, and
// writes them to its snapshots; a replacement server gets its ranges from
// the framework, not from psf's checkpoints. WithFallback is refused there.
func NewServer(po *postoffice.Postoffice, opts ...Option) (*Server, error) {
	s := NewHandler(po, opts...)
	if po.Managed() && s.opts.fallback != nil {
		return nil, errors.New("psf: WithFallback cannot be used in a managed job (PS_REPLICAS, PS_CHECKPOINT_DIR): " +
			"the requests of a fallback handle cannot be replicated; serve them with a KV server of another app id")
	}
	kvs, err := kv.NewKVServer[uint8](po, s.opts.appID)
	if err != nil {
		return nil, err
	}
	s.kvs = kvs
	if po.Managed() {
		s.managed = true
		if err := kvs.SetStore(s); err != nil {
			kvs.Close()
			return nil, err
		}
		return s, nil
	}
	if po.IsRecovery() && s.opts.ckptDir != "" {
		if err := s.RestoreLatest(); err != nil {
			s.log.Error().Err(err).Msg("psf: restoring the latest checkpoint")
		}
	}
	if err := kvs.SetRequestHandle(s.Handle); err != nil {
		kvs.Close()
		return nil, err
	}
	return s, nil
}

// NewHandler returns a Server without a KV server of its own: install
// s.Handle on a kv.KVServer[uint8] yourself (it passes commands outside
// psf's range to WithFallback's handle), or install s as the KV server's
// store (SetStore; WithFallback has no effect then).
func NewHandler(po *postoffice.Postoffice, opts ...Option) *Server {
	return &Server{
		po:    po,
		opts:  collectOptions(opts),
		log:   po.Logger(),
		ranks: make(map[int]*rankState),
	}
}

// Close stops the Server's KV server (NewServer only); its matrices are
// dropped.
func (s *Server) Close() {
	if s.kvs != nil {
		s.kvs.Close()
	}
	s.mu.Lock()
	s.ranks = make(map[int]*rankState)
	s.mu.Unlock()
}

// Matrices returns the metas of the matrices the server holds (in any of
// its key ranges), by name.
func (s *Server) Matrices() []MatrixMeta {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[string]bool)
	var out []MatrixMeta
	for _, r := range sortedKeys(s.ranks) {
		for name, m := range s.ranks[r].matrices {
			if !seen[name] {
				seen[name] = true
				out = append(out, m.meta)
			}
		}
	}
	slices.SortFunc(out, func(a, b MatrixMeta) int { return cmp.Compare(a.Name, b.Name) })
	if out == nil {
		out = []MatrixMeta{}
	}
	return out
}

// state returns the state of range rank, creating it if need be; s.mu is
// held.
func (s *Server) state(rank int) *rankState {
	st := s.ranks[rank]
	if st == nil {
		st = newRankState()
		s.ranks[rank] = st
	}
	return st
}

// matrixLocked returns range rank's part of matrix name, or nil; s.mu is
// held.
func (s *Server) matrixLocked(rank int, name string) *serverMatrix {
	if st := s.ranks[rank]; st != nil {
		return st.matrices[name]
	}
	return nil
}

// tidy forgets range rank if it holds nothing; s.mu is held.
func (s *Server) tidy(rank int) {
	if st := s.ranks[rank]; st != nil && st.empty() {
		delete(s.ranks, rank)
	}
}

// rangeOf returns the rank of the server whose key range holds key.
func (s *Server) rangeOf(key uint64) (int, bool) {
	ranges := s.po.ServerKeyRanges()
	i := sort.Search(len(ranges), func(i int) bool { return ranges[i].Last || key < ranges[i].End })
	if i < len(ranges) && ranges[i].Contains(key) {
		return i, true
	}
	return 0, false
}

// Handle answers one KV request: psf commands (CmdFunc, CmdSystem) are run
// key by key and answered with one payload per key (other commands of the
// reserved range with an error), commands outside the range go to the
// fallback handle.
func (s *Server) Handle(meta kv.KVMeta, data kv.KVPairs[uint8], srv *kv.KVServer[uint8]) {
	if (meta.Cmd < CmdBase || meta.Cmd >= CmdEnd) && s.opts.fallback != nil {
		s.opts.fallback(meta, data, srv)
		return
	}
	s.respond(meta, s.apply(meta, data, false), srv)
}

// apply runs a request and returns its answer: for a pull, the request's
// keys with one payload each (a result or an error); nothing for a push
// alone. Commands outside psf's range are answered with empty payloads.
// With checkPush, a request without push (Push false) changes nothing:
// its keys that would are not run (see Apply).
func (s *Server) apply(meta kv.KVMeta, data kv.KVPairs[uint8], checkPush bool) kv.KVPairs[uint8] {
	if meta.Cmd < CmdBase || meta.Cmd >= CmdEnd {
		if !meta.Pull {
			return kv.KVPairs[uint8]{}
		}
		return kv.KVPairs[uint8]{Keys: data.Keys, Lens: make([]int32, len(data.Keys))}
	}
	readOnly := checkPush && !meta.Push
	payloads, err := splitPayloads(data)
	results := make([][]byte, len(data.Keys))
	for i, key := range data.Keys {
		if err != nil {
			results[i] = errorResponse(fmt.Errorf("%w: %v", ErrBadRequest, err))
			continue
		}
		var rerr error
		switch meta.Cmd {
		case CmdFunc:
			results[i], rerr = s.serveFunc(key, payloads[i], readOnly)
		case CmdSystem:
			var res []byte
			res, rerr = s.serveSystem(meta, key, payloads[i], readOnly)
			results[i] = encodeResponse(res, rerr)
		default:
			rerr = fmt.Errorf("%w: command %d is reserved by psf but unknown to this server", ErrBadRequest, meta.Cmd)
		}
		if rerr == nil && len(results[i]) > maxPayload {
			rerr = fmt.Errorf("a result of %d bytes exceeds one message's 2 GiB; ask for less or use smaller blocks", len(results[i]))
		}
		if rerr != nil {
			s.log.Debug().Err(rerr).Int("sender", meta.Sender).Msg("psf: request failed")
			results[i] = errorResponse(rerr)
		}
	}
	if !meta.Pull {
		return kv.KVPairs[uint8]{}
	}
	res := kv.KVPairs[uint8]{Keys: data.Keys, Lens: make([]int32, len(results))}
	total := 0
	for i, r := range results {
		res.Lens[i] = int32(len(r))
		total += len(r)
	}
	if len(results) == 1 {
		res.Vals = results[0]
	} else {
		res.Vals = make([]uint8, 0, total)
		for _, r := range results {
			res.Vals = append(res.Vals, r...)
		}
	}
	return res
}

func (s *Server) respond(meta kv.KVMeta, res kv.KVPairs[uint8], srv *kv.KVServer[uint8]) {
	if err := srv.Response(meta, res); err != nil {
		s.log.Warn().Err(err).Msg("psf: response failed")
	}
}

// splitPayloads cuts a request's values into one payload per key.
func splitPayloads(data kv.KVPairs[uint8]) ([][]byte, error) {
	n := len(data.Keys)
	out := make([][]byte, n)
	if n == 0 {
		return out, nil
	}
	if len(data.Lens) == 0 {
		if len(data.Vals)%n != 0 {
			return nil, fmt.Errorf("%d bytes for %d keys", len(data.Vals), n)
		}
		per := len(data.Vals) / n
		for i := range out {
			out[i] = data.Vals[i*per : (i+1)*per]
		}
		return out, nil
	}
	if len(data.Lens) != n {
		return nil, fmt.Errorf("%d lens for %d keys", len(data.Lens), n)
	}
	off := 0
	for i, l := range data.Lens {
		if l < 0 || off+int(l) > len(data.Vals) {
			return nil, fmt.Errorf("lens do not match %d bytes", len(data.Vals))
		}
		out[i] = data.Vals[off : off+int(l)]
		off += int(l)
	}
	return out, nil
}

// serveFunc runs a function request for the partition key names and
// returns the response payload, or the error. The key's range says whose
// partitions are meant: key = ranges[r].Begin + the partition's id, and
// the partition is one of rank r's. With readOnly an update kernel is not
// run, and answers success.
func (s *Server) serveFunc(key uint64, payload []byte, readOnly bool) ([]byte, error) {
	h, err := decodeFuncRequest(payload)
	if err != nil {
		return nil, err
	}
	k, ok := Lookup(h.fn)
	if !ok {
		return nil, fmt.Errorf("%w %q (not registered on server %d)", ErrUnknownFunction, h.fn, s.po.MyRank())
	}
	if k.update() != (h.kind == kindUpdate) || h.kind != kindGet && h.kind != kindUpdate {
		return nil, fmt.Errorf("%w: function %q called as the wrong kind (%d)", ErrBadRequest, h.fn, h.kind)
	}
	if readOnly && k.update() {
		// Applied when it was first asked (see Apply): its answer then
		// was this, unless it failed.
		return okResponse(0).Bytes(), nil
	}
	rank, ok := s.rangeOf(key)
	if !ok {
		return nil, fmt.Errorf("%w: key %d is in no server's range", ErrBadRequest, key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.matrixLocked(rank, h.matrix)
	if m == nil {
		return nil, fmt.Errorf("%w %q on server %d", ErrNoMatrix, h.matrix, rank)
	}
	id := key - s.po.ServerKeyRanges()[rank].Begin
	var part *partition
	if id < uint64(m.meta.NumPartitions()) && int(id)%m.meta.NumServers == rank {
		part = m.parts[int(id)]
	}
	if part == nil {
		return nil, fmt.Errorf("%w: matrix %q has no partition %d on server %d", ErrBadRequest, h.matrix, id, rank)
	}
	blk := &Block{m: m, part: part, write: k.update()}
	if g := k.guard(); k.update() && g != guardNone {
		s.undo.reset(g == guardAll)
		blk.undo = &s.undo
	}
	out := okResponse(0)
	err = s.runKernel(k, h.fn, blk, h.param, out)
	if blk.undo != nil {
		if err != nil {
			blk.undo.restore()
		}
		blk.undo.reset(false)
	}
	if err != nil {
		return nil, fmt.Errorf("%s on matrix %q: %w", h.fn, h.matrix, err)
	}
	return out.Bytes(), nil
}

// runKernel runs kernel k (named fn) on blk, answering a panic as an error.
func (s *Server) runKernel(k Kernel, fn string, blk *Block, param []byte, out *Encoder) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error().Interface("panic", p).Str("function", fn).Bytes("stack", debug.Stack()).Msg("psf: kernel panicked")
			err = fmt.Errorf("function %q panicked: %v", fn, p)
		}
	}()
	return k.serve(blk, param, out)
}

// sysChanges reports whether matrix operation op changes a server's
// matrices (a load stages values, which its commit takes). Saves and
// commits write files, which is no change of state: the head of a range
// alone runs them.
func sysChanges(op uint8) bool {
	switch op {
	case opCreate, opDrop, opDelete, opLoad, opLoadCommit, opLoadAbort:
		return true
	}
	return false
}

// opNames name the matrix operations in messages.
var opNames = map[uint8]string{
	opCreate: "create", opDelete: "delete", opMeta: "meta", opSave: "save", opCommit: "commit",
	opLoad: "load", opLoadCommit: "load commit", opLoadAbort: "load abort", opDrop: "drop",
}

// serveSystem runs a matrix operation on the key range of key (its
// server's first key). With readOnly, an operation that changes the
// server's state is refused.
func (s *Server) serveSystem(meta kv.KVMeta, key uint64, payload []byte, readOnly bool) ([]byte, error) {
	r, err := decodeSysRequest(payload)
	if err != nil {
		return nil, err
	}
	if err := validName("matrix", r.matrix); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if readOnly && sysChanges(r.op) {
		return nil, fmt.Errorf("psf: the %s of %q was not run again: it was asked again without a push, and its first answer is lost", opNames[r.op], r.matrix)
	}
	rank, ok := s.rangeOf(key)
	if !ok {
		return nil, fmt.Errorf("%w: key %d is in no server's range", ErrBadRequest, key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.tidy(rank)
	st := s.state(rank)
	switch r.op {
	case opCreate:
		mm, err := decode(metaCodec, r.args)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		if mm.Name != r.matrix {
			return nil, fmt.Errorf("%w: create %q with a meta named %q", ErrBadRequest, r.matrix, mm.Name)
		}
		gen, err := s.createLocked(rank, mm, createGen(meta, rank, mm.Name))
		if err != nil {
			return nil, err
		}
		return encode(genCodec, gen)
	case opDrop:
		gen, err := decode(genCodec, r.args)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		if m := st.matrices[r.matrix]; m != nil && gen != 0 && m.gen == gen {
			delete(st.matrices, r.matrix)
		}
		return nil, nil
	case opDelete:
		delete(st.matrices, r.matrix)
		delete(st.staged, r.matrix)
		if s.opts.ckptDir != "" {
			if err := removeCheckpoints(s.opts.ckptDir, r.matrix); err != nil {
				return nil, fmt.Errorf("psf: matrix %q dropped on server %d, but removing its checkpoints failed: %w", r.matrix, rank, err)
			}
		}
		return nil, nil
	case opLoadCommit:
		m := st.staged[r.matrix]
		if m == nil {
			return nil, fmt.Errorf("psf: no load of %q to commit on server %d", r.matrix, rank)
		}
		delete(st.staged, r.matrix)
		st.matrices[r.matrix] = m
		return nil, nil
	case opLoadAbort:
		delete(st.staged, r.matrix)
		return nil, nil
	case opMeta:
		m := st.matrices[r.matrix]
		if m == nil {
			return nil, fmt.Errorf("%w %q on server %d", ErrNoMatrix, r.matrix, rank)
		}
		return encode(metaCodec, m.meta)
	case opSave, opCommit, opLoad:
		a, err := decode(storeArgsCodec, r.args)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		dir, err := s.storeDir(a)
		if err != nil {
			return nil, err
		}
		switch r.op {
		case opSave:
			m := st.matrices[r.matrix]
			if m == nil {
				return nil, fmt.Errorf("%w %q on server %d", ErrNoMatrix, r.matrix, rank)
			}
			return nil, savePartitions(dir, m)
		case opCommit:
			m := st.matrices[r.matrix]
			if m == nil {
				return nil, fmt.Errorf("%w %q on server %d", ErrNoMatrix, r.matrix, rank)
			}
			if err := commitSave(dir, m.meta); err != nil {
				return nil, err
			}
			if a.checkpoint {
				return nil, writeLatest(s.opts.ckptDir, r.matrix, a.id)
			}
			return nil, nil
		default: // phase one of a load: read and keep the values aside
			m, err := s.readSaved(dir, r.matrix, a.meta, rank)
			if err != nil {
				return nil, err
			}
			st.staged[r.matrix] = m
			return encode(metaCodec, m.meta)
		}
	}
	return nil, fmt.Errorf("%w: unknown operation %d", ErrBadRequest, r.op)
}

// createGen returns the generation of the matrix a create makes: a hash of
// the request's origin (sender, customer, timestamp), the range and the
// matrix name, never 0. Every server applying the create (the head of the
// range and its backups, or a new head it is sent again to) computes the
// same, so that the drop undoing that create (opDrop) finds it on each,
// and no other create's drop does.
func createGen(meta kv.KVMeta, rank int, name string) uint64 {
	h := fnv.New64a()
	var b [32]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(int64(meta.Sender)))
	binary.LittleEndian.PutUint64(b[8:], uint64(int64(meta.CustomerID)))
	binary.LittleEndian.PutUint64(b[16:], uint64(int64(meta.Timestamp)))
	binary.LittleEndian.PutUint64(b[24:], uint64(int64(rank)))
	h.Write(b[:])
	h.Write([]byte(name))
	if g := h.Sum64(); g != 0 {
		return g
	}
	return 1
}

// createLocked creates rank's partitions of a matrix, or accepts an
// identical one. It returns the new matrix's generation gen (which opDrop
// takes to undo the create), or 0 if the matrix was there already.
func (s *Server) createLocked(rank int, meta MatrixMeta, gen uint64) (uint64, error) {
	if err := meta.validate(); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if meta.NumServers != s.po.NumServers() {
		return 0, fmt.Errorf("%w: matrix %q is laid out for %d servers, the job has %d", ErrBadRequest, meta.Name, meta.NumServers, s.po.NumServers())
	}
	st := s.state(rank)
	if m := st.matrices[meta.Name]; m != nil {
		if m.meta != meta {
			return 0, fmt.Errorf("psf: matrix %q exists with another shape or layout (%+v, asked %+v)", meta.Name, m.meta, meta)
		}
		return 0, nil
	}
	m := newServerMatrix(meta, rank)
	m.gen = gen
	st.matrices[meta.Name] = m
	return m.gen, nil
}

// storeDir returns the directory a save, commit or load works in.
func (s *Server) storeDir(a storeArgs) (string, error) {
	if !a.checkpoint {
		if a.dir == "" {
			return "", fmt.Errorf("%w: empty directory", ErrBadRequest)
		}
		return a.dir, nil
	}
	if s.opts.ckptDir == "" {
		return "", errors.New("psf: this server has no checkpoint directory (WithCheckpointDir)")
	}
	if a.id < 0 {
		return "", fmt.Errorf("%w: negative checkpoint id %d", ErrBadRequest, a.id)
	}
	return checkpointDir(s.opts.ckptDir, a.id), nil
}
