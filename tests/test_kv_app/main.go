// Command test_kv_app has each worker push 10,000 keys 50 times to servers
// that add them up, pull them back, then push-pull 50 times, and checks the
// sums exactly. -keys and -repeat change the sizes.
package main

import (
	"flag"

	"github.com/gopslite/pslite/internal/prog"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/ps"
)

func main() {
	numKeys := flag.Int("keys", 10000, "keys each worker pushes")
	repeat := flag.Int("repeat", 50, "pushes (and push-pulls) of them")
	flag.Parse()
	prog.Check(ps.Start(0), "start")
	if ps.IsServer() {
		s, err := ps.NewKVServer[float32](0)
		prog.Check(err, "server")
		h := kv.NewDefaultHandle[float32]()
		prog.Check(s.SetStore(h), "store")
		ps.RegisterExitCallback(s.Close)
	}
	if ps.IsWorker() {
		w, err := ps.NewKVWorker[float32](0, 0)
		prog.Check(err, "worker")
		rank := ps.MyRank()
		keys, vals := prog.Workload(*numKeys, rank, uint64(rank+7))
		prog.RunKVCheck(w, keys, vals, *repeat)
	}
	prog.Check(ps.Finalize(0, true), "finalize")
}
