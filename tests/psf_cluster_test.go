package tests

import (
	"fmt"
	"strings"
	"testing"
)

// TestPSFThroughLocalSh runs test_psf, which checks every psf function,
// row operation, save, load and checkpoint against a local computation,
// as real multi-process jobs: 2 servers and 2 workers, 3 servers and 1
// worker, 1 server and 3 workers.
func TestPSFThroughLocalSh(t *testing.T) {
	for _, c := range []struct{ s, w int }{{2, 2}, {3, 1}, {1, 3}} {
		t.Run(fmt.Sprintf("%dx%d", c.s, c.w), func(t *testing.T) {
			env := []string{"PSF_TEST_DIR=" + t.TempDir()}
			out := launch(t, env, "local.sh", fmt.Sprint(c.s), fmt.Sprint(c.w), bin("test_psf"))
			if n := strings.Count(out, "checks passed"); n != c.w {
				t.Errorf("%d of %d workers passed:\n%s", n, c.w, out)
			}
		})
	}
}
