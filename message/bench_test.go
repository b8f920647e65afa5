package message

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

func BenchmarkEncodeDataMeta(b *testing.B) {
	m := Meta{Head: 0, AppID: 0, CustomerID: 0, Timestamp: 1234, Request: true, Push: true,
		DataTypes: []DataType{Uint64, Float}, DataSize: 12000, Recver: 8, Sender: Empty}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Encode(&m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeDataMeta(b *testing.B) {
	m := Meta{Head: 0, AppID: 0, CustomerID: 0, Timestamp: 1234, Request: true, Push: true,
		DataTypes: []DataType{Uint64, Float}, DataSize: 12000}
	buf, _ := Encode(&m)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		if _, err := Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValuesAligned(b *testing.B) {
	buf := make([]byte, 8<<20)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		if _, err := Values[float32](buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValuesUnaligned(b *testing.B) {
	buf := make([]byte, 8<<20+1)[1:]
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		if _, err := Values[float32](buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendEncodeDataMeta is the van's encoding: into a buffer it
// reuses.
func BenchmarkAppendEncodeDataMeta(b *testing.B) {
	m := Meta{Head: 0, AppID: 0, CustomerID: 0, Timestamp: 1234, Request: true, Push: true,
		DataTypes: []DataType{Uint64, Float}, DataSize: 12000, Recver: 8, Sender: Empty}
	var buf [96]byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := AppendEncode(buf[:0], &m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMessageDecodeMeta is the van's decoding: into the received
// message, its data types in the message's own room.
func BenchmarkMessageDecodeMeta(b *testing.B) {
	m := Meta{Head: 0, AppID: 0, CustomerID: 0, Timestamp: 1234, Request: true, Push: true,
		DataTypes: []DataType{Uint64, Float}, DataSize: 12000}
	buf, _ := Encode(&m)
	var msg Message
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		if err := msg.DecodeMeta(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// nodeListMeta is the node list of a job of n nodes, as the scheduler
// sends it to every node.
func nodeListMeta(n int) []byte {
	m := Meta{Control: Control{Cmd: CmdAddNode}}
	for i := 0; i < n; i++ {
		m.Control.Nodes = append(m.Control.Nodes, Node{Role: RoleWorker, ID: int32(9 + 2*i), Hostname: "10.1.2.3", Port: int32(20000 + i)})
	}
	b, err := Encode(&m)
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkDecodeNodeList decodes the node list of a 1,025-node job, by
// hand (Decode) and with the generated code, for comparison.
func BenchmarkDecodeNodeList(b *testing.B) {
	in := nodeListMeta(1025)
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Decode(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeGenerated(in); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkEncodeNodeList encodes the node list of a 1,025-node job into a
// buffer reused, by hand (AppendEncode, as the van does) and with the
// generated code, for comparison.
func BenchmarkEncodeNodeList(b *testing.B) {
	in := nodeListMeta(1025)
	m, err := Decode(in)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, len(in))
	b.Run("AppendEncode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if buf, err = AppendEncode(buf[:0], &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("generated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], toPB(&m)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
