package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gopslite/pslite/message"
)

// Metrics holds one node's collectors.
type Metrics struct {
	reg *prometheus.Registry

	msgsSent, msgsRecv   *prometheus.CounterVec // peer, kind, request
	bytesSent, bytesRecv *prometheus.CounterVec // peer
	workerRequests       *prometheus.CounterVec // app, customer, kind
	workerLatency        *prometheus.HistogramVec
	serverRequests       *prometheus.CounterVec // app, customer, kind
	serverHandle         *prometheus.HistogramVec
	resends              prometheus.Counter
	duplicates           prometheus.Counter
	drops                *prometheus.CounterVec // reason
	connEvents           *prometheus.CounterVec // peer, event
	deadNodes            *prometheus.CounterVec // role
	barrierWait          *prometheus.HistogramVec
}

// New returns collectors registered in a registry of their own.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "pslite", Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	histogramVec := func(name, help string, labels ...string) *prometheus.HistogramVec {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "pslite", Name: name, Help: help,
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18)}, labels) // 50 us .. 6.5 s
		m.reg.MustRegister(h)
		return h
	}
	m.msgsSent = counterVec("messages_sent_total", "Messages sent, by receiver role, kind (push, pull, pushpull, simple, or the control command) and whether a request.", "peer", "kind", "request")
	m.msgsRecv = counterVec("messages_received_total", "Messages received and accepted, by sender role, kind and whether a request.", "peer", "kind", "request")
	m.bytesSent = counterVec("bytes_sent_total", "Bytes sent (meta and data frames), by receiver role.", "peer")
	m.bytesRecv = counterVec("bytes_received_total", "Bytes received and accepted (meta and data frames), by sender role.", "peer")
	m.workerRequests = counterVec("worker_requests_total", "KV request messages a worker sent to servers (one per server a request goes to), by app, customer and kind.", "app", "customer", "kind")
	m.workerLatency = histogramVec("worker_request_seconds", "Time from a KV request's send to its last response, at the worker, by kind.", "kind")
	m.serverRequests = counterVec("server_requests_total", "KV requests a server handled, by app, customer and kind.", "app", "customer", "kind")
	m.serverHandle = histogramVec("server_handle_seconds", "Time a server's request handle ran, by kind.", "kind")
	m.resends = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pslite", Name: "resends_total", Help: "Messages resent for want of an ACK (PS_RESEND)."})
	m.duplicates = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pslite", Name: "duplicates_total", Help: "Received messages dropped as duplicates (PS_RESEND)."})
	m.reg.MustRegister(m.resends, m.duplicates)
	m.drops = counterVec("dropped_messages_total", "Received messages dropped, by reason.", "reason")
	m.connEvents = counterVec("connection_events_total", "Connections to peers going up or down, by peer role.", "peer", "event")
	m.deadNodes = counterVec("dead_nodes_total", "Nodes this node declared dead (the scheduler: servers and workers; the others: the scheduler), by role.", "role")
	m.barrierWait = histogramVec("barrier_wait_seconds", "Time from a barrier request to its release, by group.", "group")
	return m
}

// Registry returns the registry the collectors are in.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// GaugeFunc registers a gauge whose value f computes when scraped.
func (m *Metrics) GaugeFunc(name, help string, f func() float64) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "pslite", Name: name, Help: help}, f))
}

// PeerRole names the role of node id for labels: scheduler, server,
// worker, or unknown.
func PeerRole(id int) string {
	if r, ok := message.RoleOfID(id); ok {
		return r.String()
	}
	return "unknown"
}

// Kind names what msg carries for labels: the control command (add_node,
// barrier, heartbeat, ack, terminate), simple (SimpleApp), or push, pull or
// pushpull.
func Kind(meta *message.Meta) string {
	if meta.IsControl() {
		switch meta.Control.Cmd {
		case message.CmdAddNode:
			return "add_node"
		case message.CmdBarrier:
			return "barrier"
		case message.CmdHeartbeat:
			return "heartbeat"
		case message.CmdAck:
			return "ack"
		case message.CmdTerminate:
			return "terminate"
		}
		return "control"
	}
	return RequestKind(meta.Push, meta.Pull, meta.SimpleApp)
}

// RequestKind names a data message's kind: push, pull, pushpull or simple.
func RequestKind(push, pull, simple bool) string {
	switch {
	case simple:
		return "simple"
	case push && pull:
		return "pushpull"
	case push:
		return "push"
	case pull:
		return "pull"
	}
	return "none"
}

// Sent counts a message of n bytes sent.
func (m *Metrics) Sent(meta *message.Meta, n int) {
	if m == nil {
		return
	}
	peer := PeerRole(int(meta.Recver))
	m.msgsSent.WithLabelValues(peer, Kind(meta), strconv.FormatBool(meta.Request)).Inc()
	m.bytesSent.WithLabelValues(peer).Add(float64(n))
}

// Received counts a message of n bytes received and accepted.
func (m *Metrics) Received(meta *message.Meta, n int) {
	if m == nil {
		return
	}
	peer := PeerRole(int(meta.Sender))
	m.msgsRecv.WithLabelValues(peer, Kind(meta), strconv.FormatBool(meta.Request)).Inc()
	m.bytesRecv.WithLabelValues(peer).Add(float64(n))
}

// Dropped counts a received message dropped for reason (malformed,
// non_member, oversized, early, test_drop, duplicate_response, ...).
func (m *Metrics) Dropped(reason string) {
	if m == nil {
		return
	}
	m.drops.WithLabelValues(reason).Inc()
}

// Resent counts a message resent.
func (m *Metrics) Resent() {
	if m == nil {
		return
	}
	m.resends.Inc()
}

// Duplicate counts a received duplicate.
func (m *Metrics) Duplicate() {
	if m == nil {
		return
	}
	m.duplicates.Inc()
}

// Connection counts a connection to node id going up or down.
func (m *Metrics) Connection(id int, up bool) {
	if m == nil {
		return
	}
	event := "down"
	if up {
		event = "up"
	}
	m.connEvents.WithLabelValues(PeerRole(id), event).Inc()
}

// NodeDead counts node id declared dead.
func (m *Metrics) NodeDead(id int) {
	if m == nil {
		return
	}
	m.deadNodes.WithLabelValues(PeerRole(id)).Inc()
}

// WorkerRequest counts a KV request sent by a worker.
func (m *Metrics) WorkerRequest(app, customer int, kind string) {
	if m == nil {
		return
	}
	m.workerRequests.WithLabelValues(strconv.Itoa(app), strconv.Itoa(customer), kind).Inc()
}

// WorkerLatency records how long a KV request took, at the worker.
func (m *Metrics) WorkerLatency(kind string, d time.Duration) {
	if m == nil {
		return
	}
	m.workerLatency.WithLabelValues(kind).Observe(d.Seconds())
}

// ServerRequest records a KV request a server handled and how long its
// handle ran.
func (m *Metrics) ServerRequest(app, customer int, kind string, d time.Duration) {
	if m == nil {
		return
	}
	m.serverRequests.WithLabelValues(strconv.Itoa(app), strconv.Itoa(customer), kind).Inc()
	m.serverHandle.WithLabelValues(kind).Observe(d.Seconds())
}

// BarrierWait records how long a barrier on group took.
func (m *Metrics) BarrierWait(group int, d time.Duration) {
	if m == nil {
		return
	}
	m.barrierWait.WithLabelValues(strconv.Itoa(group)).Observe(d.Seconds())
}
