// Package hugemem allocates large buffers that the kernel backs with
// transparent huge pages when they are first touched.
//
// Fresh memory costs a page fault per 4 KiB page when first written, and on
// a virtual machine such a fault costs several microseconds: receiving or
// copying 40 MB into fresh memory then takes longer in faults than in
// copying. Asking for huge pages (MADV_HUGEPAGE, which systems whose
// transparent_hugepage setting is "madvise" need before they use them)
// turns 512 of those faults into one. Off Linux, and for memory already
// touched, the advice changes nothing.
package hugemem
