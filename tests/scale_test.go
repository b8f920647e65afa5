package tests

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
)

// TestStartupScale measures how start, a barrier and finalize grow with
// the job on the in-memory network: PSLITE_SCALE lists the node counts
// (e.g. "257,513,1025"; servers are an eighth). It logs the times and
// asserts nothing (a measurement, not a test; skipped without the
// variable).
func TestStartupScale(t *testing.T) {
	spec := os.Getenv("PSLITE_SCALE")
	if spec == "" {
		t.Skip("set PSLITE_SCALE to node counts, e.g. 257,513,1025")
	}
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 3 {
			t.Fatalf("PSLITE_SCALE: %q", f)
		}
		servers := max(1, (n-1)/8)
		workers := n - 1 - servers
		start := time.Now()
		c := testcluster.New(t, servers, workers, testcluster.Options{Mem: true, Quiet: true})
		started := time.Since(start)
		c.Finalize(t)
		t.Logf("%d nodes (%d servers, %d workers): start %.2fs, barrier and finalize %.2fs",
			n, servers, workers, started.Seconds(), time.Since(start).Seconds()-started.Seconds())
	}
}
