package psf

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
// result or the error. The call goes on when ctx ends first; Wait may be
// called again.
func (f *Future[T]) Wait(ctx context.Context) (T, error) {
	select {
	case <-f.done:
		return f.val, f.err
	case <-ctx.Done():
		return *new(T), ctx.Err()
	}
}

// Done is closed when the call has finished.
func (f *Future[T]) Done() <-chan struct{} { return f.done }

// Handle is the completion of an asynchronous update.
type Handle struct{ f *Future[struct{}] }

// Wait blocks until the update has finished, or ctx is done, and returns
// its error.
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
// goroutine of its own.
func call[T any](c *Client, cmd int, reqs []request, finish func(reqs []request, results [][]byte) (T, error)) *Future[T] {
	slices.SortStableFunc(reqs, func(a, b request) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
	if len(reqs) == 0 {
		v, err := finish(nil, nil)
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
		results := make([][]byte, len(reqs))
		off := 0
		var errs []error
		for i, l := range lens {
			if l < 0 || off+int(l) > len(outs) {
				f.resolve(*new(T), fmt.Errorf("psf: response lengths do not add up"))
				return
			}
			res, err := decodeResponse(outs[off:off+int(l)], reqs[i].part.Server, reqs[i].part.ID)
			off += int(l)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			results[i] = res
		}
		if len(errs) > 0 {
			f.resolve(*new(T), firstErrors(errs))
			return
		}
		v, err := finish(reqs, results)
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

// sys sends a matrix operation to servers (every server when nil).
func (c *Client) sys(op uint8, name string, args []byte, servers []int) *Future[[][]byte] {
	ranges := c.po.ServerKeyRanges()
	if servers == nil {
		for i := range ranges {
			servers = append(servers, i)
		}
	}
	payload := encodeSysRequest(sysRequest{op: op, matrix: name, args: args})
	reqs := make([]request, len(servers))
	for i, s := range servers {
		reqs[i] = request{key: ranges[s].Begin, payload: payload, part: PartitionMeta{ID: -1, Server: s}}
	}
	return call(c, CmdSystem, reqs, func(_ []request, res [][]byte) ([][]byte, error) { return res, nil })
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
	if _, err := c.sys(opCreate, meta.Name, args, nil).Wait(ctx); err != nil {
		return nil, err
	}
	return &Matrix{c: c, meta: meta}, nil
}

// OpenMatrix returns a handle on an existing matrix.
func (c *Client) OpenMatrix(ctx context.Context, name string) (*Matrix, error) {
	if err := validName("matrix", name); err != nil {
		return nil, err
	}
	res, err := c.sys(opMeta, name, nil, []int{0}).Wait(ctx)
	if err != nil {
		return nil, err
	}
	return c.matrixFrom(res[:1])
}

func (c *Client) matrixFrom(res [][]byte) (*Matrix, error) {
	var meta MatrixMeta
	for i, r := range res {
		m, err := decode(metaCodec, r)
		if err != nil {
			return nil, fmt.Errorf("psf: bad matrix meta from a server: %w", err)
		}
		if i > 0 && m != meta {
			return nil, fmt.Errorf("psf: servers disagree on matrix %q: %+v and %+v", m.Name, meta, m)
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
// exist).
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
