// Command test_kv_app_multi_workers is test_kv_app with two workers in one
// process (customers 0 and 1), launched by scripts/local_multi_workers.sh,
// which passes the role as the last argument.
package main

import (
	"os"
	"sync"

	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/ps"
	"github.com/gopslite/pslite/tests/internal/prog"
)

func runWorker(cid int) {
	prog.Check(ps.Start(cid), "start")
	w, err := ps.NewKVWorker[float32](0, cid)
	prog.Check(err, "worker")
	keys, vals := prog.Workload(10000, cid, uint64(ps.MyRank()+7))
	prog.RunKVCheck(w, keys, vals, 50)
	prog.Check(ps.Finalize(cid, true), "finalize")
}

func main() {
	if len(os.Args) < 2 {
		prog.Failf("usage: %s [args...] scheduler|server|worker", os.Args[0])
	}
	if os.Args[len(os.Args)-1] != "worker" {
		prog.Check(ps.Start(0), "start")
		if ps.IsServer() {
			s, err := ps.NewKVServer[float32](0)
			prog.Check(err, "server")
			h := kv.NewDefaultHandle[float32]()
			prog.Check(s.SetRequestHandle(h.Handle), "handle")
			ps.RegisterExitCallback(s.Close)
		}
		prog.Check(ps.Finalize(0, true), "finalize")
		return
	}
	var wg sync.WaitGroup
	for cid := 1; cid >= 0; cid-- {
		wg.Add(1)
		go func() { defer wg.Done(); runWorker(cid) }()
	}
	wg.Wait()
}
