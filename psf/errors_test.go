package psf_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/psf"
)

// Kernels for the error tests; kUnregistered is deliberately not registered.
var (
	kUnregistered = psf.NewGetKernel("psftest.Unregistered", psf.None, psf.Float64,
		func(*psf.Block, struct{}) (float64, error) { return 1, nil })
	_ = psf.MustRegister(psf.NewGetKernel("psftest.Panics", psf.None, psf.Float64,
		func(*psf.Block, struct{}) (float64, error) { panic("boom") }))
	kFails = psf.MustRegister(psf.NewUpdateKernel("psftest.Fails", psf.Int64,
		func(b *psf.Block, n int64) error { return errors.New("refused") }))
)

// rawGet is a GetFunc at the byte level, to send what we like.
type rawGet struct {
	name  string
	param []byte
	parts func(m *psf.MatrixMeta) []psf.PartitionMeta
}

func (f rawGet) Name() string { return f.name }

func (f rawGet) Split(m *psf.MatrixMeta) ([]psf.Part[[]byte], error) {
	var out []psf.Part[[]byte]
	for _, p := range f.parts(m) {
		out = append(out, psf.Part[[]byte]{Partition: p, Value: f.param})
	}
	return out, nil
}

func (f rawGet) Merge(_ *psf.MatrixMeta, parts []psf.Part[[]byte]) (int, error) {
	return len(parts), nil
}

func allParts(m *psf.MatrixMeta) []psf.PartitionMeta { return m.Partitions() }

func TestErrorsReachTheCaller(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	ctx := ctxT(t)
	cl := j.clients[0]
	m, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "err", Rows: 8, Cols: 10, RowBlock: 4, ColBlock: 4})
	if err != nil {
		t.Fatal(err)
	}
	alive := func() {
		t.Helper()
		if err := m.IncrementRow(ctx, 1, []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}); err != nil {
			t.Fatalf("server unusable after an error: %v", err)
		}
	}
	noParts := func(m *psf.MatrixMeta) []psf.PartitionMeta { return []psf.PartitionMeta{m.Partition(0)} }
	cases := []struct {
		name string
		run  func() error
		want error
	}{
		{"unknown function", func() error {
			_, err := psf.Get(ctx, m, psf.NewGet(kUnregistered,
				func(m *psf.MatrixMeta) ([]psf.Part[struct{}], error) { return psf.SplitRows(m, struct{}{}, 0) },
				func(*psf.MatrixMeta, []psf.Part[float64]) (float64, error) { return 0, nil }))
			return err
		}, psf.ErrUnknownFunction},
		{"undecodable parameters", func() error {
			_, err := psf.Get(ctx, m, rawGet{name: "psf.Sum", param: []byte{0xff, 0xff, 0xff}, parts: allParts})
			return err
		}, psf.ErrBadRequest},
		{"parameters of the wrong shape", func() error {
			_, err := psf.Get(ctx, m, rawGet{name: "psf.Sum", param: []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, parts: allParts})
			return err
		}, psf.ErrBadRequest},
		{"trailing bytes", func() error {
			_, err := psf.Get(ctx, m, rawGet{name: "psftest.Panics", param: []byte{1}, parts: noParts})
			return err
		}, psf.ErrBadRequest},
		{"get kernel called as update", func() error {
			return m.Update(ctx, psf.NewUpdate(psf.NewUpdateKernel("psf.Sum", psf.None, func(*psf.Block, struct{}) error { return nil }),
				func(m *psf.MatrixMeta) ([]psf.Part[struct{}], error) { return psf.SplitRows(m, struct{}{}, 0) }))
		}, psf.ErrBadRequest},
		{"rows not colocated, caught by the server", func() error {
			// Dot of rows 0 and 4 sent to row 0's partitions only: row 4's
			// partitions of the odd column blocks are on the other server.
			e := psf.NewEncoder(nil)
			e.Ints([]int{0, 4})
			e.Float64s(nil)
			e.Uint64(0)
			_, err := psf.Get(ctx, m, rawGet{name: "psf.Dot", param: e.Bytes(), parts: func(m *psf.MatrixMeta) []psf.PartitionMeta { return m.RowPartitions(0) }})
			return err
		}, psf.ErrNotColocated},
		{"kernel panics", func() error {
			_, err := psf.Get(ctx, m, rawGet{name: "psftest.Panics", parts: noParts})
			return err
		}, nil},
		{"kernel fails", func() error {
			return m.Update(ctx, psf.NewUpdate(kFails, func(m *psf.MatrixMeta) ([]psf.Part[int64], error) { return psf.SplitRows(m, int64(3), 0) }))
		}, nil},
		{"no such matrix", func() error {
			m2, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "gone", Rows: 1, Cols: 4})
			if err != nil {
				return err
			}
			if err := cl.DeleteMatrix(ctx, "gone"); err != nil {
				return err
			}
			_, err = m2.GetRow(ctx, 0)
			return err
		}, psf.ErrNoMatrix},
		{"open a matrix that does not exist", func() error {
			_, err := cl.OpenMatrix(ctx, "nope")
			return err
		}, psf.ErrNoMatrix},
		{"bad partition id from a split", func() error {
			_, err := psf.Get(ctx, m, rawGet{name: "psf.Sum", parts: func(*psf.MatrixMeta) []psf.PartitionMeta { return []psf.PartitionMeta{{ID: 999}} }})
			return err
		}, nil},
		{"bad matrix name", func() error {
			_, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "../etc", Rows: 1, Cols: 1})
			return err
		}, nil},
		{"bad shape", func() error {
			_, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "empty", Rows: 0, Cols: 1})
			return err
		}, nil},
		{"block larger than the matrix", func() error {
			_, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "blk", Rows: 2, Cols: 2, RowBlock: 3})
			return err
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			if err == nil {
				t.Fatal("no error")
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("error %v does not match %v", err, c.want)
			}
			t.Log(err)
			alive()
		})
	}
	if got, err := m.GetRow(ctx, 1); err != nil || got[9] != float64(10*len(cases)) {
		t.Errorf("row 1 after %d increments: %v, %v", len(cases), got, err)
	}
}

func TestRegister(t *testing.T) {
	if err := psf.Register(psf.NewGetKernel("psf.Sum", psf.None, psf.None, nil)); err == nil {
		t.Error("registered psf.Sum twice")
	}
	if err := psf.Register(psf.NewGetKernel("bad name", psf.None, psf.None, nil)); err == nil {
		t.Error("registered a name with a space")
	}
	if err := psf.Register(nil); err == nil {
		t.Error("registered nil")
	}
	if _, ok := psf.Lookup("psf.Dot"); !ok {
		t.Error("psf.Dot is not registered")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("MustRegister of a duplicate did not panic")
			}
		}()
		psf.MustRegister(psf.NewUpdateKernel("psf.Fill", psf.None, nil))
	}()
}

// Random bytes sent with psf's commands straight through a KV worker are
// answered with errors, and the server keeps serving.
func TestHostileRequests(t *testing.T) {
	j := newJob(t, 2, 1, testcluster.Options{Mem: true, Quiet: true})
	ctx := ctxT(t)
	m, err := j.clients[0].CreateMatrix(ctx, psf.MatrixMeta{Name: "h", Rows: 2, Cols: 6})
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.NewKVWorker[uint8](j.c.Workers[0], psf.DefaultAppID, 1)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ranges := j.c.Workers[0].ServerKeyRanges()
	for i := 0; i < 300; i++ {
		n := rng.IntN(64)
		payload := make([]byte, n)
		for k := range payload {
			payload[k] = byte(rng.UintN(256))
		}
		if i%5 == 0 && n > 2 {
			payload[0] = 1 // right version, garbage after
		}
		cmd := []int{psf.CmdFunc, psf.CmdSystem, psf.CmdBase + 7}[i%3]
		keys := []uint64{ranges[i%2].Begin + uint64(rng.IntN(4))}
		var outs []uint8
		lens := []int32{int32(n)}
		ts, err := w.ZPushPull(keys, payload, &outs, &lens, kv.WithCmd(cmd))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WaitContext(ctx, ts); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if len(outs) == 0 || outs[0] == 0 {
			t.Fatalf("request %d (% x) was answered with success: % x", i, payload, outs)
		}
	}
	// A plain push with a command outside psf's range is answered too.
	ts, err := w.Push([]uint64{1}, []uint8{1}, nil, kv.WithCmd(7))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WaitContext(ctx, ts); err != nil {
		t.Fatal(err)
	}
	if err := m.UpdateRow(ctx, 0, []float64{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	if s, err := psf.Get(ctx, m, psf.Sum(0)); err != nil || s != 21 {
		t.Errorf("sum after hostile requests: %v, %v", s, err)
	}
	if _, err := psf.Get(ctx, m, psf.Sum(0)); err != nil && strings.Contains(err.Error(), "panic") {
		t.Error(err)
	}
}
