package kv

// Test hooks into DefaultHandle's store logic, which Handle wraps with a
// server response.

// Push applies a push request to the store.
func (h *DefaultHandle[V]) Push(data KVPairs[V]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.push(data)
}

// Pull answers a pull request without lens from the store.
func (h *DefaultHandle[V]) Pull(keys []uint64) KVPairs[V] { return h.PullLens(keys, false) }

// PullLens answers a pull request from the store; withLens says whether the
// request carried lens.
func (h *DefaultHandle[V]) PullLens(keys []uint64, withLens bool) KVPairs[V] {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pull(keys, withLens)
}
