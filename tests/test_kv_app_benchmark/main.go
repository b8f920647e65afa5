// Command test_kv_app_benchmark times one push and one pull of 10,000,000
// keys with one float each against servers that store nothing.
package main

import (
	"time"

	"github.com/gopslite/pslite/internal/prog"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/ps"
)

func emptyHandle(meta kv.KVMeta, data kv.KVPairs[float32], s *kv.KVServer[float32]) {
	var res kv.KVPairs[float32]
	if meta.Pull {
		res.Keys = data.Keys
		res.Vals = make([]float32, len(data.Keys))
	}
	prog.Check(s.ZResponse(meta, res), "response") // fresh values, the request's keys
}

func main() {
	defer prog.Profile()()
	prog.Check(ps.Start(0), "start")
	if ps.IsServer() {
		s, err := ps.NewKVServer[float32](0)
		prog.Check(err, "server")
		s.LendRequests(true) // emptyHandle keeps nothing of a request
		prog.Check(s.SetRequestHandle(emptyHandle), "handle")
		ps.RegisterExitCallback(s.Close)
	}
	if ps.IsWorker() {
		w, err := ps.NewKVWorker[float32](0, 0)
		prog.Check(err, "worker")
		const num = 10000000
		rank := ps.MyRank()
		keys, vals := prog.Workload(num, rank, uint64(rank+7))
		start := time.Now()
		ts, err := w.ZPush(keys, vals, nil)
		prog.Check(err, "push")
		prog.Check(w.Wait(ts), "wait push")
		prog.Logf("num = %d, Push average time cost: %.3fms", num, float64(time.Since(start).Microseconds())/1e3)
		var rets []float32
		start = time.Now()
		ts, err = w.ZPull(keys, &rets, nil)
		prog.Check(err, "pull")
		prog.Check(w.Wait(ts), "wait pull")
		prog.Logf("num = %d, Pull average time cost: %.3fms", num, float64(time.Since(start).Microseconds())/1e3)
		if len(rets) != num {
			prog.Failf("pulled %d values, want %d", len(rets), num)
		}
	}
	prog.Check(ps.Finalize(0, true), "finalize")
}
