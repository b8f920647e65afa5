package main

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// faultBytes is how much fresh memory faultCost touches: 16,384 pages of 4
// KiB, about 0.1-0.5 s here.
const faultBytes = 64 << 20

// faultCost returns the time the kernel takes to fault in one fresh 4 KiB
// page of anonymous memory, the median of three passes over faultBytes
// mapped for the purpose (huge pages refused, so that each page faults).
// The cold rows (test_kv_app_benchmark, raw zmq's fresh buffers, C++
// ps-lite's) pay it per page they touch first, and on a virtual machine it
// changes from hour to hour with the host (5x on this machine), so
// scripts/bench.sh records it next to the load.
func faultCost() (time.Duration, error) {
	const page = 4096
	var passes [3]time.Duration
	for i := range passes {
		b, err := unix.Mmap(-1, 0, faultBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			return 0, fmt.Errorf("mmap: %w", err)
		}
		_ = unix.Madvise(b, unix.MADV_NOHUGEPAGE) // an error leaves the default
		start := time.Now()
		for off := 0; off < len(b); off += page {
			b[off] = 1
		}
		passes[i] = time.Since(start) / (faultBytes / page)
		if err := unix.Munmap(b); err != nil {
			return 0, fmt.Errorf("munmap: %w", err)
		}
	}
	a, b, c := passes[0], passes[1], passes[2]
	return max(min(a, b), min(max(a, b), c)), nil
}
