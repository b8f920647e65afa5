package zmtptransport

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand"
	"strconv"
	"testing"
	"time"
)

// keyList returns n bytes of keys that differ from every other first's:
// a run of keys from first on, step apart, repeated (filled by doubling
// copies, cheap under the race detector).
func keyList(n int, first, step uint64) []byte {
	b := make([]byte, n)
	run := min(n, 4096)
	for i := 0; i+8 <= run; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], first+uint64(i/8)*step)
	}
	for i := run; i < n; i *= 2 {
		copy(b[i:], b[:i])
	}
	return b
}

// TestKeyCacheModel runs the sender's decisions and the receiver's cache
// side by side, without a connection, over a seeded random run of key
// lists (some repeated, some changed in one byte, more than fit), and
// checks that every frame the receiver rebuilds is the one sent.
func TestKeyCacheModel(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var all [][]byte
	for i := 0; i < 12; i++ {
		all = append(all, keyList(keyCacheMin+8*rng.Intn(3*keyCacheMin/8), uint64(i*1000), 1+uint64(rng.Intn(3))))
	}
	for seed := int64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewSource(seed))
		limit := int64(keyCacheMin * (3 + rng.Intn(6)))
		var sc sendCache
		if err := sc.offer(commandBody(t, offerCommand(limit, keyCacheSlots)), 1<<40); err != nil {
			t.Fatal(err)
		}
		rc := &recvCache{limit: limit}
		lists := make([][]byte, 6)
		for i, j := range rng.Perm(len(all))[:len(lists)] {
			lists[i] = all[j]
		}
		refs := 0
		for step := 0; step < 200; step++ {
			f := lists[rng.Intn(len(lists))]
			if rng.Intn(20) == 0 {
				f = bytes.Clone(f) // the same bytes, one byte changed
				f[rng.Intn(len(f))]++
			}
			plan := sc.plan(f)
			var got []byte
			switch plan.op {
			case kcNone:
				got = f
			case kcPut:
				if err := rc.takePut(commandBody(t, putCommand(plan.slot, plan.gen, plan.drop))); err != nil {
					t.Fatal(err)
				}
				if err := rc.keep(f); err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
				got = f
			case kcRef:
				kept, last, err := rc.resolve(commandBody(t, refCommand(plan.slot, plan.gen, len(f), true)))
				if err != nil || !last {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
				got = kept
				refs++
			}
			if !bytes.Equal(got, f) {
				t.Fatalf("seed %d step %d: the receiver rebuilt another frame (op %d)", seed, step, plan.op)
			}
			if rc.used > limit || sc.used > limit {
				t.Fatalf("seed %d: %d and %d bytes kept, over %d", seed, sc.used, rc.used, limit)
			}
		}
		if refs == 0 {
			t.Fatalf("seed %d: nothing sent as a reference", seed)
		}
	}
}

// commandBody returns the body of an encoded command frame.
func commandBody(t *testing.T, frame []byte) []byte {
	t.Helper()
	_, body, err := parseCommand(frame[2:])
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// waitOffer waits until tx's peer id has its ROUTER's key cache offer.
func waitOffer(t *testing.T, tx *Transport, id int) {
	t.Helper()
	waitPeer(t, tx, id, "no key cache offer", func(p *peer) bool { return p.kc.limit > 0 })
}

// forgetQueued has p forget its connection's key cache and coding (as
// when the connection ends) and returns the bytes its queue then holds.
func forgetQueued(p *peer) []byte {
	p.qMu.Lock()
	defer p.qMu.Unlock()
	p.forgetCacheLocked()
	var wire []byte
	for _, b := range p.q {
		wire = append(wire, b...)
	}
	return wire
}

// waitPeer waits until on, called with tx's peer id and its qMu held,
// returns true, and fails t with what otherwise.
func waitPeer(t *testing.T, tx *Transport, id int, what string, on func(*peer) bool) {
	t.Helper()
	p, err := tx.peer(id)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for {
		p.qMu.Lock()
		ok := on(p)
		p.qMu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestKeyCacheExactFrames sends, over real connections with the key cache
// on, key lists below, at and above keyCacheMin, repeated, changed in
// place between sends (shared and not), more than the cache holds, one
// larger than it, as the middle and as the last frame, and checks every
// byte that arrives; a receiver that scribbles over what it got does not
// change what it gets next.
func TestKeyCacheExactFrames(t *testing.T) {
	const limit = 8 << 20
	rx, port := bound(t, Options{KeyCacheBytes: limit})
	tx := newTransport(t, Options{KeyCacheBytes: limit})
	connect(t, tx, 1, port, "ps9")
	waitOffer(t, tx, 1)
	ctx := context.Background()
	sizes := []int{keyCacheMin - 8, keyCacheMin, keyCacheMin + 8, 3 << 20, limit + 8}
	var lists [][]byte
	for i, n := range sizes {
		lists = append(lists, keyList(n, uint64(i)*1000, 1))
	}
	for i := 0; i < 6; i++ { // more lists of one size than slots
		lists = append(lists, keyList(2<<20, uint64(100000+i), 1))
	}
	shared := keyList(2<<20, 7, 3) // changed in place between sends
	type sent struct{ frames [][]byte }
	var want []sent
	send := func(frames [][]byte, share bool) {
		t.Helper()
		copies := make([][]byte, len(frames))
		for i, f := range frames {
			copies[i] = bytes.Clone(f)
		}
		want = append(want, sent{copies})
		if _, err := tx.Send(ctx, 1, frames, share); err != nil {
			t.Fatal(err)
		}
	}
	check := func() {
		t.Helper()
		for i, w := range want {
			_, frames := recv(t, rx)
			if len(frames) != len(w.frames) {
				t.Fatalf("message %d: %d frames, sent %d", i, len(frames), len(w.frames))
			}
			for j := range frames {
				if !bytes.Equal(frames[j], w.frames[j]) {
					t.Fatalf("message %d frame %d (%d bytes) differs from what was sent", i, j, len(w.frames[j]))
				}
				if j == 1 {
					clear(frames[j]) // a handler may do what it likes with its request
				}
			}
		}
		want = nil
	}
	rng := rand.New(rand.NewSource(5))
	for round := 0; round < 6; round++ {
		for j := 0; j < 3*len(lists); j++ {
			// Mostly a few hot lists, which stay kept; the others come and
			// go.
			i := rng.Intn(len(lists))
			if rng.Intn(4) != 0 {
				i = 1 + rng.Intn(3)
			}
			keys := lists[i]
			vals := pattern(4*len(keys)/8+1, byte(round+i))
			meta := []byte("m" + strconv.Itoa(round) + "/" + strconv.Itoa(j))
			if j%2 == 0 {
				send([][]byte{meta, keys, vals}, round%2 == 0)
			} else {
				send([][]byte{meta, keys}, false) // a pull: the keys end the message
			}
		}
		binary.LittleEndian.PutUint64(shared[8*rng.Intn(len(shared)/8):], uint64(round)) // one key changed
		send([][]byte{[]byte("shared"), shared, []byte("v")}, true)
		send([][]byte{[]byte("shared"), shared, []byte("v")}, true)
		check()
	}
	puts, refs := tx.KeyCacheStats()
	if puts == 0 || refs == 0 {
		t.Fatalf("key cache unused: %d puts, %d references", puts, refs)
	}
	t.Logf("%d puts, %d references", puts, refs)
}

// TestKeyCacheReconnect queues references while the peer is away: the
// next connection (to a receiver with the cache, or without it) gets whole
// frames, every byte as sent.
func TestKeyCacheReconnect(t *testing.T) {
	for _, next := range []int64{8 << 20, 0} {
		t.Run(fmt.Sprint("next cache ", next), func(t *testing.T) {
			rx, port := bound(t, Options{KeyCacheBytes: 8 << 20})
			tx := newTransport(t, Options{KeyCacheBytes: 8 << 20})
			ev := connect(t, tx, 3, port, "ps9")
			waitOffer(t, tx, 3)
			keys := keyList(2<<20, 1, 1)
			ctx := context.Background()
			for i := 0; i < 4; i++ {
				tx.Send(ctx, 3, [][]byte{[]byte(strconv.Itoa(i)), keys, []byte("v")}, false)
				if _, frames := recv(t, rx); !bytes.Equal(frames[1], keys) {
					t.Fatalf("message %d differs", i)
				}
			}
			if _, refs := tx.KeyCacheStats(); refs == 0 {
				t.Fatal("no reference sent")
			}
			rx.Close()
			if e := ev.next(t); e != "3 false" {
				t.Fatalf("event %q", e)
			}
			for i := 0; i < 4; i++ {
				tx.Send(ctx, 3, [][]byte{[]byte(strconv.Itoa(i)), keys}, false)
			}
			rx2 := newTransport(t, Options{KeyCacheBytes: next})
			if _, err := rx2.Bind("127.0.0.1", port, 0); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 4; i++ {
				_, frames := recv(t, rx2)
				if string(frames[0]) != strconv.Itoa(i) || len(frames) != 2 || !bytes.Equal(frames[1], keys) {
					t.Fatalf("message %d after reconnecting differs", i)
				}
			}
		})
	}
}

// TestKeyCacheBadReferenceDropsTheConnection: a reference to nothing kept,
// or a put beyond what was offered, ends the connection; no frame is made
// up, and the transport serves the next connection.
func TestKeyCacheBadReferenceDropsTheConnection(t *testing.T) {
	rx, port := bound(t, Options{KeyCacheBytes: 4 << 20, HandshakeTimeout: 2 * time.Second})
	bad := [][]byte{
		refCommand(0, 1, keyCacheMin, true),
		append(putCommand(0, 1, 0), appendMessage(nil, [][]byte{make([]byte, 5<<20)})...),
	}
	for i, b := range bad {
		c := rawDealer(t, port, "ps9", "", true, false)
		msg := appendHeader(nil, flagMore, 1)
		msg = append(append(msg, 'm'), b...)
		c.Write(msg)
		// The ROUTER sends its READY, its offer, then closes.
		rest := make([]byte, 1<<10)
		for {
			if _, err := c.Read(rest); err != nil {
				break
			}
		}
		c2 := rawPeer(t, port, "ps"+strconv.Itoa(20+i))
		c2.Write(appendMessage(nil, [][]byte{[]byte("after " + strconv.Itoa(i))}))
		if _, frames := recv(t, rx); string(frames[0]) != "after "+strconv.Itoa(i) {
			t.Fatalf("got %q: a frame of the bad connection arrived", frames[0])
		}
	}
}

// TestKeyCacheQueuedCommandsAreUndone queues messages whose keys went as
// a put and as references, then has the connection end before they are
// written: what is then written on the next connection is the messages
// whole, with no key cache command.
func TestKeyCacheQueuedCommandsAreUndone(t *testing.T) {
	tx := newTransport(t, Options{KeyCacheBytes: 8 << 20})
	p := newPeer(tx, 1, "tcp", "127.0.0.1:1", "ps9")
	if err := p.kc.offer(commandBody(t, offerCommand(8<<20, keyCacheSlots)), 8<<20); err != nil {
		t.Fatal(err)
	}
	keys := keyList(2<<20, 3, 1)
	var sent [][][]byte
	for i := 0; i < 5; i++ {
		frames := [][]byte{[]byte(strconv.Itoa(i)), keys}
		if i%2 == 0 {
			frames = append(frames, pattern(keyCacheMin, byte(i)))
		}
		sent = append(sent, frames)
		p.qMu.Lock()
		p.queueLargeLocked(frames, i%2 == 0)
		p.qMu.Unlock()
	}
	if puts, refs := tx.KeyCacheStats(); puts != 1 || refs != 3 {
		t.Fatalf("%d puts, %d references queued; want 1 and 3", puts, refs)
	}
	wire := forgetQueued(p)
	if p.kc.limit != 0 {
		t.Fatal("the cache is still on without an offer")
	}
	wholeOnWire(t, wire, sent, false)
}

// wholeOnWire checks that wire holds the messages sent, whole, with no
// command between or inside them, read by a receiver that decodes coded
// key lists when code is true.
func wholeOnWire(t *testing.T, wire []byte, sent [][][]byte, code bool) {
	t.Helper()
	fr := reader(wire, 8, 1<<30)
	fr.code = code
	for i, want := range sent {
		frames, cmd, err := fr.readMessage()
		if err != nil || cmd != nil {
			t.Fatalf("message %d: command %q, error %v", i, cmd, err)
		}
		sameFrames(t, i, frames, want)
		if len(fr.inside) != 0 {
			t.Fatalf("message %d carries commands", i)
		}
	}
}
