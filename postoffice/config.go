package postoffice

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/control"
)

// DefaultLinkTimeout is PS_LINK_TIMEOUT's default: longer than a
// one-minute outage and the TCP retransmission backoff after it, so that
// such an outage is ridden out with the defaults.
const DefaultLinkTimeout = 180 * time.Second

// DefaultCppStartGrace is Config.CppStartGrace's default.
const DefaultCppStartGrace = 200 * time.Millisecond

// Config is a node's view of its job. ConfigFromEnv fills it from the
// environment variables C++ ps-lite reads.
type Config struct {
	Role          message.Role // DMLC_ROLE
	NumServers    int          // DMLC_NUM_SERVER
	NumWorkers    int          // DMLC_NUM_WORKER
	SchedulerHost string       // DMLC_PS_ROOT_URI: an IP address or a host name
	SchedulerPort int          // DMLC_PS_ROOT_PORT
	// Host is the address this node announces: DMLC_NODE_HOST, else the
	// address of DMLC_INTERFACE, else 127.0.0.1 when the scheduler is on
	// loopback, else the address the host reaches the scheduler from, else
	// the first non-loopback IPv4 address.
	Host string
	Port int // PORT; 0 picks a free port
	// Local uses ipc:// endpoints (DMLC_LOCAL=1).
	Local bool
	// WaterMark is the send high-water mark (DMLC_PS_WATER_MARK), 0 for
	// ZeroMQ's default.
	WaterMark int
	// MaxMessageBytes bounds a received message (PS_MAX_MESSAGE_MB,
	// default 1024 MiB): a larger one is dropped, and a sender of a larger
	// frame disconnected. Zero means the transport's default.
	MaxMessageBytes int64
	// MetricsAddr, when set (PS_METRICS_ADDR, host:port; port 0 picks a
	// free one), serves the node's metrics at /metrics and Go's profiles at
	// /debug/pprof/ there.
	MetricsAddr string
	// Kubernetes makes the scheduler bind every interface (DMLC_USE_KUBERNETES).
	Kubernetes bool
	// Verbose is the log level: 0 warnings, 1 progress, 2 every message (PS_VERBOSE).
	Verbose int
	// HeartbeatInterval is PS_HEARTBEAT_INTERVAL (seconds, 0 = off).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is PS_HEARTBEAT_TIMEOUT (seconds, default 60): with
	// heartbeats on, how long a node may stay silent before it counts as
	// dead. It must exceed the interval.
	HeartbeatTimeout time.Duration
	// RecoveryWait is PS_RECOVERY_WAIT (seconds, default 5): how long the
	// scheduler waits for a replacement of a dead server or worker before
	// the job fails. Zero means the default; a negative value (from
	// PS_RECOVERY_WAIT=0) fails the job as soon as a node is found dead
	// (a replacement already waiting still takes its place).
	RecoveryWait time.Duration
	// ConnectTimeout is PS_CONNECT_TIMEOUT (seconds, default 10): how long
	// a connection to a node may take to come up before the node counts as
	// lost. Zero means the default. On lossy links, where TCP's connection
	// attempts back off (1, 3, 7, 15 s...), raise it.
	ConnectTimeout time.Duration
	// DropRate is PS_DROP_MSG, the percentage of received messages dropped.
	DropRate int
	// StartTimeout bounds how long Start waits for the job to fill up
	// (PS_START_TIMEOUT seconds, default 0 = wait for ever).
	StartTimeout time.Duration
	// CppStartGrace is PS_CPP_START_GRACE (milliseconds, default 200): how
	// long a server's or worker's Start waits after the start barrier when
	// the scheduler is C++ ps-lite's, before it lets the program send.
	// That scheduler releases workers first, and a C++ server that gets a
	// request before its own release aborts (see docs/LIBRARY.md). Zero
	// means the default; PS_CPP_START_GRACE=0 makes it negative: no wait.
	CppStartGrace time.Duration
	// SetRankEnv sets DMLC_RANK in the environment once the rank is known.
	SetRankEnv bool
	// Resend turns on acknowledgements and resending (PS_RESEND=1).
	Resend bool
	// ResendTimeout is PS_RESEND_TIMEOUT (milliseconds, default 1000).
	ResendTimeout time.Duration
	// LinkTimeout is PS_LINK_TIMEOUT (seconds, default 180; 0 turns it
	// off): a connection that carries nothing from its peer this long is
	// dropped (ZMTP heartbeats, TCP keepalive and TCP user timeout), so a
	// dead link or host is noticed without PS_HEARTBEAT_INTERVAL.
	LinkTimeout time.Duration
	// ResendGiveUp is PS_RESEND_GIVEUP (seconds, default 180): how long
	// after its first send a message still unacknowledged is given up on.
	ResendGiveUp time.Duration
	// ResendMaxRetry is PS_RESEND_MAX_RETRY, an optional cap on the resends
	// of one message (default 0: none, only ResendGiveUp).
	ResendMaxRetry int
	// KeepRecvMemory is PS_KEEP_RECV_MEMORY (default 1; 0 turns it off):
	// the C allocator keeps freed memory for the next large receive instead
	// of faulting fresh pages in for each (see zmqtransport.Options).
	KeepRecvMemory bool
	// KeyCacheMB is PS_KEY_CACHE_MB (default 0: off): with the ZMTP
	// transport, each connection between two Go nodes keeps up to this
	// many MiB of key lists its sender sent, so that a list sent again
	// goes as a reference (zmtptransport.Options.KeyCacheBytes); a node
	// keeps at most four times as much for all its connections. Off by
	// default: on this project's test machine it made some bulk transfers
	// faster and others slower (docs/ZMTP-KEYCACHE.md).
	KeyCacheMB int
	// KeyCode is PS_KEY_CODE (default 1; 0 turns it off): with the ZMTP
	// transport, a Go node sends a sorted key list of 256 KiB or more
	// whose gaps are mostly equal to another Go node as its gaps, when
	// that halves it (zmtptransport.Options.KeyCode).
	KeyCode bool
	// PoisonLent is PS_POISON_LENT=1: request memory lent to a handle (see
	// kv.KVServer.LendRequests) is overwritten with 0xDB bytes when the
	// handle returns, so that a handle that keeps a view fails its tests.
	PoisonLent bool
	// Curve, when set (PS_CURVE_PUBLIC_KEY and PS_CURVE_SECRET_KEY, the
	// job's key pair in Z85), encrypts and authenticates every connection.
	Curve *van.CurveKeys
	// Replicas is PS_REPLICAS: how many servers hold each key range besides
	// its head (default 0). With Replicas or CheckpointDir the job is
	// managed (see docs/REPLICATION.md); every node must have the same.
	Replicas int
	// CheckpointDir is PS_CHECKPOINT_DIR: where servers write snapshots of
	// their stores (Checkpoint, CheckpointInterval), and where a job
	// launched again resumes from.
	CheckpointDir string
	// CheckpointInterval is PS_CHECKPOINT_INTERVAL (seconds, default 0:
	// only when a worker asks): how often the scheduler has every server
	// write a snapshot.
	CheckpointInterval time.Duration
	// VanType is DMLC_PS_VAN_TYPE: "zmtp" (ZeroMQ's wire protocol spoken
	// in Go, see van/zmtptransport; no CURVE) or "zmq" (ZeroMQ through
	// libzmq and pebbe/zmq4). Unset, it is "zmtp", or "zmq" when CURVE
	// keys are set (so is an empty VanType of a Config made in code). Both
	// mix with each other and with C++ ps-lite's zmq van in one job.
	VanType string
}

// Managed reports whether the job is managed: servers' key ranges are
// replicated (Replicas) or written to disk (CheckpointDir), and the
// scheduler's views say which servers hold each.
func (c *Config) Managed() bool { return c.Replicas > 0 || c.CheckpointDir != "" }

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("postoffice: bad configuration")

// ConfigFromEnv reads the configuration from the environment.
func ConfigFromEnv() (Config, error) {
	return ConfigFromLookup(os.LookupEnv)
}

// ConfigFromLookup reads the configuration through lookup, which has the
// signature of os.LookupEnv.
func ConfigFromLookup(lookup func(string) (string, bool)) (Config, error) {
	var errs []string
	get := func(name string) string { v, _ := lookup(name); return strings.TrimSpace(v) }
	missing := 0
	required := func(name string) string {
		v := get(name)
		if v == "" {
			errs = append(errs, name+" is not set")
			missing++
		}
		return v
	}
	intVar := func(name string, def, min, max int, req bool) int {
		var s string
		if req {
			s = required(name)
		} else {
			s = get(name)
		}
		if s == "" {
			return def
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < min || n > max {
			errs = append(errs, fmt.Sprintf("%s=%q is not a whole number in [%d, %d]", name, s, min, max))
			return def
		}
		return n
	}
	c := Config{SetRankEnv: true}
	if r := required("DMLC_ROLE"); r != "" {
		role, err := message.ParseRole(r)
		if err != nil {
			errs = append(errs, "DMLC_ROLE: "+err.Error())
		}
		c.Role = role
	}
	c.SchedulerHost = required("DMLC_PS_ROOT_URI")
	c.SchedulerPort = intVar("DMLC_PS_ROOT_PORT", 0, 1, 65535, true)
	c.NumWorkers = intVar("DMLC_NUM_WORKER", 0, 1, 1<<20, true)
	c.NumServers = intVar("DMLC_NUM_SERVER", 0, 1, 1<<20, true)
	c.Port = intVar("PORT", 0, 0, 65535, false)
	c.Local = intVar("DMLC_LOCAL", 0, 0, 1<<30, false) != 0
	c.WaterMark = intVar("DMLC_PS_WATER_MARK", 0, 0, 1<<30, false)
	c.MaxMessageBytes = int64(intVar("PS_MAX_MESSAGE_MB", 1024, 1, 1<<20, false)) << 20
	c.MetricsAddr = get("PS_METRICS_ADDR")
	c.Kubernetes = intVar("DMLC_USE_KUBERNETES", 0, 0, 1<<30, false) != 0
	c.Verbose = intVar("PS_VERBOSE", 0, 0, 100, false)
	c.HeartbeatInterval = time.Duration(intVar("PS_HEARTBEAT_INTERVAL", 0, 0, 1<<20, false)) * time.Second
	c.HeartbeatTimeout = time.Duration(intVar("PS_HEARTBEAT_TIMEOUT", 60, 0, 1<<20, false)) * time.Second
	if c.HeartbeatInterval > 0 && c.HeartbeatTimeout <= c.HeartbeatInterval {
		errs = append(errs, fmt.Sprintf("PS_HEARTBEAT_TIMEOUT (%v) must exceed PS_HEARTBEAT_INTERVAL (%v)", c.HeartbeatTimeout, c.HeartbeatInterval))
	}
	c.RecoveryWait = time.Duration(intVar("PS_RECOVERY_WAIT", 5, 0, 1<<20, false)) * time.Second
	if c.RecoveryWait == 0 {
		c.RecoveryWait = -1
	}
	c.ConnectTimeout = time.Duration(intVar("PS_CONNECT_TIMEOUT", int(control.DefaultConnectTimeout/time.Second), 1, 1<<20, false)) * time.Second
	c.DropRate = intVar("PS_DROP_MSG", 0, 0, 100, false)
	c.StartTimeout = time.Duration(intVar("PS_START_TIMEOUT", 0, 0, 1<<20, false)) * time.Second
	c.CppStartGrace = time.Duration(intVar("PS_CPP_START_GRACE", int(DefaultCppStartGrace/time.Millisecond), 0, 1<<20, false)) * time.Millisecond
	if c.CppStartGrace == 0 {
		c.CppStartGrace = -1
	}
	c.Resend = intVar("PS_RESEND", 0, 0, 1<<30, false) != 0
	c.ResendTimeout = time.Duration(intVar("PS_RESEND_TIMEOUT", 1000, 1, 1<<30, false)) * time.Millisecond
	c.LinkTimeout = time.Duration(intVar("PS_LINK_TIMEOUT", int(DefaultLinkTimeout/time.Second), 0, 1<<20, false)) * time.Second
	c.ResendGiveUp = time.Duration(intVar("PS_RESEND_GIVEUP", int(control.DefaultResendGiveUp/time.Second), 1, 1<<20, false)) * time.Second
	c.ResendMaxRetry = intVar("PS_RESEND_MAX_RETRY", 0, 0, 1<<20, false)
	c.PoisonLent = intVar("PS_POISON_LENT", 0, 0, 1, false) != 0
	c.KeepRecvMemory = intVar("PS_KEEP_RECV_MEMORY", 1, 0, 1, false) != 0
	c.KeyCacheMB = intVar("PS_KEY_CACHE_MB", 0, 0, 1<<20, false)
	c.KeyCode = intVar("PS_KEY_CODE", 1, 0, 1, false) != 0
	c.Replicas = intVar("PS_REPLICAS", 0, 0, 16, false)
	c.CheckpointDir = get("PS_CHECKPOINT_DIR")
	c.CheckpointInterval = time.Duration(intVar("PS_CHECKPOINT_INTERVAL", 0, 0, 1<<20, false)) * time.Second
	if c.CheckpointInterval > 0 && c.CheckpointDir == "" {
		errs = append(errs, "PS_CHECKPOINT_INTERVAL needs PS_CHECKPOINT_DIR")
	}
	if pub, sec := get("PS_CURVE_PUBLIC_KEY"), get("PS_CURVE_SECRET_KEY"); pub != "" || sec != "" {
		keys := van.CurveKeys{Public: pub, Secret: sec}
		if err := keys.Check(); err != nil {
			errs = append(errs, "PS_CURVE_PUBLIC_KEY/PS_CURVE_SECRET_KEY: "+err.Error())
		} else {
			c.Curve = &keys
		}
	}
	vt, err := resolveVanType(get("DMLC_PS_VAN_TYPE"), c.Curve != nil)
	if err != nil {
		errs = append(errs, err.Error())
	}
	c.VanType = vt
	if len(errs) == 0 && c.Role != message.RoleScheduler {
		host, err := nodeHost(get("DMLC_NODE_HOST"), get("DMLC_INTERFACE"), c.SchedulerHost, c.SchedulerPort)
		if err != nil {
			errs = append(errs, err.Error())
		}
		c.Host = host
	}
	if len(errs) > 0 {
		hint := ""
		if missing > 0 {
			hint = " (a ps-lite program is started by a launcher that sets these for each node, e.g. scripts/local.sh NUM_SERVERS NUM_WORKERS PROGRAM [ARGS...] on one machine; see docs/DEPLOY.md for several)"
		}
		return c, fmt.Errorf("%w: %s%s", ErrConfig, strings.Join(errs, "; "), hint)
	}
	return c, nil
}

// nodeHost picks the address a node announces.
func nodeHost(nodeHost, iface, schedHost string, schedPort int) (string, error) {
	if nodeHost != "" {
		return nodeHost, nil
	}
	if iface != "" {
		ifc, err := net.InterfaceByName(iface)
		if err != nil {
			return "", fmt.Errorf("DMLC_INTERFACE=%q: %v", iface, err)
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return "", fmt.Errorf("DMLC_INTERFACE=%q: %v", iface, err)
		}
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
				return ip.IP.String(), nil
			}
		}
		return "", fmt.Errorf("DMLC_INTERFACE=%q has no IPv4 address", iface)
	}
	if isLoopback(schedHost) {
		return "127.0.0.1", nil
	}
	return pickHost(localIPv4s(), func() (string, error) { return routeTo(schedHost, schedPort) })
}

// pickHost chooses the address a node announces without DMLC_NODE_HOST or
// DMLC_INTERFACE: the one this host sends from to reach the scheduler
// (route), when it is one of the host's addresses; otherwise the first
// address of an interface that is up (as C++ ps-lite does), which is wrong
// on a host whose first interface is not on the job's network.
func pickHost(addrs []string, route func() (string, error)) (string, error) {
	if ip, err := route(); err == nil {
		for _, a := range addrs {
			if a == ip {
				return ip, nil
			}
		}
	}
	if len(addrs) > 0 {
		return addrs[0], nil
	}
	return "", errors.New("found no network interface with an IPv4 address; set DMLC_NODE_HOST or DMLC_INTERFACE")
}

// localIPv4s lists the non-loopback IPv4 addresses of the interfaces that
// are up, in interface order.
func localIPv4s() []string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []string
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() {
				out = append(out, ip.IP.String())
			}
		}
	}
	return out
}

// routeTo returns the source address this host would use to reach
// host:port. A UDP "connection" only asks the kernel for the route: no
// packet is sent. A host name is resolved, bounded by a few seconds.
func routeTo(host string, port int) (string, error) {
	d := net.Dialer{Timeout: 3 * time.Second}
	c, err := d.Dial("udp4", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// resolveVanType returns the transport van type vt names, given whether
// CURVE keys are set. Empty, it is "zmtp" (ZMTP spoken in Go, the faster
// transport: docs/PERFORMANCE.md), or "zmq" with keys, since CURVE needs
// libzmq.
func resolveVanType(vt string, curve bool) (string, error) {
	switch vt {
	case "":
		if curve {
			return "zmq", nil
		}
		return "zmtp", nil
	case "zmq":
		return vt, nil
	case "zmtp":
		if curve {
			return vt, errors.New("DMLC_PS_VAN_TYPE=zmtp has no CURVE: unset PS_CURVE_PUBLIC_KEY/PS_CURVE_SECRET_KEY or use DMLC_PS_VAN_TYPE=zmq")
		}
		return vt, nil
	}
	return vt, fmt.Errorf("DMLC_PS_VAN_TYPE=%q is not supported (zmq or zmtp)", vt)
}
