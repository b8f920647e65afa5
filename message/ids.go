package message

import "fmt"

// Node ids and groups. A group id is the sum of the groups it contains, so
// 1..7 are all valid groups; ids from 8 on name single nodes.
const (
	// Scheduler is the scheduler's node id and its one-member group.
	Scheduler = 1
	// ServerGroup addresses every server.
	ServerGroup = 2
	// WorkerGroup addresses every worker.
	WorkerGroup = 4
	// AllGroup addresses every node: scheduler, servers and workers.
	AllGroup = Scheduler + ServerGroup + WorkerGroup
)

// MaxKey is the largest key.
const MaxKey = ^uint64(0)

// ServerRankToID returns the id of the server of the given rank.
func ServerRankToID(rank int) int { return rank*2 + 8 }

// WorkerRankToID returns the id of the worker of the given rank.
func WorkerRankToID(rank int) int { return rank*2 + 9 }

// IDToRank returns the rank of a server or worker id (0 for groups).
func IDToRank(id int) int { return max((id-8)/2, 0) }

// IsServerID reports whether id names one server: an even id from 8 on.
func IsServerID(id int) bool { return id >= 8 && id%2 == 0 }

// IsWorkerID reports whether id names one worker: an odd id from 9 on.
func IsWorkerID(id int) bool { return id >= 9 && id%2 == 1 }

// RoleOfID returns the role of the node id names; ok is false for groups,
// for ids that name no node, and for Empty.
func RoleOfID(id int) (role Role, ok bool) {
	switch {
	case id == Scheduler:
		return RoleScheduler, true
	case id == Empty || id < 8:
		return 0, false
	case IsServerID(id):
		return RoleServer, true
	}
	return RoleWorker, true
}

// DescribeID names node id for people: "scheduler", "server 1 (node 10)",
// "worker 0 (node 9)"; a group or other id reads "node <id>".
func DescribeID(id int) string {
	role, ok := RoleOfID(id)
	switch {
	case !ok:
		return fmt.Sprintf("node %d", id)
	case role == RoleScheduler:
		return "scheduler (node 1)"
	}
	return fmt.Sprintf("%s %d (node %d)", role, IDToRank(id), id)
}

// InGroup reports whether nodes of role belong to group (1..7).
func InGroup(role Role, group int) bool {
	switch role {
	case RoleScheduler:
		return group&Scheduler != 0
	case RoleServer:
		return group&ServerGroup != 0
	}
	return group&WorkerGroup != 0
}

// IsMember reports whether id names a node of a job with the given numbers
// of servers and workers: the scheduler, a server rank below numServers or
// a worker rank below numWorkers.
func IsMember(id, numServers, numWorkers int) bool {
	switch {
	case id == Scheduler:
		return true
	case IsServerID(id):
		return IDToRank(id) < numServers
	case IsWorkerID(id):
		return IDToRank(id) < numWorkers
	}
	return false
}

// IsGroup reports whether id names a group (1..7) rather than one node.
func IsGroup(id int) bool { return id >= 1 && id <= 7 }

// GroupMembers returns the node ids that id addresses in a job with the given
// numbers of servers and workers, in C++ ps-lite's order: workers, servers,
// then the scheduler. A single node id returns itself. It returns an error for
// ids that name nothing in the job.
func GroupMembers(id, numServers, numWorkers int) ([]int, error) {
	switch {
	case id <= 0:
		return nil, fmt.Errorf("invalid node or group id %d", id)
	case IsGroup(id):
		ids := make([]int, 0, max(numWorkers, 0)+max(numServers, 0)+1)
		if id&WorkerGroup != 0 {
			for r := 0; r < numWorkers; r++ {
				ids = append(ids, WorkerRankToID(r))
			}
		}
		if id&ServerGroup != 0 {
			for r := 0; r < numServers; r++ {
				ids = append(ids, ServerRankToID(r))
			}
		}
		if id&Scheduler != 0 {
			ids = append(ids, Scheduler)
		}
		return ids, nil
	case IsServerID(id) && IDToRank(id) < numServers:
		return []int{id}, nil
	case IsWorkerID(id) && IDToRank(id) < numWorkers:
		return []int{id}, nil
	}
	return nil, fmt.Errorf("node id %d is not in a job of %d servers and %d workers", id, numServers, numWorkers)
}
