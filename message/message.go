package message

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Empty marks an unset id, app id or timestamp. Its value is part of the
// protocol: C++ ps-lite uses INT32_MAX.
const Empty = math.MaxInt32

// Role is a node's role. The numeric values are part of the protocol.
type Role int32

// Node roles.
const (
	RoleServer    Role = 0
	RoleWorker    Role = 1
	RoleScheduler Role = 2
)

// String returns the role's lower-case name, as used in DMLC_ROLE.
func (r Role) String() string {
	switch r {
	case RoleServer:
		return "server"
	case RoleWorker:
		return "worker"
	case RoleScheduler:
		return "scheduler"
	}
	return fmt.Sprintf("role(%d)", int32(r))
}

// ParseRole parses a DMLC_ROLE value.
func ParseRole(s string) (Role, error) {
	switch s {
	case "server":
		return RoleServer, nil
	case "worker":
		return RoleWorker, nil
	case "scheduler":
		return RoleScheduler, nil
	}
	return 0, fmt.Errorf("unknown role %q (want worker, server or scheduler)", s)
}

// Command is a control command. The numeric values are part of the protocol.
type Command int32

// Control commands.
const (
	CmdEmpty     Command = 0
	CmdTerminate Command = 1
	CmdAddNode   Command = 2
	CmdBarrier   Command = 3
	CmdAck       Command = 4
	CmdHeartbeat Command = 5
)

var commandNames = [...]string{"EMPTY", "TERMINATE", "ADD_NODE", "BARRIER", "ACK", "HEARTBEAT"}

// String returns the upper-case name C++ ps-lite prints for the command.
func (c Command) String() string {
	if c >= 0 && int(c) < len(commandNames) {
		return commandNames[c]
	}
	return fmt.Sprintf("CMD(%d)", int32(c))
}

// Node describes one node of a job.
type Node struct {
	Role       Role
	ID         int32 // Empty until the scheduler assigns one
	Hostname   string
	Port       int32
	IsRecovery bool
	CustomerID int32
}

// Addr returns "host:port", the key nodes are matched by.
func (n Node) Addr() string { return n.Hostname + ":" + strconv.Itoa(int(n.Port)) }

// String returns a short description of the node.
func (n Node) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "role=%s", n.Role)
	if n.ID != Empty {
		fmt.Fprintf(&b, ", id=%d", n.ID)
	}
	fmt.Fprintf(&b, ", ip=%s, port=%d, is_recovery=%t", n.Hostname, n.Port, n.IsRecovery)
	return b.String()
}

// Control is the system part of a meta. Cmd == CmdEmpty means a data message.
type Control struct {
	Cmd          Command
	Nodes        []Node
	BarrierGroup int32
	MsgSig       uint64
}

// Meta heads every message.
type Meta struct {
	Head       int32
	AppID      int32
	CustomerID int32
	Timestamp  int32
	// Sender and Recver are not on the wire: the sender comes from the
	// socket identity, the receiver is the local node.
	Sender    int32
	Recver    int32
	Request   bool
	Push      bool
	Pull      bool
	SimpleApp bool
	Body      []byte
	DataTypes []DataType
	Control   Control
	DataSize  int32
	Priority  int32
}

// NewMeta returns a Meta with every id field set to Empty, as C++ does.
func NewMeta() Meta {
	return Meta{Head: Empty, AppID: Empty, CustomerID: Empty, Timestamp: Empty, Sender: Empty, Recver: Empty}
}

// IsControl reports whether the meta carries a control command.
func (m *Meta) IsControl() bool { return m.Control.Cmd != CmdEmpty }

// String returns a one-line description for logs.
func (m *Meta) String() string {
	var b strings.Builder
	if m.Sender == Empty {
		b.WriteString("?")
	} else {
		fmt.Fprintf(&b, "%d", m.Sender)
	}
	fmt.Fprintf(&b, " => %d. Meta: request=%t", m.Recver, m.Request)
	if m.Timestamp != Empty {
		fmt.Fprintf(&b, ", timestamp=%d", m.Timestamp)
	}
	if m.IsControl() {
		fmt.Fprintf(&b, ", control={ cmd=%s", m.Control.Cmd)
		for _, n := range m.Control.Nodes {
			fmt.Fprintf(&b, " [%s]", n)
		}
		if m.Control.Cmd == CmdBarrier {
			fmt.Fprintf(&b, ", barrier_group=%d", m.Control.BarrierGroup)
		}
		if m.Control.Cmd == CmdAck {
			fmt.Fprintf(&b, ", msg_sig=%d", m.Control.MsgSig)
		}
		b.WriteString(" }")
	} else {
		fmt.Fprintf(&b, ", app_id=%d, customer_id=%d, simple_app=%t, push=%t, pull=%t",
			m.AppID, m.CustomerID, m.SimpleApp, m.Push, m.Pull)
	}
	if m.Head != Empty {
		fmt.Fprintf(&b, ", head=%d", m.Head)
	}
	if len(m.Body) > 0 {
		fmt.Fprintf(&b, ", body=%q", m.Body)
	}
	if len(m.DataTypes) > 0 {
		b.WriteString(", data_type={")
		for _, d := range m.DataTypes {
			b.WriteString(" " + d.String())
		}
		b.WriteString(" }")
	}
	return b.String()
}

// Message is a meta and its data frames.
type Message struct {
	Meta Meta
	Data [][]byte
	// ZeroCopy lets the transport send large Data frames without copying
	// them, reading them after the send returns. Whoever sets it promises
	// the frames do not change any more: a worker's request frames until
	// the request has finished (its responses prove they were sent), a
	// response's for good. Not on the wire.
	ZeroCopy bool

	// Process is, for a received message, the process incarnation of the
	// connection it came on, when the transport knows it (see
	// van.Incarnations). Not on the wire.
	Process string

	// Task, when set, makes the message a local task, never sent: a
	// customer runs it in its turn, in order with the messages it
	// handles, instead of handling a message (see customer.Customer.Do).
	Task func()

	lent uint64 // Data frames lent by the transport (bit i: Data[i])
	loan *Loan  // the message's hold on them; nil when nothing is lent

	// The first frames AddData adds go here, so that a message of a few
	// frames (a request: keys, values, lengths) is one allocation.
	inlineData  [inlineFrames][]byte
	inlineTypes [inlineFrames]DataType
}

// inlineFrames is how many frames a message holds without allocating.
const inlineFrames = 3

// Lend marks the Data frames of mask (bit i for Data[i]) as lent, views of
// the memory of loan, and hands the message one hold on loan (the
// caller's): Release or Own drops it. The van lends large frames of
// received requests to customers that accept them.
func (m *Message) Lend(mask uint64, loan *Loan) {
	m.lent, m.loan = mask, loan
	if loan == nil {
		m.lent = 0
	}
}

// Lent reports whether some of the message's frames are lent.
func (m *Message) Lent() bool { return m.loan != nil }

// IsLent reports whether Data[i] is lent.
func (m *Message) IsLent(i int) bool { return i >= 0 && i < 64 && m.lent&(1<<i) != 0 }

// Release drops the message's hold on its lent frames: from now on they
// must not be used (whoever kept a view of them reads garbage, or poison
// with PS_POISON_LENT). It does nothing for a message with nothing lent,
// or the second time.
func (m *Message) Release() {
	if l := m.loan; l != nil {
		m.loan, m.lent = nil, 0
		l.Drop()
	}
}

// Own replaces the lent frames by copies of the message's own and then
// drops its hold on the loan, so that the message can be kept. What goes
// back to the transport is the loan's own list of buffers, never the
// copies.
func (m *Message) Own() {
	if m.loan == nil {
		return
	}
	for i, f := range m.Data {
		if m.IsLent(i) {
			m.Data[i] = Clone(f)
		}
	}
	m.Release()
}

// Detached returns a copy of m that shares its meta and frames but holds
// no loan (whatever m's frames are, the copy's are not lent: the caller
// sees to their memory) and has a list of frames of its own. A message
// must never be copied by value: the copy would hold m's loan too, and
// both would drop it.
func (m *Message) Detached() *Message {
	c := &Message{Meta: m.Meta, ZeroCopy: m.ZeroCopy}
	c.SetFrames(m.Data)
	return c
}

// SetFrames makes frames the message's data frames, in a list of the
// message's own (the caller's list is not kept), and returns it.
func (m *Message) SetFrames(frames [][]byte) [][]byte {
	if len(frames) <= inlineFrames {
		m.Data = append(m.inlineData[:0:inlineFrames], frames...)
	} else {
		m.Data = append([][]byte(nil), frames...)
	}
	return m.Data
}

// cloneChunk bounds each memmove of a large copy: a collection that wants
// the copying goroutine stopped can stop it only between chunks.
const cloneChunk = 256 << 10

// Clone returns a copy of b in memory of its own. A large one is copied in
// chunks, yielding between them, so that a collection does not spin
// (signalling the thread again and again) waiting for one long memmove into
// fresh pages to end.
func Clone(b []byte) []byte {
	out := make([]byte, len(b))
	for off := 0; off < len(b); off += cloneChunk {
		copy(out[off:], b[off:min(off+cloneChunk, len(b))])
		if len(b) > cloneChunk {
			runtime.Gosched()
		}
	}
	return out
}

// New returns a message whose meta has every id set to Empty.
func New() *Message { return &Message{Meta: NewMeta()} }

// recycled holds messages given back with Recycle.
var recycled = sync.Pool{New: func() any { return new(Message) }}

// Get returns a message like New's, one given back with Recycle when there
// is one: a 1-key request and its response cost two messages at each end,
// which a busy node would otherwise allocate, and collect, by the million.
func Get() *Message {
	m := recycled.Get().(*Message)
	m.Meta = NewMeta()
	return m
}

// Recycle gives m back for Get to hand out again, after giving back its
// lent frames. Only its last user may call it: nothing may use m, or the
// slices of its meta, afterwards (the data frames themselves are not
// reused, only the message).
func (m *Message) Recycle() {
	m.Release()
	*m = Message{}
	recycled.Put(m)
}

// AddData appends a raw frame with its type tag and accounts for its size.
func (m *Message) AddData(t DataType, frame []byte) {
	if m.Data == nil && m.Meta.DataTypes == nil {
		m.Data, m.Meta.DataTypes = m.inlineData[:0], m.inlineTypes[:0]
	}
	m.Meta.DataTypes = append(m.Meta.DataTypes, t)
	m.Meta.DataSize += int32(len(frame))
	m.Data = append(m.Data, frame)
}

// String returns a one-line description for logs.
func (m *Message) String() string {
	s := m.Meta.String()
	if len(m.Data) > 0 {
		var b strings.Builder
		b.WriteString(s)
		b.WriteString(" Body:")
		for _, d := range m.Data {
			fmt.Fprintf(&b, " data_size=%d", len(d))
		}
		return b.String()
	}
	return s
}
