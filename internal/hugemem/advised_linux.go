package hugemem

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"unsafe"
)

// Advised reports whether the whole huge pages inside b lie in one mapping
// flagged for huge pages ("hg" in /proc/self/smaps): what Advise did, for
// tests and diagnostics. It returns false for a buffer holding no whole
// huge page, and an error when smaps cannot be read.
func Advised(b []byte) (bool, error) {
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	first := (start + Page - 1) &^ (Page - 1)
	last := (start + uintptr(len(b))) &^ (Page - 1)
	if last <= first {
		return false, nil
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return false, err
	}
	defer f.Close()
	// The huge pages lie in one mapping of their own, or merged with a
	// neighbour's flagged alike.
	inside := false
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 {
			inside = lo <= first && hi >= last
			continue
		}
		if inside && strings.HasPrefix(line, "VmFlags:") {
			return strings.Contains(line+" ", " hg "), nil
		}
	}
	return false, s.Err()
}
