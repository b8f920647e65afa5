// Command test_kv_app_multi_workers is test_kv_app with several workers in
// one process. scripts/local_multi_workers.sh passes the role as the last
// argument and starts a single worker process, which then hosts all
// DMLC_NUM_WORKER workers as customers 0, 1, ...; launched by
// scripts/local.sh (no role argument), each worker process hosts one.
package main

import (
	"os"
	"strconv"
	"sync"

	"github.com/gopslite/pslite/internal/prog"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/ps"
)

// runWorker runs customer cid of a process hosting customers workers; each
// worker of the job gets its own key offset.
func runWorker(cid, customers int) {
	prog.Check(ps.Start(cid), "start")
	w, err := ps.NewKVWorker[float32](0, cid)
	prog.Check(err, "worker")
	keys, vals := prog.Workload(10000, ps.MyRank()*customers+cid, uint64(ps.MyRank()+7))
	prog.RunKVCheck(w, keys, vals, 50)
	prog.Check(ps.Finalize(cid, true), "finalize")
}

func main() {
	role := os.Getenv("DMLC_ROLE")
	customers := 1
	if n := len(os.Args); n > 1 {
		switch arg := os.Args[n-1]; arg {
		case "scheduler", "server", "worker":
			role = arg
			os.Setenv("DMLC_ROLE", role)
			if role == "worker" {
				num, err := strconv.Atoi(os.Getenv("DMLC_NUM_WORKER"))
				prog.Check(err, "DMLC_NUM_WORKER")
				customers = num
			}
		}
	}
	if role != "worker" {
		prog.Check(ps.Start(0), "start")
		if ps.IsServer() {
			s, err := ps.NewKVServer[float32](0)
			prog.Check(err, "server")
			h := kv.NewDefaultHandle[float32]()
			prog.Check(s.SetStore(h), "store")
			ps.RegisterExitCallback(s.Close)
		}
		prog.Check(ps.Finalize(0, true), "finalize")
		return
	}
	var wg sync.WaitGroup
	for cid := customers - 1; cid >= 0; cid-- {
		wg.Add(1)
		go func() { defer wg.Done(); runWorker(cid, customers) }()
	}
	wg.Wait()
}
