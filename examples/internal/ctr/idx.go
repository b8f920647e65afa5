package ctr

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// idxUint8 is the IDX type code of unsigned bytes, the only type ReadIDX
// accepts (MNIST and Fashion-MNIST use it for images and labels).
const idxUint8 = 0x08

// maxIDXBytes bounds the data an IDX header may announce.
const maxIDXBytes = 1 << 32

// IDX is an IDX file: a big-endian header (two zero bytes, the type code,
// the number of dimensions, then each dimension as a uint32) followed by the
// elements in row-major order.
type IDX struct {
	Type byte
	Dims []int
	Data []byte
}

// ReadIDX parses an IDX file of unsigned bytes from r.
func ReadIDX(r io.Reader) (*IDX, error) {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, fmt.Errorf("IDX header: %w", err)
	}
	if head[0] != 0 || head[1] != 0 {
		return nil, fmt.Errorf("not an IDX file (magic %02x%02x%02x%02x)", head[0], head[1], head[2], head[3])
	}
	if head[2] != idxUint8 {
		return nil, fmt.Errorf("IDX type 0x%02x: only unsigned bytes (0x08) are supported", head[2])
	}
	nd := int(head[3])
	if nd == 0 {
		return nil, fmt.Errorf("IDX file with no dimensions")
	}
	x := &IDX{Type: head[2], Dims: make([]int, nd)}
	total := int64(1)
	for i := range x.Dims {
		var d uint32
		if err := binary.Read(r, binary.BigEndian, &d); err != nil {
			return nil, fmt.Errorf("IDX dimension %d: %w", i, err)
		}
		x.Dims[i] = int(d)
		total *= int64(d)
		if total > maxIDXBytes {
			return nil, fmt.Errorf("IDX dimensions %v: too large", x.Dims[:i+1])
		}
	}
	// Read what is there rather than allocate what the header announces: a
	// corrupt header must not cost gigabytes before the data runs out.
	data, err := io.ReadAll(io.LimitReader(r, total))
	if err != nil {
		return nil, fmt.Errorf("IDX data: %w", err)
	}
	if int64(len(data)) != total {
		return nil, fmt.Errorf("IDX data: %d of %d bytes: %w", len(data), total, io.ErrUnexpectedEOF)
	}
	x.Data = data
	return x, nil
}

// readCloser pairs a reader with the closers to run after it.
type readCloser struct {
	io.Reader
	closers []io.Closer
}

// Close closes the readers in order and returns the first error.
func (r *readCloser) Close() error {
	var first error
	for _, c := range r.closers {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// openMaybeGzip opens path, decompressing it when it starts with the gzip
// magic bytes.
func openMaybeGzip(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(f, 1<<16)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return &readCloser{Reader: gz, closers: []io.Closer{gz, f}}, nil
	}
	return &readCloser{Reader: br, closers: []io.Closer{f}}, nil
}
