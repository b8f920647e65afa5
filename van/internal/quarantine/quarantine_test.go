package quarantine

import (
	"slices"
	"testing"
)

// The oldest buffers leave first, once the bytes pass the bound; the newest
// stays even when it alone passes it.
func TestOldestLeaveFirst(t *testing.T) {
	q := Q[string]{Max: 10}
	if out := q.Add("a", 4); out != nil {
		t.Fatalf("evicted %v under the bound", out)
	}
	q.Add("b", 4)
	if out := q.Add("c", 4); !slices.Equal(out, []string{"a"}) {
		t.Fatalf("evicted %v, want [a]", out)
	}
	if n, b := q.Len(); n != 2 || b != 8 || q.Oldest() != "b" {
		t.Fatalf("holds %d buffers, %d bytes, oldest %q; want 2, 8, b", n, b, q.Oldest())
	}
	if out := q.Add("big", 50); !slices.Equal(out, []string{"b", "c"}) {
		t.Fatalf("evicted %v, want [b c]", out)
	}
	if n, b := q.Len(); n != 1 || b != 50 {
		t.Fatalf("holds %d buffers, %d bytes; want the one past the bound", n, b)
	}
	var d Q[int]
	d.Add(1, DefaultBytes)
	if out := d.Add(2, 1); !slices.Equal(out, []int{1}) {
		t.Fatalf("zero value: evicted %v, want [1] past DefaultBytes", out)
	}
}
