package tests

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// With messages dropped at random and resending on, every request still
// completes exactly once and the job shuts down cleanly.
func TestResendUnderDrops(t *testing.T) {
	for _, drop := range []int{20, 30} {
		t.Run(fmt.Sprintf("drop=%d", drop), func(t *testing.T) {
			c := testcluster.New(t, 2, 2, testcluster.Options{Quiet: true, Tweak: func(cfg *postoffice.Config) {
				cfg.Resend = true
				cfg.ResendTimeout = 50 * time.Millisecond
				cfg.ResendMaxRetry = 30
				cfg.DropRate = drop
			}})
			for _, p := range c.Servers {
				s, _ := kv.NewKVServer[float32](p, 0)
				s.SetRequestHandle(kv.NewDefaultHandle[float32]().Handle)
			}
			var wg sync.WaitGroup
			for r, p := range c.Workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					w, _ := kv.NewKVWorker[float32](p, 0, 0)
					keys := make([]uint64, 100)
					vals := make([]float32, 100)
					for i := range keys {
						keys[i] = message.MaxKey/100*uint64(i) + uint64(r)
						vals[i] = float32(i)
					}
					if err := testcluster.PushRepeatPull(w, keys, vals, 10); err != nil {
						t.Errorf("worker %d: %v", r, err)
					}
				}()
			}
			wg.Wait()
			c.Finalize(t)
		})
	}
}

// When a server never acknowledges, the worker's Wait returns an error
// instead of hanging or killing the process.
func TestResendGivesUp(t *testing.T) {
	c := testcluster.New(t, 1, 1, testcluster.Options{Quiet: true, Tweak: func(cfg *postoffice.Config) {
		cfg.Resend = true
		cfg.ResendTimeout = 20 * time.Millisecond
		cfg.ResendMaxRetry = 3
	}})
	c.Servers[0].Van().SetDropRate(100)
	w, _ := kv.NewKVWorker[float32](c.Workers[0], 0, 0)
	ts, err := w.Push([]uint64{1}, []float32{1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ts); err == nil {
		t.Fatal("push to a server that drops everything succeeded")
	}
}

// test_kv_app through local.sh with resending on and 20% or 30% of received
// messages dropped: exact results and a clean exit. (By hand: repeat.sh 10
// of each passes.)
//
// PS_DROP_MSG without PS_RESEND turns resending on (C++ ps-lite hangs): the
// job completes too, and every process says why it resends.
func TestKVAppUnderDrops(t *testing.T) {
	// Parallel: its jobs mostly wait for resend timeouts, so they run beside each other and the other waiting rows once the package's sequential tests are done (make test's -parallel).
	t.Parallel()
	for _, c := range []struct {
		drop   string
		resend bool
	}{{"20", true}, {"30", true}, {"20", false}} {
		t.Run(fmt.Sprintf("drop=%s resend=%v", c.drop, c.resend), func(t *testing.T) {
			t.Parallel()
			env := []string{"PS_RESEND_TIMEOUT=50", "PS_DROP_MSG=" + c.drop}
			if c.resend {
				env = append(env, "PS_RESEND=1")
			}
			out := launch(t, env, "local.sh", "2", "2", bin("test_kv_app"))
			if n := strings.Count(out, "error: 0, 0"); n != 2 {
				t.Errorf("%d of 2 workers reported exact results:\n%s", n, out)
			}
			if n := strings.Count(out, "resending (PS_RESEND) is on"); c.resend != (n == 0) || !c.resend && n != 5 {
				t.Errorf("%d of 5 processes said PS_DROP_MSG turned resending on:\n%s", n, out)
			}
		})
	}
}
