package postoffice

import (
	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/zmtptransport"
)

// newTransport returns the transport cfg.VanType names: the ZeroMQ one by
// default, or ZMTP spoken in Go (which needs no cgo).
func newTransport(cfg Config, log zerolog.Logger) (van.Transport, error) {
	if cfg.VanType == "zmtp" {
		return zmtptransport.New(zmtptransport.Options{
			Local:           cfg.Local,
			WaterMark:       cfg.WaterMark,
			BindAll:         bindAll(cfg),
			MaxMessageBytes: cfg.MaxMessageBytes,
			LinkTimeout:     cfg.LinkTimeout,
			PoisonLent:      cfg.PoisonLent,
			Log:             log,
		})
	}
	return defaultTransport(cfg, log)
}

// bindAll reports whether the node binds every address rather than its
// host: the scheduler on Kubernetes.
func bindAll(cfg Config) bool { return cfg.Kubernetes && cfg.Role == message.RoleScheduler }
