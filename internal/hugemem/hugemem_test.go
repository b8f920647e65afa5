package hugemem

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

func thp(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("huge page advice is Linux's")
	}
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(b), "[never]") {
		t.Skip("no transparent huge pages here")
	}
}

// Make advises slices of two huge pages or more, of any element size; every
// element is zero. (That a smaller one is not advised cannot be seen: its
// memory may have been part of an advised slice before.)
func TestMake(t *testing.T) {
	thp(t)
	bytesOf := func(p unsafe.Pointer, n int) []byte { return unsafe.Slice((*byte)(p), n) }
	for _, c := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"float32, 4 huge pages", func() []byte { v := Make[float32](4 * Page / 4); return bytesOf(unsafe.Pointer(&v[0]), 4*Page) }(), true},
		{"uint64, 3 huge pages", func() []byte { v := Make[uint64](3 * Page / 8); return bytesOf(unsafe.Pointer(&v[0]), 3*Page) }(), true},
		{"bytes, 8 MiB + 5", Make[byte](8<<20 + 5), true},
		{"bytes, 1 huge page", Make[byte](Page), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i, x := range c.b {
				if x != 0 {
					t.Fatalf("byte %d is %d", i, x)
				}
			}
			if !c.want {
				return
			}
			got, err := Advised(c.b)
			if err != nil {
				t.Skip(err)
			}
			if !got {
				t.Error("not advised")
			}
		})
	}
	if v := Make[struct{}](1 << 30); len(v) != 1<<30 {
		t.Errorf("zero-size elements: len %d", len(v))
	}
	if v := Make[int32](0); len(v) != 0 {
		t.Errorf("empty: len %d", len(v))
	}
}
