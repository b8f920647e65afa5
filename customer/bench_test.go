package customer

import (
	"testing"

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
