package psf_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/psf"
)

// holds returns the meta of matrix name on server s, if it holds it.
func holds(s *psf.Server, name string) (psf.MatrixMeta, bool) {
	for _, m := range s.Matrices() {
		if m.Name == name {
			return m, true
		}
	}
	return psf.MatrixMeta{}, false
}

// CreateMatrix is all or nothing: when a server refuses, the servers that
// created the matrix in that call drop it again, and those that held it
// already keep it.
func TestCreateMatrixAllOrNothing(t *testing.T) {
	j := newJob(t, 3, 1, testcluster.Options{Mem: true, Quiet: true})
	ctx := ctxT(t)
	cl := j.clients[0]

	// Server 2 holds "clash" with another shape.
	if err := psf.CreateOn(ctx, cl, psf.MatrixMeta{Name: "clash", Rows: 5, Cols: 9}, 2); err != nil {
		t.Fatal(err)
	}
	_, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "clash", Rows: 4, Cols: 9})
	if err == nil || !strings.Contains(err.Error(), "server 2") || !strings.Contains(err.Error(), "another shape") {
		t.Errorf("creating over a clash on server 2: %v", err)
	}
	t.Log(err)
	for i, s := range j.servers[:2] {
		if m, ok := holds(s, "clash"); ok {
			t.Errorf("server %d keeps the matrix of a failed create: %+v", i, m)
		}
	}
	if m, ok := holds(j.servers[2], "clash"); !ok || m.Rows != 5 {
		t.Errorf("server 2 lost its own matrix: %+v %v", m, ok)
	}

	// Server 0 holds "half" with the layout asked already, server 2 with
	// another: server 0 keeps it, server 1 drops it.
	if err := psf.CreateOn(ctx, cl, psf.MatrixMeta{Name: "half", Rows: 4, Cols: 9}, 0); err != nil {
		t.Fatal(err)
	}
	if err := psf.CreateOn(ctx, cl, psf.MatrixMeta{Name: "half", Rows: 6, Cols: 9}, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "half", Rows: 4, Cols: 9}); err == nil {
		t.Error("creating over a clash succeeded")
	}
	if m, ok := holds(j.servers[0], "half"); !ok || m.Rows != 4 {
		t.Errorf("server 0 dropped the matrix it held before the create: %+v %v", m, ok)
	}
	if m, ok := holds(j.servers[1], "half"); ok {
		t.Errorf("server 1 keeps the matrix of a failed create: %+v", m)
	}

	// OpenMatrix asks every server.
	if _, err := cl.OpenMatrix(ctx, "half"); err == nil || !strings.Contains(err.Error(), "server 1") {
		t.Errorf("opening a matrix server 1 lacks: %v", err)
	} else if !errors.Is(err, psf.ErrNoMatrix) {
		t.Errorf("opening a matrix server 1 lacks: %v does not match ErrNoMatrix", err)
	} else {
		t.Log(err)
	}
	if err := psf.CreateOn(ctx, cl, psf.MatrixMeta{Name: "half", Rows: 5, Cols: 9}, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.OpenMatrix(ctx, "half"); err == nil || !strings.Contains(err.Error(), "disagree") {
		t.Errorf("opening a matrix the servers disagree on: %v", err)
	}
	if _, err := cl.OpenMatrix(ctx, "nothing"); !errors.Is(err, psf.ErrNoMatrix) {
		t.Errorf("opening a matrix no server holds: %v", err)
	}

	// A create abandoned by its caller is still undone when a server
	// refuses.
	if err := psf.CreateOn(ctx, cl, psf.MatrixMeta{Name: "gone", Rows: 5, Cols: 9}, 1); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := cl.CreateMatrix(cancelled, psf.MatrixMeta{Name: "gone", Rows: 4, Cols: 9}); err == nil {
		t.Error("a create over a clash succeeded")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, on0 := holds(j.servers[0], "gone")
		_, on2 := holds(j.servers[2], "gone")
		if !on0 && !on2 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("an abandoned create that server 1 refused stays on server 0 (%v) or 2 (%v)", on0, on2)
			break
		}
	}

	// A create that succeeds everywhere, and again (no-op), then opens.
	m, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "fine", Rows: 2, Cols: 9})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "fine", Rows: 2, Cols: 9}); err != nil {
		t.Fatal(err)
	}
	if err := m.UpdateRow(ctx, 0, []float64{1, 2, 3, 4, 5, 6, 7, 8, 9}); err != nil {
		t.Fatal(err)
	}
	// A create with another shape fails and leaves the matrix as it was.
	if _, err := cl.CreateMatrix(ctx, psf.MatrixMeta{Name: "fine", Rows: 3, Cols: 9}); err == nil {
		t.Error("creating again with another shape succeeded")
	}
	m2, err := cl.OpenMatrix(ctx, "fine")
	if err != nil {
		t.Fatal(err)
	}
	if s := get0(t, ctx, m2, psf.Sum(0)); s != 45 {
		t.Errorf("sum after a failed create: %v", s)
	}
}
