// Package metrics counts what a node does, for Prometheus: messages and
// bytes by peer role and kind, KV requests and their latency, server handle
// time, resends, duplicates, drops, connection events, dead nodes, barrier
// waits, and gauges for the receive queues and requests in flight.
//
// A node's Metrics is nil when metrics are off (the default): every method
// is safe on a nil *Metrics and then does nothing, so the code that counts
// costs a nil check. With PS_METRICS_ADDR set, the postoffice creates one,
// registers it in a registry of the node's own and serves it at /metrics,
// with Go's profiles at /debug/pprof/ (see Serve).
package metrics
