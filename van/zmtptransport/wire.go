package zmtptransport

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/gopslite/pslite/internal/hugemem"
)

// ZMTP 3.1 (https://rfc.zeromq.org/spec/37/) with the NULL mechanism, as
// libzmq speaks it: a 64-byte greeting each way, a READY command each way
// carrying the socket type and the sender's identity, then frames.

const (
	greetingLen = 64

	flagMore    = 0x01 // another frame of the message follows
	flagLong    = 0x02 // the size takes 8 bytes, not 1
	flagCommand = 0x04 // a command frame, not a message frame
	flagsKnown  = flagMore | flagLong | flagCommand

	// maxShortFrame is the largest frame a 1-byte size describes.
	maxShortFrame = 255
)

// errProtocol wraps every violation of ZMTP by the peer; the connection is
// then dropped.
var errProtocol = errors.New("zmtp: protocol error")

// greeting returns this side's greeting: ZMTP 3.1, the NULL mechanism, not
// a server (NULL has no roles).
func greeting() []byte {
	g := make([]byte, greetingLen)
	g[0] = 0xFF
	g[8] = 1 // padding; libzmq puts its identity's length + 1 here, unread
	g[9] = 0x7F
	g[10], g[11] = 3, 1
	copy(g[12:32], "NULL")
	return g
}

// checkGreeting checks the peer's greeting: ZMTP 3.0 or later with the NULL
// mechanism. (A ZMTP 1.0 or 2.0 peer, libzmq before 4.0, is refused.)
func checkGreeting(g []byte) error {
	if len(g) != greetingLen || g[0] != 0xFF || g[9]&1 == 0 {
		return fmt.Errorf("%w: not a ZMTP greeting", errProtocol)
	}
	if g[10] < 3 {
		return fmt.Errorf("%w: peer speaks ZMTP %d.%d, 3.0 or later is needed", errProtocol, g[10], g[11])
	}
	mech := bytes.TrimRight(g[12:32], "\x00")
	if string(mech) != "NULL" {
		return fmt.Errorf("%w: peer uses the %q mechanism, only NULL is supported (no CURVE with DMLC_PS_VAN_TYPE=zmtp)", errProtocol, mech)
	}
	return nil
}

// appendHeader appends a frame header: flags and the size.
func appendHeader(b []byte, flags byte, size int) []byte {
	if size > maxShortFrame {
		b = append(b, flags|flagLong)
		return binary.BigEndian.AppendUint64(b, uint64(size))
	}
	return append(b, flags, byte(size))
}

// appendMessage appends the frames of a message, headers and bodies.
func appendMessage(b []byte, frames [][]byte) []byte {
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = flagMore
		}
		b = appendHeader(b, flags, len(f))
		b = append(b, f...)
	}
	return b
}

// encodedLen is the length of frames encoded by appendMessage.
func encodedLen(frames [][]byte) int {
	n := 0
	for _, f := range frames {
		n += headerLen(len(f)) + len(f)
	}
	return n
}

func headerLen(size int) int {
	if size > maxShortFrame {
		return 9
	}
	return 2
}

// command encodes a command frame: the name, then the body.
func command(name string, body []byte) []byte {
	size := 1 + len(name) + len(body)
	b := appendHeader(make([]byte, 0, 9+size), flagCommand, size)
	b = append(b, byte(len(name)))
	b = append(b, name...)
	return append(b, body...)
}

// ready encodes the READY command of a socket of type socketType with the
// given identity (libzmq sends the Identity property for DEALER and ROUTER
// sockets, empty when none is set), this process's incarnation when not
// empty, with keyCache, that it can use a key cache (keycache.go), and
// with keyCode, that it can send coded key lists (keycodec.go).
func ready(socketType, identity, process string, keyCache, keyCode bool) []byte {
	var body []byte
	body = appendProperty(body, "Socket-Type", socketType)
	body = appendProperty(body, "Identity", identity)
	if process != "" {
		body = appendProperty(body, processProperty, process)
	}
	if keyCache {
		body = appendProperty(body, keyCacheProperty, "1")
	}
	if keyCode {
		body = appendProperty(body, keyCodeProperty, "1")
	}
	return command("READY", body)
}

// errorCommand encodes an ERROR command with reason (at most 255 bytes).
func errorCommand(reason string) []byte {
	if len(reason) > 255 {
		reason = reason[:255]
	}
	return command("ERROR", append([]byte{byte(len(reason))}, reason...))
}

// parseError returns an ERROR command's reason.
func parseError(body []byte) string {
	if len(body) < 1 || int(body[0]) > len(body)-1 {
		return "(malformed ERROR)"
	}
	return string(body[1 : 1+int(body[0])])
}

func appendProperty(b []byte, name, value string) []byte {
	b = append(b, byte(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// parseCommand splits a command frame's body into its name and the rest.
func parseCommand(body []byte) (name string, rest []byte, err error) {
	if len(body) < 1 || int(body[0]) > len(body)-1 {
		return "", nil, fmt.Errorf("%w: malformed command", errProtocol)
	}
	n := int(body[0])
	return string(body[1 : 1+n]), body[1+n:], nil
}

// parseProperties parses a READY command's properties (names are matched
// without regard to case, as ZMTP says).
func parseProperties(b []byte) (map[string]string, error) {
	props := map[string]string{}
	for len(b) > 0 {
		n := int(b[0])
		if n == 0 || len(b) < 1+n+4 {
			return nil, fmt.Errorf("%w: malformed property", errProtocol)
		}
		name := string(bytes.ToLower(b[1 : 1+n]))
		b = b[1+n:]
		vl := binary.BigEndian.Uint32(b)
		b = b[4:]
		if uint64(vl) > uint64(len(b)) {
			return nil, fmt.Errorf("%w: malformed property %q", errProtocol, name)
		}
		props[name] = string(b[:vl])
		b = b[vl:]
	}
	return props, nil
}

// pong answers a PING command's body (a 2-byte TTL, then a context of up to
// 16 bytes that the PONG echoes).
func pong(pingBody []byte) []byte {
	var ctx []byte
	if len(pingBody) > 2 {
		ctx = pingBody[2:]
		if len(ctx) > 16 {
			ctx = ctx[:16]
		}
	}
	return command("PONG", ctx)
}

// compatible reports whether a socket of type ours may talk to one of type
// theirs (only what a ps-lite node meets: its ROUTER receives from DEALERs,
// its DEALERs send to ROUTERs).
func compatible(ours, theirs string) bool {
	switch ours {
	case "ROUTER":
		return theirs == "DEALER" || theirs == "REQ" || theirs == "ROUTER"
	case "DEALER":
		return theirs == "ROUTER" || theirs == "REP" || theirs == "DEALER"
	}
	return false
}

// frameReader reads frames from a connection, bounding what one message
// may hold.
type frameReader struct {
	r         *bufio.Reader
	maxFrames int
	maxBytes  int64
	pool      *bufPool // large frames are received into its buffers; may be nil
	// upfront, shared by a transport's connections, is how many bytes of
	// frames still arriving may be allocated before their bytes are there
	// (see readFrame); nil: none.
	upfront *atomic.Int64
	lent    uint64 // after readMessage: bit i set when frame i came from pool
	// kc, on a ROUTER's connection whose peer took its key cache offer,
	// is what it keeps (keycache.go); nil: X-KCPUT and X-KCREF are not
	// expected.
	kc *recvCache
	// code, on a ROUTER's connection that told its peer it decodes coded
	// key lists (keycodec.go), lets X-KCODE commands through; coded is the
	// plain size the last one announced for the frame that follows it.
	code  bool
	coded int
	// decoding, while a message is read, is the outcome of its coded key
	// list being decoded beside the reading of the frames after it (nil:
	// none); the message is returned, or given back, once it is in.
	decoding chan error
	// inside holds, after readMessage, the commands read between the
	// frames of the message it returned. ZMTP's grammar puts commands
	// between messages only, but libzmq (4.3) sends a PONG, or a PING,
	// as soon as it is due, between two frames of a message it is
	// sending; the caller answers them as it would any command.
	inside [][]byte
}

// maxInside bounds the commands one message may carry between its frames
// (libzmq's heartbeats put one there now and then).
const maxInside = 64

// errTooLarge is a frame larger than a whole message may be: libzmq drops
// the connection then, and so does the transport.
var errTooLarge = errors.New("zmtp: frame larger than the largest message")

// frame reads one frame's header.
func (fr *frameReader) header() (flags byte, size int64, err error) {
	flags, err = fr.r.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	if flags&^flagsKnown != 0 {
		return 0, 0, fmt.Errorf("%w: frame flags %#x", errProtocol, flags)
	}
	if flags&flagLong == 0 {
		b, err := fr.r.ReadByte()
		return flags, int64(b), err
	}
	var buf [8]byte
	if _, err := io.ReadFull(fr.r, buf[:]); err != nil {
		return 0, 0, err
	}
	u := binary.BigEndian.Uint64(buf[:])
	if u > uint64(fr.maxBytes) {
		return 0, 0, fmt.Errorf("%w (%d bytes)", errTooLarge, u)
	}
	return flags, int64(u), nil
}

// oversized is a message readMessage skipped because it had too many
// frames or bytes.
type oversized struct {
	frames int
	bytes  int64
}

func (o *oversized) Error() string {
	return fmt.Sprintf("message of %d frames and %d bytes skipped", o.frames, o.bytes)
}

// readMessage reads the next message, or the next command (cmd is then
// its body and frames nil). A message beyond the bounds is read to its end
// and returned as an *oversized error; the connection stays usable.
func (fr *frameReader) readMessage() (frames [][]byte, cmd []byte, err error) {
	var total int64
	fr.lent = 0
	fr.inside = fr.inside[:0]
	n := 0 // frames read
	skip := false
	for {
		flags, size, err := fr.header()
		if err != nil {
			fr.giveBack(frames)
			return nil, nil, err
		}
		if flags&flagCommand != 0 {
			if flags&flagMore != 0 {
				fr.giveBack(frames)
				return nil, nil, fmt.Errorf("%w: command frame with more to follow", errProtocol)
			}
			if size > 1<<16 {
				fr.giveBack(frames)
				return nil, nil, fmt.Errorf("%w: command of %d bytes", errProtocol, size)
			}
			body := make([]byte, size)
			if _, err := io.ReadFull(fr.r, body); err != nil {
				fr.giveBack(frames)
				return nil, nil, err
			}
			if fr.kc != nil {
				if name, rest, err := parseCommand(body); err == nil && (name == cmdPut || name == cmdRef) || fr.kc.put {
					if n == 0 || err != nil || !(name == cmdPut || name == cmdRef) {
						fr.giveBack(frames)
						return nil, nil, fmt.Errorf("%w: key cache command %q out of place", errProtocol, name)
					}
					if name == cmdPut {
						if err := fr.kc.takePut(rest); err != nil {
							fr.giveBack(frames)
							return nil, nil, err
						}
						continue
					}
					kept, last, err := fr.kc.resolve(rest)
					if err != nil {
						fr.giveBack(frames)
						return nil, nil, err
					}
					frames, skip = fr.add(frames, &n, &total, skip, kept)
					if last {
						return fr.end(frames, skip, n, total)
					}
					continue
				}
			}
			if fr.code { // (coded is set only then)
				if name, rest, err := parseCommand(body); fr.coded != 0 || err == nil && name == cmdCode {
					size, perr := parseCode(rest, fr.maxBytes)
					if n == 0 || fr.coded != 0 || perr != nil {
						fr.giveBack(frames)
						fr.coded = 0
						return nil, nil, fmt.Errorf("%w: %s out of place (%v)", errProtocol, cmdCode, perr)
					}
					fr.coded = size
					continue
				}
			}
			if n == 0 {
				return nil, body, nil
			}
			if len(fr.inside) == maxInside {
				fr.giveBack(frames)
				return nil, nil, fmt.Errorf("%w: more than %d commands inside a message", errProtocol, maxInside)
			}
			fr.inside = append(fr.inside, body)
			continue
		}
		if fr.coded != 0 {
			plain := fr.coded
			fr.coded = 0
			var f []byte
			frames, f, skip, err = fr.decoded(frames, &n, &total, skip, int(size), plain, flags&flagMore != 0)
			if err != nil {
				fr.giveBack(append(frames, f))
				return nil, nil, err
			}
			if flags&flagMore == 0 {
				return fr.end(frames, skip, n, total)
			}
			continue
		}
		frames, skip = fr.count(frames, &n, &total, skip, size)
		if skip {
			if _, err := fr.r.Discard(int(size)); err != nil {
				return nil, nil, err
			}
		} else {
			pooled := fr.pool != nil && size >= lendMin && n <= 64
			f, err := fr.readFrame(int(size), pooled)
			if err != nil {
				fr.giveBack(frames)
				return nil, nil, err
			}
			if pooled {
				fr.lent |= 1 << (n - 1)
			}
			if fr.kc != nil && fr.kc.put {
				if err := fr.kc.keep(f); err != nil {
					fr.giveBack(append(frames, f))
					return nil, nil, err
				}
			}
			if frames == nil {
				// A ps-lite message has a meta frame and up to three
				// data frames (keys, values, lengths): one allocation.
				frames = make([][]byte, 0, 4)
			}
			frames = append(frames, f)
		}
		if skip && fr.kc != nil && fr.kc.put {
			fr.kc.keep(nil) // the slot is lost: a reference to it drops the connection
		}
		if flags&flagMore == 0 {
			return fr.end(frames, skip, n, total)
		}
	}
}

// end returns a message read to its end: its frames, or, when it was
// skipped, an *oversized error.
func (fr *frameReader) end(frames [][]byte, skip bool, n int, total int64) ([][]byte, []byte, error) {
	if err := fr.decodedAll(); err != nil {
		fr.giveBack(frames)
		return nil, nil, err
	}
	if skip {
		fr.lent = 0
		return nil, nil, &oversized{frames: n, bytes: total}
	}
	return frames, nil, nil
}

// add adds a copy of a frame the key cache keeps to a message being read
// (the n-th frame, total bytes so far), as if it had been received: into
// a pool buffer, lent, when it is large; not at all when the message is
// skipped or now goes beyond the bounds.
func (fr *frameReader) add(frames [][]byte, n *int, total *int64, skip bool, kept []byte) ([][]byte, bool) {
	if frames, skip = fr.count(frames, n, total, skip, int64(len(kept))); skip {
		return nil, true
	}
	f := fr.buffer(len(kept), *n)
	copy(f, kept)
	return append(frames, f), false
}

// count counts the n-th frame of a message, of size bytes, in its bounds
// (total bytes so far): once the message goes beyond them, what it holds
// is given back and the rest is skipped (skip true, frames nil).
func (fr *frameReader) count(frames [][]byte, n *int, total *int64, skip bool, size int64) ([][]byte, bool) {
	*total += size
	*n++
	if !skip && (*n > fr.maxFrames || *total > fr.maxBytes) {
		fr.giveBack(frames)
		return nil, true
	}
	return frames, skip
}

// buffer returns a buffer for the n-th frame of a message, of size bytes,
// that the message carries although it was not received as such (a kept
// or decoded frame): from the pool, lent, when it is large, as a received
// frame would be.
func (fr *frameReader) buffer(size, n int) []byte {
	if fr.pool != nil && size >= lendMin && n <= 64 {
		fr.lent |= 1 << (n - 1)
		return fr.pool.get(size)
	}
	return make([]byte, size)
}

// decoded reads a coded key list of size bytes, the n-th frame of a
// message (total bytes so far) whose plain list has plain bytes, and adds
// the list to frames, decoded, as if it had been received plain: into a
// pool buffer, lent, when it is large; not at all when the message is
// skipped or now goes beyond the bounds (it is read and dropped then). A
// list that does not decode is a protocol error (f, when not nil, is then
// the buffer to give back). When more frames follow (more) and the list
// is large, it is decoded on a goroutine of its own while they are read
// (decodedAll waits for it): a push's values then arrive while its keys
// are decoded, rather than after.
func (fr *frameReader) decoded(frames [][]byte, n *int, total *int64, skip bool, size, plain int, more bool) (_ [][]byte, f []byte, _ bool, err error) {
	if frames, skip = fr.count(frames, n, total, skip, int64(plain)); skip {
		_, err := fr.r.Discard(size)
		return nil, nil, true, err
	}
	f = fr.buffer(plain, *n)
	pooled := fr.pool != nil && size >= lendMin
	coded, err := fr.readFrame(size, pooled)
	if err != nil {
		return frames, f, false, err
	}
	keys, ok := keyView(f)
	if !ok {
		if pooled {
			fr.pool.put(coded, false)
		}
		return frames, f, false, fmt.Errorf("%w: coded key list on a machine that cannot decode it", errProtocol)
	}
	decode := func() error {
		err := decodeKeys(keys, coded)
		if pooled {
			fr.pool.put(coded, false)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", errProtocol, err)
		}
		return nil
	}
	if more && plain >= decodeAsideMin && fr.decoding == nil {
		done := make(chan error, 1)
		go func() { done <- decode() }()
		fr.decoding = done
	} else if err := decode(); err != nil {
		return frames, f, false, err
	}
	if frames == nil {
		frames = make([][]byte, 0, 4)
	}
	return append(frames, f), nil, false, nil
}

// decodeAsideMin is the smallest plain key list decoded beside the reading
// of the rest of its message: below it a goroutine's start and hand-back
// are a fair share of the work (a list of 1 MiB decodes in about 0.1 ms).
const decodeAsideMin = 4 << 20

// decodedAll waits for the key list being decoded beside the reading of
// its message, if any, and returns its error.
func (fr *frameReader) decodedAll() error {
	if fr.decoding == nil {
		return nil
	}
	err := <-fr.decoding
	fr.decoding = nil
	return err
}

// growStep is the most a frame's buffer takes before its bytes arrive
// when the transport's upfront budget is spent: a larger frame is then
// received into a buffer that starts at growStep and doubles as it fills,
// so a peer that announces a large frame holds only what it has sent, plus
// as much again at most.
const growStep = 1 << 20

// readFrame reads a frame of size bytes. A pooled one (to be lent) goes
// into a buffer the pool kept, when it has one large enough. A large one
// gets its whole buffer at once while the transport's frames in transit
// fit its upfront budget (growing costs copies and fresh pages: twice the
// time of a cold bulk push), else it grows as its bytes arrive.
func (fr *frameReader) readFrame(size int, pooled bool) ([]byte, error) {
	if pooled {
		if b := fr.pool.kept(size); b != nil {
			_, err := io.ReadFull(fr.r, b)
			return b, err
		}
	}
	if size <= growStep || fr.reserve(size) {
		if size > growStep {
			defer fr.upfront.Add(int64(size))
		}
		var b []byte
		if pooled {
			b = fr.pool.get(size)
		} else {
			b = make([]byte, size)
		}
		_, err := io.ReadFull(fr.r, b)
		return b, err
	}
	b := make([]byte, growStep)
	n := 0
	for {
		m, err := io.ReadFull(fr.r, b[n:])
		n += m
		if err != nil {
			return nil, err
		}
		if n == size {
			return b, nil
		}
		nb := make([]byte, min(2*len(b), size))
		if pooled {
			hugemem.Advise(nb)
		}
		copy(nb, b[:n])
		b = nb
	}
}

// reserve takes size bytes from the upfront budget, if it has them.
func (fr *frameReader) reserve(size int) bool {
	if fr.upfront == nil {
		return false
	}
	if fr.upfront.Add(-int64(size)) >= 0 {
		return true
	}
	fr.upfront.Add(int64(size))
	return false
}

// giveBack returns the pooled frames of a message that is not passed on.
func (fr *frameReader) giveBack(frames [][]byte) {
	fr.decodedAll() // a key list being decoded is written into one of them
	for i, f := range frames {
		if fr.lent&(1<<i) != 0 {
			fr.pool.put(f, false)
		}
	}
	fr.lent = 0
}
