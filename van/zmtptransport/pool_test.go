package zmtptransport

import "testing"

func TestPoisonedBuffersAreQuarantinedNotReused(t *testing.T) {
	p := bufPool{}
	p.quarantine.Max = 3 << 10
	var given [][]byte
	for i := range 5 {
		b := p.get(1 << 10)
		for j := range b {
			b[j] = byte(i)
		}
		given = append(given, b)
		p.put(b, true)
	}
	if len(p.free) != 0 {
		t.Fatalf("%d poisoned buffers were put up for reuse", len(p.free))
	}
	seen := map[*byte]bool{}
	for i, b := range given {
		if seen[&b[0]] {
			t.Fatalf("buffer %d was handed out again", i)
		}
		seen[&b[0]] = true
		if b[0] != 0xDB || b[len(b)-1] != 0xDB {
			t.Fatalf("buffer %d reads %#x...%#x, want 0xDB", i, b[0], b[len(b)-1])
		}
	}
	if n, bytes := p.quarantine.Len(); bytes != 3<<10 || n != 3 || &p.quarantine.Oldest()[0] != &given[2][0] {
		t.Fatalf("the quarantine holds %d buffers, %d bytes; want the newest 3, 3 KiB", n, bytes)
	}
	b := p.get(1 << 10)
	p.put(b, false)
	if len(p.free) != 1 {
		t.Fatal("a buffer given back without poison is not kept for reuse")
	}
}
