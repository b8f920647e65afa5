// Command test_kv_lens pushes byte values of per-key lengths (lens), as
// MXNet's kvstore_dist does, to servers that store them, pulls them back
// and push-pulls, and checks every byte. Its workers and servers mix with
// those of tests/cpp/kv_lens.cc, which does the same with C++ ps-lite.
//
// Each worker uses keys of its own (the rank is in the key), and a value's
// bytes are a function of (key, byte index, worker rank, round), so a byte
// of another worker, another key, another offset or an earlier round is
// caught. A server stores each key's bytes on a push (replacing what was
// there, whatever its length) and answers a pull with the stored bytes and
// their lengths. With -lend it borrows large requests' receive buffers
// (KVServer.LendRequests; with PS_POISON_LENT=1 a view kept too long reads
// garbage) and copies what it keeps.
//
// Rounds: one key of 8 bytes; 100 small keys; 1000 keys of 1-4 bytes; 100
// keys with a large value every tenth key; 4 keys of about 2 MiB; one key of
// 3 MiB; the 100 keys again with other lengths. Frames are below and above
// 512 KiB. Each round is pushed, pulled, push-pulled and pulled again, one
// request at a time; then all rounds are pushed at once, pulled at once and
// push-pulled at once.
// Every push and push-pull sends bytes of its own: the round in the bytes
// (and in messages) counts them, 0 to 25.
//
// A worker prints "kv_lens: checked N bytes exactly (worker R)" on success;
// on a mismatch it prints the first mismatches (key, offset, got, want) and
// exits 1.
package main

import (
	"flag"
	"fmt"
	"os"
	"sync"

	"github.com/gopslite/pslite/internal/prog"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/ps"
)

func main() {
	lend := flag.Bool("lend", false, "servers borrow large requests' receive buffers (KVServer.LendRequests)")
	flag.Parse()
	prog.Check(ps.Start(0), "start")
	if ps.IsServer() {
		s, err := ps.NewKVServer[byte](0)
		prog.Check(err, "server")
		s.LendRequests(*lend)
		st := &store{m: make(map[uint64][]byte)}
		prog.Check(s.SetRequestHandle(st.handle), "handle")
		ps.RegisterExitCallback(s.Close)
	}
	if ps.IsWorker() {
		runWorker()
	}
	prog.Check(ps.Finalize(0, true), "finalize")
}

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// pattern gives the bytes of key's value from worker rank in round;
// tests/cpp/kv_lens.cc computes the same.
type pattern uint64

func newPattern(key uint64, rank, round int) pattern {
	return pattern(mix(key ^ mix(uint64(rank)+1) ^ mix((uint64(round)+1)<<32)))
}

func (p pattern) at(i int) byte { return byte(mix(uint64(p)+uint64(i/8)) >> (8 * (i % 8))) }

// round is a set of keys with their lengths: key i of n is spread over the
// key space (so that the servers share them), then offset by the set and
// the rank.
type round struct {
	set  int
	lens []int32
}

func rounds() []round {
	rs := []round{{0, []int32{8}}}
	small := round{set: 1}
	for i := range 100 {
		small.lens = append(small.lens, int32(1+(i*37)%200))
	}
	tiny := round{set: 2}
	for i := range 1000 {
		tiny.lens = append(tiny.lens, int32(1+i%4))
	}
	mixed := round{set: 3}
	for i := range 100 {
		l := 3 + i%13
		if i%10 == 0 {
			l = 256<<10 + 3*i + 1
		}
		mixed.lens = append(mixed.lens, int32(l))
	}
	again := round{set: 3} // set 3's keys, other lengths (a store replaces them)
	for i := range 100 {
		l := 1 + i%7
		if i%10 == 5 {
			l = 600<<10 + i
		}
		again.lens = append(again.lens, int32(l))
	}
	return append(rs, small, tiny, mixed,
		round{4, []int32{2<<20 + 1, 2<<20 - 7, 2<<20 + 4095, 2 << 20}},
		round{5, []int32{3<<20 + 5}},
		again)
}

// request is one round's keys, lens and pushed bytes, and where pulls go.
type request struct {
	seed    int // the round of the bytes
	keys    []uint64
	lens    []int32
	vals    []byte
	out     []byte
	outLens []int32
}

func newRequest(r round, rank, seed int) *request {
	n := len(r.lens)
	q := &request{seed: seed, keys: make([]uint64, n), lens: r.lens}
	total := 0
	for i := range q.keys {
		q.keys[i] = message.MaxKey/uint64(n)*uint64(i) + uint64(64*r.set+rank)
		total += int(r.lens[i])
	}
	q.vals = make([]byte, 0, total)
	for i, k := range q.keys {
		p := newPattern(k, rank, seed)
		for j := range int(q.lens[i]) {
			q.vals = append(q.vals, p.at(j))
		}
	}
	return q
}

// ready sizes the destination of a pull as MXNet does: the values' buffer of
// their full size, lens of the keys' count (with the lens to send, for a
// push-pull).
func (q *request) ready(pushPull bool) {
	q.out = make([]byte, len(q.vals))
	for i := range q.out {
		q.out[i] = 0x5A
	}
	q.outLens = make([]int32, len(q.keys))
	if pushPull {
		copy(q.outLens, q.lens)
	} else {
		for i := range q.outLens {
			q.outLens[i] = -1
		}
	}
}

type checker struct {
	rank    int
	checked int
	bad     int // mismatching bytes or lengths
	shown   int // of them, printed
}

func (c *checker) fail(what string, seed int, format string, args ...any) {
	c.bad++
	if c.shown++; c.shown <= 10 {
		fmt.Fprintf(os.Stderr, "kv_lens: worker %d: MISMATCH in %s of round %d: %s\n", c.rank, what, seed, fmt.Sprintf(format, args...))
	}
}

// check compares what q's pull brought with its bytes.
func (c *checker) check(what string, q *request) {
	if len(q.outLens) != len(q.keys) {
		c.fail(what, q.seed, "got %d lens for %d keys", len(q.outLens), len(q.keys))
		return
	}
	for i, k := range q.keys {
		if q.outLens[i] != q.lens[i] {
			c.fail(what, q.seed, "key %d: length %d, want %d", k, q.outLens[i], q.lens[i])
			return
		}
	}
	if len(q.out) != len(q.vals) {
		c.fail(what, q.seed, "got %d bytes, want %d", len(q.out), len(q.vals))
		return
	}
	off := 0
	for i, k := range q.keys {
		p := newPattern(k, c.rank, q.seed)
		keyBad := 0 // at most 3 of a key's mismatches are printed
		for j := range int(q.lens[i]) {
			if got, want := q.out[off], p.at(j); got != want && keyBad >= 3 {
				c.bad++
			} else if got != want {
				keyBad++
				c.fail(what, q.seed, "key %d (index %d) offset %d: got 0x%02x, want 0x%02x", k, i, j, got, want)
			}
			off++
		}
		c.checked += int(q.lens[i])
	}
}

func runWorker() {
	rank := ps.MyRank()
	if rank >= 64 {
		prog.Failf("kv_lens: at most 64 workers")
	}
	w, err := ps.NewKVWorker[byte](0, 0)
	prog.Check(err, "worker")
	c := &checker{rank: rank}
	rs := rounds()
	seed := 0
	wait := func(ts int, err error) {
		prog.Check(err, "request")
		prog.Check(w.Wait(ts), "wait")
	}

	// One request at a time: push, pull, push-pull (of other bytes), pull.
	for _, r := range rs {
		q := newRequest(r, rank, seed)
		seed++
		wait(w.ZPush(q.keys, q.vals, q.lens))
		q.ready(false)
		wait(w.ZPull(q.keys, &q.out, &q.outLens))
		c.check("pull", q)

		pp := newRequest(r, rank, seed)
		seed++
		pp.ready(true)
		wait(w.ZPushPull(pp.keys, pp.vals, &pp.out, &pp.outLens))
		c.check("push-pull", pp)
		pp.ready(false)
		wait(w.ZPull(pp.keys, &pp.out, &pp.outLens))
		c.check("pull after push-pull", pp)
	}

	// All at once: every round but the last (whose keys are an earlier
	// round's) in flight together: pushes, then pulls, then push-pulls.
	all := func(pushPull bool) []*request {
		var qs []*request
		for _, r := range rs[:len(rs)-1] {
			qs = append(qs, newRequest(r, rank, seed))
			seed++
		}
		var ts []int
		for _, q := range qs {
			var t int
			var err error
			if pushPull {
				q.ready(true)
				t, err = w.ZPushPull(q.keys, q.vals, &q.out, &q.outLens)
			} else {
				t, err = w.ZPush(q.keys, q.vals, q.lens)
			}
			prog.Check(err, "request")
			ts = append(ts, t)
		}
		for _, t := range ts {
			prog.Check(w.Wait(t), "wait")
		}
		return qs
	}
	qs := all(false)
	var ts []int
	for _, q := range qs {
		q.ready(false)
		t, err := w.ZPull(q.keys, &q.out, &q.outLens)
		prog.Check(err, "pull")
		ts = append(ts, t)
	}
	for _, t := range ts {
		prog.Check(w.Wait(t), "wait")
	}
	for _, q := range qs {
		c.check("concurrent pull", q)
	}
	for _, q := range all(true) {
		c.check("concurrent push-pull", q)
	}

	if c.bad > 0 {
		prog.Failf("kv_lens: worker %d: %d mismatching bytes or lengths", rank, c.bad)
	}
	fmt.Printf("kv_lens: checked %d bytes exactly (worker %d)\n", c.checked, rank)
}

// store keeps each key's bytes, replaced on a push.
type store struct {
	mu sync.Mutex
	m  map[uint64][]byte
}

func (s *store) handle(meta kv.KVMeta, data kv.KVPairs[byte], srv *kv.KVServer[byte]) {
	s.mu.Lock()
	if meta.Push {
		for k, v := range data.All() {
			// A copy: the request's memory may be lent only while the
			// handle runs.
			s.m[k] = append([]byte(nil), v...)
		}
	}
	var res kv.KVPairs[byte]
	if meta.Pull {
		res.Keys = data.Keys
		res.Lens = make([]int32, len(data.Keys))
		total := 0
		for _, k := range data.Keys {
			total += len(s.m[k])
		}
		res.Vals = make([]byte, 0, total)
		for i, k := range data.Keys {
			res.Vals = append(res.Vals, s.m[k]...)
			res.Lens[i] = int32(len(s.m[k]))
		}
	}
	s.mu.Unlock()
	// Response copies res (its keys are the request's).
	if err := srv.Response(meta, res); err != nil {
		prog.Failf("response: %v", err)
	}
}
