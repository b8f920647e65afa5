package psf_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/psf"
)

// job is a test cluster with psf servers and one client per worker.
type job struct {
	c       *testcluster.Cluster
	servers []*psf.Server
	clients []*psf.Client
}

func newJob(t testing.TB, servers, workers int, o testcluster.Options, opts ...psf.Option) *job {
	t.Helper()
	j := &job{c: testcluster.New(t, servers, workers, o)}
	for _, p := range j.c.Servers {
		s, err := psf.NewServer(p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		j.servers = append(j.servers, s)
	}
	for _, p := range j.c.Workers {
		cl, err := psf.NewClient(p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		j.clients = append(j.clients, cl)
	}
	return j
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// closeTo reports whether got matches want to 1e-9 relative (absolute near
// zero), with NaN matching NaN and infinities matching exactly.
func closeTo(got, want float64) bool {
	switch {
	case math.IsNaN(want):
		return math.IsNaN(got)
	case math.IsInf(want, 0):
		return got == want
	}
	return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))
}

func checkClose(t testing.TB, what string, got, want float64) {
	t.Helper()
	if !closeTo(got, want) {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func checkRow(t testing.TB, what string, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	for i := range want {
		if !closeTo(got[i], want[i]) {
			t.Errorf("%s: column %d: got %v, want %v", what, i, got[i], want[i])
			return
		}
	}
}

// checkAll compares every row of m with the local model.
func checkAll(t testing.TB, ctx context.Context, m *psf.Matrix, model [][]float64) {
	t.Helper()
	rows := make([]int, len(model))
	for i := range rows {
		rows[i] = i
	}
	got, err := m.GetRows(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	for i := range model {
		checkRow(t, fmt.Sprintf("%s row %d", m.Name(), i), got[i], model[i])
	}
}
