// Package van carries messages between the nodes of a ps-lite job and runs
// the job's control protocol: registration of nodes with the scheduler and
// assignment of their ids (ADD_NODE), barriers (BARRIER), liveness
// (HEARTBEAT) and stopping (TERMINATE).
//
// A Van speaks C++ ps-lite's wire protocol, so Go and C++ nodes can be mixed
// in one job. Its sockets sit behind the Transport interface: ZMQTransport is
// ZeroMQ ROUTER/DEALER as in C++ ps-lite, and MemNetwork runs whole clusters
// in one process for tests.
//
// One goroutine receives and runs the control protocol; data messages are
// handed to a Handler (the postoffice), which routes them to customers.
// A customer that is idle handles the message right there, on the receive
// goroutine, which saves a thread hand-off per message; a handler that runs
// longer than HandlerStall makes a new goroutine take over receiving, so a
// slow or blocked handler never stalls the node. Malformed input from the
// network is logged and dropped.
package van
