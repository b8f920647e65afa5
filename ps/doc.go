// Package ps is the convenience facade of ps-lite's ps.h: free functions over
// one process-wide node configured from the environment (DMLC_ROLE,
// DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER, DMLC_NUM_WORKER and
// the optional DMLC_* and PS_* variables).
//
//	if err := ps.Start(0); err != nil { ... }
//	if ps.IsWorker() {
//		w, _ := ps.NewKVWorker[float32](0, 0)
//		...
//	}
//	ps.Finalize(0, true)
//
// Programs that need several nodes in one process, or configuration from
// elsewhere, use package postoffice directly.
package ps
