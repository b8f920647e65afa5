package control

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gopslite/pslite/message"
)

// ErrJobFailed is wrapped by every error that ends a job because of a
// fault: test for it with errors.Is.
var ErrJobFailed = errors.New("job failed")

// ErrNotReady is returned by calls that need a node that has joined its job.
var ErrNotReady = errors.New("control: the node has not joined the job")

// NodeLostError says which node a job lost and how: the error a scheduler
// fails with when a dead node is not replaced, and the one a server or
// worker fails with when it loses the scheduler.
type NodeLostError struct {
	// Node is the node lost: its role, id and address.
	Node message.Node
	// Cause is how the loss showed: "its connection closed", "no
	// heartbeat for 5s".
	Cause string
	// Outcome is what followed, e.g. "no replacement joined within 5s".
	Outcome string
}

func (e *NodeLostError) Error() string {
	var b strings.Builder
	b.WriteString(describe(e.Node))
	b.WriteString(" lost: ")
	b.WriteString(e.Cause)
	if e.Outcome != "" {
		b.WriteString("; ")
		b.WriteString(e.Outcome)
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrJobFailed) true.
func (e *NodeLostError) Unwrap() error { return ErrJobFailed }

// AbortError is the error of a server or worker whose job was stopped by
// another node: the scheduler, which decided, or a peer that found the
// fault first (it lost the scheduler). Reason is that node's account,
// naming the node lost.
type AbortError struct {
	By     int // the node that stopped the job
	Reason string
}

func (e *AbortError) Error() string {
	if e.By == message.Scheduler {
		return "the scheduler stopped the job: " + e.Reason
	}
	return message.DescribeID(e.By) + " stopped the job: " + e.Reason
}

// Unwrap makes errors.Is(err, ErrJobFailed) true.
func (e *AbortError) Unwrap() error { return ErrJobFailed }

// describe names a node for people: "worker 1 (node 11) at 10.0.0.3:4567".
func describe(n message.Node) string {
	s := message.DescribeID(int(n.ID))
	if n.ID == message.Empty {
		s = n.Role.String()
	}
	if n.Hostname != "" {
		s += fmt.Sprintf(" at %s", n.Addr())
	}
	return s
}
