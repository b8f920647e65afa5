//go:build !cgo

package postoffice

import (
	"errors"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/van"
)

// zmqTransport fails: the ZeroMQ transport needs cgo. A program built with
// CGO_ENABLED=0 runs nodes on the default ZMTP transport, or over a
// transport it passes WithTransport (van.MemNetwork in tests).
func zmqTransport(Config, zerolog.Logger) (van.Transport, error) {
	return nil, errors.New("postoffice: built without cgo, so without the ZeroMQ transport that DMLC_PS_VAN_TYPE=zmq or CURVE keys need: build with CGO_ENABLED=1 (and libzmq), or leave DMLC_PS_VAN_TYPE unset (or zmtp) without CURVE keys")
}
