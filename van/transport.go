package van

import (
	"errors"
	"strconv"
)

// ErrRecvTimeout is returned by Transport.Recv when no message arrived
// within the transport's receive timeout; the caller simply tries again.
var ErrRecvTimeout = errors.New("van: receive timed out")

// ErrNoPeer is returned by Transport.Send for a node that was never connected.
var ErrNoPeer = errors.New("van: no connection to node")

// ErrWouldBlock is returned by Transport.TrySend when the message cannot be
// queued without waiting.
var ErrWouldBlock = errors.New("van: send would block")

// ErrClosed is returned by a transport that has been closed.
var ErrClosed = errors.New("van: transport closed")

// Transport moves multipart messages between nodes. It is the only part of
// the van that touches sockets: ZMQTransport is the real one, and
// MemNetwork provides an in-memory one for tests.
//
// Bind and Recv are called by one goroutine at a time (the one running the
// van's receive loop, which hands the loop to a new goroutine when a data
// handler runs long; the hand-over orders the calls). Connect and Send may
// be called from any goroutine.
type Transport interface {
	// Bind binds the receiving socket to host:port; port 0 lets the
	// transport pick a free one. When the port is taken and maxRetry > 0,
	// it tries up to maxRetry random ports in [10000, 50000). It returns
	// the port bound.
	Bind(host string, port, maxRetry int) (int, error)
	// Connect opens, or reopens, the sending socket for node id, announcing
	// itself with identity (none when identity is empty).
	Connect(id int, host string, port int, identity string) error
	// Disconnect closes the sending socket for node id, if any.
	Disconnect(id int)
	// Send sends the frames as one multipart message to node id and returns
	// the number of bytes sent. When shared is true the transport may send
	// frames without copying them, reading them after Send returns: the
	// caller must not change them any more (see message.Message.ZeroCopy).
	Send(id int, frames [][]byte, shared bool) (int, error)
	// TrySend is Send that never waits: when the message cannot be queued
	// at once (the peer is slow), it returns ErrWouldBlock. The receive
	// loop uses it, so that it can never be stuck behind a full queue.
	TrySend(id int, frames [][]byte) (int, error)
	// Recv returns the next message: the sender's identity and its frames.
	// It returns ErrRecvTimeout now and then so that the caller can check
	// whether to stop.
	Recv() (identity []byte, frames [][]byte, err error)
	// Close closes every socket. The receive loop must have stopped.
	Close() error
}

// Identity returns the socket identity of node id: "ps<id>".
func Identity(id int) string { return "ps" + strconv.Itoa(id) }

// ParseIdentity returns the node id of a "ps<digits>" identity, or
// message.Empty for anything else (a node that has no id yet).
func ParseIdentity(b []byte) int32 {
	if len(b) <= 2 || b[0] != 'p' || b[1] != 's' || len(b) > 12 {
		return emptyID
	}
	var id int64
	for _, c := range b[2:] {
		if c < '0' || c > '9' {
			return emptyID
		}
		id = id*10 + int64(c-'0')
	}
	if id >= emptyID {
		return emptyID
	}
	return int32(id)
}
