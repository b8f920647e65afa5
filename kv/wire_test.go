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

// FuzzBodies feeds arbitrary fields to every reader of the bodies Go nodes
// add to KV messages (tags, redirects, forwards, acks, copies) and to the
// pull flags: none may panic, what one accepts names ranks and servers
// below n, and it reads back the same from the body written for it.
func FuzzBodies(f *testing.F) {
	_, tag := bodyKind(tagBody(1, 7, flagKeys))
	_, fwd := bodyKind(forwardBody(&replica.Forward[struct{}]{Epoch: 3, From: 1, Range: 2, LSN: 9, Kind: replica.EntryRequest,
		Origin: replica.Origin{Sender: 9, Customer: 0, TS: -1}}, 0, true, true))
	_, ack := bodyKind(ackBody(replica.Ack{Epoch: 2, From: 1, Range: 1, Version: 4, LSN: 5}))
	_, snap := bodyKind(snapshotBody(&replica.Snapshot[struct{}]{From: 2, Range: 1, LSN: 3,
		Applied: []replica.Applied{{LSN: 2, Origin: replica.Origin{Sender: 9, TS: 4}, Answer: []byte{1}}}}))
	_, red := bodyKind(redirectBody(1, 5, 12))
	for _, p := range [][]byte{tag, fwd, ack, snap, red, {}, {0xff, 0xff, 0xff}} {
		f.Add(p, 3, byte(kindTag))
	}
	f.Fuzz(func(t *testing.T, p []byte, n int, kind byte) {
		if n <= 0 || n > replica.MaxServers {
			return
		}
		if r, epoch, ts, err := parseRedirect(p, n); err == nil {
			_, q := bodyKind(redirectBody(r, epoch, ts))
			if r2, e2, ts2, err := parseRedirect(q, n); r >= n || err != nil || r2 != r || e2 != epoch || ts2 != ts {
				t.Fatalf("redirect %d %d %d read back as %d %d %d (%v)", r, epoch, ts, r2, e2, ts2, err)
			}
		}
		if h, err := parseForward(p, n); err == nil {
			_, q := bodyKind(forwardBody(&h.f, h.cmd, h.push, h.pull))
			if h2, err := parseForward(q, n); h.f.From >= n || h.f.Range >= n || err != nil || h2 != h {
				t.Fatalf("forward %+v read back as %+v (%v)", h, h2, err)
			}
		}
		if a, err := parseAck(p, n); err == nil {
			_, q := bodyKind(ackBody(a))
			if a2, err := parseAck(q, n); a.From >= n || a.Range >= n || err != nil || a2 != a {
				t.Fatalf("ack %+v read back as %+v (%v)", a, a2, err)
			}
		}
		if s, err := parseSnapshot(p, n); err == nil {
			_, q := bodyKind(snapshotBody(&s))
			if s2, err := parseSnapshot(q, n); s.From >= n || s.Range >= n || err != nil || !reflect.DeepEqual(s2, s) {
				t.Fatalf("copy %+v read back as %+v (%v)", s, s2, err)
			}
		}
		for _, answer := range []bool{false, true} {
			r, x, flags, err := parseTag(p, n, answer)
			if err != nil {
				continue
			}
			body := tagBody(r, x, flags)
			if answer {
				body = answerTagBody(r, x, flags)
			}
			_, q := bodyKind(body)
			if r2, x2, f2, err := parseTag(q, n, answer); r >= n || err != nil || r2 != r || x2 != x || f2 != flags {
				t.Fatalf("tag %d %d %d read back as %d %d %d (%v)", r, x, flags, r2, x2, f2, err)
			}
			if got := pullFlags(body, answer); n == replica.MaxServers && got != flags {
				t.Fatalf("pull flags %d of a tag read as %d", flags, got)
			}
		}
		// Any body at all, as a request's and as an answer's: its flags are
		// read without a panic, and a kindKeys body's are its one number.
		body := append(append([]byte(bodyPrefix), kind), p...)
		for _, answer := range []bool{false, true} {
			got := pullFlags(body, answer)
			if kind == kindKeys {
				fl := &fields{b: p}
				want := fl.getU()
				if fl.err != nil || len(fl.b) != 0 {
					want = 0
				}
				if got != want {
					t.Fatalf("kindKeys body %x: flags %d, want %d", p, got, want)
				}
			}
		}
	})
}
