package psf_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/psf"
	"github.com/gopslite/pslite/van"
)

// A get function of your own: count the values of a row above a
// threshold. Its parameters travel with a hand-written codec.
type countParams struct {
	Row       int
	Threshold float64
}

var countParamsCodec = psf.NewCodec(
	func(e *psf.Encoder, p countParams) { e.Int(p.Row); e.Float64(p.Threshold) },
	func(d *psf.Decoder) countParams { return countParams{Row: d.Int(), Threshold: d.Float64()} },
)

// The server half, registered by name at package initialisation in every
// process of the job (they run the same binary): count in one partition.
var countAboveKernel = psf.MustRegister(psf.NewGetKernel("example.CountAbove", countParamsCodec, psf.Int64,
	func(b *psf.Block, p countParams) (int64, error) {
		x, err := b.Row(p.Row) // the row's values in this partition's columns
		if err != nil {
			return 0, err
		}
		var n int64
		for _, v := range x {
			if v > p.Threshold {
				n++
			}
		}
		return n, nil
	}))

// CountAbove is the worker half: ask every partition of the row, add up.
func CountAbove(row int, threshold float64) psf.GetFunc[int64] {
	p := countParams{Row: row, Threshold: threshold}
	return psf.NewGet(countAboveKernel,
		func(m *psf.MatrixMeta) ([]psf.Part[countParams], error) { return psf.SplitRows(m, p, row) },
		func(_ *psf.MatrixMeta, parts []psf.Part[int64]) (int64, error) {
			var n int64
			for _, part := range parts {
				n += part.Value
			}
			return n, nil
		})
}

// An element-wise update of your own: clip values into [lo, hi].
var clipKernel = psf.MustRegister(psf.NewMap("example.Clip", psf.Float64s,
	func(bounds []float64, x float64) float64 { return min(max(x, bounds[0]), bounds[1]) }))

func Example() {
	err := runJob(2, func(ctx context.Context, c *psf.Client) error {
		m, err := c.CreateMatrix(ctx, psf.MatrixMeta{Name: "weights", Rows: 2, Cols: 10})
		if err != nil {
			return err
		}
		if err := m.UpdateRow(ctx, 0, []float64{-5, -1, 0, 1, 2, 3, 4, 5, 6, 7}); err != nil {
			return err
		}
		n, err := psf.Get(ctx, m, CountAbove(0, 2.5))
		if err != nil {
			return err
		}
		fmt.Println("above 2.5:", n)
		if err := m.Update(ctx, psf.Map(clipKernel, []float64{-1, 3}, 0, 1)); err != nil {
			return err
		}
		row, err := m.GetRow(ctx, 1)
		if err != nil {
			return err
		}
		fmt.Println("clipped:", row)
		sum, err := psf.Get(ctx, m, psf.Sum(1))
		if err != nil {
			return err
		}
		fmt.Println("sum:", sum)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// above 2.5: 5
	// clipped: [-1 -1 0 1 2 3 3 3 3 3]
	// sum: 16
}

// A sparse matrix: 64-bit column ids, hashed over the servers; only the
// entries that are not 0 are stored.
func Example_sparse() {
	err := runJob(2, func(ctx context.Context, c *psf.Client) error {
		m, err := c.CreateMatrix(ctx, psf.MatrixMeta{Name: "embeddings", Type: psf.Sparse, Rows: 2})
		if err != nil {
			return err
		}
		ids := []int64{1 << 62, -7, 3, 1 << 62}
		if err := m.IncrementAt(ctx, 0, ids, []float64{1, -2, 0.5, 1}); err != nil {
			return err
		}
		row, err := m.GetSparseRow(ctx, 0)
		if err != nil {
			return err
		}
		fmt.Println("row 0:", row.Indices, row.Values)
		mx, err := psf.Get(ctx, m, psf.Max(0))
		if err != nil {
			return err
		}
		mn, err := psf.Get(ctx, m, psf.Min(0))
		if err != nil {
			return err
		}
		size, err := psf.Get(ctx, m, psf.Size(0))
		if err != nil {
			return err
		}
		fmt.Println("max:", mx, "min:", mn, "entries:", size)
		if err := m.Update(ctx, psf.Abs(0, 1)); err != nil {
			return err
		}
		vals, err := m.GetRowsAt64(ctx, []int{0, 1}, []int64{-7, 42})
		if err != nil {
			return err
		}
		fmt.Println("at -7 and 42:", vals)
		err = m.Update(ctx, psf.Exp(0, 1)) // exp(0) = 1 at 2^64 columns: refused
		fmt.Println("exp is refused:", errors.Is(err, psf.ErrSparse))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// row 0: [-7 3 4611686018427387904] [-2 0.5 2]
	// max: 2 min: -2 entries: 3
	// at -7 and 42: [[-2 0] [2 0]]
	// exp is refused: true
}

// runJob runs a job of a scheduler, n psf servers and one worker in this
// process, over an in-memory network, and runs work on the worker. A real
// job runs one node per process (ps.Start, then psf.NewServer(ps.Node())
// or psf.NewClient(ps.Node())).
func runJob(n int, work func(ctx context.Context, c *psf.Client) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	network := van.NewMemNetwork()
	node := func(role message.Role) (*postoffice.Postoffice, error) {
		cfg := postoffice.Config{Role: role, NumServers: n, NumWorkers: 1,
			SchedulerHost: "127.0.0.1", SchedulerPort: 9000, Host: "127.0.0.1"}
		return postoffice.New(cfg, postoffice.WithTransport(network.Transport()), postoffice.WithLogger(zerolog.Nop()))
	}
	roles := []message.Role{message.RoleScheduler, message.RoleWorker}
	for i := 0; i < n; i++ {
		roles = append(roles, message.RoleServer)
	}
	nodes := make([]*postoffice.Postoffice, len(roles))
	for i, r := range roles {
		p, err := node(r)
		if err != nil {
			return err
		}
		nodes[i] = p
	}
	// Every node starts (and later finalizes) at once: Start waits for all.
	each := func(f func(p *postoffice.Postoffice) error) error {
		errs := make([]error, len(nodes))
		var wg sync.WaitGroup
		for i, p := range nodes {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = f(p) }()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := each(func(p *postoffice.Postoffice) error { return p.Start(ctx, 0, true) }); err != nil {
		return err
	}
	defer each(func(p *postoffice.Postoffice) error { return p.Finalize(ctx, 0, true) })
	for _, p := range nodes[2:] {
		if _, err := psf.NewServer(p); err != nil {
			return err
		}
	}
	c, err := psf.NewClient(nodes[1])
	if err != nil {
		return err
	}
	return work(ctx, c)
}
