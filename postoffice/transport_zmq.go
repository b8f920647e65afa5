//go:build cgo

package postoffice

import (
	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/zmqtransport"
)

// zmqTransport returns the ZeroMQ transport (libzmq) cfg asks for.
func zmqTransport(cfg Config, log zerolog.Logger) (van.Transport, error) {
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
		Process:         newIncarnation(),
	})
}
