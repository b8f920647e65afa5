//go:build !cgo

package testcluster

// realTransport says that nodes can run over real sockets: in a build
// without cgo (which `make nocgo` tests over the in-memory network), every
// cluster runs over the in-memory network.
const realTransport = false
