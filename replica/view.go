package replica

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gopslite/pslite/message"
)

// View says which servers hold each key range and in what order. The
// scheduler makes every view (see Planner) and sends it to every Go server
// and worker; a view with a higher Epoch replaces an older one.
//
// Ranges are numbered by the rank of their home server: range r is the key
// range C++ ps-lite gives server r (postoffice.KeyRanges), and its home set
// is servers r, r+1, ..., r+Replicas (mod the number of servers).
type View struct {
	// Epoch numbers views: every change makes a higher one.
	Epoch uint64
	// Replicas is how many servers hold each range besides its head
	// (PS_REPLICAS).
	Replicas int
	// Ranges holds one entry per range, by range number.
	Ranges []Range
	// Inc is the incarnation of each server rank: it grows each time a new
	// process takes the rank's place, so that messages of a process that
	// was replaced are told from its replacement's.
	Inc []uint64
	// Restored is the snapshot the job's servers restored when it started
	// (0: none).
	Restored uint64
	// RestoredMeta is what the program stored with that snapshot.
	RestoredMeta string
}

// Range is a view of one key range.
type Range struct {
	// Version grows at every change of this range's entry.
	Version uint64
	// Chain lists the servers holding the range, all of them up to date,
	// head first: the head takes the requests, each member passes what it
	// applies to the next, and the last (the tail) answers back up.
	Chain []int
	// Joining lists servers copying the range from the tail: they get a
	// snapshot, then every later change, and join the chain once the
	// scheduler hears that they have caught up (Synced).
	Joining []int
	// Draining asks the head to stop taking requests for the range and to
	// report once everything it applied is replicated (Drained), so that
	// the range can move to its home server.
	Draining bool
	// LossGen, when LossVersion is not 0, records that the range lost every
	// server holding it at LossVersion and was restored from snapshot
	// LossGen (0: nothing, it restarted empty): the changes applied since
	// that snapshot are gone.
	LossGen uint64
	// LossVersion is the Version of the range when it was restored after a
	// loss (0: never).
	LossVersion uint64
}

// Head returns the range's head, or -1 when no server holds it.
func (r *Range) Head() int {
	if len(r.Chain) == 0 {
		return -1
	}
	return r.Chain[0]
}

// Tail returns the last server of the chain, or -1.
func (r *Range) Tail() int {
	if len(r.Chain) == 0 {
		return -1
	}
	return r.Chain[len(r.Chain)-1]
}

// Position returns rank's place in the chain, or -1.
func (r *Range) Position(rank int) int { return slices.Index(r.Chain, rank) }

// Holds reports whether rank is in the chain or joining it.
func (r *Range) Holds(rank int) bool {
	return slices.Contains(r.Chain, rank) || slices.Contains(r.Joining, rank)
}

// Successor returns the server after rank in the chain, or -1.
func (r *Range) Successor(rank int) int {
	i := r.Position(rank)
	if i < 0 || i+1 >= len(r.Chain) {
		return -1
	}
	return r.Chain[i+1]
}

// Predecessor returns the server before rank in the chain, or -1.
func (r *Range) Predecessor(rank int) int {
	i := r.Position(rank)
	if i <= 0 {
		return -1
	}
	return r.Chain[i-1]
}

// Home returns the home set of range r in a job of n servers with k
// replicas: r, r+1, ..., r+k (mod n), the servers that hold it when all are
// alive, in chain order.
func Home(r, n, k int) []int {
	k = min(k, n-1)
	out := make([]int, 0, k+1)
	for i := 0; i <= k; i++ {
		out = append(out, (r+i)%n)
	}
	return out
}

// HomeRanges returns the ranges rank belongs to the home set of: rank,
// rank-1, ..., rank-k (mod n).
func HomeRanges(rank, n, k int) []int {
	k = min(k, n-1)
	out := make([]int, 0, k+1)
	for i := 0; i <= k; i++ {
		out = append(out, ((rank-i)%n+n)%n)
	}
	return out
}

// Clone returns a deep copy of v.
func (v *View) Clone() *View {
	c := *v
	c.Ranges = make([]Range, len(v.Ranges))
	for i, r := range v.Ranges {
		r.Chain = slices.Clone(r.Chain)
		r.Joining = slices.Clone(r.Joining)
		c.Ranges[i] = r
	}
	c.Inc = slices.Clone(v.Inc)
	return &c
}

// HeadOf returns the head of range r, or -1.
func (v *View) HeadOf(r int) int {
	if v == nil || r < 0 || r >= len(v.Ranges) {
		return -1
	}
	return v.Ranges[r].Head()
}

// IncOf returns the incarnation of server rank (0 when unknown).
func (v *View) IncOf(rank int) uint64 {
	if v == nil || rank < 0 || rank >= len(v.Inc) {
		return 0
	}
	return v.Inc[rank]
}

// String describes the view in one line: "epoch 3: r0 [0 1] r1 [1]+2 ...".
func (v *View) String() string {
	if v == nil {
		return "no view"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d:", v.Epoch)
	for i, r := range v.Ranges {
		fmt.Fprintf(&b, " r%d%v", i, r.Chain)
		if len(r.Joining) > 0 {
			fmt.Fprintf(&b, "+%v", r.Joining)
		}
		if r.Draining {
			b.WriteString("(draining)")
		}
	}
	return b.String()
}

// viewFormat is the first byte of an encoded view.
const viewFormat = 1

// Encode returns v's wire form: a format byte, then uvarints (epoch,
// replicas, restored, the meta's length and bytes, the number of ranges;
// per range its version, loss gen and version, draining, its chain and its
// joining list (a count, then ranks); then the incarnations (a count, then
// each).
func (v *View) Encode() []byte {
	b := []byte{viewFormat}
	b = binary.AppendUvarint(b, v.Epoch)
	b = binary.AppendUvarint(b, uint64(v.Replicas))
	b = binary.AppendUvarint(b, v.Restored)
	b = binary.AppendUvarint(b, uint64(len(v.RestoredMeta)))
	b = append(b, v.RestoredMeta...)
	b = binary.AppendUvarint(b, uint64(len(v.Ranges)))
	for _, r := range v.Ranges {
		b = binary.AppendUvarint(b, r.Version)
		b = binary.AppendUvarint(b, r.LossGen)
		b = binary.AppendUvarint(b, r.LossVersion)
		d := uint64(0)
		if r.Draining {
			d = 1
		}
		b = binary.AppendUvarint(b, d)
		for _, list := range [][]int{r.Chain, r.Joining} {
			b = binary.AppendUvarint(b, uint64(len(list)))
			for _, x := range list {
				b = binary.AppendUvarint(b, uint64(x))
			}
		}
	}
	b = binary.AppendUvarint(b, uint64(len(v.Inc)))
	for _, x := range v.Inc {
		b = binary.AppendUvarint(b, x)
	}
	return b
}

// MaxServers bounds the ranges and ranks a decoded view may hold.
const MaxServers = 1 << 16

// ErrBadView is wrapped by the errors of DecodeView.
var ErrBadView = errors.New("replica: malformed view")

// DecodeView reads a view written by Encode. It checks every count and
// rank, so a garbled or hostile view is an error, never a panic.
func DecodeView(b []byte) (*View, error) {
	d := decoder{b: b}
	if f := d.byte(); f != viewFormat {
		return nil, fmt.Errorf("%w: format %d", ErrBadView, f)
	}
	v := &View{}
	v.Epoch = d.uvarint()
	v.Replicas = int(d.small(MaxServers))
	v.Restored = d.uvarint()
	v.RestoredMeta = string(d.bytes(1 << 20))
	n := int(d.small(MaxServers))
	v.Ranges = make([]Range, 0, min(n, 1024))
	for i := 0; i < n && d.err == nil; i++ {
		var r Range
		r.Version = d.uvarint()
		r.LossGen = d.uvarint()
		r.LossVersion = d.uvarint()
		r.Draining = d.small(1) == 1
		r.Chain = d.ranks(n)
		r.Joining = d.ranks(n)
		v.Ranges = append(v.Ranges, r)
	}
	m := int(d.small(MaxServers))
	v.Inc = make([]uint64, 0, min(m, 1024))
	for i := 0; i < m && d.err == nil; i++ {
		v.Inc = append(v.Inc, d.uvarint())
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err == nil && len(v.Inc) != len(v.Ranges) {
		d.err = fmt.Errorf("%d incarnations for %d ranges", len(v.Inc), len(v.Ranges))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadView, d.err)
	}
	return v, nil
}

// decoder reads uvarints and bytes, keeping the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = errors.New("short input")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return x
}

// small reads a uvarint of at most limit.
func (d *decoder) small(limit uint64) uint64 {
	x := d.uvarint()
	if d.err == nil && x > limit {
		d.err = fmt.Errorf("%d exceeds %d", x, limit)
		return 0
	}
	return x
}

func (d *decoder) bytes(limit uint64) []byte {
	n := d.small(limit)
	if d.err != nil {
		return nil
	}
	if uint64(len(d.b)) < n {
		d.err = errors.New("short input")
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

// ranks reads a count and that many ranks below n.
func (d *decoder) ranks(n int) []int {
	c := int(d.small(uint64(n)))
	var out []int
	for i := 0; i < c && d.err == nil; i++ {
		r := int(d.small(uint64(max(n-1, 0))))
		if slices.Contains(out, r) {
			d.err = fmt.Errorf("rank %d listed twice", r)
		}
		out = append(out, r)
	}
	return out
}

// KeyRange returns the keys of range r in a job of n servers, as C++
// ps-lite splits them (server r starts at MaxKey/n*r), except that the last
// range also holds MaxKey, so that no key falls outside every range
// (upstream drops the keys above MaxKey/n*n). End is exclusive but for the
// last range (last true), which holds End too.
func KeyRange(r, n int) (begin, end uint64, last bool) {
	step := message.MaxKey / uint64(n)
	begin, end = step*uint64(r), step*uint64(r+1)
	if r == n-1 {
		end, last = message.MaxKey, true
	}
	return begin, end, last
}

// RangeString describes range r of n servers: "range 1 [6148914691236517205, 12297829382473034410)".
func RangeString(r, n int) string {
	if n <= 0 || r < 0 || r >= n {
		return fmt.Sprintf("range %d", r)
	}
	b, e, last := KeyRange(r, n)
	if last {
		return fmt.Sprintf("range %d [%d, %d]", r, b, e)
	}
	return fmt.Sprintf("range %d [%d, %d)", r, b, e)
}
