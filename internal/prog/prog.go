// Package prog has the small helpers the test programs share.
package prog

import (
	"fmt"
	"os"

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
	role := os.Getenv("DMLC_ROLE")
	fmt.Fprintf(os.Stderr, "FAIL [%s rank %d]: %s\n", role, ps.MyRank(), fmt.Sprintf(format, args...))
	os.Exit(1)
}

// Logf prints a line prefixed with the node's role and rank.
func Logf(format string, args ...any) {
	fmt.Printf("[%s %d] %s\n", os.Getenv("DMLC_ROLE"), ps.MyRank(), fmt.Sprintf(format, args...))
}
