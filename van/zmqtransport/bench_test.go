package zmqtransport

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkZMQSendRecv moves one message of a meta and a large frame from
// one transport to another over loopback and back to the benchmark, with
// the frame copied into libzmq or shared with it (zero-copy).
func BenchmarkZMQSendRecv(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		for _, shared := range []bool{false, true} {
			b.Run(fmt.Sprintf("size=%dKiB/shared=%v", size>>10, shared), func(b *testing.B) {
				send, bind := zmqPair(b)
				recv := bind()
				meta, frame := make([]byte, 32), make([]byte, size)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					if _, err := send.Send(context.Background(), 1, [][]byte{meta, frame}, shared); err != nil {
						b.Fatal(err)
					}
					recvWithin(b, recv, 10e9)
				}
			})
		}
	}
}

// BenchmarkZMQSmallMessages moves 1-key push messages (a meta, a key and a
// value) from one transport to another over loopback, 64 at a time: the
// per-message cost of sending and receiving.
func BenchmarkZMQSmallMessages(b *testing.B) {
	send, bind := zmqPair(b)
	recv := bind()
	msg := [][]byte{make([]byte, 40), make([]byte, 8), make([]byte, 4)}
	b.ReportAllocs()
	for i := 0; i < b.N; i += 64 {
		n := min(64, b.N-i)
		for range n {
			if _, err := send.Send(context.Background(), 1, msg, false); err != nil {
				b.Fatal(err)
			}
		}
		for range n {
			recvWithin(b, recv, 10e9)
		}
	}
}
