package kv

import (
	"testing"

	"github.com/gopslite/pslite/message"
)

// FuzzDecodeKVs feeds arbitrary data frames to the code that turns a
// received message into keys, values and lens, and then to the default
// handle's store: nothing may panic, and whatever decodes must be
// consistent.
func FuzzDecodeKVs(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0}, []byte{0, 0, 128, 63}, []byte{}, true, uint8(2))
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}, []byte{0, 0, 128, 63, 0, 0, 0, 64, 0, 0, 64, 64}, []byte{1, 0, 0, 0, 2, 0, 0, 0}, true, uint8(3))
	f.Add([]byte{1, 2, 3}, []byte{}, []byte{}, false, uint8(2))
	f.Add([]byte{}, []byte{}, []byte{}, true, uint8(0))
	f.Fuzz(func(t *testing.T, keys, vals, lens []byte, push bool, frames uint8) {
		msg := message.New()
		msg.Meta.Push = push
		msg.Meta.Pull = !push
		all := [][]byte{keys, vals, lens}
		for i := 0; i < int(frames%4); i++ {
			msg.AddData(message.Uint8, all[i%3])
		}
		check := func(withVals bool) {
			for _, try := range []func() error{
				func() error {
					kvs, err := decodeKVs[float32](msg, withVals)
					if err == nil {
						if e := kvs.Check(withVals); e != nil {
							t.Fatalf("decoded pairs fail Check: %v", e)
						}
						h := NewDefaultHandle[float32]()
						if withVals {
							h.push(kvs)
						}
						h.pull(kvs.Keys, len(kvs.Lens) > 0)
					}
					return err
				},
				func() error { _, err := decodeKVs[uint8](msg, withVals); return err },
				func() error { _, err := decodeKVs[float64](msg, withVals); return err },
			} {
				_ = try()
			}
		}
		check(push)
		check(true)
	})
}
