// Package quarantine holds what both transports keep of the memory a
// handler gave back with PS_POISON_LENT: poisoned buffers are not reused
// but wait, up to a bound in bytes, so that a view kept past its release
// keeps reading poison instead of the next message received into the same
// memory.
package quarantine

// DefaultBytes bounds the memory a quarantine holds unless told otherwise.
const DefaultBytes = 256 << 20

// Q is a first-in, first-out quarantine of poisoned buffers of type T. It
// has no lock: its owner guards it. The zero value holds DefaultBytes.
type Q[T any] struct {
	// Max is the bound in bytes; 0 means DefaultBytes.
	Max   int
	items []T
	sizes []int
	bytes int
}

// Add keeps x, of size bytes, and returns the oldest buffers that no longer
// fit, for the caller to free (x itself always stays).
func (q *Q[T]) Add(x T, size int) (out []T) {
	q.items = append(q.items, x)
	q.sizes = append(q.sizes, size)
	q.bytes += size
	limit := q.Max
	if limit == 0 {
		limit = DefaultBytes
	}
	var zero T
	for q.bytes > limit && len(q.items) > 1 {
		out = append(out, q.items[0])
		q.bytes -= q.sizes[0]
		q.items[0] = zero
		q.items, q.sizes = q.items[1:], q.sizes[1:]
	}
	return out
}

// Len returns how many buffers q holds, and their bytes.
func (q *Q[T]) Len() (buffers, bytes int) { return len(q.items), q.bytes }

// Oldest returns the buffer that has waited longest; q must not be empty.
func (q *Q[T]) Oldest() T { return q.items[0] }
