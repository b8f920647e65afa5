package zmtptransport

import (
	"os"
	"strings"
	"testing"

	"github.com/gopslite/pslite/internal/hugemem"
)

// A large buffer from the pool asks for huge pages: the whole huge pages
// inside it lie in a mapping flagged "hg" (MADV_HUGEPAGE).
func TestPoolBufferAdvisesHugePages(t *testing.T) {
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(b), "[never]") {
		t.Skip("no transparent huge pages here")
	}
	var p bufPool
	b := p.get(8 << 20)
	advised, err := hugemem.Advised(b)
	if err != nil {
		t.Skip(err)
	}
	if !advised {
		t.Error("the pool's 8 MiB buffer is not advised for huge pages")
	}
}
