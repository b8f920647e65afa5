package tests

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A shell block of the documentation says, on the line before its fence,
// how it is checked, in an HTML comment (invisible once rendered):
//
//	<!-- checked: run by TestDocCommands -->   this test runs it as written
//	<!-- checked: by TestA, TestB -->          those tests run what it says
//	<!-- checked: by CI: ... -->               .ci/run runs it (say how)
//	<!-- not checked here: reason -->          and the page says why, too
//
// A block with none fails TestDocCommands, so that no command in README.md
// or docs/ goes unchecked without saying so.
var docMark = regexp.MustCompile(`^<!-- (checked: (run by TestDocCommands|by CI: .+|by (Test\w+)(, Test\w+)*)|not checked here: .+) -->$`)

// docBlock is a shell block of a Markdown page.
type docBlock struct {
	where string // file:line of its fence
	mark  string // the comment before it, without <!-- -->
	text  string
}

// docBlocks returns the shell blocks of README.md and docs/*.md.
func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join("..", "README.md")}, pages...)
	var blocks []docBlock
	for _, page := range pages {
		f, err := os.Open(page)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		var (
			prev string
			cur  *docBlock
			n    int
		)
		for sc.Scan() {
			line := sc.Text()
			tl := strings.TrimSpace(line) // fences may be indented in lists
			n++
			switch {
			case cur != nil && strings.HasPrefix(tl, "```"):
				blocks = append(blocks, *cur)
				cur = nil
			case cur != nil:
				cur.text += line + "\n"
			case tl == "```sh" || tl == "```bash" || tl == "```console":
				mark := ""
				if m := strings.TrimSpace(prev); strings.HasPrefix(m, "<!--") {
					mark = m
				}
				cur = &docBlock{where: fmt.Sprintf("%s:%d", strings.TrimPrefix(page, "../"), n), mark: mark}
			}
			prev = line
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return blocks
}

// TestDocCommands holds every shell block of README.md and docs/ to its
// mark, and runs those marked to be run here as written: from a directory
// where scripts/ is the repository's and build/ holds the programs this
// package built. The one change: a block that names a netns.sh prefix gets
// one of this process's (pst<pid>n<k>), so that test processes running at
// once do not share hosts.
func TestDocCommands(t *testing.T) {
	tests := testNames(t)
	ran := 0
	for _, b := range docBlocks(t) {
		m := docMark.FindStringSubmatch(b.mark)
		switch {
		case m == nil:
			t.Errorf("%s: a shell block says neither how it is checked nor why it is not (want a comment like <!-- checked: run by TestDocCommands --> or <!-- not checked here: why --> on the line before it); it has %q", b.where, b.mark)
		case strings.HasPrefix(m[2], "by Test"):
			for _, name := range strings.Split(strings.TrimPrefix(m[2], "by "), ", ") {
				if !tests[name] {
					t.Errorf("%s: checked by %s, which is no test of this repository", b.where, name)
				}
			}
		case m[2] == "run by TestDocCommands":
			ran++
			t.Run(b.where, func(t *testing.T) { runDocBlock(t, b) })
		}
	}
	if ran == 0 {
		t.Error("no shell block is run as written")
	}
}

// testNames returns the names of the test functions of the repository.
func testNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	re := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "build") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

var netnsPrefix = regexp.MustCompile(`PSNS_PREFIX=\S+`)

// runDocBlock runs b's text with bash -e, bounded to 5 minutes, and fails
// the test if it fails. A block that makes network namespaces is skipped
// where they cannot be made.
func runDocBlock(t *testing.T, b docBlock) {
	if testing.Short() {
		t.Skip("the documentation's jobs run whole processes; skipped with -short")
	}
	text := b.text
	if strings.Contains(text, "netns.sh") {
		if reason := netnsUsable(); reason != "" {
			t.Skip(reason)
		}
		prefix := fmt.Sprintf("pst%dn%d", os.Getpid(), netnsSeq.Add(1))
		if !netnsPrefix.MatchString(text) {
			text = "export PSNS_PREFIX=" + prefix + "\n" + text
		}
		text = netnsPrefix.ReplaceAllString(text, "PSNS_PREFIX="+prefix)
		t.Cleanup(func() {
			down := exec.Command(netnsScript, "down")
			down.Env = append(os.Environ(), "PSNS_PREFIX="+prefix)
			down.Run() // nothing to remove when the block did
		})
	}
	dir := t.TempDir()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"scripts": filepath.Join(root, "scripts"), "build": binDir} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", text)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PS_LOCAL_TIMEOUT=120", "PS_START_TIMEOUT=60")
	// Its own process group, killed whole when it runs out of time, with
	// every job it started in the background.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s, run as written: %v\n%s\n%s", b.where, err, text, out)
	}
	t.Logf("%s ran as written:\n%s", b.where, out)
}
