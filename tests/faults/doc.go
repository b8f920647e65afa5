// Package faults holds the in-process tests of the failure model (docs/FAILURES.md's
// table): whole jobs on a van.MemNetwork whose faults the tests inject —
// nodes killed, stopped and replaced, links cut for seconds or for good,
// messages dropped — with the protocol's time on a van.FakeClock, so that
// each row runs in a fraction of a second and its time bound is checked
// exactly, with no sleeps.
package faults
