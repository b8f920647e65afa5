package zmtptransport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unsafe"
)

// Key coding between Go nodes on this transport: a sorted key list (the
// first data frame of a KV message, little-endian uint64 keys in ascending
// order, as ps-lite requires of every request) is sent as the differences
// between neighbouring keys, packed in as few bits as a block of them
// needs. Keys are two thirds of a push's bytes; a list whose gaps are
// regular (dense keys, a dense model's rows, keys spread evenly over the
// key space) shrinks to almost nothing, while one whose gaps vary (hashed
// features, keys picked from a table) costs more to pack and unpack than
// to send (codePackedShare), and the sender finds that out within its
// first blocks and sends it as it is.
//
// Coded form of a list of n keys (n >= 2):
//
//	the first key, 8 bytes little-endian;
//	then, for each block of up to codeBlock following keys:
//	  the smallest gap in the block (uvarint),
//	  a width w (one byte, 0..codeMaxWidth),
//	  each gap minus the smallest, w bits, least significant first,
//	  packed into ceil(len*w/8) bytes.
//
// The decoded size (8n) travels in the X-KCODE command before the coded
// frame (keycodec use in peer.go and wire.go).
const (
	// codeBlock is how many gaps share one width.
	codeBlock = 128
	// codeMaxWidth is the widest gap a block may code (wider ones are not
	// worth coding); it keeps a value and the bits before it within one
	// 64-bit word.
	codeMaxWidth = 56
	// codeProbe is how many keys the encoder codes before it checks that
	// the list shrinks enough; codeWorth is the largest coded size, as a
	// fraction (codeWorth/16) of the plain size, worth sending: coding and
	// decoding cost about as much CPU as the kernel spends to move the
	// bytes they save, so a list that does not halve is sent plain.
	codeProbe = 16 * codeBlock
	codeWorth = 8
	// codePackedShare and codePackedSlack bound the blocks of gaps that
	// differ (packed in w bits each) a coded list may have: one in
	// codePackedShare of the blocks so far, and codePackedSlack more. A
	// block of equal gaps codes and decodes at the speed of memory, a
	// packed one at a sixth to a tenth of it: coding a list of 20-bit gaps and
	// decoding it took longer than the kernel takes to move it plain over
	// loopback (a push of 1e7 such keys 1.6-1.9x as long, of 1e6 2.2x), so
	// only lists of mostly equal gaps (dense keys, evenly spread ones, a
	// few holes) are coded.
	codePackedShare = 8
	codePackedSlack = 2
	// keyCodeMin is the smallest key frame coded: below it the saving is
	// a few microseconds of a message that takes more. It is packMax, so
	// a message with such a frame is always one the writer sends from its
	// frames (smaller messages are copied whole into a pack).
	keyCodeMin = packMax

	keyCodeProperty = "X-Pslite-Keycode"
	cmdCodeOK       = "X-KCODEOK"
	cmdCode         = "X-KCODE"
)

// codeBound is the most bytes encodeKeys writes for a plain list of size
// bytes.
func codeBound(size int) int { return size * codeWorth / 16 }

// keyView returns the key frame b as the keys it holds, without a copy,
// when this machine is little-endian (the frame's byte order) and b is
// aligned for them; ok is false otherwise.
func keyView(b []byte) (keys []uint64, ok bool) {
	if !littleEndian || len(b)%8 != 0 || len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 != 0 {
		return nil, false
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8), true
}

// littleEndian is whether this machine stores a uint64 as a key frame does.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// encodeKeys codes a sorted key list into dst and returns the coded bytes,
// or false when keys are not sorted, are fewer than two, or would not
// shrink to codeBound(8*len(keys)) bytes or fit in dst, or when more than
// one block in share (and codePackedSlack) has gaps that differ (share 0:
// any may; the transport codes with codePackedShare).
func encodeKeys(dst []byte, keys []uint64, share int) (int, bool) {
	limit := min(len(dst), codeBound(8*len(keys)))
	if len(keys) < 2 || limit < 8 {
		return 0, false
	}
	binary.LittleEndian.PutUint64(dst, keys[0])
	n, ok := encodeBlocks(dst[8:limit], keys[0], keys[1:], true, share)
	if !ok {
		return 0, false
	}
	return 8 + n, true
}

// encodeBlocks codes keys, the keys after prev in a sorted list, as blocks
// of gaps into dst, and returns the coded bytes, or false when they are
// not sorted or do not fit in dst. With probe, it also gives up once the
// first codeProbe keys of a list (the first one and these) code to more
// than codeBound of their size. Blocks coded from a block boundary on are
// the bytes the whole list's coding has there, so a list may be coded in
// parts (encodeSplit). share bounds the blocks of gaps that differ, as
// for encodeKeys.
func encodeBlocks(dst []byte, prev uint64, keys []uint64, probe bool, share int) (int, bool) {
	limit := len(dst)
	out := 0
	var gaps [codeBlock]uint64
	// The header of the last block of equal gaps: its gap, where it was
	// written and its length (0: none to copy).
	var lastLo uint64
	last, hdr := 0, 0
	packed := 0 // blocks of gaps that differ
	for i := 0; i < len(keys); i += codeBlock {
		blk := keys[i:min(i+codeBlock, len(keys))]
		m := len(blk)
		if out+binary.MaxVarintLen64+1 > limit || blk[0] < prev {
			return 0, false
		}
		// A block of equal gaps (dense keys, keys spread evenly) first:
		// checked in one pass, coded in its header.
		lo := blk[0] - prev
		if equalGaps(prev, blk, lo) {
			prev = blk[m-1]
			if lo != lastLo || hdr == 0 {
				// A header as the last block's (one gap all along) is
				// copied rather than coded again.
				hdr = binary.PutUvarint(dst[out:], lo) + 1
				dst[out+hdr-1] = 0
				lastLo, last = lo, out
			} else {
				copy(dst[out:out+hdr], dst[last:last+hdr])
			}
			out += hdr
			continue
		}
		hdr = 0
		// A block of gaps that differ: packed, at several times the
		// cost of a block of equal gaps. Past a share of the blocks,
		// the list goes plain.
		packed++
		if share > 0 && packed > (i/codeBlock+1)/share+codePackedSlack {
			return 0, false
		}
		g := gaps[:m]
		hi := uint64(0)
		sorted := true
		for j, k := range blk {
			d := k - prev
			sorted = sorted && k >= prev
			prev = k
			g[j] = d
			lo = min(lo, d)
			hi = max(hi, d)
		}
		w := bits.Len64(hi - lo)
		if !sorted || w > codeMaxWidth || out+binary.MaxVarintLen64+1+(m*w+7)/8 > limit {
			return 0, false
		}
		out += binary.PutUvarint(dst[out:], lo)
		dst[out] = byte(w)
		out++
		{
			var acc uint64
			nb := 0
			for _, d := range g {
				acc |= (d - lo) << nb
				nb += w
				for nb >= 8 {
					dst[out] = byte(acc)
					out++
					acc >>= 8
					nb -= 8
				}
			}
			if nb > 0 {
				dst[out] = byte(acc)
				out++
			}
		}
		if probe && i+m == codeProbe && 8+out > codeBound(8*(1+i+m)) {
			return 0, false
		}
	}
	return out, true
}

// equalGaps reports whether every key of blk is lo more than the one
// before it (prev before the first). A list of evenly spread or dense keys
// is coded by this check alone, so it runs at the speed of memory: eight
// gaps per branch, each worked out from the keys on its own, none waiting
// for the one before (1e7 keys on a push's path in 5 ms, where a loop that
// carried each key to the next gap took 7.5-10).
func equalGaps(prev uint64, blk []uint64, lo uint64) bool {
	diff := (blk[0] - prev) ^ lo
	i := 1
	for ; i+8 <= len(blk); i += 8 {
		k := blk[i-1 : i+8 : i+8]
		// (^ and | bind alike in Go, left to right: each term in brackets.)
		diff |= ((k[1] - k[0]) ^ lo) | ((k[2] - k[1]) ^ lo) | ((k[3] - k[2]) ^ lo) | ((k[4] - k[3]) ^ lo) |
			((k[5] - k[4]) ^ lo) | ((k[6] - k[5]) ^ lo) | ((k[7] - k[6]) ^ lo) | ((k[8] - k[7]) ^ lo)
		if diff != 0 {
			return false
		}
	}
	for ; i < len(blk); i++ {
		diff |= (blk[i] - blk[i-1]) ^ lo
	}
	return diff == 0
}

// codeSplitMin is the smallest list (in keys) coded in two parts at once,
// on the sending goroutine and one more: a push's coding is on its path,
// while the node that receives it waits. With two cores for the node
// (GOMAXPROCS), 1e7 keys spread evenly code in 2.5-2.9 ms instead of
// 3.8-5.3 (go test -bench KeyCode);
// with one, as scripts/local.sh gives each node of a 1x1 job on two
// cores, the parts are coded one after the other, at no cost.
const codeSplitMin = 1 << 19

// encodeSplit codes keys (as encodeKeys does) in two parts, one of them on
// a goroutine of its own: the first key and the first blocks into a, the
// other blocks into b. The coded list is a[:na] followed by b[:nb]; ok is
// false when encodeKeys would refuse it or a part does not fit.
func encodeSplit(a, b []byte, keys []uint64, share int) (na, nb int, ok bool) {
	if len(keys) < 2 {
		return 0, 0, false
	}
	// The second part starts at a block boundary, half way.
	split := 1 + (len(keys)-1)/2/codeBlock*codeBlock
	var okB bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		nb, okB = encodeBlocks(b[:min(len(b), codeBound(8*(len(keys)-split)))], keys[split-1], keys[split:], false, share)
	}()
	na, ok = encodeKeys(a, keys[:split], share)
	<-done
	return na, nb, ok && okB
}

// encode codes keys, a frame's key list, into pool buffers: in two parts
// at once when the list is long (encodeSplit), else in one; size is what
// codeEstimate foretold. It returns the coded list, in two pieces to be
// written one after the other (the second may be empty), and the buffers
// to give back to the pool once they are written; ok is false when the
// list goes plain.
func (t *Transport) encode(keys []uint64, size int) (coded [2][]byte, bufs [][]byte, ok bool) {
	bound := codeBound(8 * len(keys))
	if len(keys) >= codeSplitMin {
		a, b := t.pool.get(size/2+64<<10), t.pool.get(size/2+64<<10)
		if na, nb, ok := encodeSplit(a, b, keys, codePackedShare); ok {
			return [2][]byte{a[:na], b[:nb]}, [][]byte{a, b}, true
		}
		// A part's gaps wider than the start foretold, or unsorted.
		t.pool.put(a, false)
		t.pool.put(b, false)
		size = bound
	}
	buf := t.pool.get(size)
	n, ok := encodeKeys(buf, keys, codePackedShare)
	if !ok && size < bound {
		// Gaps wider further on than at the start: the room a list that
		// halves needs at most.
		t.pool.put(buf, false)
		buf = t.pool.get(bound)
		n, ok = encodeKeys(buf, keys, codePackedShare)
	}
	if !ok {
		t.pool.put(buf, false)
		return coded, nil, false
	}
	return [2][]byte{buf[:n], nil}, [][]byte{buf}, true
}

// errBadCode is a coded key list that does not decode to the size its
// command announced.
var errBadCode = errors.New("zmtp: malformed coded key list")

// decodeKeys decodes the coded key list src into keys, whose length the
// sender announced.
func decodeKeys(keys []uint64, src []byte) error {
	if len(keys) < 2 || len(src) < 8 {
		return fmt.Errorf("%w: %d bytes coded into %d keys", errBadCode, len(src), len(keys))
	}
	prev := binary.LittleEndian.Uint64(src)
	keys[0] = prev
	in := 8
	for i := 1; i < len(keys); i += codeBlock {
		out := keys[i:min(i+codeBlock, len(keys))]
		m := len(out)
		lo, k := binary.Uvarint(src[in:])
		if k <= 0 || in+k >= len(src) {
			return fmt.Errorf("%w: block %d", errBadCode, (i-1)/codeBlock)
		}
		in += k
		w := int(src[in])
		in++
		size := (m*w + 7) / 8
		if w > codeMaxWidth || in+size > len(src) {
			return fmt.Errorf("%w: block %d", errBadCode, (i-1)/codeBlock)
		}
		if w == 0 {
			prev = fillGaps(out, prev, lo)
			continue
		}
		packed := src[in : in+size]
		in += size
		mask := uint64(1)<<w - 1
		// Whole 64-bit loads while 8 bytes remain from a value's first
		// byte, byte by byte for the last few.
		fast := 0
		if size >= 8 {
			fast = min(m, ((size-8)*8)/w+1)
		}
		for j := range out[:fast] {
			p := j * w
			prev += lo + binary.LittleEndian.Uint64(packed[p>>3:])>>(p&7)&mask
			out[j] = prev
		}
		for j := fast; j < m; j++ {
			p := j * w
			var word uint64
			for b := 0; b < 8 && p>>3+b < size; b++ {
				word |= uint64(packed[p>>3+b]) << (8 * b)
			}
			prev += lo + (word>>(p&7))&mask
			out[j] = prev
		}
	}
	if in != len(src) {
		return fmt.Errorf("%w: %d bytes left over", errBadCode, len(src)-in)
	}
	return nil
}

// fillGaps writes the keys of a block of equal gaps lo after prev into
// out and returns the last: eight keys per step, each its own sum, rather
// than each key the one before plus lo.
func fillGaps(out []uint64, prev, lo uint64) uint64 {
	for len(out) >= 8 {
		o := out[:8:8]
		o[0], o[1], o[2], o[3] = prev+lo, prev+2*lo, prev+3*lo, prev+4*lo
		o[4], o[5], o[6], o[7] = prev+5*lo, prev+6*lo, prev+7*lo, prev+8*lo
		prev += 8 * lo
		out = out[8:]
	}
	for j := range out {
		prev += lo
		out[j] = prev
	}
	return prev
}

// codeEstimate codes the start of keys (codeProbe keys) into a scratch
// buffer and returns, when it shrinks enough, how large a buffer the whole
// list likely needs (what the start needed, in proportion, and some room);
// ok is false otherwise. A list of hashed keys is turned down for the price
// of its first blocks, before a buffer for the whole list is taken.
func codeEstimate(keys []uint64) (size int, ok bool) {
	var scratch [8 * (codeProbe + 1) * codeWorth / 16]byte
	probe := keys[:min(len(keys), codeProbe+1)]
	n, ok := encodeKeys(scratch[:], probe, codePackedShare)
	if !ok {
		return 0, false
	}
	return min(codeBound(8*len(keys)), n*len(keys)/len(probe)*5/4+64<<10), true
}

// codeCommand encodes the X-KCODE command that comes before a coded key
// list: its plain size (8 bytes, big-endian). The coded frame follows, with
// the flags the plain one would have had.
func codeCommand(size int) []byte {
	return command(cmdCode, binary.BigEndian.AppendUint64(nil, uint64(size)))
}

// parseCode returns the plain size an X-KCODE command's body announces: a
// key list of at least two keys, at most max bytes.
func parseCode(body []byte, max int64) (int, error) {
	if len(body) != 8 {
		return 0, fmt.Errorf("%w: %s of %d bytes", errProtocol, cmdCode, len(body))
	}
	size := binary.BigEndian.Uint64(body)
	if size < 16 || size%8 != 0 || size > uint64(max) {
		return 0, fmt.Errorf("%w: %s announces %d bytes", errProtocol, cmdCode, size)
	}
	return int(size), nil
}
