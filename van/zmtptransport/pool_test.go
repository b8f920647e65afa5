package zmtptransport

import (
	"testing"
	"time"
)

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

// Buffers kept unused for a while are let go; those used since stay.
func TestIdleBuffersAreLetGo(t *testing.T) {
	p := bufPool{}
	defer p.close()
	old := p.get(4 << 20)
	p.put(old, false)
	p.since[0] = p.since[0].Add(-2 * poolIdle)
	recent := p.get(1 << 20)
	p.put(recent, false)
	if freed := p.trim(time.Now().Add(-poolIdle)); freed != 4<<20 {
		t.Fatalf("trim let go of %d bytes, want the idle 4 MiB buffer", freed)
	}
	if len(p.free) != 1 || &p.free[0][:1][0] != &recent[0] || p.bytes != 1<<20 {
		t.Fatalf("the pool keeps %d buffers, %d bytes; want the recent 1 MiB one", len(p.free), p.bytes)
	}
	if p.timer == nil {
		t.Fatal("no timer is armed while the pool keeps a buffer")
	}
	p.close()
	if len(p.free) != 0 || p.bytes != 0 || p.timer != nil {
		t.Fatal("close kept buffers or its timer")
	}
	p.put(make([]byte, 1<<20), false)
	if len(p.free) != 0 {
		t.Fatal("a closed pool kept a buffer")
	}
}
