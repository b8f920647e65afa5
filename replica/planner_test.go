package replica

import (
	"fmt"
	"reflect"
	"testing"
)

func TestHome(t *testing.T) {
	if got := fmt.Sprint(Home(2, 3, 1)); got != "[2 0]" {
		t.Fatalf("Home(2, 3, 1) = %s", got)
	}
	if got := fmt.Sprint(HomeRanges(0, 3, 1)); got != "[0 2]" {
		t.Fatalf("HomeRanges(0, 3, 1) = %s", got)
	}
	if got := fmt.Sprint(Home(0, 2, 5)); got != "[0 1]" {
		t.Fatalf("Home(0, 2, 5) = %s (k is capped at n-1)", got)
	}
}

func chains(v *View) string {
	s := ""
	for i, r := range v.Ranges {
		s += fmt.Sprintf("r%d%v", i, r.Chain)
		if len(r.Joining) > 0 {
			s += fmt.Sprintf("+%v", r.Joining)
		}
		if r.Draining {
			s += "d"
		}
		s += " "
	}
	return s
}

func TestPlannerDeathAndReplacement(t *testing.T) {
	p, err := NewPlanner(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := chains(p.View()); got != "r0[0 1] r1[1 2] r2[2 0] " {
		t.Fatalf("initial view %s", got)
	}
	e := p.View().Epoch
	if changed, lost := p.Dead(1); !changed || len(lost) != 0 {
		t.Fatalf("Dead(1) = %t, %v", changed, lost)
	}
	if got := chains(p.View()); got != "r0[0] r1[2] r2[2 0] " {
		t.Fatalf("after server 1 died: %s", got)
	}
	if p.View().Epoch <= e {
		t.Fatal("epoch did not grow")
	}
	if changed, _ := p.Dead(1); changed {
		t.Fatal("a second Dead changed the view")
	}
	if restored := p.Replaced(1); len(restored) != 0 {
		t.Fatalf("restored %v", restored)
	}
	if got := chains(p.View()); got != "r0[0]+[1] r1[2]+[1] r2[2 0] " {
		t.Fatalf("after the replacement: %s", got)
	}
	if p.View().IncOf(1) != 2 {
		t.Fatalf("incarnation %d", p.View().IncOf(1))
	}
	v1 := p.View().Ranges[1].Version
	if p.Synced(0, 1, 1, v1) {
		t.Fatal("a report not from the tail was taken")
	}
	if p.Synced(2, 1, 1, v1-1) {
		t.Fatal("a report about an old version was taken")
	}
	if !p.Synced(2, 1, 1, v1) {
		t.Fatal("Synced refused")
	}
	if got := chains(p.View()); got != "r0[0]+[1] r1[2 1]d r2[2 0] " {
		t.Fatalf("after range 1 was copied: %s", got)
	}
	v1 = p.View().Ranges[1].Version
	if p.Drained(1, 1, v1) {
		t.Fatal("a drain report not from the head was taken")
	}
	if !p.Drained(2, 1, v1) {
		t.Fatal("Drained refused")
	}
	if !p.Synced(0, 1, 0, p.View().Ranges[0].Version) {
		t.Fatal("Synced of range 0 refused")
	}
	if got := chains(p.View()); got != "r0[0 1] r1[1 2] r2[2 0] " {
		t.Fatalf("back home: %s", got)
	}
}

func TestPlannerMiddleDeath(t *testing.T) {
	p, _ := NewPlanner(4, 3)
	p.Dead(1)
	if got := chains(p.View()); got != "r0[0]+[2 3] r1[2 3 0] r2[2 3 0] r3[3 0]+[2] " {
		t.Fatalf("after a middle server died: %s", got)
	}
}

func TestPlannerLostRange(t *testing.T) {
	p, _ := NewPlanner(3, 1)
	p.SetCommitted(4)
	p.Dead(1)
	_, lost := p.Dead(2)
	if fmt.Sprint(lost) != "[1]" || fmt.Sprint(p.Lost()) != "[1]" {
		t.Fatalf("lost %v, Lost %v", lost, p.Lost())
	}
	restored := p.Replaced(2)
	if fmt.Sprint(restored) != "[1]" {
		t.Fatalf("restored %v", restored)
	}
	r1 := p.View().Ranges[1]
	if fmt.Sprint(r1.Chain) != "[2]" || r1.LossGen != 4 || r1.LossVersion != r1.Version {
		t.Fatalf("range 1 after its restore: %+v", r1)
	}
	if len(p.Lost()) != 0 {
		t.Fatalf("still lost: %v", p.Lost())
	}
}

func TestViewCodec(t *testing.T) {
	p, _ := NewPlanner(5, 2)
	p.Dead(3)
	p.Replaced(3)
	p.SetRestored(9, "round=40")
	v := p.View()
	got, err := DecodeView(v.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, v) {
		t.Fatalf("decoded %+v, want %+v", got, v)
	}
	for i := range v.Encode() {
		if _, err := DecodeView(v.Encode()[:i]); err == nil {
			t.Fatalf("a view cut at %d bytes decoded", i)
		}
	}
}

func FuzzDecodeView(f *testing.F) {
	p, _ := NewPlanner(3, 1)
	f.Add(p.View().Encode())
	p.Dead(0)
	p.Replaced(0)
	f.Add(p.View().Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeView(b)
		if err != nil {
			return
		}
		for r := range v.Ranges {
			for _, x := range append(v.Ranges[r].Chain, v.Ranges[r].Joining...) {
				if x < 0 || x >= len(v.Ranges) {
					t.Fatalf("rank %d in a view of %d ranges", x, len(v.Ranges))
				}
			}
		}
		if _, err := DecodeView(v.Encode()); err != nil {
			t.Fatalf("re-encoded view does not decode: %v", err)
		}
	})
}

func FuzzDecodeApplied(f *testing.F) {
	f.Add(EncodeApplied(nil, []Applied{{Origin: Origin{9, 0, 7}, LSN: 3, Gen: 1, Answer: []byte{0}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, _, err := DecodeApplied(b)
		if err != nil {
			return
		}
		if _, _, err := DecodeApplied(EncodeApplied(nil, es)); err != nil {
			t.Fatal(err)
		}
	})
}
