package prog

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// Profile starts a CPU profile when PS_CPUPROFILE is set, written to
// $PS_CPUPROFILE.<role>.<pid>, and an execution trace when PS_TRACE is set,
// written to $PS_TRACE.<role>.<pid> (for go tool trace); call the returned
// function before exiting.
func Profile() func() {
	var stops []func()
	if prefix := os.Getenv("PS_CPUPROFILE"); prefix != "" {
		f := create(prefix, "cpu profile")
		if err := pprof.StartCPUProfile(f); err != nil {
			Failf("cpu profile: %v", err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if prefix := os.Getenv("PS_TRACE"); prefix != "" {
		f := create(prefix, "trace")
		if err := trace.Start(f); err != nil {
			Failf("trace: %v", err)
		}
		stops = append(stops, func() { trace.Stop(); f.Close() })
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// create creates prefix.<role>.<pid> for what.
func create(prefix, what string) *os.File {
	f, err := os.Create(fmt.Sprintf("%s.%s.%d", prefix, os.Getenv("DMLC_ROLE"), os.Getpid()))
	if err != nil {
		Failf("%s: %v", what, err)
	}
	return f
}
