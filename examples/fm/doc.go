// Command fm trains a factorization machine (Rendle, 2010) for binary
// classification on a ps-lite job, next to lr and mvm, which share its
// code (examples/internal/ctr) and its command line: the weights w live on
// KV app 0, one key per feature, and the factor vectors v on app 1, K keys
// per feature (-factors=K), as xflow keeps them. The servers update both
// with SGD or FTRL (-opt) and start a factor never pushed at a seeded
// normal draw (-init-std), the same on every server. Data is LIBSVM or
// libffm text (the fields are read and not needed).
//
//	go build -o build/ ./examples/fm
//	build/fm -mode=synth -fields=20 -out=build/ctr.train -test-out=build/ctr.test
//	scripts/local.sh 2 2 build/fm -train=build/ctr.train -test=build/ctr.test \
//	    -opt=ftrl -alpha=0.05 -factors=8 -epochs=3
//
// The last line reports "test auc". See examples/lr/README.md for the
// flags, the consistency models, checkpoints and replication.
package main
