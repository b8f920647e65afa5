//go:build !cgo

package postoffice

import (
	"errors"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/van"
)

// defaultTransport fails: the ZeroMQ transport needs cgo. A program built
// with CGO_ENABLED=0 runs nodes with DMLC_PS_VAN_TYPE=zmtp, or over a
// transport it passes WithTransport (van.MemNetwork in tests).
func defaultTransport(Config, zerolog.Logger) (van.Transport, error) {
	return nil, errors.New("postoffice: built without cgo, so without the ZeroMQ transport: build with CGO_ENABLED=1 (and libzmq), use DMLC_PS_VAN_TYPE=zmtp, or pass WithTransport")
}
