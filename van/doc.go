// Package van carries messages between the nodes of a ps-lite job and drives
// the job's control protocol: registration of nodes with the scheduler and
// assignment of their ids (ADD_NODE), barriers (BARRIER), liveness
// (HEARTBEAT and connection events), the replacement of dead nodes, the
// failure of a job, acknowledgements and resends (PS_RESEND), and stopping
// (TERMINATE).
//
// A Van speaks C++ ps-lite's wire protocol, so Go and C++ nodes can be mixed
// in one job. The protocol's logic lives in package control, a state
// machine with no I/O and no clock; the van feeds it what it receives, the
// connection events of its transport and the ticks of a Clock, and carries
// out what it returns. Its sockets sit behind the Transport interface: the
// zmqtransport package is ZeroMQ ROUTER/DEALER as in C++ ps-lite (and the
// only part of the module that needs cgo), zmtptransport the same pattern
// speaking ZeroMQ's wire protocol in Go (the default; DMLC_PS_VAN_TYPE=zmq
// selects zmqtransport), and MemNetwork runs whole
// clusters in one process for tests, with faults injected (drops, delays,
// cut links, stopped and killed nodes) and, with a FakeClock, time that
// moves only when the test says so.
//
// One goroutine receives (recv.go); data messages are handed to a Handler
// (the postoffice), which routes them to customers. A customer that is idle
// handles the message right there, on the receive goroutine, which saves a
// thread hand-off per message; a handler that runs longer than HandlerStall
// makes a new goroutine take over receiving, so a slow or blocked handler
// never stalls the node. Control messages step the control core under a
// mutex that is never held across a send that waits (control.go); data
// sends wait for room in a slow peer's queue only until the job fails or
// the van stops (send.go). Malformed input from the network is logged and
// dropped.
//
// Small messages travel in runs (recv.go, Batcher): while the receive loop
// works through messages that have arrived already, what anyone sends to
// their senders is held back, in order, and sent together once nothing
// more has arrived (or after 32 messages). Responses to a burst of
// requests, and the requests a worker sends in answer to a burst of
// responses, then leave with one call into ZeroMQ and one system call at
// its I/O thread, instead of one each, and the peer reads them in one
// batch. A message is held back at most for the time the loop takes to
// handle the messages already received, and a handler that runs long hands
// the loop over, which sends what was held.
//
// Large received frames may be lent rather than copied (lend.go): a
// transport that implements Lender returns views of its own buffers and a
// message.Loan that gives them back, the van passes them on to customers
// that take lent messages (a KVServer with LendRequests, a KVWorker's pull
// answers) and copies them for all others, and a lent frame that is sent
// on holds its loan until the transport, or the resender, is done with it.
// docs/MEMORY.md has the whole ownership model in one table.
package van
