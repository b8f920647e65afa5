package hugemem

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Advise asks the kernel to back the whole huge pages inside b with
// transparent huge pages when they are first touched (MADV_HUGEPAGE).
// Memory already touched is unchanged, and an error (no transparent huge
// pages) leaves b as it was. Buffers under two huge pages are left alone.
func Advise(b []byte) {
	if len(b) < 2*Page {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	first := (start + Page - 1) &^ (Page - 1)
	last := (start + uintptr(len(b))) &^ (Page - 1)
	if last > first {
		_ = unix.Madvise(b[first-start:last-start], unix.MADV_HUGEPAGE)
	}
}
