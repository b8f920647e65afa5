package replica

import (
	"encoding/binary"
	"errors"
)

// Origin names a worker's request: its sender, customer and timestamp.
// A worker that sends a request again (to a new head, say) sends it under
// the same origin, so that a server which applied it already answers
// without applying it twice.
type Origin struct {
	Sender   int32
	Customer int32
	TS       int32
}

// DedupPerSender is how many requests of one sender (and customer) a range
// remembers as applied. A request is sent again only while it waits for its
// answer, so this bounds how many requests a worker customer may have in
// flight to one range and still be sure that none is applied twice.
const DedupPerSender = 4096

// Applied is what a range remembers of an applied request.
type Applied struct {
	Origin Origin
	LSN    uint64
	// Gen is the snapshot gen of the stream when it was applied.
	Gen uint64
	// Answer is the request's answer, kept when it is small (a status,
	// say) so that a request sent again gets the same answer; nil when the
	// answer is read again from the store.
	Answer []byte
}

// dedup remembers the last DedupPerSender requests applied per sender.
type dedup struct {
	entries map[Origin]*Applied
	order   map[[2]int32][]Origin // per sender and customer, oldest first
}

func newDedup() *dedup {
	return &dedup{entries: map[Origin]*Applied{}, order: map[[2]int32][]Origin{}}
}

func (d *dedup) get(o Origin) *Applied { return d.entries[o] }

func (d *dedup) put(a Applied) *Applied {
	if e := d.entries[a.Origin]; e != nil {
		*e = a
		return e
	}
	key := [2]int32{a.Origin.Sender, a.Origin.Customer}
	q := d.order[key]
	if len(q) >= DedupPerSender {
		delete(d.entries, q[0])
		q = q[1:]
	}
	d.order[key] = append(q, a.Origin)
	e := &a
	d.entries[a.Origin] = e
	return e
}

// all returns the entries, oldest first per sender.
func (d *dedup) all() []Applied {
	out := make([]Applied, 0, len(d.entries))
	for _, q := range d.order {
		for _, o := range q {
			out = append(out, *d.entries[o])
		}
	}
	return out
}

// EncodeApplied appends the wire form of entries to b: a count, then per
// entry sender, customer, timestamp (zig-zag varints), LSN, gen, answer
// length and bytes (uvarints).
func EncodeApplied(b []byte, entries []Applied) []byte {
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = binary.AppendVarint(b, int64(e.Origin.Sender))
		b = binary.AppendVarint(b, int64(e.Origin.Customer))
		b = binary.AppendVarint(b, int64(e.Origin.TS))
		b = binary.AppendUvarint(b, e.LSN)
		b = binary.AppendUvarint(b, e.Gen)
		b = binary.AppendUvarint(b, uint64(len(e.Answer)))
		b = append(b, e.Answer...)
	}
	return b
}

// DecodeApplied reads what EncodeApplied wrote and returns the rest of b.
func DecodeApplied(b []byte) ([]Applied, []byte, error) {
	d := decoder{b: b}
	n := d.small(1 << 24)
	var out []Applied
	for i := uint64(0); i < n && d.err == nil; i++ {
		var e Applied
		e.Origin.Sender = int32(d.varint())
		e.Origin.Customer = int32(d.varint())
		e.Origin.TS = int32(d.varint())
		e.LSN = d.uvarint()
		e.Gen = d.uvarint()
		if a := d.bytes(MaxAnswer); len(a) > 0 {
			e.Answer = append([]byte(nil), a...)
		}
		out = append(out, e)
	}
	if d.err != nil {
		return nil, nil, d.err
	}
	return out, d.b, nil
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return x
}

// MaxAnswer is the largest answer a range keeps for a request it may see
// again; larger answers are read again from the store.
const MaxAnswer = 4096
