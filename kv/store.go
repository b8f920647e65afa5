package kv

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// Store is server state the framework can see, in the spirit of
// hashicorp/raft's FSM: requests are applied to it, and it can write and
// restore the part of its state that falls in a key range. A KVServer given
// a Store (SetStore) answers requests with it and, in a managed job
// (PS_REPLICAS, PS_CHECKPOINT_DIR), keeps it on several servers and writes
// it to disk (see docs/REPLICATION.md). A plain request handle
// (SetRequestHandle) keeps working as it always did, but gets none of
// that: its state dies with its server.
//
// The framework calls a store's methods one at a time (never two at once),
// in the server customer's turn: on its goroutine, or on the van's receive
// goroutine when the customer was idle (customer.Customer.Accept).
type Store[V message.Value] interface {
	// Changes reports whether applying the request changes the store.
	// Requests that do are replicated to every server holding their key
	// range, in the same order, and count as lost when a server dies
	// unreplicated; the others are reads, answered by one server.
	Changes(req KVMeta, data KVPairs[V]) bool
	// Apply applies a request and returns its answer: for a pull, the
	// keys (the request's own, or a copy) with their values (and lens);
	// nothing for a push. Apply must be deterministic: the same request
	// applied to the same state gives the same state, on every server.
	// The answer is sent after Apply returns and must not change any more
	// (fresh slices, or the request's keys). A request with Push false
	// must not change the store. A request Apply cannot take is answered
	// with its error (a Go worker's request fails with it).
	Apply(req KVMeta, data KVPairs[V]) (KVPairs[V], error)
	// Snapshot writes the state of part p to w, in a form Restore reads.
	Snapshot(w io.Writer, p Part) error
	// Restore replaces the state of part p with what the readers hold of
	// it: the union of their entries that belong to p (each reader is what
	// Snapshot wrote of a part, of this job's layout or of another's; no
	// reader empties the part). A store that cannot take the snapshots it
	// is given (another layout, say) returns an error saying why.
	Restore(rs []io.Reader, p Part) error
}

// Part is one key range of a job: what the server of rank Index among Of
// servers holds when every server is alive. With the default slicer it is
// the keys of Keys; a store whose workers route keys with a slicer of
// their own (SetSlicer) decides which of its keys belong to the part the
// same way (it sends part Index of a request to that range).
type Part struct {
	Index, Of int
	Keys      postoffice.Range
}

// AsyncReader is a Store that may answer reads later: Read is called, in
// place of Apply, for requests that do not change the store, and calls
// answer once, then or later, from any goroutine (a read that waits for a
// step's pushes under bulk-synchronous training, say).
type AsyncReader[V message.Value] interface {
	Read(req KVMeta, data KVPairs[V], answer func(KVPairs[V], error))
}

// Changes implements Store: a push changes the store.
func (h *DefaultHandle[V]) Changes(req KVMeta, _ KVPairs[V]) bool { return req.Push }

// Apply implements Store: a push adds its values to the stored ones, a
// pull answers the stored values (see DefaultHandle).
func (h *DefaultHandle[V]) Apply(req KVMeta, data KVPairs[V]) (KVPairs[V], error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if req.Push {
		h.push(data)
	}
	if req.Pull {
		return h.pull(data.Keys, len(data.Lens) > 0), nil
	}
	return KVPairs[V]{}, nil
}

// snapshotMagic starts DefaultHandle's snapshot of a range; the type tag of
// its values follows (a snapshot of other values does not restore).
const snapshotMagic = "PSKVDEF1"

// Snapshot implements Store: the magic, the values' type tag (uint32), the
// number of keys (uint64), then for each key in ascending order the key
// (uint64), its number of values (uint32) and the values, all
// little-endian.
func (h *DefaultHandle[V]) Snapshot(w io.Writer, p Part) error {
	keys := p.Keys
	h.mu.Lock()
	ks := make([]uint64, 0, len(h.store))
	for k := range h.store {
		if keys.Contains(k) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	// Copy the entries out first: writing to disk or the network under
	// the lock would stall every request meanwhile.
	vals := make([][]V, len(ks))
	for i, k := range ks {
		vals[i] = slices.Clone(h.store[k])
	}
	h.mu.Unlock()
	bw := bufio.NewWriterSize(w, 1<<16)
	var hdr []byte
	hdr = append(hdr, snapshotMagic...)
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(message.TypeOf[V]()))
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(len(ks)))
	if _, err := bw.Write(hdr); err != nil {
		return err
	}
	var buf [12]byte
	for i, k := range ks {
		binary.LittleEndian.PutUint64(buf[:8], k)
		binary.LittleEndian.PutUint32(buf[8:], uint32(len(vals[i])))
		if _, err := bw.Write(buf[:]); err != nil {
			return err
		}
		if _, err := bw.Write(message.Frame(vals[i])); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// maxSnapshotValues bounds the values of one key a snapshot may announce.
const maxSnapshotValues = 1 << 28

// Restore implements Store.
func (h *DefaultHandle[V]) Restore(rs []io.Reader, p Part) error {
	keys := p.Keys
	fresh := map[uint64][]V{}
	size := message.SizeOf[V]()
	for _, r := range rs {
		br := bufio.NewReaderSize(r, 1<<16)
		hdr := make([]byte, len(snapshotMagic)+12)
		if _, err := io.ReadFull(br, hdr); err != nil {
			return fmt.Errorf("kv: snapshot header: %w", err)
		}
		if string(hdr[:len(snapshotMagic)]) != snapshotMagic {
			return errors.New("kv: not a DefaultHandle snapshot")
		}
		if t := message.DataType(binary.LittleEndian.Uint32(hdr[len(snapshotMagic):])); t != message.TypeOf[V]() {
			return fmt.Errorf("kv: a snapshot of %v values, this store holds %v", t, message.TypeOf[V]())
		}
		n := binary.LittleEndian.Uint64(hdr[len(snapshotMagic)+4:])
		var buf [12]byte
		for i := uint64(0); i < n; i++ {
			if _, err := io.ReadFull(br, buf[:]); err != nil {
				return fmt.Errorf("kv: snapshot entry %d: %w", i, err)
			}
			k := binary.LittleEndian.Uint64(buf[:8])
			m := binary.LittleEndian.Uint32(buf[8:])
			if m > maxSnapshotValues {
				return fmt.Errorf("kv: snapshot entry %d announces %d values", i, m)
			}
			raw := make([]byte, int(m)*size)
			if _, err := io.ReadFull(br, raw); err != nil {
				return fmt.Errorf("kv: snapshot entry %d: %w", i, err)
			}
			if !keys.Contains(k) {
				continue
			}
			v, err := message.Values[V](raw)
			if err != nil {
				return err
			}
			fresh[k] = v
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.store {
		if keys.Contains(k) {
			delete(h.store, k)
		}
	}
	for k, v := range fresh {
		h.store[k] = v
	}
	return nil
}

var _ Store[float32] = (*DefaultHandle[float32])(nil)
