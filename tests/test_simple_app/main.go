// Command test_simple_app has the scheduler send 100 SimpleApp requests to
// every node (itself included); each node checks and answers them, and
// every node checks at the end that it answered all 100.
package main

import (
	"sync/atomic"

	"github.com/gopslite/pslite/internal/prog"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/ps"
)

const n = 100

func main() {
	prog.Check(ps.Start(0), "start")
	app, err := ps.NewSimpleApp(0, 0)
	prog.Check(err, "simple app")
	var handled atomic.Int32
	app.SetRequestHandle(func(req kv.SimpleData, a *kv.SimpleApp) {
		if req.Head != 1 || req.Body != "test" {
			prog.Failf("got head %d body %q, want 1 %q", req.Head, req.Body, "test")
		}
		prog.Check(a.Response(req, ""), "response")
		handled.Add(1)
	})
	if ps.IsScheduler() {
		ts := make([]int, 0, n)
		for i := 0; i < n; i++ {
			t, err := app.Request(1, "test", ps.AllGroup)
			prog.Check(err, "request")
			ts = append(ts, t)
		}
		for _, t := range ts {
			prog.Check(app.Wait(t), "wait")
		}
	}
	prog.Check(ps.Finalize(0, true), "finalize")
	if got := handled.Load(); got != n {
		prog.Failf("handled %d requests, want %d", got, n)
	}
	prog.Logf("handled %d requests", n)
}
