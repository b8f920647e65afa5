package psf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/postoffice"
)

// Client is the worker side of psf: it creates and opens matrices and
// sends them functions. It is safe for concurrent use.
type Client struct {
	po *postoffice.Postoffice
	w  *kv.KVWorker[uint8]
}

// NewClient starts psf on a worker node, as KV customer (app id,
// customer id): DefaultAppID and 0 unless WithAppID and WithCustomerID say
// otherwise.
func NewClient(po *postoffice.Postoffice, opts ...Option) (*Client, error) {
	o := collectOptions(opts)
	w, err := kv.NewKVWorker[uint8](po, o.appID, o.customerID)
	if err != nil {
		return nil, err
	}
	return &Client{po: po, w: w}, nil
}

// AcceptStateLoss declares that the program accepts losing the changes it
// made on a server that dies unreplicated (outside managed jobs, a
// replacement restores psf's latest checkpoint, or nothing): the client
// goes on, logging and counting the loss, instead of stopping the job
// (see kv.KVWorker.AcceptStateLoss). Every request of a psf client counts,
// reads too.
func (c *Client) AcceptStateLoss() { c.w.AcceptStateLoss() }

// StateLoss returns what this client lost with servers' state so far (see
// kv.KVWorker.StateLoss), or nil.
func (c *Client) StateLoss() error { return c.w.StateLoss() }

// Close stops the client; requests still running fail.
func (c *Client) Close() { c.w.Close() }

// Future is the result of an asynchronous call.
type Future[T any] struct {
	done chan struct{}
	val  T
	err  error
}

func newFuture[T any]() *Future[T] { return &Future[T]{done: make(chan struct{})} }

func failed[T any](err error) *Future[T] {
	f := newFuture[T]()
	f.resolve(*new(T), err)
	return f
}

func (f *Future[T]) resolve(v T, err error) {
	f.val, f.err = v, err
	close(f.done)
}

// Wait blocks until the call has finished, or ctx is done, and returns the
// result or the error. A call that has finished returns its result even if
// ctx is done. The call goes on when ctx ends first; Wait may be called
// again.
func (f *Future[T]) Wait(ctx context.Context) (T, error) {
	select {
	case <-f.done:
		return f.val, f.err
	default:
	}
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		// Both may be ready: the result wins.
		select {
		case <-f.done:
			return f.val, f.err
		default:
			return *new(T), ctx.Err()
		}
	}
}

// Done is closed when the call has finished.
func (f *Future[T]) Done() <-chan struct{} { return f.done }

// Handle is the completion of an asynchronous update.
type Handle struct{ f *Future[struct{}] }

// Wait blocks until the update has finished, or ctx is done, and returns
// its error (the update's, if it has finished, even when ctx is done).
func (h *Handle) Wait(ctx context.Context) error {
	_, err := h.f.Wait(ctx)
	return err
}

// Done is closed when the update has finished.
func (h *Handle) Done() <-chan struct{} { return h.f.done }

// request is one key of a psf KV request.
type request struct {
	key     uint64
	payload []byte
	part    PartitionMeta // Server set; ID -1 for a matrix operation
}

// call sends reqs as one KV request with command cmd and runs finish on the
// decoded responses (aligned with reqs, which call sorts by key) in a
// goroutine of its own. If a server answers an error for any key, the call
// fails with it (see firstErrors).
func call[T any](c *Client, cmd int, reqs []request, finish func(reqs []request, results [][]byte) (T, error)) *Future[T] {
	return callEach(c, cmd, reqs, func(reqs []request, results [][]byte, errs []error) (T, error) {
		var failed []error
		for _, err := range errs {
			if err != nil {
				failed = append(failed, err)
			}
		}
		if len(failed) > 0 {
			return *new(T), firstErrors(failed)
		}
		return finish(reqs, results)
	})
}

// callEach is call with finish given every key's answer: its result, or
// the error its server answered (errs[i], nil for a result). The call
// fails without finish only when the request as a whole fails.
func callEach[T any](c *Client, cmd int, reqs []request, finish func(reqs []request, results [][]byte, errs []error) (T, error)) *Future[T] {
	slices.SortStableFunc(reqs, func(a, b request) int { return cmp.Compare(a.key, b.key) })
	if len(reqs) == 0 {
		v, err := finish(nil, nil, nil)
		f := newFuture[T]()
		f.resolve(v, err)
		return f
	}
	keys := make([]uint64, len(reqs))
	lens := make([]int32, len(reqs))
	total := 0
	for i, r := range reqs {
		if len(r.payload) > maxPayload {
			return failed[T](fmt.Errorf("psf: a request of %d bytes for %s exceeds one message's 2 GiB", len(r.payload), r.part))
		}
		keys[i] = r.key
		lens[i] = int32(len(r.payload))
		total += len(r.payload)
	}
	vals := make([]uint8, 0, total)
	for _, r := range reqs {
		vals = append(vals, r.payload...)
	}
	var outs []uint8
	ts, err := c.w.ZPushPull(keys, vals, &outs, &lens, kv.WithCmd(cmd))
	if err != nil {
		return failed[T](err)
	}
	f := newFuture[T]()
	go func() {
		if err := c.w.Wait(ts); err != nil {
			f.resolve(*new(T), err)
			return
		}
		if len(lens) != len(reqs) {
			f.resolve(*new(T), fmt.Errorf("psf: %d responses for %d keys", len(lens), len(reqs)))
			return
		}
		results := make([][]byte, len(reqs))
		errs := make([]error, len(reqs))
		off := 0
		for i, l := range lens {
			if l < 0 || off+int(l) > len(outs) {
				f.resolve(*new(T), fmt.Errorf("psf: response lengths do not add up"))
				return
			}
			results[i], errs[i] = decodeResponse(outs[off:off+int(l)], reqs[i].part.Server, reqs[i].part.ID)
			off += int(l)
		}
		v, err := finish(reqs, results, errs)
		f.resolve(v, err)
	}()
	return f
}

// firstErrors joins the distinct messages among errs (at most 4).
func firstErrors(errs []error) error {
	var out []error
	seen := map[string]bool{}
	for _, e := range errs {
		var re *RemoteError
		msg := e.Error()
		if errors.As(e, &re) {
			msg = re.Msg
		}
		if seen[msg] {
			continue
		}
		seen[msg] = true
		out = append(out, e)
		if len(out) == 4 {
			break
		}
	}
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}

// sys sends a matrix operation to servers (every server when nil), and
// returns their results in the order of servers; it fails if any server
// answers an error.
func (c *Client) sys(op uint8, name string, args []byte, servers []int) *Future[[][]byte] {
	if servers == nil {
		servers = c.allServers()
	}
	per := make(map[int][]byte, len(servers))
	for _, s := range servers {
		per[s] = args
	}
	pos := make(map[int]int, len(servers))
	for i, s := range servers {
		pos[s] = i
	}
	return call(c, CmdSystem, c.sysRequests(op, name, per), func(reqs []request, res [][]byte) ([][]byte, error) {
		out := make([][]byte, len(servers))
		for i, r := range reqs {
			out[pos[r.part.Server]] = res[i]
		}
		return out, nil
	})
}

// sysAnswer is one server's answer to a matrix operation: its result, or
// the error it answered.
type sysAnswer struct {
	server int
	res    []byte
	err    error
}

// sysEach sends a matrix operation to the servers of args, each with its
// own arguments, and returns every server's answer, by server.
func (c *Client) sysEach(op uint8, name string, args map[int][]byte) *Future[[]sysAnswer] {
	return callEach(c, CmdSystem, c.sysRequests(op, name, args), func(reqs []request, res [][]byte, errs []error) ([]sysAnswer, error) {
		out := make([]sysAnswer, len(reqs))
		for i, r := range reqs {
			out[i] = sysAnswer{server: r.part.Server, res: res[i], err: errs[i]}
		}
		slices.SortFunc(out, func(a, b sysAnswer) int { return a.server - b.server })
		return out, nil
	})
}

// sysRequests makes the requests of a matrix operation: one for each
// server of args (its first key), with its arguments.
func (c *Client) sysRequests(op uint8, name string, args map[int][]byte) []request {
	ranges := c.po.ServerKeyRanges()
	reqs := make([]request, 0, len(args))
	for _, s := range sortedKeys(args) {
		if s < 0 || s >= len(ranges) {
			continue
		}
		payload := encodeSysRequest(sysRequest{op: op, matrix: name, args: args[s]})
		reqs = append(reqs, request{key: ranges[s].Begin, payload: payload, part: PartitionMeta{ID: -1, Server: s}})
	}
	return reqs
}

// allServers returns the ranks of every server.
func (c *Client) allServers() []int {
	out := make([]int, len(c.po.ServerKeyRanges()))
	for i := range out {
		out[i] = i
	}
	return out
}

// Matrix is a worker's handle on a matrix held by the servers.
type Matrix struct {
	c    *Client
	meta MatrixMeta
}

// Meta returns the matrix's meta.
func (m *Matrix) Meta() MatrixMeta { return m.meta }

// Name returns the matrix's name.
func (m *Matrix) Name() string { return m.meta.Name }

// CreateMatrix creates a matrix of zeros on the servers. Zero block sizes
// get their defaults (see MatrixMeta); NumServers is the job's. Creating a
// matrix that exists with the same layout is not an error, so every worker
// may create the matrices it uses; another layout is.
//
// The create is all or nothing: if any server refuses (a matrix of that
// name with another layout there, say), the servers that created the
// matrix in this call drop it again (those that held it before keep it),
// and the error names the servers that refused and why. If ctx ends before
// the servers have answered, the create goes on, and is undone in the same
// way if a server refuses.
func (c *Client) CreateMatrix(ctx context.Context, meta MatrixMeta) (*Matrix, error) {
	if meta.NumServers != 0 && meta.NumServers != c.po.NumServers() {
		return nil, fmt.Errorf("psf: matrix %q: NumServers %d, the job has %d", meta.Name, meta.NumServers, c.po.NumServers())
	}
	meta, err := meta.withDefaults(c.po.NumServers())
	if err != nil {
		return nil, err
	}
	args, err := encode(metaCodec, meta)
	if err != nil {
		return nil, err
	}
	per := make(map[int][]byte)
	for _, s := range c.allServers() {
		per[s] = args
	}
	f := c.sysEach(opCreate, meta.Name, per)
	answers, err := f.Wait(ctx)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			go func() {
				// The answers will come: undo the create if it failed.
				if answers, err := f.Wait(context.Background()); err == nil {
					_ = c.finishCreate(context.Background(), meta.Name, answers)
				}
			}()
		}
		return nil, fmt.Errorf("psf: creating matrix %q: %w", meta.Name, err)
	}
	if err := c.finishCreate(ctx, meta.Name, answers); err != nil {
		return nil, err
	}
	return &Matrix{c: c, meta: meta}, nil
}

// finishCreate checks the servers' answers to a create; if any refused, it
// drops the matrix from the servers that created it in that call, and
// returns the error.
func (c *Client) finishCreate(ctx context.Context, name string, answers []sysAnswer) error {
	var refused []error
	var refusers []int
	drop := make(map[int][]byte)
	for _, a := range answers {
		if a.err != nil {
			refused = append(refused, a.err)
			refusers = append(refusers, a.server)
			continue
		}
		if len(a.res) == 0 {
			continue // a server of an earlier version: cannot be undone
		}
		gen, err := decode(genCodec, a.res)
		if err != nil {
			refused = append(refused, fmt.Errorf("psf: server %d: bad answer to a create: %w", a.server, err))
			refusers = append(refusers, a.server)
			continue
		}
		if gen != 0 {
			drop[a.server] = a.res
		}
	}
	if len(refused) == 0 {
		return nil
	}
	undone := "no other server created it"
	if len(drop) > 0 {
		undone = fmt.Sprintf("dropped it again on %s, which created it", serverList(sortedKeys(drop)))
		answers, err := c.sysEach(opDrop, name, drop).Wait(ctx)
		if err == nil {
			for _, a := range answers {
				if a.err != nil {
					err = errors.Join(err, a.err)
				}
			}
		}
		if err != nil {
			undone = fmt.Sprintf("dropping it again on %s failed: %v", serverList(sortedKeys(drop)), err)
		}
	}
	return fmt.Errorf("psf: creating matrix %q: refused by %s (%s): %w", name, serverList(refusers), undone, firstErrors(refused))
}

// serverList names servers for a message: "server 2", "servers 0 and 2",
// "servers 0, 1 and 2".
func serverList(ss []int) string {
	switch len(ss) {
	case 0:
		return "no server"
	case 1:
		return fmt.Sprintf("server %d", ss[0])
	}
	var b strings.Builder
	b.WriteString("servers ")
	for i, s := range ss {
		switch {
		case i == len(ss)-1:
			b.WriteString(" and ")
		case i > 0:
			b.WriteString(", ")
		}
		fmt.Fprint(&b, s)
	}
	return b.String()
}

// OpenMatrix returns a handle on an existing matrix. Every server must hold
// it, with the same layout: when a server lacks it the error matches
// ErrNoMatrix and names the servers that have it and those that do not.
func (c *Client) OpenMatrix(ctx context.Context, name string) (*Matrix, error) {
	if err := validName("matrix", name); err != nil {
		return nil, err
	}
	per := make(map[int][]byte)
	for _, s := range c.allServers() {
		per[s] = nil
	}
	answers, err := c.sysEach(opMeta, name, per).Wait(ctx)
	if err != nil {
		return nil, err
	}
	var have, lack []int
	var others []error
	res := make([][]byte, len(answers))
	for i, a := range answers {
		switch {
		case a.err == nil:
			have = append(have, a.server)
			res[i] = a.res
		case errors.Is(a.err, ErrNoMatrix):
			lack = append(lack, a.server)
		default:
			others = append(others, a.err)
		}
	}
	switch {
	case len(others) > 0:
		return nil, firstErrors(others)
	case len(have) == 0:
		return nil, fmt.Errorf("%w %q on any server", ErrNoMatrix, name)
	case len(lack) > 0:
		return nil, fmt.Errorf("%w: matrix %q is on %s but not on %s (a create or delete did not finish; delete it and create it again)",
			ErrNoMatrix, name, serverList(have), serverList(lack))
	}
	return c.matrixFrom(res)
}

// matrixFrom returns the matrix whose meta every server answered (res[i]
// from server i), after checking that they agree.
func (c *Client) matrixFrom(res [][]byte) (*Matrix, error) {
	var meta MatrixMeta
	for i, r := range res {
		m, err := decode(metaCodec, r)
		if err != nil {
			return nil, fmt.Errorf("psf: bad matrix meta from server %d: %w", i, err)
		}
		if i > 0 && m != meta {
			return nil, fmt.Errorf("psf: servers disagree on matrix %q: server 0 has %+v, server %d %+v", m.Name, meta, i, m)
		}
		meta = m
	}
	if err := meta.validate(); err != nil {
		return nil, err
	}
	if meta.NumServers != c.po.NumServers() {
		return nil, fmt.Errorf("psf: matrix %q is laid out for %d servers, the job has %d", meta.Name, meta.NumServers, c.po.NumServers())
	}
	return &Matrix{c: c, meta: meta}, nil
}

// DeleteMatrix drops a matrix from every server (no error if it does not
// exist), with its checkpoints in the servers' checkpoint directories
// (WithCheckpointDir), so that a server that restarts does not restore it.
// Saves made with Matrix.Save are not touched.
func (c *Client) DeleteMatrix(ctx context.Context, name string) error {
	if err := validName("matrix", name); err != nil {
		return err
	}
	_, err := c.sys(opDelete, name, nil, nil).Wait(ctx)
	return err
}

// LoadMatrix loads the matrix saved (Matrix.Save) as dir/name: it is
// created, with the saved block sizes, if it does not exist, and its values
// are replaced by the saved ones. dir is a path on the servers. The load is
// all or nothing: if a server cannot read its part, no server changes.
func (c *Client) LoadMatrix(ctx context.Context, name, dir string) (*Matrix, error) {
	if err := validName("matrix", name); err != nil {
		return nil, err
	}
	res, err := c.load(ctx, name, storeArgs{dir: dir})
	if err != nil {
		return nil, err
	}
	return c.matrixFrom(res)
}

// load is a two-phase load: every server reads its part of the save and
// keeps it aside; if all succeed they switch to it, else they drop it, so a
// failed load changes nothing.
func (c *Client) load(ctx context.Context, name string, a storeArgs) ([][]byte, error) {
	res, err := c.store(ctx, opLoad, name, a)
	if err != nil {
		// Best effort: a server that did not stage anything ignores this.
		_, _ = c.sys(opLoadAbort, name, nil, nil).Wait(ctx)
		return nil, err
	}
	if _, err := c.sys(opLoadCommit, name, nil, nil).Wait(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

func (c *Client) store(ctx context.Context, op uint8, name string, a storeArgs) ([][]byte, error) {
	args, err := encode(storeArgsCodec, a)
	if err != nil {
		return nil, err
	}
	return c.sys(op, name, args, nil).Wait(ctx)
}

// Save writes the matrix to dir/<name> (see the format in the package
// documentation), replacing an earlier save there. dir is a path on the
// servers. Concurrent updates may or may not be saved.
func (m *Matrix) Save(ctx context.Context, dir string) error {
	return m.save(ctx, storeArgs{dir: dir})
}

// Load replaces the matrix's values by those saved in dir/<name>, which
// must have the same number of rows and columns (its block sizes may
// differ).
func (m *Matrix) Load(ctx context.Context, dir string) error {
	meta := m.meta
	_, err := m.c.load(ctx, m.meta.Name, storeArgs{dir: dir, meta: &meta})
	return err
}

// Checkpoint saves the matrix as checkpoint id in every server's checkpoint
// directory (WithCheckpointDir) and, once complete, makes it the latest one,
// from which a server that replaces a dead one restores.
func (m *Matrix) Checkpoint(ctx context.Context, id int64) error {
	return m.save(ctx, storeArgs{checkpoint: true, id: id})
}

// Recover replaces the matrix's values by those of checkpoint id.
func (m *Matrix) Recover(ctx context.Context, id int64) error {
	meta := m.meta
	_, err := m.c.load(ctx, m.meta.Name, storeArgs{checkpoint: true, id: id, meta: &meta})
	return err
}

func (m *Matrix) save(ctx context.Context, a storeArgs) error {
	if !a.checkpoint && a.dir == "" {
		return errors.New("psf: empty directory")
	}
	if _, err := m.c.store(ctx, opSave, m.meta.Name, a); err != nil {
		return err
	}
	_, err := m.c.store(ctx, opCommit, m.meta.Name, a)
	return err
}

// funcRequests turns a function's encoded parts into requests.
func (m *Matrix) funcRequests(kind uint8, name string, parts []Part[[]byte]) ([]request, error) {
	ranges := m.c.po.ServerKeyRanges()
	if len(ranges) != m.meta.NumServers {
		return nil, fmt.Errorf("psf: matrix %q is laid out for %d servers, the job has %d", m.meta.Name, m.meta.NumServers, len(ranges))
	}
	n := m.meta.NumPartitions()
	reqs := make([]request, len(parts))
	for i, p := range parts {
		id := p.Partition.ID
		if id < 0 || id >= n {
			return nil, fmt.Errorf("psf: %s: matrix %q has no partition %d", name, m.meta.Name, id)
		}
		pm := m.meta.Partition(id)
		if uint64(id) >= ranges[pm.Server].Size() {
			return nil, fmt.Errorf("psf: partition %d does not fit server %d's key range", id, pm.Server)
		}
		reqs[i] = request{
			key:     ranges[pm.Server].Begin + uint64(id),
			payload: encodeFuncRequest(funcHeader{kind: kind, matrix: m.meta.Name, fn: name, param: p.Value}),
			part:    pm,
		}
	}
	return reqs, nil
}

// GetAsync starts get function f on m.
func GetAsync[R any](m *Matrix, f GetFunc[R]) *Future[R] {
	meta := m.meta
	parts, err := f.Split(&meta)
	if err != nil {
		return failed[R](err)
	}
	reqs, err := m.funcRequests(kindGet, f.Name(), parts)
	if err != nil {
		return failed[R](err)
	}
	return call(m.c, CmdFunc, reqs, func(reqs []request, results [][]byte) (R, error) {
		out := make([]Part[[]byte], len(reqs))
		for i, r := range reqs {
			out[i] = Part[[]byte]{Partition: r.part, Value: results[i]}
		}
		sortParts(out)
		meta := m.meta
		return f.Merge(&meta, out)
	})
}

// Get runs get function f on m and returns its result. (Get is a function,
// not a method of Matrix, because Go methods cannot have type parameters.)
func Get[R any](ctx context.Context, m *Matrix, f GetFunc[R]) (R, error) {
	return GetAsync(m, f).Wait(ctx)
}

// UpdateAsync starts update function f on m.
func (m *Matrix) UpdateAsync(f UpdateFunc) *Handle {
	meta := m.meta
	parts, err := f.Split(&meta)
	if err != nil {
		return &Handle{failed[struct{}](err)}
	}
	reqs, err := m.funcRequests(kindUpdate, f.Name(), parts)
	if err != nil {
		return &Handle{failed[struct{}](err)}
	}
	return &Handle{call(m.c, CmdFunc, reqs, func([]request, [][]byte) (struct{}, error) { return struct{}{}, nil })}
}

// Update runs update function f on m.
func (m *Matrix) Update(ctx context.Context, f UpdateFunc) error {
	return m.UpdateAsync(f).Wait(ctx)
}
