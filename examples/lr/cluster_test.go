package main

// End-to-end tests: build the lr program, run real jobs (1 scheduler, 2
// servers, 2 workers over ZeroMQ) through scripts/local.sh on the data
// sets that the Debian packages install, and check the accuracy they report.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const (
	heartScale   = "/usr/share/doc/liblinear-tools/examples/heart_scale"
	fashionDir   = "/usr/share/datasets/fashion-mnist"
	fashionTrain = fashionDir + "/train-images-idx3-ubyte.gz"
	fashionTest  = fashionDir + "/t10k-images-idx3-ubyte.gz"
)

var (
	buildOnce sync.Once
	binPath   string
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// lrBinary builds the program once per test run.
func lrBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "lr-bin"); buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "lr")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// needFile skips the test when path is missing.
func needFile(t *testing.T, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is missing: install the Debian package %s (apt-get install %s, or make deps)", path, pkg, pkg)
	}
}

// job runs "scripts/local.sh servers workers lr args..." and returns its
// output; the test fails when the job fails.
func job(t *testing.T, servers, workers int, args ...string) string {
	t.Helper()
	cmdArgs := append([]string{fmt.Sprint(servers), fmt.Sprint(workers), lrBinary(t)}, args...)
	cmd := exec.Command(filepath.Join("..", "..", "scripts", "local.sh"), cmdArgs...)
	cmd.Env = append(os.Environ(), "PS_LOCAL_TIMEOUT=90", "PS_START_TIMEOUT=30")
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	if err := cmd.Run(); err != nil {
		t.Fatalf("local.sh %s: %v\n%s", strings.Join(cmdArgs, " "), err, buf.String())
	}
	return buf.String()
}

// standalone runs the program without a job.
func standalone(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(lrBinary(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("lr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var accuracyRE = regexp.MustCompile(`(?m)^final: .*accuracy ([0-9.]+) `)

// finalAccuracy returns the accuracy on the job's "final:" line.
func finalAccuracy(t *testing.T, out string) float64 {
	t.Helper()
	m := accuracyRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no final accuracy in the output:\n%s", out)
	}
	acc, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return acc
}

func predictAccuracy(t *testing.T, out string) float64 {
	t.Helper()
	var acc float64
	if _, err := fmt.Sscanf(out, "accuracy %g", &acc); err != nil {
		t.Fatalf("predict printed %q: %v", out, err)
	}
	return acc
}

// TestHeartScaleCluster trains binary logistic regression on heart_scale
// with 2 servers and 2 workers: 5-fold cross-validation under BSP and SSP,
// then a held-out run under ASP whose model the predict mode reloads.
// Chance (the majority class) is 150/270 = 0.556. The cross-validation
// accuracy was 0.8370 in every BSP job and 0.8333-0.8407 under SSP
// (staleness 1 bounds the reordering), idle and on busy cores.
func TestHeartScaleCluster(t *testing.T) {
	needFile(t, heartScale, "liblinear-tools")
	common := []string{"-train=" + heartScale, "-epochs=5", "-batch=8", "-lr=0.1"}
	for _, sync := range []string{"bsp", "ssp"} {
		out := job(t, 2, 2, append(common, "-cv=5", "-sync="+sync, "-staleness=1")...)
		if n := strings.Count(out, "heldout-acc"); n != 25 {
			t.Errorf("%s: %d progress lines, want 5 folds × 5 epochs:\n%s", sync, n, out)
		}
		if acc := finalAccuracy(t, out); acc < 0.75 {
			t.Errorf("%s: 5-fold cv accuracy %.4f, want >= 0.75:\n%s", sync, acc, out)
		}
		if !strings.Contains(out, "pulls held") {
			t.Errorf("%s: the servers did not report held pulls:\n%s", sync, out)
		}
	}
	// Under ASP the model depends on the order in which the workers' pushes
	// arrive, and the machine's load decides that order: a worker that is
	// descheduled for a while lets the other run ahead. With -holdout=0.3
	// (81 test examples) the -seed=1 split is a hard one: 0.73-0.74 when
	// the workers keep pace, down to 0.68-0.69 (55-56/81, below the bound)
	// when one runs ahead, as in CI. With -holdout=0.5 (135 test examples,
	// 81 of them negative, so a model that never learns scores 0.6) it was
	// 0.7704-0.8000 in 280 real jobs (idle, both cores busy, a worker
	// stopped for 0.05-1 s mid-training) and over 80,000 simulated
	// interleavings of the two workers' pulls and pushes on the two
	// servers, either worker running all its steps first included.
	dir := t.TempDir()
	model, plot := filepath.Join(dir, "heart.model"), filepath.Join(dir, "heart.png")
	out := job(t, 2, 2, append(common, "-opt=ftrl", "-alpha=0.5", "-holdout=0.5", "-sync=asp", "-model="+model, "-plot="+plot)...)
	if acc := finalAccuracy(t, out); acc < 0.7 {
		t.Errorf("asp ftrl: held-out accuracy %.4f, want >= 0.7:\n%s", acc, out)
	}
	if fi, err := os.Stat(plot); err != nil || fi.Size() < 1000 {
		t.Errorf("plot: %v", err)
	}
	if acc := predictAccuracy(t, standalone(t, "-mode=predict", "-model="+model, "-data="+heartScale)); acc < 0.75 {
		t.Errorf("predict: accuracy %.4f on the whole data set, want >= 0.75", acc)
	}
}

// TestFashionMNISTSubset trains softmax regression on the first 5,000
// Fashion-MNIST training images for 2 epochs with 2 servers and 2 workers,
// tests on the first 1,000 test images, then checks that predict scores the
// saved model the same on the IDX file and on its LIBSVM conversion.
func TestFashionMNISTSubset(t *testing.T) {
	needFile(t, fashionTrain, "dataset-fashion-mnist")
	needFile(t, fashionTest, "dataset-fashion-mnist")
	dir := t.TempDir()
	model := filepath.Join(dir, "fashion.model")
	out := job(t, 2, 2, "-train="+fashionTrain, "-test="+fashionTest, "-train-limit=5000", "-test-limit=1000",
		"-epochs=2", "-batch=20", "-lr=0.1", "-sync=bsp", "-model="+model)
	acc := finalAccuracy(t, out)
	if acc <= 0.7 {
		t.Errorf("test accuracy %.4f, want > 0.7:\n%s", acc, out)
	}
	if !strings.Contains(out, "softmax regression over 10 classes") {
		t.Errorf("not a 10-class model:\n%s", out)
	}
	got := predictAccuracy(t, standalone(t, "-mode=predict", "-model="+model, "-data="+fashionTest, "-limit=1000"))
	if got != acc {
		t.Errorf("predict: accuracy %.4f, the job reported %.4f", got, acc)
	}
	svm := filepath.Join(dir, "test.libsvm")
	standalone(t, "-mode=convert", "-data="+fashionTest, "-limit=1000", "-out="+svm)
	if got := predictAccuracy(t, standalone(t, "-mode=predict", "-model="+model, "-data="+svm)); got != acc {
		t.Errorf("predict on the LIBSVM conversion: accuracy %.4f, want %.4f", got, acc)
	}
}

// TestBadArguments checks that mistakes are reported, not panicked over.
func TestBadArguments(t *testing.T) {
	cases := map[string][]string{
		"-train is required":      {},
		"unknown consistency":     {"-train=x", "-sync=fast"},
		"unknown optimiser":       {"-train=x", "-opt=adam"},
		"-cv and -test":           {"-train=x", "-cv=5", "-test=y"},
		"-lr-decay is for":        {"-train=x", "-opt=ftrl", "-lr-decay=1"},
		"predict needs":           {"-mode=predict"},
		"unknown -mode":           {"-mode=serve"},
		"unexpected arguments":    {"-train=x", "extra"},
		"flag provided but not d": {"-nosuchflag"},
		"-lr must be a positive":  {"-train=x", "-lr=NaN"},
		"-l2 must be a number":    {"-train=x", "-l2=NaN"},
		"ftrl needs":              {"-train=x", "-opt=ftrl", "-alpha=+Inf"},
		"-holdout must be in":     {"-train=x", "-holdout=NaN"},
		"-lr-decay must be":       {"-train=x", "-lr-decay=NaN"},
		"-bias must be a finite":  {"-train=x", "-bias=Inf"},
	}
	for want, args := range cases {
		var stderr bytes.Buffer
		_, err := parseFlags(args, &stderr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v, want %q", args, err, want)
		}
	}
	// A missing file fails predict cleanly.
	cfg := &Config{Mode: "predict", ModelPath: filepath.Join(t.TempDir(), "none"), Data: "x"}
	if err := run(cfg, &bytes.Buffer{}); err == nil || !os.IsNotExist(err) {
		t.Errorf("predict with a missing model: %v", err)
	}
}
