package message

import "testing"

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
