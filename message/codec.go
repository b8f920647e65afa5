package message

import (
	"errors"
	"fmt"

	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrBadMeta wraps every error Decode returns.
var ErrBadMeta = errors.New("malformed meta")

// Encode returns the wire form of m, written the way C++ ps-lite writes it:
// head, push, pull, request, simple_app, priority, customer_id and data_size
// always; app_id and timestamp only when not Empty; body only when not empty;
// barrier_group only for BARRIER and msg_sig only for ACK; every field of a
// node.
//
// Metas are written directly, field by field in field-number order, to
// exactly the bytes the generated code writes (TestEncodeMatchesGenerated):
// a node list goes out to every node of a job, and the generated code's
// copy of it into messages of its own cost more than the rest of a large
// job's start.
func Encode(m *Meta) ([]byte, error) {
	return appendMeta(make([]byte, 0, metaSize(m)), m), nil
}

// AppendEncode appends Encode's bytes for m to b, so that a caller can
// encode into a buffer it reuses.
func AppendEncode(b []byte, m *Meta) ([]byte, error) {
	if m.IsControl() {
		b = slices.Grow(b, metaSize(m))
	}
	return appendMeta(b, m), nil
}

// PBMeta's field numbers (message/pb/meta.proto).
const (
	fieldHead       protowire.Number = 1
	fieldBody       protowire.Number = 2
	fieldControl    protowire.Number = 3
	fieldRequest    protowire.Number = 4
	fieldPush       protowire.Number = 5
	fieldSimpleApp  protowire.Number = 6
	fieldAppID      protowire.Number = 7
	fieldTimestamp  protowire.Number = 8
	fieldDataType   protowire.Number = 9
	fieldCustomerID protowire.Number = 10
	fieldDataSize   protowire.Number = 11
	fieldPull       protowire.Number = 12
	fieldPriority   protowire.Number = 13
)

// int32Size and appendInt32 follow protobuf's int32 encoding: negative
// values are sign-extended to ten bytes.
func int32Size(v int32) int { return protowire.SizeVarint(uint64(v)) }

func appendInt32(b []byte, num protowire.Number, v int32) []byte {
	return appendVarint(append(b, tag(num, protowire.VarintType)), uint64(v))
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	x := byte(0)
	if v {
		x = 1
	}
	return append(b, tag(num, protowire.VarintType), x)
}

// tag is the one-byte tag of a field numbered below 16.
func tag(num protowire.Number, typ protowire.Type) byte { return byte(num)<<3 | byte(typ) }

// appendVarint is protowire.AppendVarint, inlined for values below 128.
func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

// metaSize returns the encoded size of a meta (every tag here is one byte).
func metaSize(m *Meta) int {
	n := 1 + int32Size(m.Head) + 4*2 + 1 + int32Size(m.CustomerID) + 1 + int32Size(m.DataSize) + 1 + int32Size(m.Priority)
	if m.IsControl() {
		n += 1 + protowire.SizeBytes(controlSize(&m.Control))
	}
	if len(m.Body) > 0 {
		n += 1 + protowire.SizeBytes(len(m.Body))
	}
	if m.AppID != Empty {
		n += 1 + int32Size(m.AppID)
	}
	if m.Timestamp != Empty {
		n += 1 + int32Size(m.Timestamp)
	}
	if len(m.DataTypes) > 0 {
		n += 1 + protowire.SizeBytes(packedSize(m.DataTypes))
	}
	return n
}

func packedSize(ds []DataType) int {
	n := 0
	for _, d := range ds {
		n += int32Size(int32(d))
	}
	return n
}

// controlSize returns the encoded size of a control (without its tag and
// length).
func controlSize(c *Control) int {
	n := 1 + int32Size(int32(c.Cmd))
	for i := range c.Nodes {
		n += 1 + protowire.SizeBytes(nodeSize(&c.Nodes[i]))
	}
	switch c.Cmd {
	case CmdBarrier:
		n += 1 + int32Size(c.BarrierGroup)
	case CmdAck:
		n += 1 + protowire.SizeVarint(c.MsgSig)
	}
	return n
}

// nodeSize returns the encoded size of a node (without its tag and length).
func nodeSize(n *Node) int {
	return 1 + int32Size(int32(n.Role)) + 1 + int32Size(n.ID) + 1 + protowire.SizeBytes(len(n.Hostname)) +
		1 + int32Size(n.Port) + 2 + 1 + int32Size(n.CustomerID)
}

// appendMeta appends the wire form of a meta.
func appendMeta(b []byte, m *Meta) []byte {
	b = appendInt32(b, fieldHead, m.Head)
	if len(m.Body) > 0 {
		b = append(b, tag(fieldBody, protowire.BytesType))
		b = protowire.AppendBytes(b, m.Body)
	}
	if m.IsControl() {
		b = appendControl(b, &m.Control)
	}
	b = appendBool(b, fieldRequest, m.Request)
	b = appendBool(b, fieldPush, m.Push)
	b = appendBool(b, fieldSimpleApp, m.SimpleApp)
	if m.AppID != Empty {
		b = appendInt32(b, fieldAppID, m.AppID)
	}
	if m.Timestamp != Empty {
		b = appendInt32(b, fieldTimestamp, m.Timestamp)
	}
	if len(m.DataTypes) > 0 {
		b = append(b, tag(fieldDataType, protowire.BytesType))
		b = appendVarint(b, uint64(packedSize(m.DataTypes)))
		for _, d := range m.DataTypes {
			b = appendVarint(b, uint64(int32(d)))
		}
	}
	b = appendInt32(b, fieldCustomerID, m.CustomerID)
	b = appendInt32(b, fieldDataSize, m.DataSize)
	b = appendBool(b, fieldPull, m.Pull)
	b = appendInt32(b, fieldPriority, m.Priority)
	return b
}

// appendControl appends a control as PBMeta's field.
func appendControl(b []byte, c *Control) []byte {
	b = append(b, tag(fieldControl, protowire.BytesType))
	b = appendVarint(b, uint64(controlSize(c)))
	b = appendInt32(b, fieldCmd, int32(c.Cmd))
	for i := range c.Nodes {
		n := &c.Nodes[i]
		b = append(b, tag(fieldNode, protowire.BytesType))
		b = appendVarint(b, uint64(nodeSize(n)))
		b = appendInt32(b, fieldRole, int32(n.Role))
		b = appendInt32(b, fieldID, n.ID)
		b = append(b, tag(fieldHostname, protowire.BytesType))
		b = appendVarint(b, uint64(len(n.Hostname)))
		b = append(b, n.Hostname...)
		b = appendInt32(b, fieldPort, n.Port)
		b = appendBool(b, fieldIsRecovery, n.IsRecovery)
		b = appendInt32(b, fieldNodeCustID, n.CustomerID)
	}
	switch c.Cmd {
	case CmdBarrier:
		b = appendInt32(b, fieldBarrierGroup, c.BarrierGroup)
	case CmdAck:
		b = append(b, tag(fieldMsgSig, protowire.VarintType))
		b = protowire.AppendVarint(b, c.MsgSig)
	}
	return b
}

// Decode parses the wire form of a meta. Absent app_id, timestamp and node ids
// read as Empty; Sender and Recver are left Empty for the caller to fill. An
// unknown data type, command or role is an error.
//
// It reads the meta field by field with protobuf's rules (any order, the
// last of a scalar field wins, a second control merges into the first,
// packed or unpacked data types, a known field with the wrong wire type or
// an unknown one skipped, required fields required), and gives what the
// generated code would (FuzzDecodeFast holds it to that), without its
// allocations: a node list of thousands of nodes is read at every node of
// a large job.
func Decode(b []byte) (Meta, error) {
	var m Meta
	err := decodeMeta(&m, b, nil)
	return m, err
}

// DecodeMeta is Decode into m.Meta; a data message's types take m's own
// room when they are few, as AddData's do. On error m.Meta is left zero.
func (m *Message) DecodeMeta(b []byte) error {
	return decodeMeta(&m.Meta, b, m.inlineTypes[:0])
}

// errDecode is protowire's error for a negative length from its Consume
// functions.
func errDecode(n int) error { return fmt.Errorf("%w: %v", ErrBadMeta, protowire.ParseError(n)) }

// decodeMeta decodes a meta into *out, its data types appended to types.
// On error *out is zero.
func decodeMeta(out *Meta, b []byte, types []DataType) error {
	err := decodeData(out, b, types)
	if err != nil {
		*out = Meta{}
	}
	return err
}

// decodeData is decodeMeta, leaving what it has decoded in *m when it
// fails.
func decodeData(m *Meta, b []byte, types []DataType) error {
	*m = Meta{AppID: Empty, Timestamp: Empty, Sender: Empty, Recver: Empty, DataTypes: types}
	control, cmdSet := false, false
	for len(b) > 0 {
		var num protowire.Number
		var typ protowire.Type
		n := 1
		if c := b[0]; c < 0x80 && c >= 1<<3 { // one-byte tag (inlined)
			num, typ = protowire.Number(c>>3), protowire.Type(c&7)
		} else if num, typ, n = protowire.ConsumeTag(b); n < 0 {
			return errDecode(n)
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("%w: field number %d", ErrBadMeta, num)
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && num != fieldBody && num != fieldControl && num <= fieldPriority:
			var v uint64
			n := 1
			if len(b) > 0 && b[0] < 0x80 { // one-byte value (inlined)
				v = uint64(b[0])
			} else if v, n = protowire.ConsumeVarint(b); n < 0 {
				return errDecode(n)
			}
			b = b[n:]
			switch num {
			case fieldHead:
				m.Head = int32(v)
			case fieldRequest:
				m.Request = protowire.DecodeBool(v)
			case fieldPush:
				m.Push = protowire.DecodeBool(v)
			case fieldSimpleApp:
				m.SimpleApp = protowire.DecodeBool(v)
			case fieldAppID:
				m.AppID = int32(v)
			case fieldTimestamp:
				m.Timestamp = int32(v)
			case fieldDataType:
				m.DataTypes = append(m.DataTypes, DataType(int32(v)))
			case fieldCustomerID:
				m.CustomerID = int32(v)
			case fieldDataSize:
				m.DataSize = int32(v)
			case fieldPull:
				m.Pull = protowire.DecodeBool(v)
			case fieldPriority:
				m.Priority = int32(v)
			}
		case typ == protowire.BytesType && (num == fieldBody || num == fieldControl || num == fieldDataType):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errDecode(n)
			}
			b = b[n:]
			if num == fieldControl {
				// A second control merges into the first, as protobuf's do.
				control = true
				if err := decodeControl(&m.Control, v, &cmdSet); err != nil {
					return err
				}
				continue
			}
			if num == fieldBody {
				m.Body = append([]byte{}, v...)
				continue
			}
			for len(v) > 0 {
				d, n := protowire.ConsumeVarint(v)
				if n < 0 {
					return errDecode(n)
				}
				v = v[n:]
				m.DataTypes = append(m.DataTypes, DataType(int32(d)))
			}
		default: // unknown, or a known field with another wire type
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return errDecode(n)
			}
			b = b[n:]
		}
	}
	for _, d := range m.DataTypes {
		if d < 0 || d > Other {
			return fmt.Errorf("%w: unknown data type %d", ErrBadMeta, d)
		}
	}
	if len(m.DataTypes) == 0 {
		m.DataTypes = nil
	}
	if control {
		if !cmdSet {
			return fmt.Errorf("%w: control without its required cmd", ErrBadMeta)
		}
		if m.Control.Cmd < CmdEmpty || m.Control.Cmd > CmdHeartbeat {
			return fmt.Errorf("%w: unknown control command %d", ErrBadMeta, m.Control.Cmd)
		}
	}
	return nil
}

// PBControl's and PBNode's field numbers (message/pb/meta.proto).
const (
	fieldCmd          protowire.Number = 1
	fieldNode         protowire.Number = 2
	fieldBarrierGroup protowire.Number = 3
	fieldMsgSig       protowire.Number = 4

	fieldRole       protowire.Number = 1
	fieldID         protowire.Number = 2
	fieldHostname   protowire.Number = 3
	fieldPort       protowire.Number = 4
	fieldIsRecovery protowire.Number = 5
	fieldNodeCustID protowire.Number = 10
)

// field reads the next field of b: its number and type, and either its
// varint value (typ VarintType) or its bytes (BytesType); skip is how
// much of b it took. Fields of other types are consumed and returned with
// their type, for the caller to ignore.
func field(b []byte) (num protowire.Number, typ protowire.Type, v uint64, bs []byte, skip int, err error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, 0, nil, 0, errDecode(n)
	}
	if num > protowire.MaxValidNumber {
		return 0, 0, 0, nil, 0, fmt.Errorf("%w: field number %d", ErrBadMeta, num)
	}
	b = b[n:]
	var m int
	switch typ {
	case protowire.VarintType:
		v, m = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		bs, m = protowire.ConsumeBytes(b)
	default:
		m = protowire.ConsumeFieldValue(num, typ, b)
	}
	if m < 0 {
		return 0, 0, 0, nil, 0, errDecode(m)
	}
	return num, typ, v, bs, n + m, nil
}

// decodeControl merges the PBControl in b into c, as the generated code
// would: the last of a scalar field wins, nodes are appended, fields of an
// unknown number or another wire type are skipped. *cmdSet records that
// the required cmd was seen; every node must have its required role.
func decodeControl(c *Control, b []byte, cmdSet *bool) error {
	for len(b) > 0 {
		num, typ, v, bs, n, err := field(b)
		if err != nil {
			return err
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && num == fieldCmd:
			c.Cmd, *cmdSet = Command(int32(v)), true
		case typ == protowire.VarintType && num == fieldBarrierGroup:
			c.BarrierGroup = int32(v)
		case typ == protowire.VarintType && num == fieldMsgSig:
			c.MsgSig = v
		case typ == protowire.BytesType && num == fieldNode:
			prev := ""
			if k := len(c.Nodes); k > 0 {
				prev = c.Nodes[k-1].Hostname
			}
			node, err := decodeNode(bs, prev)
			if err != nil {
				return err
			}
			c.Nodes = append(c.Nodes, node)
		}
	}
	return nil
}

// decodeNode decodes a PBNode; an absent id reads as Empty. A hostname
// equal to prev (the node before's) shares its string: nodes share hosts.
func decodeNode(b []byte, prev string) (Node, error) {
	nd := Node{ID: Empty}
	roleSet := false
	for len(b) > 0 {
		num, typ, v, bs, n, err := field(b)
		if err != nil {
			return Node{}, err
		}
		b = b[n:]
		if typ == protowire.BytesType && num == fieldHostname {
			if string(bs) == prev {
				nd.Hostname = prev
			} else {
				nd.Hostname = string(bs)
			}
			continue
		}
		if typ != protowire.VarintType {
			continue
		}
		switch num {
		case fieldRole:
			nd.Role, roleSet = Role(int32(v)), true
		case fieldID:
			nd.ID = int32(v)
		case fieldPort:
			nd.Port = int32(v)
		case fieldIsRecovery:
			nd.IsRecovery = protowire.DecodeBool(v)
		case fieldNodeCustID:
			nd.CustomerID = int32(v)
		}
	}
	if !roleSet {
		return Node{}, fmt.Errorf("%w: node without its required role", ErrBadMeta)
	}
	if nd.Role < RoleServer || nd.Role > RoleScheduler {
		return Node{}, fmt.Errorf("%w: unknown role %d", ErrBadMeta, nd.Role)
	}
	return nd, nil
}
