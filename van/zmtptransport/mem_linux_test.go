package zmtptransport

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// A large buffer from the pool asks for huge pages: the whole huge pages
// inside it become a mapping of their own flagged "hg" (MADV_HUGEPAGE).
func TestPoolBufferAdvisesHugePages(t *testing.T) {
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(b), "[never]") {
		t.Skip("no transparent huge pages here")
	}
	var p bufPool
	b := p.get(8 << 20)
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	first := (start + hugePage - 1) &^ (hugePage - 1)
	last := (start + uintptr(len(b))) &^ (hugePage - 1)
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	// The huge pages inside the buffer lie in one mapping flagged hg: of
	// their own, or merged with a neighbour's that is flagged too.
	found, inside := false, false
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 {
			inside = lo <= first && hi >= last
			found = found || inside
			continue
		}
		if inside && strings.HasPrefix(line, "VmFlags:") {
			if !strings.Contains(line, " hg") {
				t.Errorf("the mapping of %x-%x: %s, want the hg flag", first, last, line)
			}
			inside = false
		}
	}
	if !found {
		t.Errorf("no mapping holds %x-%x, the huge pages inside the buffer", first, last)
	}
}
