// Package zmtptransport is a ps-lite transport that speaks ZeroMQ's wire
// protocol (ZMTP 3.1, NULL mechanism) in Go, without libzmq: a node listens
// on one socket, on which its peers connect as DEALERs (it is their
// ROUTER), and connects to each peer as a DEALER identified as "ps<id>".
// On the wire it is what libzmq's ROUTER and DEALER sockets are, so its
// nodes mix with nodes on the ZeroMQ transport (zmqtransport) and with C++
// ps-lite in one job. A node uses it by default (DMLC_PS_VAN_TYPE unset or
// zmtp); DMLC_PS_VAN_TYPE=zmq selects libzmq instead.
//
// What it buys: libzmq moves every message through an I/O thread of its
// own, so a message crosses two threads on each side on its way; here the
// goroutine that sends writes to the kernel itself (one non-blocking
// system call for a message to an idle peer), and the receiving side's
// reader goroutine is woken by Go's network poller. A round trip on
// loopback takes about half as long (docs/PERFORMANCE-NOTES.md).
//
// What it lacks: CURVE encryption (a job with PS_CURVE_* keys uses the
// ZeroMQ transport). With PS_LINK_TIMEOUT it sends ZMTP heartbeats as
// libzmq does (heartbeat.go), and it answers a peer's. It takes a
// heartbeat command between two frames of a message, which ZMTP's grammar
// does not allow but libzmq sends (a PONG or PING as soon as it is due).
//
// Between two nodes on this transport, a key list (a message's first data
// frame, 1 MiB or more) sent again goes as a reference to a copy the
// receiver keeps (keycache.go, Options.KeyCacheBytes): negotiated per
// connection in the handshake, invisible above the transport, never seen
// by libzmq or C++ peers. A sorted key list of 256 KiB or more whose gaps
// are mostly equal goes as its gaps (keycodec.go, Options.KeyCode; on by
// default through PS_KEY_CODE): negotiated the same way, decoded byte for
// byte before anything above the transport sees it.
//
// Goroutines: one accepts connections; with a link timeout, one pings; one per accepted connection reads
// it and passes messages to the receive loop through a bounded queue (a
// full queue stops the reading, and TCP pushes back on the sender); one
// per peer connects, reconnects every ReconnectInterval, and writes what
// waits in the peer's queue; one per peer connection reads (and answers)
// what the peer's ROUTER sends. No lock is held across I/O that may wait
// but a peer's write lock, which only its writer waits for and Close
// breaks with a deadline.
package zmtptransport
