package customer

import "syscall"

// yieldCPU gives this thread's CPU to another runnable thread, if any, for
// a moment (sched_yield). Tests replace it to count the calls.
var yieldCPU = func() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
