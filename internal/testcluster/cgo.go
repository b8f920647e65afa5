//go:build cgo

package testcluster

// realTransport says that nodes can run over real sockets: the default
// transport (ZMTP), or libzmq when a configuration asks for it (a cgo build).
const realTransport = true
