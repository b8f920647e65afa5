package psf

import (
	"math/bits"
	"unsafe"
)

// Load limits of a longTable: it grows when an insert would take its
// load above maxLoad, by growFactor, so that right after growing the load
// is maxLoad/growFactor = 0.5. A slot is a key and a value (16 bytes for
// float64 values), so a table takes between 20 and 32 bytes per entry
// (about 25 on average), plus a fixed 80 bytes or so.
const (
	maxLoad     = 0.8
	growFactor  = 1.6
	minTableCap = 4
	// maxEmptyTableCap is the largest capacity a table with no entries
	// keeps: Delete and partition.setTable drop the slots of larger ones.
	maxEmptyTableCap = 64
)

// longTable is a hash table from int64 keys to values of type V, with open
// addressing and linear probing over two slices, keys and vals, of the
// same length (the capacity). Key 0 marks an empty slot, so that a new
// table is zeroed memory; the entry of key 0 itself, when there is one,
// lives in a side slot (hasZero, zeroVal). Empty slots hold the zero V:
// code that folds over vals (sums, maxima) sees them as zeros.
//
// A key's home slot is the high half of h*cap, where h is the SplitMix64
// hash of the key rotated by 32 bits; the rotation keeps the table's slots
// independent of the column block (ColBlockOf), which takes the high half
// of the unrotated hash times the number of blocks. Deletion shifts the
// following entries back (no tombstones).
type longTable[V any] struct {
	keys    []int64
	vals    []V
	n       int // entries in keys/vals, key 0 excluded
	limit   int // the largest n before growing
	hasZero bool
	zeroVal V
}

// newLongTable returns a table with room for n entries without growing,
// at a load of about 0.64 (between the limits).
func newLongTable[V any](n int) *longTable[V] {
	t := &longTable[V]{}
	if n > 0 {
		t.alloc(max(minTableCap, int(float64(n)/0.64)+1))
	}
	return t
}

// alloc replaces the slots by empty ones of the given capacity.
func (t *longTable[V]) alloc(capacity int) {
	t.keys = make([]int64, capacity)
	t.vals = make([]V, capacity)
	t.n = 0
	t.limit = tableLimit(capacity)
}

// tableLimit is the largest number of entries of a table of the given
// capacity before it grows: always an empty slot, so probes end.
func tableLimit(capacity int) int {
	return min(capacity-1, int(float64(capacity)*maxLoad))
}

// homeSlot returns the first slot to probe for k in a table of capacity
// c > 0.
func homeSlot(k int64, c int) int {
	hi, _ := bits.Mul64(bits.RotateLeft64(mix64(uint64(k)), 32), uint64(c))
	return int(hi)
}

// Len returns the number of entries.
func (t *longTable[V]) Len() int {
	if t == nil {
		return 0
	}
	if t.hasZero {
		return t.n + 1
	}
	return t.n
}

// find returns the slot of k (not 0), or -1.
func (t *longTable[V]) find(k int64) int {
	c := len(t.keys)
	if c == 0 {
		return -1
	}
	for i := homeSlot(k, c); ; {
		switch t.keys[i] {
		case k:
			return i
		case 0:
			return -1
		}
		if i++; i == c {
			i = 0
		}
	}
}

// Get returns the value of k and whether it is stored; a nil table is
// empty.
func (t *longTable[V]) Get(k int64) (V, bool) {
	if t == nil {
		var zero V
		return zero, false
	}
	if k == 0 {
		return t.zeroVal, t.hasZero
	}
	if i := t.find(k); i >= 0 {
		return t.vals[i], true
	}
	var zero V
	return zero, false
}

// Ref returns a pointer to the value of k, inserting k with the zero V if
// it is not stored. The pointer is valid until the next insert or delete.
func (t *longTable[V]) Ref(k int64) *V {
	if k == 0 {
		t.hasZero = true
		return &t.zeroVal
	}
	if len(t.keys) == 0 {
		t.alloc(minTableCap)
	}
	c := len(t.keys)
	i := homeSlot(k, c)
	for {
		switch t.keys[i] {
		case k:
			return &t.vals[i]
		case 0:
			if t.n == t.limit {
				t.grow()
				return t.Ref(k)
			}
			t.keys[i] = k
			t.n++
			return &t.vals[i]
		}
		if i++; i == c {
			i = 0
		}
	}
}

// Set stores v for k.
func (t *longTable[V]) Set(k int64, v V) { *t.Ref(k) = v }

// grow moves the entries into slots growFactor times as many.
func (t *longTable[V]) grow() {
	t.rehash(max(minTableCap, int(float64(len(t.keys))*growFactor)+1))
}

// rehash moves the entries into c slots (c > t.n).
func (t *longTable[V]) rehash(c int) {
	keys, vals := t.keys, t.vals
	t.alloc(c)
	for j, k := range keys {
		if k == 0 {
			continue
		}
		i := homeSlot(k, c)
		for t.keys[i] != 0 {
			if i++; i == c {
				i = 0
			}
		}
		t.keys[i], t.vals[i] = k, vals[j]
		t.n++
	}
}

// Delete removes k, if stored.
func (t *longTable[V]) Delete(k int64) {
	var zero V
	if k == 0 {
		t.hasZero, t.zeroVal = false, zero
		return
	}
	i := t.find(k)
	if i < 0 {
		return
	}
	c := len(t.keys)
	// Shift back every following entry of the run whose home is not in
	// the cyclic interval (i, j]: it was pushed past the hole.
	for j := i; ; {
		if j++; j == c {
			j = 0
		}
		kj := t.keys[j]
		if kj == 0 {
			break
		}
		h := homeSlot(kj, c)
		if i <= j && (h <= i || h > j) || i > j && h <= i && h > j {
			t.keys[i], t.vals[i] = kj, t.vals[j]
			i = j
		}
	}
	t.keys[i], t.vals[i] = 0, zero
	t.n--
	if c > maxEmptyTableCap && t.n < t.limit/4 { // below a load of 0.2: give memory back
		if t.n == 0 {
			t.keys, t.vals, t.limit = nil, nil, 0
		} else {
			t.rehash(max(minTableCap, int(float64(t.n)/0.64)+1))
		}
	}
}

// Clone returns a copy of t (nil for nil).
func (t *longTable[V]) Clone() *longTable[V] {
	if t == nil {
		return nil
	}
	c := *t
	c.keys = append([]int64(nil), t.keys...)
	c.vals = append([]V(nil), t.vals...)
	return &c
}

// All yields every entry, in slot order (key 0 first). The table must not
// change during the iteration.
func (t *longTable[V]) All(yield func(int64, V) bool) {
	if t == nil {
		return
	}
	if t.hasZero && !yield(0, t.zeroVal) {
		return
	}
	for i, k := range t.keys {
		if k != 0 && !yield(k, t.vals[i]) {
			return
		}
	}
}

// Bytes returns the memory the table takes: its slots and the struct.
func (t *longTable[V]) Bytes() int64 {
	if t == nil {
		return 0
	}
	return int64(len(t.keys))*8 + int64(len(t.vals))*int64(unsafe.Sizeof(t.zeroVal)) + int64(unsafe.Sizeof(*t))
}
