// Package control is the control protocol of a ps-lite node as a state
// machine: registration with the scheduler and assignment of node ids
// (ADD_NODE), barriers (BARRIER), liveness (HEARTBEAT and connection
// events), the replacement of dead nodes, and the decision that a job has
// failed. It also holds the bookkeeping of acknowledgements and resends
// (PS_RESEND).
//
// A Core does no I/O, starts no goroutines and reads no clock: every input
// carries the current time, and every call returns what the node must do as
// a list of Outputs (messages to send, peers to connect to or drop, events
// to report), in order. The van drives it: it feeds it the control messages
// it receives, the connection events its transport reports and a tick now
// and then, and carries out the outputs. So the whole protocol, faults
// included, is tested in one process with no sockets and no sleeps, by
// delivering messages between Cores and moving a fake time forward (see
// core_test.go), the way etcd's raft is tested.
//
// # Failure model
//
// The scheduler decides the fate of the job. A server or worker is dead
// when its connection has been closed for Config.ConnGrace (its process
// exited), or, with heartbeats on, when nothing was heard from it for
// Config.HeartbeatTimeout (a stopped process, a cut link). A node of the
// same role that registers once the job is full takes a dead node's id and
// the job goes on; when no replacement has come Config.RecoveryWait after
// the death, the job has failed: the scheduler tells every node why (an
// abort notice) and reports the failure itself. A server or worker that
// loses the scheduler (connection closed for ConnGrace, or no heartbeat
// reply for HeartbeatTimeout) fails on its own. Once a node has passed its
// final barrier (Finalizing, then the release) or left (Leave), faults no
// longer matter to it.
//
// Notices travel in the body of HEARTBEAT messages, which C++ ps-lite
// accepts and ignores (it reads only the nodes a heartbeat lists), so mixed
// jobs keep working.
package control
