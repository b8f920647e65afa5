package postoffice

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/zmtptransport"
)

// newTransport returns the transport cfg names (resolveVanType): ZMTP
// spoken in Go (the default, which needs no cgo) or the ZeroMQ one through
// libzmq, which is also what an empty VanType with CURVE keys gets, for a
// Config made in code as for one from the environment.
func newTransport(cfg Config, log zerolog.Logger) (van.Transport, error) {
	vt, err := resolveVanType(cfg.VanType, cfg.Curve != nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if vt == "zmq" {
		return zmqTransport(cfg, log)
	}
	return zmtptransport.New(zmtptransport.Options{
		Local:           cfg.Local,
		WaterMark:       cfg.WaterMark,
		BindAll:         bindAll(cfg),
		MaxMessageBytes: cfg.MaxMessageBytes,
		IsMember: func(identity string) bool {
			id := van.ParseIdentity([]byte(identity))
			return id != message.Empty && message.IsMember(int(id), cfg.NumServers, cfg.NumWorkers)
		},
		// A connection claiming a member's id before this node knows the
		// job waits until it does (and is checked against the incarnation),
		// but for the scheduler's, which brings the list.
		AwaitMembers:      true,
		SchedulerIdentity: van.Identity(message.Scheduler),
		LinkTimeout:       cfg.LinkTimeout,
		PoisonLent:        cfg.PoisonLent,
		KeyCacheBytes:     int64(cfg.KeyCacheMB) << 20,
		KeyCode:           cfg.KeyCode,
		Process:           newIncarnation(),
		Log:               log,
	})
}

// newIncarnation returns a process incarnation (see van.Incarnations): 64
// random bits, in hex.
func newIncarnation() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return ""
	}
	return hex.EncodeToString(b[:])
}

// bindAll reports whether the node binds every address rather than its
// host: the scheduler on Kubernetes.
func bindAll(cfg Config) bool { return cfg.Kubernetes && cfg.Role == message.RoleScheduler }
