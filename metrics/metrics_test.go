package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gopslite/pslite/message"
)

// Every method is a no-op on a nil *Metrics (metrics off).
func TestNilMetricsIsSafe(t *testing.T) {
	var m *Metrics
	meta := &message.Meta{Push: true, Request: true, Recver: 8}
	m.Sent(meta, 10)
	m.Received(meta, 10)
	m.Dropped("malformed")
	m.Resent()
	m.Duplicate()
	m.Connection(8, true)
	m.NodeDead(9)
	m.WorkerRequest(0, 0, "push")
	m.WorkerLatency("push", time.Millisecond)
	m.ServerRequest(0, 0, "push", time.Millisecond)
	m.BarrierWait(7, time.Millisecond)
	m.GaugeFunc("x", "x", func() float64 { return 1 })
	if m.Registry() != nil {
		t.Error("a nil Metrics has a registry")
	}
}

// value reads a counter's value.
func value(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// Counts land in the series their labels name, through the caches too.
func TestSeries(t *testing.T) {
	m := New()
	push := &message.Meta{Push: true, Request: true, Recver: 8, Sender: 9}
	pull := &message.Meta{Pull: true, Recver: 9, Sender: 8}
	barrier := &message.Meta{Request: true, Recver: 1, Control: message.Control{Cmd: message.CmdBarrier}}
	for range 3 {
		m.Sent(push, 100)
	}
	m.Sent(barrier, 7)
	m.Received(pull, 50)
	m.WorkerRequest(0, 1, "push")
	m.WorkerRequest(0, 1, "push")
	m.ServerRequest(0, 1, "pull", time.Millisecond)
	m.WorkerLatency("pushpull", 2*time.Millisecond)
	m.Dropped("not_member")
	checks := []struct {
		name      string
		got, want float64
	}{
		{"msgsSent", value(t, m.msgsSent.WithLabelValues("server", "push", "true")), 3},
		{"msgsSent", value(t, m.msgsSent.WithLabelValues("scheduler", "barrier", "true")), 1},
		{"bytesSent", value(t, m.bytesSent.WithLabelValues("server")), 300},
		{"msgsRecv", value(t, m.msgsRecv.WithLabelValues("server", "pull", "false")), 1},
		{"bytesRecv", value(t, m.bytesRecv.WithLabelValues("server")), 50},
		{"workerRequests", value(t, m.workerRequests.WithLabelValues("0", "1", "push")), 2},
		{"serverRequests", value(t, m.serverRequests.WithLabelValues("0", "1", "pull")), 1},
		{"drops", value(t, m.drops.WithLabelValues("not_member")), 1},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "pslite_worker_request_seconds" {
			if len(f.Metric) != 1 || f.Metric[0].GetHistogram().GetSampleCount() != 1 {
				t.Errorf("latency: %v", f)
			}
		}
	}
	if v := m.Value("pslite_messages_sent_total", map[string]string{"peer": "server"}); v != 3 {
		t.Errorf("Value of messages sent to servers: %v, want 3", v)
	}
	if v := m.Value("pslite_worker_request_seconds", nil); v != 1 {
		t.Errorf("Value of a histogram: %v samples, want 1", v)
	}
	m.SnapshotCommitted(7)
	if v := m.Value("pslite_snapshot_committed_generation", nil); v != 7 {
		t.Errorf("Value of a gauge: %v, want 7", v)
	}
	if v := m.Value("pslite_no_such_metric", nil); v != 0 {
		t.Errorf("Value of a missing metric: %v", v)
	}
	for id, want := range map[int]string{1: "scheduler", 8: "server", 9: "worker", 5: "unknown", message.Empty: "unknown"} {
		if got := PeerRole(id); got != want {
			t.Errorf("PeerRole(%d) = %s, want %s", id, got, want)
		}
	}
	if k := Kind(&message.Meta{Push: true, Pull: true}); k != "pushpull" {
		t.Errorf("Kind of a push-pull: %s", k)
	}
	if k := Kind(&message.Meta{SimpleApp: true, Request: true}); k != "simple" {
		t.Errorf("Kind of a SimpleApp message: %s", k)
	}
}
