//go:build !cgo

package testcluster

// realTransport says that nodes can run over ZeroMQ: not without cgo, so
// every cluster runs over the in-memory network.
const realTransport = false
