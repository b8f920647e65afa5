package postoffice

import (
	"fmt"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/zmtptransport"
)

// newTransport returns the transport cfg.VanType names: ZMTP spoken in Go
// (the default, which needs no cgo) or the ZeroMQ one through libzmq, which
// is also what an empty VanType with CURVE keys gets.
func newTransport(cfg Config, log zerolog.Logger) (van.Transport, error) {
	switch {
	case cfg.VanType == "zmq", cfg.VanType == "" && cfg.Curve != nil:
		return zmqTransport(cfg, log)
	case cfg.VanType != "" && cfg.VanType != "zmtp":
		return nil, fmt.Errorf("%w: van type %q is not supported (zmq or zmtp)", ErrConfig, cfg.VanType)
	case cfg.Curve != nil:
		return nil, fmt.Errorf("%w: the zmtp van has no CURVE: leave the van type empty or zmq", ErrConfig)
	}
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

// bindAll reports whether the node binds every address rather than its
// host: the scheduler on Kubernetes.
func bindAll(cfg Config) bool { return cfg.Kubernetes && cfg.Role == message.RoleScheduler }
