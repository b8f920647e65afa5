package message

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// DataType tags a data frame with its element type. The numeric values are
// part of the protocol.
type DataType int32

// Data types, in C++ ps-lite's order. C++ tags char values as Other.
const (
	Char DataType = iota
	Int8
	Int16
	Int32
	Int64
	Uint8
	Uint16
	Uint32
	Uint64
	Float
	Double
	Other
)

var dataTypeNames = [...]string{"CHAR", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FLOAT", "DOUBLE", "OTHER"}

// String returns the name C++ ps-lite prints.
func (d DataType) String() string {
	if d >= 0 && int(d) < len(dataTypeNames) {
		return dataTypeNames[d]
	}
	return fmt.Sprintf("DATATYPE(%d)", int32(d))
}

// Value is the set of element types a data frame can carry.
type Value interface {
	int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | float32 | float64
}

// Compatible reports whether a frame tagged got can be read as values
// tagged want: the same type, or any two one-byte types (C++ tags char
// values CHAR or OTHER, which Go reads as int8 or uint8).
func Compatible(got, want DataType) bool {
	if got == want {
		return true
	}
	oneByte := func(d DataType) bool { return d == Char || d == Int8 || d == Uint8 || d == Other }
	return oneByte(got) && oneByte(want)
}

// TypeOf returns the DataType tag for V.
func TypeOf[V Value]() DataType {
	var v V
	switch any(v).(type) {
	case int8:
		return Int8
	case int16:
		return Int16
	case int32:
		return Int32
	case int64:
		return Int64
	case uint8:
		return Uint8
	case uint16:
		return Uint16
	case uint32:
		return Uint32
	case uint64:
		return Uint64
	case float32:
		return Float
	case float64:
		return Double
	}
	return Other
}

// SizeOf returns the size in bytes of one V.
func SizeOf[V Value]() int {
	var v V
	return int(unsafe.Sizeof(v))
}

// littleEndian is true on hosts whose memory layout matches the wire.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// Frame returns the wire bytes of vals. On little-endian hosts it shares
// memory with vals (no copy): vals must not change until the frame is sent.
func Frame[V Value](vals []V) []byte {
	if len(vals) == 0 {
		return []byte{}
	}
	size := SizeOf[V]()
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(vals))), len(vals)*size)
	}
	out := make([]byte, len(vals)*size)
	for i, v := range vals {
		putLE(out[i*size:], v)
	}
	return out
}

// Values interprets a frame as a slice of V. On little-endian hosts an
// aligned frame is reinterpreted in place (no copy; the result shares memory
// with b); an unaligned one is copied. It returns an error when the frame's
// length is not a multiple of the element size.
func Values[V Value](b []byte) ([]V, error) {
	size := SizeOf[V]()
	if len(b)%size != 0 {
		return nil, fmt.Errorf("frame of %d bytes is not a whole number of %d-byte values", len(b), size)
	}
	n := len(b) / size
	if n == 0 {
		return []V{}, nil
	}
	if littleEndian && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(size) == 0 {
		return unsafe.Slice((*V)(unsafe.Pointer(unsafe.SliceData(b))), n), nil
	}
	out := make([]V, n)
	if littleEndian {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), len(b)), b)
		return out, nil
	}
	for i := range out {
		out[i] = getLE[V](b[i*size:])
	}
	return out, nil
}

func putLE[V Value](b []byte, v V) {
	switch x := any(v).(type) {
	case int8:
		b[0] = byte(x)
	case uint8:
		b[0] = x
	case int16:
		binary.LittleEndian.PutUint16(b, uint16(x))
	case uint16:
		binary.LittleEndian.PutUint16(b, x)
	case int32:
		binary.LittleEndian.PutUint32(b, uint32(x))
	case uint32:
		binary.LittleEndian.PutUint32(b, x)
	case float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(x))
	case int64:
		binary.LittleEndian.PutUint64(b, uint64(x))
	case uint64:
		binary.LittleEndian.PutUint64(b, x)
	case float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(x))
	}
}

func getLE[V Value](b []byte) V {
	var v V
	switch p := any(&v).(type) {
	case *int8:
		*p = int8(b[0])
	case *uint8:
		*p = b[0]
	case *int16:
		*p = int16(binary.LittleEndian.Uint16(b))
	case *uint16:
		*p = binary.LittleEndian.Uint16(b)
	case *int32:
		*p = int32(binary.LittleEndian.Uint32(b))
	case *uint32:
		*p = binary.LittleEndian.Uint32(b)
	case *float32:
		*p = math.Float32frombits(binary.LittleEndian.Uint32(b))
	case *int64:
		*p = int64(binary.LittleEndian.Uint64(b))
	case *uint64:
		*p = binary.LittleEndian.Uint64(b)
	case *float64:
		*p = math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	return v
}
