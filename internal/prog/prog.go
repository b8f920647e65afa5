// Package prog has the small helpers the test programs share.
package prog

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/ps"
)

// Check exits the program with status 1 and a message when err is not nil.
func Check(err error, what string) {
	if err != nil {
		Failf("%s: %v", what, err)
	}
}

// Failf prints a message naming the node and exits with status 1. When the
// job failed, it first stops the node (within flushWithin), so that the
// notices telling the other nodes why leave before the process does.
func Failf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL [%s]: %s\n", who(), fmt.Sprintf(format, args...))
	if p, err := ps.Node(); err == nil && p.Van().Err() != nil {
		ctx, cancel := context.WithTimeout(context.Background(), flushWithin)
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Finalize(ctx, 0, false)
		}()
		select {
		case <-done:
		case <-ctx.Done():
		}
		cancel()
	}
	os.Exit(1)
}

// flushWithin bounds how long Failf waits for a failed node to stop.
const flushWithin = 2 * time.Second

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
