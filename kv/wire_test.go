package kv

import (
	"reflect"
	"testing"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/replica"
)

// A batch of forwards reads back as written, and every malformed variant
// of it (cut short, a sender's frames not adding up, too many) is refused.
func TestBatchBody(t *testing.T) {
	list := []batchedForward{
		{forwardHeader{f: replica.Forward[struct{}]{Epoch: 3, From: 1, Inc: 77, Range: 2, LSN: 10, Kind: replica.EntryRequest,
			Gen: 4, Origin: replica.Origin{Sender: 9, Customer: 0, TS: 41}}, cmd: -1, push: true}, 2, [3]int{16, 8}},
		{forwardHeader{f: replica.Forward[struct{}]{Epoch: 3, From: 1, Inc: 77, Range: 2, LSN: 11, Kind: replica.EntryCut, Gen: 5}}, 0, [3]int{}},
		{forwardHeader{f: replica.Forward[struct{}]{Epoch: 3, From: 1, Inc: 77, Range: 0, LSN: 3, Kind: replica.EntryRequest,
			Origin: replica.Origin{Sender: 11, Customer: 2, TS: 1 << 30}}, cmd: 7, push: true, pull: true}, 3, [3]int{8, 12, 4}},
	}
	body := batchBody(list)
	k, p := bodyKind(body)
	if k != kindBatch {
		t.Fatalf("kind %q", k)
	}
	sizes := []int{24, 20, 4}
	got, err := parseBatch(p, 3, sizes)
	if err != nil || !reflect.DeepEqual(got, list) {
		t.Fatalf("parsed %+v, %v; want %+v", got, err, list)
	}
	for _, bad := range [][]int{{24, 20, 5}, {24, 20}, {24, 20, 4, 0}, {16, 20, 4}} {
		if _, err := parseBatch(p, 3, bad); err == nil {
			t.Errorf("frames of %v bytes accepted, want %v", bad, sizes)
		}
	}
	if _, err := parseBatch(p, 2, sizes); err == nil {
		t.Error("a range beyond the servers accepted")
	}
	for n := range len(p) {
		if _, err := parseBatch(p[:n], 3, sizes); err == nil {
			t.Errorf("a batch cut to %d of %d bytes accepted", n, len(p))
		}
	}
	if _, err := parseBatch(append(p[:len(p):len(p)], 0), 3, sizes); err == nil {
		t.Error("trailing bytes accepted")
	}
}

// FuzzParseBatch: no input makes the batch reader panic, and what it
// accepts says how its frames add up.
func FuzzParseBatch(f *testing.F) {
	_, p := bodyKind(batchBody([]batchedForward{{forwardHeader{f: replica.Forward[struct{}]{LSN: 1, Kind: replica.EntryRequest}}, 2, [3]int{8, 4}}}))
	f.Add(p, 3, 8, 4, 0, uint8(2))
	f.Add([]byte{0}, 1, 0, 0, 0, uint8(0))
	f.Fuzz(func(t *testing.T, p []byte, n, s0, s1, s2 int, frames uint8) {
		if n <= 0 || n > 1000 {
			return
		}
		sizes := []int{s0, s1, s2}[:frames%4]
		list, err := parseBatch(p, n, sizes)
		if err != nil {
			return
		}
		var total [3]int
		for _, b := range list {
			if b.frames < 0 || b.frames > len(sizes) || b.f.Range >= n || b.f.From >= n {
				t.Fatalf("accepted %+v", b)
			}
			for j := range b.frames {
				total[j] += b.sizes[j]
			}
		}
		for j := range sizes {
			if total[j] != sizes[j] {
				t.Fatalf("accepted frames of %v bytes, want %v", total, sizes)
			}
		}
		if len(list) == 0 || len(list) > maxBatch {
			t.Fatalf("accepted %d forwards", len(list))
		}
	})
}

// The entries of a received batch outlive its message, which the customer
// recycles once the handler returns: the core may keep an entry (for a
// newer view, or ahead of its turn) and pass it on later. Each entry must
// own its frames' type list: entries that shared the message's found it
// wiped when they were passed on, and the next server dropped them as
// malformed, stalling the chain (TestReplicatedKillDuringCopy failed about
// one run in four).
func TestBatchEntriesOwnTheirTypes(t *testing.T) {
	keys := message.Frame([]uint64{1, 2, 3, 4})
	vals := message.Frame([]float32{0.5, 1.5, 2.5, 3.5})
	msg := message.Get()
	msg.Data = [][]byte{keys, vals}
	msg.Meta.DataTypes = []message.DataType{message.Uint64, message.Float}
	sender := message.ServerRankToID(1)
	list := []batchedForward{
		{forwardHeader{f: replica.Forward[struct{}]{From: 1, LSN: 1, Kind: replica.EntryRequest}, push: true}, 2, [3]int{16, 8}},
		{forwardHeader{f: replica.Forward[struct{}]{From: 1, LSN: 2, Kind: replica.EntryRequest}, push: true}, 2, [3]int{16, 8}},
	}
	r := &replicated[float32]{}
	fs, err := r.batchForwards(msg, sender, list)
	if err != nil || len(fs) != 2 {
		t.Fatalf("%d forwards, %v", len(fs), err)
	}
	// What recycling does to the message's type list.
	clear(msg.Meta.DataTypes)
	for i, f := range fs {
		e := f.Payload
		if !reflect.DeepEqual(e.types, []message.DataType{message.Uint64, message.Float}) {
			t.Errorf("entry %d: types %v after the message was recycled", i, e.types)
		}
		if _, err := decodeFrames[float32](e.frames, e.types, true); err != nil {
			t.Errorf("entry %d no longer decodes: %v", i, err)
		}
	}
}
