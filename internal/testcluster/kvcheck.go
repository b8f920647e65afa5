package testcluster

import (
	"fmt"

	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
)

// PushRepeatPull pushes vals for keys repeat times, waiting for each push,
// then pulls the keys back and checks that each holds repeat times its
// value (servers with a kv.DefaultHandle add pushes up). It returns the
// first error or mismatch.
func PushRepeatPull[V message.Value](w *kv.KVWorker[V], keys []uint64, vals []V, repeat int) error {
	for i := 0; i < repeat; i++ {
		ts, err := w.Push(keys, vals, nil)
		if err == nil {
			err = w.Wait(ts)
		}
		if err != nil {
			return fmt.Errorf("push %d: %w", i, err)
		}
	}
	var got []V
	ts, err := w.Pull(keys, &got, nil)
	if err == nil {
		err = w.Wait(ts)
	}
	if err != nil {
		return fmt.Errorf("pull: %w", err)
	}
	for i := range keys {
		if want := vals[i] * V(repeat); got[i] != want {
			return fmt.Errorf("key %d holds %v, want %v (a push applied twice or lost)", i, got[i], want)
		}
	}
	return nil
}
