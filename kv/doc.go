// Package kv is the application layer of ps-lite: SimpleApp, which sends an
// int head and a string body to nodes and groups, and KVWorker / KVServer,
// which push and pull key-value pairs between workers and the servers that
// hold the model.
//
// Keys are uint64 and must be sorted ascending for the default slicer, which
// splits each request over the servers' key ranges. Values are any
// message.Value type (float32, float64, int32, int64, uint8, ...); each key
// carries a fixed number of values, or a variable number given by lens.
//
// Every call that sends returns a timestamp to Wait on; Wait returns an error
// when the request failed. Callbacks run, one at a time, where the customer
// handles the response (its goroutine, or the node's receive goroutine when
// the customer was idle) before Wait returns: keep them short, and never
// Wait in one.
//
//	w, err := kv.NewKVWorker[float32](po, 0, 0)
//	ts, err := w.Push(keys, vals, nil)
//	err = w.Wait(ts)
//	var out []float32
//	ts, err = w.Pull(keys, &out, nil)
//	err = w.Wait(ts) // out now holds the values of keys
package kv
