package tsmap

import "iter"

// slots is the number of timestamps Map keeps in its array: timestamps
// fewer than this many apart never share a slot.
const slots = 256

// Map maps timestamps, in [0, MaxInt32), to values of type V. The zero Map
// is empty and ready to use. It is not safe for concurrent use.
type Map[V any] struct {
	slot [slots]entry[V]
	over map[int32]*V // timestamps whose slot was taken when they were put
	n    int
}

type entry[V any] struct {
	key int32 // timestamp + 1; 0: free
	val V
}

func (m *Map[V]) entry(k int32) *entry[V] { return &m.slot[int(k)&(slots-1)] }

// Get returns the value of ts and whether ts is in the map.
func (m *Map[V]) Get(ts int) (V, bool) {
	if p := m.Ref(ts); p != nil {
		return *p, true
	}
	var zero V
	return zero, false
}

// Ref returns a pointer to the value of ts, to update it in place, or nil
// when ts is not in the map. The pointer is valid until ts is deleted.
func (m *Map[V]) Ref(ts int) *V {
	k := int32(ts)
	if e := m.entry(k); e.key == k+1 {
		return &e.val
	}
	if len(m.over) > 0 {
		return m.over[k]
	}
	return nil
}

// Put sets the value of ts.
func (m *Map[V]) Put(ts int, v V) {
	if p := m.Ref(ts); p != nil {
		*p = v
		return
	}
	k := int32(ts)
	m.n++
	if e := m.entry(k); e.key == 0 {
		e.key, e.val = k+1, v
		return
	}
	if m.over == nil {
		m.over = make(map[int32]*V)
	}
	p := new(V) // (not &v, which would put every v on the heap)
	*p = v
	m.over[k] = p
}

// Delete removes ts from the map, if it is there.
func (m *Map[V]) Delete(ts int) {
	k := int32(ts)
	if e := m.entry(k); e.key == k+1 {
		*e = entry[V]{}
		m.n--
		return
	}
	if _, ok := m.over[k]; ok {
		delete(m.over, k)
		m.n--
	}
}

// Len returns the number of timestamps in the map.
func (m *Map[V]) Len() int { return m.n }

// All yields every timestamp in the map with its value, in no particular
// order. The map must not change while it is ranged over.
func (m *Map[V]) All() iter.Seq2[int, V] {
	return func(yield func(int, V) bool) {
		if m.n == 0 {
			return
		}
		for i := range m.slot {
			if e := &m.slot[i]; e.key != 0 && !yield(int(e.key-1), e.val) {
				return
			}
		}
		for k, p := range m.over {
			if !yield(int(k), *p) {
				return
			}
		}
	}
}
