package tests

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gopslite/pslite/internal/testcluster"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// scrape fetches and parses a node's /metrics.
func scrape(t *testing.T, p *postoffice.Postoffice) map[string]*dto.MetricFamily {
	t.Helper()
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + p.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, b)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// sum adds the values (counters, gauges; histograms: their counts) of the
// family's series whose labels include want.
func sum(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	total := 0.0
	for _, m := range f.Metric {
		ok := true
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// TestMetricsAgreeWithTheJob runs a 2x2 job with metrics on (every node on
// a port of its own), has each worker push and pull a known number of
// times, scrapes every node, and checks that the counts agree with what the
// job did and with each other: requests sent by workers = requests handled
// by servers, messages sent = messages received, one latency sample per
// request, the barriers timed, and /debug/pprof/ served.
func TestMetricsAgreeWithTheJob(t *testing.T) {
	c := testcluster.New(t, 2, 2, testcluster.Options{Quiet: true, Tweak: func(cfg *postoffice.Config) {
		cfg.MetricsAddr = "127.0.0.1:0"
	}})
	serveKV(t, c)
	const rounds = 25
	eachWorker(t, c, func(r int, w *kv.KVWorker[float32]) error {
		keys := make([]uint64, 100) // spread over both servers
		for i := range keys {
			keys[i] = message.MaxKey/100*uint64(i) + uint64(r)
		}
		return testcluster.PushRepeatPull(w, keys, make([]float32, len(keys)), rounds)
	})
	fams := map[*postoffice.Postoffice]map[string]*dto.MetricFamily{}
	for _, p := range c.All() {
		fams[p] = scrape(t, p)
	}
	total := func(nodes []*postoffice.Postoffice, name string, labels map[string]string) float64 {
		s := 0.0
		for _, p := range nodes {
			s += sum(fams[p], name, labels)
		}
		return s
	}
	// Each worker: rounds pushes and one pull, each sent to both servers.
	const perWorker = 2 * (rounds + 1)
	for _, kind := range []string{"push", "pull"} {
		n := rounds
		if kind == "pull" {
			n = 1
		}
		sent := total(c.Workers, "pslite_worker_requests_total", map[string]string{"kind": kind})
		handled := total(c.Servers, "pslite_server_requests_total", map[string]string{"kind": kind})
		if want := float64(2 * 2 * n); sent != want || handled != want {
			t.Errorf("%s requests: workers sent %v, servers handled %v, want %v", kind, sent, handled, want)
		}
		msgsSent := total(c.Workers, "pslite_messages_sent_total", map[string]string{"peer": "server", "kind": kind, "request": "true"})
		msgsRecv := total(c.Servers, "pslite_messages_received_total", map[string]string{"peer": "worker", "kind": kind, "request": "true"})
		answers := total(c.Workers, "pslite_messages_received_total", map[string]string{"peer": "server", "kind": kind, "request": "false"})
		if msgsSent != sent || msgsRecv != sent || answers != sent {
			t.Errorf("%s messages: %v sent, %v received by servers, %v answers; want %v each", kind, msgsSent, msgsRecv, answers, sent)
		}
		latencies := total(c.Workers, "pslite_worker_request_seconds", map[string]string{"kind": kind})
		if want := float64(2 * n); latencies != want {
			t.Errorf("%s latency samples: %v, want one per request (%v)", kind, latencies, want)
		}
		handles := total(c.Servers, "pslite_server_handle_seconds", map[string]string{"kind": kind})
		if handles != sent {
			t.Errorf("%s handle-time samples: %v, want %v", kind, handles, sent)
		}
	}
	if got := total(c.Workers, "pslite_worker_requests_total", nil); got != 2*perWorker {
		t.Errorf("workers sent %v request messages in all, want %v", got, 2*perWorker)
	}
	// Bytes: what the workers sent the servers arrived.
	if s, r := total(c.Workers, "pslite_bytes_sent_total", map[string]string{"peer": "server"}),
		total(c.Servers, "pslite_bytes_received_total", map[string]string{"peer": "worker"}); s == 0 || r < s {
		t.Errorf("workers sent %v bytes to servers, servers received %v from workers", s, r)
	}
	// The start barrier was timed everywhere; nothing was dropped, resent
	// or found dead; nothing is in flight or queued now.
	for _, p := range c.All() {
		f := fams[p]
		if n := sum(f, "pslite_barrier_wait_seconds", nil); n < 1 {
			t.Errorf("node %d: %v barrier waits recorded", p.MyID(), n)
		}
		for _, name := range []string{"pslite_dropped_messages_total", "pslite_resends_total", "pslite_dead_nodes_total", "pslite_requests_in_flight", "pslite_receive_queue_messages", "pslite_held_messages"} {
			if n := sum(f, name, nil); n != 0 {
				t.Errorf("node %d: %s = %v, want 0", p.MyID(), name, n)
			}
		}
		if sum(f, "pslite_connection_events_total", map[string]string{"event": "up"}) == 0 {
			t.Errorf("node %d: no connection seen up", p.MyID())
		}
		if _, ok := f["go_goroutines"]; !ok {
			t.Errorf("node %d: no Go runtime metrics", p.MyID())
		}
	}
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/", c.Servers[0].MetricsAddr()))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine") {
		t.Errorf("/debug/pprof/: %s", resp.Status)
	}
	c.Finalize(t)
	if _, err := http.Get("http://" + c.Servers[0].MetricsAddr() + "/metrics"); err == nil {
		t.Error("the metrics server still answers after Finalize")
	}
}
