package postoffice

import (
	"fmt"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/replica"
)

// Range is a range of keys [Begin, End). The last range of a job also holds
// message.MaxKey itself, so that every key belongs to some server.
type Range struct {
	Begin, End uint64
	// Last marks the final range, which is closed at End == MaxKey.
	Last bool
}

// Contains reports whether key falls in r.
func (r Range) Contains(key uint64) bool {
	return key >= r.Begin && (key < r.End || r.Last && key == r.End)
}

// Size returns the number of keys in r (saturating at MaxKey).
func (r Range) Size() uint64 {
	n := r.End - r.Begin
	if r.Last && n < message.MaxKey {
		n++
	}
	return n
}

// String returns "[begin, end)".
func (r Range) String() string {
	if r.Last {
		return fmt.Sprintf("[%d, %d]", r.Begin, r.End)
	}
	return fmt.Sprintf("[%d, %d)", r.Begin, r.End)
}

// KeyRanges splits the key space over n servers the way C++ ps-lite does
// (server i starts at MaxKey/n*i), except that the last range reaches MaxKey,
// so no key falls outside every range (upstream drops keys above MaxKey/n*n).
func KeyRanges(n int) []Range {
	if n <= 0 {
		return nil
	}
	rs := make([]Range, n)
	for i := range rs {
		rs[i].Begin, rs[i].End, rs[i].Last = replica.KeyRange(i, n)
	}
	return rs
}
