package postoffice_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
	"github.com/gopslite/pslite/van"
)

// env is a map-backed lookup.
type env map[string]string

func (e env) lookup(name string) (string, bool) {
	v, ok := e[name]
	return v, ok
}

// base returns a complete worker configuration; DMLC_NODE_HOST is set so the
// result does not depend on the machine's interfaces.
func base() env {
	return env{
		"DMLC_ROLE":         "worker",
		"DMLC_PS_ROOT_URI":  "10.1.2.3",
		"DMLC_PS_ROOT_PORT": "9091",
		"DMLC_NUM_WORKER":   "2",
		"DMLC_NUM_SERVER":   "3",
		"DMLC_NODE_HOST":    "10.9.9.9",
	}
}

func (e env) with(kv ...string) env {
	out := env{}
	for k, v := range e {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func (e env) without(names ...string) env {
	out := e.with()
	for _, n := range names {
		delete(out, n)
	}
	return out
}

func mustConfig(t *testing.T, e env) postoffice.Config {
	t.Helper()
	c, err := postoffice.ConfigFromLookup(e.lookup)
	if err != nil {
		t.Fatalf("ConfigFromLookup(%v): %v", e, err)
	}
	return c
}

func configErr(t *testing.T, e env, mentions ...string) error {
	t.Helper()
	_, err := postoffice.ConfigFromLookup(e.lookup)
	if err == nil {
		t.Fatalf("ConfigFromLookup(%v) succeeded, want an error", e)
	}
	if !errors.Is(err, postoffice.ErrConfig) {
		t.Errorf("error %q does not wrap ErrConfig", err)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
	return err
}

func TestConfigComplete(t *testing.T) {
	c := mustConfig(t, base())
	want := postoffice.Config{
		Role:             message.RoleWorker,
		NumServers:       3,
		NumWorkers:       2,
		SchedulerHost:    "10.1.2.3",
		SchedulerPort:    9091,
		Host:             "10.9.9.9",
		HeartbeatTimeout: 60 * time.Second,
		RecoveryWait:     5 * time.Second,
		ConnectTimeout:   10 * time.Second,
		CppStartGrace:    200 * time.Millisecond,
		SetRankEnv:       true,
		ResendTimeout:    time.Second,
		ResendGiveUp:     180 * time.Second,
		LinkTimeout:      180 * time.Second,
		MaxMessageBytes:  1 << 30,
		KeepRecvMemory:   true,
		KeyCode:          true,
		VanType:          "zmtp",
	}
	if c != want {
		t.Fatalf("config\n got %+v\nwant %+v", c, want)
	}
}

func TestConfigReceiveMemory(t *testing.T) {
	e := base()
	e["PS_KEEP_RECV_MEMORY"], e["PS_POISON_LENT"] = "0", "1"
	if c := mustConfig(t, e); c.KeepRecvMemory || !c.PoisonLent {
		t.Fatalf("PS_KEEP_RECV_MEMORY=0 PS_POISON_LENT=1: KeepRecvMemory %v, PoisonLent %v", c.KeepRecvMemory, c.PoisonLent)
	}
	e["PS_POISON_LENT"] = "2"
	if _, err := postoffice.ConfigFromLookup(e.lookup); err == nil || !strings.Contains(err.Error(), "PS_POISON_LENT") {
		t.Fatalf("PS_POISON_LENT=2: error %v", err)
	}
}

func TestConfigKeyCache(t *testing.T) {
	e := base()
	e["PS_KEY_CACHE_MB"] = "0"
	if c := mustConfig(t, e); c.KeyCacheMB != 0 {
		t.Fatalf("PS_KEY_CACHE_MB=0: KeyCacheMB %d", c.KeyCacheMB)
	}
	e["PS_KEY_CACHE_MB"] = "512"
	if c := mustConfig(t, e); c.KeyCacheMB != 512 {
		t.Fatalf("PS_KEY_CACHE_MB=512: KeyCacheMB %d", c.KeyCacheMB)
	}
	e["PS_KEY_CACHE_MB"] = "-1"
	configErr(t, e, "PS_KEY_CACHE_MB")
}

func TestConfigKeyCode(t *testing.T) {
	e := base()
	if c := mustConfig(t, e); !c.KeyCode {
		t.Fatal("PS_KEY_CODE unset: KeyCode off")
	}
	e["PS_KEY_CODE"] = "0"
	if c := mustConfig(t, e); c.KeyCode {
		t.Fatal("PS_KEY_CODE=0: KeyCode on")
	}
	e["PS_KEY_CODE"] = "2"
	configErr(t, e, "PS_KEY_CODE")
}

func TestConfigOptional(t *testing.T) {
	c := mustConfig(t, base().with(
		"PORT", "5555",
		"DMLC_LOCAL", "1",
		"DMLC_PS_WATER_MARK", "1000",
		"DMLC_USE_KUBERNETES", "1",
		"PS_VERBOSE", "2",
		"PS_HEARTBEAT_INTERVAL", "5",
		"PS_HEARTBEAT_TIMEOUT", "30",
		"PS_DROP_MSG", "10",
		"PS_START_TIMEOUT", "120",
		"PS_RESEND", "1",
		"PS_RESEND_TIMEOUT", "250",
		"PS_RESEND_MAX_RETRY", "3",
		"PS_RESEND_GIVEUP", "75",
		"PS_LINK_TIMEOUT", "0",
		"PS_RECOVERY_WAIT", "12",
		"PS_CONNECT_TIMEOUT", "45",
		"PS_CPP_START_GRACE", "1500",
		"DMLC_PS_VAN_TYPE", "zmq",
	))
	checks := []struct {
		name      string
		got, want any
	}{
		{"Port", c.Port, 5555},
		{"Local", c.Local, true},
		{"WaterMark", c.WaterMark, 1000},
		{"Kubernetes", c.Kubernetes, true},
		{"Verbose", c.Verbose, 2},
		{"HeartbeatInterval", c.HeartbeatInterval, 5 * time.Second},
		{"HeartbeatTimeout", c.HeartbeatTimeout, 30 * time.Second},
		{"DropRate", c.DropRate, 10},
		{"StartTimeout", c.StartTimeout, 2 * time.Minute},
		{"Resend", c.Resend, true},
		{"ResendTimeout", c.ResendTimeout, 250 * time.Millisecond},
		{"ResendMaxRetry", c.ResendMaxRetry, 3},
		{"ResendGiveUp", c.ResendGiveUp, 75 * time.Second},
		{"LinkTimeout", c.LinkTimeout, time.Duration(0)},
		{"RecoveryWait", c.RecoveryWait, 12 * time.Second},
		{"ConnectTimeout", c.ConnectTimeout, 45 * time.Second},
		{"CppStartGrace", c.CppStartGrace, 1500 * time.Millisecond},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	// Zero and off values.
	c = mustConfig(t, base().with("DMLC_LOCAL", "0", "PS_RESEND", "0", "PS_HEARTBEAT_INTERVAL", "0", "PORT", "0"))
	if c.Local || c.Resend || c.HeartbeatInterval != 0 || c.Port != 0 {
		t.Errorf("zero values: %+v", c)
	}
}

func TestConfigRoles(t *testing.T) {
	for s, r := range map[string]message.Role{
		"worker": message.RoleWorker, "server": message.RoleServer, "scheduler": message.RoleScheduler,
	} {
		c := mustConfig(t, base().with("DMLC_ROLE", s))
		if c.Role != r {
			t.Errorf("DMLC_ROLE=%s: Role %v", s, c.Role)
		}
	}
	for _, bad := range []string{"Worker", "client", "0", "workers"} {
		configErr(t, base().with("DMLC_ROLE", bad), "DMLC_ROLE", bad)
	}
}

func TestConfigSchedulerHasNoHost(t *testing.T) {
	// The scheduler announces DMLC_PS_ROOT_URI; Host is not looked up, so a
	// bad DMLC_INTERFACE does not matter.
	c := mustConfig(t, base().without("DMLC_NODE_HOST").with("DMLC_ROLE", "scheduler", "DMLC_INTERFACE", "no-such-if0"))
	if c.Role != message.RoleScheduler || c.Host != "" {
		t.Fatalf("scheduler config %+v", c)
	}
}

func TestConfigMissingRequired(t *testing.T) {
	required := []string{"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER"}
	for _, name := range required {
		configErr(t, base().without(name), name+" is not set", "scripts/local.sh")
		configErr(t, base().with(name, ""), name+" is not set")
		configErr(t, base().with(name, "  \t"), name+" is not set")
	}
	// Everything missing: every name is reported at once.
	var mentions []string
	for _, name := range required {
		mentions = append(mentions, name+" is not set")
	}
	configErr(t, env{}, mentions...)
}

func TestConfigMalformedInts(t *testing.T) {
	cases := [][2]string{
		{"DMLC_NUM_WORKER", "abc"},
		{"DMLC_NUM_WORKER", "0"},
		{"DMLC_NUM_WORKER", "-1"},
		{"DMLC_NUM_WORKER", "1.5"},
		{"DMLC_NUM_SERVER", "0x10"},
		{"DMLC_NUM_SERVER", "99999999999999999999999"},
		{"DMLC_PS_ROOT_PORT", "70000"},
		{"DMLC_PS_ROOT_PORT", "0"},
		{"DMLC_PS_ROOT_PORT", "port"},
		{"PORT", "65536"},
		{"PORT", "-5"},
		{"PS_VERBOSE", "lots"},
		{"PS_DROP_MSG", "101"},
		{"PS_HEARTBEAT_INTERVAL", "-1"},
		{"PS_HEARTBEAT_INTERVAL", "1s"},
		{"PS_HEARTBEAT_TIMEOUT", "x"},
		{"PS_RESEND_TIMEOUT", "0"},
		{"PS_RESEND_MAX_RETRY", "-1"},
		{"PS_RESEND_GIVEUP", "0"},
		{"PS_LINK_TIMEOUT", "-1"},
		{"DMLC_LOCAL", "true"},
		{"DMLC_USE_KUBERNETES", "yes"},
		{"PS_START_TIMEOUT", "-3"},
		{"PS_RECOVERY_WAIT", "-1"},
		{"PS_CONNECT_TIMEOUT", "0"},
		{"PS_CPP_START_GRACE", "-5"},
	}
	for _, c := range cases {
		err := configErr(t, base().with(c[0], c[1]), c[0], c[1])
		if t.Failed() {
			t.Logf("%s=%s: %v", c[0], c[1], err)
		}
	}
	// Several problems are all reported.
	configErr(t, base().with("DMLC_NUM_WORKER", "abc", "DMLC_PS_ROOT_PORT", "70000", "DMLC_ROLE", "boss"),
		"DMLC_NUM_WORKER", "abc", "DMLC_PS_ROOT_PORT", "70000", "boss")
}

// A heartbeat timeout no longer than the interval would find every node
// dead between two heartbeats.
func TestConfigHeartbeatTimeoutExceedsInterval(t *testing.T) {
	configErr(t, base().with("PS_HEARTBEAT_INTERVAL", "5", "PS_HEARTBEAT_TIMEOUT", "5"), "PS_HEARTBEAT_TIMEOUT", "PS_HEARTBEAT_INTERVAL")
	// With heartbeats off the timeout does not matter.
	mustConfig(t, base().with("PS_HEARTBEAT_INTERVAL", "0", "PS_HEARTBEAT_TIMEOUT", "0"))
	// PS_RECOVERY_WAIT=0 fails a job as soon as a node is found dead.
	if c := mustConfig(t, base().with("PS_RECOVERY_WAIT", "0")); c.RecoveryWait >= 0 {
		t.Errorf("PS_RECOVERY_WAIT=0 gave %v", c.RecoveryWait)
	}
	// PS_CPP_START_GRACE=0: no wait under a C++ scheduler.
	if c := mustConfig(t, base().with("PS_CPP_START_GRACE", "0")); c.CppStartGrace >= 0 {
		t.Errorf("PS_CPP_START_GRACE=0 gave %v", c.CppStartGrace)
	}
}

func TestConfigTrimsSpace(t *testing.T) {
	c := mustConfig(t, base().with("DMLC_NUM_WORKER", " 4 ", "DMLC_ROLE", "server\n"))
	if c.NumWorkers != 4 || c.Role != message.RoleServer {
		t.Fatalf("config %+v", c)
	}
}

func TestConfigVanType(t *testing.T) {
	mustConfig(t, base().with("DMLC_PS_VAN_TYPE", "zmq"))
	if c := mustConfig(t, base().with("DMLC_PS_VAN_TYPE", "")); c.VanType != "zmtp" {
		t.Fatalf("default van type %q, want zmtp", c.VanType)
	}
	if c := mustConfig(t, base().with("DMLC_PS_VAN_TYPE", "zmtp")); c.VanType != "zmtp" {
		t.Fatalf("van type %q, want zmtp", c.VanType)
	}
	keys, err := van.NewCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	// With CURVE keys and no van type, the job runs on libzmq.
	if c := mustConfig(t, base().with("DMLC_PS_VAN_TYPE", "", "PS_CURVE_PUBLIC_KEY", keys.Public, "PS_CURVE_SECRET_KEY", keys.Secret)); c.VanType != "zmq" {
		t.Fatalf("van type with CURVE keys %q, want zmq", c.VanType)
	}
	configErr(t, base().with("DMLC_PS_VAN_TYPE", "zmtp", "PS_CURVE_PUBLIC_KEY", keys.Public, "PS_CURVE_SECRET_KEY", keys.Secret), "DMLC_PS_VAN_TYPE", "CURVE")
	for _, vt := range []string{"ibverbs", "fabric", "ZMQ"} {
		configErr(t, base().with("DMLC_PS_VAN_TYPE", vt), "DMLC_PS_VAN_TYPE", vt)
	}
}

func TestConfigHost(t *testing.T) {
	// DMLC_NODE_HOST wins over everything.
	c := mustConfig(t, base().with("DMLC_INTERFACE", "no-such-if0", "DMLC_PS_ROOT_URI", "127.0.0.1"))
	if c.Host != "10.9.9.9" {
		t.Errorf("Host = %q, want DMLC_NODE_HOST", c.Host)
	}
	// A scheduler on loopback puts workers and servers on loopback.
	for _, sched := range []string{"127.0.0.1", "localhost", "127.0.0.53", "::1"} {
		for _, role := range []string{"worker", "server"} {
			c := mustConfig(t, base().without("DMLC_NODE_HOST").with("DMLC_PS_ROOT_URI", sched, "DMLC_ROLE", role))
			if c.Host != "127.0.0.1" {
				t.Errorf("%s with scheduler %s: Host = %q, want 127.0.0.1", role, sched, c.Host)
			}
		}
	}
	// An unknown interface is an error.
	configErr(t, base().without("DMLC_NODE_HOST").with("DMLC_INTERFACE", "no-such-if0"), "DMLC_INTERFACE", "no-such-if0")
}

func TestConfigInterface(t *testing.T) {
	// Find the loopback interface and its IPv4 address.
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	name, addr := "", ""
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagLoopback == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
				name, addr = ifc.Name, ip.IP.String()
			}
		}
	}
	if name == "" {
		t.Log("no loopback interface with an IPv4 address; nothing to check")
		return
	}
	c := mustConfig(t, base().without("DMLC_NODE_HOST").with("DMLC_INTERFACE", name))
	if c.Host != addr {
		t.Fatalf("DMLC_INTERFACE=%s: Host = %q, want %q", name, c.Host, addr)
	}
}

func TestConfigFromEnv(t *testing.T) {
	for k, v := range base() {
		t.Setenv(k, v)
	}
	c, err := postoffice.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if c != mustConfig(t, base()) {
		t.Fatalf("ConfigFromEnv %+v differs from ConfigFromLookup", c)
	}
}
