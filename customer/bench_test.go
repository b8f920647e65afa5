package customer

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/gopslite/pslite/message"
)

func BenchmarkTrackerRequestResponse(b *testing.B) {
	t := NewTracker()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		ts, _ := t.NewRequest(2)
		t.AddResponse(ts, 1)
		t.AddResponse(ts, 1)
		if err := t.Wait(ts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkQueuePushPop(b *testing.B) {
	q := NewQueue()
	m := message.New()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		q.Push(m)
		q.Pop()
	}
}

// BenchmarkCustomerAccept hands responses to an idle customer, which
// handles them on the calling goroutine, as the receive loop does.
func BenchmarkCustomerAccept(b *testing.B) {
	c := New(0, 0, func(*message.Message) {}, zerolog.Nop())
	defer c.Stop()
	m := message.New()
	m.Meta.Request = false
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		ts, _ := c.NewRequest(1)
		m.Meta.Timestamp = int32(ts)
		c.Accept(m)
		if err := c.WaitRequest(ts); err != nil {
			b.Fatal(err)
		}
	}
}
