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
	want := fmt.Sprintf("%x-%x ", first, last)
	found, inside := false, false
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		switch {
		case strings.HasPrefix(line, want):
			found, inside = true, true
		case inside && strings.HasPrefix(line, "VmFlags:"):
			if !strings.Contains(line, " hg") {
				t.Errorf("mapping %s: %s, want the hg flag", want, line)
			}
			inside = false
		}
	}
	if !found {
		t.Errorf("no mapping %s of its own for the huge pages inside the buffer", want)
	}
}
