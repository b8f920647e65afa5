package tsmap

import (
	"maps"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMapMatchesGoMap applies the same seeded random operations to a Map
// and a Go map and checks that they agree after each: timestamps in order
// with some requests left unfinished for long (so that later ones share
// their slots), and random ones across the whole range.
func TestMapMatchesGoMap(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var m Map[int]
		want := map[int]int{}
		next := int(rng.Int32N(math.MaxInt32 - 10000))
		var live []int
		for op := range 20000 {
			switch r := rng.IntN(10); {
			case r < 4: // a new request
				ts := next
				next++
				if rng.IntN(50) == 0 {
					ts = int(rng.Int32N(math.MaxInt32))
				}
				m.Put(ts, op)
				if _, ok := want[ts]; !ok {
					live = append(live, ts)
				}
				want[ts] = op
			case r < 5 && len(live) > 0: // an update in place
				ts := live[rng.IntN(len(live))]
				*m.Ref(ts) += 7
				want[ts] += 7
			case r < 9 && len(live) > 0: // a finished one, mostly the oldest
				i := 0
				if rng.IntN(4) == 0 {
					i = rng.IntN(len(live))
				}
				ts := live[i]
				live = append(live[:i], live[i+1:]...)
				m.Delete(ts)
				delete(want, ts)
			default: // a lookup or delete of something absent
				ts := int(rng.Int32N(math.MaxInt32))
				if _, ok := want[ts]; !ok {
					m.Delete(ts)
					if _, ok := m.Get(ts); ok || m.Ref(ts) != nil {
						t.Fatalf("seed %d op %d: absent %d found", seed, op, ts)
					}
				}
			}
			if m.Len() != len(want) {
				t.Fatalf("seed %d op %d: Len %d, want %d", seed, op, m.Len(), len(want))
			}
			if op%97 == 0 {
				got := maps.Collect(m.All())
				if !maps.Equal(got, want) {
					t.Fatalf("seed %d op %d: All gives %v, want %v", seed, op, got, want)
				}
			}
			for _, ts := range live[:min(len(live), 3)] {
				if v, ok := m.Get(ts); !ok || v != want[ts] {
					t.Fatalf("seed %d op %d: Get(%d) = %d, %v; want %d", seed, op, ts, v, ok, want[ts])
				}
			}
		}
	}
}

// TestSharedSlot checks timestamps that share a slot: the later goes beside
// the array and both stay reachable, updatable and deletable in any order.
func TestSharedSlot(t *testing.T) {
	var m Map[string]
	a, b, c := 5, 5+slots, 5+2*slots
	m.Put(a, "a")
	m.Put(b, "b")
	m.Delete(a)
	m.Put(c, "c") // takes the freed slot; b stays beside it
	m.Put(b, "b2")
	*m.Ref(c) = "c2"
	if v, _ := m.Get(b); v != "b2" {
		t.Fatalf("b = %q", v)
	}
	if v, _ := m.Get(c); v != "c2" {
		t.Fatalf("c = %q", v)
	}
	if _, ok := m.Get(a); ok {
		t.Fatal("a still there")
	}
	m.Delete(b)
	m.Delete(c)
	if m.Len() != 0 || len(maps.Collect(m.All())) != 0 {
		t.Fatalf("not empty: %d", m.Len())
	}
}

// BenchmarkSliding is a tracker's use: 64 requests in flight, each put,
// looked up three times and deleted.
func BenchmarkSliding(b *testing.B) {
	b.Run("tsmap", func(b *testing.B) {
		var m Map[[3]int]
		for ts := range 64 {
			m.Put(ts, [3]int{1})
		}
		next := 64
		for b.Loop() {
			m.Put(next, [3]int{1})
			old := next - 64
			next++
			_, _ = m.Get(old)
			m.Ref(old)[1]++
			m.Delete(old)
			_, _ = m.Get(old)
		}
	})
	b.Run("gomap", func(b *testing.B) {
		m := map[int32][3]int{}
		for ts := range int32(64) {
			m[ts] = [3]int{1}
		}
		next := int32(64)
		for b.Loop() {
			m[next] = [3]int{1}
			old := next - 64
			next++
			_ = m[old]
			r := m[old]
			r[1]++
			m[old] = r
			delete(m, old)
			_ = m[old]
		}
	})
}
