package psf

import "context"

// AllocatedRows returns the number of row segments (a row in one partition)
// of matrix name that server s holds in memory: rows never written are not
// allocated.
func AllocatedRows(s *Server, name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.partsLocked(name) {
		for _, r := range p.rows {
			if r != nil {
				n++
			}
		}
		for _, t := range p.srows {
			if t != nil {
				n++
			}
		}
	}
	return n
}

// SparseMemory returns the entries of sparse matrix name that server s
// stores, and the bytes its tables take (slots and table structs).
func SparseMemory(s *Server, name string) (entries, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.partsLocked(name) {
		for _, t := range p.srows {
			entries += int64(t.Len())
			bytes += t.Bytes()
		}
	}
	return entries, bytes
}

// partsLocked returns the partitions of matrix name in every range s
// holds.
func (s *Server) partsLocked(name string) []*partition {
	var out []*partition
	for _, st := range s.ranks {
		if m := st.matrices[name]; m != nil {
			for _, p := range m.parts {
				out = append(out, p)
			}
		}
	}
	return out
}

// CreateOn creates a matrix on some servers only, as an interrupted or
// conflicting create may leave it.
func CreateOn(ctx context.Context, c *Client, meta MatrixMeta, servers ...int) error {
	meta, err := meta.withDefaults(c.po.NumServers())
	if err != nil {
		return err
	}
	args, err := encode(metaCodec, meta)
	if err != nil {
		return err
	}
	_, err = c.sys(opCreate, meta.Name, args, servers).Wait(ctx)
	return err
}
