//go:build cgo

package testcluster

// realTransport says that nodes can run over ZeroMQ (a cgo build).
const realTransport = true
