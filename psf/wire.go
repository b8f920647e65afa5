package psf

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"math"
)

// errShort is the decoding error for input that ends too early.
var errShort = errors.New("psf: truncated input")

// Encoder appends values to a byte slice in psf's wire format: fixed-size
// numbers little-endian, lengths and integers as (zig-zag) varints. The zero
// value is ready to use. Encoding cannot fail except through Fail, which a
// Codec calls when it cannot encode a value; the first such error is kept.
type Encoder struct {
	buf []byte
	err error
}

// NewEncoder returns an Encoder that appends to buf.
func NewEncoder(buf []byte) *Encoder { return &Encoder{buf: buf} }

// Bytes returns the encoded bytes.
func (e *Encoder) Bytes() []byte { return e.buf }

// Err returns the first error passed to Fail.
func (e *Encoder) Err() error { return e.err }

// Fail records err as the encoding's error, unless one is recorded already.
func (e *Encoder) Fail(err error) {
	if e.err == nil && err != nil {
		e.err = err
	}
}

// Uint8 appends one byte.
func (e *Encoder) Uint8(v uint8) { e.buf = append(e.buf, v) }

// Bool appends a bool as one byte, 0 or 1.
func (e *Encoder) Bool(v bool) {
	if v {
		e.Uint8(1)
	} else {
		e.Uint8(0)
	}
}

// Uvarint appends v as an unsigned varint.
func (e *Encoder) Uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }

// Varint appends v as a zig-zag varint.
func (e *Encoder) Varint(v int64) { e.buf = binary.AppendVarint(e.buf, v) }

// Int appends v as a zig-zag varint.
func (e *Encoder) Int(v int) { e.Varint(int64(v)) }

// Uint64 appends v as 8 bytes.
func (e *Encoder) Uint64(v uint64) { e.buf = binary.LittleEndian.AppendUint64(e.buf, v) }

// Float64 appends v as 8 bytes (IEEE 754 bits).
func (e *Encoder) Float64(v float64) { e.Uint64(math.Float64bits(v)) }

// Blob appends a length and the bytes of b.
func (e *Encoder) Blob(b []byte) {
	e.Uvarint(uint64(len(b)))
	e.buf = append(e.buf, b...)
}

// String appends a length and the bytes of s.
func (e *Encoder) String(s string) {
	e.Uvarint(uint64(len(s)))
	e.buf = append(e.buf, s...)
}

// Float64s appends a length and the values of v, 8 bytes each.
func (e *Encoder) Float64s(v []float64) {
	e.Uvarint(uint64(len(v)))
	e.buf = growBy(e.buf, 8*len(v))
	for _, x := range v {
		e.buf = binary.LittleEndian.AppendUint64(e.buf, math.Float64bits(x))
	}
}

// Ints appends a length and the values of v as zig-zag varints.
func (e *Encoder) Ints(v []int) {
	e.Uvarint(uint64(len(v)))
	for _, x := range v {
		e.Varint(int64(x))
	}
}

// Int64s appends a length and the values of v as zig-zag varints.
func (e *Encoder) Int64s(v []int64) {
	e.Uvarint(uint64(len(v)))
	for _, x := range v {
		e.Varint(x)
	}
}

func growBy(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), len(b)+n)
	copy(nb, b)
	return nb
}

// Decoder reads values written by an Encoder. Errors are sticky: after the
// first one (input too short, a length larger than the input, a bad
// varint), every read returns a zero value and Err reports the error, so a
// codec can read all its fields and check once. Slices it returns never
// share memory with the input.
type Decoder struct {
	buf []byte
	err error
}

// NewDecoder returns a Decoder reading buf.
func NewDecoder(buf []byte) *Decoder { return &Decoder{buf: buf} }

// Err returns the first decoding error.
func (d *Decoder) Err() error { return d.err }

// Fail records err as the decoding's error, unless one is recorded already;
// codecs call it for values they reject.
func (d *Decoder) Fail(err error) {
	if d.err == nil && err != nil {
		d.err = err
	}
}

// Len returns the number of bytes not read yet.
func (d *Decoder) Len() int { return len(d.buf) }

// Finish returns the decoding error, or an error if input is left over.
func (d *Decoder) Finish() error {
	if d.err != nil {
		return d.err
	}
	if len(d.buf) != 0 {
		return fmt.Errorf("psf: %d bytes left over after decoding", len(d.buf))
	}
	return nil
}

func (d *Decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.buf) {
		d.err = errShort
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

// Uint8 reads one byte.
func (d *Decoder) Uint8() uint8 {
	b := d.take(1)
	if b == nil {
		return 0
	}
	return b[0]
}

// Bool reads a bool; bytes other than 0 and 1 are an error.
func (d *Decoder) Bool() bool {
	switch d.Uint8() {
	case 0:
		return false
	case 1:
		return true
	}
	d.Fail(errors.New("psf: bad bool"))
	return false
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.err = errors.New("psf: bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// Varint reads a zig-zag varint.
func (d *Decoder) Varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.err = errors.New("psf: bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// Int reads a zig-zag varint that must fit an int.
func (d *Decoder) Int() int {
	v := d.Varint()
	if int64(int(v)) != v {
		d.Fail(errors.New("psf: integer overflows int"))
		return 0
	}
	return int(v)
}

// Uint64 reads 8 bytes.
func (d *Decoder) Uint64() uint64 {
	b := d.take(8)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b)
}

// Float64 reads 8 bytes as IEEE 754 bits.
func (d *Decoder) Float64() float64 { return math.Float64frombits(d.Uint64()) }

// length reads a count of items of at least minSize bytes each, checking it
// against the input left, so hostile input cannot make us allocate much.
func (d *Decoder) length(minSize int) int {
	n := d.Uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(len(d.buf)/minSize) {
		d.err = fmt.Errorf("psf: length %d exceeds the input", n)
		return 0
	}
	return int(n)
}

// Blob reads a length and that many bytes (copied).
func (d *Decoder) Blob() []byte {
	n := d.length(1)
	b := d.take(n)
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}

// String reads a length and that many bytes as a string.
func (d *Decoder) String() string {
	n := d.length(1)
	return string(d.take(n))
}

// Float64s reads a length and that many float64s.
func (d *Decoder) Float64s() []float64 {
	n := d.length(8)
	b := d.take(8 * n)
	if b == nil {
		return nil
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

// Ints reads a length and that many zig-zag varints as ints.
func (d *Decoder) Ints() []int {
	n := d.length(1)
	if d.err != nil {
		return nil
	}
	out := make([]int, n)
	for i := range out {
		out[i] = d.Int()
	}
	if d.err != nil {
		return nil
	}
	return out
}

// Int64s reads a length and that many zig-zag varints.
func (d *Decoder) Int64s() []int64 {
	n := d.length(1)
	if d.err != nil {
		return nil
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = d.Varint()
	}
	if d.err != nil {
		return nil
	}
	return out
}

// Codec encodes and decodes values of type T for the wire: the parameters
// a worker sends to a partition, and the result a partition sends back.
// Decode reports problems through the Decoder (Fail, or a short read); the
// caller checks Decoder.Finish, which also rejects trailing bytes.
type Codec[T any] interface {
	Encode(e *Encoder, v T)
	Decode(d *Decoder) T
}

type funcCodec[T any] struct {
	enc func(*Encoder, T)
	dec func(*Decoder) T
}

func (c funcCodec[T]) Encode(e *Encoder, v T) { c.enc(e, v) }
func (c funcCodec[T]) Decode(d *Decoder) T    { return c.dec(d) }

// NewCodec returns a Codec made of two functions.
func NewCodec[T any](encode func(e *Encoder, v T), decode func(d *Decoder) T) Codec[T] {
	return funcCodec[T]{encode, decode}
}

// Ready-made codecs for common parameter and result types.
var (
	// None encodes nothing, for functions without parameters or results.
	None Codec[struct{}] = NewCodec(func(*Encoder, struct{}) {}, func(*Decoder) struct{} { return struct{}{} })
	// Float64 encodes one float64.
	Float64 Codec[float64] = NewCodec((*Encoder).Float64, (*Decoder).Float64)
	// Float64s encodes a slice of float64.
	Float64s Codec[[]float64] = NewCodec((*Encoder).Float64s, (*Decoder).Float64s)
	// Int64 encodes one int64 as a varint.
	Int64 Codec[int64] = NewCodec((*Encoder).Varint, (*Decoder).Varint)
	// Bool encodes one bool.
	Bool Codec[bool] = NewCodec((*Encoder).Bool, (*Decoder).Bool)
	// String encodes one string.
	String Codec[string] = NewCodec((*Encoder).String, (*Decoder).String)
	// Bytes encodes one byte slice.
	Bytes Codec[[]byte] = NewCodec((*Encoder).Blob, (*Decoder).Blob)
)

// Gob returns a Codec that encodes T with encoding/gob, as a length-prefixed
// blob. It is the easy choice for parameter structs of your own functions;
// each value carries its type description, so prefer a hand-written codec
// (NewCodec) for small values sent often.
func Gob[T any]() Codec[T] {
	return NewCodec(func(e *Encoder, v T) {
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(&v); err != nil {
			e.Fail(fmt.Errorf("psf: gob: %w", err))
			return
		}
		e.Blob(buf.Bytes())
	}, func(d *Decoder) T {
		var v T
		b := d.Blob()
		if d.Err() != nil {
			return v
		}
		if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&v); err != nil {
			d.Fail(fmt.Errorf("psf: gob: %w", err))
		}
		return v
	})
}

// encode runs c on v and returns the bytes.
func encode[T any](c Codec[T], v T) ([]byte, error) {
	e := NewEncoder(nil)
	c.Encode(e, v)
	return e.Bytes(), e.Err()
}

// decode runs c on b, which must be consumed entirely.
func decode[T any](c Codec[T], b []byte) (T, error) {
	d := NewDecoder(b)
	v := c.Decode(d)
	return v, d.Finish()
}
