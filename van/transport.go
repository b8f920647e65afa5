package van

import (
	"context"
	"errors"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van/control"
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

// ErrOversized is returned (wrapped) by Transport.Recv for a message that
// had more frames or bytes than the transport accepts; the message is
// dropped and receiving goes on.
var ErrOversized = errors.New("van: message too large")

// MembershipWatcher is implemented by transports that hold connections
// claiming a member's identity until the node knows the job's members (the
// ZMTP transport, with AwaitMembers): the van calls MembersKnown once the
// node has joined (it has the node list, and the incarnations a Go
// scheduler sends before it).
type MembershipWatcher interface {
	MembersKnown()
}

// Incarnations is implemented by transports that tell processes apart:
// every connection this node makes presents the node's process
// incarnation (a random number it draws when it starts), and an accepted
// connection's is known. SetIncarnations gives, for node ids, the
// incarnation of the process that holds the id now (from the scheduler,
// which saw each register): a connection that claims one of those ids
// from another process (a replaced node's woken predecessor, or anyone
// else) is refused at its handshake, whatever Handover says. Ids not
// given (C++ nodes present none) keep the Handover rules.
type Incarnations interface {
	// ProcessOf returns the incarnation the connection holding identity
	// presented ("" when none).
	ProcessOf(identity []byte) string
	// SetIncarnations replaces the incarnations of node ids.
	SetIncarnations(byID map[int]string)
}

// Handover is implemented by transports whose receiving socket can let a
// new connection take over the identity of an open one (ZeroMQ's
// ROUTER_HANDOVER). The van turns it on for a while after a node is
// replaced, so that the replacement's connections are not refused while its
// frozen predecessor's stay open, and off again, so that no one else can
// take a member's identity. SetHandover is called by the goroutine running
// the receive loop.
type Handover interface {
	SetHandover(on bool) error
}

// ErrPeerClosed is returned by a Send that was waiting for room when the
// connection it waited on was replaced or closed.
var ErrPeerClosed = errors.New("van: connection closed while sending")

// Transport moves multipart messages between nodes. It is the only part of
// a node that touches sockets: zmtptransport (the default: ZeroMQ's
// ROUTER/DEALER over ZMTP, in Go) and zmqtransport (the same through
// libzmq, like C++ ps-lite) are the real ones, and MemNetwork an in-memory
// one for tests.
//
// Bind and Recv are called by one goroutine at a time (the one running the
// van's receive loop, which hands the loop to a new goroutine when a data
// handler runs long; the hand-over orders the calls). Connect, Disconnect,
// Send and TrySend may be called from any goroutine, and none of them waits
// on another one's send: a Send blocked on a slow peer holds up neither a
// reconnect nor Close.
type Transport interface {
	// Bind binds the receiving socket to host:port; port 0 lets the
	// transport pick a free one. When the port is taken and maxRetry > 0,
	// it tries up to maxRetry random ports in [10000, 50000). It returns
	// the port bound.
	Bind(host string, port, maxRetry int) (int, error)
	// Connect opens, or reopens, the sending side for node id, announcing
	// itself with identity (none when identity is empty). It does not wait
	// for the connection to be made.
	Connect(id int, host string, port int, identity string) error
	// Disconnect closes the sending side for node id, if any.
	Disconnect(id int)
	// Send sends the frames as one multipart message to node id and returns
	// the number of bytes sent. It waits while the peer's queue is full
	// (the peer does not keep up), until there is room, ctx is done, the
	// connection is replaced or closed (ErrPeerClosed), or the transport
	// closes. When shared is true the transport may send frames without
	// copying them, reading them after Send returns: the caller must not
	// change them any more (see message.Message.ZeroCopy). Either way, the
	// caller may reuse the list and its first frame (the meta) once Send
	// returns.
	Send(ctx context.Context, id int, frames [][]byte, shared bool) (int, error)
	// TrySend is Send that never waits: it queues small control messages
	// even on a full queue, up to a hard limit, past which it returns
	// ErrWouldBlock. The receive loop and the control protocol send this
	// way, so that they are never stuck behind a slow peer. shared is as
	// for Send (the resender's kept copies are sent shared).
	TrySend(id int, frames [][]byte, shared bool) (int, error)
	// Recv returns the next message: the sender's identity and its frames.
	// It returns ErrRecvTimeout now and then so that the caller can check
	// whether to stop.
	Recv() (identity []byte, frames [][]byte, err error)
	// Close closes every socket. The receive loop must have stopped. It
	// does not wait on sends in progress (they fail with ErrClosed).
	Close() error
}

// Batcher is implemented by transports that can hold back what is sent to
// a peer and send it later, together: ZeroMQ then writes a run of small
// messages out with one system call rather than one each, and the peer
// reads them with one. The receive loop holds the sender of each data
// message it handles, until nothing more has arrived (see receive):
// responses to a run of requests, and requests sent in answer to a run of
// responses, leave together.
type Batcher interface {
	// Hold makes small messages sent to node id queue, in order, without
	// being sent, until Flush (or until a number of them are queued). A
	// large message goes at once when nothing is queued, and otherwise
	// behind what is; sends from any goroutine queue behind the held ones,
	// so the order of what one goroutine sends to a peer is kept.
	Hold(id int)
	// Flush sends what the held peers' queues hold, and stops holding
	// them. It never waits.
	Flush()
	// TryRecvLent is Lender.RecvLent that returns ErrRecvTimeout at once
	// when no message waits (or none did when the transport last looked,
	// a moment ago: asking the socket again costs a system call, and the
	// receive that waits next finds what came since).
	TryRecvLent() (identity []byte, frames [][]byte, loan *message.Loan, err error)
}

// ConnectionReporter is implemented by transports that report the
// connections they open going down (the peer's process exited or closed
// the connection) and coming back up. The van's failure detection uses it
// besides heartbeats.
type ConnectionReporter interface {
	// SetConnectionHandler makes the transport call f(id, false) when the
	// connection to node id drops and f(id, true) when it is established,
	// for connections opened from now on. f runs on a goroutine of the
	// transport, never inside a call to the transport.
	SetConnectionHandler(f func(id int, up bool))
}

// Identity returns the socket identity of node id: "ps<id>".
func Identity(id int) string { return control.Identity(id) }

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

const emptyID = message.Empty
