package message

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gopslite/pslite/message/pb"
)

// FuzzDecode feeds Decode arbitrary bytes: it must never panic, every error
// must wrap ErrBadMeta, and whatever it accepts must survive Encode.
//
// Encode does not write everything Decode can read, so one Encode/Decode
// cycle normalises a meta: an explicit kEmpty app_id or timestamp, an empty
// body, a control with cmd EMPTY (dropped entirely), barrier_group outside
// BARRIER and msg_sig outside ACK are lost, and unknown fields too. So the
// check is: the first cycle keeps every field Encode writes, and from then on
// the meta and its bytes are a fixed point.
//
//	go test -run XXX -fuzz FuzzDecode -fuzztime 60s ./message/
func FuzzDecode(f *testing.F) {
	for _, c := range wireCases {
		f.Add(c.wire)
	}
	for _, cmd := range []Command{CmdTerminate, CmdHeartbeat} {
		m := NewMeta()
		m.Control.Cmd = cmd
		m.Control.Nodes = []Node{{Role: RoleServer, ID: 8, Hostname: "host", Port: 1234, IsRecovery: true, CustomerID: 1}}
		wire, err := Encode(&m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(wire)
	}
	f.Add([]byte{})
	f.Add(b(0x1a, 0x02, 0x08, 0x00, 0x38, 0xff, 0xff, 0xff, 0xff, 0x07)) // control cmd EMPTY, app_id kEmpty
	f.Add(b(0x12, 0x00, 0x1a, 0x04, 0x08, 0x01, 0x18, 0x05))             // empty body; TERMINATE with barrier_group
	f.Add(b(0x48, 0x08, 0x4a, 0x01, 0x09))                               // unpacked then packed data_type

	f.Fuzz(func(t *testing.T, in []byte) {
		m1, err := Decode(in)
		if err != nil {
			if !errors.Is(err, ErrBadMeta) {
				t.Fatalf("error %v does not wrap ErrBadMeta", err)
			}
			return
		}
		if m1.Sender != Empty || m1.Recver != Empty {
			t.Fatalf("sender %d, recver %d: want Empty", m1.Sender, m1.Recver)
		}
		w1, err := Encode(&m1)
		if err != nil {
			t.Fatalf("Encode of a decoded meta %+v: %v", m1, err)
		}
		m2, err := Decode(w1)
		if err != nil {
			t.Fatalf("Decode(Encode(m)) failed: %v\nm = %+v\nwire % x", err, m1, w1)
		}
		checkWrittenFields(t, m1, m2)

		w2, err := Encode(&m2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(w1, w2) {
			t.Fatalf("encoding not stable:\n% x\n% x", w1, w2)
		}
		m3, err := Decode(w2)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m2, m3) {
			t.Fatalf("decoding not stable:\n%+v\n%+v", m2, m3)
		}
	})
}

// checkWrittenFields checks that m2 = Decode(Encode(m1)) agrees with m1 on
// every field Encode writes, and holds the zero value for the ones it drops.
func checkWrittenFields(t *testing.T, m1, m2 Meta) {
	t.Helper()
	type scalars struct {
		Head, AppID, CustomerID, Timestamp, Sender, Recver int32
		Request, Push, Pull, SimpleApp                     bool
		DataSize, Priority                                 int32
	}
	s := func(m Meta) scalars {
		return scalars{m.Head, m.AppID, m.CustomerID, m.Timestamp, m.Sender, m.Recver,
			m.Request, m.Push, m.Pull, m.SimpleApp, m.DataSize, m.Priority}
	}
	if s(m1) != s(m2) {
		t.Fatalf("scalar fields changed:\n%+v\n%+v", s(m1), s(m2))
	}
	if !bytes.Equal(m1.Body, m2.Body) {
		t.Fatalf("body changed: %q -> %q", m1.Body, m2.Body)
	}
	if len(m1.DataTypes) != len(m2.DataTypes) || (len(m1.DataTypes) > 0 && !reflect.DeepEqual(m1.DataTypes, m2.DataTypes)) {
		t.Fatalf("data types changed: %v -> %v", m1.DataTypes, m2.DataTypes)
	}
	if !m1.IsControl() {
		if !reflect.DeepEqual(m2.Control, Control{}) {
			t.Fatalf("a data meta came back with control %+v", m2.Control)
		}
		return
	}
	c1, c2 := m1.Control, m2.Control
	if c1.Cmd != c2.Cmd {
		t.Fatalf("command changed: %v -> %v", c1.Cmd, c2.Cmd)
	}
	if len(c1.Nodes) != len(c2.Nodes) || (len(c1.Nodes) > 0 && !reflect.DeepEqual(c1.Nodes, c2.Nodes)) {
		t.Fatalf("nodes changed:\n%+v\n%+v", c1.Nodes, c2.Nodes)
	}
	wantGroup, wantSig := int32(0), uint64(0)
	if c1.Cmd == CmdBarrier {
		wantGroup = c1.BarrierGroup
	}
	if c1.Cmd == CmdAck {
		wantSig = c1.MsgSig
	}
	if c2.BarrierGroup != wantGroup || c2.MsgSig != wantSig {
		t.Fatalf("%v: barrier_group %d, msg_sig %d; want %d, %d", c1.Cmd, c2.BarrierGroup, c2.MsgSig, wantGroup, wantSig)
	}
}

// FuzzDecodeFast checks the hand-written decoder of metas (data and control) against the
// generated code: for any input both accept or both reject it, and accept
// it as the same meta.
//
//	go test -run XXX -fuzz FuzzDecodeFast -fuzztime 60s ./message/
func FuzzDecodeFast(f *testing.F) {
	for _, c := range wireCases {
		f.Add(c.wire)
	}
	f.Add([]byte{})
	f.Add(b(0x48, 0x08, 0x4a, 0x01, 0x09))                               // unpacked then packed data_type
	f.Add(b(0x0a, 0x01, 0x05, 0x12, 0x00, 0x15, 1, 2, 3, 4, 0x08, 0x01)) // head as bytes, empty body, fixed32 body
	f.Add(b(0x0b, 0x08, 0x01, 0x0c, 0x20, 0x01))                         // a group, then request
	f.Add(b(0x4a, 0x02, 0x80, 0x01))                                     // packed data_type out of range
	f.Add(b(0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01))
	// Control metas: a node list, and it twice (the controls merge).
	nodes, _ := Encode(&Meta{Control: Control{Cmd: CmdAddNode, Nodes: []Node{
		{Role: RoleScheduler, ID: 1, Hostname: "10.0.0.1", Port: 9000},
		{Role: RoleServer, ID: 8, Hostname: "h\xff", Port: 1, IsRecovery: true, CustomerID: 3},
		{Role: RoleWorker, ID: Empty, Hostname: ""},
	}}})
	f.Add(nodes)
	f.Add(append(append([]byte{}, nodes...), nodes...))
	f.Add(b(0x1a, 0x00))                         // a control without its cmd
	f.Add(b(0x1a, 0x04, 0x12, 0x02, 0x10, 0x08)) // a node without its role
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := Decode(in)
		want, werr := decodeGenerated(in)
		if (err == nil) != (werr == nil) {
			t.Fatalf("Decode(% x): error %v, generated code: %v", in, err, werr)
		}
		if err != nil {
			if !errors.Is(err, ErrBadMeta) {
				t.Fatalf("error %v does not wrap ErrBadMeta", err)
			}
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Decode(% x):\n got %+v\nwant %+v", in, got, want)
		}
		// The van's way: into a message, over what it held before.
		msg := Message{Meta: Meta{Head: 7, DataTypes: []DataType{Int8}}}
		if err := msg.DecodeMeta(in); err != nil || !reflect.DeepEqual(msg.Meta, want) {
			t.Fatalf("DecodeMeta(% x): %v\n got %+v\nwant %+v", in, err, msg.Meta, want)
		}
	})
}

// TestEncodeMatchesGenerated encodes random metas, data and control (node
// lists of up to 300 nodes among them), by hand and with the generated code
// and wants the same bytes.
func TestEncodeMatchesGenerated(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	i32 := func() int32 {
		switch rng.IntN(5) {
		case 0:
			return Empty
		case 1:
			return -rng.Int32N(1 << 30)
		case 2:
			return 0
		}
		return rng.Int32()
	}
	for i := 0; i < 5000; i++ {
		m := Meta{Head: i32(), AppID: i32(), CustomerID: i32(), Timestamp: i32(), Sender: i32(), Recver: i32(),
			Request: rng.IntN(2) == 0, Push: rng.IntN(2) == 0, Pull: rng.IntN(2) == 0, SimpleApp: rng.IntN(2) == 0,
			DataSize: i32(), Priority: i32()}
		if rng.IntN(3) == 0 {
			m.Body = make([]byte, rng.IntN(300))
			for j := range m.Body {
				m.Body[j] = byte(rng.IntN(256))
			}
		}
		for range rng.IntN(4) {
			m.DataTypes = append(m.DataTypes, DataType(rng.IntN(int(Other)+1)))
		}
		if rng.IntN(2) == 0 {
			m.Control.Cmd = Command(1 + rng.IntN(int(CmdHeartbeat)))
			m.Control.BarrierGroup = i32()
			m.Control.MsgSig = rng.Uint64() >> rng.IntN(64)
			nodes := rng.IntN(4)
			if rng.IntN(10) == 0 {
				nodes = rng.IntN(300)
			}
			for range nodes {
				host := make([]byte, rng.IntN(140))
				for j := range host {
					host[j] = byte('a' + rng.IntN(26))
				}
				m.Control.Nodes = append(m.Control.Nodes, Node{Role: Role(rng.IntN(3)), ID: i32(), Hostname: string(host),
					Port: i32(), IsRecovery: rng.IntN(2) == 0, CustomerID: i32()})
			}
		}
		got, err := Encode(&m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(toPB(&m))
		if err != nil {
			t.Fatal(err)
		}
		prefix := []byte{0xab, 0xcd}
		appended, err := AppendEncode(prefix, &m)
		if err != nil || !bytes.Equal(appended[:2], prefix) || !bytes.Equal(appended[2:], want) {
			t.Fatalf("AppendEncode(%+v) = % x, %v; want % x after the prefix", m, appended, err, want)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("meta %+v:\n got % x\nwant % x", m, got, want)
		}
		if cap(got) != len(got) {
			t.Fatalf("meta %+v: buffer of %d bytes for %d written", m, cap(got), len(got))
		}
	}
}

// TestFieldNumbersMatchProto checks the hand-written codec's field numbers
// against the generated descriptor of PBMeta.
func TestFieldNumbersMatchProto(t *testing.T) {
	fields := (&pb.PBMeta{}).ProtoReflect().Descriptor().Fields()
	for name, num := range map[string]protowire.Number{
		"head": fieldHead, "body": fieldBody, "control": fieldControl, "request": fieldRequest,
		"push": fieldPush, "simple_app": fieldSimpleApp, "app_id": fieldAppID, "timestamp": fieldTimestamp,
		"data_type": fieldDataType, "customer_id": fieldCustomerID, "data_size": fieldDataSize,
		"pull": fieldPull, "priority": fieldPriority,
	} {
		f := fields.ByName(protoreflect.Name(name))
		if f == nil || f.Number() != num {
			t.Errorf("field %s: codec uses %d, meta.proto says %v", name, num, f)
		}
	}
	if fields.Len() != 13 {
		t.Errorf("PBMeta has %d fields; the hand-written codec knows 13", fields.Len())
	}
}
