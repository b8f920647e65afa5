// Package tsmap provides Map, a map keyed by request timestamp for the
// per-request state that trackers and workers keep.
//
// A node hands out timestamps in order and keeps a few dozen requests in
// flight, each looked up several times between its start and its end. A Go
// map pays for hashing and probing on every lookup and leaves its memory
// scattered; Map keeps each timestamp in a slot of a small array indexed by
// the timestamp itself, so that the requests in flight sit side by side, and
// only a timestamp whose slot is taken by an older unfinished request goes to
// an ordinary map beside it.
package tsmap
