package kv

import (
	"errors"
	"fmt"
	"iter"
	"sort"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// KVPairs is a list of keys with their values. Without Lens every key has
// len(Vals)/len(Keys) values; with Lens key i has Lens[i] values.
type KVPairs[V message.Value] struct {
	Keys     []uint64
	Vals     []V
	Lens     []int32
	Priority int
}

// All yields each key with its values: Lens[i] of them with Lens, else
// len(Vals)/len(Keys). Each key's values are capped at their end, so that
// appending to them never overwrites the next key's. kvs must have passed
// Check (a handle's requests have).
func (kvs KVPairs[V]) All() iter.Seq2[uint64, []V] {
	return func(yield func(uint64, []V) bool) {
		per := 0
		if len(kvs.Lens) == 0 && len(kvs.Keys) > 0 {
			per = len(kvs.Vals) / len(kvs.Keys)
		}
		off := 0
		for i, k := range kvs.Keys {
			n := per
			if len(kvs.Lens) > 0 {
				n = int(kvs.Lens[i])
			}
			if !yield(k, kvs.Vals[off:off+n:off+n]) {
				return
			}
			off += n
		}
	}
}

// Check validates the shape of kvs: lens, when given, has one entry per key
// and sums to len(Vals); otherwise len(Vals) is a non-zero multiple of
// len(Keys).
// withVals false skips the value checks (a pull request carries no values).
func (kvs *KVPairs[V]) Check(withVals bool) error {
	if len(kvs.Lens) > 0 {
		if len(kvs.Lens) != len(kvs.Keys) {
			return fmt.Errorf("kv: %d lens for %d keys", len(kvs.Lens), len(kvs.Keys))
		}
		if !withVals {
			return nil
		}
		var sum int64
		for _, l := range kvs.Lens {
			if l < 0 {
				return fmt.Errorf("kv: negative length %d", l)
			}
			sum += int64(l)
		}
		if sum != int64(len(kvs.Vals)) {
			return fmt.Errorf("kv: lens sum to %d but there are %d values", sum, len(kvs.Vals))
		}
		return nil
	}
	if !withVals {
		return nil
	}
	if len(kvs.Keys) == 0 {
		if len(kvs.Vals) != 0 {
			return fmt.Errorf("kv: %d values without keys", len(kvs.Vals))
		}
		return nil
	}
	if len(kvs.Vals) == 0 {
		return fmt.Errorf("kv: no values for %d keys", len(kvs.Keys))
	}
	if len(kvs.Vals)%len(kvs.Keys) != 0 {
		return fmt.Errorf("kv: %d values is not a multiple of %d keys", len(kvs.Vals), len(kvs.Keys))
	}
	return nil
}

// Slicer splits a request over the servers: it returns one KVPairs per
// range, and a part with no keys is not sent.
type Slicer[V message.Value] func(kvs KVPairs[V], ranges []postoffice.Range) ([]KVPairs[V], error)

// ErrUnsortedKeys is returned by DefaultSlicer for keys not in ascending order.
var ErrUnsortedKeys = errors.New("kv: keys must be sorted in ascending order")

// DefaultSlicer sends each key to the server whose range holds it. Keys must
// be sorted ascending; the parts share memory with kvs.
func DefaultSlicer[V message.Value](kvs KVPairs[V], ranges []postoffice.Range) ([]KVPairs[V], error) {
	return sliceInto(make([]KVPairs[V], len(ranges)), kvs, ranges)
}

// unsortedAt returns the first i with keys[i] < keys[i-1], or 0 when keys
// are sorted. It compares eight pairs per branch: on the 1e6 keys of a bulk
// request that halves the check's time (it runs before anything is sent).
func unsortedAt(keys []uint64) int {
	i := 1
	for ; i+8 <= len(keys); i += 8 {
		k := keys[i-1 : i+8 : i+8]
		if k[1] < k[0] || k[2] < k[1] || k[3] < k[2] || k[4] < k[3] ||
			k[5] < k[4] || k[6] < k[5] || k[7] < k[6] || k[8] < k[7] {
			break
		}
	}
	for ; i < len(keys); i++ {
		if keys[i] < keys[i-1] {
			return i
		}
	}
	return 0
}

// sliceInto is DefaultSlicer into parts, which holds len(ranges) empty
// KVPairs (a worker's own, often on its stack).
func sliceInto[V message.Value](parts []KVPairs[V], kvs KVPairs[V], ranges []postoffice.Range) ([]KVPairs[V], error) {
	keys := kvs.Keys
	if len(keys) == 0 {
		return parts, nil
	}
	if len(ranges) == 0 {
		return nil, errors.New("kv: no servers")
	}
	if i := unsortedAt(keys); i > 0 {
		return nil, fmt.Errorf("%w (key %d is %d, key %d is %d)", ErrUnsortedKeys, i-1, keys[i-1], i, keys[i])
	}
	if keys[0] < ranges[0].Begin {
		return nil, fmt.Errorf("kv: key %d lies below every server's range", keys[0])
	}
	k := 0
	if len(kvs.Lens) == 0 {
		k = len(kvs.Vals) / len(keys)
	}
	withVals := len(kvs.Vals) > 0
	start, valStart := 0, 0
	for i := range ranges {
		end := len(keys)
		if i+1 < len(ranges) {
			next := ranges[i+1].Begin
			end = start + sort.Search(len(keys)-start, func(j int) bool { return keys[start+j] >= next })
		}
		if end == start {
			continue
		}
		p := KVPairs[V]{Keys: keys[start:end], Priority: kvs.Priority}
		if len(kvs.Lens) > 0 {
			p.Lens = kvs.Lens[start:end]
			n := 0
			for _, l := range p.Lens {
				n += int(l)
			}
			if withVals {
				p.Vals = kvs.Vals[valStart : valStart+n]
			}
			valStart += n
		} else if withVals {
			p.Vals = kvs.Vals[start*k : end*k]
		}
		parts[i] = p
		start = end
	}
	return parts, nil
}
