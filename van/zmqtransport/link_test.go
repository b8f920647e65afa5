package zmqtransport

import (
	"sync"
	"testing"
	"time"

	"github.com/gopslite/pslite/van"
)

func TestHeartbeatIntervalWellBelowTTL(t *testing.T) {
	for _, d := range []time.Duration{100 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 180 * time.Second} {
		ivl, timeout, ttl := heartbeats(d)
		if timeout != d || ttl != d || ivl <= 0 || ivl > ttl/10 {
			t.Errorf("link timeout %v: ping every %v, timeout %v, TTL %v; want pings at least ten per TTL, and both %v", d, ivl, timeout, ttl, d)
		}
	}
}

// Idle connections with a short PS_LINK_TIMEOUT stay up: the ZMTP pings
// keep them alive on both ends (with the pings only as often as their TTL,
// libzmq dropped one every few seconds).
func TestIdleConnectionsOutliveLinkTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("watches idle connections for seconds")
	}
	const link = time.Second
	srv, err := New(Options{LinkTimeout: link})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	port, err := srv.Bind("127.0.0.1", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := New(Options{LinkTimeout: link})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	const conns = 8
	var mu sync.Mutex
	up, downs := map[int]bool{}, 0
	allUp := make(chan struct{})
	cli.SetConnectionHandler(func(id int, isUp bool) {
		mu.Lock()
		defer mu.Unlock()
		if !isUp {
			downs++
			return
		}
		if !up[id] {
			up[id] = true
			if len(up) == conns {
				close(allUp)
			}
		}
	})
	for id := 1; id <= conns; id++ {
		if err := cli.Connect(id, "127.0.0.1", port, van.Identity(100+id)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-allUp:
	case <-time.After(10 * time.Second):
		t.Fatal("the connections did not come up")
	}
	time.Sleep(6 * link) // idle: nothing but the transport's own pings
	mu.Lock()
	defer mu.Unlock()
	if downs > 0 {
		t.Fatalf("%d idle connections dropped within %v with a link timeout of %v", downs, 6*link, link)
	}
}
