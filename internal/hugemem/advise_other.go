//go:build !linux

package hugemem

// Advise does nothing off Linux.
func Advise([]byte) {}
