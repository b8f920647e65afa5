package van_test

import (
	"testing"

	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/internal/transporttest"
)

// The in-memory transport keeps van.Transport's contract, as the socket
// transports do (their TestConformance).
func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transporttest.Net {
		n := van.NewMemNetwork()
		return transporttest.Net{Host: "mem", New: func() (van.Transport, error) { return n.Transport(), nil }}
	})
}
