package message

import (
	"reflect"
	"strings"
	"testing"
)

func TestIDConstants(t *testing.T) {
	if Scheduler != 1 || ServerGroup != 2 || WorkerGroup != 4 || AllGroup != 7 {
		t.Errorf("groups %d %d %d %d, want 1 2 4 7", Scheduler, ServerGroup, WorkerGroup, AllGroup)
	}
	if Empty != 1<<31-1 {
		t.Errorf("Empty = %d, want INT32_MAX", Empty)
	}
	if MaxKey != 1<<64-1 {
		t.Errorf("MaxKey = %d", MaxKey)
	}
}

func TestRanksAndIDs(t *testing.T) {
	for r := 0; r < 100; r++ {
		s, w := ServerRankToID(r), WorkerRankToID(r)
		if s != 8+2*r || w != 9+2*r {
			t.Fatalf("rank %d: server id %d, worker id %d", r, s, w)
		}
		if s%2 != 0 || w%2 != 1 {
			t.Fatalf("rank %d: server id %d must be even, worker id %d odd", r, s, w)
		}
		if IDToRank(s) != r || IDToRank(w) != r {
			t.Fatalf("rank %d: IDToRank(%d) = %d, IDToRank(%d) = %d", r, s, IDToRank(s), w, IDToRank(w))
		}
		if IsGroup(s) || IsGroup(w) {
			t.Fatalf("rank %d: a node id counted as a group", r)
		}
	}
	for id := -3; id <= 7; id++ {
		if IDToRank(id) != 0 {
			t.Errorf("IDToRank(%d) = %d, want 0", id, IDToRank(id))
		}
		if IsGroup(id) != (id >= 1) {
			t.Errorf("IsGroup(%d) = %t", id, IsGroup(id))
		}
	}
}

func TestGroupMembers(t *testing.T) {
	const ns, nw = 2, 3
	w := []int{9, 11, 13} // worker ranks 0..2
	s := []int{8, 10}     // server ranks 0..1
	join := func(parts ...[]int) []int {
		var out []int
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	// Order: workers, then servers, then the scheduler.
	want := map[int][]int{
		1: {1},
		2: s,
		3: join(s, []int{1}),
		4: w,
		5: join(w, []int{1}),
		6: join(w, s),
		7: join(w, s, []int{1}),
	}
	for id := 1; id <= 7; id++ {
		got, err := GroupMembers(id, ns, nw)
		if err != nil {
			t.Fatalf("group %d: %v", id, err)
		}
		if !reflect.DeepEqual(got, want[id]) {
			t.Errorf("GroupMembers(%d) = %v, want %v", id, got, want[id])
		}
	}
	// A single node is its own group.
	for _, id := range join(w, s) {
		got, err := GroupMembers(id, ns, nw)
		if err != nil || !reflect.DeepEqual(got, []int{id}) {
			t.Errorf("GroupMembers(%d) = %v, %v; want [%d]", id, got, err, id)
		}
	}
}

func TestGroupMembersInvalid(t *testing.T) {
	const ns, nw = 2, 3
	for _, id := range []int{0, -1, -7, Empty,
		ServerRankToID(ns), ServerRankToID(ns + 1), // servers beyond the job
		WorkerRankToID(nw), WorkerRankToID(nw + 5), // workers beyond the job
	} {
		got, err := GroupMembers(id, ns, nw)
		if err == nil {
			t.Errorf("GroupMembers(%d) = %v, want an error", id, got)
		} else if !strings.Contains(err.Error(), "id") {
			t.Errorf("GroupMembers(%d): unhelpful error %q", id, err)
		}
	}
	// No servers: server ids are invalid, the server group is empty.
	if _, err := GroupMembers(8, 0, 1); err == nil {
		t.Error("server 8 in a job without servers: want an error")
	}
	if got, err := GroupMembers(ServerGroup, 0, 1); err != nil || len(got) != 0 {
		t.Errorf("server group without servers = %v, %v; want none", got, err)
	}
	if got, err := GroupMembers(AllGroup, 0, 1); err != nil || !reflect.DeepEqual(got, []int{9, 1}) {
		t.Errorf("all group with one worker = %v, %v; want [9 1]", got, err)
	}
}

func TestRoles(t *testing.T) {
	if RoleServer != 0 || RoleWorker != 1 || RoleScheduler != 2 {
		t.Fatal("role numbers are part of the protocol: server 0, worker 1, scheduler 2")
	}
	for _, r := range []Role{RoleServer, RoleWorker, RoleScheduler} {
		got, err := ParseRole(r.String())
		if err != nil || got != r {
			t.Errorf("ParseRole(%q) = %v, %v", r.String(), got, err)
		}
	}
	for _, s := range []string{"", "Worker", "SERVER", "client", " worker"} {
		if _, err := ParseRole(s); err == nil {
			t.Errorf("ParseRole(%q): want an error", s)
		}
	}
	if s := Role(7).String(); s != "role(7)" {
		t.Errorf("Role(7).String() = %q", s)
	}
}

func TestCommands(t *testing.T) {
	want := []string{"EMPTY", "TERMINATE", "ADD_NODE", "BARRIER", "ACK", "HEARTBEAT"}
	for i, s := range want {
		if Command(i).String() != s {
			t.Errorf("Command(%d) = %q, want %q", i, Command(i).String(), s)
		}
	}
	if CmdTerminate != 1 || CmdAddNode != 2 || CmdBarrier != 3 || CmdAck != 4 || CmdHeartbeat != 5 {
		t.Error("command numbers changed")
	}
	if s := Command(9).String(); s != "CMD(9)" {
		t.Errorf("Command(9).String() = %q", s)
	}
}

func TestNewMetaAndStrings(t *testing.T) {
	m := NewMeta()
	if m.Head != Empty || m.AppID != Empty || m.CustomerID != Empty || m.Timestamp != Empty ||
		m.Sender != Empty || m.Recver != Empty || m.IsControl() {
		t.Errorf("NewMeta() = %+v", m)
	}
	msg := New()
	if !reflect.DeepEqual(msg.Meta, m) || msg.Data != nil {
		t.Errorf("New() = %+v", msg)
	}

	n := Node{Role: RoleServer, ID: 8, Hostname: "10.0.0.1", Port: 9000}
	if n.Addr() != "10.0.0.1:9000" {
		t.Errorf("Addr() = %q", n.Addr())
	}
	if s := n.String(); !strings.Contains(s, "role=server") || !strings.Contains(s, "id=8") {
		t.Errorf("Node.String() = %q", s)
	}
	n.ID = Empty
	if s := n.String(); strings.Contains(s, "id=") {
		t.Errorf("Node.String() shows an Empty id: %q", s)
	}

	// String must not panic and must show the key facts.
	cases := []struct {
		m    Meta
		want []string
	}{
		{dataPushMeta, []string{"request=true", "timestamp=3", "push=true", "UINT64", "FLOAT"}},
		{addNodeMeta, []string{"ADD_NODE", "role=worker", "127.0.0.1"}},
		{barrierMeta, []string{"BARRIER", "barrier_group=7"}},
		{ackMeta, []string{"ACK", "msg_sig="}},
		{simpleAppMeta, []string{`body="hi"`, "simple_app=true"}},
		{Meta{}, []string{"Meta"}},
	}
	for _, c := range cases {
		s := c.m.String()
		for _, w := range c.want {
			if !strings.Contains(s, w) {
				t.Errorf("%q does not contain %q", s, w)
			}
		}
	}
	full := &Message{Meta: dataPushMeta, Data: [][]byte{make([]byte, 8), make([]byte, 4)}}
	if s := full.String(); !strings.Contains(s, "data_size=8 data_size=4") {
		t.Errorf("Message.String() = %q", s)
	}
}
