package ps

import (
	"context"
	"sync"

	"github.com/gopslite/pslite/kv"
	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/postoffice"
)

// Node ids and groups, as in ps-lite's base.h.
const (
	Scheduler   = message.Scheduler
	ServerGroup = message.ServerGroup
	WorkerGroup = message.WorkerGroup
	AllGroup    = message.AllGroup
	MaxKey      = message.MaxKey
)

var (
	mu   sync.Mutex // guards node and err
	node *postoffice.Postoffice
	err  error
)

// Node returns the process-wide node, creating it from the environment on
// first use.
func Node() (*postoffice.Postoffice, error) {
	mu.Lock()
	defer mu.Unlock()
	if node == nil && err == nil {
		var cfg postoffice.Config
		cfg, err = postoffice.ConfigFromEnv()
		if err == nil {
			node, err = postoffice.New(cfg)
		}
	}
	return node, err
}

// Start joins the job for customerID and waits until every node has joined.
func Start(customerID int) error { return StartContext(context.Background(), customerID, true) }

// StartAsync joins the job for customerID without waiting for the others.
func StartAsync(customerID int) error { return StartContext(context.Background(), customerID, false) }

// StartContext is Start with a context and a choice of barrier.
func StartContext(ctx context.Context, customerID int, doBarrier bool) error {
	p, err := Node()
	if err != nil {
		return err
	}
	return p.Start(ctx, customerID, doBarrier)
}

// Finalize leaves the job for customerID, after a barrier of all nodes when
// doBarrier is set; customer 0's Finalize stops the node.
func Finalize(customerID int, doBarrier bool) error {
	p, err := Node()
	if err != nil {
		return err
	}
	return p.Finalize(context.Background(), customerID, doBarrier)
}

func must() *postoffice.Postoffice {
	p, err := Node()
	if err != nil {
		return nil
	}
	return p
}

// IsWorker reports whether this process is a worker.
func IsWorker() bool { p := must(); return p != nil && p.IsWorker() }

// IsServer reports whether this process is a server.
func IsServer() bool { p := must(); return p != nil && p.IsServer() }

// IsScheduler reports whether this process is the scheduler.
func IsScheduler() bool { p := must(); return p != nil && p.IsScheduler() }

// MyRank returns this node's rank among the nodes of its role.
func MyRank() int {
	if p := must(); p != nil {
		return p.MyRank()
	}
	return 0
}

// NumWorkers returns the number of workers.
func NumWorkers() int {
	if p := must(); p != nil {
		return p.NumWorkers()
	}
	return 0
}

// NumServers returns the number of servers.
func NumServers() int {
	if p := must(); p != nil {
		return p.NumServers()
	}
	return 0
}

// Err returns why the job failed (a node lost and not replaced, the
// scheduler lost), or nil. Wait, Barrier and Finalize return it too.
func Err() error {
	if p := must(); p != nil {
		return p.Err()
	}
	return nil
}

// Failed returns a channel closed when the job fails, for a program blocked
// somewhere else than in Wait, Barrier or Finalize (nil before the node is
// created).
func Failed() <-chan struct{} {
	if p := must(); p != nil {
		return p.Failed()
	}
	return nil
}

// RegisterExitCallback adds a function run when customer 0 finalizes.
func RegisterExitCallback(cb func()) {
	if p := must(); p != nil {
		p.RegisterExitCallback(cb)
	}
}

// Barrier waits until every node of group has reached it.
func Barrier(customerID, group int) error {
	p, err := Node()
	if err != nil {
		return err
	}
	return p.Barrier(context.Background(), customerID, group)
}

// NewKVWorker returns a KV worker on the process-wide node.
func NewKVWorker[V message.Value](appID, customerID int) (*kv.KVWorker[V], error) {
	p, err := Node()
	if err != nil {
		return nil, err
	}
	return kv.NewKVWorker[V](p, appID, customerID)
}

// NewKVServer returns a KV server on the process-wide node.
func NewKVServer[V message.Value](appID int) (*kv.KVServer[V], error) {
	p, err := Node()
	if err != nil {
		return nil, err
	}
	return kv.NewKVServer[V](p, appID)
}

// NewSimpleApp returns a SimpleApp on the process-wide node.
func NewSimpleApp(appID, customerID int) (*kv.SimpleApp, error) {
	p, err := Node()
	if err != nil {
		return nil, err
	}
	return kv.NewSimpleApp(p, appID, customerID)
}

// Checkpoint has every server write a snapshot of its stores now, with
// meta stored next to it (PS_CHECKPOINT_DIR; see
// postoffice.Postoffice.Checkpoint), and returns the snapshot's number.
func Checkpoint(ctx context.Context, meta string) (uint64, error) {
	p, err := Node()
	if err != nil {
		return 0, err
	}
	return p.Checkpoint(ctx, meta)
}

// Restored returns the snapshot the job resumed from when it started, and
// the meta stored with it (0 and "" for a job started afresh).
func Restored() (gen uint64, meta string) {
	p, err := Node()
	if err != nil {
		return 0, ""
	}
	return p.Restored()
}
