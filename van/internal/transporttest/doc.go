// Package transporttest is a conformance suite for van.Transport, as
// hashicorp/raft has for its transports: one set of cases, run over every
// implementation (van.MemNetwork's in-memory transport, zmtptransport and
// zmqtransport), each from a TestConformance of its own package:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T) transporttest.Net {
//			return transporttest.Net{Host: "127.0.0.1", New: func() (van.Transport, error) {
//				return zmtptransport.New(zmtptransport.Options{RecvTimeout: 20 * time.Millisecond})
//			}}
//		})
//	}
//
// Each case is a subtest with transports of its own, bound on fresh ports,
// with node ids and identities ("ps<id>") of their own.
//
// The cases check what van.Transport's documentation promises, and only
// that; where it is silent, they check what every transport does, and say
// so. A message's frames and its sender's identity arrive intact (empty
// frames, 8 MiB frames, many frames; a node that connected without an
// identity has one that is no node's); Send and TrySend return the bytes
// they sent; what one goroutine sends to a peer arrives in order, also
// with several goroutines of several nodes sending at once (run the suite
// under -race) and while another reconnects; Connect reopens a connection
// under a new identity; the caller may reuse the frame list and the first
// frame once Send returns, and every frame it did not share, and shared
// frames are never written to; a node never connected is ErrNoPeer; a peer
// nobody listens for costs a Send no more than its context; Send waits for
// room on a full queue until its context is done, the connection is
// replaced or dropped (ErrPeerClosed) or the transport closes (ErrClosed),
// and holds up no other send, Connect or Disconnect; TrySend queues past a
// full queue up to a hard limit (ErrWouldBlock) and never waits; Recv
// returns ErrRecvTimeout now and then; Close returns, twice too, while a
// Send waits, and the calls after it fail with ErrClosed; Bind picks a
// port, fails on a port taken, and retries in [10000, 50000) when asked
// to. Of the optional interfaces, van.ConnectionReporter (a connection up,
// then down when the peer closes, reported outside any call to the
// transport) and van.Batcher (what is sent to a held peer arrives, in
// order, once flushed) are checked where implemented.
//
// A case that a transport is known to fail says so in its comment (KNOWN
// VIOLATION) rather than being left out.
//
// Every wait is bounded: a call that hangs fails its case, after a bound
// far beyond what anything takes on a loaded machine, instead of hanging
// the test binary. Nothing sleeps to synchronise: the cases wait for
// messages, events and calls' results. The one thing the suite cannot
// observe, that a Send has begun to wait for room before the case
// replaces or closes what it waits on, it learns from the Send asking its
// context for Done, with a bounded fallback.
//
// The suite is sized for the transports' default queue bounds (a peer's
// queue fills within a few thousand small messages): a factory should
// leave those, and may shorten the receive timeout and the linger time,
// which only slow the cases down.
package transporttest
