package psf

import (
	"errors"
	"fmt"
)

// The KV commands psf uses (the Cmd of a KV request, kv.WithCmd). psf
// reserves [CmdBase, CmdBase+256); plain KV traffic with other commands is
// not affected, and a psf Server passes it to its fallback handle.
const (
	// CmdBase is the first reserved command, 1<<20.
	CmdBase = 1 << 20
	// CmdFunc carries function calls: one key per partition.
	CmdFunc = CmdBase
	// CmdSystem carries matrix management (create, delete, meta, save,
	// load, checkpoint): one key per server.
	CmdSystem = CmdBase + 1
	// CmdEnd is the end (exclusive) of the reserved range.
	CmdEnd = CmdBase + 256
)

// DefaultAppID is the KV app id of psf's servers and clients unless
// WithAppID says otherwise; it differs from the app id 0 plain KV programs
// use, so both can run in one job.
const DefaultAppID = 0x5053 // "PS"

// wireVersion is the first byte of every request payload.
const wireVersion = 1

// Request kinds.
const (
	kindGet    = 1
	kindUpdate = 2
)

// System operations.
const (
	opCreate = iota + 1
	opDelete
	opMeta
	opSave
	opCommit
	opLoad
	opLoadCommit
	opLoadAbort
	opDrop // undo a create: drop the matrix if the create made it
)

// Response status codes: 0 is success, the rest name the error.
const (
	codeOK = iota
	codeError
	codeUnknownFunction
	codeNoMatrix
	codeNotColocated
	codeBadRequest
	codeSparse
)

// ErrNoMatrix is answered for a matrix the server does not hold.
var ErrNoMatrix = errors.New("psf: no such matrix")

// ErrBadRequest is answered for a request the server cannot decode or that
// does not fit the matrix (parameters of the wrong shape, a partition not
// on that server, ...).
var ErrBadRequest = errors.New("psf: bad request")

func errorCode(err error) uint8 {
	switch {
	case errors.Is(err, ErrUnknownFunction):
		return codeUnknownFunction
	case errors.Is(err, ErrNoMatrix):
		return codeNoMatrix
	case errors.Is(err, ErrNotColocated):
		return codeNotColocated
	case errors.Is(err, ErrBadRequest):
		return codeBadRequest
	case errors.Is(err, ErrSparse):
		return codeSparse
	}
	return codeError
}

// RemoteError is an error a server answered. errors.Is matches it against
// ErrUnknownFunction, ErrNoMatrix, ErrNotColocated, ErrBadRequest and
// ErrSparse.
type RemoteError struct {
	Server    int    // rank of the server that answered
	Partition int    // the partition, or -1 for a matrix operation
	Code      uint8  // one of the status codes
	Msg       string // the server's message
}

// Error returns the server's message with where it came from.
func (e *RemoteError) Error() string {
	if e.Partition < 0 {
		return fmt.Sprintf("psf: server %d: %s", e.Server, e.Msg)
	}
	return fmt.Sprintf("psf: server %d, partition %d: %s", e.Server, e.Partition, e.Msg)
}

// Unwrap returns the sentinel error of the code, if any.
func (e *RemoteError) Unwrap() error {
	switch e.Code {
	case codeUnknownFunction:
		return ErrUnknownFunction
	case codeNoMatrix:
		return ErrNoMatrix
	case codeNotColocated:
		return ErrNotColocated
	case codeBadRequest:
		return ErrBadRequest
	case codeSparse:
		return ErrSparse
	}
	return nil
}

// A response payload is a status byte, then the result's bytes (status
// codeOK) or the error message (varint length + bytes).

// okResponse returns an Encoder for a successful response, with room for n
// bytes of result after the status byte.
func okResponse(n int) *Encoder {
	b := make([]byte, 1, 1+n)
	b[0] = codeOK
	return NewEncoder(b)
}

// errorResponse is the response payload for err.
func errorResponse(err error) []byte {
	e := NewEncoder(nil)
	e.Uint8(errorCode(err))
	e.String(err.Error())
	return e.Bytes()
}

// encodeResponse is the response payload for a result or an error.
func encodeResponse(result []byte, err error) []byte {
	if err != nil {
		return errorResponse(err)
	}
	e := okResponse(len(result))
	e.buf = append(e.buf, result...)
	return e.Bytes()
}

// decodeResponse reads a response payload; the result shares memory with b.
func decodeResponse(b []byte, server, partition int) ([]byte, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("psf: empty response from server %d", server)
	}
	if b[0] == codeOK {
		return b[1:], nil
	}
	d := NewDecoder(b[1:])
	msg := d.String()
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("psf: malformed error response from server %d: %w", server, err)
	}
	return nil, &RemoteError{Server: server, Partition: partition, Code: b[0], Msg: msg}
}

// maxPayload is the largest payload of one key (lens are int32).
const maxPayload = 1<<31 - 1

type funcHeader struct {
	kind   uint8
	matrix string
	fn     string
	param  []byte
}

func encodeFuncRequest(h funcHeader) []byte {
	e := NewEncoder(make([]byte, 0, len(h.param)+len(h.matrix)+len(h.fn)+12))
	e.Uint8(wireVersion)
	e.Uint8(h.kind)
	e.String(h.matrix)
	e.String(h.fn)
	e.Blob(h.param)
	return e.Bytes()
}

func decodeFuncRequest(b []byte) (funcHeader, error) {
	d := NewDecoder(b)
	var h funcHeader
	if v := d.Uint8(); d.Err() == nil && v != wireVersion {
		return h, fmt.Errorf("%w: wire version %d (want %d)", ErrBadRequest, v, wireVersion)
	}
	h.kind = d.Uint8()
	h.matrix = d.String()
	h.fn = d.String()
	h.param = d.Blob()
	if err := d.Finish(); err != nil {
		return h, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return h, nil
}

type sysRequest struct {
	op     uint8
	matrix string
	args   []byte
}

func encodeSysRequest(r sysRequest) []byte {
	e := NewEncoder(nil)
	e.Uint8(wireVersion)
	e.Uint8(r.op)
	e.String(r.matrix)
	e.Blob(r.args)
	return e.Bytes()
}

func decodeSysRequest(b []byte) (sysRequest, error) {
	d := NewDecoder(b)
	var r sysRequest
	if v := d.Uint8(); d.Err() == nil && v != wireVersion {
		return r, fmt.Errorf("%w: wire version %d (want %d)", ErrBadRequest, v, wireVersion)
	}
	r.op = d.Uint8()
	r.matrix = d.String()
	r.args = d.Blob()
	if err := d.Finish(); err != nil {
		return r, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	return r, nil
}

// storeArgs are the arguments of save, commit and load: a directory, or a
// checkpoint id in the server's checkpoint directory; for a load, the
// layout to create the matrix with if a server does not hold it (else the
// saved one).
type storeArgs struct {
	dir        string
	checkpoint bool
	id         int64
	meta       *MatrixMeta
}

var storeArgsCodec = NewCodec(func(e *Encoder, a storeArgs) {
	e.String(a.dir)
	e.Bool(a.checkpoint)
	e.Varint(a.id)
	e.Bool(a.meta != nil)
	if a.meta != nil {
		encodeMeta(e, *a.meta)
	}
}, func(d *Decoder) storeArgs {
	a := storeArgs{dir: d.String(), checkpoint: d.Bool(), id: d.Varint()}
	if d.Bool() {
		m := decodeMeta(d)
		a.meta = &m
	}
	return a
})

var metaCodec = NewCodec(encodeMeta, decodeMeta)

// genCodec encodes the answer to a create and the argument of a drop: the
// generation of the matrix the create made on that server, 0 if the
// matrix was there already.
var genCodec = NewCodec((*Encoder).Uint64, (*Decoder).Uint64)
