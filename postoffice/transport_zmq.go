//go:build cgo

package postoffice

import (
	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/zmqtransport"
)

// defaultTransport returns the ZeroMQ transport cfg asks for.
func defaultTransport(cfg Config, log zerolog.Logger) (van.Transport, error) {
	return zmqtransport.New(zmqtransport.Options{
		Local:     cfg.Local,
		WaterMark: cfg.WaterMark,
		BindAll:   bindAll(cfg),
		Curve:     cfg.Curve,
		Log:       log,

		MaxMessageBytes: cfg.MaxMessageBytes,
		LinkTimeout:     cfg.LinkTimeout,
		PoisonLent:      cfg.PoisonLent,
		KeepRecvMemory:  cfg.KeepRecvMemory,
	})
}
