package tests

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/gopslite/pslite/internal/testcluster"
)

// zmtpStranger opens a ZMTP 3.1 connection to port as a DEALER announcing
// identity (none when empty), as anyone on the network can.
func zmtpStranger(t *testing.T, port int32, identity string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := strangerHandshake(c, identity); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second)) // a node that neither reads nor drops fails the test
	return c
}

// Strangers, with no identity or one that names no node of the job, that
// announce a frame of 1 GiB - 1 KiB and then send its bytes, are dropped
// at the header: the server never takes 64 MB from any of them, where it
// used to read and hold every byte (4 such connections of 1,000 MB made a
// server peak at 4 GB). The job's values stay exact.
func TestStrangersCannotMakeANodeHoldLargeFrames(t *testing.T) {
	c := testcluster.New(t, 1, 1, testcluster.Options{Van: "zmtp", Quiet: true})
	serveKV(t, c)
	port := c.Servers[0].Van().MyNode().Port
	chunk := make([]byte, 1<<20)
	for _, ident := range []string{"", "ps99", "xx"} {
		s := zmtpStranger(t, port, ident)
		sent := 0
		_, err := s.Write(binary.BigEndian.AppendUint64([]byte{0x02}, 1<<30-1<<10)) // a long frame's header
		for ; err == nil && sent < 64; sent++ {
			_, err = s.Write(chunk)
		}
		if sent == 64 {
			t.Errorf("a stranger with identity %q sent 64 MB of a 1 GiB frame without being dropped", ident)
		}
	}
	pushExact(t, c, 5)
	c.Finalize(t)
}
