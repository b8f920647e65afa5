// Package prog has the small helpers the test programs share.
package prog

import (
	"fmt"
	"os"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/ps"
)

// Check exits the program with status 1 and a message when err is not nil.
func Check(err error, what string) {
	if err != nil {
		Failf("%s: %v", what, err)
	}
}

// Failf prints a message naming the node and exits with status 1.
func Failf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL [%s]: %s\n", who(), fmt.Sprintf(format, args...))
	os.Exit(1)
}

// Logf prints a line prefixed with the node's role and rank.
func Logf(format string, args ...any) {
	fmt.Printf("[%s] %s\n", who(), fmt.Sprintf(format, args...))
}

// who names the node: its role, and its rank once it has one.
func who() string {
	role := os.Getenv("DMLC_ROLE")
	if p, err := ps.Node(); err == nil && p.MyID() != message.Empty && !p.IsScheduler() {
		return fmt.Sprintf("%s %d", role, p.MyRank())
	}
	return role
}
