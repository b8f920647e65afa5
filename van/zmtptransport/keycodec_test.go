package zmtptransport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// keysOf writes keys as a key frame.
func keysOf(keys []uint64) []byte {
	b := make([]byte, 8*len(keys))
	for i, k := range keys {
		binary.LittleEndian.PutUint64(b[8*i:], k)
	}
	return b
}

// codeLists are key lists of every shape the codec meets: regular, dense,
// gaps of every width up to the widest coded, repeats, a single key, and
// lengths around a block.
func codeLists(r *rand.Rand) map[string][]uint64 {
	lists := map[string][]uint64{}
	for _, n := range []int{1, 2, codeBlock, codeBlock + 1, codeBlock + 2, 3*codeBlock - 1, codeProbe + 1, codeProbe + codeBlock + 7, 100000} {
		spread := make([]uint64, n)
		dense := make([]uint64, n)
		for i := range n {
			spread[i] = ^uint64(0) / uint64(n) * uint64(i)
			dense[i] = 1000 + uint64(i)
		}
		lists["spread/"+itoa(n)] = spread
		lists["dense/"+itoa(n)] = dense
		for _, w := range []int{1, 3, 8, 13, 20, 31, 40, 55, 56} {
			l := make([]uint64, n)
			k := r.Uint64N(1 << 20)
			for i := range l {
				l[i] = k
				k += r.Uint64N(1 << w)
			}
			lists["width"+itoa(w)+"/"+itoa(n)] = l
		}
		rep := make([]uint64, n)
		for i := range rep {
			rep[i] = uint64(i / 3)
		}
		lists["repeats/"+itoa(n)] = rep
	}
	top := []uint64{^uint64(0) - 5, ^uint64(0) - 1, ^uint64(0)}
	lists["top"] = top
	return lists
}

func itoa(n int) string { return strconv.Itoa(n) }

// holey returns n dense keys with a hole (a key skipped) in one block of
// gaps in every `every`: a list of mostly equal gaps, whose blocks with a
// hole are packed.
func holey(n, every int) []uint64 {
	keys := make([]uint64, n)
	k := uint64(1000)
	for i := range keys {
		if i%codeBlock == 5 && (i/codeBlock)%every == 0 {
			k += 3
		}
		keys[i] = k
		k++
	}
	return keys
}

// TestKeyCodeRoundTrip: every list the encoder accepts decodes to the very
// same bytes; lists that do not shrink, are unsorted or are not key lists
// are refused, never coded wrongly.
func TestKeyCodeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for name, keys := range codeLists(r) {
		dst := make([]byte, codeBound(8*len(keys)))
		n, ok := encodeKeys(dst, keys, 0)
		if !ok {
			continue
		}
		got := make([]uint64, len(keys))
		if err := decodeKeys(got, dst[:n]); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(got, keys) {
			t.Fatalf("%s: decoded list differs", name)
		}
		// Coded in two parts at once: the very same bytes, whenever
		// the parts fit.
		if len(keys) <= 2*codeBlock+1 {
			continue
		}
		a, b := make([]byte, n+64), make([]byte, n+64)
		na, nb, ok := encodeSplit(a, b, keys, 0)
		if !ok {
			if strings.HasPrefix(name, "spread/") || strings.HasPrefix(name, "dense/") || strings.HasPrefix(name, "width13/") {
				t.Errorf("%s: not coded in parts", name)
			}
			continue
		}
		if !bytes.Equal(append(a[:na:na], b[:nb]...), dst[:n]) {
			t.Fatalf("%s: coded in parts differs", name)
		}
	}
	// What must be coded, and how small.
	for _, c := range []struct {
		name string
		most int // coded bytes at most
	}{
		{"spread/100000", 8 + (100000/codeBlock+1)*11},
		{"dense/100000", 8 + (100000/codeBlock+1)*2},
		{"width20/100000", 8 + 100000*20/8 + (100000/codeBlock+1)*5},
		{"repeats/100000", 8 + (100000/codeBlock+1)*2 + 100000/8},
	} {
		keys := codeLists(rand.New(rand.NewPCG(1, 2)))[c.name]
		dst := make([]byte, codeBound(8*len(keys)))
		n, ok := encodeKeys(dst, keys, 0)
		if !ok || n > c.most {
			t.Errorf("%s: coded %v, %d bytes, want at most %d", c.name, ok, n, c.most)
		}
	}
	// A buffer too small is refused, never overrun.
	dense := codeLists(rand.New(rand.NewPCG(1, 2)))["width20/100000"]
	if _, ok := encodeKeys(make([]byte, 1000), dense, 0); ok {
		t.Error("coded 100000 keys of 20-bit gaps into 1000 bytes")
	}
	// What must not be: gaps too wide to gain, unsorted keys, a frame
	// that is not a list of keys.
	wide := codeLists(rand.New(rand.NewPCG(1, 2)))["width56/100000"]
	unsorted := slices.Clone(codeLists(rand.New(rand.NewPCG(1, 2)))["dense/100000"])
	unsorted[99998], unsorted[99999] = unsorted[99999], unsorted[99998]
	for name, keys := range map[string][]uint64{
		"wide":     wide,
		"unsorted": unsorted,
		"one":      {7},
		"empty":    nil,
	} {
		dst := make([]byte, codeBound(8*len(keys))+16)
		if _, ok := encodeKeys(dst, keys, 0); ok {
			t.Errorf("%s: coded", name)
		}
	}
}

// TestKeyCodeOnlyMostlyEqualGaps: the transport codes a list only when
// few of its blocks have gaps that differ (codePackedShare): packing those
// costs more than moving them plain saves. Lists of equal gaps, and of
// equal gaps with a hole in one block of nine, are coded; one with a hole
// in one block of four, or of random gaps however narrow, is not, and the
// encoder gives up on those within its probe.
func TestKeyCodeOnlyMostlyEqualGaps(t *testing.T) {
	lists := codeLists(rand.New(rand.NewPCG(1, 2)))
	for _, c := range []struct {
		name string
		keys []uint64
		want bool
	}{
		{"spread", lists["spread/100000"], true},
		{"dense", lists["dense/100000"], true},
		{"holes in 1 block of 9", holey(100000, 9), true},
		{"holes in 1 block of 4", holey(100000, 4), false},
		{"1-bit gaps", lists["width1/100000"], false},
		{"13-bit gaps", lists["width13/100000"], false},
		{"20-bit gaps", lists["width20/100000"], false},
	} {
		dst := make([]byte, codeBound(8*len(c.keys)))
		n, ok := encodeKeys(dst, c.keys, codePackedShare)
		if ok != c.want {
			t.Errorf("%s: coded %v, want %v", c.name, ok, c.want)
			continue
		}
		if ok {
			got := make([]uint64, len(c.keys))
			if err := decodeKeys(got, dst[:n]); err != nil || !slices.Equal(got, c.keys) {
				t.Errorf("%s: round trip: %v", c.name, err)
			}
		}
		if _, ok := codeEstimate(c.keys); ok && !c.want {
			t.Errorf("%s: the probe codes it", c.name)
		}
	}
	// Equal gaps up to the probe's end, then packed blocks past the share:
	// given up on once they are.
	late := slices.Concat(lists["dense/"+itoa(codeProbe+1)], lists["width13/100000"])
	for i := codeProbe + 1; i < len(late); i++ {
		late[i] += late[codeProbe] + 1
	}
	if _, ok := encodeKeys(make([]byte, codeBound(8*len(late))), late, codePackedShare); ok {
		t.Error("a list of packed blocks after a start of equal gaps was coded")
	}
}

// TestEqualGaps: a block whose gaps are all equal is found so, and one
// whose gaps differ anywhere (any one gap off by any amount, at every
// position of blocks of every length) is not.
func TestEqualGaps(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for m := 1; m <= codeBlock; m++ {
		for _, lo := range []uint64{0, 1, 4, 1 << 40, r.Uint64()} {
			prev := r.Uint64()
			blk := make([]uint64, m)
			for j := range blk {
				blk[j] = prev + uint64(j+1)*lo
			}
			if !equalGaps(prev, blk, lo) {
				t.Fatalf("%d keys %d apart: gaps found unequal", m, lo)
			}
			for j := range blk {
				for _, off := range []uint64{1, lo, 1 << 63, r.Uint64() | 1} {
					if off == 0 {
						continue
					}
					b := slices.Clone(blk)
					b[j] += off
					if equalGaps(prev, b, lo) {
						t.Fatalf("%d keys %d apart, key %d moved by %d: gaps found equal", m, lo, j, off)
					}
				}
			}
		}
	}
}

// TestKeyCodeBadInput: coded bytes that are cut short, have bytes left
// over, or announce a wrong size are refused with an error.
func TestKeyCodeBadInput(t *testing.T) {
	keys := codeLists(rand.New(rand.NewPCG(1, 2)))["width13/100000"]
	dst := make([]byte, codeBound(8*len(keys)))
	n, ok := encodeKeys(dst, keys, 0)
	if !ok {
		t.Fatal("not coded")
	}
	coded := dst[:n]
	for name, c := range map[string]struct {
		coded []byte
		n     int
	}{
		"cut":        {coded[:n-1], len(keys)},
		"left over":  {append(slices.Clone(coded), 0), len(keys)},
		"too many":   {coded, len(keys) + 1},
		"too few":    {coded, len(keys) - 1},
		"one":        {coded, 1},
		"no key":     {coded[:5], len(keys)},
		"wide block": {append(slices.Clone(coded[:8]), 0, codeMaxWidth+1, 0xff), 2},
	} {
		if err := decodeKeys(make([]uint64, c.n), c.coded); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// FuzzKeyCode: arbitrary bytes never make the decoder panic or write out
// of its buffer, and key lists built from arbitrary bytes (each byte a
// gap, shifted, so that many lists shrink; and the bytes read as keys,
// sorted) round-trip whenever they are coded.
func FuzzKeyCode(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 0}, uint16(2))
	f.Add(keysOf([]uint64{5, 6, 9, 100, 1 << 40}), uint16(5))
	f.Add(bytes.Repeat([]byte{3, 200, 0, 7}, 300), uint16(40))
	f.Fuzz(func(t *testing.T, b []byte, n uint16) {
		_ = decodeKeys(make([]uint64, n), b)
		gaps := make([]uint64, len(b))
		k := uint64(n)
		for i, c := range b {
			gaps[i] = k
			k += uint64(c) << (n % 57)
		}
		keys := make([]uint64, len(b)/8)
		for i := range keys {
			keys[i] = binary.LittleEndian.Uint64(b[8*i:])
		}
		slices.Sort(keys)
		for _, list := range [][]uint64{gaps, keys} {
			dst := make([]byte, codeBound(8*len(list)))
			m, ok := encodeKeys(dst, list, 0)
			if ok {
				got := make([]uint64, len(list))
				if err := decodeKeys(got, dst[:m]); err != nil || !slices.Equal(got, list) {
					t.Fatalf("round trip of %d keys: %v", len(list), err)
				}
			}
			// Coded in two parts: the same bytes, or refused.
			a, b := make([]byte, len(dst)+64), make([]byte, len(dst)+64)
			if na, nb, ok2 := encodeSplit(a, b, list, 0); ok2 && (!ok || !bytes.Equal(append(a[:na:na], b[:nb]...), dst[:m])) {
				t.Fatalf("%d keys coded in two parts differ from the whole list's coding (coded whole: %v)", len(list), ok)
			}
		}
	})
}

func benchKeys(b *testing.B, keys []uint64) {
	dst := make([]byte, codeBound(8*len(keys)))
	out := make([]uint64, len(keys))
	for i := range out {
		out[i] = 1 // its pages in, as a pooled buffer's are
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(8 * len(keys)))
		for b.Loop() {
			encodeKeys(dst, keys, 0)
		}
	})
	b.Run("encode-split", func(b *testing.B) {
		b.SetBytes(int64(8 * len(keys)))
		for b.Loop() {
			encodeSplit(dst[:len(dst)/2], dst[len(dst)/2:], keys, 0)
		}
	})
	n, ok := encodeKeys(dst, keys, 0)
	if !ok {
		b.Skip("not coded")
	}
	b.Logf("%d keys coded in %d bytes", len(keys), n)
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(8 * len(keys)))
		for b.Loop() {
			decodeKeys(out, dst[:n])
		}
	})
}

func BenchmarkKeyCode(b *testing.B) {
	const n = 1 << 20
	spread := make([]uint64, n)
	w20 := make([]uint64, n)
	r := rand.New(rand.NewPCG(1, 2))
	k := uint64(0)
	for i := range n {
		spread[i] = ^uint64(0) / n * uint64(i)
		w20[i] = k
		k += r.Uint64N(1 << 20)
	}
	b.Run("spread", func(b *testing.B) { benchKeys(b, spread) })
	// A push's list, larger than the caches.
	large := make([]uint64, 10_000_000)
	for i := range large {
		large[i] = ^uint64(0) / uint64(len(large)) * uint64(i)
	}
	b.Run("spread-1e7", func(b *testing.B) { benchKeys(b, large) })
	b.Run("width20", func(b *testing.B) { benchKeys(b, w20) })
}

// waitCode waits until tx's peer id may send coded key lists.
func waitCode(t *testing.T, tx *Transport, id int) {
	t.Helper()
	waitPeer(t, tx, id, "the ROUTER never said it decodes key lists", func(p *peer) bool { return p.code })
}

// codeFrames are key frames of every kind, at sizes below, at and above
// the sizes where the transport changes path (keyCodeMin, lendMin,
// zeroCopyMin, decodeAsideMin): whether each is coded, sent shared, is in codable.
func codeFrames() (frames map[string][]byte, codable map[string]bool) {
	r := rand.New(rand.NewPCG(3, 4))
	frames, codable = map[string][]byte{}, map[string]bool{}
	for _, size := range []int{keyCodeMin - 8, keyCodeMin, keyCodeMin + 8, lendMin - 8, lendMin, lendMin + 8, decodeAsideMin - 8, decodeAsideMin, decodeAsideMin + 8} {
		n := size / 8
		spread, dense, w20, hashed := make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n)
		k := r.Uint64N(1 << 30)
		for i := range n {
			spread[i] = ^uint64(0) / uint64(n) * uint64(i)
			dense[i] = 77 + uint64(i)
			w20[i] = k
			k += r.Uint64N(1 << 20)
			hashed[i] = r.Uint64()
		}
		slices.Sort(hashed)
		// Dense at the start, then a key 2^40 further on in one block of
		// nine: more bytes than the start foretells (the sender's second,
		// larger buffer, after two too small for the parts of a long list).
		widening := slices.Clone(dense)
		for i := codeProbe + 1; i < n; i++ {
			widening[i] = widening[i-1] + 1
			if i%codeBlock == 7 && (i/codeBlock)%9 == 0 {
				widening[i] += 1 << 40
			}
		}
		unsorted := slices.Clone(dense)
		unsorted[n/2], unsorted[n/2+1] = unsorted[n/2+1], unsorted[n/2]
		big := size >= keyCodeMin
		for kind, keys := range map[string][]uint64{"spread": spread, "dense": dense, "holes": holey(n, 9), "width20": w20, "widening": widening, "hashed": hashed, "unsorted": unsorted} {
			name := kind + "/" + strconv.Itoa(size)
			frames[name] = keysOf(keys)
			codable[name] = big && (kind == "spread" || kind == "dense" || kind == "holes" || kind == "widening")
		}
		// Keys at an address not aligned for uint64s go plain.
		odd := make([]byte, size+4)
		copy(odd[4:], keysOf(dense))
		frames["unaligned/"+strconv.Itoa(size)] = odd[4:]
	}
	return frames, codable
}

// TestKeyCodeExactFrames sends, over real connections with key coding on,
// key lists of every kind and size, shared and not, as the middle and as
// the last frame, and checks every byte that arrives and that exactly the
// lists that should were coded.
func TestKeyCodeExactFrames(t *testing.T) {
	rx, port := bound(t, Options{KeyCode: true})
	tx := newTransport(t, Options{KeyCode: true})
	connect(t, tx, 1, port, "ps9")
	waitCode(t, tx, 1)
	frames, codable := codeFrames()
	names := slices.Sorted(maps.Keys(frames))
	ctx := context.Background()
	var want int64
	for i, name := range names {
		keys := frames[name]
		for _, share := range []bool{true, false} {
			for _, last := range []bool{true, false} {
				msg := [][]byte{[]byte(name), keys}
				if !last {
					msg = append(msg, pattern(len(keys)/2, byte(i)))
				}
				sent := make([][]byte, len(msg))
				for j, f := range msg {
					sent[j] = bytes.Clone(f)
				}
				if _, err := tx.Send(ctx, 1, msg, share); err != nil {
					t.Fatal(err)
				}
				if share && codable[name] {
					want++
				}
				_, got := recv(t, rx)
				sameFrames(t, i, got, sent)
				clear(got[1]) // a handler may do what it likes with its request
			}
		}
	}
	if coded := tx.KeyCodeStats(); coded != want {
		t.Fatalf("%d lists sent coded, want %d", coded, want)
	}
	t.Logf("%d of %d messages sent coded", want, 4*len(names))
}

// TestKeyCodeOnlyWhenBothCan: a sender or a receiver without key coding
// (as C++ ps-lite and libzmq nodes are), or the scheduler's connection,
// gets plain frames.
func TestKeyCodeOnlyWhenBothCan(t *testing.T) {
	keys := keysOf(codeLists(rand.New(rand.NewPCG(1, 2)))["dense/100000"])
	for _, c := range []struct {
		name     string
		rx, tx   bool
		identity string
	}{
		{"receiver without", false, true, "ps9"},
		{"sender without", true, false, "ps9"},
		{"scheduler", true, true, "ps1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rx, port := bound(t, Options{KeyCode: c.rx, SchedulerIdentity: "ps1"})
			tx := newTransport(t, Options{KeyCode: c.tx})
			connect(t, tx, 1, port, c.identity)
			for i := range 3 {
				if _, err := tx.Send(context.Background(), 1, [][]byte{[]byte("m"), keys}, true); err != nil {
					t.Fatal(err)
				}
				if _, got := recv(t, rx); !bytes.Equal(got[1], keys) {
					t.Fatalf("message %d differs", i)
				}
			}
			if n := tx.KeyCodeStats(); n != 0 {
				t.Fatalf("%d lists sent coded", n)
			}
		})
	}
}

// TestKeyCodeReconnect sends coded lists, loses the peer, sends while it
// is away (lists queued coded before the loss was seen go whole, see
// TestKeyCodeQueuedCommandsAreUndone): the next connection (to a receiver
// that decodes, or one that does not) gets every byte as sent, and lists
// are coded again once the new receiver says it decodes.
func TestKeyCodeReconnect(t *testing.T) {
	keys := keysOf(codeLists(rand.New(rand.NewPCG(1, 2)))["spread/100000"])
	for _, next := range []bool{true, false} {
		t.Run(fmt.Sprint("next decodes ", next), func(t *testing.T) {
			rx, port := bound(t, Options{KeyCode: true})
			tx := newTransport(t, Options{KeyCode: true})
			ev := connect(t, tx, 3, port, "ps9")
			waitCode(t, tx, 3)
			ctx := context.Background()
			if _, err := tx.Send(ctx, 3, [][]byte{[]byte("first"), keys}, true); err != nil {
				t.Fatal(err)
			}
			if _, got := recv(t, rx); !bytes.Equal(got[1], keys) {
				t.Fatal("first message differs")
			}
			if tx.KeyCodeStats() != 1 {
				t.Fatal("first list not coded")
			}
			rx.Close()
			if e := ev.next(t); e != "3 false" {
				t.Fatalf("event %q", e)
			}
			for i := range 4 {
				tx.Send(ctx, 3, [][]byte{[]byte(strconv.Itoa(i)), keys, []byte("v")}, true)
			}
			rx2 := newTransport(t, Options{KeyCode: next})
			if _, err := rx2.Bind("127.0.0.1", port, 0); err != nil {
				t.Fatal(err)
			}
			for i := range 4 {
				_, got := recv(t, rx2)
				if string(got[0]) != strconv.Itoa(i) || len(got) != 3 || !bytes.Equal(got[1], keys) {
					t.Fatalf("message %d after reconnecting differs: %q, %d frames, key frame %d bytes", i, got[0], len(got), len(got[1]))
				}
			}
			if !next {
				return
			}
			waitCode(t, tx, 3)
			before := tx.KeyCodeStats()
			tx.Send(ctx, 3, [][]byte{[]byte("again"), keys}, true)
			if _, got := recv(t, rx2); !bytes.Equal(got[1], keys) {
				t.Fatal("message on the new connection differs")
			}
			if tx.KeyCodeStats() != before+1 {
				t.Fatal("not coded on the new connection")
			}
		})
	}
}

// TestKeyCodeQueuedCommandsAreUndone queues coded lists, then has the
// connection end before they are written: what is written on the next
// connection is the messages whole, with no X-KCODE.
func TestKeyCodeQueuedCommandsAreUndone(t *testing.T) {
	tx := newTransport(t, Options{KeyCode: true})
	p := newPeer(tx, 1, "tcp", "127.0.0.1:1", "ps9")
	p.code = true
	keys := keysOf(codeLists(rand.New(rand.NewPCG(1, 2)))["dense/100000"])
	// And a list coded in two parts.
	long := make([]uint64, codeSplitMin+7)
	for i := range long {
		long[i] = 3 * uint64(i)
	}
	lists := [][]byte{keys, keysOf(long)}
	var sent [][][]byte
	for i := range 4 {
		frames := [][]byte{[]byte(strconv.Itoa(i)), lists[i/2]}
		if i%2 == 0 {
			frames = append(frames, pattern(lendMin, byte(i)))
		}
		sent = append(sent, frames)
		p.qMu.Lock()
		p.queueLargeLocked(frames, true)
		p.qMu.Unlock()
	}
	if n := tx.KeyCodeStats(); n != 4 {
		t.Fatalf("%d lists queued coded, want 4", n)
	}
	wire := forgetQueued(p)
	if p.code {
		t.Fatal("still coding without the next connection's word")
	}
	// Read by a receiver that would decode: there must be nothing to.
	wholeOnWire(t, wire, sent, true)
}

// TestKeyCodeBadInputDropsTheConnection: a coded list that does not
// decode, an X-KCODE out of place or announcing an impossible size ends
// the connection, logged; no frame is made up, and the transport serves
// the next connection. The same bytes from a connection that was not told
// it may code are not decoded.
func TestKeyCodeBadInputDropsTheConnection(t *testing.T) {
	rx, port := bound(t, Options{KeyCode: true, HandshakeTimeout: 2 * time.Second})
	list := keysOf(codeLists(rand.New(rand.NewPCG(1, 2)))["width13/100000"])
	buf := make([]byte, len(list))
	keys, _ := keyView(list)
	n, _ := encodeKeys(buf, keys, 0)
	coded := buf[:n]
	// A list decoded beside the reading of the frame after it.
	r := rand.New(rand.NewPCG(5, 6))
	bigKeys := make([]uint64, decodeAsideMin/8+1000)
	for i := 1; i < len(bigKeys); i++ {
		bigKeys[i] = bigKeys[i-1] + 1 + r.Uint64N(1<<13)
	}
	bigBuf := make([]byte, 8*len(bigKeys))
	nb, _ := encodeKeys(bigBuf, bigKeys, 0)
	big := bigBuf[:nb]
	meta := appendMessage(nil, [][]byte{[]byte("m"), {}})[:3] // "m" with more to follow
	meta[0] = flagMore
	bad := map[string][]byte{
		"cut list":        append(codeCommand(len(list)), appendMessage(nil, [][]byte{coded[:n-1]})...),
		"cut list aside":  append(codeCommand(8*len(bigKeys)), appendMessage(nil, [][]byte{big[:nb-1], {1, 2, 3}})...),
		"long list aside": append(codeCommand(8*len(bigKeys)), appendMessage(nil, [][]byte{append(slices.Clone(big), 0), {1, 2, 3}})...),
		"wrong size":      append(codeCommand(len(list)+8), appendMessage(nil, [][]byte{coded})...),
		"odd size":        append(codeCommand(len(list)-3), appendMessage(nil, [][]byte{coded})...),
		"too large":       append(codeCommand(2<<30), appendMessage(nil, [][]byte{coded})...),
		"two commands":    append(codeCommand(len(list)), append(codeCommand(len(list)), appendMessage(nil, [][]byte{coded})...)...),
		"other in place":  append(codeCommand(len(list)), append(command("PING", []byte{0, 0}), appendMessage(nil, [][]byte{coded})...)...),
		"before any data": append(codeCommand(len(list)), appendMessage(nil, [][]byte{coded})...),
	}
	i := 0
	for name, b := range bad {
		t.Run(name, func(t *testing.T) {
			c := rawDealer(t, port, "ps9", "", false, true)
			if name == "before any data" {
				c.Write(b)
			} else {
				c.Write(append(slices.Clone(meta), b...))
			}
			// The ROUTER sends its READY, its word, then closes.
			rest := make([]byte, 1<<10)
			for {
				if _, err := c.Read(rest); err != nil {
					break
				}
			}
			id := "ps" + strconv.Itoa(20+i)
			i++
			c2 := rawPeer(t, port, id)
			c2.Write(appendMessage(nil, [][]byte{[]byte("after " + name)}))
			if _, frames := recv(t, rx); string(frames[0]) != "after "+name {
				t.Fatalf("got %q: a frame of the bad connection arrived", frames[0])
			}
		})
	}
	// A connection that did not say it codes: the command is one it does
	// not know, inside a message, and the frame arrives as sent.
	c := rawPeer(t, port, "ps30")
	c.Write(append(slices.Clone(meta), append(codeCommand(len(list)), appendMessage(nil, [][]byte{coded})...)...))
	if _, frames := recv(t, rx); len(frames) != 2 || !bytes.Equal(frames[1], coded) {
		t.Fatalf("a connection that may not code got its list decoded: %d frames", len(frames))
	}
}

// FuzzKeyCodeReader reads arbitrary bytes on a connection allowed to send
// coded key lists: no panic, and every message stays within its bounds of
// frames and bytes, decoded lists counted at their plain size.
func FuzzKeyCodeReader(f *testing.F) {
	keys := codeLists(rand.New(rand.NewPCG(1, 2)))["width13/"+strconv.Itoa(codeProbe+1)]
	buf := make([]byte, 8*len(keys))
	n, _ := encodeKeys(buf, keys, 0)
	meta := []byte{flagMore, 1, 'm'}
	f.Add(append(append(slices.Clone(meta), codeCommand(8*len(keys))...), appendMessage(nil, [][]byte{buf[:n]})...))
	f.Add(append(append(slices.Clone(meta), codeCommand(8*len(keys))...), appendMessage(nil, [][]byte{buf[:n], {1, 2}})...))
	f.Add(append(codeCommand(16), appendMessage(nil, [][]byte{make([]byte, 10)})...))
	f.Fuzz(func(t *testing.T, b []byte) {
		const maxFrames, maxBytes = 4, 8 << 20
		fr := &frameReader{r: bufio.NewReaderSize(bytes.NewReader(b), 4096), maxFrames: maxFrames, maxBytes: maxBytes, pool: &bufPool{}, code: true}
		readBounded(t, fr, maxFrames, maxBytes, nil)
	})
}
