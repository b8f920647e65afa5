package tests

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/van"
)

func curveEnv(t *testing.T) []string {
	k, err := van.NewCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"PS_CURVE_PUBLIC_KEY=" + k.Public, "PS_CURVE_SECRET_KEY=" + k.Secret}
}

// With CURVE on, ps-lite's programs run unchanged.
func TestCurveJob(t *testing.T) {
	out := launch(t, curveEnv(t), "local.sh", "2", "2", bin("test_kv_app"))
	if n := strings.Count(out, "error: 0, 0"); n != 2 {
		t.Errorf("%d of 2 workers reported exact results with CURVE on:\n%s", n, out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A node that does not hold the job's keys cannot register: the scheduler
// refuses its connection and says so in its log.
func TestCurveRefusesStranger(t *testing.T) {
	job, _ := van.NewCurveKeys()
	other, _ := van.NewCurveKeys()
	port := testcluster.FreePort(t)
	var schedLog syncBuffer
	mk := func(role message.Role, keys *van.CurveKeys, log zerolog.Logger) *postoffice.Postoffice {
		p, err := postoffice.New(postoffice.Config{Role: role, NumServers: 1, NumWorkers: 1,
			SchedulerHost: "127.0.0.1", SchedulerPort: port, Host: "127.0.0.1", Curve: keys}, postoffice.WithLogger(log))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	quiet := zerolog.Nop()
	sched := mk(message.RoleScheduler, &job, zerolog.New(&schedLog).Level(zerolog.WarnLevel))
	server := mk(message.RoleServer, &job, quiet)
	stranger := mk(message.RoleWorker, &other, quiet)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	err := testcluster.Each([]*postoffice.Postoffice{sched, server, stranger}, func(p *postoffice.Postoffice) error {
		return p.Start(ctx, 0, true)
	})
	if err == nil {
		t.Fatal("a worker with the wrong keys joined the job")
	}
	for _, p := range []*postoffice.Postoffice{sched, server, stranger} {
		p.Finalize(context.Background(), 0, false)
	}
	if !strings.Contains(schedLog.String(), "refused a connection") {
		t.Errorf("the scheduler did not log the refusal; its log:\n%s", schedLog.String())
	}
	if !strings.Contains(err.Error(), "missing 0 of 1 servers and 1 of 1 workers") && !strings.Contains(err.Error(), "did not join") {
		t.Errorf("unexpected start error: %v", err)
	}
}
