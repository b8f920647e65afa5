package postoffice

import (
	"errors"
	"slices"
	"testing"
)

// Without DMLC_NODE_HOST or DMLC_INTERFACE a node announces the address it
// reaches the scheduler from, not its first interface's, when that is one
// of its own; otherwise the first.
func TestPickHost(t *testing.T) {
	addrs := []string{"10.99.0.1", "192.0.2.2"} // a first interface off the job's network
	route := func(ip string, err error) func() (string, error) {
		return func() (string, error) { return ip, err }
	}
	cases := []struct {
		name  string
		addrs []string
		route func() (string, error)
		want  string
	}{
		{"the route's source", addrs, route("192.0.2.2", nil), "192.0.2.2"},
		{"no route", addrs, route("", errors.New("network is unreachable")), "10.99.0.1"},
		{"a source that is not ours", addrs, route("172.16.0.1", nil), "10.99.0.1"},
	}
	for _, c := range cases {
		got, err := pickHost(c.addrs, c.route)
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	if _, err := pickHost(nil, route("", errors.New("no"))); err == nil {
		t.Error("no address and no route: no error")
	}
}

// routeTo asks the kernel: the source address for one of this host's own
// addresses is one of its addresses.
func TestRouteToOwnAddress(t *testing.T) {
	own := localIPv4s()
	if len(own) == 0 {
		t.Skip("this host has no non-loopback IPv4 address")
	}
	ip, err := routeTo(own[len(own)-1], 9)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(own, ip) {
		t.Errorf("route to %s leaves from %s, not one of %v", own[len(own)-1], ip, own)
	}
}
