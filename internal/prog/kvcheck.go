package prog

import (
	"math"
	"math/rand/v2"

	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
)

// Workload is the key set and values test_kv_app pushes: num keys spread over
// the whole key space, offset by the worker's rank (or customer id), with
// integer values below 1000 drawn from a seeded generator.
func Workload(num, offset int, seed uint64) ([]uint64, []float32) {
	keys := make([]uint64, num)
	vals := make([]float32, num)
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range keys {
		keys[i] = message.MaxKey/uint64(num)*uint64(i) + uint64(offset)
		vals[i] = float32(r.IntN(1000))
	}
	return keys, vals
}

// RunKVCheck pushes vals repeat times (keeping at most 10 pushes in flight),
// pulls, then push-pulls repeat times, and checks that every pulled value is
// exactly repeat times its pushed one and every value of the last push-pull
// exactly 2*repeat times.
func RunKVCheck(w *kv.KVWorker[float32], keys []uint64, vals []float32, repeat int) {
	var ts []int
	for i := 0; i < repeat; i++ {
		t, err := w.Push(keys, vals, nil)
		Check(err, "push")
		ts = append(ts, t)
		if i > 10 {
			Check(w.Wait(ts[len(ts)-10]), "wait push")
		}
	}
	for _, t := range ts {
		Check(w.Wait(t), "wait push")
	}
	var rets []float32
	t, err := w.Pull(keys, &rets, nil)
	Check(err, "pull")
	Check(w.Wait(t), "wait pull")

	var outs []float32
	for i := 0; i < repeat; i++ {
		t, err := w.PushPull(keys, vals, &outs, nil)
		Check(err, "pushpull")
		Check(w.Wait(t), "wait pushpull")
	}
	if len(rets) != len(keys) || len(outs) != len(keys) {
		Failf("pulled %d and %d values for %d keys", len(rets), len(outs), len(keys))
	}
	// Every value is an integer of at most 2*repeat*999: exact in float32
	// up to 2^24, so each must equal its sum exactly.
	var res, res2 float64
	wrong, first := 0, -1
	for i := range keys {
		want, want2 := vals[i]*float32(repeat), vals[i]*2*float32(repeat)
		res += math.Abs(float64(rets[i] - want))
		res2 += math.Abs(float64(outs[i] - want2))
		if rets[i] != want || outs[i] != want2 {
			wrong++
			if first < 0 {
				first = i
			}
		}
	}
	if wrong > 0 {
		i := first
		Failf("wrong values: %d of %d keys (the first: key %d pulled %g and push-pulled %g, want %g and %g); error %g, %g",
			wrong, len(keys), keys[i], rets[i], outs[i], vals[i]*float32(repeat), vals[i]*2*float32(repeat),
			res/float64(repeat), res2/float64(2*repeat))
	}
	Logf("error: %g, %g", res/float64(repeat), res2/float64(2*repeat))
}
