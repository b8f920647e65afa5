package message

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
)

// cat joins byte groups, so the expected wire bytes below can be written one
// protobuf field per line.
func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// b is shorthand for a literal byte group.
func b(x ...byte) []byte { return x }

// maxInt32Varint is INT32_MAX (0x7fffffff, C++ ps-lite's kEmpty) as a varint:
// 31 one-bits in groups of 7 (LSB first) give four 0xff bytes (7 bits + the
// continuation bit) and a last group of 3 one-bits, 0x07.
var maxInt32Varint = b(0xff, 0xff, 0xff, 0xff, 0x07)

// minusOneVarint is int32(-1) as protobuf writes an int32: sign-extended to 64
// bits, so 64 one-bits: nine 0xff groups and a last group holding bit 63, 0x01.
var minusOneVarint = b(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)

// Tags are (field_number << 3) | wire_type; wire type 0 is varint, 2 is
// length-delimited.

// A data push request, as a KV worker sends it: keys (UINT64) and values
// (FLOAT), one key and one value, so data_size = 8 + 4 = 12.
var dataPushMeta = Meta{
	Head: 0, AppID: 0, CustomerID: 0, Timestamp: 3,
	Sender: Empty, Recver: Empty,
	Request: true, Push: true,
	DataTypes: []DataType{Uint64, Float},
	DataSize:  12,
}

var dataPushWire = cat(
	b(0x08, 0x00),             // 1 head (1<<3|0 = 0x08) = 0
	b(0x20, 0x01),             // 4 request (4<<3 = 0x20) = true
	b(0x28, 0x01),             // 5 push (5<<3 = 0x28) = true
	b(0x30, 0x00),             // 6 simple_app (6<<3 = 0x30) = false
	b(0x38, 0x00),             // 7 app_id (7<<3 = 0x38) = 0: written, since 0 != kEmpty
	b(0x40, 0x03),             // 8 timestamp (8<<3 = 0x40) = 3
	b(0x4a, 0x02, 0x08, 0x09), // 9 data_type, packed (9<<3|2 = 0x4a), 2 bytes: UINT64 = 8, FLOAT = 9
	b(0x50, 0x00),             // 10 customer_id (10<<3 = 0x50) = 0
	b(0x58, 0x0c),             // 11 data_size (11<<3 = 0x58) = 12
	b(0x60, 0x00),             // 12 pull (12<<3 = 0x60) = false
	b(0x68, 0x00),             // 13 priority (13<<3 = 0x68) = 0
)

// A node's first ADD_NODE to the scheduler: every id Empty except the
// timestamp; one node, a worker at 127.0.0.1:5000, with no id yet.
var addNodeMeta = Meta{
	Head: Empty, AppID: Empty, CustomerID: Empty, Timestamp: 5,
	Sender: Empty, Recver: Empty,
	Request: true,
	Control: Control{Cmd: CmdAddNode, Nodes: []Node{{
		Role: RoleWorker, ID: Empty, Hostname: "127.0.0.1", Port: 5000, CustomerID: 0,
	}}},
}

// The PBNode: 2 + 6 + 11 + 3 + 2 + 2 = 26 bytes.
var addNodeNodeWire = cat(
	b(0x08, 0x01),       // 1 role = 1 (worker)
	b(0x10),             // 2 id (2<<3 = 0x10) ...
	maxInt32Varint,      //   ... = kEmpty, always written for a node
	b(0x1a, 0x09),       // 3 hostname (3<<3|2 = 0x1a), 9 bytes ...
	[]byte("127.0.0.1"), //   ... "127.0.0.1"
	b(0x20, 0x88, 0x27), // 4 port = 5000 = 39*128 + 8: low group 8|0x80 = 0x88, then 39 = 0x27
	b(0x28, 0x00),       // 5 is_recovery = false
	b(0x50, 0x00),       // 10 customer_id = 0
)

// The PBControl: 2 + 2 + 26 = 30 bytes; no barrier_group, no msg_sig.
var addNodeControlWire = cat(
	b(0x08, 0x02),   // 1 cmd = 2 (ADD_NODE)
	b(0x12, 0x1a),   // 2 node (2<<3|2 = 0x12), 26 bytes
	addNodeNodeWire, //
)

var addNodeWire = cat(
	b(0x08, 0xff, 0xff, 0xff, 0xff, 0x07), // 1 head = kEmpty
	b(0x1a, 0x1e),                         // 3 control (3<<3|2 = 0x1a), 30 bytes
	addNodeControlWire,                    //
	b(0x20, 0x01),                         // 4 request = true
	b(0x28, 0x00),                         // 5 push = false
	b(0x30, 0x00),                         // 6 simple_app = false; 7 app_id = kEmpty: not written
	b(0x40, 0x05),                         // 8 timestamp = 5
	b(0x50, 0xff, 0xff, 0xff, 0xff, 0x07), // 10 customer_id = kEmpty: written anyway
	b(0x58, 0x00),                         // 11 data_size = 0
	b(0x60, 0x00),                         // 12 pull = false
	b(0x68, 0x00),                         // 13 priority = 0
)

// A barrier request on the group of all nodes (7); the customer id is 0 and
// app id 0, as C++ Postoffice::Barrier sends it; no timestamp.
var barrierMeta = Meta{
	Head: Empty, AppID: 0, CustomerID: 0, Timestamp: Empty,
	Sender: Empty, Recver: Empty,
	Request: true,
	Control: Control{Cmd: CmdBarrier, BarrierGroup: AllGroup},
}

var barrierWire = cat(
	b(0x08, 0xff, 0xff, 0xff, 0xff, 0x07), // 1 head = kEmpty
	b(0x1a, 0x04),                         // 3 control, 4 bytes:
	b(0x08, 0x03),                         //   1 cmd = 3 (BARRIER)
	b(0x18, 0x07),                         //   3 barrier_group (3<<3 = 0x18) = 7
	b(0x20, 0x01),                         // 4 request = true
	b(0x28, 0x00),                         // 5 push = false
	b(0x30, 0x00),                         // 6 simple_app = false
	b(0x38, 0x00),                         // 7 app_id = 0; 8 timestamp = kEmpty: not written
	b(0x50, 0x00),                         // 10 customer_id = 0
	b(0x58, 0x00),                         // 11 data_size = 0
	b(0x60, 0x00),                         // 12 pull = false
	b(0x68, 0x00),                         // 13 priority = 0
)

// An ACK for a push request of app 0 from node 9 to node 8 with timestamp 3:
// msg_sig = 9<<40 | 8<<32 | 3<<1 | 1 = 2^43 + 2^40 + 2^35 + 7.
var ackMeta = Meta{
	Head: Empty, AppID: Empty, CustomerID: Empty, Timestamp: Empty,
	Sender: Empty, Recver: Empty,
	Control: Control{Cmd: CmdAck, MsgSig: 9<<40 | 8<<32 | 3<<1 | 1},
}

var ackWire = cat(
	b(0x08, 0xff, 0xff, 0xff, 0xff, 0x07), // 1 head = kEmpty
	b(0x1a, 0x0a),                         // 3 control, 2 + 1 + 7 = 10 bytes:
	b(0x08, 0x04),                         //   1 cmd = 4 (ACK)
	b(0x20),                               //   4 msg_sig (4<<3 = 0x20), 7 varint groups of 7 bits, LSB first:
	b(0x87),                               //     bits 0-6:   7           -> 0x07|0x80
	b(0x80, 0x80, 0x80),                   //     bits 7-27:  0           -> 0x80 x3
	b(0x80),                               //     bits 28-34: 0           -> 0x80
	b(0xa1),                               //     bits 35-41: 2^35, 2^40  -> 1 + 32 = 0x21|0x80
	b(0x02),                               //     bits 42-48: 2^43        -> 2, last group
	b(0x20, 0x00),                         // 4 request = false
	b(0x28, 0x00),                         // 5 push = false
	b(0x30, 0x00),                         // 6 simple_app = false; 7 app_id, 8 timestamp = kEmpty: not written
	b(0x50, 0xff, 0xff, 0xff, 0xff, 0x07), // 10 customer_id = kEmpty
	b(0x58, 0x00),                         // 11 data_size = 0
	b(0x60, 0x00),                         // 12 pull = false
	b(0x68, 0x00),                         // 13 priority = 0
)

// A SimpleApp request with a body, a negative head, priority -1 and a pull
// flag, to cover the remaining fields and negative int32 varints.
var simpleAppMeta = Meta{
	Head: -1, AppID: 1, CustomerID: 2, Timestamp: 300,
	Sender: Empty, Recver: Empty,
	Request: true, Pull: true, SimpleApp: true,
	Body:     []byte("hi"),
	Priority: -1,
}

var simpleAppWire = cat(
	b(0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), // 1 head = -1: ten bytes
	b(0x12, 0x02, 'h', 'i'), // 2 body (2<<3|2 = 0x12), 2 bytes "hi"
	b(0x20, 0x01),           // 4 request = true
	b(0x28, 0x00),           // 5 push = false
	b(0x30, 0x01),           // 6 simple_app = true
	b(0x38, 0x01),           // 7 app_id = 1
	b(0x40, 0xac, 0x02),     // 8 timestamp = 300 = 2*128 + 44: 44|0x80 = 0xac, then 2
	b(0x50, 0x02),           // 10 customer_id = 2
	b(0x58, 0x00),           // 11 data_size = 0
	b(0x60, 0x01),           // 12 pull = true
	b(0x68, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), // 13 priority = -1
)

var wireCases = []struct {
	name string
	meta Meta
	wire []byte
}{
	{"data push", dataPushMeta, dataPushWire},
	{"add node", addNodeMeta, addNodeWire},
	{"barrier", barrierMeta, barrierWire},
	{"ack", ackMeta, ackWire},
	{"simple app", simpleAppMeta, simpleAppWire},
}

func TestEncodeWire(t *testing.T) {
	for _, c := range wireCases {
		t.Run(c.name, func(t *testing.T) {
			m := c.meta
			got, err := Encode(&m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, c.wire) {
				t.Errorf("Encode:\n got % x\nwant % x", got, c.wire)
			}
			// Encoding is deterministic: the same bytes every time, and
			// the same as with the Deterministic option.
			for i := 0; i < 20; i++ {
				again, _ := Encode(&m)
				if !bytes.Equal(again, got) {
					t.Fatalf("Encode is not deterministic:\n% x\n% x", got, again)
				}
			}
			det, err := proto.MarshalOptions{Deterministic: true}.Marshal(toPB(&m))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(det, got) {
				t.Errorf("deterministic Marshal differs:\n got % x\nwant % x", det, got)
			}
			if !reflect.DeepEqual(m, c.meta) {
				t.Errorf("Encode changed its argument: %+v", m)
			}
		})
	}
}

func TestDecodeWire(t *testing.T) {
	for _, c := range wireCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Decode(c.wire)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.meta) {
				t.Errorf("Decode:\n got %+v\nwant %+v", got, c.meta)
			}
		})
	}
}

// The fields may come in any order on the wire (protobuf allows it); here
// the ADD_NODE meta with its fields reversed and the node's too.
func TestDecodeAnyFieldOrder(t *testing.T) {
	node := cat(
		b(0x50, 0x00),
		b(0x28, 0x00),
		b(0x20, 0x88, 0x27),
		b(0x1a, 0x09), []byte("127.0.0.1"),
		b(0x10, 0xff, 0xff, 0xff, 0xff, 0x07),
		b(0x08, 0x01),
	)
	ctrl := cat(b(0x12, byte(len(node))), node, b(0x08, 0x02))
	wire := cat(
		b(0x68, 0x00),
		b(0x60, 0x00),
		b(0x58, 0x00),
		b(0x50, 0xff, 0xff, 0xff, 0xff, 0x07),
		b(0x40, 0x05),
		b(0x30, 0x00),
		b(0x28, 0x00),
		b(0x20, 0x01),
		b(0x1a, byte(len(ctrl))), ctrl,
		b(0x08, 0xff, 0xff, 0xff, 0xff, 0x07),
	)
	got, err := Decode(wire)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, addNodeMeta) {
		t.Errorf("Decode:\n got %+v\nwant %+v", got, addNodeMeta)
	}
}

func TestDecodeAbsentFields(t *testing.T) {
	// Only head = 0.
	m, err := Decode(b(0x08, 0x00))
	if err != nil {
		t.Fatal(err)
	}
	want := Meta{Head: 0, AppID: Empty, Timestamp: Empty, Sender: Empty, Recver: Empty}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got %+v\nwant %+v", m, want)
	}

	// Nothing at all: the proto defaults, with app_id and timestamp Empty.
	m, err = Decode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("empty meta: got %+v\nwant %+v", m, want)
	}

	// A control with a node that has only its (required) role: id Empty.
	m, err = Decode(cat(
		b(0x1a, 0x06), // 3 control, 6 bytes
		b(0x08, 0x02), //   cmd = ADD_NODE
		b(0x12, 0x02), //   node, 2 bytes
		b(0x08, 0x02), //     role = scheduler
	))
	if err != nil {
		t.Fatal(err)
	}
	wantNodes := []Node{{Role: RoleScheduler, ID: Empty}}
	if m.Control.Cmd != CmdAddNode || !reflect.DeepEqual(m.Control.Nodes, wantNodes) {
		t.Errorf("control: got %+v, want ADD_NODE with %+v", m.Control, wantNodes)
	}
	if m.AppID != Empty || m.Timestamp != Empty {
		t.Errorf("app_id %d, timestamp %d: want Empty", m.AppID, m.Timestamp)
	}

	// An explicit node id of 0 is not Empty.
	m, err = Decode(cat(b(0x1a, 0x08, 0x08, 0x02, 0x12, 0x04), b(0x08, 0x00), b(0x10, 0x00)))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Control.Nodes) != 1 || m.Control.Nodes[0].ID != 0 {
		t.Errorf("nodes %+v: want one node with id 0", m.Control.Nodes)
	}
}

// Empty written explicitly reads as Empty and is left out when re-encoded.
func TestExplicitEmptyNormalises(t *testing.T) {
	wire := cat(
		b(0x38, 0xff, 0xff, 0xff, 0xff, 0x07), // app_id = kEmpty
		b(0x40, 0xff, 0xff, 0xff, 0xff, 0x07), // timestamp = kEmpty
	)
	m, err := Decode(wire)
	if err != nil {
		t.Fatal(err)
	}
	if m.AppID != Empty || m.Timestamp != Empty {
		t.Fatalf("app_id %d, timestamp %d: want Empty", m.AppID, m.Timestamp)
	}
	out, err := Encode(&m)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, b(0x38)) || bytes.Contains(out, b(0x40)) {
		t.Errorf("re-encoded with app_id or timestamp: % x", out)
	}
}

// An unpacked data_type (one tag per value) is legal protobuf and must parse
// like the packed form.
func TestDecodeUnpackedDataType(t *testing.T) {
	m, err := Decode(cat(b(0x48, 0x08), b(0x48, 0x09), b(0x48, 0x03)))
	if err != nil {
		t.Fatal(err)
	}
	want := []DataType{Uint64, Float, Int32}
	if !reflect.DeepEqual(m.DataTypes, want) {
		t.Errorf("data types %v, want %v", m.DataTypes, want)
	}
}

// Fields this version does not know are skipped, as protobuf requires; so is
// a known field with the wrong wire type (protobuf treats it as unknown, in
// C++ as in Go).
func TestDecodeUnknownField(t *testing.T) {
	wire := cat(dataPushWire,
		b(0xa0, 0x06, 0x2a), // field 100 (100<<3 = 800 = 6*128 + 32: 0xa0 0x06), varint 42
		b(0x7a, 0x01, 0xff), // field 15, length-delimited, 1 byte
		b(0x0a, 0x01, 0x05), // field 1 (head) as length-delimited: not a head
	)
	m, err := Decode(wire)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, dataPushMeta) {
		t.Errorf("got %+v\nwant %+v", m, dataPushMeta)
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		name string
		wire []byte
	}{
		{"truncated tag", b(0xff)},
		{"truncated varint", b(0x08)},
		{"truncated varint continuation", b(0x08, 0x80)},
		{"overlong varint", b(0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
		{"length past end", b(0x12, 0x05, 'a')},
		{"field number 0", b(0x00, 0x00)},
		{"wire type 7", b(0x0f)},
		{"end group without start", b(0x0c)},
		{"garbage", []byte("this is not a meta at all")},
		{"control without cmd", b(0x1a, 0x00)},
		{"node without role", b(0x1a, 0x04, 0x08, 0x02, 0x12, 0x00)},
		{"bad packed data_type", b(0x4a, 0x01, 0x80)},
		{"data type 12", b(0x4a, 0x01, 0x0c)},
		{"data type -1", cat(b(0x48), minusOneVarint)},
		{"command 6", b(0x1a, 0x02, 0x08, 0x06)},
		{"command -1", cat(b(0x1a, 0x0b, 0x08), minusOneVarint)},
		{"role 3", b(0x1a, 0x06, 0x08, 0x02, 0x12, 0x02, 0x08, 0x03)},
		{"role -1", cat(b(0x1a, 0x0f, 0x08, 0x02, 0x12, 0x0b, 0x08), minusOneVarint)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Decode(c.wire)
			if err == nil {
				t.Fatalf("Decode(% x) = %+v, want an error", c.wire, m)
			}
			if !errors.Is(err, ErrBadMeta) {
				t.Errorf("error %v does not wrap ErrBadMeta", err)
			}
			if !reflect.DeepEqual(m, Meta{}) {
				t.Errorf("Decode returned %+v with its error, want the zero Meta", m)
			}
		})
	}
}

// Encode writes barrier_group only for BARRIER and msg_sig only for ACK,
// nodes for any command, and no control at all for a data message.
func TestEncodeControlFieldsByCommand(t *testing.T) {
	for cmd := CmdEmpty; cmd <= CmdHeartbeat; cmd++ {
		m := NewMeta()
		m.Control = Control{Cmd: cmd, BarrierGroup: 4, MsgSig: 77,
			Nodes: []Node{{Role: RoleServer, ID: 8, Hostname: "h", Port: 1}}}
		wire, err := Encode(&m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(wire)
		if err != nil {
			t.Fatal(err)
		}
		want := Control{Cmd: cmd}
		if cmd != CmdEmpty {
			want.Nodes = m.Control.Nodes
		}
		if cmd == CmdBarrier {
			want.BarrierGroup = 4
		}
		if cmd == CmdAck {
			want.MsgSig = 77
		}
		if !reflect.DeepEqual(got.Control, want) {
			t.Errorf("%v: control decoded as %+v, want %+v", cmd, got.Control, want)
		}
	}
}

func TestRoundTripExtremes(t *testing.T) {
	m := Meta{
		Head: math.MinInt32, AppID: math.MinInt32, CustomerID: math.MaxInt32 - 1,
		Timestamp: 0, Sender: Empty, Recver: Empty,
		Request: true, Push: true, Pull: true, SimpleApp: true,
		Body:      bytes.Repeat([]byte{0, 0xff}, 1000),
		DataTypes: []DataType{Char, Int8, Int16, Int32, Int64, Uint8, Uint16, Uint32, Uint64, Float, Double, Other},
		DataSize:  math.MaxInt32, Priority: math.MinInt32,
		Control: Control{Cmd: CmdAck, MsgSig: math.MaxUint64, Nodes: []Node{
			{Role: RoleScheduler, ID: 1, Hostname: "scheduler.example", Port: 65535, IsRecovery: true, CustomerID: -5},
			{Role: RoleServer, ID: Empty},
			{Role: RoleWorker, ID: -1, Hostname: "\x00\xff not utf-8"},
		}},
	}
	wire, err := Encode(&m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(wire)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, m)
	}
}

// Sender and Recver are not on the wire: Decode leaves them Empty.
func TestSenderRecverNotOnWire(t *testing.T) {
	m := dataPushMeta
	m.Sender, m.Recver = 9, 8
	wire, err := Encode(&m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(wire, dataPushWire) {
		t.Errorf("sender/recver changed the wire form: % x", wire)
	}
	got, _ := Decode(wire)
	if got.Sender != Empty || got.Recver != Empty {
		t.Errorf("sender %d, recver %d: want Empty", got.Sender, got.Recver)
	}
}

// Decode must not keep a reference to its input: the van reuses buffers.
func TestDecodeCopiesBody(t *testing.T) {
	wire := append([]byte(nil), simpleAppWire...)
	m, err := Decode(wire)
	if err != nil {
		t.Fatal(err)
	}
	for i := range wire {
		wire[i] = 0
	}
	if string(m.Body) != "hi" {
		t.Errorf("body %q changed with the input buffer", m.Body)
	}
}
