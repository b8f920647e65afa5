// Package ctr is the code of the CTR trainers lr, fm and mvm
// (examples/lr, examples/fm, examples/mvm), which share everything but
// their model: data reading by shards (LIBSVM, libffm, IDX), feature
// hashing, the workers' census and batches, ASP/BSP/SSP, pipelining, the
// servers' stores (SGD and FTRL, snapshots, replication), evaluation (log
// loss, accuracy, AUC), model files, predictions, plots and the seeded
// synthetic data. Main runs one program's command line.
//
// Logistic regression keeps one weight per feature (or one per class for
// softmax regression) on KV app 0. The factor models keep their weights
// there too and their factor vectors on KV app 1, K keys per feature (see
// Factors).
package ctr
