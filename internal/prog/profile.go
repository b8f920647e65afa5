package prog

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// Profile starts a CPU profile when PS_CPUPROFILE is set, written to
// $PS_CPUPROFILE.<role>.<pid>; call the returned function before exiting.
func Profile() func() {
	prefix := os.Getenv("PS_CPUPROFILE")
	if prefix == "" {
		return func() {}
	}
	f, err := os.Create(fmt.Sprintf("%s.%s.%d", prefix, os.Getenv("DMLC_ROLE"), os.Getpid()))
	if err != nil {
		Failf("cpu profile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		Failf("cpu profile: %v", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
