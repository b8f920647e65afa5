package zmtptransport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"

	"github.com/gopslite/pslite/internal/hugemem"
)

// Key caching, as the Parameter Server paper (Li et al., OSDI 2014, 5.2)
// proposes it, between two nodes on this transport: a worker that pushes or
// pulls the same key list again, and a server that answers a pull with the
// keys it was asked for, send the list once and a reference to it after.
// Keys are most of a push's bytes (8 bytes a key, 4 a float value).
//
// It lives in the transport, per connection, and is invisible above it: a
// received message carries its frames as they were sent, in a buffer of
// its own, whatever crossed the wire. The sender (a peer, a DEALER) decides
// everything and knows exactly what the receiver (its ROUTER) keeps:
//
//   - A DEALER that can cache presents the X-Pslite-Keycache property in
//     its READY (libzmq ignores it). A ROUTER that can, seeing it on a
//     member's connection, reserves memory from its budget
//     (Options.KeyCacheTotal) and sends an X-KCOFFER command on the
//     connection: the bytes and the number of frames it keeps for it.
//     Nothing else ever sends or receives these commands: C++ ps-lite and
//     libzmq nodes neither present the property nor get an offer.
//   - Only the first data frame (a KV message's keys) of at least
//     keyCacheMin bytes is considered. The second time a sender sees the
//     same frame (a sampled fingerprint), it sends an X-KCPUT command (a
//     slot, a generation, slots to drop first) before the frame, and keeps
//     a copy; the receiver keeps a copy too. Later, a frame equal to a
//     kept copy (compared byte for byte, never by hash alone) is sent as an
//     X-KCREF command (slot, generation, size, whether it ends the
//     message) in the frame's place.
//   - The receiver gives each message a copy of the kept frame (a pool
//     buffer, lent like a received one), so that nothing a handler does to
//     its request can change what is kept.
//   - A TCP connection delivers in order, so both sides' views follow the
//     same sequence of commands. Both forget everything when the
//     connection ends: the sender turns the references still queued back
//     into whole frames and drops its queued puts before anything is
//     written on the next connection, and waits for that connection's
//     offer. A reference the receiver cannot resolve (a put it skipped as
//     oversized, a broken sender) is a protocol error: the connection is
//     dropped, never a frame made up.
const (
	// keyCacheMin is the smallest frame the key cache considers: below it
	// the comparison and the bookkeeping cost more than the bytes.
	keyCacheMin = 1 << 20
	// keyCacheSlots is how many frames one connection's cache keeps at
	// most (X-KCPUT's drop mask has a bit for each).
	keyCacheSlots = 8
	// seenLen is how many fingerprints of frames sent once (not kept yet)
	// a peer remembers.
	seenLen = 32
	// coolOff is how many frames a sender whose last keyCacheSlots kept
	// frames were all dropped unused sends without keeping any: a cycle of
	// more key lists than fit would otherwise copy each into the cache to
	// no end.
	coolOff = 64

	keyCacheProperty = "X-Pslite-Keycache"
	cmdOffer         = "X-KCOFFER"
	cmdPut           = "X-KCPUT"
	cmdRef           = "X-KCREF"
)

// kcOp is what the sender does with a frame.
type kcOp int

const (
	kcNone kcOp = iota // send it as it is
	kcPut              // send it with X-KCPUT: both sides keep it
	kcRef              // send X-KCREF in its place
)

// kcPlan is the sender's decision for one frame.
type kcPlan struct {
	op   kcOp
	slot int
	gen  uint64
	drop uint8  // kcPut: slots to drop first (bit i: slot i)
	data []byte // the kept copy (kcPut, kcRef)
}

// sendSlot is a frame the receiver keeps, as the sender knows it.
type sendSlot struct {
	gen  uint64 // 0: empty
	fp   uint64
	data []byte
	used uint64 // the clock when last sent or kept, for eviction
	refs int    // references sent to it
}

// sendCache is a peer's view of what the ROUTER at the other end of its
// current connection keeps. It is guarded by the peer's qMu: decisions are
// made in the order messages are queued, which is the order they are
// written.
type sendCache struct {
	limit int64 // bytes offered on this connection; 0: no offer (yet)
	slots []sendSlot
	used  int64
	gen   uint64 // the last generation handed out; never reset
	clock uint64
	seen  [seenLen]seenFrame
	next  int
	seed  maphash.Seed
	// wasted counts the kept frames dropped since the last reference
	// without one sent to them; cool, the frames left to send without
	// keeping any (coolOff).
	wasted, cool int
}

// seenFrame is the fingerprint of a frame sent once.
type seenFrame struct {
	fp uint64
	n  int
}

// offer takes a ROUTER's X-KCOFFER body: at most limit bytes of its own.
func (c *sendCache) offer(body []byte, limit int64) error {
	if len(body) != 9 {
		return fmt.Errorf("%w: malformed %s", errProtocol, cmdOffer)
	}
	c.reset()
	c.limit = min(int64(binary.BigEndian.Uint64(body)), limit)
	c.slots = make([]sendSlot, min(int(body[8]), keyCacheSlots))
	if len(c.slots) == 0 || c.limit < keyCacheMin {
		c.limit, c.slots = 0, nil
	}
	return nil
}

// reset forgets the receiver's cache: its connection is gone.
func (c *sendCache) reset() {
	c.limit, c.slots, c.used = 0, nil, 0
}

// plan decides how frame f is sent. A frame to keep is copied: the
// caller may change f once its send is over.
func (c *sendCache) plan(f []byte) kcPlan {
	if c.limit == 0 || len(f) < keyCacheMin || int64(len(f)) > c.limit {
		return kcPlan{}
	}
	if c.seed == (maphash.Seed{}) {
		c.seed = maphash.MakeSeed()
	}
	fp := fingerprint(c.seed, f)
	c.clock++
	for i := range c.slots {
		s := &c.slots[i]
		if s.gen != 0 && s.fp == fp && len(s.data) == len(f) && bytes.Equal(s.data, f) {
			s.used = c.clock
			s.refs++
			c.wasted = 0
			return kcPlan{op: kcRef, slot: i, gen: s.gen, data: s.data}
		}
	}
	if c.cool > 0 {
		c.cool--
		return kcPlan{}
	}
	if !c.sawAgain(fp, len(f)) {
		return kcPlan{}
	}
	// Keep it: drop the least recently used frames until it fits and a
	// slot is free.
	var drop uint8
	for {
		free, lru := -1, -1
		for i := range c.slots {
			s := &c.slots[i]
			if s.gen == 0 {
				if free < 0 {
					free = i
				}
			} else if lru < 0 || s.used < c.slots[lru].used {
				lru = i
			}
		}
		if free >= 0 && c.used+int64(len(f)) <= c.limit {
			data := hugemem.Make[byte](len(f)) // few page faults, few TLB misses when compared
			copy(data, f)
			c.gen++
			c.used += int64(len(f))
			c.slots[free] = sendSlot{gen: c.gen, fp: fp, data: data, used: c.clock}
			return kcPlan{op: kcPut, slot: free, gen: c.gen, drop: drop, data: data}
		}
		if c.slots[lru].refs == 0 {
			if c.wasted++; c.wasted >= len(c.slots) {
				c.wasted, c.cool = 0, coolOff
			}
		}
		c.used -= int64(len(c.slots[lru].data))
		c.slots[lru] = sendSlot{}
		drop |= 1 << lru
	}
}

// sawAgain reports whether a frame of fingerprint fp and n bytes was sent
// before (and forgets it then), and otherwise remembers it.
func (c *sendCache) sawAgain(fp uint64, n int) bool {
	for i := range c.seen {
		if c.seen[i] == (seenFrame{fp: fp, n: n}) {
			c.seen[i] = seenFrame{}
			return true
		}
	}
	c.seen[c.next] = seenFrame{fp: fp, n: n}
	c.next = (c.next + 1) % seenLen
	return false
}

// fingerprint hashes a sample of f (its size, both ends and 64 words
// spread over it): cheap, and only ever a hint; what is sent as a
// reference is compared whole.
func fingerprint(seed maphash.Seed, f []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(len(f)))
	h.Write(b[:])
	h.Write(f[:256])
	h.Write(f[len(f)-256:])
	step := (len(f) - 8) / 64
	for i := 0; i < 64; i++ {
		h.Write(f[i*step : i*step+8])
	}
	return h.Sum64()
}

// putCommand encodes X-KCPUT: the next frame goes into slot, as
// generation gen, after the slots in drop are emptied.
func putCommand(slot int, gen uint64, drop uint8) []byte {
	body := make([]byte, 0, 10)
	body = append(body, byte(slot))
	body = binary.BigEndian.AppendUint64(body, gen)
	return command(cmdPut, append(body, drop))
}

// refCommand encodes X-KCREF: in its place, the size bytes kept in slot
// as generation gen; last: the message ends with it.
func refCommand(slot int, gen uint64, size int, last bool) []byte {
	body := make([]byte, 0, 18)
	body = append(body, byte(slot))
	body = binary.BigEndian.AppendUint64(body, gen)
	body = binary.BigEndian.AppendUint64(body, uint64(size))
	end := byte(0)
	if last {
		end = 1
	}
	return command(cmdRef, append(body, end))
}

// offerCommand encodes X-KCOFFER: the receiver keeps up to limit bytes in
// up to slots frames for the connection.
func offerCommand(limit int64, slots int) []byte {
	body := binary.BigEndian.AppendUint64(nil, uint64(limit))
	return command(cmdOffer, append(body, byte(slots)))
}

// recvSlot is a frame a ROUTER keeps for a connection.
type recvSlot struct {
	gen  uint64 // 0: empty, or lost (a put whose frame was skipped)
	data []byte
}

// recvCache is what a ROUTER keeps for one connection; its reader's.
type recvCache struct {
	// pool, when set, gives the kept copies their buffers and takes them
	// back when they are dropped (a kept frame is only ever read by its
	// reader, which copies it out): a fresh buffer costs its page faults.
	pool   *bufPool
	limit  int64
	used   int64
	slots  [keyCacheSlots]recvSlot
	put    bool // an X-KCPUT waits for its frame
	putAt  int
	putGen uint64
}

// takePut reads an X-KCPUT body: the slots it drops are emptied, and the
// next frame is kept.
func (rc *recvCache) takePut(body []byte) error {
	if len(body) != 10 || int(body[0]) >= keyCacheSlots || rc.put {
		return fmt.Errorf("%w: malformed %s", errProtocol, cmdPut)
	}
	drop := body[9]
	for i := range rc.slots {
		if drop&(1<<i) != 0 || i == int(body[0]) {
			rc.drop(i)
		}
	}
	rc.put, rc.putAt, rc.putGen = true, int(body[0]), binary.BigEndian.Uint64(body[1:9])
	return nil
}

// keep keeps a copy of the frame an X-KCPUT announced (nil: the frame was
// skipped, so the slot is lost: a reference to it drops the connection).
func (rc *recvCache) keep(f []byte) error {
	rc.put = false
	if f == nil {
		return nil
	}
	if rc.used+int64(len(f)) > rc.limit {
		return fmt.Errorf("%w: %s beyond the %d bytes offered", errProtocol, cmdPut, rc.limit)
	}
	var data []byte
	if rc.pool != nil {
		data = rc.pool.get(len(f))
	} else {
		data = hugemem.Make[byte](len(f))
	}
	copy(data, f)
	rc.used += int64(len(f))
	rc.slots[rc.putAt] = recvSlot{gen: rc.putGen, data: data}
	return nil
}

// drop empties slot i.
func (rc *recvCache) drop(i int) {
	s := &rc.slots[i]
	rc.used -= int64(len(s.data))
	if rc.pool != nil && s.data != nil {
		rc.pool.put(s.data, false)
	}
	*s = recvSlot{}
}

// close empties every slot: the connection is gone.
func (rc *recvCache) close() {
	for i := range rc.slots {
		rc.drop(i)
	}
}

// resolve reads an X-KCREF body and returns the kept frame it names (the
// cache's own: the caller copies it) and whether it ends the message.
func (rc *recvCache) resolve(body []byte) (kept []byte, last bool, err error) {
	if len(body) != 18 || int(body[0]) >= keyCacheSlots || rc.put {
		return nil, false, fmt.Errorf("%w: malformed %s", errProtocol, cmdRef)
	}
	s := &rc.slots[body[0]]
	gen, size := binary.BigEndian.Uint64(body[1:9]), binary.BigEndian.Uint64(body[9:17])
	if s.gen == 0 || s.gen != gen || uint64(len(s.data)) != size {
		return nil, false, fmt.Errorf("%w: %s names slot %d generation %d of %d bytes, which this side does not keep", errProtocol, cmdRef, body[0], gen, size)
	}
	return s.data, body[17] == 1, nil
}
