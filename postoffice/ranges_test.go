package postoffice_test

import (
	"testing"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

func TestKeyRangesNone(t *testing.T) {
	for _, n := range []int{0, -1} {
		if rs := postoffice.KeyRanges(n); rs != nil {
			t.Errorf("KeyRanges(%d) = %v, want nil", n, rs)
		}
	}
}

func TestKeyRanges(t *testing.T) {
	const maxKey = message.MaxKey
	for _, n := range []int{1, 2, 3, 7, 8, 100} {
		rs := postoffice.KeyRanges(n)
		if len(rs) != n {
			t.Fatalf("n=%d: %d ranges", n, len(rs))
		}
		if rs[0].Begin != 0 {
			t.Errorf("n=%d: first Begin %d", n, rs[0].Begin)
		}
		last := rs[n-1]
		if last.End != maxKey || !last.Last {
			t.Errorf("n=%d: last range %v (Last=%t), want End MaxKey and Last", n, last, last.Last)
		}
		if !last.Contains(maxKey) || !last.Contains(maxKey-1) {
			t.Errorf("n=%d: last range %v does not hold MaxKey", n, last)
		}
		var total uint64
		for i, r := range rs {
			// C++ ps-lite: server i starts at MaxKey/n*i.
			if want := maxKey / uint64(n) * uint64(i); r.Begin != want {
				t.Errorf("n=%d: range %d Begin %d, want %d", n, i, r.Begin, want)
			}
			if i < n-1 {
				if r.Last {
					t.Errorf("n=%d: range %d marked Last", n, i)
				}
				if r.End != rs[i+1].Begin {
					t.Errorf("n=%d: range %d ends at %d, next begins at %d", n, i, r.End, rs[i+1].Begin)
				}
				b := r.End
				if r.Contains(b) {
					t.Errorf("n=%d: range %d %v holds its End %d", n, i, r, b)
				}
				if !r.Contains(b-1) || rs[i+1].Contains(b-1) {
					t.Errorf("n=%d: key %d just below boundary not (only) in range %d", n, b-1, i)
				}
				if !rs[i+1].Contains(b) {
					t.Errorf("n=%d: boundary key %d not in range %d", n, b, i+1)
				}
				if got, want := r.String(), "["; got[:1] != want || got[len(got)-1:] != ")" {
					t.Errorf("n=%d: String %q, want half-open", n, got)
				}
			} else if s := r.String(); s[len(s)-1:] != "]" {
				t.Errorf("n=%d: last String %q, want closed", n, s)
			}
			if !r.Contains(r.Begin) {
				t.Errorf("n=%d: range %d does not hold its Begin", n, i)
			}
			if r.Begin > 0 && r.Contains(r.Begin-1) {
				t.Errorf("n=%d: range %d holds Begin-1", n, i)
			}
			total += r.Size() // wraps to MaxKey+1 == 0 in total when all keys are covered
		}
		// Sizes add up to MaxKey+1 keys (0 mod 2^64) when n > 1; for n=1 Size
		// saturates at MaxKey.
		if n > 1 && total != 0 {
			t.Errorf("n=%d: sizes add up to %d, want 2^64 (0 mod 2^64)", n, total)
		}
	}
}

func TestKeyRangesEveryKeyInExactlyOne(t *testing.T) {
	probe := []uint64{0, 1, 2, message.MaxKey, message.MaxKey - 1, message.MaxKey / 2, message.MaxKey/2 + 1}
	for _, n := range []int{1, 2, 3, 7, 8} {
		rs := postoffice.KeyRanges(n)
		keys := append([]uint64(nil), probe...)
		for _, r := range rs {
			keys = append(keys, r.Begin, r.End, r.End-1, r.Begin+1)
		}
		for _, k := range keys {
			cnt := 0
			for _, r := range rs {
				if r.Contains(k) {
					cnt++
				}
			}
			if cnt != 1 {
				t.Errorf("n=%d: key %d in %d ranges", n, k, cnt)
			}
		}
	}
}

func TestRangeSizeAndString(t *testing.T) {
	r := postoffice.Range{Begin: 10, End: 20}
	if r.Size() != 10 || r.String() != "[10, 20)" {
		t.Errorf("%v: Size %d", r, r.Size())
	}
	r.Last = true
	if r.Size() != 11 || r.String() != "[10, 20]" || !r.Contains(20) || r.Contains(21) {
		t.Errorf("last %v: Size %d", r, r.Size())
	}
	all := postoffice.KeyRanges(1)[0]
	if all.Size() != message.MaxKey {
		t.Errorf("whole key space Size %d, want saturated MaxKey", all.Size())
	}
	if (postoffice.Range{Begin: 5, End: 5}).Contains(5) {
		t.Error("empty range holds a key")
	}
}
