//go:build !linux

package zmtptransport

// adviseHuge does nothing off Linux.
func adviseHuge([]byte) {}
