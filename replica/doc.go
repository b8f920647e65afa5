// Package replica keeps every key range of a job on several servers, so
// that a server lost costs no acknowledged update (PS_REPLICAS): chain
// replication of the ranges, as the Parameter Server paper (Li et al., OSDI
// 2014) does it, with the scheduler as the configuration master.
//
// Three parts, none of which does I/O, starts goroutines or reads a clock:
//
//   - View says which servers hold each range, head first. Views are made
//     only by the scheduler and numbered by epoch.
//   - Planner is the scheduler's part: it makes a new view when a server
//     dies, when a replacement joins, when a server has copied a range
//     (Synced) and when a head has handed a range back (Drained).
//   - Core is a server's part, one per store: it takes workers' requests,
//     entries from the previous server of a chain, acknowledgements from
//     the next one, copies of ranges and views, and says what to apply,
//     send and answer, as Outputs the driver (package kv) carries out.
//
// The guarantees, for stores whose updates are deterministic: a request
// that changes the store is answered only once every server of its range's
// chain has applied it, in the same order everywhere; a worker that sends
// a request again (to a new head, after a failure) has it applied once;
// a server that copies a range gets every entry after its copy; a server
// removed from a chain is refused by the others (its messages carry an
// old incarnation or come from a place it no longer has), so it can never
// make them diverge. See docs/REPLICATION.md for the protocol and its
// failure cases.
package replica
