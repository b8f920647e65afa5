package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Byte values of per-key lengths (lens), as MXNet's kvstore_dist pushes
// and pulls them through KVWorker<char>: tests/test_kv_lens (Go) and
// tests/cpp/kv_lens.cc (C++ ps-lite) push keys of a few bytes to a few
// MiB, in frames below and above 512 KiB, to servers that store them, pull
// and push-pull them back, and check every byte (a function of key, offset,
// worker and round). Each worker prints "kv_lens: checked N bytes exactly".

// lensOK fails the test unless n workers reported exact bytes.
func lensOK(t *testing.T, out string, n int) {
	t.Helper()
	if got := strings.Count(out, "kv_lens: checked "); got != n {
		t.Errorf("%d of %d workers reported exact bytes:\n%s", got, n, out)
	}
}

// The Go program alone, through scripts/local.sh, on both transports: with
// servers that copy requests (KVServer's default), and that borrow them
// with lent memory poisoned when given back.
func TestKVLensThroughLocalSh(t *testing.T) {
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{nil, nil},
		{zmqEnv, nil},
		{[]string{"PS_POISON_LENT=1"}, []string{"-lend"}},
		{[]string{"DMLC_PS_VAN_TYPE=zmq", "PS_POISON_LENT=1"}, []string{"-lend"}},
	} {
		name := strings.Join(append(append([]string{}, c.env...), c.args...), " ")
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			out := launch(t, c.env, "local.sh", append([]string{"2", "2", bin("test_kv_lens")}, c.args...)...)
			lensOK(t, out, 2)
		})
	}
}

// buildCpp compiles tests/cpp/<name>.cc (kv_lens, kv_rounds) against the
// C++ ps-lite in dir (PSLITE_CPP_BUILD), finding its headers and library as
// scripts/bench.sh does (PSLITE_CPP_INCLUDE and PSLITE_CPP_LIB override),
// and returns the program.
func buildCpp(t *testing.T, dir, name string) string {
	t.Helper()
	inc, lib := os.Getenv("PSLITE_CPP_INCLUDE"), os.Getenv("PSLITE_CPP_LIB")
	if inc == "" {
		for _, c := range []string{filepath.Join(dir, "include"), filepath.Join(dir, "..", "include")} {
			if _, err := os.Stat(filepath.Join(c, "ps", "ps.h")); err == nil {
				inc = c
				break
			}
		}
	}
	if lib == "" {
		for _, c := range []string{filepath.Join(dir, "build", "libps.a"), filepath.Join(dir, "libps.a"), filepath.Join(dir, "libpslite.a")} {
			if _, err := os.Stat(c); err == nil {
				lib = c
				break
			}
		}
	}
	if inc == "" {
		t.Fatalf("no ps/ps.h in %s/include or %s/../include; set PSLITE_CPP_INCLUDE", dir, dir)
	}
	if lib == "" {
		t.Fatalf("no build/libps.a, libps.a or libpslite.a in %s; set PSLITE_CPP_LIB", dir)
	}
	args := []string{"-std=c++14", "-O2", "-pthread", "-isystem", inc}
	libs := []string{lib, "-lzmq", "-lprotobuf", "-lpthread"}
	if st, err := os.Stat(filepath.Join(dir, "deps", "include")); err == nil && st.IsDir() {
		args = append(args, "-isystem", filepath.Join(dir, "deps", "include"))
	}
	if st, err := os.Stat(filepath.Join(dir, "deps", "lib")); err == nil && st.IsDir() {
		libs = append([]string{lib, "-L" + filepath.Join(dir, "deps", "lib")}, libs[1:]...)
	}
	out := filepath.Join(t.TempDir(), name)
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	args = append(append(append(args, filepath.Join("cpp", name+".cc")), libs...), "-o", out)
	if msg, err := exec.Command(cxx, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cxx, strings.Join(args, " "), err, msg)
	}
	return out
}

func TestInteropLensBytes(t *testing.T) {
	c := buildCpp(t, cppDir(t), "kv_lens")
	g, q := bin("test_kv_lens"), onZMQ("test_kv_lens")
	for _, j := range []struct {
		name             string
		sched            string
		servers, workers []string
		env              []string
	}{
		{"go scheduler and servers, C++ workers", g, []string{g, g}, []string{c, c}, nil},
		{"zmq scheduler and servers, C++ workers", q, []string{q, q}, []string{c, c}, nil},
		{"go servers borrowing, C++ workers, PS_POISON_LENT=1", g, []string{g + " -lend", g + " -lend"}, []string{c, c}, []string{"PS_POISON_LENT=1"}},
		{"zmq servers borrowing, C++ workers, PS_POISON_LENT=1", q, []string{q + " -lend", q + " -lend"}, []string{c, c}, []string{"PS_POISON_LENT=1"}},
		{"C++ scheduler and servers, go workers", c, []string{c, c}, []string{g, g}, nil},
		{"C++ scheduler and servers, zmq workers", c, []string{c, c}, []string{q, q}, nil},
		{"mixed servers and workers", g, []string{c, g}, []string{g, c}, nil},
		{"mixed servers and workers, zmq", q, []string{q, c}, []string{c, q}, nil},
	} {
		t.Run(j.name, func(t *testing.T) {
			lensOK(t, mixedJob(t, j.sched, j.servers, j.workers, len(j.workers), false, j.env...), len(j.workers))
		})
	}
	// Baseline: the C++ program alone (its servers store as ours do).
	t.Run("C++ only", func(t *testing.T) {
		lensOK(t, mixedJob(t, c, []string{c, c}, []string{c, c}, 2, false), 2)
	})
}
