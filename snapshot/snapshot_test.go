package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, root string, gen uint64, app, r, n, who int, body string) {
	t.Helper()
	err := WriteRange(root, Header{App: app, Range: r, Ranges: n, Writer: who, LSN: 7, Gen: gen}, func(w io.Writer) error {
		_, err := io.WriteString(w, body)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRangeFileRoundTripAndCorruption(t *testing.T) {
	root := t.TempDir()
	write(t, root, 3, 0, 1, 2, 9, "hello")
	path := RangePath(root, 3, 0, 1, 2, 9)
	h, body, err := ReadRange(path)
	if err != nil || string(body) != "hello" || h != (Header{App: 0, Range: 1, Ranges: 2, Writer: 9, LSN: 7, Gen: 3}) {
		t.Fatalf("read %+v %q %v", h, body, err)
	}
	b, _ := os.ReadFile(path)
	for _, cut := range []int{0, 10, len(b) - 1} {
		if err := os.WriteFile(path, b[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadRange(path); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a file cut at %d bytes: %v", cut, err)
		}
	}
	flipped := bytes.Clone(b)
	flipped[len(flipped)-6] ^= 1
	os.WriteFile(path, flipped, 0o644)
	if _, _, err := ReadRange(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a flipped bit: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(GenDir(root, 3), "app-0", ".tmp-*")); len(m) > 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}

func TestRestorableAndFiles(t *testing.T) {
	root := t.TempDir()
	// Snapshot 1: complete, 2 servers, 1 replica (each range written twice).
	for r := 0; r < 2; r++ {
		write(t, root, 1, 0, r, 2, r, fmt.Sprint(r))
		write(t, root, 1, 0, r, 2, 1-r, fmt.Sprint(r))
	}
	WriteMeta(root, Meta{Gen: 1, Servers: 2, Replicas: 1, Meta: "round=10"})
	Commit(root, 1)
	// Snapshot 2: written but never committed.
	write(t, root, 2, 0, 0, 2, 0, "x")
	WriteMeta(root, Meta{Gen: 2, Servers: 2, Meta: "round=20"})

	got, problems := Restorable(root, 2, []int{0, 1})
	if len(problems) > 0 || len(got) != 1 || got[1] != "round=10" {
		t.Fatalf("Restorable = %v, %v", got, problems)
	}
	// Another layout: every range of the 2, one copy each.
	files, err := Files(root, 1, 0, 1, 3)
	if err != nil || len(files) != 2 {
		t.Fatalf("range 1 of 3 from 2: %v %v", files, err)
	}
	files, err = Files(root, 1, 0, 1, 2)
	if err != nil || len(files) != 1 {
		t.Fatalf("range 1 of 2 from 2: %v %v", files, err)
	}
	// A missing range is named.
	os.Remove(RangePath(root, 1, 0, 1, 2, 1))
	os.Remove(RangePath(root, 1, 0, 1, 2, 0))
	if _, problems := Restorable(root, 2, []int{1}); len(problems) == 0 {
		t.Fatal("a missing range went unnoticed")
	}
	if err := Prune(root, 1); err != nil {
		t.Fatal(err)
	}
}
