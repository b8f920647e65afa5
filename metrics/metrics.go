package metrics

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
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
	stateLost            *prometheus.CounterVec // server
	viewChanges          prometheus.Counter
	rangesCopied         prometheus.Counter
	replicationUnread    prometheus.Counter
	snapshotWrites       *prometheus.HistogramVec
	replicationMsgs      *prometheus.CounterVec
	replicationEntries   prometheus.Counter
	snapshotCommitted    prometheus.Gauge
	barrierWait          *prometheus.HistogramVec

	// Children of the vectors above for the label values in use, looked
	// up without hashing label strings on the hot paths.
	sentC, recvC           [nPeers * nKinds * 2]atomic.Pointer[prometheus.Counter]
	bytesSentC, bytesRecvC [nPeers]atomic.Pointer[prometheus.Counter]
	latencyC, handleC      [nKinds]atomic.Pointer[prometheus.Observer]
	workerReqC, serverReqC sync.Map // reqKey -> prometheus.Counter
}

// reqKey names a series of the request counters.
type reqKey struct {
	app, customer int
	kind          string
}

// Label values by index, for the caches.
var (
	peers = [...]string{"scheduler", "server", "worker", "unknown"}
	kinds = [...]string{"push", "pull", "pushpull", "simple", "none", "add_node", "barrier", "heartbeat", "ack", "terminate", "control"}
)

const (
	nPeers = len(peers)
	nKinds = len(kinds)
)

// child returns the cached child of a vector, creating it on first use.
func child[T any](slot *atomic.Pointer[T], make func() T) T {
	if c := slot.Load(); c != nil {
		return *c
	}
	c := make()
	slot.Store(&c)
	return c
}

func peerIndex(id int) int {
	r, ok := message.RoleOfID(id)
	switch {
	case !ok:
		return 3
	case r == message.RoleScheduler:
		return 0
	case r == message.RoleServer:
		return 1
	}
	return 2
}

func kindIndex(meta *message.Meta) int {
	if meta.IsControl() {
		switch meta.Control.Cmd {
		case message.CmdAddNode:
			return 5
		case message.CmdBarrier:
			return 6
		case message.CmdHeartbeat:
			return 7
		case message.CmdAck:
			return 8
		case message.CmdTerminate:
			return 9
		}
		return 10
	}
	return requestKindIndex(meta.Push, meta.Pull, meta.SimpleApp)
}

func requestKindIndex(push, pull, simple bool) int {
	switch {
	case simple:
		return 3
	case push && pull:
		return 2
	case push:
		return 0
	case pull:
		return 1
	}
	return 4
}

func kindOf(name string) int {
	for i, k := range kinds {
		if k == name {
			return i
		}
	}
	return 4
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
	m.stateLost = counterVec("state_lost_pushes_total", "A worker's pushes, answered by a server, that were lost with the server's state (no replica took its place), by the server's rank.", "server")
	m.viewChanges = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pslite", Name: "view_changes_total", Help: "Views of a managed job taken (which servers hold each key range)."})
	m.rangesCopied = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pslite", Name: "ranges_copied_total", Help: "Key ranges a server copied from another to join their chain."})
	m.replicationMsgs = counterVec("replication_messages_total", "Messages a server sent other servers to replicate key ranges, by kind (forward: one entry; batch: several; ack, copy, refuse; askcopy and sayagain, after a message that could not be read).", "kind")
	m.replicationEntries = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pslite", Name: "replication_entries_total", Help: "Entries (requests, snapshot cuts) a server passed on down a chain, alone or in batches."})
	m.reg.MustRegister(m.replicationEntries)
	m.snapshotWrites = histogramVec("snapshot_write_seconds", "Time a server took to write one key range of one store to a snapshot, by outcome (ok, error).", "outcome")
	m.snapshotCommitted = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "pslite", Name: "snapshot_committed_generation", Help: "The last snapshot this server marked complete on disk (0: none yet)."})
	m.replicationUnread = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "pslite", Name: "replication_unreadable_total", Help: "Messages from other servers of a managed job dropped because they could not be read (each has the server ask for copies of the ranges it lacks)."})
	m.reg.MustRegister(m.viewChanges, m.rangesCopied, m.snapshotCommitted, m.replicationUnread)
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
func PeerRole(id int) string { return peers[peerIndex(id)] }

// Kind names what msg carries for labels: the control command (add_node,
// barrier, heartbeat, ack, terminate), simple (SimpleApp), or push, pull or
// pushpull.
func Kind(meta *message.Meta) string { return kinds[kindIndex(meta)] }

// RequestKind names a data message's kind: push, pull, pushpull or simple.
func RequestKind(push, pull, simple bool) string { return kinds[requestKindIndex(push, pull, simple)] }

// Sent counts a message of n bytes sent.
func (m *Metrics) Sent(meta *message.Meta, n int) {
	if m == nil {
		return
	}
	m.count(&m.sentC, &m.bytesSentC, m.msgsSent, m.bytesSent, int(meta.Recver), meta, n)
}

// Received counts a message of n bytes received and accepted.
func (m *Metrics) Received(meta *message.Meta, n int) {
	if m == nil {
		return
	}
	m.count(&m.recvC, &m.bytesRecvC, m.msgsRecv, m.bytesRecv, int(meta.Sender), meta, n)
}

// count counts a message of n bytes to or from node id.
func (m *Metrics) count(msgs *[nPeers * nKinds * 2]atomic.Pointer[prometheus.Counter], bytes *[nPeers]atomic.Pointer[prometheus.Counter],
	msgVec, byteVec *prometheus.CounterVec, id int, meta *message.Meta, n int) {
	p, k, r := peerIndex(id), kindIndex(meta), 0
	if meta.Request {
		r = 1
	}
	child(&msgs[(p*nKinds+k)*2+r], func() prometheus.Counter {
		return msgVec.WithLabelValues(peers[p], kinds[k], strconv.FormatBool(meta.Request))
	}).Inc()
	child(&bytes[p], func() prometheus.Counter { return byteVec.WithLabelValues(peers[p]) }).Add(float64(n))
}

// requestCounter returns the series of vec for key, cached in cache.
func requestCounter(cache *sync.Map, vec *prometheus.CounterVec, key reqKey) prometheus.Counter {
	if c, ok := cache.Load(key); ok {
		return c.(prometheus.Counter)
	}
	c := vec.WithLabelValues(strconv.Itoa(key.app), strconv.Itoa(key.customer), key.kind)
	cache.Store(key, c)
	return c
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

// StateLost counts pushes a worker lost with server rank's state.
func (m *Metrics) StateLost(rank int, pushes int64) {
	if m == nil {
		return
	}
	m.stateLost.WithLabelValues(fmt.Sprint(rank)).Add(float64(pushes))
}

// ViewChange counts a view of a managed job taken.
func (m *Metrics) ViewChange() {
	if m != nil {
		m.viewChanges.Inc()
	}
}

// RangeCopied counts a key range copied to join its chain.
func (m *Metrics) RangeCopied() {
	if m != nil {
		m.rangesCopied.Inc()
	}
}

// ReplicationUnreadable counts a message from another server dropped
// because it could not be read.
func (m *Metrics) ReplicationUnreadable() {
	if m != nil {
		m.replicationUnread.Inc()
	}
}

// ReplicationSent counts a replication message of kind sent, carrying
// entries entries.
func (m *Metrics) ReplicationSent(kind string, entries int) {
	if m == nil {
		return
	}
	m.replicationMsgs.WithLabelValues(kind).Inc()
	if entries > 0 {
		m.replicationEntries.Add(float64(entries))
	}
}

// SnapshotWrite records a key range written to a snapshot, or that
// failed to be.
func (m *Metrics) SnapshotWrite(d time.Duration, err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.snapshotWrites.WithLabelValues(outcome).Observe(d.Seconds())
}

// SnapshotCommitted records the last snapshot marked complete on disk.
func (m *Metrics) SnapshotCommitted(gen uint64) {
	if m != nil {
		m.snapshotCommitted.Set(float64(gen))
	}
}

// WorkerRequest counts a KV request sent by a worker.
func (m *Metrics) WorkerRequest(app, customer int, kind string) {
	if m == nil {
		return
	}
	requestCounter(&m.workerReqC, m.workerRequests, reqKey{app, customer, kind}).Inc()
}

// WorkerLatency records how long a KV request took, at the worker.
func (m *Metrics) WorkerLatency(kind string, d time.Duration) {
	if m == nil {
		return
	}
	k := kindOf(kind)
	child(&m.latencyC[k], func() prometheus.Observer { return m.workerLatency.WithLabelValues(kinds[k]) }).Observe(d.Seconds())
}

// ServerRequest records a KV request a server handled and how long its
// handle ran.
func (m *Metrics) ServerRequest(app, customer int, kind string, d time.Duration) {
	if m == nil {
		return
	}
	requestCounter(&m.serverReqC, m.serverRequests, reqKey{app, customer, kind}).Inc()
	k := kindOf(kind)
	child(&m.handleC[k], func() prometheus.Observer { return m.serverHandle.WithLabelValues(kinds[k]) }).Observe(d.Seconds())
}

// BarrierWait records how long a barrier on group took.
func (m *Metrics) BarrierWait(group int, d time.Duration) {
	if m == nil {
		return
	}
	m.barrierWait.WithLabelValues(strconv.Itoa(group)).Observe(d.Seconds())
}

// Value returns the sum, over the series of the metric named name (with
// its "pslite_" prefix) whose labels include every pair of labels, of
// their values: a counter's or gauge's value, a histogram's sample count.
// It is 0 for a metric with no such series. Tests and tools read a node's
// metrics with it without scraping.
func (m *Metrics) Value(name string, labels map[string]string) float64 {
	if m == nil {
		return 0
	}
	fams, err := m.reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			switch {
			case s.Counter != nil:
				sum += s.GetCounter().GetValue()
			case s.Gauge != nil:
				sum += s.GetGauge().GetValue()
			case s.Histogram != nil:
				sum += float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}
