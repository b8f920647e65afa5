// Package zmqtransport is the ZeroMQ transport of a ps-lite node, as in C++
// ps-lite: every node binds one ROUTER socket and opens one DEALER socket
// per peer, identified as "ps<id>" (see van.Transport). It is the only
// package of the module that needs cgo (pebbe/zmq4 and a little C of its
// own, zmqmsg.c, for frames sent without a copy); everything else builds
// and is tested with CGO_ENABLED=0 over van.MemNetwork.
//
// Each DEALER belongs to a writer goroutine, so no lock is held while a
// send waits on a slow peer: a Send to an idle peer goes straight to
// ZeroMQ (which takes the message or refuses it at once), anything else
// waits in the peer's bounded queue, and Connect, Disconnect and Close only
// signal the writers. Connections going down and up are reported through
// socket monitors (van.ConnectionReporter), which the van's failure
// detection uses.
//
// Small messages cross cgo in runs (queue.go): those queued for a peer
// (held by the van's receive loop, or waiting behind a busy socket) are
// packed end to end and handed to libzmq with one call, and the receiving
// side takes every message that has arrived already, up to 32, with one
// call and one copy into Go memory (frameReader).
package zmqtransport
