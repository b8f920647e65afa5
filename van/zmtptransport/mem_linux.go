package zmtptransport

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page on the platforms Go runs
// Linux on with 4 KiB pages (x86-64, arm64).
const hugePage = 2 << 20

// adviseHuge asks the kernel to back the whole huge pages inside b with
// transparent huge pages when they are first touched (MADV_HUGEPAGE;
// systems whose transparent_hugepage setting is "madvise" use them only
// then). A large frame is received into fresh memory, and on a virtual
// machine a 4 KiB page costs 15-30 us to fault in, more than receiving its
// bytes: a huge page costs one fault. Memory already touched is unchanged,
// and an error (no transparent huge pages) leaves b as it was.
func adviseHuge(b []byte) {
	if len(b) < 2*hugePage {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	first := (start + hugePage - 1) &^ (hugePage - 1)
	last := (start + uintptr(len(b))) &^ (hugePage - 1)
	if last > first {
		_ = unix.Madvise(b[first-start:last-start], unix.MADV_HUGEPAGE)
	}
}
