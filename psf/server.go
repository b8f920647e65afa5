package psf

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

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
// are answered with no values.
func WithFallback(h kv.ReqHandle[uint8]) Option { return func(o *options) { o.fallback = h } }

// Server holds the partitions of psf matrices assigned to one server node
// and runs kernels on them. Requests are handled one at a time, in the
// order the KV server delivers them.
type Server struct {
	po   *postoffice.Postoffice
	kvs  *kv.KVServer[uint8] // nil for NewHandler
	opts options
	log  zerolog.Logger

	mu       sync.Mutex // guards matrices, staged, undo and the data of every matrix
	matrices map[string]*serverMatrix
	staged   map[string]*serverMatrix // loaded, waiting for opLoadCommit
	undo     undoLog                  // of the update kernel running
	lastGen  uint64                   // the generation of the last matrix created (starts at the clock, so that a restarted server does not reuse one)
}

// serverMatrix is the part of a matrix one server holds.
type serverMatrix struct {
	meta  MatrixMeta
	parts map[int]*partition // by partition id, only this server's
	gen   uint64             // set by a create, so that only it can undo itself (opDrop)
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

// setTable makes t the partition's i-th row (nil if t is empty).
func (p *partition) setTable(i int, t *longTable[float64]) {
	if t.Len() == 0 {
		t = nil
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

func newServerMatrix(meta MatrixMeta, rank int) *serverMatrix {
	m := &serverMatrix{meta: meta, parts: make(map[int]*partition)}
	n := meta.NumPartitions()
	for id := rank % meta.NumServers; id < n; id += meta.NumServers {
		m.parts[id] = newPartition(meta.Partition(id))
	}
	return m
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
func NewServer(po *postoffice.Postoffice, opts ...Option) (*Server, error) {
	s := NewHandler(po, opts...)
	kvs, err := kv.NewKVServer[uint8](po, s.opts.appID)
	if err != nil {
		return nil, err
	}
	s.kvs = kvs
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
// psf's range to WithFallback's handle).
func NewHandler(po *postoffice.Postoffice, opts ...Option) *Server {
	return &Server{
		po:       po,
		opts:     collectOptions(opts),
		log:      po.Logger(),
		matrices: make(map[string]*serverMatrix),
		staged:   make(map[string]*serverMatrix),
		lastGen:  uint64(time.Now().UnixNano()),
	}
}

// Close stops the Server's KV server (NewServer only); its matrices are
// dropped.
func (s *Server) Close() {
	if s.kvs != nil {
		s.kvs.Close()
	}
	s.mu.Lock()
	s.matrices = make(map[string]*serverMatrix)
	s.staged = make(map[string]*serverMatrix)
	s.mu.Unlock()
}

// Matrices returns the metas of the matrices the server holds.
func (s *Server) Matrices() []MatrixMeta {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]MatrixMeta, 0, len(s.matrices))
	for _, m := range s.matrices {
		out = append(out, m.meta)
	}
	return out
}

// Handle answers one KV request: psf commands (CmdFunc, CmdSystem) are run
// key by key and answered with one payload per key (other commands of the
// reserved range with an error), commands outside the range go to the
// fallback handle.
func (s *Server) Handle(meta kv.KVMeta, data kv.KVPairs[uint8], srv *kv.KVServer[uint8]) {
	if meta.Cmd < CmdBase || meta.Cmd >= CmdEnd {
		if s.opts.fallback != nil {
			s.opts.fallback(meta, data, srv)
			return
		}
		var res kv.KVPairs[uint8]
		if meta.Pull {
			res = kv.KVPairs[uint8]{Keys: data.Keys, Lens: make([]int32, len(data.Keys))}
		}
		s.respond(meta, res, srv)
		return
	}
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
			results[i], rerr = s.serveFunc(key, payloads[i])
		case CmdSystem:
			var res []byte
			res, rerr = s.serveSystem(payloads[i])
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
		s.respond(meta, kv.KVPairs[uint8]{}, srv)
		return
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
	s.respond(meta, res, srv)
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
// returns the response payload, or the error.
func (s *Server) serveFunc(key uint64, payload []byte) ([]byte, error) {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.matrices[h.matrix]
	if m == nil {
		return nil, fmt.Errorf("%w %q on server %d", ErrNoMatrix, h.matrix, s.po.MyRank())
	}
	rank := s.po.MyRank()
	ranges := s.po.ServerKeyRanges()
	if rank < 0 || rank >= len(ranges) || !ranges[rank].Contains(key) {
		return nil, fmt.Errorf("%w: key %d is not in server %d's range", ErrBadRequest, key, rank)
	}
	id := key - ranges[rank].Begin
	var part *partition
	if id < uint64(m.meta.NumPartitions()) {
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

// serveSystem runs a matrix operation.
func (s *Server) serveSystem(payload []byte) ([]byte, error) {
	r, err := decodeSysRequest(payload)
	if err != nil {
		return nil, err
	}
	if err := validName("matrix", r.matrix); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.op {
	case opCreate:
		meta, err := decode(metaCodec, r.args)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		if meta.Name != r.matrix {
			return nil, fmt.Errorf("%w: create %q with a meta named %q", ErrBadRequest, r.matrix, meta.Name)
		}
		gen, err := s.createLocked(meta)
		if err != nil {
			return nil, err
		}
		return encode(genCodec, gen)
	case opDrop:
		gen, err := decode(genCodec, r.args)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
		if m := s.matrices[r.matrix]; m != nil && gen != 0 && m.gen == gen {
			delete(s.matrices, r.matrix)
		}
		return nil, nil
	case opDelete:
		delete(s.matrices, r.matrix)
		delete(s.staged, r.matrix)
		if s.opts.ckptDir != "" {
			if err := removeCheckpoints(s.opts.ckptDir, r.matrix); err != nil {
				return nil, fmt.Errorf("psf: matrix %q dropped on server %d, but removing its checkpoints failed: %w", r.matrix, s.po.MyRank(), err)
			}
		}
		return nil, nil
	case opLoadCommit:
		m := s.staged[r.matrix]
		if m == nil {
			return nil, fmt.Errorf("psf: no load of %q to commit on server %d", r.matrix, s.po.MyRank())
		}
		delete(s.staged, r.matrix)
		s.matrices[r.matrix] = m
		return nil, nil
	case opLoadAbort:
		delete(s.staged, r.matrix)
		return nil, nil
	case opMeta:
		m := s.matrices[r.matrix]
		if m == nil {
			return nil, fmt.Errorf("%w %q on server %d", ErrNoMatrix, r.matrix, s.po.MyRank())
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
			m := s.matrices[r.matrix]
			if m == nil {
				return nil, fmt.Errorf("%w %q on server %d", ErrNoMatrix, r.matrix, s.po.MyRank())
			}
			return nil, savePartitions(dir, m)
		case opCommit:
			m := s.matrices[r.matrix]
			if m == nil {
				return nil, fmt.Errorf("%w %q on server %d", ErrNoMatrix, r.matrix, s.po.MyRank())
			}
			if err := commitSave(dir, m.meta); err != nil {
				return nil, err
			}
			if a.checkpoint {
				return nil, writeLatest(s.opts.ckptDir, r.matrix, a.id)
			}
			return nil, nil
		default: // phase one of a load: read and keep the values aside
			m, err := s.readSaved(dir, r.matrix, a.meta)
			if err != nil {
				return nil, err
			}
			s.staged[r.matrix] = m
			return encode(metaCodec, m.meta)
		}
	}
	return nil, fmt.Errorf("%w: unknown operation %d", ErrBadRequest, r.op)
}

// createLocked creates a matrix, or accepts an identical one. It returns
// the new matrix's generation (which opDrop takes to undo the create), or 0
// if the matrix was there already.
func (s *Server) createLocked(meta MatrixMeta) (uint64, error) {
	if err := meta.validate(); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if meta.NumServers != s.po.NumServers() {
		return 0, fmt.Errorf("%w: matrix %q is laid out for %d servers, the job has %d", ErrBadRequest, meta.Name, meta.NumServers, s.po.NumServers())
	}
	if m := s.matrices[meta.Name]; m != nil {
		if m.meta != meta {
			return 0, fmt.Errorf("psf: matrix %q exists with another shape or layout (%+v, asked %+v)", meta.Name, m.meta, meta)
		}
		return 0, nil
	}
	m := newServerMatrix(meta, s.po.MyRank())
	s.lastGen++
	m.gen = s.lastGen
	s.matrices[meta.Name] = m
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
