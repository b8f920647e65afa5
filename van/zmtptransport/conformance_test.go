package zmtptransport_test

import (
	"testing"
	"time"

	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/internal/transporttest"
	"github.com/gopslite/pslite/van/zmtptransport"
)

// The ZMTP transport keeps van.Transport's contract, as the other
// transports do (their TestConformance). Short receive timeouts and linger
// only make the suite quicker.
func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transporttest.Net {
		return transporttest.Net{Host: "127.0.0.1", New: func() (van.Transport, error) {
			return zmtptransport.New(zmtptransport.Options{
				RecvTimeout:       20 * time.Millisecond,
				Linger:            20 * time.Millisecond,
				ReconnectInterval: 20 * time.Millisecond,
			})
		}}
	})
}
