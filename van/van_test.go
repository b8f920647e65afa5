package van

import (
	"testing"

	"github.com/gopslite/pslite/message"
	"github.com/gopslite/pslite/van/control"
)

func TestParseIdentity(t *testing.T) {
	cases := []struct {
		in   string
		want int32
	}{
		{"ps1", 1}, {"ps9", 9}, {"ps12345", 12345}, {"ps", message.Empty}, {"p", message.Empty},
		{"", message.Empty}, {"ps1x", message.Empty}, {"xs1", message.Empty}, {"ps-1", message.Empty},
		{"ps2147483647", message.Empty}, {"ps99999999999", message.Empty}, {"\x00k\x8bEg", message.Empty},
	}
	for _, c := range cases {
		if got := ParseIdentity([]byte(c.in)); got != c.want {
			t.Errorf("ParseIdentity(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	for _, id := range []int{1, 8, 9, 1000} {
		if got := ParseIdentity([]byte(Identity(id))); got != int32(id) {
			t.Errorf("round trip of %d gave %d", id, got)
		}
	}
}

func FuzzParseIdentity(f *testing.F) {
	for _, s := range []string{"ps1", "ps", "ps0009", "ps2147483646", "abc"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id := ParseIdentity(b)
		if id != message.Empty && (id < 0 || Identity(int(id)) != string(b) && b[2] != '0') {
			t.Fatalf("ParseIdentity(%q) = %d", b, id)
		}
	})
}

func TestNextTimestampSkipsEmpty(t *testing.T) {
	v := &Van{}
	v.timestamp.Store(message.Empty - 2)
	for i := 0; i < 4; i++ {
		if ts := v.NextTimestamp(); ts == message.Empty || ts < 0 {
			t.Fatalf("timestamp %d", ts)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	net := NewMemNetwork()
	h := nopHandler{}
	for _, cfg := range []control.Config{
		{Role: message.RoleWorker, NumServers: 0, NumWorkers: 1, SchedulerHost: "h", SchedulerPort: 1},
		{Role: message.RoleWorker, NumServers: 1, NumWorkers: 1, SchedulerHost: "", SchedulerPort: 1},
		{Role: message.RoleWorker, NumServers: 1, NumWorkers: 1, SchedulerHost: "h", SchedulerPort: 70000},
	} {
		if _, err := New(Config{Config: cfg}, net.Transport(), h, nopLogger); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	if _, err := New(Config{Config: control.Config{NumServers: 1, NumWorkers: 1, SchedulerHost: "h", SchedulerPort: 1}}, nil, h, nopLogger); err == nil {
		t.Error("nil transport accepted")
	}
}

func TestStopWithoutStart(t *testing.T) {
	net := NewMemNetwork()
	v, err := New(Config{Config: control.Config{Role: message.RoleWorker, NumServers: 1, NumWorkers: 1, SchedulerHost: "h", SchedulerPort: 1}}, net.Transport(), nopHandler{}, nopLogger)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := v.Stop(); err != nil {
		t.Fatal(err)
	}
}

type nopHandler struct{}

func (nopHandler) HandleData(*message.Message)        {}
func (nopHandler) HandleBarrierDone(*message.Message) {}

func (nopHandler) HandleSendFailure(*message.Message, error) {}
func (nopHandler) HandleNodeDown(int)                        {}
func (nopHandler) HandleEvent(control.Event)                 {}
func (nopHandler) HandleFailure(error)                       {}
