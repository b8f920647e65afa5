package pb

import (
	"bytes"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestProtoDrift regenerates meta.pb.go from meta.proto and fails when the
// committed file differs, apart from the lines naming the protoc and
// protoc-gen-go versions. It needs protoc and protoc-gen-go (run
// scripts/install_deps.sh); without them it is skipped. Regenerate with
// `make proto`, i.e.
//
//	cd message/pb && protoc --go_out=. --go_opt=paths=source_relative meta.proto
func TestProtoDrift(t *testing.T) {
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc not found on PATH; install it (scripts/install_deps.sh) to check meta.pb.go against meta.proto")
	}
	plugin := findPlugin()
	if plugin == "" {
		t.Skip("protoc-gen-go not found on PATH, in $GOBIN or in $(go env GOPATH)/bin; " +
			"install it (go install google.golang.org/protobuf/cmd/protoc-gen-go) to check meta.pb.go against meta.proto")
	}

	out := t.TempDir()
	cmd := exec.Command(protoc,
		"--plugin=protoc-gen-go="+plugin,
		"--go_out="+out, "--go_opt=paths=source_relative",
		"meta.proto")
	cmd.Dir = "." // the package directory: meta.proto's own directory, as `make proto` runs it
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, msg)
	}
	fresh, err := os.ReadFile(filepath.Join(out, "meta.pb.go"))
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("meta.pb.go")
	if err != nil {
		t.Fatal(err)
	}

	a, b := stripVersions(committed), stripVersions(fresh)
	if a == b {
		return
	}
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	line := 0
	for line < len(al) && line < len(bl) && al[line] == bl[line] {
		line++
	}
	at := func(l []string) string {
		if line < len(l) {
			return l[line]
		}
		return "<end of file>"
	}
	t.Errorf("meta.pb.go is out of date with meta.proto (generated with %s and %s now); "+
		"run `make proto`.\nFirst difference, at line %d (version lines removed):\ncommitted: %s\ngenerated: %s",
		versions(committed), versions(fresh), line+1, at(al), at(bl))
}

// isVersionLine reports whether l is one of the generated header lines that
// name the tool versions: "// \tprotoc-gen-go v1.x" and "// \tprotoc v3.x".
func isVersionLine(l string) bool {
	return strings.HasPrefix(l, "// \tprotoc ") || strings.HasPrefix(l, "// \tprotoc-gen-go ")
}

func stripVersions(src []byte) string {
	var keep []string
	for _, l := range strings.Split(string(bytes.ReplaceAll(src, []byte("\r\n"), []byte("\n"))), "\n") {
		if !isVersionLine(l) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func versions(src []byte) string {
	var v []string
	for _, l := range strings.Split(string(src), "\n") {
		if isVersionLine(l) {
			v = append(v, strings.Join(strings.Fields(strings.TrimPrefix(l, "//")), " "))
		}
	}
	if len(v) == 0 {
		return "unknown versions"
	}
	return strings.Join(v, ", ")
}

// findPlugin looks for protoc-gen-go on PATH, then in $GOBIN and in the bin
// directory of every GOPATH entry (from the environment, the go command's
// settings, or the default ~/go).
func findPlugin() string {
	if p, err := exec.LookPath("protoc-gen-go"); err == nil {
		return p
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	gopaths := []string{build.Default.GOPATH}
	if goCmd, err := exec.LookPath("go"); err == nil {
		if out, err := exec.Command(goCmd, "env", "GOBIN", "GOPATH").Output(); err == nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) == 2 {
				if g := strings.TrimSpace(lines[0]); g != "" {
					dirs = append(dirs, g)
				}
				gopaths = append(gopaths, strings.TrimSpace(lines[1]))
			}
		}
	}
	for _, gp := range gopaths {
		for _, d := range filepath.SplitList(gp) {
			if d != "" {
				dirs = append(dirs, filepath.Join(d, "bin"))
			}
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, "protoc-gen-go")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
