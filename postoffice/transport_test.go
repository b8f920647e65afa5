//go:build cgo

package postoffice

import (
	"errors"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/van"
	"github.com/gopslite/pslite/van/zmqtransport"
	"github.com/gopslite/pslite/van/zmtptransport"
)

// The transport a Config gets: ZMTP by default, libzmq when asked or when
// CURVE keys are set without a van type (a Config made in code, not from
// the environment, included), and an error for CURVE on ZMTP or an
// unknown van type.
func TestNewTransportFollowsVanTypeAndCurve(t *testing.T) {
	keys, err := van.NewCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  Config
		want string // "zmtp", "zmq" or "error"
	}{
		{"default", Config{}, "zmtp"},
		{"zmtp", Config{VanType: "zmtp"}, "zmtp"},
		{"zmq", Config{VanType: "zmq"}, "zmq"},
		{"CURVE keys, no van type", Config{Curve: &keys}, "zmq"},
		{"CURVE keys on zmq", Config{VanType: "zmq", Curve: &keys}, "zmq"},
		{"CURVE keys on zmtp", Config{VanType: "zmtp", Curve: &keys}, "error"},
		{"unknown van type", Config{VanType: "ibverbs"}, "error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, err := newTransport(c.cfg, zerolog.Nop())
			got := "error"
			switch tr.(type) {
			case *zmtptransport.Transport:
				got = "zmtp"
			case *zmqtransport.Transport:
				got = "zmq"
			}
			if tr != nil {
				defer tr.Close()
			}
			if got != c.want {
				t.Fatalf("got %s (error %v), want %s", got, err, c.want)
			}
			if c.want == "error" && !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v, want one wrapping ErrConfig", err)
			}
		})
	}
}
