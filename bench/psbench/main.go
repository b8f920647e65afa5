// Command psbench measures push/pull throughput, latency, small-request
// rate and memory growth of a running job, next to two baselines moving
// the same bytes between the same processes, so every figure can be read as
// a ratio: raw ZeroMQ sockets, and plain TCP, the limit.
//
//	scripts/local.sh 1 1 build/psbench -mode=all -n=10000000
//	build/psbench report < results.txt > docs/PERFORMANCE.md
//	build/psbench faultcost   # microseconds to fault in a fresh 4 KiB page
//
// Worker rank 0 prints one JSON object per result on lines starting with
// "RESULT " and a human-readable table at the end. Servers store nothing:
// a push is answered empty, a pull with zeros of the right length.
//
// Every measurement alternates with its baselines in the same run, so that
// a drift in the machine's speed hits them all: the same bytes between the
// same processes over bare libzmq sockets driven from C (see raw.go) and
// over plain TCP connections with warm buffers (tcp.go).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gopslite/pslite/internal/prog"
	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/ps"
)

var (
	mode     = flag.String("mode", "all", "bulk, latency, window, memory or all (comma-separated)")
	numKeys  = flag.Int("n", 1000000, "keys per bulk request")
	valLen   = flag.Int("k", 1, "values per key")
	repeat   = flag.Int("repeat", 5, "repetitions of each bulk measurement (the median is reported)")
	iters    = flag.Int("iters", 2000, "round trips for the latency measurement")
	window   = flag.Int("window", 64, "outstanding requests in the window measurement")
	requests = flag.Int("requests", 100000, "requests in the window measurement")
	syncReqs = flag.Int("sync-requests", -1, "requests in the synchronous rate measurement (-1: a tenth of -requests; 0: none)")
	memReqs  = flag.Int("mem-requests", 1000000, "requests in the memory measurement")
	label    = flag.String("label", "", "free text added to every result (e.g. the layout)")
	keyKind  = flag.String("keys", "spread", "bulk keys: spread (evenly over the key space), hashed (splitmix64 of rank*n+i, sorted, as hashed features are; cpp-psbench computes the same) or jittered (spread, each moved up by splitmix64 of rank*n+i's low -jitter bits: gaps of -jitter+1 bits around the even one; Go only)")
	jitter   = flag.Int("jitter", 20, "-keys=jittered: bits each key moves by (1 to 32)")
	bulkOps  = flag.String("ops", "push,pull,pushpull", "bulk operations to measure, in this order")
	lendReqs = flag.Bool("lend", true, "servers take lent requests (KVServer.LendRequests; the handle keeps nothing of a request)")
	withRaw  = flag.Bool("raw", true, "measure the baselines too, raw ZeroMQ and plain TCP (false: ours only, for profiling)")
	pieces   = flag.Int("pieces", 1, "bulk push only: send the keys as this many pushes in flight at once, each a slice of every server's part (the baselines still move them whole)")
)

// Result is one measurement.
type Result struct {
	Name    string  `json:"name"`
	Label   string  `json:"label,omitempty"`
	Servers int     `json:"servers"`
	Workers int     `json:"workers"`
	Keys    int     `json:"keys,omitempty"`
	Bytes   int64   `json:"bytes,omitempty"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	Extra   string  `json:"extra,omitempty"`
	// Raw is the same measurement over bare ZeroMQ, and Ratio ours' cost
	// over it (Value/Raw, or Raw/Value for a rate).
	Raw   float64 `json:"raw,omitempty"`
	Ratio float64 `json:"ratio,omitempty"`
	// TCP is the same measurement over plain TCP, the limit, and TCPRatio
	// ours' cost over it.
	TCP      float64 `json:"tcp,omitempty"`
	TCPRatio float64 `json:"tcp_ratio,omitempty"`
}

// SimpleApp heads a server answers.
const (
	cmdRSS     = 1 // its RSS in bytes
	cmdRawAddr = 2 // the endpoint of its raw server
	cmdTCPAddr = 3 // the address of its TCP limit server
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "report" {
		fs := flag.NewFlagSet("report", flag.ExitOnError)
		fs.StringVar(&reportVan, "van", "zmtp", "the transport our nodes used (DMLC_PS_VAN_TYPE), named in the report")
		fs.Parse(os.Args[2:])
		if err := report(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "psbench report:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "compare" {
		fs := flag.NewFlagSet("compare", flag.ExitOnError)
		a := fs.String("a", "before", "the build costs are relative to")
		b := fs.String("b", "after", "the build whose cost is shown")
		fs.Parse(os.Args[2:])
		if err := compare(os.Stdin, os.Stdout, *a, *b); err != nil {
			fmt.Fprintln(os.Stderr, "psbench compare:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "faultcost" {
		d, err := faultCost()
		if err != nil {
			fmt.Fprintln(os.Stderr, "psbench faultcost:", err)
			os.Exit(1)
		}
		fmt.Printf("%.2f\n", float64(d.Nanoseconds())/1e3) // microseconds per 4 KiB page
		return
	}
	flag.Parse()
	if *keyKind != "spread" && *keyKind != "hashed" && *keyKind != "jittered" || *jitter < 1 || *jitter > 32 {
		fmt.Fprintf(os.Stderr, "psbench: -keys=%s -jitter=%d: want spread, hashed or jittered, and 1 to 32 bits\n", *keyKind, *jitter)
		os.Exit(2)
	}
	defer prog.Profile()()
	prog.Check(ps.Start(0), "start")
	if ps.IsServer() {
		node, err := ps.Node()
		prog.Check(err, "node")
		raw, err := startRawServer(node.Van().MyNode().Hostname)
		prog.Check(err, "raw server")
		ps.RegisterExitCallback(raw.Close)
		tcp, err := startTCPServer(node.Van().MyNode().Hostname)
		prog.Check(err, "tcp limit server")
		ps.RegisterExitCallback(tcp.Close)
		s, err := ps.NewKVServer[float32](0)
		prog.Check(err, "server")
		s.SetSimpleRequestHandle(func(d kv.SimpleData, app *kv.SimpleApp) {
			body := ""
			switch d.Head {
			case cmdRSS:
				body = fmt.Sprint(settledRSS())
			case cmdRawAddr:
				body = raw.endpoint
			case cmdTCPAddr:
				body = tcp.addr
			}
			app.Response(d, body)
		})
		s.LendRequests(*lendReqs)
		if node.Managed() {
			// Replicated (PS_REPLICAS): the same answers, through a store
			// the framework replicates.
			prog.Check(s.SetStore(emptyStore{}), "store")
		} else {
			prog.Check(s.SetRequestHandle(emptyHandle), "handle")
		}
		ps.RegisterExitCallback(s.Close)
	}
	if ps.IsWorker() {
		w, err := ps.NewKVWorker[float32](0, 0)
		prog.Check(err, "worker")
		runWorker(w)
	}
	prog.Check(ps.Finalize(0, true), "finalize")
}

func emptyHandle(meta kv.KVMeta, data kv.KVPairs[float32], s *kv.KVServer[float32]) {
	var res kv.KVPairs[float32]
	if meta.Pull {
		res.Keys = data.Keys
		n := len(data.Keys)
		if len(data.Vals) > 0 {
			n = len(data.Vals)
		}
		res.Vals = zeros(n)
	}
	prog.Check(s.ZResponse(meta, res), "response") // keys and zeros never change
}

// emptyStore is emptyHandle as a kv.Store: pushes change nothing, pulls
// read zeros; it holds no state to copy or write.
type emptyStore struct{}

func (emptyStore) Changes(meta kv.KVMeta, _ kv.KVPairs[float32]) bool { return meta.Push }

func (emptyStore) Apply(meta kv.KVMeta, data kv.KVPairs[float32]) (kv.KVPairs[float32], error) {
	var res kv.KVPairs[float32]
	if meta.Pull {
		res.Keys = data.Keys
		n := len(data.Keys)
		if len(data.Vals) > 0 {
			n = len(data.Vals)
		}
		res.Vals = zeros(n)
	}
	return res, nil
}

func (emptyStore) Snapshot(io.Writer, kv.Part) error  { return nil }
func (emptyStore) Restore([]io.Reader, kv.Part) error { return nil }

var (
	zeroMu  sync.Mutex
	zeroBuf []float32
)

// zeros returns n zero values from a buffer the handle reuses. Nothing
// writes to it, so answers may be sent from it without a copy.
func zeros(n int) []float32 {
	zeroMu.Lock()
	defer zeroMu.Unlock()
	if cap(zeroBuf) < n {
		zeroBuf = make([]float32, n)
	}
	return zeroBuf[:n]
}

func want(m string) bool {
	if *mode == "all" {
		return true
	}
	for _, x := range strings.Split(*mode, ",") {
		if x == m {
			return true
		}
	}
	return false
}

func runWorker(w *kv.KVWorker[float32]) {
	rank := ps.MyRank()
	var results []Result
	add := func(r Result) {
		r.Servers, r.Workers, r.Label = ps.NumServers(), ps.NumWorkers(), *label
		r.Ratio, r.TCPRatio = cost(r.Value, r.Raw, r.Unit), cost(r.Value, r.TCP, r.Unit)
		results = append(results, r)
		if rank == 0 {
			b, _ := json.Marshal(r)
			fmt.Printf("RESULT %s\n", b)
		}
	}
	var raw baselines
	if *withRaw && (want("bulk") || want("latency") || want("window")) {
		zc, err := newRawClient(askServers(w.SimpleApp, cmdRawAddr))
		prog.Check(err, "raw client")
		defer zc.Close()
		tc, err := newTCPClient(askServers(w.SimpleApp, cmdTCPAddr))
		prog.Check(err, "tcp limit client")
		defer tc.Close()
		raw = baselines{zmq: zc, tcp: tc}
	}
	if want("bulk") {
		bulk(w, rank, raw, add)
	}
	if want("latency") {
		latency(w, rank, raw, add)
	}
	if want("window") {
		windowed(w, rank, raw, add)
	}
	if want("memory") {
		memory(w, rank, add)
	}
	if rank == 0 {
		printTable(results)
	}
}

// askServers sends head to every server and returns their answers by rank.
func askServers(app *kv.SimpleApp, head int) []string {
	var mu sync.Mutex
	answers := make([]string, ps.NumServers())
	app.SetResponseHandle(func(d kv.SimpleData, _ *kv.SimpleApp) {
		mu.Lock()
		answers[message.IDToRank(d.Sender)] = d.Body
		mu.Unlock()
	})
	ts, err := app.Request(head, "", ps.ServerGroup)
	prog.Check(err, "request to the servers")
	prog.Check(app.Wait(ts), "request to the servers")
	mu.Lock()
	defer mu.Unlock()
	return answers
}

func keysFor(n, rank int) ([]uint64, []float32) {
	keys := make([]uint64, n)
	vals := make([]float32, n**valLen)
	for i := range keys {
		switch *keyKind {
		case "hashed":
			keys[i] = mix(uint64(rank)*uint64(n) + uint64(i))
		case "jittered":
			keys[i] = message.MaxKey/uint64(n)*uint64(i) + mix(uint64(rank)*uint64(n)+uint64(i))&(1<<*jitter-1)
		default:
			keys[i] = message.MaxKey/uint64(n)*uint64(i) + uint64(rank)
		}
	}
	if *keyKind == "hashed" {
		slices.Sort(keys)
	}
	for i := range vals {
		vals[i] = float32(i % 1000)
	}
	return keys, vals
}

// keySuffix is added to the names of bulk results with -keys=hashed or
// jittered.
func keySuffix() string {
	switch *keyKind {
	case "hashed":
		return "_hashed"
	case "jittered":
		return "_jittered" + strconv.Itoa(*jitter)
	}
	return ""
}

// mix is splitmix64's finaliser, the keys of -keys=hashed.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// split slices keys and vals over the servers as the worker does.
func split(keys []uint64, vals []float32) []kv.KVPairs[float32] {
	node, err := ps.Node()
	prog.Check(err, "node")
	parts, err := kv.DefaultSlicer(kv.KVPairs[float32]{Keys: keys, Vals: vals}, node.ServerKeyRanges())
	prog.Check(err, "slice")
	return parts
}

// baseline moves a measurement's bytes between the same processes without
// our layers: raw ZeroMQ sockets (rawClient) or plain TCP (tcpClient).
type baseline interface {
	roundTrip(reqs []*rawReq) (time.Duration, error)
	windowRate(s int, r *rawReq, n, w int) (float64, error)
}

// baselines are a worker's two baselines; both nil with -raw=false.
type baselines struct{ zmq, tcp baseline }

func (b baselines) on() bool { return b.zmq != nil }

// metaBytes stands in for the meta frame of a response in raw replies.
const metaBytes = 32

// rawRequests builds each server's raw counterpart of a request over parts:
// what is sent (keys, and values for a push) and what comes back (a meta,
// and keys and values for a pull).
func rawRequests(parts []kv.KVPairs[float32], push, pull bool) []*rawReq {
	reqs := make([]*rawReq, len(parts))
	for i, p := range parts {
		if len(p.Keys) == 0 {
			continue
		}
		r := &rawReq{send: [][]byte{message.Frame(p.Keys)}, reply: []int{metaBytes}}
		if push {
			r.send = append(r.send, message.Frame(p.Vals))
		}
		if pull {
			r.reply = append(r.reply, len(p.Keys)*8, len(p.Keys)**valLen*4)
		}
		reqs[i] = r
	}
	return reqs
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// workersMeet waits until every worker has called it (a barrier of the
// worker group), so that they start what follows together.
func workersMeet() { prog.Check(ps.Barrier(0, ps.WorkerGroup), "barrier") }

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(int(float64(len(s))*p), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// timed runs one request and waits for it.
func timed(what string, w *kv.KVWorker[float32], do func() (int, error)) time.Duration {
	start := time.Now()
	ts, err := do()
	prog.Check(err, what)
	prog.Check(w.Wait(ts), what)
	return time.Since(start)
}

func bulk(w *kv.KVWorker[float32], rank int, raw baselines, add func(Result)) {
	keys, vals := keysFor(*numKeys, rank)
	parts := split(keys, vals)
	bytes := int64(len(keys)*8 + len(vals)*4)
	var out []float32
	pk, pv := piecesOf(keys, vals, parts, *pieces)
	type bulkOp struct {
		name       string
		push, pull bool
		do         func() (int, error)
	}
	ops := []bulkOp{
		{"push", true, false, func() (int, error) { return pushPieces(w, pk, pv) }},
		{"pull", false, true, func() (int, error) { return w.ZPull(keys, &out, nil) }},
		{"pushpull", true, true, func() (int, error) { return w.ZPushPull(keys, vals, &out, nil) }},
	}
	for _, name := range strings.Split(*bulkOps, ",") {
		i := slices.IndexFunc(ops, func(o bulkOp) bool { return o.name == name })
		if i < 0 {
			prog.Failf("unknown bulk operation %q (want push, pull or pushpull)", name)
		}
		op := ops[i]
		reqs := rawRequests(parts, op.push, op.pull)
		var d, rz, rt []time.Duration
		base := func(b baseline, into *[]time.Duration, what string) func() {
			return func() {
				t, err := b.roundTrip(reqs)
				prog.Check(err, what+" "+op.name)
				*into = append(*into, t)
			}
		}
		var calls []time.Duration // until the call returned, before the wait
		runOurs := func() {
			out = out[:0]
			start := time.Now()
			ts, err := op.do()
			prog.Check(err, op.name)
			calls = append(calls, time.Since(start))
			prog.Check(w.Wait(ts), op.name)
			d = append(d, time.Since(start))
		}
		runs := []func(){runOurs}
		if raw.on() {
			runs = append(runs, base(raw.zmq, &rz, "raw"), base(raw.tcp, &rt, "tcp limit"))
		}
		// One unmeasured round of each first: the first transfer of a size
		// grows the heaps and faults their pages in.
		for _, run := range runs {
			workersMeet()
			run()
		}
		rz, rt, d, calls = rz[:0], rt[:0], d[:0], calls[:0]
		for i := 0; i < *repeat; i++ {
			// Rotate which goes first, so that none always inherits
			// another's garbage (or warm pages).
			for j := range runs {
				workersMeet()
				runs[(i+j)%len(runs)]()
			}
		}
		extra := fmt.Sprintf("%.2f GB/s of keys and values; the call returns after %.2f ms",
			float64(bytes)/median(d).Seconds()/1e9, ms(median(calls)))
		if op.name == "push" && len(pk) > 1 {
			extra += fmt.Sprintf("; sent as %d pushes in flight", len(pk))
		}
		add(Result{Name: "bulk_" + op.name + keySuffix(), Keys: *numKeys, Bytes: bytes, Value: ms(median(d)), Unit: "ms",
			Raw: ms(median(rz)), TCP: ms(median(rt)), Extra: extra})
	}
}

// piecesOf cuts keys and vals into n pushes (-pieces), each holding the
// same share of every server's part (parts), so that every server gets
// a piece of each; n <= 1 leaves them whole.
func piecesOf(keys []uint64, vals []float32, parts []kv.KVPairs[float32], n int) ([][]uint64, [][]float32) {
	if n <= 1 {
		return [][]uint64{keys}, [][]float32{vals}
	}
	for _, p := range parts {
		if len(p.Keys) > 0 && len(p.Keys) < n {
			prog.Failf("-pieces=%d: a server's part has only %d keys", n, len(p.Keys))
		}
	}
	pk, pv := make([][]uint64, n), make([][]float32, n)
	for c := range n {
		for _, p := range parts {
			nk := len(p.Keys)
			lo, hi := nk*c/n, nk*(c+1)/n
			pk[c] = append(pk[c], p.Keys[lo:hi]...)
			pv[c] = append(pv[c], p.Vals[lo**valLen:hi**valLen]...)
		}
	}
	return pk, pv
}

// pushPieces sends every piece, then waits for all but the last, and
// returns the last one's timestamp for the caller to wait on. One piece is
// a plain push.
func pushPieces(w *kv.KVWorker[float32], pk [][]uint64, pv [][]float32) (int, error) {
	if len(pk) == 1 {
		return w.ZPush(pk[0], pv[0], nil)
	}
	sent := make([]int, len(pk))
	for c := range pk {
		ts, err := w.ZPush(pk[c], pv[c], nil)
		if err != nil {
			return 0, err
		}
		sent[c] = ts
	}
	for _, ts := range sent[:len(sent)-1] {
		if err := w.Wait(ts); err != nil {
			return 0, err
		}
	}
	return sent[len(sent)-1], nil
}

// latency alternates blocks of baseline ping-pongs (8-byte requests,
// 16-byte answers), 1-key pushes each followed by a 1-key pull, and 1-key
// push-pulls, all with the server that holds the worker's key; the workers
// start each block of pings, and the blocks after it, together. A push then
// a pull is two round trips, so its baseline is two pings in a row; a
// push-pull's is one.
func latency(w *kv.KVWorker[float32], rank int, raw baselines, add func(Result)) {
	keys := []uint64{uint64(rank)}
	vals := []float32{1}
	var out []float32
	ping := make([]*rawReq, ps.NumServers())
	for i, p := range split(keys, vals) {
		if len(p.Keys) > 0 {
			ping[i] = &rawReq{send: [][]byte{make([]byte, 8)}, reply: []int{16}}
		}
	}
	const block = 100
	var pp, ppl []time.Duration
	var one, two [2][]time.Duration // by baseline: one ping, two in a row
	for len(pp) < *iters {
		if raw.on() {
			// Every worker pings at the same time, then measures ours at
			// the same time: in a job of several workers, ours otherwise
			// competes with the others' pings, which C++ ps-lite's runs
			// (bench/cpp, without them) do not.
			for b, base := range []baseline{raw.zmq, raw.tcp} {
				workersMeet()
				for i := 0; i < block; i++ {
					t1, err := base.roundTrip(ping)
					prog.Check(err, "ping")
					t2, err := base.roundTrip(ping)
					prog.Check(err, "ping")
					one[b] = append(one[b], t1, t2)
					two[b] = append(two[b], t1+t2)
				}
			}
			workersMeet()
		}
		for i := 0; i < block; i++ {
			start := time.Now()
			timed("push", w, func() (int, error) { return w.ZPush(keys, vals, nil) })
			out = out[:0]
			timed("pull", w, func() (int, error) { return w.ZPull(keys, &out, nil) })
			pp = append(pp, time.Since(start))
		}
		for i := 0; i < block; i++ {
			out = out[:0]
			ppl = append(ppl, timed("pushpull", w, func() (int, error) { return w.ZPushPull(keys, vals, &out, nil) }))
		}
	}
	add(Result{Name: "latency_push_pull_p50", Value: us(median(pp)), Unit: "us",
		Raw: us(median(two[0])), TCP: us(median(two[1])),
		Extra: "1-key push, wait, 1-key pull, wait; baselines: two ping-pongs of 8-byte requests and 16-byte answers"})
	add(Result{Name: "latency_push_pull_p99", Value: us(percentile(pp, 0.99)), Unit: "us",
		Raw: us(percentile(two[0], 0.99)), TCP: us(percentile(two[1], 0.99))})
	add(Result{Name: "latency_pushpull_p50", Value: us(median(ppl)), Unit: "us",
		Raw: us(median(one[0])), TCP: us(median(one[1])),
		Extra: "1-key push-pull round trip; baselines: one ping-pong"})
	add(Result{Name: "latency_pushpull_p99", Value: us(percentile(ppl, 0.99)), Unit: "us",
		Raw: us(percentile(one[0], 0.99)), TCP: us(percentile(one[1], 0.99))})
}

// windowed measures 1-key pushes with at most *window outstanding, and
// synchronous ones (a window of 1, a tenth as many), each after the same
// number of baseline requests with the same window.
func windowed(w *kv.KVWorker[float32], rank int, raw baselines, add func(Result)) {
	keys := []uint64{uint64(rank)}
	vals := []float32{1}
	server := 0
	for i, p := range split(keys, vals) {
		if len(p.Keys) > 0 {
			server = i
		}
	}
	rate := func(name string, n, window int) {
		var rates [2]float64 // raw ZeroMQ's and plain TCP's
		if raw.on() {
			req := &rawReq{send: [][]byte{make([]byte, 8)}, reply: []int{metaBytes}}
			for b, base := range []baseline{raw.zmq, raw.tcp} {
				workersMeet()
				var err error
				rates[b], err = base.windowRate(server, req, n, window)
				prog.Check(err, "baseline window")
			}
		}
		workersMeet()
		start := time.Now()
		ring := make([]int, 0, window)
		for i := 0; i < n; i++ {
			if len(ring) == window {
				prog.Check(w.Wait(ring[0]), "push")
				ring = ring[1:]
			}
			ts, err := w.ZPush(keys, vals, nil)
			prog.Check(err, "push")
			ring = append(ring, ts)
		}
		for _, ts := range ring {
			prog.Check(w.Wait(ts), "push")
		}
		add(Result{Name: name, Value: float64(n) / time.Since(start).Seconds(), Unit: "req/s",
			Raw: rates[0], TCP: rates[1], Extra: fmt.Sprintf("%d 1-key pushes per worker, %d outstanding; baselines: 8-byte requests, meta-sized replies", n, window)})
	}
	rate(fmt.Sprintf("window%d_push_rate", *window), *requests, *window)
	sync := *syncReqs
	if sync < 0 {
		sync = max(*requests/10, 1)
	}
	if sync > 0 {
		rate("sync_push_rate", sync, 1)
	}
}

func memory(w *kv.KVWorker[float32], rank int, add func(Result)) {
	keys := []uint64{uint64(rank)}
	vals := []float32{1}
	serverRSS := func() int64 {
		var most int64
		for _, body := range askServers(w.SimpleApp, cmdRSS) {
			var v int64
			fmt.Sscan(body, &v)
			most = max(most, v)
		}
		return most
	}
	// The baseline is the first tenth of the run: memory the runtime
	// grows into while warming up (collector metadata, a thread more) is
	// not growth. With few allocations per request that takes more than
	// the first 10,000 requests, whose figures are shown too.
	var samples []string
	var wBase, sBase, wLast, sLast, wFirst, sFirst int64
	ring := make([]int, 0, 64)
	step := *memReqs / 10
	for i := 1; i <= *memReqs; i++ {
		if len(ring) == 64 {
			prog.Check(w.Wait(ring[0]), "push")
			ring = ring[1:]
		}
		ts, err := w.ZPush(keys, vals, nil)
		prog.Check(err, "push")
		ring = append(ring, ts)
		if i == 10000 || i%step == 0 {
			for _, t := range ring {
				prog.Check(w.Wait(t), "push")
			}
			ring = ring[:0]
			wr, sr := settledRSS(), serverRSS()
			if i == 10000 {
				wFirst, sFirst = wr, sr
			}
			if i == max(step, 10000) {
				wBase, sBase = wr, sr
			}
			wLast, sLast = wr, sr
			samples = append(samples, fmt.Sprintf("%d:%.1f/%.1f", i, float64(wr)/1e6, float64(sr)/1e6))
			if os.Getenv("PSBENCH_DEBUG") != "" {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				st, _ := os.ReadFile("/proc/self/status")
				th := ""
				for _, l := range strings.Split(string(st), "\n") {
					if strings.HasPrefix(l, "Threads") {
						th = l
					}
				}
				fmt.Fprintf(os.Stderr, "%d: %s heapInuse=%d stackSys=%d sys=%d\n", i, th, ms.HeapInuse, ms.StackSys, ms.Sys)
			}
		}
	}
	add(Result{Name: "rss_growth_worker", Value: float64(wLast-wBase) / 1e6, Unit: "MB",
		Extra: fmt.Sprintf("after %d requests vs after %d (vs after 10000: worker %+.2f, server %+.2f MB); samples req:worker/server MB %s",
			*memReqs, max(step, 10000), float64(wLast-wFirst)/1e6, float64(sLast-sFirst)/1e6, strings.Join(samples, " "))})
	add(Result{Name: "rss_growth_server", Value: float64(sLast-sBase) / 1e6, Unit: "MB"})
}

// settledRSS collects garbage and returns freed memory to the system before
// reading the RSS, so that what remains is memory the process holds on to.
func settledRSS() int64 {
	debug.FreeOSMemory()
	return rss()
}

// rss returns this process's resident set size in bytes.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res int64
	fmt.Sscan(string(b), &size, &res)
	return res * int64(os.Getpagesize())
}

func printTable(rs []Result) {
	fmt.Println()
	fmt.Printf("%-26s %14s %-6s %12s %8s %12s %8s  %s\n", "measurement", "value", "unit", "raw zmq", "cost", "tcp limit", "cost", "notes")
	for _, r := range rs {
		fmt.Printf("%-26s %14.2f %-6s %12s %8s %12s %8s  %s\n", r.Name, r.Value, r.Unit,
			figure(r.Raw), ratio(r.Ratio), figure(r.TCP), ratio(r.TCPRatio), r.Extra)
	}
}

// figure writes v, or nothing when it was not measured.
func figure(v float64) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", v)
}

// ratio writes a cost, or nothing when it was not measured.
func ratio(v float64) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%.2fx", v)
}
