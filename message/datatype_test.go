package message

import (
	"bytes"
	"math"
	"reflect"
	"testing"
	"unsafe"
)

func TestDataTypeValues(t *testing.T) {
	// The numbers are the protocol; C++ ps-lite's enum order.
	want := map[DataType]int32{Char: 0, Int8: 1, Int16: 2, Int32: 3, Int64: 4, Uint8: 5,
		Uint16: 6, Uint32: 7, Uint64: 8, Float: 9, Double: 10, Other: 11}
	for d, n := range want {
		if int32(d) != n {
			t.Errorf("%v = %d, want %d", d, int32(d), n)
		}
	}
	names := map[DataType]string{Char: "CHAR", Uint64: "UINT64", Float: "FLOAT", Double: "DOUBLE",
		Other: "OTHER", 12: "DATATYPE(12)", -1: "DATATYPE(-1)"}
	for d, s := range names {
		if d.String() != s {
			t.Errorf("DataType(%d).String() = %q, want %q", int32(d), d.String(), s)
		}
	}
}

func checkTypeOf[V Value](t *testing.T, want DataType, size int) {
	t.Helper()
	if got := TypeOf[V](); got != want {
		t.Errorf("TypeOf[%T] = %v, want %v", *new(V), got, want)
	}
	if got := SizeOf[V](); got != size {
		t.Errorf("SizeOf[%T] = %d, want %d", *new(V), got, size)
	}
}

func TestTypeOfSizeOf(t *testing.T) {
	checkTypeOf[int8](t, Int8, 1)
	checkTypeOf[int16](t, Int16, 2)
	checkTypeOf[int32](t, Int32, 4)
	checkTypeOf[int64](t, Int64, 8)
	checkTypeOf[uint8](t, Uint8, 1)
	checkTypeOf[uint16](t, Uint16, 2)
	checkTypeOf[uint32](t, Uint32, 4)
	checkTypeOf[uint64](t, Uint64, 8)
	checkTypeOf[float32](t, Float, 4)
	checkTypeOf[float64](t, Double, 8)
}

// Frames are raw little-endian arrays, whatever the host.
func TestFrameWireBytes(t *testing.T) {
	cases := []struct {
		name string
		got  []byte
		want []byte
	}{
		{"int8", Frame([]int8{-1, 2}), b(0xff, 0x02)},
		{"uint8", Frame([]uint8{0xab}), b(0xab)},
		{"int16", Frame([]int16{-2}), b(0xfe, 0xff)},
		{"uint16", Frame([]uint16{0x0102}), b(0x02, 0x01)},
		{"int32", Frame([]int32{-2}), b(0xfe, 0xff, 0xff, 0xff)},
		{"uint32", Frame([]uint32{0x01020304, 5}), b(0x04, 0x03, 0x02, 0x01, 0x05, 0, 0, 0)},
		{"int64", Frame([]int64{math.MinInt64}), b(0, 0, 0, 0, 0, 0, 0, 0x80)},
		{"uint64", Frame([]uint64{0x0102030405060708}), b(8, 7, 6, 5, 4, 3, 2, 1)},
		{"float32 1.0", Frame([]float32{1}), b(0x00, 0x00, 0x80, 0x3f)},       // 0x3f800000
		{"float32 -2.5", Frame([]float32{-2.5}), b(0x00, 0x00, 0x20, 0xc0)},   // 0xc0200000
		{"float64 1.0", Frame([]float64{1}), b(0, 0, 0, 0, 0, 0, 0xf0, 0x3f)}, // 0x3ff0000000000000
	}
	for _, c := range cases {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s: Frame = % x, want % x", c.name, c.got, c.want)
		}
	}
}

// someValues returns values of V covering zero, extremes and, for floats,
// negative zero, infinities and NaN.
func someValues[V Value]() []V {
	var out []V
	switch p := any(&out).(type) {
	case *[]int8:
		*p = []int8{0, 1, -1, math.MinInt8, math.MaxInt8}
	case *[]int16:
		*p = []int16{0, 1, -1, math.MinInt16, math.MaxInt16, 0x0102}
	case *[]int32:
		*p = []int32{0, 1, -1, math.MinInt32, math.MaxInt32, 0x01020304}
	case *[]int64:
		*p = []int64{0, 1, -1, math.MinInt64, math.MaxInt64, 0x0102030405060708}
	case *[]uint8:
		*p = []uint8{0, 1, math.MaxUint8}
	case *[]uint16:
		*p = []uint16{0, 1, math.MaxUint16, 0x0102}
	case *[]uint32:
		*p = []uint32{0, 1, math.MaxUint32, 0x01020304}
	case *[]uint64:
		*p = []uint64{0, 1, math.MaxUint64, 0x0102030405060708}
	case *[]float32:
		*p = []float32{0, float32(math.Copysign(0, -1)), 1.5, -3.25, math.MaxFloat32,
			math.SmallestNonzeroFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	case *[]float64:
		*p = []float64{0, math.Copysign(0, -1), 1.5, -3.25, math.MaxFloat64,
			math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1), math.NaN()}
	}
	return out
}

// sameBits compares values bit for bit (NaN equals NaN, -0 differs from 0).
func sameBits[V Value](a, b []V) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	size := SizeOf[V]()
	ab := unsafe.Slice((*byte)(unsafe.Pointer(&a[0])), len(a)*size)
	bb := unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), len(b)*size)
	return bytes.Equal(ab, bb)
}

// unalignedCopy returns frame copied to an address that is not a multiple
// of align (for align > 1).
func unalignedCopy(frame []byte, align int) []byte {
	buf := make([]byte, len(frame)+2*align)
	off := 1
	for uintptr(unsafe.Pointer(&buf[off]))%uintptr(align) == 0 && align > 1 {
		off++
	}
	out := buf[off : off+len(frame)]
	copy(out, frame)
	return out
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func checkRoundTrip[V Value](t *testing.T) {
	t.Helper()
	name := TypeOf[V]().String()
	vals := someValues[V]()
	orig := append([]V(nil), vals...)
	size := SizeOf[V]()

	frame := Frame(vals)
	if len(frame) != len(vals)*size {
		t.Fatalf("%s: frame of %d bytes for %d values", name, len(frame), len(vals))
	}
	// An independent little-endian encoding.
	want := make([]byte, len(frame))
	for i, v := range vals {
		putLE(want[i*size:], v)
	}
	if !bytes.Equal(frame, want) {
		t.Errorf("%s: Frame = % x, want % x", name, frame, want)
	}

	// Aligned: the frame as Frame made it.
	got, err := Values[V](frame)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !sameBits(got, orig) {
		t.Errorf("%s: Values(Frame(x)) = %v, want %v", name, got, orig)
	}

	// A copy of the frame in a fresh buffer (aligned by the allocator).
	fresh := append([]byte(nil), frame...)
	got, err = Values[V](fresh)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !sameBits(got, orig) {
		t.Errorf("%s: Values(copy) = %v, want %v", name, got, orig)
	}

	// Unaligned input, as when a frame starts at an odd offset of a receive
	// buffer: the values must be copied correctly into aligned memory (the
	// race detector's checkptr would catch a misaligned reinterpretation).
	un := unalignedCopy(frame, size)
	got, err = Values[V](un)
	if err != nil {
		t.Fatalf("%s unaligned: %v", name, err)
	}
	if !sameBits(got, orig) {
		t.Errorf("%s unaligned: Values = %v, want %v", name, got, orig)
	}
	if addr := uintptr(unsafe.Pointer(&got[0])); addr%uintptr(size) != 0 {
		t.Errorf("%s unaligned: result at %#x is not %d-aligned", name, addr, size)
	}
	if size > 1 {
		// The result is a copy: changing the input does not change it.
		for i := range un {
			un[i] ^= 0xff
		}
		if !sameBits(got, orig) {
			t.Errorf("%s unaligned: result shares memory with its input", name)
		}
	}

	// Every other offset in a shared buffer, too.
	buf := make([]byte, len(frame)+size)
	for off := 0; off < size; off++ {
		copy(buf[off:], frame)
		got, err := Values[V](buf[off : off+len(frame)])
		if err != nil {
			t.Fatalf("%s at offset %d: %v", name, off, err)
		}
		if !sameBits(got, orig) {
			t.Errorf("%s at offset %d: Values = %v, want %v", name, off, got, orig)
		}
	}

	if !sameBits(vals, orig) {
		t.Errorf("%s: Frame or Values changed the input values", name)
	}
}

func TestFrameValuesRoundTrip(t *testing.T) {
	checkRoundTrip[int8](t)
	checkRoundTrip[int16](t)
	checkRoundTrip[int32](t)
	checkRoundTrip[int64](t)
	checkRoundTrip[uint8](t)
	checkRoundTrip[uint16](t)
	checkRoundTrip[uint32](t)
	checkRoundTrip[uint64](t)
	checkRoundTrip[float32](t)
	checkRoundTrip[float64](t)
}

func checkEmpty[V Value](t *testing.T) {
	t.Helper()
	name := TypeOf[V]().String()
	for _, in := range [][]V{nil, {}} {
		f := Frame(in)
		if f == nil || len(f) != 0 {
			t.Errorf("%s: Frame(%#v) = %#v, want an empty non-nil frame", name, in, f)
		}
	}
	for _, in := range [][]byte{nil, {}} {
		v, err := Values[V](in)
		if err != nil {
			t.Errorf("%s: Values(%#v): %v", name, in, err)
		}
		if v == nil || len(v) != 0 {
			t.Errorf("%s: Values(%#v) = %#v, want an empty non-nil slice", name, in, v)
		}
	}
}

func TestFrameValuesEmpty(t *testing.T) {
	checkEmpty[int8](t)
	checkEmpty[int16](t)
	checkEmpty[int32](t)
	checkEmpty[int64](t)
	checkEmpty[uint8](t)
	checkEmpty[uint16](t)
	checkEmpty[uint32](t)
	checkEmpty[uint64](t)
	checkEmpty[float32](t)
	checkEmpty[float64](t)
}

func checkBadLength[V Value](t *testing.T) {
	t.Helper()
	size := SizeOf[V]()
	for _, n := range []int{1, size - 1, size + 1, 3*size - 1, 3*size + 1} {
		if n <= 0 || n%size == 0 {
			continue
		}
		v, err := Values[V](make([]byte, n))
		if err == nil {
			t.Errorf("%s: Values of %d bytes = %v, want an error", TypeOf[V](), n, v)
		}
		// Also unaligned.
		if _, err := Values[V](make([]byte, n+1)[1:]); err == nil {
			t.Errorf("%s: unaligned Values of %d bytes: want an error", TypeOf[V](), n)
		}
	}
}

func TestValuesWrongLength(t *testing.T) {
	checkBadLength[int16](t)
	checkBadLength[int32](t)
	checkBadLength[int64](t)
	checkBadLength[uint16](t)
	checkBadLength[uint32](t)
	checkBadLength[uint64](t)
	checkBadLength[float32](t)
	checkBadLength[float64](t)
	// A single byte is a whole number of 1-byte values.
	if v, err := Values[int8](make([]byte, 3)); err != nil || len(v) != 3 {
		t.Errorf("Values[int8] of 3 bytes = %v, %v", v, err)
	}
}

// On little-endian hosts Frame and aligned Values share memory with their
// input, as documented.
func TestNoCopyOnLittleEndian(t *testing.T) {
	if !littleEndian {
		t.Skip("big-endian host: frames are always copied")
	}
	vals := []float32{1, 2, 3}
	frame := Frame(vals)
	if addrOf(frame) != uintptr(unsafe.Pointer(&vals[0])) {
		t.Error("Frame copied on a little-endian host")
	}
	got, err := Values[float32](frame)
	if err != nil {
		t.Fatal(err)
	}
	if &got[0] != &vals[0] {
		t.Error("aligned Values copied on a little-endian host")
	}
	// The whole chain is one memory: a change shows through.
	vals[1] = 42
	if got[1] != 42 {
		t.Error("Values result does not share memory with the frame")
	}
	if !reflect.DeepEqual(got, []float32{1, 42, 3}) {
		t.Errorf("got %v", got)
	}
}

func TestMessageAddData(t *testing.T) {
	m := New()
	keys := []uint64{1, 2, 3}
	vals := []float32{0.5, 1.5, 2.5, 3.5, 4.5, 5.5}
	m.AddData(Uint64, Frame(keys))
	m.AddData(Float, Frame(vals))
	m.AddData(Int32, Frame([]int32{}))
	if want := []DataType{Uint64, Float, Int32}; !reflect.DeepEqual(m.Meta.DataTypes, want) {
		t.Errorf("data types %v, want %v", m.Meta.DataTypes, want)
	}
	if m.Meta.DataSize != 3*8+6*4 {
		t.Errorf("data size %d, want %d", m.Meta.DataSize, 3*8+6*4)
	}
	if len(m.Data) != 3 || len(m.Data[2]) != 0 {
		t.Errorf("frames %v", m.Data)
	}
	k, err := Values[uint64](m.Data[0])
	if err != nil || !reflect.DeepEqual(k, keys) {
		t.Errorf("keys %v, %v", k, err)
	}
}
