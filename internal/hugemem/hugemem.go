package hugemem

import "unsafe"

// Page is the size of a transparent huge page on the platforms Go runs
// Linux on with 4 KiB pages (x86-64, arm64).
const Page = 2 << 20

// Make returns make([]V, n), advised (see Advise) when it spans at least two
// huge pages.
func Make[V any](n int) []V {
	v := make([]V, n)
	var zero V
	if size := int(unsafe.Sizeof(zero)); size > 0 {
		Advise(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), n*size)) // small ones it leaves alone
	}
	return v
}
